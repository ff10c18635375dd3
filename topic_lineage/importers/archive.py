"""Archived history for a past interval: the backfill path of the snapshot DAG.

An *archive location* is a directory (searched recursively) of files in any supported format:

* ``*.jsonl`` / ``*.ndjson`` / ``*.json``: snapshot interchange files;
* ``*.log`` / ``*.checkpoint``: a KRaft metadata log directory (all files of one directory are
  one replay; the cluster ID comes from a ``meta.properties`` beside them or ``cluster_id``);
* any other text file whose first line is ``Topic: ...`` (a ``kafka-topics.sh --describe``
  capture) or ``Dumping ...`` / ``Log starting offset: ...`` / ``baseOffset: ...`` (a
  ``kafka-dump-log.sh --cluster-metadata-decoder`` dump).

Other files (``*.index``, ``*.timeindex``, ``meta.properties``, ``bootstrap.checkpoint``,
READMEs, ...) are ignored. A capture is stored as complete only when it says so itself
(``# complete: true``): an archive cannot tell ``--describe`` from ``--describe --topic X``.

A ``cluster.properties`` file (``cluster.id=...``, ``cluster.alias=...``) in a directory of the
archive names the cluster of every file below it that does not name its own (a kafka-topics
header wins over it; it wins over the ``cluster_id`` / ``cluster_alias`` arguments and, for
metadata logs, over ``meta.properties``), so one archive can hold several clusters.
:func:`snapshots_between` returns the snapshots captured in ``[start, end)``; an unreadable
archive file is an error naming it (a backfill must not silently skip history).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from pathlib import Path

from topic_lineage.errors import TopicLineageError
from topic_lineage.importers import deduplicate, resolve_cluster_id
from topic_lineage.snapshot import Snapshot

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
KRAFT_SUFFIXES = (".log", ".checkpoint")
_IGNORED_SUFFIXES = (".index", ".timeindex", ".snapshot", ".properties", ".parquet", ".md",
                     ".deleted", ".part", ".swap", ".cleaned")
_DUMP_STARTS = ("Dumping ", "Log starting offset: ", "Snapshot end offset: ", "baseOffset: ")


class ArchiveError(TopicLineageError, ValueError):
    """The archive location is unusable."""


def _first_line(path: Path) -> str:
    from topic_lineage.importers.kafka_topics import is_log_line

    try:
        with open(path, encoding="utf-8", errors="strict") as handle:
            for line in handle:
                if line.strip() and not line.lstrip().startswith("#") and not is_log_line(line):
                    return line
    except (OSError, UnicodeDecodeError):
        return ""
    return ""


def classify(path: Path) -> str | None:
    """The import format of an archive file, or ``None`` for files that are not history."""
    from topic_lineage.importers.kafka_topics import is_topic_line
    from topic_lineage.importers.kraft.model import BOOTSTRAP_CHECKPOINT

    name = path.name
    if name.startswith(".") or name.endswith(_IGNORED_SUFFIXES) or name == BOOTSTRAP_CHECKPOINT:
        return None  # bootstrap.checkpoint: metadata.version and features, never topics
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    first = _first_line(path)
    if name.endswith(KRAFT_SUFFIXES):
        # A segment starts with its 8-byte base offset; a dump saved as *.log starts with text.
        return "kraft-dump" if first.startswith(_DUMP_STARTS) else "kraft-log"
    if is_topic_line(first):
        return "kafka-topics"
    if first.startswith(_DUMP_STARTS):
        return "kraft-dump"
    return None


CLUSTER_PROPERTIES = "cluster.properties"


def _cluster_properties(path: Path) -> dict[str, str]:
    values = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{path}: cannot read ({exc})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or key.strip() not in ("cluster.id", "cluster.alias") or not value.strip():
            raise ArchiveError(f"{path}:{number}: expected cluster.id=... or cluster.alias=...")
        values[key.strip()] = value.strip()
    return values


def _identity_for(path: Path, root: Path, cluster_id: str | None,
                  cluster_alias: str | None) -> tuple[str | None, str | None]:
    """Cluster ID and alias for a file: the nearest cluster.properties, else the arguments."""
    for directory in [path.parent, *path.parent.parents]:
        candidate = directory / CLUSTER_PROPERTIES
        if candidate.is_file():
            values = _cluster_properties(candidate)
            return (values.get("cluster.id", cluster_id),
                    values.get("cluster.alias", cluster_alias))
        if directory == root:
            break
    return cluster_id, cluster_alias


def _collect(archive_dir: Path, start: datetime, end: datetime, default_id: str | None,
             default_alias: str | None) -> list[tuple[str, Snapshot]]:
    from topic_lineage.importers import kafka_topics, kraft
    from topic_lineage.snapshot import read_jsonl

    def wanted(at: datetime) -> bool:
        return start <= at < end

    found: list[tuple[str, Snapshot]] = []
    kraft_dirs: dict[Path, list[Path]] = defaultdict(list)
    for path in sorted(p for p in archive_dir.rglob("*") if p.is_file()):
        fmt = classify(path)
        cluster_id, cluster_alias = _identity_for(path, archive_dir, default_id, default_alias)
        if fmt == "jsonl":
            found.extend(("jsonl", s) for s in read_jsonl(path) if wanted(s.captured_at))
        elif fmt == "kafka-topics":
            at = kafka_topics.peek_captured_at(path)
            if at is None or wanted(at):  # None: read_capture raises the precise error
                snap = kafka_topics.read_capture(path, cluster_id=cluster_id,
                                                 cluster_alias=cluster_alias)
                if wanted(snap.captured_at):
                    found.append(("kafka-topics", snap))
        elif fmt == "kraft-dump":
            cluster = resolve_cluster_id(cluster_id, [path])
            snaps = kraft.load([path], text=True, cluster_id=cluster,
                                   cluster_alias=cluster_alias or cluster)
            found.extend(("kraft-dump", s) for s in snaps if wanted(s.captured_at))
        elif fmt == "kraft-log":
            kraft_dirs[path.parent].append(path)
    for _directory, files in sorted(kraft_dirs.items()):
        cluster_id, cluster_alias = _identity_for(files[0], archive_dir, default_id,
                                                  default_alias)
        cluster = resolve_cluster_id(cluster_id, files)
        snaps = kraft.load(files, text=False, cluster_id=cluster,
                               cluster_alias=cluster_alias or cluster)
        found.extend(("kraft-log", s) for s in snaps if wanted(s.captured_at))
    return found


def _check(archive_dir: Path | str, start: datetime, end: datetime) -> Path:
    path = Path(archive_dir)
    if not path.is_dir():
        raise ArchiveError(f"archive location {path} is not a directory")
    for label, value in (("start", start), ("end", end)):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ArchiveError(f"{label} {value.isoformat()} has no time zone; pass UTC")
    if end <= start:
        raise ArchiveError(f"empty interval: end {end.isoformat()} <= start {start.isoformat()}")
    return path


def snapshots_between(archive_dir: Path | str, start: datetime, end: datetime, *,
                      cluster_id: str | None = None,
                      cluster_alias: str | None = None) -> list[Snapshot]:
    """Snapshots in the archive captured in ``[start, end)``, oldest first, duplicates dropped.

    ``cluster_id`` / ``cluster_alias`` are used for files that carry none (kafka-topics
    captures without a ``# cluster_id:`` header, metadata logs without ``meta.properties``).
    """
    path = _check(archive_dir, start, end)
    return deduplicate([s for _, s in _collect(path, start, end, cluster_id, cluster_alias)])


def ingest_between(archive_dir: Path | str, start: datetime, end: datetime, *,
                   cluster_id: str | None = None, cluster_alias: str | None = None):
    """Store the archived snapshots of ``[start, end)`` (source ``import:<format>``).

    Everything is read and validated before anything is stored. Returns the summed
    :class:`topic_lineage.store.IngestResult`.
    """
    from topic_lineage import store

    path = _check(archive_dir, start, end)
    found = _collect(path, start, end, cluster_id, cluster_alias)
    deduplicate([s for _, s in found])  # raises on conflicting snapshots before any write
    by_format: dict[str, list[Snapshot]] = defaultdict(list)
    for fmt, snap in found:
        by_format[fmt].append(snap)
    stored = unchanged = 0
    for fmt, snaps in sorted(by_format.items()):
        result = store.save_all(deduplicate(snaps), source=f"import:{fmt}")
        stored += result.stored
        unchanged += result.unchanged
    return store.IngestResult(stored=stored, unchanged=unchanged)
