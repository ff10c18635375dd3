"""A build through the store and real builds: where the walk runs, what it reads, what it saves,
what it writes.

The walk's rules are checked against the reference in tests/test_scd_walk.py and
tests/test_scd_properties.py. Here: the walk runs in Spark tasks, not in the driver; an
incremental build continues the base's saved walk with the new snapshot files only (R5: the rows
still equal a full refresh); a late snapshot, a base of other build code or a damaged saved walk
make that cluster be walked from its first snapshot; ``topic_snapshots``, written by the tasks
with pyarrow, equals Spark's projection of the store; a store file that is not one snapshot is a
clear error naming it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gate_support import publish_passed
from pyspark.testing import assertDataFrameEqual
from scd_support import snap, tid, topic

from topic_lineage import store
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.scd import walk, walk_job
from topic_lineage.scd.build import WALK_TASKS, build_version
from topic_lineage.snapshot import GroupObservation, GroupOffset
from topic_lineage.store import CorruptSnapshotFileError

pytestmark = [pytest.mark.spark]

B = "QkJCQkJCQkJCQkJCQkJCQg"
A_HISTORY = [
    snap(0, topic("orders", tid(1)), topic("payments", tid(2)), topic("logs")),
    snap(1, topic("orders", tid(1)), topic("payments", tid(2), error="UNKNOWN_SERVER_ERROR"),
         topic("logs", tid(3))),
    snap(2, topic("orders", tid(4)), topic("payments", tid(2)), topic("logs", tid(3))),
    snap(3, topic("orders", tid(4)), topic("payments-v2", tid(2)), topic("logs", tid(3), partitions=6)),
    snap(4, topic("orders", tid(4)), topic("old", tid(1)), complete=False),
]
B_HISTORY = [snap(0, topic("orders", tid(1)), cluster=B, alias="dr"), snap(2, cluster=B, alias="dr")]


@pytest.fixture
def reads():
    """The store files (relative paths) the last build's tasks walked, from what each task
    reported (the manifest's ``walk_tasks``: how many files, and the first; the rest follow it
    in time order). The tasks run in Spark's Python workers, not in this process."""
    def walked() -> list[str]:
        manifest = wh.list_versions()[-1]
        listing = sorted(store.snapshot_listing())
        files = []
        for summary in manifest["walk_tasks"].values():
            if summary["snapshots"]:
                first = listing.index(Path(summary["first_file"]).relative_to(t.snapshots_dir()).as_posix())
                files += listing[first:first + summary["snapshots"]]
        return files

    return walked


def stored(*snapshots) -> list[str]:
    """Store the snapshots; their files' relative paths."""
    store.save_all(list(snapshots), "import:jsonl")
    return [store.snapshot_path(s.cluster_id, s.captured_at).relative_to(t.snapshots_dir()).as_posix()
            for s in snapshots]


def built(spark) -> str:
    info = build_version(spark)
    assert wh.read_manifest(info.version)["derivation"] == WALK_TASKS
    publish_passed(info.version)  # the gate is not the subject here
    return info.version


def assert_equals_full_refresh(spark, version):
    """Every table of ``version`` equals a full refresh of the same store."""
    assert_same_tables(spark, version, build_version(spark, full_refresh=True).version)


def assert_same_tables(spark, version, other):
    """Every table of ``version`` equals the same table of ``other``: the same columns and types
    and the same rows in any order, as Spark reads them. Compared as sorted Arrow tables
    (``assertDataFrameEqual`` compares row by row in Python: 20 s for 80,000 rows)."""
    __tracebackhide__ = True
    for table in t.TABLES:
        columns = t.ddl_columns(t.TABLE_DDL[table])

        def read(v, table=table, columns=columns):
            frame = spark.read.parquet(str(wh.version_path(v, table))).select(*columns).toArrow()
            return frame.sort_by([(c, "ascending") for c in columns])

        got, want = read(version), read(other)
        assert got.schema == want.schema, (table, got.schema, want.schema)
        if not got.equals(want):
            differ = next((i for i, (a, b) in enumerate(zip(got.to_pylist(), want.to_pylist())) if a != b),
                          min(got.num_rows, want.num_rows))
            pytest.fail(f"{table}: {got.num_rows} rows against {want.num_rows}; the first that differ "
                        f"(sorted): {got.slice(differ, 1).to_pylist()} against {want.slice(differ, 1).to_pylist()}")


def holding_two_snapshots(path: Path) -> None:
    """Rewrite the store file ``path`` to hold its snapshot twice, a second later the second time."""
    rows = pq.read_table(path)
    later = rows.set_column(rows.schema.get_field_index(t.CAPTURED_AT), t.CAPTURED_AT,
                            pa.compute.add(rows.column(t.CAPTURED_AT), pa.scalar(1_000_000, pa.duration("us"))))
    pq.write_table(pa.concat_tables([rows, later.cast(rows.schema)]), path)


def test_an_incremental_build_continues_the_saved_walk_with_the_new_files_only(spark, tl_home, reads):
    stored(*A_HISTORY[:3], *B_HISTORY)
    first = built(spark)
    assert sorted(p.name for p in (wh.version_dir(first) / wh.WALK_STATE).iterdir()) == sorted(
        f"{t.cluster_partition(c)}.walk" for c in (A_HISTORY[0].cluster_id, B))
    new = stored(*A_HISTORY[3:])
    second = built(spark)
    assert sorted(reads()) == sorted(new)  # cluster A continued from its saved walk, cluster B untouched
    b_state = f"{wh.WALK_STATE}/{t.cluster_partition(B)}.walk"
    assert (wh.version_dir(second) / b_state).stat().st_ino == (wh.version_dir(first) / b_state).stat().st_ino
    assert_equals_full_refresh(spark, second)


def test_a_build_of_an_empty_store_gives_empty_tables_and_a_base_for_the_next(spark, tl_home):
    """Nothing captured yet: the build writes every table with no rows and its DDL's columns
    (it failed on the walk's own ``topic_snapshots`` directory), the gate passes it, and the
    next build continues from it."""
    from topic_lineage.pipeline import run_build

    first = run_build(spark)
    assert first.published, first
    assert wh.read_manifest(first.version)["row_counts"] == {table: 0 for table in t.TABLES}
    for table in t.TABLES:
        rows = spark.read.parquet(str(wh.version_path(first.version, table)))
        assert rows.count() == 0 and set(t.ddl_columns(t.TABLE_DDL[table])) <= set(rows.columns), table
    stored(*A_HISTORY[:2])
    second = built(spark)
    assert wh.read_manifest(second)["base_version"] == first.version
    assert_equals_full_refresh(spark, second)


def test_a_late_snapshot_walks_its_cluster_again_and_only_it(spark, tl_home, reads):
    a_files = stored(A_HISTORY[0], A_HISTORY[2], A_HISTORY[3], *B_HISTORY)[:3]
    built(spark)
    late = stored(A_HISTORY[1])
    version = built(spark)
    assert sorted(reads()) == sorted([*a_files, *late])
    assert_equals_full_refresh(spark, version)


@pytest.mark.parametrize("damage", ["other build code", "damaged saved walk", "no saved walk"])
def test_without_a_usable_saved_walk_the_cluster_is_walked_from_its_first_snapshot(
        spark, tl_home, reads, damage):
    a_files = stored(*A_HISTORY[:3])
    first = built(spark)
    state_file = wh.version_dir(first) / wh.WALK_STATE / f"{t.cluster_partition(A_HISTORY[0].cluster_id)}.walk"
    if damage == "other build code":
        manifest_path = wh.version_dir(first) / wh.MANIFEST
        manifest = json.loads(manifest_path.read_text())
        manifest["build_code"] = "0" * 64
        manifest_path.write_text(json.dumps(manifest))
    elif damage == "damaged saved walk":
        state_file.write_bytes(state_file.read_bytes()[:100])
    else:
        state_file.unlink()
    new = stored(*A_HISTORY[3:])
    version = built(spark)
    assert sorted(reads()) == sorted([*a_files, *new])
    assert_equals_full_refresh(spark, version)


def test_topic_snapshots_written_by_the_walk_equal_sparks_projection_of_the_store(
        spark, tl_home, monkeypatch):
    """In several files (a tiny file size here), with ID-less topics, describe errors and an
    empty snapshot's marker row, which is no observation."""
    from topic_lineage.topic_id import rfc4122

    monkeypatch.setattr(walk_job, "OBSERVATION_ROWS", 4)
    relatives = stored(*A_HISTORY, *B_HISTORY)
    version = built(spark)
    written = sorted(wh.version_path(version, t.TOPIC_SNAPSHOTS).glob("*.parquet"))
    assert len(written) > 2
    store_rows = spark.read.schema(t.SNAPSHOT_STORE_DDL).parquet(
        *[str(t.snapshots_dir() / r) for r in relatives]).where(f"{t.TOPIC_NAME} IS NOT NULL")
    columns = t.ddl_columns(t.TOPIC_SNAPSHOTS_DDL)
    expected = spark.createDataFrame(
        [tuple(rfc4122(row[t.TOPIC_ID]) if row[t.TOPIC_ID] and c == t.TOPIC_UUID else row[c]
               if c != t.TOPIC_UUID else None for c in columns) for row in store_rows.collect()],
        t.TOPIC_SNAPSHOTS_DDL)
    got = spark.read.parquet(str(wh.version_path(version, t.TOPIC_SNAPSHOTS)))
    assert [(f.name, f.dataType) for f in got.schema] == [(f.name, f.dataType) for f in expected.schema]
    assertDataFrameEqual(got, expected)
    assert got.filter(f"{t.TOPIC_ID} IS NULL").count() == 1 and expected.count() == 15


def test_a_store_file_holding_two_snapshots_is_an_error_naming_it(spark, tl_home):
    """The walk reads a store file as one snapshot (topic_lineage.store writes one per cluster
    and time); a file that holds two stops the build before anything is published."""
    first, _ = stored(*A_HISTORY[:2])
    path = t.snapshots_dir() / first
    holding_two_snapshots(path)
    with pytest.raises(CorruptSnapshotFileError, match="more than one snapshot") as raised:
        build_version(spark)
    assert str(path) in str(raised.value)
    assert wh.current_version() is None


def test_the_walk_runs_in_spark_tasks_not_in_the_driver(spark, tl_home):
    """Issue #40, goal 1: every build derives its rows in Spark tasks. The driver process's walk
    entry points raise here, and a full and an incremental build still succeed, with the same
    rows as a full refresh: the walk ran in Python workers, each task reporting a process other
    than this one."""
    import os

    def driver_must_not_walk(*args, **kwargs):
        raise AssertionError("the walk ran in the driver process")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(walk_job, "walk_cluster", driver_must_not_walk)
        patched.setattr(walk.ClusterWalk, "snapshot", driver_must_not_walk)
        stored(*A_HISTORY[:3], *B_HISTORY)
        first = built(spark)
        stored(*A_HISTORY[3:])
        second = built(spark)
    for version, clusters in ((first, 2), (second, 1)):
        tasks = wh.read_manifest(version)["walk_tasks"]
        assert len(tasks) == clusters, tasks
        assert all(task["pid"] != os.getpid() for task in tasks.values()), tasks
    assert wh.read_manifest(second)["walk_tasks"][A_HISTORY[0].cluster_id]["continued"]
    assert_equals_full_refresh(spark, second)


def test_the_walk_job_is_no_sql_query(spark, tl_home):
    """On a classic session the walk's tasks run as an RDD job, and they derive the consumer-group
    tables too: a build of a store with groups starts Spark jobs but no SQL query, so a fresh
    JVM's first build pays for no query planning and no Arrow transfer (a first ``mapInArrow``
    job took 4.6 s on the third machine, a first RDD job 1.6 s; the group tables' SQL job was
    7.6 s of an 18.5 s CLI build). Spark Connect runs the same tasks as a ``mapInArrow`` job
    (tests/test_spark_server.py builds on a Connect server)."""
    billing = GroupObservation("billing", "Stable", None, (GroupOffset("orders", 0, 7, 9),))
    stored(*A_HISTORY[:-1], replace(A_HISTORY[-1], groups_complete=True, groups=(billing,)), *B_HISTORY)
    status = spark._jsparkSession.sharedState().statusStore()
    queries = status.executionsCount()
    spark.sparkContext.setJobGroup("walk-no-sql", "walk-no-sql")
    try:
        info = build_version(spark)
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert status.executionsCount() == queries
    assert spark.sparkContext.statusTracker().getJobIdsForGroup("walk-no-sql")  # the walk's job ran
    offsets = pq.read_table(wh.version_path(info.version, t.GROUP_OFFSETS)).to_pylist()
    assert [(row["group_id"], row["topic_id"], row["committed_offset"]) for row in offsets] == [("billing", tid(4), 7)]
    assert info.row_counts[t.GROUP_INCARNATIONS] == 1
    assert len(wh.read_manifest(info.version)["walk_tasks"]) == 2


def test_a_kept_cluster_keeps_its_group_rows_and_one_of_an_earlier_layout_is_walked_again(spark, tl_home, reads):
    """A cluster with nothing new keeps the base's group files (its walk task derived them: the
    same files, linked); one whose base wrote its group tables whole (a build before the walk
    tasks derived them, 2026-12-02) has no part of its own there, so it is walked again rather
    than losing its group rows. Either way every table equals a full refresh."""
    from topic_lineage.warehouse import iceberg

    billing = GroupObservation("billing", "Stable", None, (GroupOffset("orders", 0, 7, 9),))
    b_files = stored(*A_HISTORY[:2], replace(B_HISTORY[0], groups_complete=True, groups=(billing,)),
                     B_HISTORY[1])[2:]
    first = built(spark)
    stored(A_HISTORY[2])
    second = built(spark)
    assert not set(b_files) & set(reads())  # B kept, its group rows with it
    for table in t.GROUP_TABLES:
        kept = wh.version_dir(second) / table / walk_job.part_name(B, second)
        assert kept.stat().st_ino == (wh.version_dir(first) / table / walk_job.part_name(B, first)).stat().st_ino
        # as an earlier build left it: the table's rows in a file named by Spark's writer
        kept.rename(kept.with_name("part-00000-0f1e2d3c-c000.zstd.parquet"))
    manifest_path = wh.version_dir(second) / wh.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for table in t.GROUP_TABLES:
        manifest[iceberg.FILES_KEY][table] = [
            name.replace(walk_job.part_name(B, second), "part-00000-0f1e2d3c-c000.zstd.parquet")
            for name in manifest[iceberg.FILES_KEY][table]]
    manifest_path.write_text(json.dumps(manifest))
    stored(A_HISTORY[3])
    third = built(spark)
    assert wh.read_manifest(third)["mode"] == "incremental"
    assert set(b_files) <= set(reads())  # B walked again: its group rows derived again
    assert_equals_full_refresh(spark, third)
    assert pq.read_table(wh.version_path(third, t.GROUP_OFFSETS)).num_rows == 1


def test_a_task_runs_without_the_cycle_collector_and_gives_it_back(monkeypatch):
    """A walk task pauses Python's cycle collector while it runs (its incarnations live to its
    end; rescanning them was a fifth of the 10 M walk pass, issue #53) and gives it back as it
    was, whether the task returns or raises, in the worker that runs the next task."""
    import gc

    seen = []

    def walked(task):
        seen.append(gc.isenabled())
        if task.cluster_id == "fails":
            raise RuntimeError("the task failed")
        return {"cluster_id": task.cluster_id}

    monkeypatch.setattr(walk_job, "walk_cluster", walked)
    task = walk_job.ClusterTask(
        cluster_id="c", span=walk_job.Span("d", "a", "a", 1, ""), new_after="", late=(), base_state=None,
        continue_after=0, version="v", out="o", state_out="s", policy=walk_job.HoldPolicy(), input_bytes=1)
    assert gc.isenabled()
    summaries = list(walk_job._run_tasks([task, task], [0, 1]))
    assert [s["cluster_id"] for s in summaries] == ["c", "c"] and seen == [False, False] and gc.isenabled()
    with pytest.raises(RuntimeError, match="the task failed"):
        list(walk_job._run_tasks([replace(task, cluster_id="fails")], [0]))
    assert seen[-1] is False and gc.isenabled()
    gc.disable()  # a worker that had it off keeps it off
    try:
        list(walk_job._run_tasks([task], [0]))
        assert not gc.isenabled()
    finally:
        gc.enable()


def _ranges_and_walk(version: str) -> tuple[list[dict], dict]:
    """The range tasks' summaries of cluster A's split walk in ``version``, and its walk's."""
    summary = wh.read_manifest(version)["walk_tasks"][A_HISTORY[0].cluster_id]
    return summary["ranges"], summary


def test_a_split_clusters_walk_runs_beside_its_last_range(spark, tl_home, monkeypatch):
    """Issue #53: on a session of two task slots a split cluster's walk starts once every range
    task has started and a slot is free; it walks the steps already written and waits for the
    rest. Cluster A in ranges of one snapshot, the last one of 80,000 topics (its range is by far
    the slowest): the walk started before that range ended. With ``TOPIC_LINEAGE_EARLY_WALK=0``
    it starts after every range has ended; both versions' tables are the same."""
    from topic_lineage.topic_id import canonical

    big = snap(5, *(topic(f"t{i}", canonical((i + 1).to_bytes(16, "big"))) for i in range(80_000)))
    stored(*A_HISTORY, big)
    monkeypatch.setenv(walk_job.RANGE_FILES_ENV, "1")
    early = build_version(spark, full_refresh=True).version
    ranges, walked = _ranges_and_walk(early)
    assert len(ranges) == 6 and walked["walked"] == sum(r["walked"] for r in ranges) > 80_000
    last = ranges[-1]
    assert walked["started_at"] < last["started_at"] + last["seconds"], (walked, last)

    monkeypatch.setenv(walk_job.EARLY_WALK_ENV, "0")
    after = build_version(spark, full_refresh=True).version
    ranges, walked = _ranges_and_walk(after)
    assert walked["started_at"] >= max(r["started_at"] + r["seconds"] for r in ranges) - 0.002, (walked, ranges)
    assert_same_tables(spark, early, after)


@pytest.mark.timeout(300)  # a walk left waiting would hang the build
def test_a_range_that_fails_cancels_the_walk_waiting_for_it(spark, tl_home, monkeypatch):
    """The walk waiting beside the ranges never gets the steps of a range whose file is not one
    snapshot: the build raises that range's error naming the file (not a hang, not the walk's
    error), publishes nothing, and the session builds again once the file is quarantined."""
    files = stored(*A_HISTORY)
    path = t.snapshots_dir() / files[-1]
    holding_two_snapshots(path)
    monkeypatch.setenv(walk_job.RANGE_FILES_ENV, "1")
    with pytest.raises(CorruptSnapshotFileError, match="more than one snapshot") as raised:
        build_version(spark)
    assert str(path) in str(raised.value)
    assert wh.current_version() is None
    path.unlink()  # what quarantine does to the store
    version = build_version(spark).version
    assert len(_ranges_and_walk(version)[0]) == 4
