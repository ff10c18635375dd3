"""How a topic incarnation is decided, as one walk over each cluster's snapshots in time order.

The production derivation. A :class:`ClusterWalk` takes one cluster's snapshots in time order,
each as an Arrow table of its topics, and gives ``snapshot_runs`` (with ``held``) and
``topic_incarnations`` (without ``topic_uuid``, which the writer adds) as Arrow tables at any
point. It runs in Spark tasks, one per cluster (:mod:`topic_lineage.scd.walk_job`), which save
each cluster's walk with the version (:meth:`ClusterWalk.dumps`), so the next build walks only
the new snapshots. No Spark and no I/O here: the task reads the files and writes the tables.

Why a walk: the rules R1-R6 are a fold per cluster in time order. A set-based derivation (about
twenty window stages over every observation, which this replaced) costs seconds of Spark jobs
and planning on a small store and a sort of every observation on a large one (issues #24,
#40). The walk touches each observation once, and most observations cost a few vector
operations, not Python: an observation that repeats the previous snapshot's exactly (same
name, ID and attributes) changes nothing but its incarnation's ``last_seen``
(:class:`Differ`, :class:`Step`).

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

The property tests check that the walk equals the reference row for row on random histories:
``tests/test_scd_walk.py`` in process, also when it is saved and continued between any two
snapshots; ``tests/test_scd_properties.py`` through the store and Spark builds, full and
incremental.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from topic_lineage import tables as t
from topic_lineage.scd.hold import HoldPolicy
from topic_lineage.scd.reference import incarnation_key, is_held, key_stamp

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ATTRS = (t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL)

# What the walk hands the writer: topic_incarnations without topic_uuid, snapshot_runs.
INCARNATION_COLUMNS = tuple(c for c in t.ddl_columns(t.TOPIC_INCARNATIONS_DDL) if c != t.TOPIC_UUID)
RUN_COLUMNS = tuple(t.ddl_columns(t.SNAPSHOT_RUNS_DDL))
_VERSION_ROW = (t.INCARNATION_KEY, t.CLUSTER_ID, t.CLUSTER_ALIAS, t.TOPIC_ID, t.TOPIC_NAME, t.VERSION,
                t.CHANGE_TYPE, t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL, t.VALID_FROM,
                t.VALID_TO, t.IS_CURRENT, t.FIRST_SEEN_AT, t.LAST_SEEN_AT, t.DELETED_AT)
"""The values :meth:`ClusterWalk.tables` gives each version, in this order."""
assert sorted(_VERSION_ROW) == sorted(INCARNATION_COLUMNS)


# --- one incarnation ------------------------------------------------------------------------------
@dataclass(eq=False, slots=True)
class _Version:
    """One version of an incarnation: a row of ``topic_incarnations`` in the making."""

    alias: str
    topic_id: str | None
    name: str
    attrs: tuple  # partition_count, replication_factor, is_internal
    change: str
    valid_from: int
    valid_to: int | None = None

    def __reduce__(self):  # a tuple, not a dict of slots: a saved walk pickles fast (dumps)
        return _Version, (self.alias, self.topic_id, self.name, self.attrs, self.change, self.valid_from,
                          self.valid_to)


@dataclass(eq=False, slots=True)
class _Life:
    """One incarnation and the gap after its latest observation (``in_gap``)."""

    key: str
    topic_id: str | None  # None while ID-less (keyed by name)
    first_seen: int  # microseconds since the epoch, like every instant here
    versions: list[_Version] = field(default_factory=list)
    last_seen: int = 0
    last_name: str | None = None
    attrs: tuple = (None, None, None)
    closed_at: list = field(default_factory=list)  # ends of its closed gaps
    in_gap: bool = False
    first_complete: int | None = None  # the first complete snapshot in the gap
    first_complete_held: bool = False
    confirmed: bool = False  # a second complete snapshot in the gap
    displaced_at: int | None = None  # its name shown under another identity

    def __reduce__(self):  # as _Version's
        return _Life, (self.key, self.topic_id, self.first_seen, self.versions, self.last_seen, self.last_name,
                       self.attrs, self.closed_at, self.in_gap, self.first_complete, self.first_complete_held,
                       self.confirmed, self.displaced_at)

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


# --- one snapshot as the walk takes it -------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Step:
    """One snapshot of a cluster, as :meth:`ClusterWalk.step` takes it.

    ``full``: ``topics`` are all its topics. Else a *delta* against the snapshot before it (which
    had each of its IDs on one topic, as this one has): ``topics`` are only those that do not
    repeat a topic of the previous snapshot exactly (same name, ID and attributes, no describe
    error in either), ``dropped`` the previous snapshot's IDs this one does not repeat, and
    ``whole`` all its topics when this or the previous snapshot has a topic without an ID (the
    walk may then have to walk it whole)."""

    head: dict
    topics: object  # Arrow table, TOPIC_COLUMNS, in name order
    full: bool = True
    dropped: tuple = ()
    whole: object = None


def _ids_unique(topics) -> bool:
    """Whether each ID of the topics names one topic (topics without an ID aside)."""
    import pyarrow.compute as pc

    ids = topics.column(t.TOPIC_ID)
    return pc.count_distinct(ids).as_py() == topics.num_rows - ids.null_count


class Differ:
    """Makes a cluster's snapshots, given in time order, into :class:`Step` s: each as a delta
    against the one before when it can, else whole. Only column operations (Arrow), no walk
    state: one task can diff a range of a cluster's snapshots while another walks, given the
    snapshot before the range (``previous``)."""

    def __init__(self, previous=None):
        self._previous = previous if previous is not None and _ids_unique(previous) else None

    def step(self, head: dict, topics) -> Step:
        import pyarrow.compute as pc

        previous = self._previous
        unique = _ids_unique(topics)
        self._previous = topics if unique else None
        if previous is None or not unique:
            return Step(head, topics)
        # repeated: same name, ID and attributes as the previous snapshot's topic, no error in either
        at = pc.index_in(topics.column(t.TOPIC_NAME), value_set=previous.column(t.TOPIC_NAME))
        same = pc.and_(pc.is_null(topics.column(t.ERROR)), pc.is_null(pc.take(previous.column(t.ERROR), at)))
        same = pc.and_(same, pc.is_valid(at))
        for column in (t.TOPIC_ID, *_ATTRS):
            equal = pc.equal(topics.column(column), pc.take(previous.column(column), at))
            same = pc.and_kleene(same, equal)  # NULL (unknown) is not the same
        same = pc.and_kleene(same, pc.is_valid(same))  # unknown: not repeated (no scalar: pandas)
        ids = previous.column(t.TOPIC_ID)
        repeated = topics.column(t.TOPIC_ID).filter(same)
        dropped = ids.filter(pc.and_(pc.is_valid(ids), pc.invert(pc.is_in(ids, value_set=repeated))))
        idless = topics.column(t.TOPIC_ID).null_count or ids.null_count
        return Step(head, topics.filter(pc.invert(same)), full=False,
                    dropped=tuple(dropped.to_pylist()), whole=topics if idless else None)


def order_error(cluster_id: str, now: int, newest: int) -> ValueError:
    """The error of a snapshot at ``now`` given after one at ``newest`` (not before it)."""
    def at(micros: int) -> str:
        return (_EPOCH + timedelta(microseconds=micros)).isoformat()

    return ValueError(f"cluster {cluster_id}: a snapshot of {at(now)} after one of {at(newest)}: the "
                      "walk takes a cluster's snapshots in time order, each once")


# --- one cluster ----------------------------------------------------------------------------------
class ClusterWalk:
    """The walk's state for one cluster, and the rules applied one snapshot at a time.

    Feed it the cluster's snapshots in time order (:meth:`snapshot`); :meth:`tables` gives the
    cluster's rows at any point and leaves the state as it was, so a build can save the state
    (:meth:`dumps`) and the next build continue from it with only the new snapshots (R5: the
    rows equal a walk of the whole history; ``tests/test_scd_walk.py``).
    """

    def __init__(self, cluster_id: str, policy: HoldPolicy):
        self.cluster_id, self.policy = cluster_id, policy
        self.lives: list[_Life] = []
        self.by_id: dict[str, _Life] = {}
        self.name_holder: dict[str, _Life] = {}  # the life of the name's latest observation
        self.idless_names: dict[str, int] = {}
        # the incarnations whose gap can still change (the module docstring), but those in current
        self.active: set[_Life] = set()
        # the incarnations the latest snapshot observed through a topic with an ID, by that ID,
        # when the next snapshot may repeat them (a delta step); None when it may not. Each is
        # in an empty gap and was last seen at ``newest``: steady observations change nothing else
        self.current: dict[str, _Life] | None = None
        self.runs: list[tuple] = []  # one per snapshot walked, values of RUN_COLUMNS
        self.newest: int | None = None  # the latest snapshot walked
        self._differ: Differ | None = Differ()  # what snapshot() compares with (see step())

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

    def snapshot(self, head: dict, topics) -> None:
        """Walk one snapshot: ``head`` its run's values (``RUN_COLUMNS`` but ``held``;
        ``captured_at`` in microseconds since the epoch), ``topics`` an Arrow table of its
        topics (the columns ``TOPIC_COLUMNS``, in name order, no empty-snapshot marker)."""
        differ = self._differ if self._differ is not None else Differ()
        self._take(differ.step(head, topics))
        self._differ = differ

    def step(self, step: Step) -> None:
        """Walk one snapshot as a :class:`Step` some :class:`Differ` made: the same rows as
        :meth:`snapshot` of the snapshot would give. A split walk's second pass takes the steps
        its tasks made (topic_lineage.scd.walk_job); a later :meth:`snapshot` then walks its
        first snapshot whole (this walk no longer holds the snapshot before it)."""
        self._differ = None
        self._take(step)

    def _take(self, step: Step) -> None:
        head = step.head
        now = head[t.CAPTURED_AT]
        if self.newest is not None and now <= self.newest:
            raise order_error(self.cluster_id, now, self.newest)
        held = self._apply(now, head[t.CLUSTER_ALIAS], head[t.COMPLETE], bool(head[t.AUTHORITATIVE]), step)
        self.runs.append(tuple(held if c == t.HELD else head[c] for c in RUN_COLUMNS))
        self.newest = now

    def _flush(self, seen: int | None) -> None:
        """The current incarnations join ``active``, last seen at ``seen``: the next snapshot is
        walked whole."""
        for life in (self.current or {}).values():
            life.last_seen = seen
            self.active.add(life)
        self.current = None

    def _apply(self, now: int, alias: str, complete: bool, authoritative: bool, step: Step) -> bool:
        """One snapshot; returns held.

        A delta step (:class:`Differ`) names the previous snapshot's IDs it does not repeat
        exactly (``dropped``) and gives only its other topics: the incarnations left in
        ``current`` are the *steady* observations, which change nothing but their ``last_seen``
        (kept implicitly: a current incarnation was last seen at ``newest``). So a snapshot costs
        Python work for what changed only; the rest is the Differ's column operations."""
        if step.full or self.current is None:
            if not step.full and step.whole is None:
                raise RuntimeError(f"cluster {self.cluster_id}: a delta step after a snapshot the walk "
                                   "cannot continue steadily, without the snapshot's topics")
            self._flush(self.newest)
            rows = step.topics if step.full else step.whole
        else:
            rows = step.topics
            for topic_id in step.dropped:  # observed in the previous snapshot, not repeated here
                life = self.current.pop(topic_id)
                life.last_seen = self.newest
                self.active.add(life)
        current = self.current or {}
        resolved = self._resolve_all(rows)
        if current and any(life is not None and topic[1] is None and current.get(life.topic_id) is life
                           for topic, life, _ in resolved):
            # an ID-less observation continues a steady incarnation under a name it had: that
            # incarnation is observed twice in this snapshot, so walk it the whole way
            if step.whole is None:
                raise RuntimeError(f"cluster {self.cluster_id}: a delta step without its snapshot's topics")
            self._flush(self.newest)
            current, resolved = {}, self._resolve_all(step.whole)
        shown = {life for _, life, _ in resolved if life is not None}

        def is_shown(life: _Life) -> bool:
            return life in shown or (life.topic_id is not None and current.get(life.topic_id) is life)

        # R1: names this snapshot shows under another identity than their holder's
        displaced = set()
        for topic, life, _ in resolved:
            holder = self.name_holder.get(topic[0])
            if holder is not None and holder is not life and not is_shown(holder) \
                    and holder.last_name == topic[0]:
                displaced.add(holder)

        # every active incarnation not shown (the current ones are all shown: steady)
        absent = [life for life in self.active if life not in shown] if complete else ()
        held = False
        if complete and not authoritative:  # R3
            closing = sum(
                1 for life in absent
                if life.first_complete is None and life.displaced_at is None and life not in displaced
            )
            shown_again = len(current) + len(shown) + sum(
                1 for topic, life, _ in resolved
                if life is None and topic[1] is None and self.idless_names.get(topic[0], 0) > 0
            )
            held = is_held(closing, shown_again, self.policy.ratio, self.policy.min_count)

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

        observed = [(topic[1], self._observe(now, alias, topic, life, assigns_id))
                    for topic, life, assigns_id in resolved]
        lives = [life for _, life in observed]
        # the next snapshot may repeat this one's (a delta step) when each of its IDs named one
        # topic (the Differ sends a delta step only then) and each incarnation was observed once
        steady_next = _ids_unique(rows) and len(set(lives)) == len(lives)
        if not steady_next:
            self.current = current  # flushed below, last seen now
            self._flush(now)
            current = None
        for topic_id, life in observed:  # the gap after this snapshot
            if not life.in_gap:
                life.open_gap()
            if current is not None and topic_id is not None:
                current[topic_id] = life
            else:
                self.active.add(life)
        self.current = current
        return held

    def _resolve_all(self, topics) -> list[tuple]:
        """(topic, life, assigns_id) of each observation, in name order; a topic is (name,
        topic_id, attrs, error). An ID on several topics is the first name's observation."""
        resolved, ids = [], set()
        names, topic_ids, partitions, replication, internal, errors = (
            topics.column(c).to_pylist() for c in TOPIC_COLUMNS
        )
        for i, name in enumerate(names):
            topic_id = topic_ids[i]
            if topic_id is not None:
                if topic_id in ids:
                    continue
                ids.add(topic_id)
            topic = (name, topic_id, (partitions[i], replication[i], internal[i]), errors[i])
            life, assigns_id = self._resolve(name, topic_id)
            if life is None and topic_id is None and errors[i] is not None:
                continue  # R2: a describe error opens no incarnation (no identity)
            resolved.append((topic, life, assigns_id))
        return resolved

    def _observe(self, now: int, alias: str, topic: tuple, life: _Life | None, assigns_id: bool) -> _Life:
        name, topic_id, attrs, error = topic
        reappeared = False
        if life is not None and life.in_gap:
            end = life.end()
            life.in_gap = False
            self.active.discard(life)
            if end is not None:
                life.closed_at.append(end)
                life.versions[-1].valid_to = end
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
        elif previous.topic_id is None and life.topic_id is not None:
            change = "id_assigned"
        elif previous.name != name:
            change = "renamed"
        elif previous.attrs != attrs:
            change = "attributes_changed"
        else:
            change = None
        if change is not None:
            if previous is not None and previous.valid_to is None:
                previous.valid_to = now
            life.versions.append(_Version(alias, life.topic_id, name, attrs, change, now))
        life.attrs, life.last_seen, life.last_name = attrs, now, name
        if life.topic_id is None:
            self.idless_names[name] = self.idless_names.get(name, 0) + 1
        self.name_holder[name] = life
        return life

    def tables(self):
        """``(snapshot_runs, topic_incarnations)`` of the snapshots walked so far, as Arrow
        tables (incarnations without ``topic_uuid``). Changes nothing: the walk can go on."""
        runs = {c: [run[i] for run in self.runs] for i, c in enumerate(RUN_COLUMNS)}
        rows = []  # one tuple per version, INCARNATION_COLUMNS' values (transposed below)
        current = set((self.current or {}).values())  # last seen at the newest snapshot
        cluster_id = self.cluster_id
        for life in self.lives:
            last_seen = self.newest if life in current else life.last_seen
            ends = list(life.closed_at)
            end = life.end()
            if end is not None:
                ends.append(end)
            deleted_at = min(ends) if ends else None
            last = len(life.versions)
            for number, row in enumerate(life.versions, start=1):
                valid_to = end if number == last and end is not None else row.valid_to
                rows.append((life.key, cluster_id, row.alias, row.topic_id, row.name, number, row.change,
                             *row.attrs, row.valid_from, valid_to, valid_to is None, life.first_seen,
                             last_seen, deleted_at))
        out = dict(zip(_VERSION_ROW, map(list, zip(*rows, strict=True)) if rows else ([] for _ in _VERSION_ROW),
                       strict=True))
        return (t.arrow_table(runs, t.SNAPSHOT_RUNS_DDL, RUN_COLUMNS),
                t.arrow_table(out, t.TOPIC_INCARNATIONS_DDL, INCARNATION_COLUMNS))

    # --- the state between builds ---------------------------------------------------------------
    def dumps(self) -> bytes:
        """The state, for :meth:`loads` by a later build of the same code."""
        import pickle

        return pickle.dumps((STATE_FORMAT, self), protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def loads(data: bytes, cluster_id: str, policy: HoldPolicy) -> ClusterWalk | None:
        """A state :meth:`dumps` wrote, or None when it is of another format, cluster or hold
        policy (the caller then walks the cluster's whole history again). Only for files the
        build wrote itself (a version's ``_walk_state``): it is a pickle."""
        import pickle

        try:
            form, walk = pickle.loads(data)
        except Exception:  # noqa: BLE001 - damaged or of other code: walk the history again
            return None
        if form != STATE_FORMAT or not isinstance(walk, ClusterWalk) \
                or walk.cluster_id != cluster_id or walk.policy != policy:
            return None
        return walk


STATE_FORMAT = 3
"""Version of :meth:`ClusterWalk.dumps`' layout."""


# --- Arrow in, Arrow out ------------------------------------------------------------------------
SNAPSHOT_COLUMNS = (t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.COMPLETE, t.AUTHORITATIVE,
                     t.TOPIC_COUNT, t.ERROR_TOPIC_COUNT, t.SOURCE)
TOPIC_COLUMNS = (t.TOPIC_NAME, t.TOPIC_ID, *_ATTRS, t.ERROR)
"""A snapshot's topics as :meth:`ClusterWalk.snapshot` takes them."""


def snapshots_of(rows):
    """``(head, topics)`` of each snapshot in store rows of one or more snapshots (an Arrow
    table of ``tables.SNAPSHOT_STORE_DDL``'s columns; any order), in (cluster, time) order:
    what :meth:`ClusterWalk.snapshot` takes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not rows.num_rows:
        return
    rows = rows.select([*SNAPSHOT_COLUMNS, *TOPIC_COLUMNS]).sort_by(
        [(t.CLUSTER_ID, "ascending"), (t.CAPTURED_AT, "ascending"), (t.TOPIC_NAME, "ascending")]
    ).combine_chunks()
    instants = rows.column(t.CAPTURED_AT).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy()
    codes = pc.dictionary_encode(rows.column(t.CLUSTER_ID)).combine_chunks().indices.to_numpy()
    changed = (instants[1:] != instants[:-1]) | (codes[1:] != codes[:-1])
    starts = [0, *(np.flatnonzero(changed) + 1).tolist(), rows.num_rows]
    heads = rows.select(list(SNAPSHOT_COLUMNS)).take(starts[:-1]).to_pylist()
    topics = rows.select(list(TOPIC_COLUMNS))
    for number, head in enumerate(heads):
        head[t.CAPTURED_AT] = int(instants[starts[number]])
        part = topics.slice(starts[number], starts[number + 1] - starts[number])
        # an empty snapshot is one row without a topic (its marker)
        yield head, part.filter(pc.is_valid(part.column(t.TOPIC_NAME)))


def derive(store_rows, policy: HoldPolicy | None = None):
    """``(snapshot_runs, topic_incarnations)`` as Arrow tables from store rows (an Arrow table
    with the columns of ``tables.SNAPSHOT_STORE_DDL``; an empty snapshot is one row with a NULL
    ``topic_name``). The store holds each snapshot once; rows of any order."""
    policy = policy or HoldPolicy()
    walks: dict[str, ClusterWalk] = {}
    for head, topics in snapshots_of(store_rows):
        cluster_id = head[t.CLUSTER_ID]
        if cluster_id not in walks:
            walks[cluster_id] = ClusterWalk(cluster_id, policy)
        walks[cluster_id].snapshot(head, topics)
    return concat(walks.values())


def concat(walks):
    """``(snapshot_runs, topic_incarnations)`` of several clusters' walks."""
    import pyarrow as pa

    parts = [walk.tables() for walk in walks]
    if not parts:
        return (t.arrow_table({c: [] for c in RUN_COLUMNS}, t.SNAPSHOT_RUNS_DDL, RUN_COLUMNS),
                t.arrow_table({c: [] for c in INCARNATION_COLUMNS}, t.TOPIC_INCARNATIONS_DDL, INCARNATION_COLUMNS))
    return tuple(pa.concat_tables(tables) for tables in zip(*parts, strict=True))
