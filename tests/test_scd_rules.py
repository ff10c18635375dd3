"""Each SCD rule (contract R1-R6) as a small explicit input and the exact expected rows.

The derivation under test is the production one: Snapshot objects are stored and built
(scd_support.derive: the walk, topic_lineage.scd.walk, in a Spark task per cluster), exactly
what a user's build does. The walk is held to the reference (topic_lineage.scd.reference) on
random histories by the property tests (tests/test_scd_walk.py, tests/test_scd_properties.py).

Each test's input is registered at import (EXAMPLES) and the module's inputs are derived
together, each on clusters of its own (scd_support.Examples); every test then checks its own
input's rows, as exactly as when it had a derivation to itself.
"""

from __future__ import annotations

import pytest
from scd_support import (
    ALIAS,
    CLUSTER,
    Examples,
    assert_table_equal,
    at,
    expected_frame,
    key_for_id,
    key_for_name,
    snap,
    tid,
    topic,
    version,
)

from topic_lineage import tables as t
from topic_lineage.scd.hold import HoldPolicy

pytestmark = pytest.mark.spark

X, Y, Z = tid(1), tid(2), tid(3)

# Every test's input, registered here and derived together (scd_support.Examples): one Spark
# derivation per hold policy instead of one per test (issue #24, goal 4).
EXAMPLES = Examples()


@pytest.fixture(scope="module")
def derived(spark):
    """This module's examples, each batch derived once, when a test first asks for one of it."""
    return EXAMPLES.on(spark)


def incarnations(derived, example):
    return derived[example].topic_incarnations


def held_flags(derived, example) -> list[bool]:
    runs = sorted(derived[example].snapshot_runs.collect(), key=lambda row: row[t.CAPTURED_AT])
    return [row[t.HELD] for row in runs]


NEW_TOPIC = EXAMPLES.add([snap(0, topic("orders", X))])


def test_new_topic_is_one_current_created_version(spark, derived):
    """A topic seen once is one incarnation, version 1, created, current, not deleted."""
    actual = incarnations(derived, NEW_TOPIC)
    expected = [version(key_for_id(X), "orders", X, 1, "created", at(0), None,
                        first_seen=at(0), last_seen=at(0))]
    assert_table_equal(actual, expected_frame(spark, expected))


CHANGED_ATTRIBUTES = EXAMPLES.add([
    snap(0, topic("orders", X, partitions=3)),
    snap(1, topic("orders", X, partitions=6)),
    snap(2, topic("orders", X, partitions=6)),
    snap(3, topic("orders", X, partitions=6, rf=2)),
    snap(4, topic("orders", X, partitions=6, rf=2, internal=True)),
])


def test_changed_attributes_open_new_versions(spark, derived):
    """Partition count, replication factor and the internal flag each start a version."""
    actual = incarnations(derived, CHANGED_ATTRIBUTES)
    k, seen = key_for_id(X), {"first_seen": at(0), "last_seen": at(4)}
    expected = [
        version(k, "orders", X, 1, "created", at(0), at(1), partitions=3, **seen),
        version(k, "orders", X, 2, "attributes_changed", at(1), at(3), partitions=6, **seen),
        version(k, "orders", X, 3, "attributes_changed", at(3), at(4), partitions=6, rf=2, **seen),
        version(k, "orders", X, 4, "attributes_changed", at(4), None, partitions=6, rf=2,
                internal=True, **seen),
    ]
    assert_table_equal(actual, expected_frame(spark, expected))


RENAMED = EXAMPLES.add([snap(0, topic("orders", X)), snap(1, topic("orders-v2", X))])


def test_same_id_under_new_name_is_renamed(spark, derived):
    """An ID seen under another name is the same incarnation, new version `renamed`."""
    actual = incarnations(derived, RENAMED)
    k, seen = key_for_id(X), {"first_seen": at(0), "last_seen": at(1)}
    expected = [
        version(k, "orders", X, 1, "created", at(0), at(1), **seen),
        version(k, "orders-v2", X, 2, "renamed", at(1), None, **seen),
    ]
    assert_table_equal(actual, expected_frame(spark, expected))


ONLY_COMPLETE_DELETE = EXAMPLES.add([
    snap(0, topic("orders", X), topic("payments", Y)),
    snap(1, topic("orders", X), complete=False),
    snap(2, topic("orders", X)),
])


def test_only_complete_snapshots_delete(spark, derived):
    """R2: an incomplete snapshot lacking a topic deletes nothing; the next complete one does."""
    actual = incarnations(derived, ONLY_COMPLETE_DELETE)
    expected = [
        version(key_for_id(X), "orders", X, 1, "created", at(0), None,
                first_seen=at(0), last_seen=at(2)),
        version(key_for_id(Y), "payments", Y, 1, "created", at(0), at(2),
                first_seen=at(0), last_seen=at(0), deleted=at(2)),
    ]
    assert_table_equal(actual, expected_frame(spark, expected))


DESCRIBE_ERROR = EXAMPLES.add([
    snap(0, topic("orders", X, partitions=12)),
    snap(1, topic("orders", X, error="TOPIC_AUTHORIZATION_FAILED")),
    snap(2, topic("orders", X, error="TOPIC_AUTHORIZATION_FAILED")),
])


def test_describe_error_is_present_with_unchanged_attributes(spark, derived):
    """R2: a topic whose describe failed keeps its attributes and is not deleted."""
    actual = incarnations(derived, DESCRIBE_ERROR)
    expected = [version(key_for_id(X), "orders", X, 1, "created", at(0), None, partitions=12,
                        first_seen=at(0), last_seen=at(2))]
    assert_table_equal(actual, expected_frame(spark, expected))


INCOMPLETE_CHANGES = EXAMPLES.add([
    snap(0, topic("orders", X), topic("payments", Y)),
    snap(1, topic("orders", X, partitions=6), complete=False),
])


def test_incomplete_snapshot_changes_only_what_it_saw(spark, derived):
    """R2: an incomplete snapshot may change what it saw and nothing else."""
    actual = incarnations(derived, INCOMPLETE_CHANGES)
    expected = [
        version(key_for_id(X), "orders", X, 1, "created", at(0), at(1),
                first_seen=at(0), last_seen=at(1)),
        version(key_for_id(X), "orders", X, 2, "attributes_changed", at(1), None, partitions=6,
                first_seen=at(0), last_seen=at(1)),
        version(key_for_id(Y), "payments", Y, 1, "created", at(0), None,
                first_seen=at(0), last_seen=at(0)),
    ]
    assert_table_equal(actual, expected_frame(spark, expected))


RECREATED = {
    complete: EXAMPLES.add([snap(0, topic("orders", X)), snap(1, topic("orders", Y), complete=complete)])
    for complete in (True, False)
}


@pytest.mark.parametrize("complete", [True, False], ids=["complete", "incomplete"])
def test_delete_and_recreate_between_two_snapshots(spark, derived, complete):
    """R1: the name seen with a new ID closes the old incarnation and opens a new one, even when
    the snapshot showing it is incomplete."""
    actual = incarnations(derived, RECREATED[complete])
    expected = [
        version(key_for_id(X), "orders", X, 1, "created", at(0), at(1),
                first_seen=at(0), last_seen=at(0), deleted=at(1)),
        version(key_for_id(Y), "orders", Y, 1, "created", at(1), None,
                first_seen=at(1), last_seen=at(1)),
    ]
    assert_table_equal(actual, expected_frame(spark, expected))


SIX = [topic(f"t{i}", tid(10 + i)) for i in range(6)]


def _six_rows(current: bool, deleted=None, last_seen=None):
    last_seen = last_seen or at(0)
    return [
        version(key_for_id(tid(10 + i)), f"t{i}", tid(10 + i), 1, "created", at(0),
                None if current else deleted, first_seen=at(0), last_seen=last_seen,
                deleted=None if current else deleted)
        for i in range(6)
    ]


MASS_DELETION = [snap(0, *SIX), snap(1)]
MASS_DELETION_HELD = EXAMPLES.add(MASS_DELETION)
MASS_DELETION_CONFIRMED = EXAMPLES.add(MASS_DELETION + [snap(2, topic("other", X))])


def test_mass_deletion_is_held_until_confirmed(spark, derived):
    """R3: a complete snapshot closing more than half (and >= 5) of the live incarnations is
    held; a later complete snapshot lacking them confirms, deleted_at = the held snapshot."""
    assert held_flags(derived, MASS_DELETION_HELD) == [False, True]
    assert_table_equal(incarnations(derived, MASS_DELETION_HELD), expected_frame(spark, _six_rows(True)))

    assert held_flags(derived, MASS_DELETION_CONFIRMED) == [False, True, False]
    expected = _six_rows(False, deleted=at(1)) + [
        version(key_for_id(X), "other", X, 1, "created", at(2), None,
                first_seen=at(2), last_seen=at(2)),
    ]
    assert_table_equal(incarnations(derived, MASS_DELETION_CONFIRMED), expected_frame(spark, expected))


HELD_RELEASED = EXAMPLES.add([snap(0, *SIX), snap(1), snap(2, *SIX)])


def test_held_snapshot_released_when_topics_return(spark, derived):
    """R3: topics seen again after a held snapshot were never deleted."""
    assert_table_equal(
        incarnations(derived, HELD_RELEASED), expected_frame(spark, _six_rows(True, last_seen=at(2)))
    )


# test_hold_thresholds_are_configurable: (policy, held) by case; each case's two inputs.
HOLD_THRESHOLDS = {
    "default": (HoldPolicy(), True),
    "min-above-count": (HoldPolicy(ratio=0.5, min_count=7), False),
    "ratio-above-share": (HoldPolicy(ratio=0.9, min_count=5), True),
}
ALL_GONE = {case: EXAMPLES.add([snap(0, *SIX), snap(1)], policy)
            for case, (policy, _) in HOLD_THRESHOLDS.items()}
ONE_LEFT = {case: EXAMPLES.add([snap(0, *SIX), snap(1, SIX[0])], policy)
            for case, (policy, _) in HOLD_THRESHOLDS.items()}


@pytest.mark.parametrize("case", list(HOLD_THRESHOLDS))
def test_hold_thresholds_are_configurable(derived, case):
    """R3 thresholds: 6 of 6 closing is held unless the minimum exceeds 6; 5 of 6 (83 %) is not
    held when the ratio is 0.9 or more."""
    policy, held = HOLD_THRESHOLDS[case]
    assert held_flags(derived, ALL_GONE[case]) == [False, held]
    assert held_flags(derived, ONE_LEFT[case])[1] == (held and policy.ratio < 5 / 6)


_OTHERS = [topic(f"u{i}", tid(30 + i)) for i in range(5)]
SEEN_THROUGHOUT = EXAMPLES.add([snap(h, *SIX, *(_OTHERS if h <= 2 else ())) for h in range(5)])


def test_topics_seen_throughout_count_as_live_for_the_hold(spark, derived):
    """R3 over long histories: six topics seen in every snapshot 0-4 are live at 3, where five
    others vanish: 5 of 11 closing is not a mass deletion (the build keeps only the ends of a
    stretch of identical observations; the stretch in between must still count as live)."""
    assert held_flags(derived, SEEN_THROUGHOUT) == [False] * 5
    actual = incarnations(derived, SEEN_THROUGHOUT).select(t.TOPIC_NAME, "deleted_at")
    expected = [(f"t{i}", None) for i in range(6)] + [(f"u{i}", at(3)) for i in range(5)]
    assert_table_equal(actual, spark.createDataFrame(expected, "topic_name STRING, deleted_at TIMESTAMP"))


def _long_history():
    history = []
    for h in range(10):
        orders = topic("orders", X, partitions=6 if h >= 5 else 3)
        if h == 7:
            orders = topic("orders", X, error="UNKNOWN_SERVER_ERROR")
        shown = ([] if h == 8 else [orders]) + ([topic("audit", Y)] if h <= 6 else [])
        history.append(snap(h, *shown, complete=h != 8))
    return history


LONG_HISTORY = EXAMPLES.add(_long_history())


def test_changes_inside_a_long_history_are_all_seen(spark, derived):
    """Ten hourly snapshots of one topic: a partition change at 5, a describe error at 7 (keeps
    the attributes), an incomplete snapshot without it at 8, then seen again at 9: two versions,
    last seen at 9, never deleted; a topic seen from 0 to 6 only is deleted at 7."""
    k, seen = key_for_id(X), {"first_seen": at(0), "last_seen": at(9)}
    expected = [
        version(k, "orders", X, 1, "created", at(0), at(5), partitions=3, **seen),
        version(k, "orders", X, 2, "attributes_changed", at(5), None, partitions=6, **seen),
        version(key_for_id(Y), "audit", Y, 1, "created", at(0), at(7), first_seen=at(0),
                last_seen=at(6), deleted=at(7)),
    ]
    assert_table_equal(incarnations(derived, LONG_HISTORY), expected_frame(spark, expected))


AUTHORITATIVE = EXAMPLES.add([snap(0, *SIX), snap(1, authoritative=True)])


def test_authoritative_snapshot_is_exempt_from_hold(spark, derived):
    """R3: a snapshot replayed from the KRaft metadata log deletes at once."""
    assert held_flags(derived, AUTHORITATIVE) == [False, False]
    assert_table_equal(
        incarnations(derived, AUTHORITATIVE), expected_frame(spark, _six_rows(False, deleted=at(1)))
    )


ID_ASSIGNED = EXAMPLES.add([
    snap(0, topic("orders")),
    snap(1, topic("orders", partitions=6)),
    snap(2, topic("orders", X, partitions=6)),
    snap(3, topic("orders", X, partitions=6)),
])


def test_id_less_topic_keyed_by_name_until_id_assigned(spark, derived):
    """R4: ID-less observations are one incarnation keyed by name; the first ID joins it as a
    new version `id_assigned`, under the key derived from the name and first sighting."""
    actual = incarnations(derived, ID_ASSIGNED)
    k, seen = key_for_name("orders", at(0)), {"first_seen": at(0), "last_seen": at(3)}
    expected = [
        version(k, "orders", None, 1, "created", at(0), at(1), **seen),
        version(k, "orders", None, 2, "attributes_changed", at(1), at(2), partitions=6, **seen),
        version(k, "orders", X, 3, "id_assigned", at(2), None, partitions=6, **seen),
    ]
    assert_table_equal(actual, expected_frame(spark, expected))


ID_LESS_RECREATED = EXAMPLES.add([snap(0, topic("orders")), snap(1), snap(2, topic("orders"))])


def test_id_less_topic_deleted_then_recreated_is_a_new_incarnation(spark, derived):
    """Without IDs a name cannot `reappear`: after a deletion it is a new incarnation."""
    actual = incarnations(derived, ID_LESS_RECREATED)
    expected = [
        version(key_for_name("orders", at(0)), "orders", None, 1, "created", at(0), at(1),
                first_seen=at(0), last_seen=at(0), deleted=at(1)),
        version(key_for_name("orders", at(2)), "orders", None, 1, "created", at(2), None,
                first_seen=at(2), last_seen=at(2)),
    ]
    assert_table_equal(actual, expected_frame(spark, expected))


REAPPEARED = EXAMPLES.add([snap(0, topic("orders", X)), snap(1), snap(2, topic("orders", X))])


def test_id_seen_after_deletion_is_recorded_as_reappeared(spark, derived):
    """R6: an ID seen after its deleted_at gets a `reappeared` version; deleted_at stays so the
    quality gate refuses the build."""
    actual = incarnations(derived, REAPPEARED)
    k, seen = key_for_id(X), {"first_seen": at(0), "last_seen": at(2), "deleted": at(1)}
    expected = [
        version(k, "orders", X, 1, "created", at(0), at(1), **seen),
        version(k, "orders", X, 2, "reappeared", at(2), None, **seen),
    ]
    assert_table_equal(actual, expected_frame(spark, expected))


_DUPLICATED = [snap(0, topic("orders", X)), snap(1, topic("orders", X, partitions=6)), snap(2)]
ONCE = EXAMPLES.add(_DUPLICATED)
TWICE = EXAMPLES.add(_DUPLICATED + _DUPLICATED[:2])


def test_duplicate_snapshot_changes_nothing(derived):
    """The same snapshot twice in the input is still one snapshot (the input is a set)."""
    once, twice = derived[ONCE], derived[TWICE]
    assert_table_equal(twice.topic_incarnations, once.topic_incarnations)
    assert_table_equal(twice.snapshot_runs, once.snapshot_runs)


OTHER = "T3RoZXJDbHVzdGVySWQwMQ"
ISOLATED = EXAMPLES.add([
    snap(0, *SIX), snap(0, *SIX, cluster=OTHER, alias="dr"),
    snap(1, cluster=OTHER, alias="dr"),  # mass deletion in `other` only: held there
    snap(2, *SIX[:5]),  # t5 deleted in CLUSTER (1 of 6: not held)
])


def test_clusters_are_isolated(spark, derived):
    """Same names and IDs in two clusters: each cluster's deletions and holds are its own."""
    other = OTHER
    runs = derived[ISOLATED].snapshot_runs.select(t.CLUSTER_ID, t.CAPTURED_AT, t.HELD)
    assert_table_equal(runs, spark.createDataFrame([
        (CLUSTER, at(0), False), (CLUSTER, at(2), False), (other, at(0), False), (other, at(1), True),
    ], "cluster_id STRING, captured_at TIMESTAMP, held BOOLEAN"))
    actual = incarnations(derived, ISOLATED).select(
        t.CLUSTER_ID, t.CLUSTER_ALIAS, t.TOPIC_NAME, "incarnation_key", "deleted_at", "is_current"
    )
    expected = [
        (CLUSTER, ALIAS, f"t{i}", key_for_id(tid(10 + i)), at(2) if i == 5 else None, i != 5)
        for i in range(6)
    ] + [(other, "dr", f"t{i}", key_for_id(tid(10 + i), other), None, True) for i in range(6)]
    schema = ("cluster_id STRING, cluster_alias STRING, topic_name STRING, incarnation_key STRING, "
              "deleted_at TIMESTAMP, is_current BOOLEAN")
    assert_table_equal(actual, spark.createDataFrame(expected, schema))
