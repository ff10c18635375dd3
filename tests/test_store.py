"""The snapshot store: atomic, idempotent, conflict-detecting, and loud about damaged files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from topic_lineage import store
from topic_lineage import tables as t
from topic_lineage.snapshot import Snapshot, SnapshotFormatError, TopicObservation

T0 = datetime(2026, 11, 1, tzinfo=UTC)
ORDERS_ID = "b8tRS7h4TJ2Vt43Dp85v2A"


def snap(captured_at=T0, cluster_id="c1", topics=None, complete=True) -> Snapshot:
    if topics is None:
        topics = (TopicObservation("orders", ORDERS_ID, 3, 3, False),)
    return Snapshot(cluster_id, "prod", captured_at, complete, tuple(topics))


def write_jsonl(path, *snaps_or_lines):
    lines = [s if isinstance(s, str) else s.to_json_line() for s in snaps_or_lines]
    path.write_text("\n".join(lines) + "\n")
    return path


def all_files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_save_writes_one_partitioned_file_and_reads_back(tl_home):
    s = snap(cluster_id="lkc/x y")
    assert store.save(s).stored == 1
    [path] = store.snapshot_files()
    assert path.relative_to(t.snapshots_dir()).as_posix() == (
        "cluster=lkc%2Fx%20y/date=2026-11-01/20261101T000000.000000Z.parquet"
    )
    assert store.read_snapshot(path) == s
    [run] = store.read_runs("prod")
    assert run[t.CLUSTER_ID] == "lkc/x y" and run[t.TOPIC_COUNT] == 1 and run[t.SOURCE] == "live"
    assert store.read_runs("other") == []


def test_same_instant_in_another_time_zone_is_the_same_file(tl_home):
    """The date partition is the UTC date, so a non-UTC timestamp cannot dodge the duplicate
    check (00:30 at +01:00 is 23:30 UTC the day before)."""
    local = datetime(2026, 11, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))
    utc_twin = local.astimezone(UTC)
    assert store.snapshot_path("c1", local) == store.snapshot_path("c1", utc_twin)
    assert "/date=2026-10-31/" in store.snapshot_path("c1", local).as_posix()
    store.save(snap(local))
    assert store.save(snap(utc_twin)).unchanged == 1
    assert len(store.snapshot_files()) == 1


def test_no_temporary_file_is_left_or_listed(tl_home):
    store.save(snap())
    store.save(snap(T0.replace(hour=1)))
    # the one hidden file a stored snapshot has: its claim (its content hash, created only if absent)
    assert sorted(p.name for p in t.snapshots_dir().rglob(".*")) == sorted(
        f".{p.name}.claim" for p in t.snapshots_dir().rglob("*.parquet"))
    assert len(store.snapshot_files()) == 2


def test_failed_write_leaves_nothing(tl_home, monkeypatch):
    """An I/O error mid-write stores nothing and leaves no temporary file behind."""
    import pyarrow.parquet as pq

    real_write = pq.write_table

    def write_then_fail(table, where, **kwargs):
        real_write(table, where, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", write_then_fail)
    with pytest.raises(store.StoreError, match="nothing of it was stored"):
        store.save(snap())
    assert [p for p in t.snapshots_dir().rglob("*") if p.is_file()] == []


def test_writer_killed_mid_write_leaves_no_visible_file(tl_home, tmp_path):
    """SIGKILL between writing and renaming: readers never see a half-written snapshot."""
    ready = tmp_path / "ready"
    script = textwrap.dedent(
        f"""
        import os, time
        from datetime import datetime, timezone
        from topic_lineage import store
        from topic_lineage.snapshot import Snapshot, TopicObservation
        def hang(src, dst):
            open({str(ready)!r}, "w").close()
            time.sleep(60)
        os.replace = hang
        store.save(Snapshot("c1", "prod", datetime(2026, 11, 1, tzinfo=timezone.utc), True,
                            (TopicObservation("orders", None, 1, 1, False),)))
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, "writer exited early"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    leftovers = [p for p in t.snapshots_dir().rglob("*") if p.is_file()]
    # only the hidden temporary file (topic_lineage.fsutil.replacing)
    assert leftovers and all(p.name.startswith(".") and p.name.endswith(".tmp") for p in leftovers)
    assert store.snapshot_files() == []
    assert store.read_runs() == [] and store.verify() == []
    # The same snapshot can still be stored afterwards.
    assert store.save(snap(topics=[TopicObservation("orders", None, 1, 1, False)])).stored == 1


def test_reimport_is_a_no_op(tl_home, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", snap(), snap(T0.replace(hour=1)))
    assert store.import_jsonl(path) == store.IngestResult(stored=2, unchanged=0)
    before = {p: p.stat().st_mtime_ns for p in store.snapshot_files()}
    assert store.import_jsonl(path) == store.IngestResult(stored=0, unchanged=2)
    assert {p: p.stat().st_mtime_ns for p in store.snapshot_files()} == before
    # A live save of the same content is also a no-op.
    assert store.save(snap()).unchanged == 1


def test_conflicting_import_is_an_error_and_stores_nothing(tl_home, tmp_path):
    store.import_jsonl(write_jsonl(tmp_path / "a.jsonl", snap()))
    changed = snap(topics=[TopicObservation("orders", ORDERS_ID, 6, 3, False)])
    fresh = snap(T0.replace(hour=5))
    path = write_jsonl(tmp_path / "b.jsonl", fresh, changed)
    with pytest.raises(store.SnapshotConflictError) as excinfo:
        store.import_jsonl(path)
    assert str(path) in str(excinfo.value) and "nothing was imported" in str(excinfo.value)
    assert len(store.snapshot_files()) == 1  # `fresh` was not stored either
    [stored] = store.snapshot_files()
    assert store.read_snapshot(stored).topics[0].partition_count == 3


def test_conflicting_live_save_is_an_error(tl_home):
    store.save(snap())
    with pytest.raises(store.SnapshotConflictError):
        store.save(snap(topics=[]))


def test_empty_snapshot_is_kept(tl_home):
    """A snapshot with no topics is stored (one marker row) and read back as empty."""
    store.save(snap(topics=[]))
    [run] = store.read_runs()
    assert run[t.TOPIC_COUNT] == 0
    [path] = store.snapshot_files()
    assert store.read_snapshot(path).topics == ()


def test_file_with_one_bad_line_stores_nothing(tl_home, tmp_path):
    bad = json.loads(snap(T0.replace(hour=2)).to_json_line())
    bad["captured_at"] = "2026-11-01T02:00:00"  # naive
    path = write_jsonl(tmp_path / "a.jsonl", snap(), snap(T0.replace(hour=1)), json.dumps(bad))
    with pytest.raises(SnapshotFormatError) as excinfo:
        store.import_jsonl(path)
    assert f"{path}:3" in str(excinfo.value)
    assert store.snapshot_files() == []


def test_truncated_file_is_reported_and_quarantined(tl_home):
    store.save(snap())
    store.save(snap(T0.replace(hour=1)))
    damaged = store.snapshot_files()[0]
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])

    [problem] = store.verify()
    assert problem.path == damaged and "quarantine" in str(problem)
    with pytest.raises(store.CorruptSnapshotFileError):
        store.read_runs()

    moved = store.quarantine(damaged)
    assert moved.is_file() and t.quarantine_dir() in moved.parents
    assert store.verify() == []
    assert len(store.read_runs()) == 1


def test_quarantine_refuses_files_outside_the_store(tl_home, tmp_path):
    outside = tmp_path / "x.parquet"
    outside.write_bytes(b"x")
    with pytest.raises(store.StoreError, match="not a file in the snapshot store"):
        store.quarantine(outside)
    assert outside.exists()
