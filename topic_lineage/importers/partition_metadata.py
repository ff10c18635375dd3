"""Topic IDs found on broker disks, and the stale directories of deleted incarnations.

Every partition directory ``<topic>-<partition>`` of a broker log directory holds a
``partition.metadata`` file (``PartitionMetadataFile`` / ``PartitionMetadataReadBuffer`` in
apache/kafka ``storage/.../checkpoint``)::

    version: 0
    topic_id: b8tRS7h4TJ2Vt43Dp85v2A

Directories renamed for asynchronous deletion are ``<topic>-<partition>.<32 hex>-delete``,
partitions a KRaft broker no longer hosts become ``...-stray``, and a replica moving between log
directories is ``...-future`` (``LocalLog.scala``: ``DeleteDirPattern``, ``StrayDirPattern``,
``FutureDirPattern``).

Decision: log directories are **reported, not turned into snapshots**. A log directory holds
some partitions of some topics, without partition counts or replication factors that could be
trusted, so a snapshot made from it could only invent attributes; and as an incomplete
snapshot it could establish nothing the cluster's own captures do not. What disks do tell is
which topic IDs hold data, so :func:`scan` compares them with the newest stored complete
snapshot of the cluster and flags what a user may want to clean up
(``topic-lineage scan-logdirs DIR...``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from topic_lineage import topic_id as tid
from topic_lineage.errors import TopicLineageError

METADATA_FILE = "partition.metadata"
_SUFFIXED = re.compile(r"^(\S+)-(\d+)\.([0-9a-fA-F]+)-(delete|stray|future)$")
_LIVE = re.compile(r"^(\S+)-(\d+)$")
_SPACES_AFTER_COLON = re.compile(r":\s+")


class PartitionMetadataError(TopicLineageError, ValueError):
    """A ``partition.metadata`` file or log directory cannot be read; names the path."""


@dataclass(frozen=True)
class PartitionDir:
    log_dir: str
    path: str
    topic: str
    partition: int
    kind: str  # "live" | "delete" | "stray" | "future"
    topic_id: str | None  # canonical; None when the directory has no partition.metadata
    problem: str | None = None  # why partition.metadata could not be read


@dataclass(frozen=True)
class StaleDir:
    directory: PartitionDir
    reason: str


@dataclass
class LogDirReport:
    cluster_id: str | None
    compared_with: str | None  # captured_at of the snapshot the IDs were compared with
    directories: list[PartitionDir]
    stale: list[StaleDir]

    def topics_on_disk(self) -> dict[str, set[str | None]]:
        found: dict[str, set[str | None]] = {}
        for d in self.directories:
            if d.kind == "live":
                found.setdefault(d.topic, set()).add(d.topic_id)
        return found

    def to_json(self) -> dict:
        return {
            "cluster_id": self.cluster_id,
            "compared_with_snapshot": self.compared_with,
            "topics": {name: sorted(i or "" for i in ids)
                       for name, ids in sorted(self.topics_on_disk().items())},
            "stale": [{"path": s.directory.path, "topic": s.directory.topic,
                       "partition": s.directory.partition, "topic_id": s.directory.topic_id,
                       "reason": s.reason} for s in self.stale],
        }


def read_partition_metadata(path: Path | str) -> str:
    """The canonical topic ID in a ``partition.metadata`` file (Kafka's reader rules)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PartitionMetadataError(f"{path}: cannot read ({exc})") from None
    if len(lines) < 2:
        raise PartitionMetadataError(f"{path}: expected 'version: 0' and 'topic_id: <id>' lines")
    version = _SPACES_AFTER_COLON.split(lines[0])
    if len(version) != 2 or version[0] != "version" or not version[1].strip().isdigit():
        raise PartitionMetadataError(f"{path}:1: malformed line {lines[0]!r}")
    topic = _SPACES_AFTER_COLON.split(lines[1])
    if len(topic) != 2 or topic[0] != "topic_id":
        raise PartitionMetadataError(f"{path}:2: malformed line {lines[1]!r}")
    try:
        value = tid.canonical(topic[1].strip())
    except tid.TopicIdError as exc:
        raise PartitionMetadataError(f"{path}:2: {exc}") from None
    if value == tid.ZERO_UUID:
        raise PartitionMetadataError(f"{path}:2: the zero topic ID is not valid here")
    return value


def list_partition_dirs(log_dirs: Iterable[Path | str]) -> list[PartitionDir]:
    """Every partition directory of the given broker log directories."""
    found: list[PartitionDir] = []
    for raw in log_dirs:
        log_dir = Path(raw)
        if not log_dir.is_dir():
            raise PartitionMetadataError(f"{log_dir}: not a directory (give broker log.dirs)")
        for child in sorted(log_dir.iterdir()):
            if not child.is_dir():
                continue
            suffixed = _SUFFIXED.match(child.name)
            live = _LIVE.match(child.name)
            if suffixed:
                topic, partition, kind = suffixed.group(1), int(suffixed.group(2)), suffixed.group(4)
            elif live:
                topic, partition, kind = live.group(1), int(live.group(2)), "live"
            else:
                continue
            if topic == "__cluster_metadata":
                continue
            topic_id, problem = None, None
            metadata = child / METADATA_FILE
            if metadata.is_file():
                try:
                    topic_id = read_partition_metadata(metadata)
                except PartitionMetadataError as exc:
                    problem = str(exc)
            found.append(PartitionDir(str(log_dir), str(child), topic, partition, kind,
                                      topic_id, problem))
    return found


def scan(log_dirs: Iterable[Path | str], *, live_ids: dict[str, str] | None = None,
         cluster_id: str | None = None, compared_with: str | None = None) -> LogDirReport:
    """Classify partition directories; ``live_ids`` maps topic name to its current ID."""
    directories = list_partition_dirs(log_dirs)
    stale: list[StaleDir] = []
    ids_by_name: dict[str, set[str]] = {}
    for d in directories:
        if d.kind == "live" and d.topic_id:
            ids_by_name.setdefault(d.topic, set()).add(d.topic_id)
    for d in directories:
        if d.kind == "delete":
            stale.append(StaleDir(d, "renamed for deletion; Kafka removes it after "
                                     "file.delete.delay.ms, so one that stays is left over"))
        elif d.kind == "stray":
            stale.append(StaleDir(d, "stray: the broker found this partition is no longer "
                                     "assigned to it; safe to delete once verified"))
        elif d.kind != "live":
            continue  # -future: a replica being moved between log directories
        elif d.problem:
            stale.append(StaleDir(d, f"unreadable partition.metadata ({d.problem})"))
        elif live_ids is not None and d.topic_id:
            current = live_ids.get(d.topic)
            if current is None:
                stale.append(StaleDir(d, f"topic {d.topic!r} does not exist in the latest "
                                         "snapshot: data of a deleted incarnation"))
            elif current != d.topic_id:
                stale.append(StaleDir(d, f"holds topic ID {d.topic_id}, but the live "
                                         f"{d.topic!r} is {current}: data of an older "
                                         "incarnation"))
        elif live_ids is None and d.topic_id and len(ids_by_name.get(d.topic, ())) > 1:
            stale.append(StaleDir(d, f"directories of {d.topic!r} hold different topic IDs "
                                     f"({', '.join(sorted(ids_by_name[d.topic]))}); one of "
                                     "them is an older incarnation"))
    return LogDirReport(cluster_id, compared_with, directories, stale)


def live_ids_from_store(cluster: str) -> tuple[dict[str, str], str] | None:
    """Name -> ID of the newest stored complete snapshot of ``cluster``, and its time."""
    from topic_lineage import store
    from topic_lineage.snapshot import format_timestamp

    runs = [r for r in store.read_runs(cluster) if r["complete"]]
    if not runs:
        return None
    latest = runs[-1]
    snap = store.read_snapshot(Path(latest["path"]))
    ids = {t.name: t.topic_id for t in snap.topics if t.topic_id}
    return ids, format_timestamp(snap.captured_at)
