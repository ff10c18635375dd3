"""The text that ``kafka-dump-log.sh --cluster-metadata-decoder --files <file>`` prints.

With or without ``--skip-record-metadata``; decoded into the same :class:`LogSource` objects as
the binary files. Where the facts come from:
``core/src/main/scala/kafka/tools/DumpLogSegments.scala`` (``dumpLog``: one line per record,
empty for control records under ``--skip-record-metadata``; the header ``Log starting offset:
N``, ``Starting offset: N`` before 3.3; ``printBatchLevel`` with ``count:``;
``ClusterMetadataLogMessageParser``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from topic_lineage import topic_id as tid
from topic_lineage.importers.kraft import model
from topic_lineage.importers.kraft.model import (
    LogBatch,
    LogSource,
    MetadataLogError,
    append_batch,
    missing_footer,
)

_KV = re.compile(r"(\w+): (\S+)")
_RECORD_TYPES = {
    "topicrecord": model.TOPIC_RECORD,
    "partitionrecord": model.PARTITION_RECORD,
    "partitionchangerecord": model.PARTITION_CHANGE_RECORD,
    "removetopicrecord": model.REMOVE_TOPIC_RECORD,
    "begintransactionrecord": model.BEGIN_TRANSACTION_RECORD,
    "endtransactionrecord": model.END_TRANSACTION_RECORD,
    "aborttransactionrecord": model.ABORT_TRANSACTION_RECORD,
}


def read_dump_text(path: Path) -> list[LogSource]:
    """Decode the text of ``kafka-dump-log.sh --cluster-metadata-decoder`` (one or more files)."""
    label = str(path)
    try:
        with open(path, encoding="utf-8") as handle:  # streamed: dumps can be gigabytes
            return _parse_dump_lines(handle, label)
    except UnicodeDecodeError:
        raise MetadataLogError("not UTF-8 text; is this a binary segment? use --format "
                               "kraft-log", location=label) from None
    except OSError as exc:
        raise MetadataLogError(f"cannot read: {exc.strerror or exc}", location=label) from None


def _parse_dump_lines(lines: Iterable[str], label: str) -> list[LogSource]:
    sources: list[LogSource] = []
    source: LogSource | None = None
    batch: LogBatch | None = None
    count = index_in_batch = blank_lines = 0
    with_metadata: set[int] = set()  # id() of sources printed without --skip-record-metadata

    def current_source(location: str) -> LogSource:
        nonlocal source
        if source is None:  # output without a "Dumping <file>" line: one anonymous segment
            source = LogSource(label, "segment")
            sources.append(source)
        return source

    def close_batch() -> None:
        # DumpLogSegments prints one line per record (println after each); with
        # --skip-record-metadata a control record's line is empty. Fewer lines than the batch
        # line's count: the text was cut (or edited); it cannot be replayed.
        nonlocal batch
        if batch is None:
            return
        lines_seen = index_in_batch
        if batch.is_control and index_in_batch == 0:
            lines_seen = min(blank_lines, count)
        if lines_seen != count:
            raise MetadataLogError(
                f"the batch line says count: {count}, but {lines_seen} record line(s) follow it: "
                "the dump is truncated or was edited; nothing was imported",
                location=batch.location)
        batch = None

    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        location = f"{label}:{number}"
        stripped = line.strip()
        if not stripped:
            blank_lines += 1
            continue
        if line.startswith("Dumping "):
            close_batch()
            source = LogSource(f"{label} ({line[8:].strip()})", "segment")
            sources.append(source)
        elif line.startswith(("Log starting offset: ", "Starting offset: ")):
            # "Starting offset:" is how DumpLogSegments 2.8-3.2 printed it.
            current_source(location).start_offset = _int(line.split(":", 1)[1], location)
        elif line.startswith("Snapshot end offset: "):
            match = re.match(r"Snapshot end offset: (\d+), epoch: (\d+)", line)
            if not match:
                raise MetadataLogError(f"unreadable snapshot line: {line!r}", location=location)
            src = current_source(location)
            src.kind, src.end_offset = "snapshot", int(match.group(1))
        elif line.startswith("KRaft bootstrap snapshot"):
            current_source(location).kind = "bootstrap"
        elif line.startswith("baseOffset: "):
            close_batch()
            fields = dict(_KV.findall(line))
            if fields.get("isvalid") == "false":
                raise MetadataLogError("batch reported isvalid: false (CRC mismatch): the "
                                       "segment is corrupted", location=location)
            timestamp = fields.get("CreateTime", fields.get("LogAppendTime"))
            for needed in ("lastOffset", "count", "isControl"):
                if needed not in fields:
                    raise MetadataLogError(f"batch line without {needed}: {line!r}",
                                           location=location)
            batch = LogBatch(
                _int(fields["baseOffset"], location), _int(fields["lastOffset"], location),
                _int(timestamp, location) if timestamp is not None else -1,
                fields["isControl"] == "true", location,
            )
            append_batch(current_source(location).batches, batch)
            count = _int(fields["count"], location)
            index_in_batch = blank_lines = 0
        elif line.startswith(("| offset: ", " payload: ")):
            if batch is None:
                offset = dict(_KV.findall(line)).get("offset")
                raise MetadataLogError(
                    "record lines without their batch line"
                    + (f" (first offset {offset})" if offset else "")
                    + ": a partial excerpt of a dump cannot be replayed. A replay must start at "
                    "offset 0 or at a snapshot: dump whole files with kafka-dump-log.sh "
                    "--cluster-metadata-decoder --files <every *.log, or the latest "
                    "*.checkpoint and the segments after it>", location=location)
            if index_in_batch >= count:
                raise MetadataLogError(
                    f"more record lines than the batch line's count: {count}; the dump was "
                    "edited or mixes files", location=location)
            if line.startswith("| offset: "):
                with_metadata.add(id(current_source(location)))
            _read_text_record(line, batch, index_in_batch, current_source(location), location)
            index_in_batch += 1
        elif line.startswith("Found ") and "invalid bytes at the end of" in line:
            raise MetadataLogError(
                f"kafka-dump-log reported a damaged file: {stripped!r}; nothing was imported",
                location=location)
        elif line.startswith("offset: "):
            raise MetadataLogError(
                "an index dump or a pre-v2 record batch; dump the *.log / *.checkpoint files of "
                "__cluster_metadata with --cluster-metadata-decoder", location=location)
        else:
            raise MetadataLogError(f"unrecognised line: {stripped[:80]!r}", location=location)
    close_batch()
    for src in sources:
        if src.kind == "segment" and src.start_offset is None and src.batches:
            src.start_offset = src.batches[0].base_offset
        if src.kind != "segment":
            last = src.batches[-1] if src.batches else None
            # With record metadata the footer is printed ("SnapshotFooter {...}"); with
            # --skip-record-metadata control records print empty lines, so the most the text
            # shows is that the snapshot ends with a control batch, as the footer's does.
            ends_well = last is not None and (
                last.has_footer if id(src) in with_metadata else last.is_control)
            if not ends_well:
                raise missing_footer(src.label)
    return sources


def _int(text: str | None, location: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise MetadataLogError(f"expected an integer, got {text!r}", location=location) from None


def _read_text_record(line: str, batch: LogBatch, index: int, source: LogSource,
                      location: str) -> None:
    meta, sep, payload = line.partition(" payload: ")
    fields = dict(_KV.findall(meta))
    offset = _int(fields["offset"], location) if "offset" in fields else batch.base_offset + index
    stamp = fields.get("CreateTime", fields.get("LogAppendTime"))
    timestamp = _int(stamp, location) if stamp is not None else batch.max_timestamp_ms
    if batch.is_control:
        if " SnapshotFooter " in meta:
            batch.has_footer = True
        marker = "SnapshotHeader "
        if marker in meta:
            try:
                header = json.loads(meta.split(marker, 1)[1])
                source.header_timestamp_ms = int(header["lastContainedLogTimestamp"])
            except (ValueError, KeyError, TypeError):
                raise MetadataLogError("unreadable SnapshotHeader", location=location) from None
        return
    if not sep:
        raise MetadataLogError("record line without a payload: was the dump made with "
                               "--cluster-metadata-decoder?", location=location)
    if payload.startswith("Error at "):
        raise MetadataLogError(f"kafka-dump-log could not decode this record ({payload.strip()})",
                               location=location)
    try:
        record = json.loads(payload)
        kind = str(record["type"]).replace("_", "").lower()
        data = record["data"]
    except (ValueError, KeyError, TypeError):
        raise MetadataLogError("payload is not a metadata record as JSON "
                               "({\"type\": ..., \"version\": ..., \"data\": {...}})",
                               location=location) from None
    api_key = _RECORD_TYPES.get(kind)
    if api_key is None:
        return
    try:
        batch.changes.append(_change_from_json(api_key, data, offset, timestamp))
    except (KeyError, TypeError, ValueError, tid.TopicIdError) as exc:
        raise MetadataLogError(f"{record['type']} payload is missing or has a bad field "
                               f"({exc})", location=location) from None


def _change_from_json(api_key: int, data: dict, offset: int, timestamp: int) -> model.Change:
    # Field names: MetadataJsonConverters writes each field's camelCase name.
    if api_key in model.TRANSACTION_MARKERS:
        return model.TransactionMarker(offset, timestamp, model.TRANSACTION_MARKERS[api_key])
    if api_key == model.TOPIC_RECORD:
        return model.TopicCreated(offset, timestamp, str(data["name"]),
                                  tid.canonical(data["topicId"]))
    if api_key == model.REMOVE_TOPIC_RECORD:
        return model.TopicRemoved(offset, timestamp, tid.canonical(data["topicId"]))

    def ints(name):
        value = data.get(name)
        return None if value is None else tuple(int(v) for v in value)

    topic = tid.canonical(data["topicId"])
    partition = int(data["partitionId"])
    if api_key == model.PARTITION_RECORD:
        replicas = ints("replicas")
        if replicas is None:
            raise KeyError("replicas")
        return model.PartitionSet(offset, timestamp, topic, partition, replicas,
                                  ints("addingReplicas") or ())
    return model.PartitionChanged(offset, timestamp, topic, partition, ints("replicas"),
                                  ints("addingReplicas"))

