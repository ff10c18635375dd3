"""Builders of Kafka's own file formats, written from the specifications, for importer tests.

Encoders here are written independently of topic_lineage.importers (only the CRC-32C function
is shared; tests/test_import_kraft_log.py checks it against RFC 3720's test vectors). Where each
fact comes from, in apache/kafka:

* record batch v2 header layout, attribute bits (compression 0-2, control 5) and the CRC-32C
  covering attributes..end: clients/src/main/java/org/apache/kafka/common/record/DefaultRecordBatch.java
* record layout (varint length, int8 attributes, varlong timestamp delta, varint offset delta,
  varint key length + key, varint value length + value, varint header count):
  clients/.../common/record/DefaultRecord.java; zig-zag varints: common/utils/ByteUtils.java
* control record key = int16 version + int16 type; SNAPSHOT_HEADER = 3, SNAPSHOT_FOOTER = 4,
  LEADER_CHANGE = 2: clients/.../common/record/ControlRecordType.java; header value
  (int16 Version, int64 LastContainedLogTimestamp, tagged fields):
  clients/src/main/resources/common/message/SnapshotHeaderRecord.json
* metadata record = unsigned varint frame version (1), unsigned varint api key, unsigned varint
  version, body: server-common/.../serialization/AbstractApiMessageSerde.java
* bodies, all flexible ("flexibleVersions": "0+": compact strings/arrays = unsigned varint
  length+1, uuid = 16 bytes, tagged fields at the end):
  metadata/src/main/resources/common/metadata/TopicRecord.json (api key 2),
  PartitionRecord.json (3), PartitionChangeRecord.json (5), RemoveTopicRecord.json (9),
  FeatureLevelRecord.json (12, used as a record type the importer must skip),
  BeginTransactionRecord.json (23: Name, tagged 0), EndTransactionRecord.json (24: no fields),
  AbortTransactionRecord.json (25: Reason, tagged 0)
* snapshot footer value (int16 Version, tagged fields): SnapshotFooterRecord.json
* kafka-dump-log text: core/src/main/scala/kafka/tools/DumpLogSegments.scala (dumpLog,
  printBatchLevel, ClusterMetadataLogMessageParser: {"type":"TOPIC_RECORD","version":0,"data":{...}})
"""

from __future__ import annotations

import gzip
import json
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from topic_lineage import topic_id as tid
from topic_lineage.importers.crc32c import crc32c


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def varint(n: int) -> bytes:
    return uvarint(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def varlong(n: int) -> bytes:
    return uvarint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def compact_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return uvarint(len(raw) + 1) + raw


def compact_int32s(values) -> bytes:
    if values is None:
        return uvarint(0)
    return uvarint(len(values) + 1) + b"".join(struct.pack(">i", v) for v in values)


def uuid(value: str) -> bytes:
    return tid.to_bytes(value)


def tagged(fields: dict[int, bytes]) -> bytes:
    out = uvarint(len(fields))
    for tag in sorted(fields):
        out += uvarint(tag) + uvarint(len(fields[tag])) + fields[tag]
    return out


def frame(api_key: int, version: int, body: bytes) -> bytes:
    return uvarint(1) + uvarint(api_key) + uvarint(version) + body


# value bytes -> (type name, JSON data) as MetadataJsonConverters prints them (camelCase fields)
_JSON: dict[bytes, tuple[str, dict]] = {}


def _register(value: bytes, kind: str, data: dict) -> bytes:
    _JSON[value] = (kind, data)
    return value


def topic_record(name: str, topic_id: str) -> bytes:
    value = frame(2, 0, compact_string(name) + uuid(topic_id) + tagged({}))
    return _register(value, "TOPIC_RECORD", {"name": name, "topicId": tid.canonical(topic_id)})


def remove_topic_record(topic_id: str) -> bytes:
    value = frame(9, 0, uuid(topic_id) + tagged({}))
    return _register(value, "REMOVE_TOPIC_RECORD", {"topicId": tid.canonical(topic_id)})


def partition_record(topic_id: str, partition: int, replicas, *, removing=(), adding=(),
                     version: int = 0, leader_recovery_state: int | None = None) -> bytes:
    body = struct.pack(">i", partition) + uuid(topic_id)
    body += compact_int32s(replicas) + compact_int32s(replicas)  # replicas, isr
    body += compact_int32s(removing) + compact_int32s(adding)
    body += struct.pack(">iii", replicas[0] if replicas else -1, 0, 0)  # leader, epochs
    if version >= 1:
        body += uvarint(len(replicas) + 1) + bytes(16) * len(replicas)  # directories
    tags = {} if leader_recovery_state is None else {0: struct.pack(">b", leader_recovery_state)}
    return _register(frame(3, version, body + tagged(tags)), "PARTITION_RECORD", {
        "partitionId": partition, "topicId": tid.canonical(topic_id), "replicas": list(replicas),
        "isr": list(replicas), "removingReplicas": list(removing), "addingReplicas": list(adding),
        "leader": replicas[0] if replicas else -1, "leaderEpoch": 0, "partitionEpoch": 0})


def partition_change_record(topic_id: str, partition: int, *, isr=None, leader=None,
                            replicas=None, removing=None, adding=None, version: int = 0) -> bytes:
    tags = {}
    if isr is not None:
        tags[0] = compact_int32s(isr)
    if leader is not None:
        tags[1] = struct.pack(">i", leader)
    if replicas is not None:
        tags[2] = compact_int32s(replicas)
    if removing is not None:
        tags[3] = compact_int32s(removing)
    if adding is not None:
        tags[4] = compact_int32s(adding)
    data = {"partitionId": partition, "topicId": tid.canonical(topic_id)}
    for name, v in (("isr", isr), ("leader", leader), ("replicas", replicas),
                    ("removingReplicas", removing), ("addingReplicas", adding)):
        if v is not None:
            data[name] = list(v) if not isinstance(v, int) else v
    value = frame(5, version, struct.pack(">i", partition) + uuid(topic_id) + tagged(tags))
    return _register(value, "PARTITION_CHANGE_RECORD", data)


def feature_level_record(name: str = "metadata.version", level: int = 20) -> bytes:
    value = frame(12, 0, compact_string(name) + struct.pack(">h", level) + tagged({}))
    return _register(value, "FEATURE_LEVEL_RECORD", {"name": name, "featureLevel": level})


def begin_transaction_record(name: str = "Bootstrap records") -> bytes:
    value = frame(23, 0, tagged({0: compact_string(name)}))
    return _register(value, "BEGIN_TRANSACTION_RECORD", {"name": name})


def end_transaction_record() -> bytes:
    return _register(frame(24, 0, tagged({})), "END_TRANSACTION_RECORD", {})


def abort_transaction_record(reason: str = "controller failover") -> bytes:
    value = frame(25, 0, tagged({0: compact_string(reason)}))
    return _register(value, "ABORT_TRANSACTION_RECORD", {"reason": reason})


@dataclass
class Rec:
    value: bytes | None
    key: bytes | None = None


@dataclass
class Batch:
    """One record batch; ``timestamp_ms`` is every record's timestamp (KRaft append time)."""

    base_offset: int
    timestamp_ms: int
    records: list[Rec] = field(default_factory=list)
    control: bool = False
    compression: int = 0  # 0 none, 1 gzip, 4 zstd

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1


def encode_record(rec: Rec, offset_delta: int, timestamp_delta: int = 0) -> bytes:
    body = b"\x00" + varlong(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if rec.key is None else varint(len(rec.key)) + rec.key
    body += varint(-1) if rec.value is None else varint(len(rec.value)) + rec.value
    body += varint(0)  # no headers
    return varint(len(body)) + body


def encode_batch(batch: Batch, partition_leader_epoch: int = 1) -> bytes:
    records = b"".join(encode_record(r, i) for i, r in enumerate(batch.records))
    if batch.compression == 1:
        records = gzip.compress(records)
    elif batch.compression == 4:
        import zstandard

        records = zstandard.ZstdCompressor().compress(records)
    attributes = batch.compression | (0x20 if batch.control else 0)
    after_crc = struct.pack(
        ">hiqqqhii", attributes, len(batch.records) - 1, batch.timestamp_ms, batch.timestamp_ms,
        -1, -1, -1, len(batch.records),
    ) + records
    crc = crc32c(after_crc)
    tail = struct.pack(">iBI", partition_leader_epoch, 2, crc) + after_crc
    return struct.pack(">qi", batch.base_offset, len(tail)) + tail


def encode_log(batches: list[Batch]) -> bytes:
    return b"".join(encode_batch(b) for b in batches)


def control_key(control_type: int) -> bytes:
    return struct.pack(">hh", 0, control_type)


def snapshot_header(last_contained_ms: int) -> Rec:
    return Rec(struct.pack(">hq", 0, last_contained_ms) + tagged({}), key=control_key(3))


def snapshot_footer() -> Rec:
    return Rec(struct.pack(">h", 0) + tagged({}), key=control_key(4))


def leader_change() -> Rec:
    # LeaderChangeMessage: Version int16, LeaderId int32, Voters [], GrantingVoters [] (v0).
    return Rec(struct.pack(">hi", 0, 1) + uvarint(1) + uvarint(1) + tagged({}),
               key=control_key(2))


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def checkpoint_name(end_offset: int, epoch: int = 1) -> str:
    return f"{end_offset:020d}-{epoch:010d}.checkpoint"


# --- kafka-dump-log.sh --cluster-metadata-decoder text --------------------------------------
def _json_payload(value: bytes) -> str:
    """The JSON DumpLogSegments prints for a metadata record (registered by its builder)."""
    kind, data = _JSON[value]
    return json.dumps({"type": kind, "version": 0, "data": data}, separators=(",", ":"))


def dump_text(batches: list[Batch], *, file_name: str, skip_record_metadata: bool = False,
              snapshot_end: int | None = None) -> str:
    """What ``kafka-dump-log.sh --cluster-metadata-decoder --files <file_name>`` prints."""
    lines = [f"Dumping {file_name}"]
    if snapshot_end is None:
        lines.append(f"Log starting offset: {int(file_name.split('/')[-1].split('.')[0])}")
    else:
        lines.append(f"Snapshot end offset: {snapshot_end}, epoch: 1")
    position = 0
    for b in batches:
        size = len(encode_batch(b))
        lines.append(
            f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {len(b.records)} "
            "baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
            f"partitionLeaderEpoch: 1 isTransactional: false isControl: {str(b.control).lower()} "
            f"deleteHorizonMs: OptionalLong.empty position: {position} CreateTime: "
            f"{b.timestamp_ms} size: {size} magic: 2 compresscodec: "
            f"{'gzip' if b.compression else 'none'} crc: 12345 isvalid: true"
        )
        position += size
        for i, rec in enumerate(b.records):
            offset = b.base_offset + i
            meta = (f"| offset: {offset} CreateTime: {b.timestamp_ms} keySize: "
                    f"{-1 if rec.key is None else len(rec.key)} valueSize: {len(rec.value or b'')} "
                    "sequence: -1 headerKeys: []")
            if b.control:
                control_type = struct.unpack(">h", rec.key[2:4])[0]
                if control_type == 3:
                    ts = struct.unpack(">q", rec.value[2:10])[0]
                    extra = f' SnapshotHeader {{"version":0,"lastContainedLogTimestamp":{ts}}}'
                elif control_type == 4:
                    extra = ' SnapshotFooter {"version":0}'
                else:
                    extra = " controlType: LEADER_CHANGE(2)"
                lines.append("" if skip_record_metadata else meta + extra)
            elif skip_record_metadata:
                lines.append(f" payload: {_json_payload(rec.value)}")
            else:
                lines.append(f"{meta} payload: {_json_payload(rec.value)}")
    return "\n".join(lines) + "\n"


# --- real Kafka artifacts (../shared/real-kafka beside the clone; read in place) -------------
REAL_KAFKA = Path(__file__).resolve().parents[1].parent / "shared" / "real-kafka"


def real_kafka(*parts: str) -> Path:
    """A path under the real-Kafka artifacts. Skips only when the whole folder is absent.

    CI always has it, so a missing file below it is a failure of the test, not a skip.
    """
    if not REAL_KAFKA.is_dir():
        reason = f"real Kafka artifacts not found at {REAL_KAFKA} (expected beside the clone)"
        print(reason)
        pytest.skip(reason)
    return REAL_KAFKA.joinpath(*parts)


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# ../shared/real-kafka/kraft-binary/ldi-poc-kafka-3.7.0.source.md: name -> (ID, partitions,
# replication factor, creation time)
REAL_370_CLUSTER = "q1w2e3r4t5y6u7i8o9p0"
REAL_370_TOPICS = {
    "__consumer_offsets": ("gSnfpEbtQfSDpxM2lhEn9A", 50, 1, _utc("2026-01-30T16:47:18.591Z")),
    "batch2.work.notification.SHR_PROD.persistence": (
        "306J_pu4Tiybgh3rvq-3HQ", 1, 1, _utc("2026-01-30T16:47:18.628Z")),
    "subscription.matching.SHR_PROD.persistence": (
        "shr_LbhQRi20mLSqvU22rA", 1, 1, _utc("2026-01-30T16:47:53.103Z")),
    "TestTopicPatient": ("B3_HiNPgSQ6oxG9ZZ6ED5A", 1, 1, _utc("2026-01-30T17:01:47.805Z")),
    "Retry.TestTopicPatient": ("_g4of-T3Rq-jr09kDxtjFA", 1, 1, _utc("2026-01-30T17:01:47.838Z")),
}
