"""The executable form of the contract's consumer-lineage rules R8-R10: a plain-Python reference.

It takes the snapshots and the ``topic_incarnations`` rows derived from the same set (by the
topic reference or the Spark build) and gives the rows of ``group_offsets`` and
``group_incarnations``. The Spark build must equal it row for row; property tests check that.
Test-sized histories only.

- **R8 attribution.** An offset a snapshot S shows for group g on topic name n belongs to the
  incarnation of the topic ID that S shows under n. When S shows n without an ID (no ID
  reported, describe failed) or does not show n at all (an incomplete or held snapshot, a topic
  already gone), it belongs to the incarnation whose version named n is valid at S's
  ``captured_at`` (``valid_from <= captured_at < valid_to``, an open version having no end). When
  there is none, the offset stays in ``group_offsets`` with NULL ``incarnation_key`` and
  ``topic_id``, and makes no ``group_incarnations`` row. Attribution reads the final table, not
  the snapshots before S: a later snapshot confirming a held deletion moves a version's end back
  to the held snapshot's time, and the attribution follows (R5).
- **R9 carried positions.** ``carried_offset`` is true when, in some snapshot, a committed offset
  attributed to the incarnation exceeded the partition's log end offset read in the same
  snapshot (an unknown log end offset proves nothing).
- **R10 no false conclusions.** Nothing here is concluded from a group's *absence*: rows come
  only from offsets that were observed, so a snapshot whose group listing was incomplete, or a
  group whose offsets could not be read, changes no row about groups it did not show.

Where two versions named n are valid at one instant (a broker bug the gate refuses), the one
that began last wins, then the smaller ``incarnation_key``: deterministic either way.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from topic_lineage.snapshot import Snapshot


def _attributor(incarnations: list[dict]):
    """``(cluster_id, topic_name, topic_id shown or None, captured_at) -> (key, topic_id)``."""
    by_id: dict[tuple[str, str], str] = {}
    by_name: dict[tuple[str, str], list[dict]] = {}
    for row in incarnations:
        if row["topic_id"] is not None:
            by_id[(row["cluster_id"], row["topic_id"])] = row["incarnation_key"]
        by_name.setdefault((row["cluster_id"], row["topic_name"]), []).append(row)

    def attribute(cluster_id: str, name: str, shown_id: str | None, at: datetime):
        if shown_id is not None and (cluster_id, shown_id) in by_id:
            return by_id[(cluster_id, shown_id)], shown_id
        valid = [
            row for row in by_name.get((cluster_id, name), [])
            if row["valid_from"] <= at and (row["valid_to"] is None or at < row["valid_to"])
        ]
        if not valid:
            return None, None
        best = min(valid, key=lambda r: (-r["valid_from"].timestamp(), r["incarnation_key"]))
        return best["incarnation_key"], best["topic_id"]

    return attribute


def incarnation_ids(incarnations: list[dict]) -> dict[str, str | None]:
    """Each incarnation's topic ID: that of its newest version (NULL while it never had one)."""
    newest: dict[str, dict] = {}
    for row in incarnations:
        key = row["incarnation_key"]
        if key not in newest or row["version"] > newest[key]["version"]:
            newest[key] = row
    return {key: row["topic_id"] for key, row in newest.items()}


def derive_groups(
    snapshots: Iterable[Snapshot], incarnations: list[dict]
) -> tuple[list[dict], list[dict]]:
    """``(group_offsets, group_incarnations)`` rows of a set of snapshots (any order, repeats
    allowed), given the ``topic_incarnations`` rows of the same set."""
    unique = {(s.cluster_id, s.captured_at): s for s in snapshots}
    attribute = _attributor(incarnations)
    offsets: list[dict] = []
    for (cluster_id, captured_at), snapshot in sorted(unique.items()):
        shown = {t.name: t.topic_id for t in snapshot.topics}
        for group in sorted(snapshot.groups, key=lambda g: g.group_id):
            for offset in sorted(group.offsets, key=lambda o: (o.topic, o.partition)):
                key, topic_id = attribute(cluster_id, offset.topic, shown.get(offset.topic),
                                          captured_at)
                offsets.append({
                    "cluster_id": cluster_id, "captured_at": captured_at,
                    "group_id": group.group_id, "topic_name": offset.topic,
                    "topic_id": topic_id, "incarnation_key": key,
                    "partition": offset.partition,
                    "committed_offset": offset.committed_offset,
                    "log_end_offset": offset.log_end_offset,
                })

    ids = incarnation_ids(incarnations)
    per_incarnation: dict[tuple[str, str, str], dict] = {}
    for row in offsets:
        if row["incarnation_key"] is None:
            continue
        key = (row["cluster_id"], row["group_id"], row["incarnation_key"])
        carried = row["log_end_offset"] is not None and row["committed_offset"] > row["log_end_offset"]
        agg = per_incarnation.get(key)
        if agg is None:
            per_incarnation[key] = {
                "cluster_id": key[0], "group_id": key[1], "incarnation_key": key[2],
                "topic_id": ids.get(key[2]), "topic_name": row["topic_name"],
                "first_seen_at": row["captured_at"], "last_seen_at": row["captured_at"],
                "max_committed_offset": row["committed_offset"], "carried_offset": carried,
            }
            continue
        agg["first_seen_at"] = min(agg["first_seen_at"], row["captured_at"])
        # the name the group last read it under (the greater name when one snapshot shows two)
        agg["last_seen_at"], agg["topic_name"] = max(
            (agg["last_seen_at"], agg["topic_name"]), (row["captured_at"], row["topic_name"])
        )
        agg["max_committed_offset"] = max(agg["max_committed_offset"], row["committed_offset"])
        agg["carried_offset"] = agg["carried_offset"] or carried
    return offsets, list(per_incarnation.values())
