"""Seeded, realistic snapshot history for the benchmarks (and the quick benchmark test).

    from tests.benchmarks.datagen import History
    History(topics=10_000, clusters=3, seed=42).store_rounds(0, 1000)   # into $TOPIC_LINEAGE_HOME

A *round* is one snapshot of every cluster (an hourly capture DAG run); ``topics`` is the number
of live topics over all clusters, so ``topics x rounds`` is the number of observations. Each
cluster evolves on its own seeded random stream, so rounds ``0..n-1`` are the same whatever
``n`` is: a history of 10 rounds is a prefix of one of 1,000.

What happens between two rounds of one cluster (rates per topic per round unless said):

- deletion 0.2 %; a third of the deleted names are re-created 1-24 rounds later with a new ID;
- creation of new names, about as many as were deleted (the cluster's size stays stable);
- partition-count increase 0.1 % (doubled, or +1 .. +6);
- a describe error (``TOPIC_AUTHORIZATION_FAILED``, attributes unknown) 0.05 % per snapshot;
- 1 % of snapshots are incomplete (a random 80 % of the topics);
- round 3 of the last cluster is a broken listing: a complete snapshot showing 10 % of the topics
  (the mass-deletion hold R3 must hold it; round 4 shows everything again);
- each cluster has its ``__consumer_offsets`` (internal, 50 partitions).

A small history may by chance have no incomplete snapshot and no describe error; ``History``'s
``incomplete`` and ``describe_errors`` force them at given (cluster index, round) pairs (the
first non-internal topic shown gets the error). Unforced snapshots draw the same random numbers
either way, so forcing leaves the rest of a cluster's history unchanged up to that snapshot.

Every topic has an ID (a modern KRaft cluster); the DuckDB reference implementation relies on it.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from topic_lineage.snapshot import Snapshot, TopicObservation
from topic_lineage.topic_id import canonical, is_reserved

START = datetime(2026, 1, 1, tzinfo=UTC)
INTERVAL = timedelta(hours=1)
ERROR_NAME = "TOPIC_AUTHORIZATION_FAILED"
GLITCH_ROUND = 3

_TEAMS = ("payments", "orders", "search", "identity", "logistics", "ads", "risk", "catalog")
_KINDS = ("events", "commands", "changelog", "dlq", "retry", "snapshots")


def cluster_ids(count: int) -> list[tuple[str, str]]:
    """(cluster_id, alias) of the generated clusters; IDs look like KRaft cluster IDs."""
    aliases = ("prod-eu", "prod-us", "staging", "dev", "analytics")
    out = []
    for i in range(count):
        raw = uuid.UUID(int=random.Random(f"cluster-{i}").getrandbits(128))
        out.append((canonical(raw), aliases[i] if i < len(aliases) else f"cluster-{i}"))
    return out


class _Cluster:
    def __init__(self, index: int, cluster_id: str, alias: str, topics: int, seed: str, glitch: bool,
                 incomplete: frozenset[int] = frozenset(), describe_errors: frozenset[int] = frozenset()):
        self.index, self.cluster_id, self.alias, self.glitch = index, cluster_id, alias, glitch
        self.force_incomplete, self.force_errors = incomplete, describe_errors  # round numbers
        self.rng = random.Random(seed)
        self.serial = 0
        self.live: dict[str, TopicObservation] = {}
        self.recreate: list[tuple[int, str]] = []  # (round, name)
        self.add(TopicObservation("__consumer_offsets", self.new_id(), 50, 3, True, None))
        for _ in range(topics - 1):
            self.create(self.new_name())

    def new_id(self) -> str:
        while True:
            value = canonical(uuid.UUID(int=self.rng.getrandbits(128)))
            if not is_reserved(value):
                return value

    def new_name(self) -> str:
        self.serial += 1
        rng = self.rng
        return f"{rng.choice(_TEAMS)}.{rng.choice(_KINDS)}.svc-{self.serial:06d}-v{rng.randint(1, 3)}"

    def add(self, obs: TopicObservation) -> None:
        self.live[obs.name] = obs

    def create(self, name: str) -> None:
        rng = self.rng
        self.add(TopicObservation(name, self.new_id(), rng.choice((1, 3, 6, 12, 24)),
                                  rng.choice((1, 3, 3, 3)), False, None))

    def advance(self, round_no: int) -> None:
        """Churn between the previous round and ``round_no``."""
        rng = self.rng
        names = sorted(n for n in self.live if n != "__consumer_offsets")
        deleted = [n for n in names if rng.random() < 0.002]
        for name in deleted:
            del self.live[name]
            if rng.random() < 1 / 3:
                self.recreate.append((round_no + rng.randint(1, 24), name))
        due = [name for at, name in self.recreate if at <= round_no and name not in self.live]
        self.recreate = [(at, name) for at, name in self.recreate if at > round_no]
        for name in due:
            self.create(name)
        for _ in range(max(0, len(deleted) - len(due))):
            self.create(self.new_name())
        for name in names:
            if name in self.live and rng.random() < 0.001:
                old = self.live[name]
                grown = old.partition_count * 2 if rng.random() < 0.5 else old.partition_count + rng.randint(1, 6)
                self.add(TopicObservation(name, old.topic_id, grown, old.replication_factor, False, None))

    def snapshot(self, round_no: int) -> Snapshot:
        rng = self.rng
        at = START + round_no * INTERVAL + timedelta(minutes=7 * self.index)
        topics = [self.live[n] for n in sorted(self.live)]
        complete = True
        if self.glitch and round_no == GLITCH_ROUND:
            topics = [obs for obs in topics if rng.random() < 0.1]
        elif rng.random() < 0.01 or round_no in self.force_incomplete:  # draws either way
            complete = False
            topics = [obs for obs in topics if rng.random() < 0.8]
        shown = tuple(
            TopicObservation(obs.name, obs.topic_id, None, None, None, ERROR_NAME)
            if rng.random() < 0.0005 else obs
            for obs in topics
        )
        if round_no in self.force_errors:
            i = next(i for i, obs in enumerate(shown) if not obs.is_internal and not obs.error)
            obs = shown[i]
            shown = (*shown[:i], TopicObservation(obs.name, obs.topic_id, None, None, None, ERROR_NAME),
                     *shown[i + 1:])
        return Snapshot(self.cluster_id, self.alias, at, complete, shown)


class History:
    """The seeded history; iterate rounds with :meth:`rounds`, store them with :meth:`store_rounds`."""

    def __init__(self, topics: int = 10_000, clusters: int = 3, seed: int = 42, *,
                 incomplete: tuple[tuple[int, int], ...] = (),
                 describe_errors: tuple[tuple[int, int], ...] = ()):
        self.topics, self.clusters, self.seed = topics, clusters, seed
        self.incomplete, self.describe_errors = incomplete, describe_errors  # (cluster index, round)

    def rounds(self, start: int, stop: int) -> Iterator[list[Snapshot]]:
        """Rounds ``start .. stop-1`` (the state is replayed from round 0, so any range is
        consistent with every other)."""
        ids = cluster_ids(self.clusters)
        per_cluster = [self.topics // self.clusters + (i < self.topics % self.clusters)
                       for i in range(self.clusters)]
        sims = [
            _Cluster(i, cid, alias, n, f"{self.seed}-{cid}", glitch=(i == self.clusters - 1),
                     incomplete=frozenset(r for c, r in self.incomplete if c == i),
                     describe_errors=frozenset(r for c, r in self.describe_errors if c == i))
            for i, ((cid, alias), n) in enumerate(zip(ids, per_cluster))
        ]
        for round_no in range(stop):
            if round_no:
                for sim in sims:
                    sim.advance(round_no)
            snaps = [sim.snapshot(round_no) for sim in sims]
            if round_no >= start:
                yield snaps

    def store_rounds(self, start: int, stop: int, *, only_cluster: int | None = None) -> int:
        """Save rounds into the snapshot store of $TOPIC_LINEAGE_HOME; return observations stored."""
        from topic_lineage import store

        observations = 0
        for snaps in self.rounds(start, stop):
            if only_cluster is not None:
                snaps = [snaps[only_cluster]]
            store.save_all(snaps, "live")
            observations += sum(len(s.topics) for s in snaps)
        return observations
