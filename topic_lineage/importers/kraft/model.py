"""The decoded shape of the KRaft metadata log: the topic changes a replay needs, batches, sources.

Shared by the binary reader (:mod:`.records`), the dump-text reader (:mod:`.dump_text`) and the
replay (:mod:`.replay`). Record types and control types: ``MetadataRecordType``,
``ControlRecordType.java``; internal topic names: ``clients/.../common/internals/Topic.java``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topic_lineage.errors import TopicLineageError

# Topic.INTERNAL_TOPICS in Kafka's clients module.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = METADATA_TOPIC + "-0"

# Metadata record api keys (MetadataRecordType).
TOPIC_RECORD = 2
PARTITION_RECORD = 3
PARTITION_CHANGE_RECORD = 5
REMOVE_TOPIC_RECORD = 9
BEGIN_TRANSACTION_RECORD = 23
END_TRANSACTION_RECORD = 24
ABORT_TRANSACTION_RECORD = 25
TRANSACTION_MARKERS = {BEGIN_TRANSACTION_RECORD: "begin", END_TRANSACTION_RECORD: "end",
                        ABORT_TRANSACTION_RECORD: "abort"}

SNAPSHOT_HEADER_CONTROL_TYPE = 3
SNAPSHOT_FOOTER_CONTROL_TYPE = 4
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"


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


def append_batch(batches: list[LogBatch], batch: LogBatch) -> None:
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


def missing_footer(label: str) -> MetadataLogError:
    # RecordsSnapshotWriter ends every snapshot with a SnapshotFooterRecord in a control batch
    # of its own; without it the file is cut short and its topic list cannot be trusted.
    return MetadataLogError(
        "the snapshot does not end with its SnapshotFooterRecord: the file is truncated "
        "(or still being written); nothing was imported", location=label)
