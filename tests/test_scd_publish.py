"""Publishing (R7): new version per build, atomic pointer, failed builds, retention, locks, and
SQL access while a build runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from scd_support import snap, tid, topic

from spark_jobs import build as build_job
from spark_jobs.build import build_version
from topic_lineage import pipeline, store
from topic_lineage import tables as t
from topic_lineage import warehouse as wh

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
X, Y = tid(1), tid(2)


def _build_and_publish(spark, *snapshots):
    if snapshots:
        store.save_all(list(snapshots), "import:jsonl")
    info = build_version(spark)
    wh.publish(info.version)
    return info.version


def test_failed_build_leaves_previous_version_published(spark, tl_home, monkeypatch):
    """A build that dies after writing part of its tables publishes nothing; the next build
    succeeds from the still-published version."""
    first = _build_and_publish(spark, snap(0, topic("orders", X)))
    store.save(snap(1, topic("orders", X), topic("payments", Y)))

    real_write, calls = build_job._write, []

    def dying_write(df, path, files=None):
        calls.append(path.name)
        if path.name == t.TOPIC_INCARNATIONS:
            raise RuntimeError("killed")
        real_write(df, path, files)

    monkeypatch.setattr(build_job, "_write", dying_write)
    with pytest.raises(RuntimeError, match="killed"):
        build_version(spark, "broken")
    monkeypatch.setattr(build_job, "_write", real_write)

    assert wh.current_version() == first
    assert wh.read_manifest("broken")["status"] == wh.BUILDING
    with pytest.raises(wh.WarehouseError, match="status 'building'"):
        wh.publish("broken")

    second = _build_and_publish(spark)
    assert wh.read_manifest(second)["mode"] == "incremental"
    assert wh.read_manifest(second)["base_version"] == first
    wh.register_tables(spark)
    names = {r.topic_name for r in spark.table("topic_lineage.topic_incarnations").collect()}
    assert names == {"orders", "payments"}


def test_rejected_version_is_kept_and_never_published(spark, tl_home):
    """R7: a failed validation keeps the previous version published and the rejected one on disk."""
    first = _build_and_publish(spark, snap(0, topic("orders", X)))
    store.save(snap(1, topic("payments", Y)))

    class Failed:
        success = False

        def __str__(self):
            return "expect_no_reappeared_versions failed"

    with pytest.raises(pipeline.ValidationFailed, match="expect_no_reappeared_versions"):
        pipeline.run_build(spark, version_id="bad", validate=lambda s, v: Failed())
    assert wh.current_version() == first
    assert wh.read_manifest("bad")["status"] == wh.REJECTED
    assert wh.version_path("bad", t.TOPIC_INCARNATIONS).is_dir()
    with pytest.raises(wh.WarehouseError, match="rejected"):
        wh.publish("bad")


def test_retention_keeps_a_bounded_number_of_versions_and_the_current_one(spark, tl_home, monkeypatch):
    monkeypatch.setenv(wh.KEEP_ENV, "2")
    versions = [_build_and_publish(spark, snap(h, topic("orders", X, partitions=h + 1)))
                for h in range(3)]
    assert [m["version"] for m in wh.list_versions()] == versions[1:]
    wh.publish(versions[1])  # roll back to the older one
    extra = build_version(spark, "extra").version  # built, not published
    wh.apply_retention(1)
    assert [m["version"] for m in wh.list_versions()] == [versions[1]]
    assert not wh.version_dir(extra).exists() and wh.current_version() == versions[1]


def test_second_build_fails_clearly_while_one_runs(tl_home):
    holder = wh.build_lock()
    with holder, pytest.raises(wh.BuildLockedError, match="another build is running"), wh.build_lock():
        pass


def test_query_while_a_build_runs(spark, tl_home):
    """A `topic-lineage query` (its own JVM, no metastore) during a build sees the published
    version; the build then publishes the next one."""
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
    proc = subprocess.Popen(
        [sys.executable, "-m", "topic_lineage.cli", "query", "--format", "json", "--master", "local[1]",
         "SELECT topic_name, valid_from, is_current FROM topic_incarnations ORDER BY topic_name"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    assert worker.is_alive()  # the query starts while the build holds the build lock
    out, err = proc.communicate(timeout=600)
    worker.join()
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out) == [
        {"topic_name": "orders", "valid_from": "2026-11-01T00:00:00Z", "is_current": True}
    ]
    assert wh.current_version() == first
    wh.publish(done["version"])
    assert (t.warehouse_dir() / "init.sql").read_text().count(str(wh.version_dir("next"))) == 3
