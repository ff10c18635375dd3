"""Replay of decoded metadata log sources into complete, authoritative snapshots.

The topics part of the metadata image is replayed as Kafka's TopicsDelta does; metadata
transactions (KIP-866) as ``metadata/.../image/loader/MetadataBatchLoader.java`` does. The
replication factor during a reassignment (replicas minus adding replicas):
``tools/.../TopicCommand.java``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from topic_lineage import topic_id as tid
from topic_lineage.importers.kraft.model import (
    INTERNAL_TOPICS,
    METADATA_TOPIC,
    Change,
    LogBatch,
    LogSource,
    MetadataLogError,
    PartitionSet,
    TopicCreated,
    TopicRemoved,
    TransactionMarker,
)
from topic_lineage.snapshot import Snapshot, TopicObservation

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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

