"""The snapshot store: every snapshot ever ingested, one immutable Parquet file each.

Writes are atomic (temporary file, fsync, rename), so no half-written snapshot is ever visible,
even if the process is killed. Re-ingesting an identical snapshot is a no-op; a different one for
the same ``(cluster_id, captured_at)`` is a :class:`SnapshotConflictError`. A batch (one file, one
capture) is checked whole before anything of it is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.fsutil import replace_durably
from topic_lineage.snapshot import (
    Snapshot,
    SnapshotFormatError,
    check_jsonl,
    compact_timestamp,
    format_timestamp,
    scan_jsonl,
)


class StoreError(TopicLineageError, RuntimeError):
    """The snapshot store could not do what was asked; nothing was changed."""


class SnapshotConflictError(StoreError):
    """A snapshot with the same (cluster_id, captured_at) but other content is already stored."""


class CorruptSnapshotFileError(StoreError):
    """A stored snapshot file cannot be read. ``path`` names it."""

    def __init__(self, path: Path, reason: str):
        self.path = path
        super().__init__(
            f"stored snapshot file {path} is unreadable ({reason}); move it aside with "
            f"'topic-lineage quarantine {path}'"
        )


@dataclass(frozen=True)
class IngestResult:
    stored: int
    unchanged: int

    def __str__(self) -> str:
        return f"{self.stored} snapshot(s) stored, {self.unchanged} already present"


def snapshot_path(cluster_id: str, captured_at: datetime) -> Path:
    return (
        t.snapshots_dir()
        / t.cluster_partition(cluster_id)
        # The UTC date: the same instant given in another time zone is the same file.
        / f"date={captured_at.astimezone(UTC).strftime('%Y-%m-%d')}"
        / t.snapshot_file_name(compact_timestamp(captured_at))
    )


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    with open(t.locks_dir() / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_stored(path: Path, columns: list[str] | None = None, *, first_row_only: bool = False):
    """Rows of a stored snapshot file as dicts; a damaged file raises
    :class:`CorruptSnapshotFileError` naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if first_row_only:
            table = pq.ParquetFile(path).read_row_group(0, columns=columns).slice(0, 1)
        else:
            table = pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError, ValueError, IndexError) as exc:
        raise CorruptSnapshotFileError(path, (str(exc).splitlines() or [type(exc).__name__])[0]) from None
    rows = table.to_pylist()
    if not rows:
        raise CorruptSnapshotFileError(path, "no rows")
    return rows


def stored_hash(path: Path) -> str | None:
    """Content hash of a stored snapshot file, or ``None`` when there is none."""
    if not path.exists():
        return None
    return _read_stored(path, [t.CONTENT_HASH], first_row_only=True)[0][t.CONTENT_HASH]


def _to_arrow(snapshot: Snapshot, source: str):
    import pyarrow as pa

    topics = sorted(snapshot.topics, key=lambda topic: topic.name) or [None]
    n = len(topics)

    def col(attr):
        return [getattr(topic, attr) if topic is not None else None for topic in topics]

    columns = {
        t.CLUSTER_ID: [snapshot.cluster_id] * n,
        t.CLUSTER_ALIAS: [snapshot.cluster_alias] * n,
        t.CAPTURED_AT: [snapshot.captured_at] * n,
        t.COMPLETE: [snapshot.complete] * n,
        t.SOURCE: [source] * n,
        t.AUTHORITATIVE: [snapshot.authoritative] * n,
        t.CONTENT_HASH: [snapshot.content_hash()] * n,
        t.TOPIC_COUNT: [len(snapshot.topics)] * n,
        t.ERROR_TOPIC_COUNT: [snapshot.error_topic_count] * n,
        t.TOPIC_NAME: col("name"),
        t.TOPIC_ID: col("topic_id"),
        t.PARTITION_COUNT: col("partition_count"),
        t.REPLICATION_FACTOR: col("replication_factor"),
        t.IS_INTERNAL: col("is_internal"),
        t.ERROR: col("error"),
    }
    return pa.Table.from_pydict(columns, schema=t.arrow_store_schema())


def _write_atomically(snapshot: Snapshot, source: str, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    # A leading dot keeps Spark and DuckDB from ever listing the temporary file.
    tmp = path.parent / f".tmp-{uuid.uuid4().hex}.parquet"
    try:
        pq.write_table(_to_arrow(snapshot, source), tmp, compression="zstd")
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        replace_durably(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StoreError(
            f"could not write snapshot of cluster {snapshot.cluster_id!r} at "
            f"{format_timestamp(snapshot.captured_at)} to {path.parent}: {exc.strerror or exc}; "
            "nothing of it was stored"
        ) from None


def _conflict(snapshot: Snapshot, path: Path, where: str = "") -> SnapshotConflictError:
    return SnapshotConflictError(
        f"{where + ': ' if where else ''}a different snapshot of cluster {snapshot.cluster_id!r} "
        f"at {format_timestamp(snapshot.captured_at)} is already stored ({path}); nothing was "
        "imported from this input"
    )


def save_all(snapshots: Iterable[Snapshot], source: str) -> IngestResult:
    """Store snapshots held in memory (a live capture, a converted import) as one batch."""
    batch = list(snapshots)
    _check_source(source)
    with _lock("ingest"):
        todo = []
        for snap in batch:
            path = snapshot_path(snap.cluster_id, snap.captured_at)
            existing = stored_hash(path)
            if existing is None:
                todo.append((snap, path))
            elif existing != snap.content_hash():
                raise _conflict(snap, path)
        for snap, path in todo:
            _write_atomically(snap, source, path)
    return IngestResult(stored=len(todo), unchanged=len(batch) - len(todo))


def save(snapshot: Snapshot, source: str = "live") -> IngestResult:
    return save_all([snapshot], source)


def import_jsonl(path: Path | str, source: str = "import:jsonl") -> IngestResult:
    """Import an interchange file: validated whole first, then stored (streamed, bounded memory)."""
    _check_source(source)
    keys = check_jsonl(path)  # raises SnapshotFormatError naming file, line, field
    with _lock("ingest"):
        todo = set()
        for (cluster_id, captured_at), digest in keys.items():
            target = snapshot_path(cluster_id, captured_at)
            existing = stored_hash(target)
            if existing is None:
                todo.add((cluster_id, captured_at))
            elif existing != digest:
                raise SnapshotConflictError(
                    f"{path}: a different snapshot of cluster {cluster_id!r} at "
                    f"{format_timestamp(captured_at)} is already stored ({target}); nothing was "
                    "imported from this file"
                )
        stored = 0
        for _, snap in scan_jsonl(path):
            key = (snap.cluster_id, snap.captured_at)
            if key in todo:
                _write_atomically(snap, source, snapshot_path(*key))
                todo.discard(key)
                stored += 1
    return IngestResult(stored=stored, unchanged=len(keys) - stored)


def _check_source(source: str) -> None:
    if source != "live" and not source.startswith("import:"):
        raise ValueError(f"source must be 'live' or 'import:<format>', got {source!r}")


def snapshot_files() -> list[Path]:
    """Every stored snapshot file, in (cluster, time) order."""
    root = t.snapshots_dir()
    if not root.exists():
        return []
    return sorted(p for p in root.glob("cluster=*/date=*/*.parquet") if not p.name.startswith("."))


def snapshot_listing() -> dict[str, tuple[int, int]]:
    """Every stored snapshot file as ``relative path -> (size, mtime_ns)``: one directory walk
    and one ``stat`` per file, no file is opened.

    The store never rewrites a file in place (a new file is renamed into place, a quarantined one
    leaves), so a changed file shows a changed size or modification time: this listing is what
    the no-op decision (:mod:`topic_lineage.noop`) compares.
    """
    root = t.snapshots_dir()
    listing = {}
    for path in snapshot_files():
        stat = path.stat()
        listing[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return listing


def read_runs(cluster: str | None = None) -> list[dict]:
    """One dict per stored snapshot (its snapshot-level columns), oldest first.

    ``cluster`` matches a cluster ID or alias. Unreadable files raise
    :class:`CorruptSnapshotFileError` naming the file.
    """
    columns = [
        t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.COMPLETE, t.SOURCE,
        t.AUTHORITATIVE, t.TOPIC_COUNT, t.ERROR_TOPIC_COUNT, t.CONTENT_HASH,
    ]
    runs = []
    for path in snapshot_files():
        row = _read_stored(path, columns, first_row_only=True)[0]
        if cluster is None or cluster in (row[t.CLUSTER_ID], row[t.CLUSTER_ALIAS]):
            row["path"] = str(path)
            runs.append(row)
    runs.sort(key=lambda r: (r[t.CLUSTER_ID], r[t.CAPTURED_AT]))
    return runs


def read_snapshot(path: Path) -> Snapshot:
    """A stored snapshot file back as a :class:`Snapshot` (for export and tests)."""
    from topic_lineage.snapshot import TopicObservation

    rows = _read_stored(path)
    first = rows[0]
    topics = tuple(
        TopicObservation(
            r[t.TOPIC_NAME], r[t.TOPIC_ID], r[t.PARTITION_COUNT], r[t.REPLICATION_FACTOR],
            r[t.IS_INTERNAL], r[t.ERROR],
        )
        for r in rows
        if r[t.TOPIC_NAME] is not None
    )
    return Snapshot(
        first[t.CLUSTER_ID], first[t.CLUSTER_ALIAS], first[t.CAPTURED_AT], first[t.COMPLETE],
        topics, authoritative=first[t.AUTHORITATIVE],
    )


def verify() -> list[CorruptSnapshotFileError]:
    """Read every stored file; return the errors of the unreadable ones (nothing is changed)."""
    problems = []
    for path in snapshot_files():
        try:
            read_snapshot(path)
        except CorruptSnapshotFileError as exc:
            problems.append(exc)
    return problems


def quarantine(path: Path | str) -> Path:
    """Move a stored snapshot file out of the store, keeping it for inspection."""
    path = Path(path).resolve()
    root = t.snapshots_dir().resolve()
    if root not in path.parents or not path.is_file():
        raise StoreError(f"{path} is not a file in the snapshot store ({root})")
    target = t.quarantine_dir() / path.relative_to(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(path), target)
    return target


__all__ = [
    "CorruptSnapshotFileError",
    "IngestResult",
    "SnapshotConflictError",
    "SnapshotFormatError",
    "StoreError",
    "import_jsonl",
    "quarantine",
    "read_runs",
    "read_snapshot",
    "save",
    "save_all",
    "snapshot_files",
    "snapshot_listing",
    "snapshot_path",
    "verify",
]
