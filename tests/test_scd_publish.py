"""Publishing (R7): new version per build, atomic pointer, failed builds, retention, locks, and
SQL access while a build runs; queries are read-only and finish on the version they started on.

The gate's verdict is recorded with tests/gate_support.py where the subject is publishing
mechanics; the gate itself runs in test_quality_gate.py and the severity tests below."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from gate_support import pass_gate, write_version
from published_tables import at, incarnation, snapshot_run
from scd_support import snap, tid, topic

from topic_lineage import pipeline, store
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.scd import build as build_job
from topic_lineage.scd.build import build_version

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
X, Y = tid(1), tid(2)


def _build_and_publish(spark, *snapshots):
    if snapshots:
        store.save_all(list(snapshots), "import:jsonl")
    info = build_version(spark)
    pass_gate(info.version)
    wh.publish(info.version)
    return info.version


def test_failed_build_leaves_previous_version_published(spark, tl_home, monkeypatch):
    """A build that dies after writing part of its tables publishes nothing; the next build
    succeeds from the still-published version."""
    first = _build_and_publish(spark, snap(0, topic("orders", X)))
    store.save(snap(1, topic("orders", X), topic("payments", Y)))

    def dying_write(point):  # after the walk's tables, before the empty ones and the Iceberg commits
        if point == "write":
            raise RuntimeError("killed")

    with monkeypatch.context() as patched:
        patched.setattr(build_job, "fault_point", dying_write)
        with pytest.raises(RuntimeError, match="killed"):
            build_version(spark, "broken")
    assert any(wh.version_path("broken", t.TOPIC_INCARNATIONS).glob("*.parquet"))  # part written

    assert wh.current_version() == first
    assert wh.read_manifest("broken")["status"] == wh.BUILDING
    with pytest.raises(wh.PublishRefused, match="status 'building'"):
        wh.publish("broken")

    second = _build_and_publish(spark)
    assert wh.read_manifest(second)["mode"] == "incremental"
    assert wh.read_manifest(second)["base_version"] == first
    wh.register_tables(spark)
    names = {r.topic_name for r in spark.table("topic_lineage.topic_incarnations").collect()}
    assert names == {"orders", "payments"}


def test_rejected_version_is_kept_and_never_published(spark, tl_home):
    """R7 with the real gate: a deleted ID that comes back fails it; the previous version stays
    published, the rejected one stays on disk, and publishing it is refused naming the failure."""
    store.save_all([snap(0, topic("orders", X)), snap(1, topic("payments", Y))], "import:jsonl")
    first = pipeline.run_build(spark, version_id="first")
    assert first.published and wh.current_version() == "first"
    store.save(snap(2, topic("orders", X), topic("payments", Y)))  # orders' deleted ID is back

    with pytest.raises(pipeline.ValidationFailed, match="deleted topic IDs never come back") as failed:
        pipeline.run_build(spark, version_id="bad")
    assert failed.value.exit_code == 1
    assert wh.current_version() == "first"
    manifest = wh.read_manifest("bad")
    assert manifest["status"] == wh.REJECTED and manifest["gate"]["passed"] is False
    assert wh.version_path("bad", t.TOPIC_INCARNATIONS).is_dir()
    with pytest.raises(wh.PublishRefused, match="rejected it .*deleted topic IDs never come back"):
        wh.publish("bad")


def test_retention_keeps_a_bounded_number_of_versions_and_the_current_one(spark, tl_home, monkeypatch):
    monkeypatch.setenv(wh.KEEP_ENV, "2")
    versions = [_build_and_publish(spark, snap(h, topic("orders", X, partitions=h + 1)))
                for h in range(3)]
    assert [m["version"] for m in wh.list_versions()] == versions[1:]
    wh.publish(versions[1])  # roll back to the older one (it passed the gate)
    extra = build_version(spark, "extra").version  # built, not published
    wh.apply_retention(1)
    assert [m["version"] for m in wh.list_versions()] == [versions[1]]
    assert not wh.version_dir(extra).exists() and wh.current_version() == versions[1]


def test_second_build_fails_clearly_while_one_runs(tl_home):
    holder = wh.build_lock()
    with holder, pytest.raises(wh.BuildLockedError, match="another build is running"), wh.build_lock():
        pass


def test_query_while_a_build_runs(spark, tl_home):
    """A `topic-lineage query` during a build (DuckDB engine; Spark engine: its own JVM, no
    metastore) sees the published version; the build then publishes the next one."""
    first = _build_and_publish(spark, snap(0, topic("orders", X)))
    store.save(snap(1, topic("orders", X), topic("payments", Y)))
    done = {}

    def build():
        done["version"] = build_version(spark, "next").version

    worker = threading.Thread(target=build)
    worker.start()
    while not wh.version_dir("next").exists() and worker.is_alive():
        worker.join(0.1)
    env = dict(os.environ, TOPIC_LINEAGE_HOME=str(tl_home))
    sql = "SELECT topic_name, valid_from, is_current FROM topic_incarnations ORDER BY topic_name"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "topic_lineage.cli", "query", "--format", "json", *engine, sql],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    ) for engine in ((), ("--engine", "spark", "--master", "local[1]"))]  # DuckDB, then Spark
    assert worker.is_alive()  # the queries start while the build holds the build lock
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        assert json.loads(out) == [
            {"topic_name": "orders", "valid_from": "2026-11-01T00:00:00Z", "is_current": True}
        ]
    worker.join()
    assert wh.current_version() == first
    pass_gate(done["version"])
    wh.publish(done["version"])
    init_sql = (t.warehouse_dir() / "init.sql").read_text()
    assert "published version next" in init_sql and init_sql.count("CREATE OR REPLACE VIEW") == len(t.TABLES)
    read = re.findall(r"FROM parquet\.`([^`]*)`", init_sql)
    assert read and all(path.startswith(str(wh.version_dir("next"))) for path in read)


def test_commands_run_in_a_process_with_its_own_session_leave_it_running(spark, tl_home, capsys):
    """``build`` and ``query --engine spark`` through :func:`topic_lineage.cli.main` in a process
    that runs a session of its own (a notebook's, a test's) use it and leave it running: the
    one-off command's ``stop`` is for the session it started."""
    from pyspark import SparkContext

    from topic_lineage import cli

    store.save(snap(0, topic("orders", X)), "import:jsonl")
    assert cli.main(["build", "--max-age", "off"]) == 0
    assert "published" in capsys.readouterr().out
    sql = "SELECT topic_name FROM topic_incarnations"
    assert cli.main(["query", "--engine", "spark", "--format", "json", sql]) == 0
    assert json.loads(capsys.readouterr().out) == [{"topic_name": "orders"}]
    assert SparkContext._active_spark_context is spark.sparkContext
    assert spark.range(3).count() == 3


# --- read-only queries ------------------------------------------------------------------------------
WRITES = [
    "INSERT INTO topic_incarnations SELECT * FROM topic_incarnations",
    "INSERT OVERWRITE DIRECTORY '/tmp/tl-h14-x' USING parquet SELECT * FROM topic_incarnations",
    "WITH x AS (SELECT * FROM topic_incarnations) INSERT INTO topic_incarnations SELECT * FROM x",
    "DROP TABLE topic_incarnations",
    "DROP VIEW topic_incarnations",
    "CREATE TABLE copy AS SELECT * FROM topic_incarnations",
    "ALTER TABLE topic_incarnations ADD COLUMNS (extra INT)",
    "TRUNCATE TABLE topic_incarnations",
    "DELETE FROM topic_incarnations WHERE true",
    "SET spark.sql.ansi.enabled=false",
]
READS = [
    "SELECT count(*) FROM topic_incarnations",
    "WITH x AS (SELECT topic_name FROM topic_incarnations) SELECT * FROM x",
    "SHOW TABLES",
    "DESCRIBE topic_incarnations",
    "EXPLAIN SELECT * FROM snapshot_runs",
]


def test_writing_statements_are_refused_and_the_files_unchanged(spark, tl_home):
    """Every writing statement is refused before it runs (parsed, never executed); the tables
    are views, so even a direct INSERT through Spark fails; reads pass."""
    import hashlib

    version = _build_and_publish(spark, snap(0, topic("orders", X)))
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest()
              for p in wh.version_dir(version).rglob("*") if p.is_file() and p.name != wh.MANIFEST}
    wh.register_tables(spark)
    for sql in WRITES:
        with pytest.raises(wh.QueryRefused, match="query refused: .* would write; queries are read-only"):
            wh.check_read_only(spark, sql)
    for sql in READS:
        wh.check_read_only(spark, sql)
        spark.sql(sql).collect()
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException):  # the view itself refuses, whatever the caller
        spark.sql("INSERT INTO topic_lineage.topic_incarnations SELECT * FROM topic_lineage.topic_incarnations")
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in wh.version_dir(version).rglob("*") if p.is_file() and p.name != wh.MANIFEST}
    assert after == before and not Path("/tmp/tl-h14-x").exists()
    assert [r.topic_name for r in spark.table("topic_lineage.topic_incarnations").collect()] == ["orders"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", [(), ("--engine", "spark", "--master", "local[1]")],
                         ids=["duckdb", "spark"])
def test_query_cli_refuses_insert_and_finishes_on_its_version_during_retention(
        tl_home, monkeypatch, engine):
    """`topic-lineage query "INSERT ..."` exits 2 with one line, files unchanged. A query paused
    (fault point ``read``) on v1 while v2 is published with KEEP_VERSIONS=1 answers with v1's
    rows; retention removes v1 only afterwards. Both engines (DuckDB is the default). Spark's
    JVM, a one-off query's over a version of a few rows, compiles with C1 only (read from the
    Spark event log of the refused INSERT's query)."""
    import time

    from tests.benchmarks.bench_small import driver_java_options, event_log_submit_args
    from topic_lineage.spark import QUICK_JIT_OPTION

    monkeypatch.setenv(wh.KEEP_ENV, "1")
    cluster, old_id, new_id = "MkU3OEVBNTcwNTJENDM2Qg", tid(1), tid(2)
    runs = [snapshot_run(cluster, at(1), topic_count=1)]
    for name, topic_id in (("v1", old_id), ("v2", new_id)):  # v2 after v1's publish: KEEP=1
        write_version(name, incarnation(f"k-{name}", cluster,
                                        [{"name": "orders", "at": at(1), "topic_id": topic_id}]), runs)
        pass_gate(name)
        if name == "v1":
            wh.publish("v1")
    env = dict(os.environ, TOPIC_LINEAGE_HOME=str(tl_home))
    command = [sys.executable, "-m", "topic_lineage.cli", "query", "--format", "json", *engine]

    events = tl_home.parent / "events"  # Spark's event log of the refused INSERT's query
    logged = {}
    if engine:
        events.mkdir()
        logged["PYSPARK_SUBMIT_ARGS"] = event_log_submit_args(events)
    insert = subprocess.run([*command, "INSERT INTO topic_incarnations SELECT * FROM topic_incarnations"],
                            capture_output=True, text=True, env={**env, **logged}, cwd=ROOT, timeout=600,
                            check=False)
    assert insert.returncode == 2, insert.stderr[-2000:]
    if engine:
        assert QUICK_JIT_OPTION in driver_java_options(events)
    (line,) = [row for row in insert.stderr.splitlines() if "error:" in row]  # one line (JVM banner aside)
    assert line.startswith("topic-lineage query: error: query refused: INSERT INTO") and "read-only" in line
    assert "Traceback" not in insert.stderr
    assert len(list(wh.version_path("v1", t.TOPIC_INCARNATIONS).glob("*.parquet"))) == 1

    proc = subprocess.Popen(
        [*command, "SELECT topic_id FROM topic_incarnations"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**env, "TOPIC_LINEAGE_FAULT": "pause@read"},
    )
    try:
        deadline = time.monotonic() + 600
        while not (tl_home / "fault-read.reached").exists():
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        wh.publish("v2")  # retention inside, KEEP_VERSIONS=1
        assert wh.current_version() == "v2" and wh.version_dir("v1").is_dir()
    finally:
        (tl_home / "fault-read.release").touch()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out) == [{"topic_id": old_id}]
    assert wh.apply_retention() == ["v1"]
