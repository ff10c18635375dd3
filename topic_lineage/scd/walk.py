"""How a topic incarnation is decided, as one walk over each cluster's snapshots in time order.

The derivation for small stores (:mod:`topic_lineage.scd.build` chooses it below
:func:`walk_limit`). Its input and output are Arrow tables: the snapshot store's rows
(``tables.SNAPSHOT_STORE_DDL``) in, ``snapshot_runs`` (with ``held``) and ``topic_incarnations``
(without ``topic_uuid``, which the writer adds) out. No Spark, no I/O.

Why a walk: the rules R1-R6 are a fold per cluster in time order. The set-based derivation
(:mod:`topic_lineage.scd.incarnations`) computes the same rows with about twenty window stages,
which on a few thousand observations costs seconds of Spark jobs and planning, not of data
(issue #24). The walk touches each observation once and each live incarnation once per
complete snapshot: linear in the history, a fraction of a second for 100,000 observations.

It is the rules of :mod:`topic_lineage.scd.reference` (read that module's docstring for what
they mean, one snapshot at a time), kept in the same order, with the state that makes them
cheap. The reference looks at every incarnation ever seen, at every snapshot; the walk keeps

- ``active``: the incarnations whose gap (the time after their latest observation) can still
  change. A gap is *final* once its end can no longer move: an absence that counts (the first
  complete snapshot lacking it, not held or confirmed), or a displacement with no held absence
  before it (a later absence can only be later). Only a held, unconfirmed absence keeps a
  displaced incarnation active: its confirmation moves the end back to the held snapshot (R3).
- ``idless_names``: per name, the incarnations without an ID whose latest name it is (R3's
  "shown again" count for an ID-less name seen after its incarnation ended).

The property tests (``tests/test_scd_walk.py``) check that the walk equals the reference row for
row on random histories; the build tests that a build by the walk equals the set-based one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from topic_lineage import tables as t
from topic_lineage.scd.hold import HoldPolicy
from topic_lineage.scd.reference import incarnation_key, key_stamp

WALK, SET_BASED = "walk", "set-based"
"""A version manifest's ``derivation``: by this walk, or by topic_lineage.scd.incarnations."""
WALK_ENV = "TOPIC_LINEAGE_WALK_MB"
DEFAULT_WALK_MB = 64.0

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ATTRS = (t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL)

# What the walk hands the writer: topic_incarnations without topic_uuid, snapshot_runs.
INCARNATION_COLUMNS = tuple(c for c in t.ddl_columns(t.TOPIC_INCARNATIONS_DDL) if c != t.TOPIC_UUID)
RUN_COLUMNS = tuple(t.ddl_columns(t.SNAPSHOT_RUNS_DDL))


def walk_limit() -> int:
    """Bytes of stored snapshot files up to which a build derives by the walk
    (``$TOPIC_LINEAGE_WALK_MB``, default 64; 0: never, always the set-based derivation)."""
    from topic_lineage.fsutil import size_setting

    return size_setting(WALK_ENV, DEFAULT_WALK_MB, "always use the set-based derivation")


def walks(store_bytes: int) -> bool:
    """Whether a store of ``store_bytes`` is derived by the walk."""
    limit = walk_limit()
    return limit > 0 and store_bytes <= limit


# --- one incarnation ------------------------------------------------------------------------------
@dataclass(eq=False, slots=True)
class _Life:
    """One incarnation and the gap after its latest observation (``in_gap``)."""

    key: str
    topic_id: str | None  # None while ID-less (keyed by name)
    first_seen: int  # microseconds since the epoch, like every instant here
    versions: list = field(default_factory=list)  # [alias, topic_id, name, attrs, change, from, to]
    last_seen: int = 0
    last_name: str | None = None
    attrs: tuple = (None, None, None)
    closed_at: list = field(default_factory=list)  # ends of its closed gaps
    in_gap: bool = False
    first_complete: int | None = None  # the first complete snapshot in the gap
    first_complete_held: bool = False
    confirmed: bool = False  # a second complete snapshot in the gap
    displaced_at: int | None = None  # its name shown under another identity

    def end(self) -> int | None:
        """When the gap closed the incarnation (None: it did not, or it is not in a gap)."""
        if not self.in_gap:
            return None
        absence = self.first_complete if (
            self.first_complete is not None and (not self.first_complete_held or self.confirmed)
        ) else None
        if absence is None:
            return self.displaced_at
        if self.displaced_at is None:
            return absence
        return min(absence, self.displaced_at)

    def final(self) -> bool:
        """Whether the gap's end can no longer move (see the module docstring)."""
        counted_absence = self.first_complete is not None and (
            not self.first_complete_held or self.confirmed
        )
        return counted_absence or (self.displaced_at is not None and self.first_complete is None)

    def open_gap(self) -> None:
        self.in_gap, self.first_complete, self.first_complete_held = True, None, False
        self.confirmed, self.displaced_at = False, None


# --- one cluster ----------------------------------------------------------------------------------
class _Cluster:
    """The walk's state for one cluster, and the rules applied one snapshot at a time."""

    def __init__(self, cluster_id: str, policy: HoldPolicy):
        self.cluster_id, self.policy = cluster_id, policy
        self.lives: list[_Life] = []
        self.by_id: dict[str, _Life] = {}
        self.name_holder: dict[str, _Life] = {}  # the life of the name's latest observation
        self.idless_names: dict[str, int] = {}
        self.active: set[_Life] = set()

    # R1, R4: the life each observation belongs to (None: a new one), and whether it assigns an ID
    def _resolve(self, name: str, topic_id: str | None) -> tuple[_Life | None, bool]:
        holder = self.name_holder.get(name)
        if topic_id is None:
            return (holder if holder is not None and holder.end() is None else None), False
        life = self.by_id.get(topic_id)
        if life is not None:
            return life, False
        # an ID never seen in the cluster (every ID seen is in by_id) given to a live ID-less holder
        if holder is not None and holder.topic_id is None and holder.end() is None:
            return holder, True
        return None, False

    def apply(self, now: int, alias: str, complete: bool, authoritative: bool, topics: list) -> bool:
        """One snapshot (``topics``: (name, topic_id, attrs, error) in name order); returns held."""
        resolved, ids = [], set()
        for topic in topics:
            topic_id = topic[1]
            if topic_id is not None:
                if topic_id in ids:  # shared ID: the first name in name order is its observation
                    continue
                ids.add(topic_id)
            resolved.append((topic, *self._resolve(topic[0], topic_id)))
        shown = {life for _, life, _ in resolved if life is not None}
        # R1: names this snapshot shows under another identity than their holder's
        displaced = set()
        for topic, life, _ in resolved:
            holder = self.name_holder.get(topic[0])
            if holder is not None and holder is not life and holder not in shown \
                    and holder.last_name == topic[0]:
                displaced.add(holder)

        absent = [life for life in self.active if life not in shown] if complete else []
        held = False
        if complete and not authoritative:  # R3
            closing = sum(
                1 for life in absent
                if life.first_complete is None and life.displaced_at is None and life not in displaced
            )
            shown_again = len(shown) + sum(
                1 for topic, life, _ in resolved
                if life is None and topic[1] is None and self.idless_names.get(topic[0], 0) > 0
            )
            held = closing >= self.policy.min_count and closing > self.policy.ratio * (closing + shown_again)

        # gaps before the observations change them (R2, R3, R1)
        for life in displaced:
            if life in self.active and life.displaced_at is None:
                life.displaced_at = now
        for life in absent:
            if life.first_complete is None:
                life.first_complete, life.first_complete_held = now, held
            else:
                life.confirmed = True
        for life in (*displaced, *absent):
            if life in self.active and life.final():
                self.active.discard(life)

        observed = []
        for topic, life, assigns_id in resolved:
            observed.append(self._observe(now, alias, topic, life, assigns_id))
        for life in observed:  # the gap after this snapshot
            if not life.in_gap:
                life.open_gap()
                self.active.add(life)
        return held

    def _observe(self, now: int, alias: str, topic: tuple, life: _Life | None, assigns_id: bool) -> _Life:
        name, topic_id, attrs, error = topic
        reappeared = False
        if life is not None and life.in_gap:
            end = life.end()
            life.in_gap = False
            self.active.discard(life)
            if end is not None:
                life.closed_at.append(end)
                life.versions[-1][6] = end
                if life.topic_id is None and not assigns_id:
                    # an ID-less life cannot reappear: its gap stays as it was, a new life starts
                    life.in_gap = True
                    if not life.final():
                        self.active.add(life)
                    life = None
                else:
                    reappeared = True
        if life is None:
            key = (incarnation_key(self.cluster_id, "id", topic_id) if topic_id is not None
                   else incarnation_key(self.cluster_id, "name", name,
                                        key_stamp(_EPOCH + timedelta(microseconds=now))))
            life = _Life(key=key, topic_id=topic_id, first_seen=now)
            self.lives.append(life)
        if life.topic_id is None and life.last_name is not None:
            self.idless_names[life.last_name] -= 1
        if topic_id is not None:
            life.topic_id = topic_id
            self.by_id[topic_id] = life
        if error is not None:
            attrs = life.attrs
        previous = life.versions[-1] if life.versions else None
        if previous is None:
            change = "created"
        elif reappeared:
            change = "reappeared"
        elif previous[1] is None and life.topic_id is not None:
            change = "id_assigned"
        elif previous[2] != name:
            change = "renamed"
        elif previous[3] != attrs:
            change = "attributes_changed"
        else:
            change = None
        if change is not None:
            if previous is not None and previous[6] is None:
                previous[6] = now
            life.versions.append([alias, life.topic_id, name, attrs, change, now, None])
        life.attrs, life.last_seen, life.last_name = attrs, now, name
        if life.topic_id is None:
            self.idless_names[name] = self.idless_names.get(name, 0) + 1
        self.name_holder[name] = life
        return life

    def rows(self, out: dict) -> None:
        """Append every version of every life to ``out`` (column -> list)."""
        for life in self.lives:
            ends = list(life.closed_at)
            end = life.end()
            if end is not None:
                ends.append(end)
                life.versions[-1][6] = end
            deleted_at = min(ends) if ends else None
            for number, (alias, topic_id, name, attrs, change, valid_from, valid_to) in enumerate(
                life.versions, start=1
            ):
                for column, value in (
                    (t.INCARNATION_KEY, life.key), (t.CLUSTER_ID, self.cluster_id),
                    (t.CLUSTER_ALIAS, alias), (t.TOPIC_ID, topic_id), (t.TOPIC_NAME, name),
                    (t.VERSION, number), (t.CHANGE_TYPE, change),
                    (t.PARTITION_COUNT, attrs[0]), (t.REPLICATION_FACTOR, attrs[1]),
                    (t.IS_INTERNAL, attrs[2]), (t.VALID_FROM, valid_from), (t.VALID_TO, valid_to),
                    (t.IS_CURRENT, valid_to is None), (t.FIRST_SEEN_AT, life.first_seen),
                    (t.LAST_SEEN_AT, life.last_seen), (t.DELETED_AT, deleted_at),
                ):
                    out[column].append(value)


# --- Arrow in, Arrow out ------------------------------------------------------------------------
_CHUNK_ROWS = 200_000
"""Observations turned into Python values at a time (whole snapshots): the walk's memory is this
plus its state, whatever the size of the store."""
_SNAPSHOT_COLUMNS = (t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.COMPLETE, t.AUTHORITATIVE,
                     t.TOPIC_COUNT, t.ERROR_TOPIC_COUNT, t.SOURCE)
_TOPIC_COLUMNS = (t.TOPIC_NAME, t.TOPIC_ID, *_ATTRS, t.ERROR)


def derive(store_rows, policy: HoldPolicy | None = None):
    """``(snapshot_runs, topic_incarnations)`` as Arrow tables from store rows (an Arrow table
    with the columns of ``tables.SNAPSHOT_STORE_DDL``; an empty snapshot is one row with a NULL
    ``topic_name``). The store holds each snapshot once; rows of any order."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    policy = policy or HoldPolicy()
    rows = store_rows.select([*_SNAPSHOT_COLUMNS, *_TOPIC_COLUMNS]).sort_by(
        [(t.CLUSTER_ID, "ascending"), (t.CAPTURED_AT, "ascending"), (t.TOPIC_NAME, "ascending")]
    ).combine_chunks()
    runs = {c: [] for c in RUN_COLUMNS}
    incarnations = {c: [] for c in INCARNATION_COLUMNS}
    if rows.num_rows:
        # where each snapshot (cluster, captured_at) starts, and its own columns, once
        instants = rows.column(t.CAPTURED_AT).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        instants = instants.to_numpy()
        codes = pc.dictionary_encode(rows.column(t.CLUSTER_ID)).combine_chunks().indices.to_numpy()
        changed = (instants[1:] != instants[:-1]) | (codes[1:] != codes[:-1])
        starts = [0, *(np.flatnonzero(changed) + 1).tolist(), rows.num_rows]
        heads = rows.select(list(_SNAPSHOT_COLUMNS)).take(starts[:-1])
        snapshots = {c: heads.column(c).to_pylist() for c in _SNAPSHOT_COLUMNS}
        snapshots[t.CAPTURED_AT] = instants[starts[:-1]].tolist()
        cluster = None
        first = 0  # first snapshot of the chunk
        while first < len(starts) - 1:
            last = first + 1  # snapshots [first, last) make the chunk
            while last < len(starts) - 1 and starts[last + 1] - starts[first] <= _CHUNK_ROWS:
                last += 1
            offset = starts[first]
            chunk = rows.slice(offset, starts[last] - offset)
            names, ids, partitions, replication, internal, errors = (
                chunk.column(c).to_pylist() for c in _TOPIC_COLUMNS
            )
            for number in range(first, last):
                cluster_id = snapshots[t.CLUSTER_ID][number]
                if cluster is None or cluster.cluster_id != cluster_id:
                    if cluster is not None:
                        cluster.rows(incarnations)
                    cluster = _Cluster(cluster_id, policy)
                topics = [
                    (names[i], ids[i], (partitions[i], replication[i], internal[i]), errors[i])
                    for i in range(starts[number] - offset, starts[number + 1] - offset)
                    if names[i] is not None  # not an empty snapshot's marker
                ]
                held = cluster.apply(
                    snapshots[t.CAPTURED_AT][number], snapshots[t.CLUSTER_ALIAS][number],
                    snapshots[t.COMPLETE][number], bool(snapshots[t.AUTHORITATIVE][number]), topics,
                )
                for column in RUN_COLUMNS:
                    runs[column].append(held if column == t.HELD else snapshots[column][number])
            first = last
        cluster.rows(incarnations)
    return _table(runs, t.SNAPSHOT_RUNS_DDL, RUN_COLUMNS), _table(
        incarnations, t.TOPIC_INCARNATIONS_DDL, INCARNATION_COLUMNS
    )


def _table(columns: dict, ddl: str, names: tuple):
    """An Arrow table of the DDL's types (instants given as microseconds since the epoch)."""
    import pyarrow as pa

    schema = t.arrow_schema_of(ddl)
    arrays = []
    for name in names:
        kind = schema.field(name).type
        if pa.types.is_timestamp(kind):
            arrays.append(pa.array(columns[name], pa.int64()).cast(kind))
        else:
            arrays.append(pa.array(columns[name], kind))
    return pa.Table.from_arrays(arrays, schema=pa.schema([schema.field(n) for n in names]))
