"""The gate on a small version runs in process (pandas, DuckDB), without a Spark job, and judges
exactly as the Spark path does (issue #24: on a few thousand rows Spark's one job per metric was
seconds of fixed cost).

Each expectation's passing and failing cases run on both engines in
tests/test_quality_expectations.py; here a real built version goes through
``validate_version`` both ways: in process (the default for its size) and with Spark
(``$TOPIC_LINEAGE_GATE_IN_PROCESS_MB=0``), side by side.
"""

from __future__ import annotations

import pytest
from scd_support import snap, tid, topic

from topic_lineage import pipeline, store
from topic_lineage import spark as tl_spark
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.quality import gate
from topic_lineage.quality.suites import SNAPSHOT_IDS_NOT_SHARED

X, Y = tid(1), tid(2)


def _gate_without_dates(version: str) -> dict:
    """The verdict the gate recorded in the version's manifest, without its instant."""
    return {key: value for key, value in wh.read_manifest(version)["gate"].items() if key != "at"}


def _outcomes(result: gate.GateResult) -> list:
    return sorted((o.table, o.name, o.success, o.unexpected_count, o.severity,
                   sorted(repr(sorted(row.items())) for row in o.rows)) for o in result.outcomes)


@pytest.mark.spark
@pytest.mark.slow  # each expectation's verdicts on both engines: tests/test_quality_expectations.py
def test_a_small_version_is_validated_without_a_spark_job_and_judged_as_with_spark(
        spark, tl_home, monkeypatch):
    """A built version in which two names carry one topic ID (a critical failure, with
    offending rows): validated in process it runs no Spark job; validated with Spark it runs
    some; both give the same verdict, outcomes, offending rows, report and recorded verdict."""
    monkeypatch.delenv(gate.IN_PROCESS_ENV, raising=False)
    monkeypatch.delenv(tl_spark.SMALL_INPUT_ENV, raising=False)
    store.save_all([snap(0, topic("orders", X), topic("payments", Y)),
                    snap(1, topic("orders", X), topic("orders-copy", X), topic("payments", Y))],
                   "import:jsonl")
    version = pipeline.run_build(spark, validate=False, publish=False).version
    tracker = spark.sparkContext.statusTracker()

    def validated(group: str) -> tuple[gate.GateResult, int]:
        spark.sparkContext.setJobGroup(group, group)
        try:
            result = gate.validate_version(spark, version, max_age=None, now=None)
        finally:
            spark.sparkContext.setJobGroup("", "")
        return result, len(tracker.getJobIdsForGroup(group))

    in_process, in_process_jobs = validated("gate-in-process")
    recorded = _gate_without_dates(version)
    monkeypatch.setenv(gate.IN_PROCESS_ENV, "0")  # the Spark path, as for a larger version
    with_spark, spark_jobs = validated("gate-spark")

    assert in_process_jobs == 0
    assert spark_jobs > 0  # the counting sees the Spark path's jobs
    assert not in_process.success and in_process.failed_names == [SNAPSHOT_IDS_NOT_SHARED]
    assert in_process.success == with_spark.success
    assert in_process.evaluated == with_spark.evaluated > 20
    assert _outcomes(in_process) == _outcomes(with_spark)
    assert in_process.report() == with_spark.report()
    assert "topic_name=orders, orders-copy" in in_process.report()
    assert recorded == _gate_without_dates(version)
    assert set(in_process.detail_pages) == set(with_spark.detail_pages) == set(t.TABLES)


def test_in_process_limit_is_read_from_the_environment_and_capped_by_the_small_input_limit(
        monkeypatch):
    """Default 4 MiB; ``0`` (or ``$TOPIC_LINEAGE_SMALL_INPUT_MB=0``) validates every version
    with Spark; a malformed value is an error naming the variable."""
    from topic_lineage.errors import TopicLineageError

    monkeypatch.delenv(gate.IN_PROCESS_ENV, raising=False)
    monkeypatch.delenv(tl_spark.SMALL_INPUT_ENV, raising=False)
    assert gate.in_process_limit() == 4 * 1024 * 1024
    assert gate.validates_in_process(4 * 1024 * 1024)
    assert not gate.validates_in_process(4 * 1024 * 1024 + 1)
    monkeypatch.setenv(gate.IN_PROCESS_ENV, "0")
    assert not gate.validates_in_process(0)
    monkeypatch.setenv(gate.IN_PROCESS_ENV, "100")
    assert gate.in_process_limit() == tl_spark.small_input_limit() == 64 * 1024 * 1024
    monkeypatch.setenv(tl_spark.SMALL_INPUT_ENV, "0")
    assert not gate.validates_in_process(0)
    monkeypatch.setenv(gate.IN_PROCESS_ENV, "lots")
    with pytest.raises(TopicLineageError, match=r"TOPIC_LINEAGE_GATE_IN_PROCESS_MB 'lots'"):
        gate.in_process_limit()


@pytest.mark.spark
@pytest.mark.slow  # the gate's speed on a real version (its verdicts: tests/test_quality_expectations.py)
def test_validating_a_small_version_starts_no_spark(spark, tl_home, monkeypatch):
    """`topic-lineage validate` and the Airflow validate task body on a small version start no
    JVM (JAVA_HOME points nowhere, no Spark Connect server) and record a passing verdict; with
    the in-process gate off, the same command needs its Spark and fails without Java."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from topic_lineage.local import spark_server

    script = Path(sys.executable).with_name("topic-lineage")
    store.save_all([snap(0, topic("orders", X), topic("payments", Y))], "import:jsonl")
    version = pipeline.run_build(spark, validate=False, publish=False).version
    env = {**os.environ, t.HOME_ENV: str(tl_home), "JAVA_HOME": str(tl_home / "no-java"),
           "TOPIC_LINEAGE_MAX_AGE": "off"}
    for name in (gate.IN_PROCESS_ENV, tl_spark.SMALL_INPUT_ENV, spark_server.REMOTE_ENV):
        env.pop(name, None)

    def run(*command: str, **extra) -> subprocess.CompletedProcess:
        return subprocess.run(command, env={**env, **extra}, capture_output=True, text=True,
                              timeout=300, check=False)

    done = run(str(script), "-v", "validate", "--version", version)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PASSED" in done.stdout and wh.read_manifest(version)["gate"]["passed"]
    # -v logs topic-lineage's progress only; -vv every library's too (GX: hundreds of lines)
    logged = [line for line in done.stderr.splitlines() if " INFO " in line]
    assert any("INFO topic_lineage.quality.gate: validated version" in line for line in logged), done.stderr
    assert all(" INFO topic_lineage." in line for line in logged), done.stderr[-3000:]
    everything = run(str(script), "-vv", "validate", "--version", version)
    assert everything.returncode == 0 and " INFO great_expectations." in everything.stderr, everything.stderr[-3000:]
    task = run(sys.executable, "-c",
               f"from topic_lineage import airflow as at; print(at.validate_version({version!r}))")
    assert task.returncode == 0, task.stderr[-3000:]
    assert version in task.stdout
    with_spark = run(str(script), "validate", "--version", version, **{gate.IN_PROCESS_ENV: "0"})
    assert with_spark.returncode != 0


VALIDATE_WITH_GX_IMPORTED = """
import importlib, json, sys
from topic_lineage.quality import gx_import
if sys.argv[2] == "plain":  # every module imported as it comes, before GX
    for name in (*gx_import.GX_UNUSED_MODULES, *gx_import.GX_DEFERRED_MODULES, "great_expectations"):
        importlib.import_module(name)
skipped = gx_import.import_gx()
from topic_lineage.quality import gate
result = gate.validate_version(None, sys.argv[1], max_age=None, now=None)
loaded = [name for name in gx_import.GX_UNUSED_MODULES if sys.modules.get(name) is not None]
still_deferred = [name for name in gx_import.GX_DEFERRED_MODULES
                  if isinstance(sys.modules[name], gx_import.DeferredModule)]
importable = [importlib.import_module(name).__name__ for name in gx_import.GX_UNUSED_MODULES]
from scipy import stats  # the deferred stand-in, imported for real on first use
import altair
used = [stats.entropy([1, 3], [1, 3]), altair.Chart.__name__]
print(json.dumps({
    **skipped, "loaded": loaded, "still_deferred": still_deferred, "importable_after": importable,
    "used": used, "real_after_use": [type(sys.modules[name]).__name__
                                     for name in gx_import.GX_DEFERRED_MODULES],
    "again": gx_import.import_gx(),
    "success": result.success, "evaluated": result.evaluated, "report": result.report(),
    "outcomes": repr(sorted((o.table, o.name, o.success, o.unexpected_count, o.severity)
                            for o in result.outcomes)),
}))
"""


@pytest.mark.spark
@pytest.mark.slow  # an import-time optimisation, two GX processes: the whole suite
def test_the_gate_judges_the_same_without_the_modules_gx_loads_for_nothing(spark, tl_home, monkeypatch):
    """Our processes import Great Expectations without the modules it loads for what the gate
    never runs (``quality.gx_import.import_gx``, issue #24): sqlalchemy and pyspark.ml hidden
    while GX imports (GX treats both as optional), scipy.stats and altair deferred to their
    first use. A version with a critical failure is validated in process in two processes:
    one imports GX so, the other imports all four and GX as they come first. The gate gives the
    same verdict, outcomes and report in both; in the first it runs none of the four, the hidden
    ones can be imported again afterwards (an in-process caller that imports Airflow later, a
    test worker, still can), and the deferred ones work when used."""
    import importlib.util
    import json
    import os
    import subprocess
    import sys

    from topic_lineage.quality import gx_import

    monkeypatch.delenv(gate.IN_PROCESS_ENV, raising=False)
    monkeypatch.delenv(tl_spark.SMALL_INPUT_ENV, raising=False)
    assert all(importlib.util.find_spec(name) for name in gx_import.GX_UNUSED_MODULES)
    store.save_all([snap(0, topic("orders", X), topic("payments", Y)),
                    snap(1, topic("orders", X), topic("orders-copy", X), topic("payments", Y))],
                   "import:jsonl")
    version = pipeline.run_build(spark, validate=False, publish=False).version
    env = {**os.environ, t.HOME_ENV: str(tl_home), "JAVA_HOME": str(tl_home / "no-java")}

    def validate(mode: str) -> dict:
        done = subprocess.run([sys.executable, "-c", VALIDATE_WITH_GX_IMPORTED, version, mode],
                              env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    seen, plain = validate("lean"), validate("plain")
    assert seen["hidden"] == list(gx_import.GX_UNUSED_MODULES) and seen["loaded"] == []
    assert seen["importable_after"] == list(gx_import.GX_UNUSED_MODULES)
    assert seen["deferred"] == seen["still_deferred"] == list(gx_import.GX_DEFERRED_MODULES)
    assert seen["used"] == [0.0, "Chart"]
    assert seen["real_after_use"] == ["module", "module"]
    assert seen["again"] == {"hidden": [], "deferred": []}  # GX was loaded: nothing to skip
    assert plain["hidden"] == plain["deferred"] == plain["still_deferred"] == []
    assert plain["loaded"] == list(gx_import.GX_UNUSED_MODULES)
    assert plain["success"] is seen["success"] is False
    assert seen["evaluated"] == plain["evaluated"] > 20
    assert seen["report"] == plain["report"]
    assert seen["outcomes"] == plain["outcomes"]


BACKGROUND_IMPORT = """
import json, sys, threading
from topic_lineage import pipeline
pipeline.import_in_background(gate=sys.argv[1] == "gate")
for thread in threading.enumerate():
    if thread.name == "import-in-background":
        thread.join()
names = ("pyiceberg.table", "pyiceberg.io.pyarrow", "great_expectations", "sqlalchemy")
print(json.dumps({**{name: name in sys.modules for name in names}, "switch": sys.getswitchinterval()}))
"""


@pytest.mark.parametrize("kind", ["gate", "no-gate"])
def test_a_build_imports_what_it_needs_later_in_the_background(kind):
    """What a build starts importing while its JVM starts: pyiceberg's table and file IO always
    (staging), Great Expectations only for a build that validates (4-6 s of imports a build with
    --no-validate or Airflow's build task never needs), never sqlalchemy (pyiceberg's SQL catalog
    would import it, and GX then its SQL data sources); the interpreter's switch interval is
    restored when it is done."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", BACKGROUND_IMPORT, kind], capture_output=True, text=True,
                          timeout=120, check=True)
    loaded = json.loads(done.stdout)
    assert loaded == {"pyiceberg.table": True, "pyiceberg.io.pyarrow": True, "great_expectations": kind == "gate",
                      "sqlalchemy": False, "switch": sys.getswitchinterval()}, loaded
