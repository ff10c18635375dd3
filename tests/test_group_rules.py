"""Consumer lineage rules R8-R10 on small explicit histories (tests/group_support.py), against
the plain-Python reference (topic_lineage.scd.group_reference); each case states the invariant it
guards and its exact expected rows. tests/test_group_spark.py holds the Spark build to the same
reference on these histories and on random ones."""

from __future__ import annotations

import itertools

import group_support as ex
from scd_support import CLUSTER, at, key_for_id, key_for_name, snap, topic

from topic_lineage.scd.group_reference import derive_groups
from topic_lineage.scd.reference import derive


def lineage(history):
    _, incarnations = derive(history)
    offsets, per_incarnation = derive_groups(history, incarnations)
    return offsets, sorted(per_incarnation, key=lambda r: (r["group_id"], r["first_seen_at"]))


def row(key, topic_id, first, last, max_offset, carried, group="billing", name="orders"):
    return {"cluster_id": CLUSTER, "group_id": group, "incarnation_key": key, "topic_id": topic_id,
            "topic_name": name, "first_seen_at": first, "last_seen_at": last,
            "max_committed_offset": max_offset, "carried_offset": carried}


def test_a_position_carried_across_a_re_creation_is_marked_on_the_new_incarnation_only():
    """Issue #26's scenario (R8, R9): the old position committed on the new orders is carried;
    the group's reading of the old orders is not."""
    offsets, rows = lineage(ex.carried_across_recreation())
    assert [(o["incarnation_key"], o["topic_id"]) for o in offsets] == [
        (key_for_id(ex.OLD), ex.OLD), (key_for_id(ex.NEW), ex.NEW)]
    assert rows == [row(key_for_id(ex.OLD), ex.OLD, at(1), at(1), 10, False),
                    row(key_for_id(ex.NEW), ex.NEW, at(2), at(2), 1_000_000, True)]


def test_a_snapshot_that_does_not_show_the_name_attributes_to_the_incarnation_live_then():
    """R8: an incomplete snapshot lacking `orders` still places billing's offset on the
    incarnation whose version named `orders` was valid at that instant."""
    offsets, rows = lineage(ex.name_missing_from_incomplete_snapshot())
    assert offsets[0]["incarnation_key"] == key_for_id(ex.OLD)
    assert rows == [row(key_for_id(ex.OLD), ex.OLD, at(2), at(2), 5, False)]


def test_a_describe_error_is_attributed_through_the_name():
    """R8 with R2: a topic whose describe failed (no ID in that snapshot) is still present; its
    offsets belong to the incarnation valid under its name."""
    offsets, _ = lineage(ex.describe_error())
    assert (offsets[0]["incarnation_key"], offsets[0]["topic_id"]) == (key_for_id(ex.OLD), ex.OLD)


def test_an_offset_on_no_live_incarnation_stays_unattributed():
    """R8: a name that no incarnation holds at that instant (never seen, or deleted before)
    keeps its group_offsets row with NULL topic_id and makes no group_incarnations row."""
    offsets, rows = lineage(ex.no_live_incarnation())
    assert [(o["topic_name"], o["topic_id"], o["incarnation_key"]) for o in offsets] == [
        ("ghost", None, None), ("orders", None, None)]
    assert rows == []


def test_a_confirmed_hold_moves_attribution_back_to_the_held_snapshot():
    """R8 with R3 and R5: attribution reads the final table. Before the confirmation, billing's
    offset (in an incomplete snapshot after the held one) sits on the live `a`; once a later
    complete snapshot confirms the mass deletion, `a` ended at the held time and the offset
    belongs to no incarnation."""
    offsets, _ = lineage(ex.held_deletion(confirmed=False))
    assert offsets[0]["incarnation_key"] == key_for_id(ex.SIX_IDS["a"])
    offsets, rows = lineage(ex.held_deletion(confirmed=True))
    assert offsets[0]["incarnation_key"] is None and rows == []


def test_nothing_is_concluded_from_groups_a_snapshot_did_not_see():
    """R10: an incomplete group listing and a group whose offsets could not be read add no row
    and change none; the group's earlier lineage stands."""
    history = ex.unseen_groups()
    assert lineage(history) == lineage(history[:1])


def test_group_rows_are_a_function_of_the_set_of_snapshots():
    """R5 for groups: any order, any repetition, same rows."""
    history = ex.two_groups_out_of_order()
    expected = lineage(history)
    for order in itertools.permutations(history):
        assert lineage([*order, order[0]]) == expected


def test_the_same_group_on_two_partitions_aggregates_per_incarnation():
    """group_incarnations: first and last snapshot with a committed offset of the group on the
    incarnation, the greatest committed offset over its partitions, carried if any was; an
    unknown log end offset proves nothing; a snapshot without the group changes nothing."""
    _, rows = lineage(ex.two_partitions())
    assert rows == [row(key_for_id(ex.OLD), ex.OLD, at(1), at(3), 41, True)]
    _, rows = lineage(ex.two_partitions()[:2])
    assert rows == [row(key_for_id(ex.OLD), ex.OLD, at(1), at(2), 41, False)]


def test_offsets_on_a_topic_without_id_follow_its_incarnation_when_the_id_is_assigned():
    """R4 with R8: one incarnation (keyed by name) across the assignment; its ID is the
    group's topic_id."""
    offsets, rows = lineage(ex.id_less_then_assigned())
    key = key_for_name("orders", at(1))
    assert [(o["incarnation_key"], o["topic_id"]) for o in offsets] == [(key, None), (key, ex.OLD)]
    assert rows == [row(key, ex.OLD, at(1), at(2), 2, False)]


def test_an_offset_of_a_topic_never_seen_in_any_snapshot_is_kept_unattributed():
    offsets, rows = lineage([ex.with_groups(snap(1, topic("orders", ex.OLD)),
                                            ex.group("billing", ("other", 0, 1, 1)))])
    assert [(o["topic_name"], o["incarnation_key"]) for o in offsets] == [("other", None)]
    assert rows == []
