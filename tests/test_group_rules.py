"""Consumer lineage rules R8-R10 on small explicit histories, against the plain-Python reference
(topic_lineage.scd.group_reference); each case states the invariant it guards and its exact
expected rows. The Spark build is compared with the same reference by property tests."""

from __future__ import annotations

import itertools

from scd_support import at, key_for_id, snap, tid, topic

from topic_lineage.reference import derive
from topic_lineage.scd.group_reference import derive_groups
from topic_lineage.snapshot import GroupObservation, GroupOffset, Snapshot

OLD, NEW = tid(1), tid(2)


def with_groups(snapshot: Snapshot, *groups: GroupObservation, complete=True) -> Snapshot:
    return Snapshot(snapshot.cluster_id, snapshot.cluster_alias, snapshot.captured_at,
                    snapshot.complete, snapshot.topics, groups_complete=complete, groups=groups)


def group(group_id: str, *offsets: tuple, error=None) -> GroupObservation:
    return GroupObservation(group_id, None if error else "Stable", error,
                            tuple(GroupOffset(*o) for o in offsets))


def lineage(history):
    _, incarnations = derive(history)
    offsets, per_incarnation = derive_groups(history, incarnations)
    return offsets, sorted(per_incarnation, key=lambda r: (r["group_id"], r["first_seen_at"]))


def test_a_position_carried_across_a_re_creation_is_marked_on_the_new_incarnation_only():
    """Issue #26's scenario (R8, R9): billing reads orders to 10 of 12; orders is deleted and
    re-created; billing commits its old position 1,000,000 on the new orders, whose log ends at 3."""
    history = [
        with_groups(snap(1, topic("orders", OLD)), group("billing", ("orders", 0, 10, 12))),
        with_groups(snap(2, topic("orders", NEW)), group("billing", ("orders", 0, 1_000_000, 3))),
    ]
    offsets, rows = lineage(history)
    assert [(o["incarnation_key"], o["topic_id"]) for o in offsets] == [
        (key_for_id(OLD), OLD), (key_for_id(NEW), NEW)]
    assert rows == [
        {"cluster_id": history[0].cluster_id, "group_id": "billing",
         "incarnation_key": key_for_id(OLD), "topic_id": OLD, "topic_name": "orders",
         "first_seen_at": at(1), "last_seen_at": at(1), "max_committed_offset": 10,
         "carried_offset": False},
        {"cluster_id": history[0].cluster_id, "group_id": "billing",
         "incarnation_key": key_for_id(NEW), "topic_id": NEW, "topic_name": "orders",
         "first_seen_at": at(2), "last_seen_at": at(2), "max_committed_offset": 1_000_000,
         "carried_offset": True},
    ]


def test_a_snapshot_that_does_not_show_the_name_attributes_to_the_incarnation_live_then():
    """R8: an incomplete snapshot lacking `orders` still places billing's offset on the
    incarnation whose version named `orders` was valid at that instant."""
    history = [
        snap(1, topic("orders", OLD), topic("payments", tid(3))),
        with_groups(snap(2, topic("payments", tid(3)), complete=False),
                    group("billing", ("orders", 0, 5, 9))),
    ]
    offsets, rows = lineage(history)
    assert offsets[0]["incarnation_key"] == key_for_id(OLD)
    assert [(r["incarnation_key"], r["first_seen_at"]) for r in rows] == [(key_for_id(OLD), at(2))]


def test_a_describe_error_is_attributed_through_the_name():
    """R8 with R2: a topic whose describe failed (no ID in that snapshot) is still present; its
    offsets belong to the incarnation valid under its name."""
    history = [
        snap(1, topic("orders", OLD)),
        with_groups(snap(2, topic("orders", error="TOPIC_AUTHORIZATION_FAILED")),
                    group("billing", ("orders", 0, 7, 7))),
    ]
    offsets, _ = lineage(history)
    assert (offsets[0]["incarnation_key"], offsets[0]["topic_id"]) == (key_for_id(OLD), OLD)


def test_an_offset_on_no_live_incarnation_stays_unattributed():
    """R8: a name that no incarnation holds at that instant (never seen, or deleted before)
    keeps its group_offsets row with NULL topic_id and makes no group_incarnations row."""
    history = [
        snap(1, topic("orders", OLD)),
        snap(2),  # complete and empty: orders deleted at 2 (one topic: below the R3 hold)
        with_groups(snap(3, complete=False), group("billing", ("orders", 0, 4, 4), ("ghost", 1, 1, 1))),
    ]
    offsets, rows = lineage(history)
    assert [(o["topic_name"], o["topic_id"], o["incarnation_key"]) for o in offsets] == [
        ("ghost", None, None), ("orders", None, None)]
    assert rows == []


def test_a_confirmed_hold_moves_attribution_back_to_the_held_snapshot():
    """R8 with R3 and R5: attribution reads the final table. Before the confirmation, billing's
    offset (in an incomplete snapshot after the held one) sits on the live `a`; once a later
    complete snapshot confirms the mass deletion, `a` ended at the held time and the offset
    belongs to no incarnation."""
    names = "abcdef"
    ids = {n: tid(10 + i) for i, n in enumerate(names)}
    before = [
        snap(1, *[topic(n, ids[n]) for n in names]),
        snap(2, topic("f", ids["f"])),  # would close 5 of 6: held
        with_groups(snap(3, topic("f", ids["f"]), complete=False),
                    group("billing", ("a", 0, 1, 1))),
    ]
    offsets, _ = lineage(before)
    assert offsets[0]["incarnation_key"] == key_for_id(ids["a"])
    confirmed = [*before, snap(4, topic("f", ids["f"]))]
    offsets, rows = lineage(confirmed)
    assert offsets[0]["incarnation_key"] is None and rows == []


def test_nothing_is_concluded_from_groups_a_snapshot_did_not_see():
    """R10: an incomplete group listing and a group whose offsets could not be read add no row
    and change none; the group's earlier lineage stands."""
    seen = with_groups(snap(1, topic("orders", OLD)), group("billing", ("orders", 0, 3, 5)))
    baseline = lineage([seen])
    later = [
        with_groups(snap(2, topic("orders", OLD)), complete=False),
        with_groups(snap(3, topic("orders", OLD)), group("billing", error="GROUP_AUTHORIZATION_FAILED")),
    ]
    assert lineage([seen, *later]) == baseline


def test_group_rows_are_a_function_of_the_set_of_snapshots():
    """R5 for groups: any order, any repetition, same rows."""
    history = [
        with_groups(snap(1, topic("orders", OLD)), group("billing", ("orders", 0, 10, 12))),
        with_groups(snap(2, topic("orders", NEW)), group("billing", ("orders", 0, 1_000_000, 3)),
                    group("audit", ("orders", 0, 1, 3), ("orders", 1, 2, 2))),
        with_groups(snap(3, topic("orders", NEW), complete=False), group("audit", ("orders", 1, 3, 3))),
    ]
    expected = lineage(history)
    for order in itertools.permutations(history):
        assert lineage([*order, order[0]]) == expected


def test_the_same_group_on_two_partitions_aggregates_per_incarnation():
    """group_incarnations: first and last snapshot with a committed offset of the group on the
    incarnation, the greatest committed offset over its partitions, carried if any was."""
    history = [
        with_groups(snap(1, topic("orders", OLD)), group("billing", ("orders", 0, 10, 12), ("orders", 1, 40, 40))),
        with_groups(snap(2, topic("orders", OLD)), group("billing", ("orders", 0, 12, 12), ("orders", 1, 41, 40))),
        with_groups(snap(3, topic("orders", OLD))),
    ]
    _, rows = lineage(history)
    assert [(r["first_seen_at"], r["last_seen_at"], r["max_committed_offset"], r["carried_offset"])
            for r in rows] == [(at(1), at(2), 41, True)]
