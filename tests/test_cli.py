"""The real `topic-lineage` console script, run as a user would (subprocess, exit codes, stderr)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topic_lineage.local.broker import free_port

SCRIPT = Path(sys.executable).with_name("topic-lineage")
ROOT = Path(__file__).resolve().parents[1]
GOOD = {
    "cluster_id": "c1", "cluster_alias": "prod", "captured_at": "2026-11-01T00:00:00Z",
    "complete": True,
    "topics": [{"name": "orders", "topic_id": "b8tRS7h4TJ2Vt43Dp85v2A", "partition_count": 3,
                "replication_factor": 3, "is_internal": False, "error": None}],
}


def run(tl_home, *args, timeout=120, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(tl_home), **(env or {})}
    return subprocess.run(
        [str(SCRIPT), *args], check=False, env=env, capture_output=True, text=True, timeout=timeout
    )


def stored_files(tl_home) -> list[Path]:
    return sorted((tl_home / "snapshots").rglob("*.parquet")) if (tl_home / "snapshots").exists() else []


def assert_one_error_line(result, *fragments):
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_console_script_is_installed():
    assert SCRIPT.is_file() and os.access(SCRIPT, os.X_OK)


def test_bad_file_is_one_error_line_and_stores_nothing(tl_home, tmp_path):
    path = tmp_path / "snaps.jsonl"
    naive = {**GOOD, "captured_at": "2026-11-02T00:00:00"}
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(naive) + "\n")
    result = run(tl_home, "import", str(path))
    assert_one_error_line(result, f"{path}:2", "captured_at", "time zone")
    assert stored_files(tl_home) == []


@pytest.mark.parametrize("threshold", [("--hold-ratio", "1"), ("--hold-ratio", "-0.1"),
                                       ("--hold-min", "0")], ids=lambda t: " ".join(t))
def test_an_out_of_range_hold_threshold_is_one_error_line(tl_home, threshold):
    """R3's thresholds out of range ([0, 1) and at least 1) are refused before a JVM starts."""
    result = run(tl_home, "build", *threshold)
    assert_one_error_line(result, "invalid mass-deletion hold threshold", "--hold-ratio in [0, 1)")


def test_good_file_imports_and_lists(tl_home, tmp_path):
    path = tmp_path / "snaps.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    result = run(tl_home, "import", str(path))
    assert result.returncode == 0 and "1 snapshot(s) stored" in result.stdout
    again = run(tl_home, "import", str(path))
    assert again.returncode == 0 and "0 snapshot(s) stored, 1 already present" in again.stdout
    listing = run(tl_home, "snapshots", "--format", "json")
    [row] = json.loads(listing.stdout)
    assert row["cluster_id"] == "c1" and row["source"] == "import:jsonl"


@pytest.mark.broker
def test_down_broker_is_one_clear_line_and_stores_nothing(tl_home):
    port = free_port()
    started = time.monotonic()
    result = run(tl_home, "snapshot", "--cluster", "prod", "--bootstrap-servers",
                 f"127.0.0.1:{port}", "--timeout", "10")
    assert time.monotonic() - started < 10 + 10  # interpreter start-up included
    assert_one_error_line(result, "cannot capture cluster 'prod'", f"127.0.0.1:{port}",
                          "nothing was stored")
    assert "%3|" not in result.stderr  # no raw librdkafka log lines
    assert stored_files(tl_home) == []


@pytest.mark.broker
def test_snapshot_then_listing(broker, tl_home):
    broker.create_topics(["orders", ("payments", 2)])
    count = len(broker.topic_names())  # and __consumer_offsets once an earlier test committed
    result = run(tl_home, "snapshot", "--cluster", "local", "--bootstrap-servers",
                 broker.bootstrap_servers)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    line = result.stdout.strip()
    assert line.startswith(f"cluster {broker.cluster_id} (local) at ")
    # consumer groups are captured by default (none here: the fixture deleted them)
    assert re.search(rf": {count} topic\(s\), 0 with errors, complete; [0-9]+ consumer group\(s\), "
                     r"0 with errors, complete; stored ", line), line
    [path] = stored_files(tl_home)
    assert line.endswith(str(path))

    listing = run(tl_home, "snapshots", "--format", "json")
    [row] = json.loads(listing.stdout)
    assert (row["cluster_alias"], row["topic_count"], row["complete"], row["source"]) == (
        "local", count, True, "live")


@pytest.mark.broker
def test_snapshot_reads_a_config_file_and_hides_its_secrets(broker, tl_home, tmp_path):
    secret = "s3cr3t-Value-42"
    props = tmp_path / "client.properties"
    props.write_text(
        f"# client settings\nbootstrap.servers={broker.bootstrap_servers}\n"
        f"sasl.password={secret}\nsecurity.protocol=plaintext-typo\n"
    )
    result = run(tl_home, "snapshot", "--cluster", "local", "--config", str(props))
    assert_one_error_line(result, "security.protocol", "plaintext-typo")
    verbose = run(tl_home, "-v", "snapshot", "--cluster", "local", "--config", str(props))
    assert verbose.returncode == 2 and "Traceback" not in verbose.stderr
    for output in (result, verbose):
        assert secret not in output.stderr + output.stdout
    assert stored_files(tl_home) == []

    props.write_text(f"bootstrap.servers={broker.bootstrap_servers}\nsasl.password={secret}\n")
    result = run(tl_home, "-v", "snapshot", "--cluster", "local", "--config", str(props))
    assert result.returncode == 0, result.stderr
    assert "[redacted]" in result.stderr  # the -v log shows the config, redacted
    assert secret not in result.stderr + result.stdout
    assert not [p for p in stored_files(tl_home) if secret.encode() in p.read_bytes()]


def test_missing_config_file_is_one_line(tl_home, tmp_path):
    result = run(tl_home, "snapshot", "--cluster", "x", "--config", str(tmp_path / "nope.json"))
    assert_one_error_line(result, "nope.json", "no such file")


@pytest.mark.broker
def test_demo_shows_two_ids_for_orders(tl_home):
    result = run(tl_home, "demo", "--capture-only", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "orders has two different canonical IDs" in result.stdout
    assert len(stored_files(tl_home)) >= 2
    assert not (tl_home / "warehouse").exists()  # --capture-only builds nothing


def path_without_go() -> str:
    """This PATH without any directory that holds a ``go``, nor Go's default place."""
    from tests.servers.seaweedfs_dist import GO_FALLBACK

    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and not (Path(d) / "go").exists() and Path(d) != GO_FALLBACK.parent)


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.slow
def test_setup_runs_the_demo_where_no_go_is_found(tl_home, tmp_path):
    """The README's first command, ``bash scripts/setup.sh`` (its install step, then the demo
    without its Airflow step), on a PATH without Go and with the tests' Go setting pointing
    nowhere: it succeeds, and no Go ran (Go's caches, set to directories of this test, stay
    absent; no SeaweedFS build began). The published table shows the re-created `orders` as two
    incarnations, and the gate's Data Docs page exists. Its JVM, which lives for the demo's
    small store only, has the quick JIT (read from its event log)."""
    from tests.benchmarks.bench_small import driver_java_options, event_log_submit_args
    from tests.servers import seaweedfs_dist
    from topic_lineage.spark import QUICK_JIT_OPTION

    events = tmp_path / "events"
    events.mkdir()
    submit = event_log_submit_args(events)
    go_traces = {name: tmp_path / "go" / name for name in ("GOCACHE", "GOMODCACHE", "GOPATH")}
    weed_dir = tmp_path / "seaweedfs"
    weed_dir.mkdir()
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(tl_home), "PYSPARK_SUBMIT_ARGS": submit,
           "PATH": path_without_go(), seaweedfs_dist.GO_ENV: str(tmp_path / "no-go" / "go"),
           seaweedfs_dist.DIR_ENV: str(weed_dir), **{k: str(v) for k, v in go_traces.items()}}
    env.pop(seaweedfs_dist.SKIP_ENV, None)  # a user's machine: nothing says "skip SeaweedFS"
    assert shutil.which("go", path=env["PATH"]) is None
    result = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--skip-airflow"],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1200,
                            check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "orders: 2 incarnations" in result.stdout
    assert not [name for name, path in go_traces.items() if path.exists()], "a Go command ran"
    assert list(weed_dir.iterdir()) == []
    assert "SeaweedFS" not in result.stdout + result.stderr
    from topic_lineage import warehouse as wh

    assert wh.current_version()  # tl_home is this process's TOPIC_LINEAGE_HOME too
    assert (tl_home / "quality" / "index.html").is_file()
    assert QUICK_JIT_OPTION in driver_java_options(events)
