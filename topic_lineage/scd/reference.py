"""The executable form of the contract's rules R1-R6: a plain-Python reference of the SCD build.

A sequential fold over each cluster's snapshots in ``captured_at`` order, no Spark. It exists to
be read (this is what the rules mean, one snapshot at a time) and to be compared with the
derivation the builds use, :mod:`topic_lineage.scd.walk` (the same fold kept linear, run in Spark
tasks by :mod:`topic_lineage.scd.walk_job`); the property tests (``tests/test_scd_walk.py`` in
process, ``tests/test_scd_properties.py`` through Spark builds) check that it agrees with this
one row for row on random histories.
It is far too slow for real data: use it on test-sized histories only.

Per cluster, for each snapshot S in time order (the same snapshot given twice counts once):

1. **Identity (R1, R4).** Within S, topics are taken in name order (deterministic when two names
   carry one ID: a broker bug, see "Shared IDs" in the contract; the gate refuses such versions).
   A topic with an ID belongs to that ID's incarnation, except that a *new* ID (never seen in the
   cluster) for a name whose holder is a live ID-less incarnation joins it (``id_assigned``). A
   topic without an ID (no ID reported, or its describe failed) belongs to its name's holder (the
   incarnation of the name's latest observation) while that holder is live, else to a new
   ID-less incarnation keyed by the name. A describe error without an ID carries no identity
   (R2): it keeps its name's live holder present, and without one it is no observation at all
   (it opens no incarnation, closes and counts nothing).
2. **Hold (R3).** A complete, non-authoritative S is held when the live incarnations it would
   close by absence (live, not shown in S, not already lacking from an earlier complete
   snapshot, and whose name S does not show under another identity) number at least
   ``min_count`` and more than ``ratio`` of those plus the incarnations S shows again.
3. **Absence (R2, R3).** After its last observation an incarnation is in a *gap*. The first
   complete snapshot of the gap closes it at its own time, unless it is held; then a second
   complete snapshot in the gap confirms it, still at the held one's time. Incomplete snapshots
   never close anything. A describe error is an observation: present, attributes unchanged.
4. **Displacement (R1).** The first snapshot showing the name of an incarnation's latest
   observation under another identity closes it (any snapshot, complete or not). When several
   rules close one gap, the earliest time wins.
5. **Versions (R6).** An observation after a closed gap is ``reappeared`` (the ID's incarnation
   continues, ``deleted_at`` stays); an ID-less incarnation cannot reappear (a new one starts).
   Otherwise a new version starts when the ID first appears (``id_assigned``), the name changes
   (``renamed``) or an attribute changes (``attributes_changed``).
6. **Keys.** sha256 of ``cluster \\x1f id \\x1f topic_id`` when the incarnation's first
   observation carried an ID, else of ``cluster \\x1f name \\x1f name \\x1f first_seen``; first 32
   hex digits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from topic_lineage.scd.hold import DEFAULT_MIN_COUNT, DEFAULT_RATIO
from topic_lineage.snapshot import Snapshot, TopicObservation

ATTRS = ("partition_count", "replication_factor", "is_internal")


@dataclass
class _Gap:
    """The time after an incarnation's latest observation."""

    first_complete: datetime | None = None  # the first complete snapshot lacking it
    first_complete_held: bool = False
    confirmed: bool = False  # a second complete snapshot lacked it too
    displaced_at: datetime | None = None  # its name shown under another identity

    def end(self) -> datetime | None:
        """When the gap closed the incarnation (None: still live)."""
        absence = self.first_complete if (
            self.first_complete is not None and (not self.first_complete_held or self.confirmed)
        ) else None
        ends = [t for t in (absence, self.displaced_at) if t is not None]
        return min(ends) if ends else None


@dataclass
class _Incarnation:
    key: str
    topic_id: str | None  # None while ID-less (keyed by name)
    versions: list[dict] = field(default_factory=list)
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    last_name: str | None = None
    attrs: tuple = (None, None, None)
    closed_at: list[datetime] = field(default_factory=list)  # ends of its closed gaps
    gap: _Gap | None = None  # None while in the snapshot being processed

    def live(self) -> bool:
        return self.gap is None or self.gap.end() is None


def incarnation_key(cluster_id: str, *parts: str) -> str:
    """Rule 6's key: sha256 of the cluster and the parts joined by \\x1f, first 32 hex digits."""
    return hashlib.sha256("\x1f".join((cluster_id, *parts)).encode()).hexdigest()[:32]


def key_stamp(at: datetime) -> str:
    """``first_seen`` as an ID-less incarnation's key spells it (UTC, microseconds)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")


def is_held(closing: int, shown_again: int, ratio: float, min_count: int) -> bool:
    """R3: a complete snapshot closing ``closing`` of ``closing + shown_again`` live incarnations."""
    return closing >= min_count and closing > ratio * (closing + shown_again)


class _Cluster:
    def __init__(self, cluster_id: str, ratio: float, min_count: int):
        self.cluster_id = cluster_id
        self.ratio, self.min_count = ratio, min_count
        self.incarnations: list[_Incarnation] = []
        self.by_id: dict[str, _Incarnation] = {}
        self.seen_ids: set[str] = set()
        self.name_holder: dict[str, _Incarnation] = {}  # incarnation of the name's latest observation
        self.runs: list[dict] = []

    # -- identity ---------------------------------------------------------------------------
    def _resolve(self, topic: TopicObservation) -> tuple[_Incarnation | None, bool]:
        """(incarnation or None for a new one, assigns_id) for one observation."""
        holder = self.name_holder.get(topic.name)
        if topic.topic_id is None:
            return (holder if holder is not None and holder.live() else None), False
        if topic.topic_id in self.by_id:
            return self.by_id[topic.topic_id], False
        if (
            holder is not None and holder.topic_id is None and holder.live()
            and topic.topic_id not in self.seen_ids
        ):
            return holder, True
        return None, False

    def _identities(self, snapshot: Snapshot) -> list[tuple[TopicObservation, _Incarnation | None, bool]]:
        """Each topic with its incarnation. Shared IDs (two names, one ID: a broker bug): only
        the first name in name order is the ID's observation (the gate refuses such snapshots)."""
        topics, ids = [], set()
        for topic in sorted(snapshot.topics, key=lambda t: t.name):
            if topic.topic_id is not None:
                if topic.topic_id in ids:
                    continue
                ids.add(topic.topic_id)
            topics.append(topic)
        resolved = [(topic, *self._resolve(topic)) for topic in topics]
        # R2: a describe error carries no identity; without a live incarnation of its name it
        # opens none (the incarnation starts at the first observation with an identity)
        return [(topic, inc, assigns) for topic, inc, assigns in resolved
                if inc is not None or topic.topic_id is not None or topic.error is None]

    # -- one snapshot -----------------------------------------------------------------------
    def apply(self, snapshot: Snapshot) -> None:
        self.now = now = snapshot.captured_at
        resolved = self._identities(snapshot)
        shown = {id(inc) for _, inc, _ in resolved if inc is not None}
        # R1: names this snapshot shows under another identity than their holder's.
        displaced = set()
        for topic, inc, _ in resolved:
            holder = self.name_holder.get(topic.name)
            if holder is not None and holder is not inc and id(holder) not in shown \
                    and holder.last_name == topic.name:
                displaced.add(id(holder))

        held = False
        if snapshot.complete and not snapshot.authoritative:
            closing = sum(
                1 for inc in self.incarnations
                if id(inc) not in shown and inc.gap is not None and inc.gap.first_complete is None
                and inc.gap.displaced_at is None and id(inc) not in displaced
            )
            # "Shown again": an identity observed before, even if closed since (a reappearing
            # ID; an ID-less name seen again after its incarnation ended).
            shown_again = sum(1 for inc in self.incarnations if id(inc) in shown) + sum(
                1 for topic, inc, _ in resolved
                if inc is None and topic.topic_id is None and any(
                    other.topic_id is None and other.last_name == topic.name
                    for other in self.incarnations
                )
            )
            held = is_held(closing, shown_again, self.ratio, self.min_count)
        self.runs.append({
            "cluster_id": snapshot.cluster_id, "cluster_alias": snapshot.cluster_alias,
            "captured_at": now, "complete": snapshot.complete, "topic_count": len(snapshot.topics),
            "error_topic_count": snapshot.error_topic_count, "held": held,
        })

        for inc in self.incarnations:  # gaps before the observations change them
            if id(inc) in shown or inc.gap is None:
                continue
            if id(inc) in displaced and inc.gap.displaced_at is None:
                inc.gap.displaced_at = now
            if snapshot.complete:
                if inc.gap.first_complete is None:
                    inc.gap.first_complete, inc.gap.first_complete_held = now, held
                else:
                    inc.gap.confirmed = True

        for topic, inc, assigns_id in resolved:
            self._observe(snapshot, topic, inc, assigns_id)

    def _observe(self, snapshot: Snapshot, topic: TopicObservation, inc, assigns_id: bool) -> None:
        now = snapshot.captured_at
        reappeared = False
        if inc is not None and inc.gap is not None:
            end = inc.gap.end()
            if end is not None:
                inc.closed_at.append(end)
                inc.versions[-1]["valid_to"] = end
                if inc.topic_id is None and not assigns_id:
                    inc = None  # an ID-less incarnation cannot reappear
                else:
                    reappeared = True
        if inc is None:
            if topic.topic_id is not None:
                key = incarnation_key(self.cluster_id, "id", topic.topic_id)
            else:
                key = incarnation_key(self.cluster_id, "name", topic.name, key_stamp(now))
            inc = _Incarnation(key=key, topic_id=topic.topic_id, first_seen=now)
            self.incarnations.append(inc)
        if topic.topic_id is not None:
            inc.topic_id = topic.topic_id
            self.by_id[topic.topic_id] = inc
            self.seen_ids.add(topic.topic_id)
        attrs = inc.attrs if topic.error is not None else tuple(getattr(topic, a) for a in ATTRS)
        previous = inc.versions[-1] if inc.versions else None
        if previous is None:
            change = "created"
        elif reappeared:
            change = "reappeared"
        elif previous["topic_id"] is None and inc.topic_id is not None:
            change = "id_assigned"
        elif previous["topic_name"] != topic.name:
            change = "renamed"
        elif tuple(previous[a] for a in ATTRS) != attrs:
            change = "attributes_changed"
        else:
            change = None
        if change is not None:
            if previous is not None and previous["valid_to"] is None:
                previous["valid_to"] = now
            inc.versions.append({
                "cluster_alias": snapshot.cluster_alias, "topic_id": inc.topic_id,
                "topic_name": topic.name, "version": len(inc.versions) + 1, "change_type": change,
                **dict(zip(ATTRS, attrs)), "valid_from": now, "valid_to": None,
            })
        inc.attrs, inc.last_seen, inc.last_name, inc.gap = attrs, now, topic.name, None
        self.name_holder[topic.name] = inc

    def finish(self) -> None:
        """Open the gap after each incarnation's latest observation (end of a snapshot)."""
        for inc in self.incarnations:
            if inc.gap is None:
                inc.gap = _Gap()

    def rows(self) -> list[dict]:
        out = []
        for inc in self.incarnations:
            ends = list(inc.closed_at)
            end = inc.gap.end() if inc.gap is not None else None
            if end is not None:
                ends.append(end)
                inc.versions[-1]["valid_to"] = end
            for v in inc.versions:
                out.append({
                    "incarnation_key": inc.key, "cluster_id": self.cluster_id, **v,
                    "is_current": v["valid_to"] is None,
                    "first_seen_at": inc.first_seen, "last_seen_at": inc.last_seen,
                    "deleted_at": min(ends) if ends else None,
                })
        return out


def derive(
    snapshots: Iterable[Snapshot], ratio: float = DEFAULT_RATIO, min_count: int = DEFAULT_MIN_COUNT
) -> tuple[list[dict], list[dict]]:
    """``(snapshot_runs, topic_incarnations)`` rows of a set of snapshots (any order, repeats
    allowed), as plain dicts with the contract's columns (``topic_uuid`` left out)."""
    unique = {(s.cluster_id, s.captured_at): s for s in snapshots}
    clusters: dict[str, _Cluster] = {}
    for (cluster_id, _), snapshot in sorted(unique.items()):
        cluster = clusters.setdefault(cluster_id, _Cluster(cluster_id, ratio, min_count))
        cluster.apply(snapshot)
        cluster.finish()
    runs, incarnations = [], []
    for cluster in clusters.values():
        runs += cluster.runs
        incarnations += cluster.rows()
    return runs, incarnations
