"""The SparkSession factory: the driver heap and the environment a process's JVM starts with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# how the driver's JVM starts (a deployment, not a rule): the whole suite
pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PROBE = (
    "import json, sys\nimport py4j.java_gateway as gateway\n"
    "from pyspark.sql import functions as F\n"
    "from topic_lineage.spark import get_spark\n"
    "s = get_spark('probe', master='local[1]', quick_jit=sys.argv[1] == 'quick')\n"
    "jvm = s.sparkContext._jvm\n"
    "heap = jvm.java.lang.Runtime.getRuntime().maxMemory()\n"
    "arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()"
    ".getInputArguments())\n"
    "df = s.range(3)\n"
    "df.select(F.col('id'))\n"  # the first call reads the setting, once per process
    "calls = []\n"
    "call = gateway.JavaMember.__call__\n"
    "gateway.JavaMember.__call__ = lambda self, *a: calls.append(self.name) or call(self, *a)\n"
    "df.select((F.col('id') + F.lit(1)).alias('n'))\n"
    "gateway.JavaMember.__call__ = call\n"
    "print(json.dumps({'heap': heap, 'arguments': [str(a) for a in arguments], 'calls': calls}))\n"
    "s.stop()\n"
)


@pytest.mark.parametrize("mode", ["quick", "default"])
def test_the_driver_jvm_as_get_spark_starts_it(mode):
    """What the first get_spark() of a process (a command or an in-process Airflow task, not
    only the build) gives its driver JVM, one JVM per mode:

    - the heap comes from the environment: a JVM keeps the heap it started with, so 3g asked is
      about 3 GiB given;
    - ``quick_jit=True`` starts it with C1 only (issue #24); without it the JVM keeps HotSpot's
      optimizing compiler (a long-lived server or a test session); UTC either way;
    - Column functions do not report their Python call site to the JVM (five round trips per
      call, issue #24): building an expression and a select is a few calls, none of them
      PySparkCurrentOrigin's set or clear."""
    from topic_lineage.spark import QUICK_JIT_OPTION

    env = dict(os.environ, TOPIC_LINEAGE_DRIVER_MEMORY="3g")
    done = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert 2.5 * 2**30 < seen["heap"] <= 3 * 2**30
    arguments = " ".join(seen["arguments"])
    assert "-Duser.timezone=UTC" in arguments
    assert (QUICK_JIT_OPTION in arguments) == (mode == "quick")
    assert "set" not in seen["calls"] and "clear" not in seen["calls"]
    assert len(seen["calls"]) <= 8, seen["calls"]


def test_quick_jit_is_for_small_stores_and_follows_the_small_input_switch(monkeypatch):
    """Small stores get the quick JIT, large ones and ``TOPIC_LINEAGE_SMALL_INPUT_MB=0`` do not;
    a smaller small-input limit lowers its limit too."""
    from topic_lineage.spark import QUICK_JIT_MAX_BYTES, SMALL_INPUT_ENV, quick_jit_for

    monkeypatch.delenv(SMALL_INPUT_ENV, raising=False)
    assert quick_jit_for(0) and quick_jit_for(QUICK_JIT_MAX_BYTES)
    assert not quick_jit_for(QUICK_JIT_MAX_BYTES + 1)
    monkeypatch.setenv(SMALL_INPUT_ENV, "0")
    assert not quick_jit_for(0)
    monkeypatch.setenv(SMALL_INPUT_ENV, "1")
    assert quick_jit_for(2**20) and not quick_jit_for(2**20 + 1)


def test_a_query_gets_the_quick_jit_over_a_version_of_few_rows(tl_home, monkeypatch):
    """A one-off ``query --engine spark`` starts its JVM with the quick JIT when the version it
    reads (the published one, or the one named) counts at most QUICK_JIT_MAX_ROWS rows in its
    manifest, all tables together; not over more rows, nor over a version whose manifest counts
    none (built before they were recorded) or that does not exist, nor with the small-input
    settings off. (tests/test_scd_publish.py reads the option off a query's own JVM.)"""
    from topic_lineage import warehouse as wh
    from topic_lineage.spark import QUICK_JIT_MAX_ROWS, SMALL_INPUT_ENV, quick_jit_for_version

    monkeypatch.delenv(SMALL_INPUT_ENV, raising=False)
    for name, counts in (("small", {"topic_snapshots": QUICK_JIT_MAX_ROWS - 10, "snapshot_runs": 10}),
                         ("large", {"topic_snapshots": QUICK_JIT_MAX_ROWS, "snapshot_runs": 1}),
                         ("uncounted", None)):
        manifest = {"version": name, "status": wh.BUILT, "history": []}
        wh.write_manifest(name, manifest if counts is None else {**manifest, "row_counts": counts})
    assert quick_jit_for_version("small")
    assert not quick_jit_for_version("large")
    assert not quick_jit_for_version("uncounted")
    assert not quick_jit_for_version("missing")
    assert not quick_jit_for_version(None)  # nothing published
    monkeypatch.setenv(SMALL_INPUT_ENV, "0")
    assert not quick_jit_for_version("small")


@pytest.mark.slow  # a Spark build for one JVM option: not in the fast tier
def test_the_build_command_has_no_quick_jit_with_the_small_input_settings_off(tmp_path):
    """`topic-lineage build` over a small store with the small-input settings off starts its
    JVM with both compilers (read from the build's Spark event log). With them on (the default)
    it has the quick JIT: tests/test_jvm_archive.py reads that off its CLI build."""
    from tests.benchmarks.bench_small import driver_java_options, event_log_submit_args
    from topic_lineage.spark import QUICK_JIT_OPTION, SMALL_INPUT_ENV

    home = tmp_path / "home"
    line = {"cluster_id": "MkU3OEVBNTcwNTJENDM2Qg", "cluster_alias": "prod-eu",
            "captured_at": "2026-11-01T00:00:00Z", "complete": True,
            "topics": [{"name": "orders", "topic_id": "b8tRS7h4TJ2Vt43Dp85v2A", "partition_count": 3,
                        "replication_factor": 3, "is_internal": False, "error": None}]}
    (tmp_path / "snapshots.jsonl").write_text(json.dumps(line) + "\n")
    base = {**os.environ, "TOPIC_LINEAGE_HOME": str(home), "TOPIC_LINEAGE_SPARK_MASTER": "local[2]"}
    command = [sys.executable, "-m", "topic_lineage.cli"]
    done = subprocess.run([*command, "import", str(tmp_path / "snapshots.jsonl")], env=base,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]

    events = tmp_path / "events"
    events.mkdir()
    done = subprocess.run([*command, "build", "--full-refresh", "--no-validate", "--no-publish"],
                          env={**base, SMALL_INPUT_ENV: "0", "PYSPARK_SUBMIT_ARGS": event_log_submit_args(events)},
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert QUICK_JIT_OPTION not in driver_java_options(events)
