"""Consumer-lineage (R8-R10) histories shared by the reference tests (tests/test_group_rules.py)
and the Spark comparison (tests/test_group_spark.py): each a small explicit history named for
the case it pins."""

from __future__ import annotations

from dataclasses import replace

from scd_support import snap, tid, topic

from topic_lineage.snapshot import GroupObservation, GroupOffset, Snapshot

OLD, NEW = tid(1), tid(2)
SIX = "abcdef"
SIX_IDS = {n: tid(10 + i) for i, n in enumerate(SIX)}


def with_groups(snapshot: Snapshot, *groups: GroupObservation, complete=True) -> Snapshot:
    return replace(snapshot, groups_complete=complete, groups=groups)


def group(group_id: str, *offsets: tuple, error=None) -> GroupObservation:
    return GroupObservation(group_id, None if error else "Stable", error,
                            tuple(GroupOffset(*o) for o in offsets))


def carried_across_recreation():
    """Issue #26: billing reads orders to 10 of 12; orders is re-created; billing commits its old
    position 1,000,000 on the new orders, whose log ends at 3."""
    return [
        with_groups(snap(1, topic("orders", OLD)), group("billing", ("orders", 0, 10, 12))),
        with_groups(snap(2, topic("orders", NEW)), group("billing", ("orders", 0, 1_000_000, 3))),
    ]


def name_missing_from_incomplete_snapshot():
    return [
        snap(1, topic("orders", OLD), topic("payments", tid(3))),
        with_groups(snap(2, topic("payments", tid(3)), complete=False),
                    group("billing", ("orders", 0, 5, 9))),
    ]


def describe_error():
    return [
        snap(1, topic("orders", OLD)),
        with_groups(snap(2, topic("orders", error="TOPIC_AUTHORIZATION_FAILED")),
                    group("billing", ("orders", 0, 7, 7))),
    ]


def no_live_incarnation():
    return [
        snap(1, topic("orders", OLD)),
        snap(2),  # complete and empty: orders deleted at 2 (one topic: below the R3 hold)
        with_groups(snap(3, complete=False),
                    group("billing", ("orders", 0, 4, 4), ("ghost", 1, 1, 1))),
    ]


def held_deletion(confirmed: bool):
    history = [
        snap(1, *[topic(n, SIX_IDS[n]) for n in SIX]),
        snap(2, topic("f", SIX_IDS["f"])),  # would close 5 of 6: held
        with_groups(snap(3, topic("f", SIX_IDS["f"]), complete=False),
                    group("billing", ("a", 0, 1, 1))),
    ]
    return [*history, snap(4, topic("f", SIX_IDS["f"]))] if confirmed else history


def unseen_groups():
    """An incomplete group listing and a group whose offsets could not be read (R10)."""
    return [
        with_groups(snap(1, topic("orders", OLD)), group("billing", ("orders", 0, 3, 5))),
        with_groups(snap(2, topic("orders", OLD)), complete=False),
        with_groups(snap(3, topic("orders", OLD)),
                    group("billing", error="GROUP_AUTHORIZATION_FAILED")),
    ]


def two_groups_out_of_order():
    return [
        with_groups(snap(3, topic("orders", NEW), complete=False), group("audit", ("orders", 1, 3, 3))),
        with_groups(snap(1, topic("orders", OLD)), group("billing", ("orders", 0, 10, 12))),
        with_groups(snap(2, topic("orders", NEW)), group("billing", ("orders", 0, 1_000_000, 3)),
                    group("audit", ("orders", 0, 1, 3), ("orders", 1, 2, 2))),
    ]


def two_partitions():
    return [
        with_groups(snap(1, topic("orders", OLD)),
                    group("billing", ("orders", 0, 10, 12), ("orders", 1, 40, 40))),
        with_groups(snap(2, topic("orders", OLD)),
                    group("billing", ("orders", 0, 12, 12), ("orders", 1, 41, None))),
        with_groups(snap(3, topic("orders", OLD)),
                    group("billing", ("orders", 0, 13, 12))),
        with_groups(snap(4, topic("orders", OLD))),
    ]


def id_less_then_assigned():
    """R4 with R8: offsets on a topic without an ID attach to its name-keyed incarnation, which
    carries on when the ID is assigned."""
    return [
        with_groups(snap(1, topic("orders")), group("billing", ("orders", 0, 1, 2))),
        with_groups(snap(2, topic("orders", OLD)), group("billing", ("orders", 0, 2, 2))),
    ]


EXAMPLES = {
    "carried_across_recreation": carried_across_recreation,
    "name_missing_from_incomplete_snapshot": name_missing_from_incomplete_snapshot,
    "describe_error": describe_error,
    "no_live_incarnation": no_live_incarnation,
    "held_deletion_pending": lambda: held_deletion(False),
    "held_deletion_confirmed": lambda: held_deletion(True),
    "unseen_groups": unseen_groups,
    "two_groups_out_of_order": two_groups_out_of_order,
    "two_partitions": two_partitions,
    "id_less_then_assigned": id_less_then_assigned,
}


def interchange_snapshot(cluster_id: str, alias: str, day: int, topics: dict[str, str],
                         offsets: dict[str, tuple[int, int]]) -> dict:
    """One interchange-format snapshot at 2026-11-``day``: ``topics`` name -> ID, 2 partitions
    each; group ``billing`` at ``offsets`` name -> (committed offset, log end offset)."""
    return {
        "cluster_id": cluster_id, "cluster_alias": alias, "captured_at": f"2026-11-{day:02d}T00:00:00Z",
        "complete": True,
        "topics": [{"name": n, "topic_id": i, "partition_count": 2, "replication_factor": 1,
                    "is_internal": False, "error": None} for n, i in sorted(topics.items())],
        "groups_complete": True,
        "groups": [{"group_id": "billing", "state": "Stable", "error": None, "offsets": [
            {"topic": n, "partition": 0, "committed_offset": o, "log_end_offset": end}
            for n, (o, end) in sorted(offsets.items())]}],
    }
