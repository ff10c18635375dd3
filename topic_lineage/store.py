"""The snapshot store: every snapshot ever ingested, one immutable Parquet file each.

Writes are atomic (temporary file, fsync, rename), so no half-written snapshot is ever visible,
even if the process is killed. Re-ingesting an identical snapshot is a no-op; a different one for
the same ``(cluster_id, captured_at)`` is a :class:`SnapshotConflictError`. A batch (one file, one
capture) is checked whole before anything of it is written.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.faults import fault_point
from topic_lineage.fsutil import file_lock, replacing
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
        self.path, self.reason = path, reason
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


def _lock(name: str) -> contextlib.AbstractContextManager[bool]:
    return file_lock(t.locks_dir() / f"{name}.lock")


def group_path(cluster_id: str, captured_at: datetime) -> Path:
    """Where a snapshot's consumer-group observations are stored (see
    :func:`topic_lineage.tables.group_snapshots_dir`)."""
    topics = snapshot_path(cluster_id, captured_at)
    return t.group_snapshots_dir() / topics.relative_to(t.snapshots_dir())


def _group_path_of(topics_file: Path) -> Path:
    return t.group_snapshots_dir() / topics_file.relative_to(t.snapshots_dir())


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
    """Content hash of a stored snapshot file, or ``None`` when there is none: the hash its
    claim records (:func:`_claim`), or the file's own for a file stored without a claim (a
    local store written before claims)."""
    home = storage.home()
    claim = home.read_text(_claim_of(path))
    if not home.exists(path):  # claimed by a writer that did not finish
        return None
    if claim is not None:
        return claim.strip()
    return _read_stored(home.fetch(path), [t.CONTENT_HASH], first_row_only=True)[0][t.CONTENT_HASH]


# A snapshot is stored in three writes: its claim, a tiny hidden file next to its file holding
# its content hash, created only if absent (on object storage a conditional write); then its
# group file and its topic file, each whole. Only a writer holding the claim's hash writes the
# two files, so two processes storing different snapshots under one (cluster, time) never mix
# their files: the second gets SnapshotConflictError. A writer killed after its claim leaves a
# claim without a file, which the next store of the same snapshot completes.
def _claim_of(path: Path) -> Path:
    return path.parent / f".{path.name}.claim"


def _claim(snapshot: Snapshot, path: Path) -> None:
    """Claim ``path`` for this snapshot, or raise the conflict."""
    home = storage.home()
    if home.create(_claim_of(path), snapshot.content_hash()):
        return
    theirs = home.read_text(_claim_of(path))
    if theirs is None or theirs.strip() != snapshot.content_hash():
        raise _conflict(snapshot, path)


def fingerprint_listing() -> dict[str, tuple[int, int]]:
    """What a build's no-op fingerprint hashes of the store: its change token (the store's
    listing on the local disk, one generation object on object storage), read before anything
    else of the store (a change after it changes it again, so nothing a build missed can go
    unnoticed)."""
    return storage.home().change_token("snapshots")


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


def _groups_to_arrow(snapshot: Snapshot):
    import pyarrow as pa

    rows = []
    for group in sorted(snapshot.groups, key=lambda g: g.group_id):
        offsets = sorted(group.offsets, key=lambda o: (o.topic, o.partition)) or [None]
        for offset in offsets:
            rows.append((group, offset))
    rows = rows or [(None, None)]

    def col(owner, attr):
        index = 0 if owner == "group" else 1
        return [getattr(row[index], attr) if row[index] is not None else None for row in rows]

    n = len(rows)
    columns = {
        t.CLUSTER_ID: [snapshot.cluster_id] * n,
        t.CAPTURED_AT: [snapshot.captured_at] * n,
        t.GROUPS_COMPLETE: [snapshot.groups_complete] * n,
        t.GROUP_ID: col("group", "group_id"),
        t.GROUP_STATE: col("group", "state"),
        t.GROUP_ERROR: col("group", "error"),
        t.TOPIC_NAME: col("offset", "topic"),
        t.PARTITION: col("offset", "partition"),
        t.COMMITTED_OFFSET: col("offset", "committed_offset"),
        t.LOG_END_OFFSET: col("offset", "log_end_offset"),
    }
    return pa.Table.from_pydict(columns, schema=t.arrow_group_store_schema())


def _write_groups(snapshot: Snapshot) -> bool:
    """Write the snapshot's group observations (True: it has some), before its topic file: the
    topic file is what makes a snapshot exist, so a crash in between leaves an unread group
    file that the next store of the same snapshot replaces."""
    import pyarrow.parquet as pq

    path = group_path(snapshot.cluster_id, snapshot.captured_at)
    if snapshot.groups_complete is None:
        # no group information: a file here is debris of a crashed store, never this snapshot's
        path.unlink(missing_ok=True)
        return False
    try:
        with replacing(path) as tmp:
            pq.write_table(_groups_to_arrow(snapshot), tmp, compression="zstd")
    except OSError as exc:
        raise StoreError(
            f"could not write the consumer groups of snapshot of cluster {snapshot.cluster_id!r} "
            f"at {format_timestamp(snapshot.captured_at)} to {path.parent}: {exc.strerror or exc}; "
            "nothing of it was stored"
        ) from None
    return True


def _store(snapshot: Snapshot, source: str, path: Path) -> None:
    """Claim, then the group file, then the snapshot's file (its presence says the snapshot is
    stored)."""
    home = storage.home()
    _claim(snapshot, path)
    try:
        if _write_groups(snapshot):
            home.push(group_path(snapshot.cluster_id, snapshot.captured_at))
        fault_point("store")  # fault suite: claimed (and the group file written), the file not yet
        _write_atomically(snapshot, source, path)
        home.push(path)
    except Exception:  # nothing of it is stored: not even the claim (a killed writer leaves it)
        home.remove([_claim_of(path)])
        raise


def _write_atomically(snapshot: Snapshot, source: str, path: Path) -> None:
    import pyarrow.parquet as pq

    try:
        # The temporary file is hidden: Spark and DuckDB never list it.
        with replacing(path) as tmp:
            pq.write_table(_to_arrow(snapshot, source), tmp, compression="zstd")
    except OSError as exc:
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
            _store(snap, source, path)
        if todo:
            storage.home().changed("snapshots")
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
                _store(snap, source, snapshot_path(*key))
                todo.discard(key)
                stored += 1
        if stored:
            storage.home().changed("snapshots")
    return IngestResult(stored=stored, unchanged=len(keys) - stored)


def _check_source(source: str) -> None:
    if source != "live" and not source.startswith("import:"):
        raise ValueError(f"source must be 'live' or 'import:<format>', got {source!r}")


def snapshot_files() -> list[Path]:
    """Every stored snapshot file, in (cluster, time) order (with the home on object storage
    their copies in the working copy, fetched with their group files when missing)."""
    home = storage.home()
    relatives = sorted(snapshot_listing())
    home.fetch_all([f"group_snapshots/{r}" for r in group_listing(relatives)])
    return sorted(home.fetch_all(f"snapshots/{r}" for r in relatives))


def _is_store_file(relative: str) -> bool:
    parts = relative.split("/")
    return (len(parts) == 3 and parts[0].startswith("cluster=") and parts[1].startswith("date=")
            and parts[2].endswith(".parquet"))


def group_listing(relatives=None) -> dict[str, int]:
    """Relative path -> size of every stored consumer-group file (of the snapshots
    ``relatives``, when given)."""
    found = {r: size for r, (size, _) in storage.home().listing("group_snapshots").items()
             if _is_store_file(r)}
    return found if relatives is None else {r: found[r] for r in relatives if r in found}


def snapshot_listing() -> dict[str, tuple[int, int]]:
    """Every stored snapshot file as ``relative path -> (size, mtime_ns)``: one listing (on
    the local disk a directory walk and one ``stat`` per file; on object storage one LIST
    request per 1,000 objects), no file is opened."""
    return {relative: stat for relative, stat in storage.home().listing("snapshots").items()
            if _is_store_file(relative)}


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
    """A stored snapshot file back as a :class:`Snapshot` (for export and tests), with its
    consumer-group observations when it has them."""
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
    groups_complete, groups = _read_groups(_group_path_of(path))
    return Snapshot(
        first[t.CLUSTER_ID], first[t.CLUSTER_ALIAS], first[t.CAPTURED_AT], first[t.COMPLETE],
        topics, authoritative=first[t.AUTHORITATIVE], groups_complete=groups_complete,
        groups=groups,
    )


def _read_groups(path: Path):
    """``(groups_complete, groups)`` of a stored group file; ``(None, ())`` when there is none."""
    from topic_lineage.snapshot import GroupObservation, GroupOffset

    if not path.exists():
        return None, ()
    rows = _read_stored(path)
    by_group: dict[str, tuple[dict, list]] = {}
    for row in rows:
        if row[t.GROUP_ID] is None:
            continue
        _, offsets = by_group.setdefault(row[t.GROUP_ID], (row, []))
        if row[t.TOPIC_NAME] is not None:
            offsets.append(GroupOffset(row[t.TOPIC_NAME], row[t.PARTITION],
                                       row[t.COMMITTED_OFFSET], row[t.LOG_END_OFFSET]))
    groups = tuple(
        GroupObservation(group_id, first[t.GROUP_STATE], first[t.GROUP_ERROR], tuple(offsets))
        for group_id, (first, offsets) in by_group.items()
    )
    return rows[0][t.GROUPS_COMPLETE], groups


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
    home = storage.home()
    path = Path(path).resolve()
    root = t.snapshots_dir().resolve()
    if root in path.parents:
        home.fetch(path)  # named by a build's error: the store's file
    if root not in path.parents or not path.is_file():
        raise StoreError(f"{path} is not a file in the snapshot store ({root})")
    target = t.quarantine_dir() / path.relative_to(root)
    groups = _group_path_of(path)
    moved = [(path, target)]
    if home.fetch(groups) is not None:  # the snapshot's group observations go with it
        moved.append((groups, t.quarantine_dir() / "group_snapshots" / path.relative_to(root)))
    for source, kept in moved:  # the quarantined copy first, then the store's goes
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, kept)
        home.push(kept)
    home.remove([path, groups, _claim_of(path)])
    home.changed("snapshots")
    return target


__all__ = [
    "CorruptSnapshotFileError",
    "IngestResult",
    "SnapshotConflictError",
    "SnapshotFormatError",
    "StoreError",
    "group_path",
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
