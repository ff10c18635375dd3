"""Topic history from the KRaft metadata log (``__cluster_metadata``).

Two inputs, one replay:

* the binary files of the metadata log directory: segments (``<base offset>.log``) and
  snapshots (``<end offset>-<epoch>.checkpoint``), decoded here from Kafka's on-disk format;
* the text that ``kafka-dump-log.sh --cluster-metadata-decoder --files <file>`` prints for those
  files, with or without ``--skip-record-metadata``.

Both are decoded into :class:`LogSource` objects (batches of the topic changes we need) and
replayed by :func:`replay` into one complete, authoritative :class:`Snapshot` per change.

Where the facts come from (apache/kafka):

* record batch v2 framing, attributes bits, CRC-32C coverage:
  ``clients/.../common/record/DefaultRecordBatch.java``; record framing (varints, key, value,
  headers): ``DefaultRecord.java``; varint/zig-zag: ``common/utils/ByteUtils.java``;
* control records (key = version int16 + type int16; SNAPSHOT_HEADER = 3):
  ``ControlRecordType.java``, ``ControlRecordUtils.java``, ``SnapshotHeaderRecord.json``;
* metadata record framing (unsigned varint frame version 1, api key, version, then the body):
  ``server-common/.../serialization/AbstractApiMessageSerde.java``;
* record bodies (flexible versions: compact strings/arrays, tagged fields):
  ``metadata/src/main/resources/common/metadata/TopicRecord.json`` (api key 2),
  ``PartitionRecord.json`` (3), ``PartitionChangeRecord.json`` (5), ``RemoveTopicRecord.json`` (9);
* metadata transactions (KIP-866): ``BeginTransactionRecord.json`` (23),
  ``EndTransactionRecord.json`` (24), ``AbortTransactionRecord.json`` (25), replayed as
  ``metadata/.../image/loader/MetadataBatchLoader.java`` does;
* a snapshot ends with ``SnapshotFooterRecord`` (control type 4) in a control batch of its own:
  ``ControlRecordType.java``, ``raft/.../snapshot/RecordsSnapshotWriter.java``;
* file names: ``raft/.../snapshot/Snapshots.java`` (20-digit offset, 10-digit epoch);
* text output: ``core/src/main/scala/kafka/tools/DumpLogSegments.scala`` (``dumpLog``: one
  line per record, empty for control records under ``--skip-record-metadata``; the header
  ``Log starting offset: N``, ``Starting offset: N`` before 3.3; ``printBatchLevel`` with
  ``count:``; ``ClusterMetadataLogMessageParser``);
* replication factor during a reassignment (replicas minus adding replicas) and internal topic
  names: ``tools/.../TopicCommand.java``, ``clients/.../common/internals/Topic.java``.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from topic_lineage import topic_id as tid
from topic_lineage.errors import TopicLineageError
from topic_lineage.snapshot import Snapshot, TopicObservation

# Topic.INTERNAL_TOPICS in Kafka's clients module.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = METADATA_TOPIC + "-0"

SUPPORTED_CODECS = ("none", "gzip", "zstd")
"""Batch compression codecs this reader decodes (KRaft writes uncompressed batches by default)."""

_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

# Metadata record api keys (MetadataRecordType).
TOPIC_RECORD = 2
PARTITION_RECORD = 3
PARTITION_CHANGE_RECORD = 5
REMOVE_TOPIC_RECORD = 9
BEGIN_TRANSACTION_RECORD = 23
END_TRANSACTION_RECORD = 24
ABORT_TRANSACTION_RECORD = 25
_KNOWN_VERSIONS = {TOPIC_RECORD: 0, PARTITION_RECORD: 2, PARTITION_CHANGE_RECORD: 2,
                   REMOVE_TOPIC_RECORD: 0}
_TRANSACTION_MARKERS = {BEGIN_TRANSACTION_RECORD: "begin", END_TRANSACTION_RECORD: "end",
                        ABORT_TRANSACTION_RECORD: "abort"}

SNAPSHOT_HEADER_CONTROL_TYPE = 3
SNAPSHOT_FOOTER_CONTROL_TYPE = 4

log = logging.getLogger(__name__)
_WARNED: set[tuple[int, int]] = set()

_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_CHECKPOINT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class MetadataLogError(TopicLineageError, ValueError):
    """A metadata log input cannot be read or replayed. ``location`` names file and position."""

    def __init__(self, message: str, *, location: str = ""):
        self.location = location
        self.reason = message
        super().__init__(f"{location}: {message}" if location else message)


# --- the topic changes a replay needs --------------------------------------------------------
@dataclass(frozen=True)
class TopicCreated:
    offset: int
    timestamp_ms: int
    name: str
    topic_id: str


@dataclass(frozen=True)
class TopicRemoved:
    offset: int
    timestamp_ms: int
    topic_id: str


@dataclass(frozen=True)
class PartitionSet:
    """A ``PartitionRecord``: a partition created (or restated in a snapshot)."""

    offset: int
    timestamp_ms: int
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]


@dataclass(frozen=True)
class PartitionChanged:
    """A ``PartitionChangeRecord``; ``None`` means "did not change"."""

    offset: int
    timestamp_ms: int
    topic_id: str
    partition: int
    replicas: tuple[int, ...] | None
    adding: tuple[int, ...] | None


@dataclass(frozen=True)
class TransactionMarker:
    """``BeginTransactionRecord`` / ``EndTransactionRecord`` / ``AbortTransactionRecord`` (KIP-866)."""

    offset: int
    timestamp_ms: int
    kind: str  # "begin" | "end" | "abort"


Change = TopicCreated | TopicRemoved | PartitionSet | PartitionChanged | TransactionMarker


@dataclass
class LogBatch:
    base_offset: int
    last_offset: int
    max_timestamp_ms: int
    is_control: bool
    location: str
    changes: list[Change] = field(default_factory=list)
    has_footer: bool = False  # holds a SnapshotFooterRecord (the last batch of a snapshot)


@dataclass
class LogSource:
    """One decoded file: a log segment, a snapshot (checkpoint) or the bootstrap snapshot."""

    label: str
    kind: str  # "segment" | "snapshot" | "bootstrap"
    start_offset: int | None = None  # segments: base offset
    end_offset: int | None = None  # snapshots: the snapshot's end offset (exclusive)
    header_timestamp_ms: int | None = None  # snapshots: lastContainedLogTimestamp
    batches: list[LogBatch] = field(default_factory=list)

    def snapshot_timestamp_ms(self) -> int:
        if self.header_timestamp_ms and self.header_timestamp_ms > 0:
            return self.header_timestamp_ms
        stamps = [b.max_timestamp_ms for b in self.batches if b.max_timestamp_ms >= 0]
        if not stamps or max(stamps) <= 0:
            raise MetadataLogError("snapshot has no timestamp (no SnapshotHeader time, no batch "
                                   "time)", location=self.label)
        return max(stamps)


# --- binary decoding ---------------------------------------------------------------------------
class _Reader:
    """Kafka's primitive types over a byte buffer (big-endian ints, varints, compact types)."""

    def __init__(self, data: bytes, location: str):
        self.data = data
        self.pos = 0
        self.location = location

    def fail(self, what: str) -> MetadataLogError:
        return MetadataLogError(what, location=self.location)

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"record ends early: needed {n} byte(s) at position {self.pos}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self, max_bytes: int = 5) -> int:
        value = shift = 0
        for _ in range(max_bytes):
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise self.fail(f"varint longer than {max_bytes} bytes at position {self.pos}")

    def varint(self) -> int:
        raw = self.uvarint(5)
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self) -> int:
        raw = self.uvarint(10)
        return (raw >> 1) ^ -(raw & 1)

    def uuid(self) -> str:
        return tid.canonical(self.take(16))

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("string is not UTF-8") from None

    def compact_int32_array(self) -> tuple[int, ...] | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        return struct.unpack(f">{n}i", self.take(4 * n))

    def compact_uuid_array(self) -> None:
        n = self.uvarint() - 1
        if n > 0:
            self.take(16 * n)

    def tagged_fields(self) -> dict[int, bytes]:
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.take(self.uvarint())
        return fields


def _decompress(codec: int, payload: bytes, location: str) -> bytes:
    name = _CODEC_NAMES.get(codec, f"unknown ({codec})")
    if codec == 0:
        return payload
    if codec == 1:
        import gzip
        import zlib

        try:
            return gzip.decompress(payload)
        except (OSError, EOFError, zlib.error) as exc:
            raise MetadataLogError(f"cannot decompress gzip batch: {exc}",
                                   location=location) from None
    if codec == 4:
        try:
            import zstandard
        except ImportError:
            zstandard = None
        if zstandard is not None:
            try:
                return zstandard.ZstdDecompressor().decompressobj().decompress(payload)
            except zstandard.ZstdError as exc:
                raise MetadataLogError(f"cannot decompress zstd batch: {exc}",
                                       location=location) from None
    raise MetadataLogError(
        f"batch compressed with {name}, which is not supported (supported: "
        f"{', '.join(SUPPORTED_CODECS)}); dump it with kafka-dump-log.sh "
        "--cluster-metadata-decoder and import the text with --format kraft-dump",
        location=location,
    )


def _parse_metadata_record(value: bytes, offset: int, timestamp_ms: int,
                           location: str) -> Change | None:
    """One metadata record value; ``None`` for record types a topic history does not need."""
    r = _Reader(value, location)
    frame_version = r.uvarint()
    if frame_version != 1:
        raise r.fail(f"metadata record frame version {frame_version} (only 1 exists)")
    api_key = r.uvarint()
    version = r.uvarint()
    if api_key in _TRANSACTION_MARKERS:
        # Their only field (a name or reason) is tagged: nothing else to read.
        return TransactionMarker(offset, timestamp_ms, _TRANSACTION_MARKERS[api_key])
    if api_key not in _KNOWN_VERSIONS:
        return None  # brokers, configs, features, ...: not part of a topic's history
    newer = version > _KNOWN_VERSIONS[api_key]
    if newer and (api_key, version) not in _WARNED:
        _WARNED.add((api_key, version))
        log.warning("%s: metadata record type %d version %d is newer than this reader knows "
                    "(%d); reading its leading fields only", location, api_key, version,
                    _KNOWN_VERSIONS[api_key])
    # Kafka only appends fields to newer versions, so the leading fields read the same; the
    # remainder of a version newer than ours is not checked.
    if api_key == TOPIC_RECORD:
        name = r.compact_string()
        topic = r.uuid()
        if name is None:
            raise r.fail("TopicRecord without a name")
        change: Change = TopicCreated(offset, timestamp_ms, name, topic)
    elif api_key == REMOVE_TOPIC_RECORD:
        change = TopicRemoved(offset, timestamp_ms, r.uuid())
    elif api_key == PARTITION_RECORD:
        partition = r.int32()
        topic = r.uuid()
        replicas = r.compact_int32_array()
        r.compact_int32_array()  # isr
        r.compact_int32_array()  # removing replicas
        adding = r.compact_int32_array()
        if replicas is None:
            raise r.fail("PartitionRecord with a null replica list")
        if not newer:
            r.int32(), r.int32(), r.int32()  # leader, leader epoch, partition epoch
            if version >= 1:
                r.compact_uuid_array()  # directories (KIP-858)
        change = PartitionSet(offset, timestamp_ms, topic, partition, tuple(replicas),
                              tuple(adding or ()))
    else:  # PARTITION_CHANGE_RECORD: everything after the topic ID is a tagged field
        partition = r.int32()
        topic = r.uuid()
        # Every version so far (0-2) adds tagged fields only, so a newer version is read the
        # same way: its tagged fields generically, Replicas (tag 2) and AddingReplicas (tag 4)
        # by tag. A newer version that does not have that shape is refused, never half-read.
        try:
            tags = r.tagged_fields()
            if r.remaining():
                raise r.fail(f"{r.remaining()} byte(s) after the tagged fields")
        except MetadataLogError as exc:
            if not newer:
                raise
            raise MetadataLogError(
                f"PartitionChangeRecord version {version} is newer than this reader knows "
                f"({_KNOWN_VERSIONS[api_key]}) and is not made of tagged fields only "
                f"({exc.reason}); dump the log with kafka-dump-log.sh "
                "--cluster-metadata-decoder and import the text with --format kraft-dump",
                location=location) from None
        replicas = _tagged_int32_array(tags.get(2), location)
        adding = _tagged_int32_array(tags.get(4), location)
        return PartitionChanged(offset, timestamp_ms, topic, partition, replicas, adding)
    if not newer:
        r.tagged_fields()
        if r.remaining():
            raise r.fail(f"{r.remaining()} byte(s) of garbage after metadata record type "
                         f"{api_key}")
    return change


def _tagged_int32_array(raw: bytes | None, location: str) -> tuple[int, ...] | None:
    if raw is None:
        return None
    r = _Reader(raw, location)
    values = r.compact_int32_array()
    return None if values is None else tuple(values)


# Byte layout of a v2 batch header (DefaultRecordBatch): offsets from the batch start.
_LOG_OVERHEAD = 12  # base offset (8) + batch length (4)
_MAGIC_AT = 16
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_RECORDS_AT = 61  # RECORD_BATCH_OVERHEAD
_HEADER = struct.Struct(">hiqqqhii")  # attributes .. records count, at _ATTRIBUTES_AT


def read_batches(data: bytes, label: str) -> Iterator[LogBatch]:
    """Decode every record batch of a segment or snapshot file, verifying each CRC-32C."""
    from topic_lineage.importers.crc32c import crc32c

    pos = 0
    while pos < len(data):
        location = f"{label}: batch at byte {pos}"
        if len(data) - pos < _LOG_OVERHEAD:
            raise MetadataLogError(
                f"file ends with {len(data) - pos} byte(s) that are not a complete batch "
                "(truncated copy, or a segment still being written)", location=location)
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + _LOG_OVERHEAD + length
        if length < _RECORDS_AT - _LOG_OVERHEAD:
            raise MetadataLogError(f"batch length {length} is smaller than a batch header",
                                   location=location)
        if end > len(data):
            raise MetadataLogError(
                f"batch of {length} bytes is truncated: only {len(data) - pos - _LOG_OVERHEAD} "
                "byte(s) left in the file", location=location)
        magic = data[pos + _MAGIC_AT]
        if magic != 2:
            raise MetadataLogError(f"record batch magic {magic}; the metadata log uses magic 2",
                                   location=location)
        stored_crc = struct.unpack_from(">I", data, pos + _CRC_AT)[0]
        actual_crc = crc32c(data[pos + _ATTRIBUTES_AT : end])
        if stored_crc != actual_crc:
            raise MetadataLogError(
                f"CRC-32C mismatch (stored {stored_crc}, computed {actual_crc}): the batch "
                "is corrupted", location=location)
        (attributes, last_delta, base_ts, max_ts, _pid, _epoch, _seq,
         count) = _HEADER.unpack_from(data, pos + _ATTRIBUTES_AT)
        batch = LogBatch(base_offset, base_offset + last_delta, max_ts,
                         bool(attributes & 0x20), location)
        records = _decompress(attributes & 0x07, data[pos + _RECORDS_AT : end], location)
        _read_records(records, count, batch, base_ts, location)
        yield batch
        pos = end


def _read_records(payload: bytes, count: int, batch: LogBatch, base_ts: int,
                  location: str) -> None:
    r = _Reader(payload, location)
    for index in range(count):
        size = r.varint()
        body = _Reader(r.take(size), f"{location}, record {index}")
        body.int8()  # attributes (unused)
        timestamp = base_ts + body.varlong()
        offset = batch.base_offset + body.varint()
        key_len = body.varint()
        key = body.take(key_len) if key_len >= 0 else None
        value_len = body.varint()
        value = body.take(value_len) if value_len >= 0 else None
        for _ in range(body.varint()):  # headers
            body.take(body.varint())
            header_len = body.varint()
            if header_len > 0:
                body.take(header_len)
        if body.remaining():
            raise body.fail(f"{body.remaining()} byte(s) of garbage after the record")
        where = f"{location}, offset {offset}"
        if batch.is_control:
            if key is not None and len(key) >= 4 and value is not None:
                control_type = struct.unpack(">h", key[2:4])[0]
                if control_type == SNAPSHOT_FOOTER_CONTROL_TYPE:
                    batch.has_footer = True
                if control_type == SNAPSHOT_HEADER_CONTROL_TYPE:
                    header = _Reader(value, where)
                    header.int16()  # SnapshotHeaderRecord.Version
                    batch.changes.append(_SnapshotHeader(offset, header.int64()))  # type: ignore[arg-type]
            continue
        if value is None:
            raise MetadataLogError("metadata record without a value", location=where)
        change = _parse_metadata_record(value, offset, timestamp, where)
        if change is not None:
            batch.changes.append(change)
    if r.remaining():
        raise r.fail(f"{r.remaining()} byte(s) after the batch's {count} record(s)")


@dataclass(frozen=True)
class _SnapshotHeader:
    offset: int
    last_contained_timestamp_ms: int


def _append_batch(batches: list[LogBatch], batch: LogBatch) -> None:
    """Append, folding runs of contiguous batches without topic changes into one span.

    Most of a metadata log is NoOpRecords, heartbeats' fencing changes and ISR updates: only
    their offsets matter (to detect gaps), so memory stays proportional to the topic changes.
    """
    if (len(batches) >= 2 and not batches[-1].changes and not batches[-2].changes
            and not batches[-2].is_control and not batches[-1].is_control
            and batches[-2].last_offset + 1 == batches[-1].base_offset):
        batches[-2].last_offset = batches[-1].last_offset
        batches[-2].max_timestamp_ms = max(batches[-2].max_timestamp_ms,
                                           batches[-1].max_timestamp_ms)
        batches.pop()
    batches.append(batch)


def read_binary_file(path: Path) -> LogSource:
    """Decode one ``*.log`` segment or ``*.checkpoint`` snapshot file."""
    label = str(path)
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return _read_binary(b"", path, label)
            # Mapped, not read: a metadata segment can be up to a gigabyte.
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _read_binary(data, path, label)
    except OSError as exc:
        raise MetadataLogError(f"cannot read: {exc.strerror or exc}", location=label) from None


def _read_binary(data, path: Path, label: str) -> LogSource:
    if path.name == BOOTSTRAP_CHECKPOINT:
        source = LogSource(label, "bootstrap")
    elif path.name.endswith(".checkpoint"):
        match = _CHECKPOINT_NAME.match(path.name)
        if not match:
            raise MetadataLogError(
                "a metadata snapshot must keep Kafka's file name <20-digit end offset>-"
                "<10-digit epoch>.checkpoint (it orders the snapshot among the segments)",
                location=label)
        source = LogSource(label, "snapshot", end_offset=int(match.group(1)))
    else:
        match = _SEGMENT_NAME.match(path.name)
        source = LogSource(label, "segment", start_offset=int(match.group(1)) if match else None)
    for batch in read_batches(data, label):
        headers = [c for c in batch.changes if isinstance(c, _SnapshotHeader)]
        if headers:
            source.header_timestamp_ms = headers[0].last_contained_timestamp_ms
            batch.changes = [c for c in batch.changes if not isinstance(c, _SnapshotHeader)]
        _append_batch(source.batches, batch)
    if source.kind == "segment" and source.start_offset is None and source.batches:
        source.start_offset = source.batches[0].base_offset
    if source.kind != "segment" and not (source.batches and source.batches[-1].has_footer):
        raise _missing_footer(label)
    return source


def _missing_footer(label: str) -> MetadataLogError:
    # RecordsSnapshotWriter ends every snapshot with a SnapshotFooterRecord in a control batch
    # of its own; without it the file is cut short and its topic list cannot be trusted.
    return MetadataLogError(
        "the snapshot does not end with its SnapshotFooterRecord: the file is truncated "
        "(or still being written); nothing was imported", location=label)


def expand_paths(paths: Iterable[Path | str]) -> list[Path]:
    """Files given directly, plus the ``*.log`` / ``*.checkpoint`` files of given directories.

    A ``metadata.log.dir`` root (the folder holding ``meta.properties`` and
    ``__cluster_metadata-0``) stands for its ``__cluster_metadata-0`` folder.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if (path / METADATA_PARTITION_DIR).is_dir():
            path = path / METADATA_PARTITION_DIR
        if path.is_dir():
            found = sorted(p for p in path.iterdir()
                           if p.is_file() and p.suffix in (".log", ".checkpoint"))
            if not found:
                raise MetadataLogError("directory holds no *.log or *.checkpoint files",
                                       location=str(path))
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise MetadataLogError("no such file or directory", location=str(path))
    return files


# --- text decoding (kafka-dump-log.sh --cluster-metadata-decoder) -----------------------------
_KV = re.compile(r"(\w+): (\S+)")
_RECORD_TYPES = {
    "topicrecord": TOPIC_RECORD,
    "partitionrecord": PARTITION_RECORD,
    "partitionchangerecord": PARTITION_CHANGE_RECORD,
    "removetopicrecord": REMOVE_TOPIC_RECORD,
    "begintransactionrecord": BEGIN_TRANSACTION_RECORD,
    "endtransactionrecord": END_TRANSACTION_RECORD,
    "aborttransactionrecord": ABORT_TRANSACTION_RECORD,
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
            _append_batch(current_source(location).batches, batch)
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
                raise _missing_footer(src.label)
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


def _change_from_json(api_key: int, data: dict, offset: int, timestamp: int) -> Change:
    # Field names: MetadataJsonConverters writes each field's camelCase name.
    if api_key in _TRANSACTION_MARKERS:
        return TransactionMarker(offset, timestamp, _TRANSACTION_MARKERS[api_key])
    if api_key == TOPIC_RECORD:
        return TopicCreated(offset, timestamp, str(data["name"]), tid.canonical(data["topicId"]))
    if api_key == REMOVE_TOPIC_RECORD:
        return TopicRemoved(offset, timestamp, tid.canonical(data["topicId"]))

    def ints(name):
        value = data.get(name)
        return None if value is None else tuple(int(v) for v in value)

    topic = tid.canonical(data["topicId"])
    partition = int(data["partitionId"])
    if api_key == PARTITION_RECORD:
        replicas = ints("replicas")
        if replicas is None:
            raise KeyError("replicas")
        return PartitionSet(offset, timestamp, topic, partition, replicas,
                            ints("addingReplicas") or ())
    return PartitionChanged(offset, timestamp, topic, partition, ints("replicas"),
                            ints("addingReplicas"))


# --- replay --------------------------------------------------------------------------------------
@dataclass
class _TopicState:
    name: str
    partitions: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)

    def observation(self, topic: str) -> TopicObservation:
        replicas, adding = self.partitions[min(self.partitions)] if self.partitions else ((), ())
        return TopicObservation(
            name=self.name,
            topic_id=topic,
            partition_count=len(self.partitions),
            # TopicCommand: during a reassignment the factor is replicas minus adding replicas.
            replication_factor=len(replicas) - len(adding),
            is_internal=self.name in INTERNAL_TOPICS,
        )


class _Image:
    """The topics part of the metadata image, as Kafka's TopicsDelta replays it.

    Observations are cached per topic and ``dirty`` is set only when one of them changes, so
    leader and ISR changes (most of a metadata log) cost no snapshot and no re-sort.
    """

    def __init__(self) -> None:
        self.topics: dict[str, _TopicState] = {}
        self.by_name: dict[str, str] = {}
        self.observed: dict[str, TopicObservation] = {}
        self.dirty = True

    def apply(self, change: Change, location: str) -> None:
        self._apply(change, location)
        state = self.topics.get(change.topic_id)
        new = None if state is None or state.name == METADATA_TOPIC else state.observation(
            change.topic_id)
        if self.observed.get(change.topic_id) != new:
            if new is None:
                del self.observed[change.topic_id]
            else:
                self.observed[change.topic_id] = new
            self.dirty = True

    def _apply(self, change: Change, location: str) -> None:
        if isinstance(change, TopicCreated):
            if change.topic_id in self.topics or change.name in self.by_name:
                raise MetadataLogError(
                    f"TopicRecord at offset {change.offset} creates {change.name!r} "
                    f"({change.topic_id}), but that name or ID is already live", location=location)
            if tid.is_reserved(change.topic_id):
                raise MetadataLogError(f"TopicRecord at offset {change.offset} uses the reserved "
                                       f"ID {change.topic_id}", location=location)
            self.topics[change.topic_id] = _TopicState(change.name)
            self.by_name[change.name] = change.topic_id
            return
        state = self.topics.get(change.topic_id)
        if state is None:
            raise MetadataLogError(
                f"{type(change).__name__} at offset {change.offset} refers to topic ID "
                f"{change.topic_id}, which no earlier record created; give the replay the whole "
                "log from offset 0, or start it at a snapshot (.checkpoint)", location=location)
        if isinstance(change, TopicRemoved):
            del self.topics[change.topic_id]
            del self.by_name[state.name]
        elif isinstance(change, PartitionSet):
            state.partitions[change.partition] = (change.replicas, change.adding)
        else:
            old = state.partitions.get(change.partition)
            if old is None:
                raise MetadataLogError(
                    f"PartitionChangeRecord at offset {change.offset} changes partition "
                    f"{change.partition} of {state.name!r}, which has no PartitionRecord",
                    location=location)
            state.partitions[change.partition] = (
                change.replicas if change.replicas is not None else old[0],
                change.adding if change.adding is not None else old[1],
            )

    def copy(self) -> _Image:
        other = _Image()
        other.topics = {topic: _TopicState(state.name, dict(state.partitions))
                        for topic, state in self.topics.items()}
        other.by_name = dict(self.by_name)
        other.observed = dict(self.observed)
        other.dirty = self.dirty
        return other

    def view(self) -> tuple[TopicObservation, ...]:
        self.dirty = False
        return tuple(sorted(self.observed.values(), key=lambda o: o.name))


def replay(sources: list[LogSource], cluster_id: str, cluster_alias: str,
           notes: list[str] | None = None) -> list[Snapshot]:
    """Replay decoded sources in offset order; one complete, authoritative snapshot per change.

    The replay must start at a known state: a segment beginning at offset 0, or a snapshot
    (``.checkpoint``). Records before the first snapshot are skipped when no segment starts at
    0; a later snapshot the segments already reach is skipped; a snapshot after a gap in the
    segments restarts the state from it. A gap no snapshot covers is an error.

    Metadata transactions (KIP-866) are replayed as Kafka's ``MetadataBatchLoader`` does: the
    changes between ``BeginTransactionRecord`` and ``EndTransactionRecord`` become visible at
    the end, in one snapshot; ``AbortTransactionRecord`` discards them; no snapshot is taken
    inside a transaction; changes earlier in the batch that begins one are published first.
    A transaction still open where the log ends is not applied (``notes`` says so).
    """
    steps: list[tuple[int, int, object]] = []
    for src in sources:
        if src.kind == "snapshot":
            steps.append((src.end_offset, 0, src))
        elif src.kind == "segment":
            steps.extend((b.base_offset, 1, b) for b in src.batches)
    steps.sort(key=lambda step: (step[0], step[1]))
    has_snapshot = any(kind == 0 for _, kind, _ in steps)
    emitter = _Emitter(cluster_id, cluster_alias)
    image: _Image | None = None
    before_transaction: _Image | None = None  # the image at BeginTransactionRecord, while open
    begun_at = -1
    changed_in_transaction = False
    next_offset = 0
    for offset, kind, item in steps:
        if kind == 0:
            src: LogSource = item  # type: ignore[assignment]
            if image is not None and next_offset >= offset:
                continue  # the segments already replayed past this snapshot
            image, before_transaction = _Image(), None
            for batch in src.batches:
                for change in batch.changes:
                    if not isinstance(change, TransactionMarker):
                        image.apply(change, batch.location)
            next_offset = offset
            emitter.emit(image.view(), src.snapshot_timestamp_ms(), force=True)
            continue
        batch: LogBatch = item  # type: ignore[assignment]
        if image is None:
            if batch.base_offset == 0:
                image = _Image()
            elif has_snapshot:
                continue  # before the first snapshot: no known state to apply it to
            else:
                raise MetadataLogError(
                    f"the log starts at offset {batch.base_offset}, not 0, and no snapshot "
                    "(.checkpoint) was given: a partial excerpt of the log cannot be replayed "
                    "(the topics created before it are unknown). Give the whole log from "
                    "offset 0, or add the latest *.checkpoint file of the metadata log directory",
                    location=batch.location)
        if batch.last_offset < next_offset:
            continue  # overlapping copies of the same offsets
        if batch.base_offset > next_offset:
            raise MetadataLogError(
                f"offsets {next_offset}..{batch.base_offset - 1} are missing (a segment was not "
                "given, and no snapshot covers the gap)", location=batch.location)
        stamp = None
        for change in batch.changes:
            if change.offset < next_offset:
                continue
            if not isinstance(change, TransactionMarker):
                image.apply(change, batch.location)
                stamp = change.timestamp_ms
                if before_transaction is not None:
                    changed_in_transaction = True
            elif change.kind == "begin":
                if before_transaction is not None:
                    raise MetadataLogError(
                        f"BeginTransactionRecord at offset {change.offset} inside the "
                        f"transaction begun at offset {begun_at}", location=batch.location)
                if stamp is not None and image.dirty:
                    emitter.emit(image.view(), stamp)  # what precedes it is committed
                before_transaction, begun_at, stamp = image.copy(), change.offset, None
                changed_in_transaction = False
            elif before_transaction is None:
                raise MetadataLogError(
                    f"{change.kind.capitalize()}TransactionRecord at offset {change.offset} "
                    "without a BeginTransactionRecord", location=batch.location)
            elif change.kind == "end":
                # the transaction's changes become visible when it ends (if it made any)
                before_transaction = None
                stamp = change.timestamp_ms if changed_in_transaction else stamp
            else:  # abort: the transaction's changes never happened
                image, before_transaction, stamp = before_transaction, None, None
        next_offset = batch.last_offset + 1
        if before_transaction is None and stamp is not None and image.dirty:
            emitter.emit(image.view(), stamp)
    if before_transaction is not None and notes is not None:
        notes.append(f"the log ends inside the metadata transaction begun at offset {begun_at}: "
                     "its changes were never committed and are not imported")
    return emitter.snapshots


class _Emitter:
    """Turns successive image views into snapshots with strictly increasing ``captured_at``."""

    def __init__(self, cluster_id: str, cluster_alias: str):
        self.cluster_id = cluster_id
        self.cluster_alias = cluster_alias
        self.snapshots: list[Snapshot] = []
        self.last_view: tuple[TopicObservation, ...] | None = None

    def emit(self, view: tuple[TopicObservation, ...], timestamp_ms: int, force=False) -> None:
        if view == self.last_view and not force:
            return  # e.g. an ISR or leader change: no topic-level attribute changed
        at = _EPOCH + timedelta(milliseconds=timestamp_ms)
        if self.snapshots and at <= self.snapshots[-1].captured_at:
            if view == self.last_view:
                return
            # Controller clocks can step back, and two changes can share a millisecond: keep
            # the log's order by placing the later state 1 microsecond after the earlier one.
            at = self.snapshots[-1].captured_at + timedelta(microseconds=1)
        self.last_view = view
        self.snapshots.append(Snapshot(self.cluster_id, self.cluster_alias, at, True, view,
                                       authoritative=True))


# --- cluster identity ------------------------------------------------------------------------------
def read_meta_properties(path: Path) -> str:
    """``cluster.id`` of a Kafka ``meta.properties`` file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MetadataLogError(f"cannot read: {exc.strerror or exc}", location=str(path)) from None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id" and value.strip():
            return value.strip()
    raise MetadataLogError("no cluster.id line", location=str(path))


def find_meta_properties(paths: Iterable[Path]) -> Path | None:
    """The ``meta.properties`` of the log directory holding the given files, if there is one."""
    for path in paths:
        path = Path(path).resolve()
        for parent in list(path.parents)[:3] if path.is_file() else [path, *list(path.parents)[:2]]:
            candidate = parent / "meta.properties"
            if candidate.is_file():
                return candidate
    return None


def load(paths: list[Path], *, text: bool, cluster_id: str, cluster_alias: str,
         notes: list[str] | None = None) -> list[Snapshot]:
    """Decode and replay metadata log files (binary, or kafka-dump-log text when ``text``)."""
    sources: list[LogSource] = []
    if text:
        for path in paths:
            if not path.is_file():
                raise MetadataLogError("no such file", location=str(path))
            sources.extend(read_dump_text(path))
    else:
        sources = [read_binary_file(path) for path in expand_paths(paths)]
    if not any(src.batches for src in sources if src.kind != "bootstrap"):
        raise MetadataLogError("no record batches found in " + ", ".join(map(str, paths)))
    return replay(sources, cluster_id, cluster_alias, notes)
