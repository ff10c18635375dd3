"""Importers: topic history from Kafka's own files, converted into :class:`Snapshot` objects.

Every format is read and validated whole (all files) before anything is stored; then the
snapshots go through the normal path, ``store.save_all(snapshots, source="import:<format>")``.
A damaged input stores nothing, and the error names the file and the position in it.

Formats (``topic-lineage import --format FORMAT PATH...``):

* ``jsonl``: the snapshot interchange format;
* ``kraft-log``: KRaft ``__cluster_metadata`` segments (``*.log``) and snapshots
  (``*.checkpoint``), or their directory;
* ``kraft-dump``: the text of ``kafka-dump-log.sh --cluster-metadata-decoder --files ...``;
* ``kafka-topics``: ``kafka-topics.sh --describe`` captures, one file per capture.

``partition.metadata`` files are reported by ``topic-lineage scan-logdirs`` instead (see
:mod:`topic_lineage.importers.partition_metadata` for why they are not snapshots).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from topic_lineage.errors import TopicLineageError
from topic_lineage.snapshot import Snapshot, format_timestamp


class UnknownFormatError(TopicLineageError, ValueError):
    """``--format`` names no importer."""


class ImportInputError(TopicLineageError, ValueError):
    """The inputs of an import are unusable as a whole (e.g. two files disagree)."""


@dataclass(frozen=True)
class ImportFormat:
    name: str
    description: str
    read: Callable[..., list[Snapshot]]


def _read_jsonl(paths: Sequence[Path], cluster_id=None, cluster_alias=None,
                **_) -> list[Snapshot]:
    from topic_lineage.snapshot import read_jsonl

    return [snap for path in paths for snap in read_jsonl(path)]


def resolve_cluster_id(value: str | None, paths: Sequence[Path]) -> str:
    """``--cluster-id``: an ID, or a path to ``meta.properties``; else the one beside the inputs."""
    from topic_lineage.importers.kraft.identity import find_meta_properties, read_meta_properties

    if value:
        candidate = Path(value)
        if candidate.is_file():
            return read_meta_properties(candidate)
        return value
    found = find_meta_properties(paths)
    if found is None:
        raise ImportInputError(
            "the cluster ID is unknown: pass --cluster-id ID (or the path of the cluster's "
            "meta.properties); none was found beside the inputs")
    return read_meta_properties(found)


def _read_kraft(paths: Sequence[Path], cluster_id=None, cluster_alias=None, *,
                text: bool, notes=None, **_) -> list[Snapshot]:
    from topic_lineage.importers import kraft

    cluster = resolve_cluster_id(cluster_id, paths)
    return kraft.load(list(paths), text=text, cluster_id=cluster,
                      cluster_alias=cluster_alias or cluster, notes=notes)


def _read_kafka_topics(paths: Sequence[Path], cluster_id=None, cluster_alias=None,
                       complete=False, notes=None) -> list[Snapshot]:
    from topic_lineage.importers.kafka_topics import read_capture

    return [read_capture(p, cluster_id=cluster_id, cluster_alias=cluster_alias,
                         complete=complete, notes=notes) for p in paths]


def _partition_metadata(paths, **_) -> list[Snapshot]:
    raise UnknownFormatError(
        "partition.metadata files are not imported as snapshots (a log directory holds only "
        "some partitions, without trustworthy partition counts); run "
        "'topic-lineage scan-logdirs DIR...' to list the topic IDs on disk and stale directories")


FORMATS: dict[str, ImportFormat] = {
    f.name: f
    for f in (
        ImportFormat("jsonl", "snapshot interchange format (JSON Lines)", _read_jsonl),
        ImportFormat("kraft-log", "KRaft __cluster_metadata segments (*.log) and snapshots "
                     "(*.checkpoint), or their directory",
                     lambda paths, **kw: _read_kraft(paths, text=False, **kw)),
        ImportFormat("kraft-dump", "text of kafka-dump-log.sh --cluster-metadata-decoder",
                     lambda paths, **kw: _read_kraft(paths, text=True, **kw)),
        ImportFormat("kafka-topics", "kafka-topics.sh --describe captures, one file each",
                     _read_kafka_topics),
        ImportFormat("partition-metadata", "not a snapshot format: see scan-logdirs",
                     _partition_metadata),
    )
}


def get_format(name: str) -> ImportFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise UnknownFormatError(
            f"unknown import format {name!r}; formats: {', '.join(FORMATS)}") from None


COMPLETE_DECLARABLE = ("kafka-topics",)
"""Formats whose files may cover part of a cluster: complete only when the user says so."""


def read_files(fmt: str, paths: Sequence[Path | str], *, cluster_id: str | None = None,
               cluster_alias: str | None = None, complete: bool = False,
               notes: list[str] | None = None) -> list[Snapshot]:
    """Convert and validate every input; distinct snapshots, oldest first. Stores nothing.

    ``complete`` declares that each file covers the whole cluster (``kafka-topics`` only).
    What was skipped or not applied is appended to ``notes``, one sentence per item.
    """
    importer = get_format(fmt)
    files = [Path(p) for p in paths]
    if not files:
        raise ImportInputError("no input files given")
    if complete and fmt not in COMPLETE_DECLARABLE:
        raise ImportInputError(
            f"--complete applies to {', '.join(COMPLETE_DECLARABLE)} only: a {fmt} input "
            "carries its own completeness")
    snapshots = importer.read(files, cluster_id=cluster_id, cluster_alias=cluster_alias,
                              complete=complete, notes=notes)
    return deduplicate(snapshots)


def deduplicate(snapshots: Sequence[Snapshot]) -> list[Snapshot]:
    """Drop identical repeats; two different snapshots for one cluster and instant are an error."""
    unique: dict[tuple[str, datetime], Snapshot] = {}
    for snap in snapshots:
        key = (snap.cluster_id, snap.captured_at)
        other = unique.get(key)
        if other is None:
            unique[key] = snap
        elif other.content_hash() != snap.content_hash():
            raise ImportInputError(
                f"two different snapshots of cluster {snap.cluster_id!r} at "
                f"{format_timestamp(snap.captured_at)} among the inputs; nothing was imported")
    return sorted(unique.values(), key=lambda s: (s.cluster_id, s.captured_at))


def import_files(fmt: str, paths: Sequence[Path | str], *, cluster_id: str | None = None,
                 cluster_alias: str | None = None, complete: bool = False,
                 notes: list[str] | None = None):
    """Read, validate and store; returns the :class:`store.IngestResult`."""
    from topic_lineage import store

    snapshots = read_files(fmt, paths, cluster_id=cluster_id, cluster_alias=cluster_alias,
                           complete=complete, notes=notes)
    return store.save_all(snapshots, source=f"import:{fmt}")


__all__ = [
    "FORMATS",
    "ImportFormat",
    "ImportInputError",
    "UnknownFormatError",
    "deduplicate",
    "get_format",
    "import_files",
    "read_files",
    "resolve_cluster_id",
]
