"""Binary decoding of the metadata log files: record batches, records, metadata record bodies.

Where the facts come from (apache/kafka): record batch v2 framing, attributes bits, CRC-32C
coverage: ``clients/.../common/record/DefaultRecordBatch.java``; record framing (varints, key,
value, headers): ``DefaultRecord.java``; varint/zig-zag: ``common/utils/ByteUtils.java``; control
records (key = version int16 + type int16): ``ControlRecordUtils.java``,
``SnapshotHeaderRecord.json``; metadata record framing (unsigned varint frame version 1, api key,
version, then the body): ``server-common/.../serialization/AbstractApiMessageSerde.java``; record
bodies: ``metadata/src/main/resources/common/metadata/*.json``; file names:
``raft/.../snapshot/Snapshots.java`` (20-digit offset, 10-digit epoch).
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from topic_lineage import topic_id as tid
from topic_lineage.importers.kraft.model import (
    BOOTSTRAP_CHECKPOINT,
    METADATA_PARTITION_DIR,
    PARTITION_CHANGE_RECORD,
    PARTITION_RECORD,
    REMOVE_TOPIC_RECORD,
    SNAPSHOT_FOOTER_CONTROL_TYPE,
    SNAPSHOT_HEADER_CONTROL_TYPE,
    TOPIC_RECORD,
    TRANSACTION_MARKERS,
    Change,
    LogBatch,
    LogSource,
    MetadataLogError,
    PartitionChanged,
    PartitionSet,
    TopicCreated,
    TopicRemoved,
    TransactionMarker,
    append_batch,
    missing_footer,
)

SUPPORTED_CODECS = ("none", "gzip", "zstd")
"""Batch compression codecs this reader decodes (KRaft writes uncompressed batches by default)."""

_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

_KNOWN_VERSIONS = {TOPIC_RECORD: 0, PARTITION_RECORD: 2, PARTITION_CHANGE_RECORD: 2,
                   REMOVE_TOPIC_RECORD: 0}

# The logger keeps the name it had before the package split (log configurations name it).
log = logging.getLogger("topic_lineage.importers.kraft")
_WARNED: set[tuple[int, int]] = set()

_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_CHECKPOINT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


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
    if api_key in TRANSACTION_MARKERS:
        # Their only field (a name or reason) is tagged: nothing else to read.
        return TransactionMarker(offset, timestamp_ms, TRANSACTION_MARKERS[api_key])
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
        append_batch(source.batches, batch)
    if source.kind == "segment" and source.start_offset is None and source.batches:
        source.start_offset = source.batches[0].base_offset
    if source.kind != "segment" and not (source.batches and source.batches[-1].has_footer):
        raise missing_footer(label)
    return source


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

