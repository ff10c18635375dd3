"""Snapshots from ``kafka-topics.sh --describe`` output saved over time (one file per capture).

The line format is ``TopicCommand.TopicDescription.printDescription`` and
``PartitionDescription.printDescription`` (apache/kafka ``tools/.../TopicCommand.java``)::

    Topic: orders\tTopicId: b8tRS7h4TJ2Vt43Dp85v2A\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: cleanup.policy=compact
    \tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tElr: N/A\tLastKnownElr: N/A

Fields are read by their names, whatever the whitespace between them: saved output often has
its tabs turned into spaces (documentation pages, issue trackers, terminal copies).
``TopicId`` is left out when the cluster reports none (clusters before KIP-516, or ZERO_UUID),
and Kafka releases before 2.2 printed ``Topic:orders`` without the space; both are read.
``MarkedForDeletion: true`` (ZooKeeper clusters) still counts as present: the topic exists
until the controller has deleted it.

Capture time, in this order: a header line ``# captured_at: 2026-11-01T00:00:00Z``, else an
ISO 8601 UTC timestamp in the file name (``describe-2026-11-01T00:00:00Z.txt``,
``2026-11-01T00-00-00Z.txt`` or ``20261101T000000Z.txt``), else the file is refused. Optional
headers ``# cluster_id: ...`` and ``# cluster_alias: ...`` override ``--cluster-id`` and
``--cluster-alias``. Other ``#`` lines are comments.

Completeness: most saved captures are ``--describe --topic X``, so a file is stored as
``complete: false`` (it deletes nothing) unless the user declares that it covers the whole
cluster, with the header line ``# complete: true`` or ``topic-lineage import --complete`` (the
header wins). A file without any topic line is incomplete even when declared complete (an
empty capture is far more often a failed run than an empty cluster).

Log lines that the tools print among the output when it is captured with ``2>&1``
(``[2025-01-06 08:18:26,460] WARN [AdminClient clientId=adminclient-1] ...`` from 3.8+ clients,
``[...] INFO ... (org.apache.zookeeper.ZooKeeper)`` from old ``--zookeeper`` tools: the log4j
pattern ``[%d] %p %m (%c)``) are skipped and counted; a capture declared complete whose tool
logged an ``ERROR`` or ``FATAL`` line is refused. Any other unrecognised line refuses the file.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from topic_lineage import topic_id as tid
from topic_lineage.errors import TopicLineageError
from topic_lineage.importers.kraft.model import INTERNAL_TOPICS
from topic_lineage.snapshot import (
    TOPIC_NAME_RE,
    Snapshot,
    SnapshotFormatError,
    TopicObservation,
    parse_timestamp,
)


class DescribeFormatError(TopicLineageError, ValueError):
    """A ``kafka-topics.sh --describe`` capture cannot be read; names file and line."""

    def __init__(self, message: str, *, location: str):
        self.location = location
        super().__init__(f"{location}: {message}")


_HEADER = re.compile(r"^#\s*(captured_at|cluster_id|cluster_alias|complete)\s*:\s*(\S.*?)\s*$")
# Every field name TopicCommand prints (topic and partition lines, all releases), longest first
# where one is a prefix of another; a name counts only at the start or after whitespace.
_FIELD_NAMES = ("TopicId", "Topic", "PartitionCount", "ReplicationFactor", "Configs",
                "MarkedForDeletion", "Partition", "Leader", "Replicas", "Isr",
                "Adding Replicas", "Removing Replicas", "Elr", "LastKnownElr", "Offline")
_FIELD = re.compile(r"(?:^|(?<=\s))(" + "|".join(_FIELD_NAMES) + r")\s*:")
# log4j's "[%d] %p %m (%c)" (config/tools-log4j.properties), e.g.
# "[2025-01-06 08:18:26,460] WARN [AdminClient clientId=adminclient-1] ..."
_LOG_LINE = re.compile(
    r"^\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d{1,9})?\]\s+"
    r"(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL)\b")
# ISO 8601 UTC in a file name, extended or basic form, ':' optionally written as '-'.
_NAME_TIMESTAMP = re.compile(
    r"(\d{4})-?(\d{2})-?(\d{2})T(\d{2})[:-]?(\d{2})[:-]?(\d{2})(\.\d{1,6})?(Z|[+-]\d{2}:?\d{2})"
)


def captured_at_from_name(name: str) -> datetime | None:
    match = _NAME_TIMESTAMP.search(name)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    if zone != "Z" and ":" not in zone:
        zone = zone[:3] + ":" + zone[3:]
    text = f"{year}-{month}-{day}T{hour}:{minute}:{second}{fraction or ''}{zone}"
    try:
        return parse_timestamp(text)
    except SnapshotFormatError:
        return None


_TOPIC_LINE = re.compile(r"^\s*Topic\s*:")


def is_topic_line(line: str) -> bool:
    """A topic or partition line (``Topic: x ...``, ``Topic:x`` before 2.2, any indentation)."""
    return _TOPIC_LINE.match(line) is not None


def is_log_line(line: str) -> bool:
    """A log4j line of the Kafka tools (``[2025-01-06 08:18:26,460] WARN ...``)."""
    return _LOG_LINE.match(line.strip()) is not None


def _fields(line: str, location: str) -> dict[str, str]:
    """``Name: value`` fields by name; values run to the next field name, tabs or spaces."""
    text = line.strip("\r\n")
    matches = list(_FIELD.finditer(text))
    if "Configs" in [m.group(1) for m in matches]:
        # A config value may contain anything; only MarkedForDeletion follows Configs.
        at = [m.group(1) for m in matches].index("Configs")
        matches = matches[: at + 1] + [m for m in matches[at + 1 :]
                                       if m.group(1) == "MarkedForDeletion"]
    if not matches or text[: matches[0].start()].strip():
        raise DescribeFormatError(f"unrecognised line: {text.strip()[:80]!r}", location=location)
    fields: dict[str, str] = {}
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        name = match.group(1)
        if name in fields:
            raise DescribeFormatError(f"field {name} appears twice in one line",
                                      location=location)
        fields[name] = text[match.end() : following.start() if following else len(text)].strip()
    return fields


def _count(fields: dict[str, str], name: str, location: str) -> int:
    if name not in fields:
        raise DescribeFormatError(f"topic line without {name}", location=location)
    try:
        value = int(fields[name])
    except ValueError:
        raise DescribeFormatError(f"{name} is not a number: {fields[name]!r}",
                                  location=location) from None
    if value < 0:
        raise DescribeFormatError(f"{name} is negative: {value}", location=location)
    return value


def read_capture(path: Path | str, *, cluster_id: str | None = None,
                 cluster_alias: str | None = None, complete: bool = False,
                 notes: list[str] | None = None) -> Snapshot:
    """One capture file as one snapshot. Any unreadable line refuses the whole file.

    ``complete``: the user declares that the file covers the whole cluster (a ``# complete:``
    header overrides it). Skipped log lines are counted in ``notes``.
    """
    path = Path(path)
    label = str(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DescribeFormatError(f"not UTF-8 text (byte {exc.start})", location=label) from None
    except OSError as exc:
        raise DescribeFormatError(f"cannot read: {exc.strerror or exc}", location=label) from None
    headers: dict[str, str] = {}
    topics: dict[str, TopicObservation] = {}
    partitions: dict[str, set[int]] = {}
    log_lines: list[int] = []
    error_logged: str | None = None  # location of the first ERROR / FATAL log line
    for number, line in enumerate(lines, start=1):
        location = f"{label}:{number}"
        if not line.strip():
            continue
        if line.lstrip().startswith("#"):
            match = _HEADER.match(line.strip())
            if match:
                headers[match.group(1)] = match.group(2)
            continue
        log_line = _LOG_LINE.match(line.strip())
        if log_line:
            log_lines.append(number)
            if log_line.group(1) in ("ERROR", "FATAL") and error_logged is None:
                error_logged = location
            continue
        if line.startswith("Error while executing topic command"):
            raise DescribeFormatError(f"the capture failed: {line.strip()[:200]}",
                                      location=location)
        if not is_topic_line(line):
            raise DescribeFormatError(f"unrecognised line: {line.strip()[:80]!r}",
                                      location=location)
        fields = _fields(line, location)
        name = fields.get("Topic")
        if not name:
            raise DescribeFormatError(f"unrecognised line: {line.strip()[:80]!r}",
                                      location=location)
        if not TOPIC_NAME_RE.match(name) or name in (".", ".."):
            raise DescribeFormatError(f"{name!r} is not a legal Kafka topic name",
                                      location=location)
        if "Partition" in fields:  # a partition line (indented in the tool's own output)
            if name not in topics:
                raise DescribeFormatError(
                    f"partition line for {name!r} before its topic line: capture the plain "
                    "'kafka-topics.sh --describe' output (filters such as "
                    "--under-replicated-partitions leave out the topic lines)",
                    location=location)
            try:
                partitions[name].add(int(fields["Partition"]))
            except ValueError:
                raise DescribeFormatError(f"Partition is not a number: {fields['Partition']!r}",
                                          location=location) from None
            continue
        if name in topics:
            raise DescribeFormatError(f"topic {name!r} appears twice in one capture",
                                      location=location)
        try:
            topic = tid.canonical_or_none(fields.get("TopicId"))
        except tid.TopicIdError as exc:
            raise DescribeFormatError(str(exc), location=location) from None
        topics[name] = TopicObservation(
            name=name,
            topic_id=topic,
            partition_count=_count(fields, "PartitionCount", location),
            replication_factor=_count(fields, "ReplicationFactor", location),
            is_internal=name in INTERNAL_TOPICS,
        )
        partitions[name] = set()
    for name, seen in partitions.items():
        if seen and len(seen) > topics[name].partition_count:
            raise DescribeFormatError(
                f"{name!r} lists {len(seen)} partitions but PartitionCount "
                f"{topics[name].partition_count}", location=label)
    if "captured_at" in headers:
        try:
            captured_at = parse_timestamp(headers["captured_at"], location=label)
        except SnapshotFormatError as exc:
            raise DescribeFormatError(f"captured_at header: {exc.reason}", location=label) from None
    else:
        captured_at = captured_at_from_name(path.name)
        if captured_at is None:
            raise DescribeFormatError(
                "no capture time: add a header line '# captured_at: 2026-11-01T00:00:00Z' or "
                "put the UTC time in the file name, e.g. describe-2026-11-01T00-00-00Z.txt",
                location=label)
    cluster = headers.get("cluster_id") or cluster_id
    if not cluster:
        raise DescribeFormatError(
            "no cluster ID: pass --cluster-id or add a header line '# cluster_id: <id>'",
            location=label)
    alias = headers.get("cluster_alias") or cluster_alias or cluster
    declared = complete
    if "complete" in headers:
        value = headers["complete"].lower()
        if value not in ("true", "false"):
            raise DescribeFormatError(f"complete header must be true or false, got "
                                      f"{headers['complete']!r}", location=label)
        declared = value == "true"
    if declared and error_logged:
        raise DescribeFormatError(
            "declared complete, but the tool logged an error while capturing, so the capture "
            "may lack topics; import it without --complete / '# complete: true'",
            location=error_logged)
    if log_lines and notes is not None:
        shown = ", ".join(map(str, log_lines[:5])) + (", ..." if len(log_lines) > 5 else "")
        notes.append(f"{label}: skipped {len(log_lines)} log line(s) of the tool "
                     f"(line {shown})")
    return Snapshot(cluster, alias, captured_at, declared and bool(topics),
                    tuple(topics.values()))


def peek_captured_at(path: Path) -> datetime | None:
    """The capture time of a file without parsing its body (for archive range filtering)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.strip() and not line.lstrip().startswith("#"):
                    break
                match = _HEADER.match(line.strip())
                if match and match.group(1) == "captured_at":
                    try:
                        return parse_timestamp(match.group(2))
                    except SnapshotFormatError:
                        return None
    except OSError:
        return None
    return captured_at_from_name(path.name)


def looks_like_capture(path: Path) -> bool:
    """True when the first meaningful line of a file is a ``kafka-topics --describe`` line."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip() or line.lstrip().startswith("#") or is_log_line(line):
                    continue
                return is_topic_line(line)
    except OSError:
        return False
    return False
