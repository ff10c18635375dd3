"""Snapshots: one read of one cluster's topic metadata at one instant.

This module holds the snapshot model and the strict reader/writer of the JSON Lines interchange
format (contract: "Snapshot interchange format"). Live captures and every importer produce
:class:`Snapshot` objects; :mod:`topic_lineage.store` persists them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from topic_lineage import topic_id as tid
from topic_lineage.errors import TopicLineageError

# Kafka's own rule (org.apache.kafka.common.internals.Topic): 1-249 chars of [a-zA-Z0-9._-],
# and not "." or "..".
TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
ERROR_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")

SNAPSHOT_FIELDS = ("cluster_id", "cluster_alias", "captured_at", "complete", "topics")
# Consumer lineage (contract R8-R10): optional; a record without them says nothing about groups.
GROUP_SNAPSHOT_FIELDS = ("groups_complete", "groups")
GROUP_FIELDS = ("group_id", "state", "error", "offsets")
OFFSET_FIELDS = ("topic", "partition", "committed_offset", "log_end_offset")
MAX_OFFSET = 2**63 - 1  # Kafka offsets are int64
TOPIC_FIELDS = (
    "name",
    "topic_id",
    "partition_count",
    "replication_factor",
    "is_internal",
    "error",
)


class SnapshotFormatError(TopicLineageError, ValueError):
    """A snapshot record is invalid. ``location`` names file and line, ``field`` the field."""

    def __init__(self, message: str, *, location: str = "", field: str = ""):
        self.location = location
        self.field = field
        self.reason = message
        where = location + (f": field '{field}'" if field else "")
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True)
class TopicObservation:
    """One topic as one snapshot saw it. ``topic_id`` is canonical or ``None`` (no ID)."""

    name: str
    topic_id: str | None
    partition_count: int | None
    replication_factor: int | None
    is_internal: bool | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic_id": self.topic_id,
            "partition_count": self.partition_count,
            "replication_factor": self.replication_factor,
            "is_internal": self.is_internal,
            "error": self.error,
        }


@dataclass(frozen=True)
class GroupOffset:
    """One committed offset of a group, with the partition's log end offset read in the same
    capture (``None`` when it could not be read)."""

    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "committed_offset": self.committed_offset,
            "log_end_offset": self.log_end_offset,
        }


@dataclass(frozen=True)
class GroupObservation:
    """One consumer group as one snapshot saw it. ``error`` is the Kafka error name when its
    description or offsets could not be read: then nothing is concluded about it (R10)."""

    group_id: str
    state: str | None
    error: str | None
    offsets: tuple[GroupOffset, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "state": self.state,
            "error": self.error,
            "offsets": [o.to_json() for o in sorted(self.offsets, key=lambda o: (o.topic, o.partition))],
        }


@dataclass(frozen=True)
class Snapshot:
    """One snapshot. ``captured_at`` is timezone-aware UTC with microsecond precision.

    ``authoritative`` marks snapshots replayed from the KRaft metadata log (exact state, exempt
    from the mass-deletion hold R3); it is not part of the interchange format.

    ``groups_complete`` is ``None`` when the snapshot says nothing about consumer groups (no
    capture of them, or a format without them); otherwise whether the group listing saw every
    group, and ``groups`` holds what it saw.
    """

    cluster_id: str
    cluster_alias: str
    captured_at: datetime
    complete: bool
    topics: tuple[TopicObservation, ...]
    authoritative: bool = field(default=False, compare=False)
    groups_complete: bool | None = None
    groups: tuple[GroupObservation, ...] = ()

    @property
    def error_topic_count(self) -> int:
        return sum(1 for t in self.topics if t.error is not None)

    def topic_ids(self) -> dict[str, str]:
        """``{name: canonical ID}`` like Kafka's ``Cluster.topicIds()``; names without an ID
        (or whose describe failed) are left out."""
        return {t.name: t.topic_id for t in self.topics if t.topic_id is not None}

    def topic_id(self, name: str) -> str:
        """The topic's canonical ID, or ZERO_UUID for unknown names and names without an ID,
        like Kafka's ``Cluster.topicId(name)``."""
        return self.topic_ids().get(name, tid.ZERO_UUID)

    def to_json(self) -> dict[str, Any]:
        record = {
            "cluster_id": self.cluster_id,
            "cluster_alias": self.cluster_alias,
            "captured_at": format_timestamp(self.captured_at),
            "complete": self.complete,
            "topics": [t.to_json() for t in sorted(self.topics, key=lambda t: t.name)],
        }
        # Absent, not null, when there is no group information: a snapshot stored before
        # consumer lineage keeps its content hash, so importing it again stays a no-op.
        if self.groups_complete is not None:
            record["groups_complete"] = self.groups_complete
            record["groups"] = [g.to_json() for g in sorted(self.groups, key=lambda g: g.group_id)]
        return record

    def to_json_line(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=False)

    def content_hash(self) -> str:
        """Hash of everything that makes two snapshots the same (not where it came from)."""
        body = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(body.encode("utf-8")).hexdigest()


def format_timestamp(value: datetime) -> str:
    """ISO 8601 UTC with a ``Z`` suffix; microseconds only when present."""
    value = value.astimezone(UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}"
    return text + "Z"


def compact_timestamp(value: datetime) -> str:
    """File-name form of a timestamp: ``20261101T000000.000000Z`` (sorts chronologically)."""
    return value.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def parse_timestamp(value: Any, *, location: str = "", field_name: str = "captured_at") -> datetime:
    """A timezone-aware ISO 8601 timestamp, normalised to UTC. Naive timestamps are refused."""
    if not isinstance(value, str):
        raise SnapshotFormatError(
            f"expected an ISO 8601 timestamp string, got {type(value).__name__}",
            location=location,
            field=field_name,
        )
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise SnapshotFormatError(
            f"not an ISO 8601 timestamp: {value!r}", location=location, field=field_name
        ) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise SnapshotFormatError(
            f"timestamp {value!r} has no time zone; write it in UTC, e.g. '2026-11-01T00:00:00Z'",
            location=location,
            field=field_name,
        )
    return parsed.astimezone(UTC)


def _require(record: dict, name: str, kind: type | tuple, location: str, *, nullable=False):
    if name not in record:
        raise SnapshotFormatError("missing", location=location, field=name)
    value = record[name]
    if value is None and nullable:
        return None
    # bool is an int subclass: an int field must not accept true/false.
    if isinstance(value, bool) and kind is int:
        raise SnapshotFormatError(f"expected an integer, got {value!r}", location=location, field=name)
    if not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SnapshotFormatError(
            f"expected {expected}{' or null' if nullable else ''}, got {json.dumps(value)}",
            location=location,
            field=name,
        )
    return value


def _unknown_fields(record: dict, allowed: tuple[str, ...], location: str, prefix: str = ""):
    extra = sorted(set(record) - set(allowed))
    if extra:
        raise SnapshotFormatError(
            f"unknown field(s) {', '.join(extra)}; allowed: {', '.join(allowed)}",
            location=location,
            field=prefix + extra[0],
        )


def parse_topic(record: Any, *, location: str, index: int) -> TopicObservation:
    prefix = f"topics[{index}]."
    if not isinstance(record, dict):
        raise SnapshotFormatError("expected an object", location=location, field=f"topics[{index}]")
    _unknown_fields(record, TOPIC_FIELDS, location, prefix)

    def req(name, kind, nullable=False):
        try:
            return _require(record, name, kind, location, nullable=nullable)
        except SnapshotFormatError as exc:
            raise SnapshotFormatError(exc.reason, location=location, field=prefix + name) from None

    name = req("name", str)
    if not TOPIC_NAME_RE.match(name) or name in (".", ".."):
        raise SnapshotFormatError(
            f"{name!r} is not a legal Kafka topic name (1-249 characters of a-z A-Z 0-9 . _ -)",
            location=location,
            field=prefix + "name",
        )
    raw_id = req("topic_id", (str, int), nullable=True)
    try:
        topic_id = tid.canonical_or_none(raw_id)
    except tid.TopicIdError as exc:
        raise SnapshotFormatError(str(exc), location=location, field=prefix + "topic_id") from None
    error = req("error", str, nullable=True)
    if error is not None and not ERROR_NAME_RE.match(error):
        raise SnapshotFormatError(
            f"{error!r} is not a Kafka error name such as TOPIC_AUTHORIZATION_FAILED",
            location=location,
            field=prefix + "error",
        )
    # A topic whose describe failed is present with unknown attributes: they may be null.
    nullable = error is not None
    partitions = req("partition_count", int, nullable=nullable)
    replication = req("replication_factor", int, nullable=nullable)
    internal = req("is_internal", bool, nullable=nullable)
    for label, number in (("partition_count", partitions), ("replication_factor", replication)):
        if number is not None and not 0 <= number <= 2**31 - 1:
            raise SnapshotFormatError(
                f"{number} is out of range", location=location, field=prefix + label
            )
    return TopicObservation(name, topic_id, partitions, replication, internal, error)


def _int_field(record: dict, name: str, location: str, field_name: str, *, nullable=False,
               maximum: int = MAX_OFFSET) -> int | None:
    try:
        value = _require(record, name, int, location, nullable=nullable)
    except SnapshotFormatError as exc:
        raise SnapshotFormatError(exc.reason, location=location, field=field_name) from None
    if value is not None and not 0 <= value <= maximum:
        raise SnapshotFormatError(
            f"{value} is out of range (0 to {maximum})", location=location, field=field_name
        )
    return value


def parse_group_offset(record: Any, *, location: str, prefix: str) -> GroupOffset:
    if not isinstance(record, dict):
        raise SnapshotFormatError("expected an object", location=location, field=prefix.rstrip("."))
    _unknown_fields(record, OFFSET_FIELDS, location, prefix)
    try:
        topic = _require(record, "topic", str, location)
    except SnapshotFormatError as exc:
        raise SnapshotFormatError(exc.reason, location=location, field=prefix + "topic") from None
    if not TOPIC_NAME_RE.match(topic) or topic in (".", ".."):
        raise SnapshotFormatError(
            f"{topic!r} is not a legal Kafka topic name", location=location, field=prefix + "topic"
        )
    return GroupOffset(
        topic,
        _int_field(record, "partition", location, prefix + "partition", maximum=2**31 - 1),
        _int_field(record, "committed_offset", location, prefix + "committed_offset"),
        _int_field(record, "log_end_offset", location, prefix + "log_end_offset", nullable=True),
    )


def parse_group(record: Any, *, location: str, index: int) -> GroupObservation:
    prefix = f"groups[{index}]."
    if not isinstance(record, dict):
        raise SnapshotFormatError("expected an object", location=location, field=f"groups[{index}]")
    _unknown_fields(record, GROUP_FIELDS, location, prefix)

    def req(name, kind, nullable=False):
        try:
            return _require(record, name, kind, location, nullable=nullable)
        except SnapshotFormatError as exc:
            raise SnapshotFormatError(exc.reason, location=location, field=prefix + name) from None

    group_id = req("group_id", str)
    if not group_id:
        raise SnapshotFormatError("must not be empty", location=location, field=prefix + "group_id")
    state = req("state", str, nullable=True)
    error = req("error", str, nullable=True)
    if error is not None and not ERROR_NAME_RE.match(error):
        raise SnapshotFormatError(
            f"{error!r} is not a Kafka error name such as GROUP_AUTHORIZATION_FAILED",
            location=location,
            field=prefix + "error",
        )
    offsets = tuple(
        parse_group_offset(o, location=location, prefix=f"{prefix}offsets[{i}].")
        for i, o in enumerate(req("offsets", list))
    )
    seen: set[tuple[str, int]] = set()
    for i, offset in enumerate(offsets):
        if (offset.topic, offset.partition) in seen:
            raise SnapshotFormatError(
                f"partition {offset.topic}-{offset.partition} appears twice in one group",
                location=location,
                field=f"{prefix}offsets[{i}].partition",
            )
        seen.add((offset.topic, offset.partition))
    return GroupObservation(group_id, state, error, offsets)


def parse_groups(record: dict, *, location: str) -> tuple[bool | None, tuple[GroupObservation, ...]]:
    """The optional consumer-group fields: ``(None, ())`` when the record has neither."""
    if "groups_complete" not in record and "groups" not in record:
        return None, ()
    if "groups_complete" not in record:
        raise SnapshotFormatError(
            "missing: a snapshot with 'groups' must say whether the group listing was complete",
            location=location,
            field="groups_complete",
        )
    groups_complete = _require(record, "groups_complete", bool, location)
    groups_raw = _require(record, "groups", list, location) if "groups" in record else []
    groups = tuple(parse_group(g, location=location, index=i) for i, g in enumerate(groups_raw))
    seen: set[str] = set()
    for i, group in enumerate(groups):
        if group.group_id in seen:
            raise SnapshotFormatError(
                f"group {group.group_id!r} appears twice in one snapshot",
                location=location,
                field=f"groups[{i}].group_id",
            )
        seen.add(group.group_id)
    return groups_complete, groups


def parse_snapshot(record: Any, *, location: str = "") -> Snapshot:
    """Validate one interchange record (a decoded JSON object) into a :class:`Snapshot`."""
    if not isinstance(record, dict):
        raise SnapshotFormatError("a snapshot must be a JSON object", location=location)
    _unknown_fields(record, SNAPSHOT_FIELDS + GROUP_SNAPSHOT_FIELDS, location)
    cluster_id = _require(record, "cluster_id", str, location)
    if not cluster_id.strip():
        raise SnapshotFormatError("must not be empty", location=location, field="cluster_id")
    alias = _require(record, "cluster_alias", str, location)
    if not alias.strip():
        raise SnapshotFormatError("must not be empty", location=location, field="cluster_alias")
    if "captured_at" not in record:
        raise SnapshotFormatError("missing", location=location, field="captured_at")
    captured_at = parse_timestamp(record["captured_at"], location=location)
    complete = _require(record, "complete", bool, location)
    topics_raw = _require(record, "topics", list, location)
    topics = tuple(parse_topic(t, location=location, index=i) for i, t in enumerate(topics_raw))
    seen: set[str] = set()
    for i, topic in enumerate(topics):
        if topic.name in seen:
            raise SnapshotFormatError(
                f"topic {topic.name!r} appears twice in one snapshot",
                location=location,
                field=f"topics[{i}].name",
            )
        seen.add(topic.name)
    groups_complete, groups = parse_groups(record, location=location)
    return Snapshot(cluster_id, alias, captured_at, complete, topics,
                    groups_complete=groups_complete, groups=groups)


def iter_jsonl(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line, streamed (bounded memory for huge files)."""
    with open(path, "r", encoding="utf-8", errors="strict") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, line


def scan_jsonl(path: Path | str) -> Iterator[tuple[str, Snapshot]]:
    """Stream (location, snapshot) for each line of an interchange file, validating as it goes.

    Raises :class:`SnapshotFormatError` naming file, line and field at the first invalid line.
    Memory stays bounded by one line, so huge files can be checked before anything is stored.
    """
    path = Path(path)
    if not path.is_file():
        raise SnapshotFormatError("no such file", location=str(path))
    try:
        for number, line in iter_jsonl(path):
            location = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SnapshotFormatError(
                    f"bad JSON: {exc.msg} at column {exc.colno}", location=location
                ) from None
            yield location, parse_snapshot(record, location=location)
    except UnicodeDecodeError as exc:
        raise SnapshotFormatError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start})", location=str(path)
        ) from None


def check_jsonl(path: Path | str) -> dict[tuple[str, datetime], str]:
    """Validate a whole interchange file; return ``{(cluster_id, captured_at): content_hash}``.

    Identical duplicate lines are allowed; two different snapshots for one
    ``(cluster_id, captured_at)`` are an error naming both lines.
    """
    seen: dict[tuple[str, datetime], tuple[str, str]] = {}
    for location, snap in scan_jsonl(path):
        key = (snap.cluster_id, snap.captured_at)
        digest = snap.content_hash()
        if key in seen and seen[key][1] != digest:
            raise SnapshotFormatError(
                f"conflicts with {seen[key][0]}: same cluster_id and captured_at, different content",
                location=location,
                field="captured_at",
            )
        seen.setdefault(key, (location, digest))
    return {key: digest for key, (_, digest) in seen.items()}


def read_jsonl(path: Path | str) -> list[Snapshot]:
    """All distinct snapshots of an interchange file (for small files; see :func:`scan_jsonl`)."""
    check_jsonl(path)
    unique: dict[tuple[str, datetime], Snapshot] = {}
    for _, snap in scan_jsonl(path):
        unique.setdefault((snap.cluster_id, snap.captured_at), snap)
    return list(unique.values())


def write_jsonl(snapshots: Iterable[Snapshot], path: Path | str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(snap.to_json_line() + "\n" for snap in snapshots)
