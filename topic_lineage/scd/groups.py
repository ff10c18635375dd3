"""Consumer lineage (contract R8-R10) of one Kafka cluster, in the walk task that derived its
incarnations: Arrow tables in, Arrow tables out, no I/O.

:mod:`topic_lineage.scd.group_reference` is the same rules in plain Python over whole
histories; read it first. Here, for one cluster:

1. :meth:`ClusterGroups.offsets` attributes each observed offset (R8): by the topic ID the same
   snapshot shows under the name, else by the version named so that is valid at the snapshot's
   time (the one that began last, then the smaller key), else to nothing (NULL
   ``incarnation_key`` and ``topic_id``).
2. :meth:`ClusterGroups.incarnations` aggregates the attributed offsets per (group, incarnation): first
   and last snapshot, greatest committed offset, and R9's ``carried_offset``. Rows come only from
   observed offsets, so nothing is concluded from a group's absence (R10).

Both read the cluster's *final* ``topic_incarnations`` (the walk's, once it has taken every
snapshot), so they are a function of the set of snapshots like it (R5). The walk task
(:mod:`topic_lineage.scd.walk_job`) calls them after its walk: a cluster's group rows need only
that cluster's incarnations, so they are derived where those are, with no Spark query of the
driver's (which cost a small build 7.6 of its 18.5 s: issue #52, 2026-12-02).

Instants are microseconds since the epoch throughout (Arrow timestamps cast to int64: their
``to_pylist`` would import pandas in a fresh Python worker).
"""

from __future__ import annotations

from topic_lineage import tables as t

KEY = t.INCARNATION_KEY


class ClusterGroups:
    """One cluster's consumer lineage: :meth:`offsets` of each stored group file in turn (any
    order), then :meth:`incarnations`. What it holds between files is one row per (group,
    incarnation), so a task's memory does not grow with the offsets' history beyond the Arrow
    rows it returns."""

    def __init__(self, cluster_id: str, incarnations):
        self.cluster_id = cluster_id
        self.attribute = _attributor(incarnations)
        self.ids = _incarnation_ids(incarnations)
        self.per: dict[tuple[str, str], list] = {}  # (group, key) -> first, (last, name), max, carried

    def offsets(self, group_rows, shown: dict[str, str]):
        """R8: ``group_offsets`` rows (``GROUP_OFFSETS_DDL``) of one snapshot's stored group rows
        (``GROUP_STORE_DDL``; rows without a topic, of groups without offsets or of a capture
        that saw no group, are left out); ``shown``: topic name -> the topic ID that snapshot
        shows under it. Each attributed offset also counts towards :meth:`incarnations`."""
        import pyarrow.compute as pc

        rows = group_rows.filter(pc.is_valid(group_rows.column(t.TOPIC_NAME)))
        got = {c: _values(rows.column(c)) for c in
               (t.CAPTURED_AT, t.GROUP_ID, t.TOPIC_NAME, t.PARTITION, t.COMMITTED_OFFSET, t.LOG_END_OFFSET)}
        order = sorted(range(rows.num_rows), key=lambda i: (got[t.CAPTURED_AT][i], got[t.GROUP_ID][i],
                                                             got[t.TOPIC_NAME][i], got[t.PARTITION][i]))
        out = {c: [] for c in t.ddl_columns(t.GROUP_OFFSETS_DDL)}
        for i in order:
            at, name, group_id = got[t.CAPTURED_AT][i], got[t.TOPIC_NAME][i], got[t.GROUP_ID][i]
            committed, end = got[t.COMMITTED_OFFSET][i], got[t.LOG_END_OFFSET][i]
            key, topic_id = self.attribute(name, shown.get(name), at)
            for column, value in ((t.CLUSTER_ID, self.cluster_id), (t.CAPTURED_AT, at), (t.GROUP_ID, group_id),
                                  (t.TOPIC_NAME, name), (t.TOPIC_ID, topic_id), (KEY, key),
                                  (t.PARTITION, got[t.PARTITION][i]), (t.COMMITTED_OFFSET, committed),
                                  (t.LOG_END_OFFSET, end)):
                out[column].append(value)
            if key is not None:
                self._count(group_id, key, at, name, committed, end is not None and committed > end)
        return t.arrow_table(out, t.GROUP_OFFSETS_DDL)

    def _count(self, group_id: str, key: str, at: int, name: str, committed: int, carried: bool) -> None:
        agg = self.per.get((group_id, key))
        if agg is None:
            self.per[(group_id, key)] = [at, (at, name), committed, carried]
            return
        agg[0] = min(agg[0], at)
        # the name the group last read it under (the greater when one snapshot shows two)
        agg[1] = max(agg[1], (at, name))
        agg[2] = max(agg[2], committed)
        agg[3] = agg[3] or carried

    def incarnations(self):
        """R9 and the per-incarnation lineage of each group (``GROUP_INCARNATIONS_DDL``), of
        every offset attributed so far."""
        out = {c: [] for c in t.ddl_columns(t.GROUP_INCARNATIONS_DDL)}
        for (group_id, key), (first, (last, name), committed, carried) in sorted(self.per.items()):
            for column, value in ((t.CLUSTER_ID, self.cluster_id), (t.GROUP_ID, group_id), (KEY, key),
                                  (t.TOPIC_ID, self.ids.get(key)), (t.TOPIC_NAME, name),
                                  (t.FIRST_SEEN_AT, first), (t.LAST_SEEN_AT, last),
                                  (t.MAX_COMMITTED_OFFSET, committed), (t.CARRIED_OFFSET, carried)):
                out[column].append(value)
        return t.arrow_table(out, t.GROUP_INCARNATIONS_DDL)


def _attributor(incarnations):
    """``(topic_name, topic_id shown or None, instant) -> (key, topic_id)`` over one cluster's
    ``topic_incarnations`` rows."""
    rows = {c: _values(incarnations.column(c))
            for c in (KEY, t.TOPIC_ID, t.TOPIC_NAME, t.VALID_FROM, t.VALID_TO)}
    by_id: dict[str, str] = {}
    by_name: dict[str, list[tuple]] = {}
    for key, topic_id, name, valid_from, valid_to in zip(*rows.values(), strict=True):
        if topic_id is not None:
            by_id[topic_id] = key
        by_name.setdefault(name, []).append((valid_from, valid_to, key, topic_id))
    for versions in by_name.values():  # the one that began last first, then the smaller key
        versions.sort(key=lambda v: (-v[0], v[2]))

    def attribute(name: str, shown_id: str | None, at: int):
        if shown_id is not None and shown_id in by_id:
            return by_id[shown_id], shown_id
        for valid_from, valid_to, key, topic_id in by_name.get(name, ()):
            if valid_from <= at and (valid_to is None or at < valid_to):
                return key, topic_id
        return None, None

    return attribute


def _incarnation_ids(incarnations) -> dict[str, str | None]:
    """Each incarnation's topic ID: that of its newest version (NULL while it never had one)."""
    newest: dict[str, tuple[int, str | None]] = {}
    for key, number, topic_id in zip(*(_values(incarnations.column(c)) for c in (KEY, t.VERSION, t.TOPIC_ID)),
                                     strict=True):
        if key not in newest or number > newest[key][0]:
            newest[key] = (number, topic_id)
    return {key: topic_id for key, (_, topic_id) in newest.items()}


def _values(column) -> list:
    """A column's values; instants as microseconds since the epoch."""
    import pyarrow as pa

    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    return column.to_pylist()
