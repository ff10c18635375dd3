"""One big Kafka cluster across several Spark tasks (issue #53), as a user runs it.

The rules are proved on random histories elsewhere: the split walk in process against the
reference (``tests/test_scd_walk.py``, ranges of one to three snapshots) and the Spark builds with
the splitting forced (``tests/test_scd_properties.py``). Here: the real ``topic-lineage build``
splits a cluster by the size of its snapshots, prints only what topic-lineage says, and gives the
rows of a build that walks the cluster in one task, full and incremental; and what the driver
sends a task does not grow with the history.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from topic_lineage import tables as t
from topic_lineage.scd import walk_job
from topic_lineage.scd.hold import HoldPolicy
from topic_lineage.storage.local import LocalHome

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "topic-lineage")


def _build(home: Path, *args: str, range_bytes: int) -> str:
    """``topic-lineage build`` as a user runs it; its version. Nothing but topic-lineage's own
    lines on stderr: not the JVM's and Spark's start-up lines."""
    env = dict(os.environ, TOPIC_LINEAGE_HOME=str(home), **{walk_job.RANGE_BYTES_ENV: str(range_bytes)})
    done = subprocess.run([CLI, "build", *args], check=False, env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stderr == "", done.stderr
    return next(line.split()[1].rstrip(":") for line in done.stdout.splitlines() if line.startswith("version "))


def _rows(home: Path, version: str, table: str) -> list[tuple]:
    parts = sorted((home / "warehouse" / "versions" / version / table).glob("*.parquet"))
    rows = [tuple(sorted(r.items())) for p in parts for r in pq.read_table(p).to_pylist()]
    return sorted(rows, key=repr)


def _manifest(home: Path, version: str) -> dict:
    return json.loads((home / "warehouse" / "versions" / version / "manifest.json").read_text())


def _build_in_process(spark, monkeypatch, *, full_refresh: bool, range_bytes: int) -> str:
    """The same build as the command's (validated, then published unless the published version
    has the same tables) in this process, on the module's Spark session: the range size is read
    by the driver, so the environment here sets it."""
    from topic_lineage.pipeline import run_build

    monkeypatch.setenv(walk_job.RANGE_BYTES_ENV, str(range_bytes))
    return run_build(spark, full_refresh=full_refresh).version


@pytest.mark.spark
def test_a_big_cluster_is_walked_in_ranges_with_the_rows_of_one_walk(tl_home, spark, monkeypatch):
    """A cluster larger than the range size is diffed by a task per range and walked by one more;
    its tables equal those of the cluster walked in one task, after a full refresh and after an
    incremental build that continues the split walk with new snapshots. The first build is the
    command a user runs (one JVM of its own); the others run in process, on the module's session."""
    from tests.benchmarks.datagen import History

    home = tl_home
    history = History(topics=60, clusters=1, seed=7, incomplete=((0, 6),), describe_errors=((0, 9),))
    history.store_rounds(0, 24)  # the glitch round (3): a broken listing, held then confirmed
    split = _build(home, "--full-refresh", range_bytes=20_000)
    ranges = next(iter(_manifest(home, split)["walk_tasks"].values()))["ranges"]
    assert len(ranges) >= 3 and sum(r["snapshots"] for r in ranges) == 24, ranges
    _staged_beside_the_walk_pass(home, split)
    whole = _build_in_process(spark, monkeypatch, full_refresh=True, range_bytes=10**12)
    assert "ranges" not in next(iter(_manifest(home, whole)["walk_tasks"].values()))
    assert _manifest(home, whole)["iceberg_read_beside_walks"] == []  # no walk pass: staged after
    for table in (t.SNAPSHOT_RUNS, t.TOPIC_INCARNATIONS, t.TOPIC_SNAPSHOTS):
        assert _rows(home, split, table) == _rows(home, whole, table), table

    history.store_rounds(24, 40)
    continued = _build_in_process(spark, monkeypatch, full_refresh=False, range_bytes=20_000)
    summary = next(iter(_manifest(home, continued)["walk_tasks"].values()))
    assert summary["continued"] and summary["snapshots"] == 16 and len(summary["ranges"]) >= 2, summary
    _staged_beside_the_walk_pass(home, continued)  # the files kept of the base's version too
    again = _build_in_process(spark, monkeypatch, full_refresh=True, range_bytes=10**12)
    for table in (t.SNAPSHOT_RUNS, t.TOPIC_INCARNATIONS, t.TOPIC_SNAPSHOTS):
        assert _rows(home, continued, table) == _rows(home, again, table), table


def _staged_beside_the_walk_pass(home: Path, version: str) -> None:
    """``topic_snapshots``' files were read for the catalog while the walk pass ran, and the
    version's Iceberg snapshot of it holds exactly the table's files."""
    manifest = _manifest(home, version)
    assert manifest["iceberg_read_beside_walks"] == [t.TOPIC_SNAPSHOTS], manifest["iceberg_read_beside_walks"]
    written = home / "warehouse" / "versions" / version / t.TOPIC_SNAPSHOTS
    assert sorted(Path(f).name for f in manifest["iceberg_files"][t.TOPIC_SNAPSHOTS]) \
        == sorted(p.name for p in written.glob("*.parquet")), manifest["iceberg_files"][t.TOPIC_SNAPSHOTS]


def test_a_refused_build_says_one_line(tmp_path, monkeypatch):
    """A build refused (another holds the lock) prints its reason alone on stderr, at once: it
    starts no JVM first (here there is no Java to start)."""
    from topic_lineage import warehouse as wh

    monkeypatch.setenv(t.HOME_ENV, str(tmp_path))
    with wh.build_lock():
        done = subprocess.run([CLI, "build", "--full-refresh"], check=False, capture_output=True, text=True,
                              cwd=ROOT, env=dict(os.environ, TOPIC_LINEAGE_HOME=str(tmp_path),
                                                 JAVA_HOME=str(tmp_path / "no-java")))
    assert done.returncode != 0
    reason = (f"topic-lineage build: error: another build is running (lock {tmp_path / 'locks' / 'build.lock'}); "
              "wait for it to finish and run the build again")
    assert done.stderr.splitlines() == [reason], done.stderr


def _task(paths: list[str]) -> walk_job.ClusterTask:
    stamps = [walk_job.stamp_of(p) for p in paths]
    return walk_job.ClusterTask(
        "c", walk_job.Span.of("/store/cluster=c", stamps), "", (), None, 0, "v1", "/out", "/out/s.walk",
        HoldPolicy(), input_bytes=len(paths) * 300_000, home="/", paths=tuple(paths))


def _paths(count: int) -> list[str]:
    return [f"/store/cluster=c/date=2026-01-01/20260101T{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}.000000Z.parquet"
            for i in range(count)]


def test_what_a_task_is_sent_does_not_grow_with_the_history(monkeypatch):
    """The driver plans: a task gets its span (first and last time, count, digest), not the names
    of its files, whether the cluster has 10 snapshot files or 20,000."""
    monkeypatch.setenv(walk_job.RANGE_BYTES_ENV, str(10**15))  # one task
    short, long = (walk_job.split_task(_task(_paths(n))) for n in (10, 20_000))
    assert len(short) == len(long) == 1
    assert abs(len(pickle.dumps(long[0])) - len(pickle.dumps(short[0]))) < 64
    monkeypatch.setenv(walk_job.RANGE_BYTES_ENV, str(32 * 2**20))  # 6 GB of files: 179 ranges
    paths = _paths(20_000)
    ranges = walk_job.split_task(_task(paths))
    assert len(ranges) == 179 and max(len(pickle.dumps(r)) for r in ranges) < 1_500
    assert sum(r.span.count for r in ranges) == 20_000 and len({r.span.count for r in ranges[:-1]}) == 1
    # each range diffs its first snapshot with the last of the range before
    ends = [r.span.last for r in ranges]
    assert [r.previous for r in ranges] == [None, *(p for p in paths if walk_job.stamp_of(p) in ends[:-1])]


def test_a_store_that_changed_under_the_build_is_one_clear_error(tmp_path):
    """A task lists its span itself: a file the driver did not plan (or one gone) is an error
    naming the directory and both counts, not a version that records other snapshots."""
    home = LocalHome(tmp_path)
    directory = tmp_path / "snapshots" / "cluster=c" / "date=2026-01-01"
    directory.mkdir(parents=True)
    stamps = ["20260101T000000.000000Z", "20260101T010000.000000Z"]
    for stamp in stamps:
        (directory / f"{stamp}.parquet").write_bytes(b"x")
    (directory / ".20260101T020000.000000Z.parquet.claim").write_bytes(b"")  # hidden: not a snapshot
    span = walk_job.Span.of(str(tmp_path / "snapshots" / "cluster=c"), stamps)
    assert [Path(f).name for f in span.files(home)] == [f"{s}.parquet" for s in stamps]
    (directory / "20260101T003000.000000Z.parquet").write_bytes(b"x")  # a late import meanwhile
    with pytest.raises(walk_job.StoreChangedError, match=r"holds 3 file\(s\) .* planned 2; run the build again"):
        span.files(home)


def test_the_largest_split_cluster_gets_a_slot_for_its_walk_beside_its_last_ranges(monkeypatch):
    """With two task slots or more the largest split cluster's walk runs beside the first job
    (``walk_job.run``); when that job's tasks would fill every slot of their last wave, the
    cluster gets one range more, so a slot is free for the walk. Its last range, the one the
    walk waits for, is about half the size of the others, and launched last (the plan puts
    the largest tasks first). One slot, or ``TOPIC_LINEAGE_EARLY_WALK=0``: the ranges the size
    gives, of one size, no early walk."""
    monkeypatch.setenv(walk_job.RANGE_BYTES_ENV, str(32 * 2**20))
    big = _task(_paths(894))  # 268 MB of files: 8 ranges
    small = replace(_task(_paths(10)), cluster_id="small")  # one task
    ranges = {slots: walk_job.split_tasks([big, small], slots) for slots in (1, 2, 3)}
    assert {c: len(r) for c, r in ranges[1][0].items()} == {"c": 8, "small": 1} and ranges[1][1] is None
    assert {r.span.count for r in ranges[1][0]["c"][:-1]} == {112} and ranges[1][0]["c"][-1].span.count == 110
    assert {c: len(r) for c, r in ranges[2][0].items()} == {"c": 8, "small": 1} and ranges[2][1] == "c"  # 9 tasks
    assert [r.span.count for r in ranges[2][0]["c"]] == [120] * 7 + [54]  # 7.5 shares of 894 files
    parts, early = walk_job.split_tasks([big], 2)  # 8 tasks on 2 slots: one more range
    assert len(parts["c"]) == 9 and early == "c"
    assert [r.span.count for r in parts["c"]] == [106] * 8 + [46]  # 8.5 shares
    assert sum(r.span.count for r in parts["c"]) == 894
    assert walk_job.launch_order(parts)[-1] is parts["c"][-1]
    assert [walk_job.stamp_of(r.previous) for r in parts["c"][1:]] == [r.span.last for r in parts["c"][:-1]]
    assert len(walk_job.split_tasks([big], 4)[0]["c"]) == 9  # 8 on 4 slots: a full last wave too
    assert len(walk_job.split_tasks([big], 3)[0]["c"]) == 8
    monkeypatch.setenv(walk_job.EARLY_WALK_ENV, "0")
    assert walk_job.split_tasks([big], 2) == ({"c": walk_job.split_task(big)}, None)
    monkeypatch.setenv(walk_job.EARLY_WALK_ENV, "1")
    monkeypatch.setenv(walk_job.RANGE_FILES_ENV, "112")  # ranges by count (the property tests): as asked
    parts, early = walk_job.split_tasks([big], 2)
    assert len(parts["c"]) == 8 and early == "c"
