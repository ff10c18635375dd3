"""Each SCD rule (contract R1-R6) as a small explicit input and the exact expected rows.

The transforms under test are topic_lineage.scd.incarnations (pure DataFrame -> DataFrame); inputs are
store-shaped rows built from Snapshot objects, exactly what the build reads from the store. The
walk (topic_lineage.scd.walk) is held to the same rows by its property tests against the
reference (tests/test_scd_walk.py).
"""

from __future__ import annotations

import pytest
from pyspark.testing import assertDataFrameEqual
from scd_support import (
    ALIAS,
    CLUSTER,
    at,
    derive,
    expected_frame,
    key_for_id,
    key_for_name,
    snap,
    tid,
    topic,
    version,
)

from topic_lineage import spark as tl_spark
from topic_lineage import tables as t
from topic_lineage.scd.incarnations import HoldPolicy

pytestmark = pytest.mark.spark

X, Y, Z = tid(1), tid(2), tid(3)


@pytest.fixture(scope="module", autouse=True)
def _tiny_input_settings(spark):
    """The settings a build of a few observations runs the set-based derivation with
    (topic_lineage.spark.sized_for: interpreted, no adaptive execution, 2 partitions): about a
    quarter off this module's time. The property tests keep Spark's compiled path under random
    histories, and tests/test_cycle_path.py shows both give the same tables."""
    with tl_spark.sized_for(spark, 0):
        yield


def incarnations(spark, snapshots, policy=None):
    return derive(spark, snapshots, policy).topic_incarnations


def held_flags(spark, snapshots, policy=None) -> list[bool]:
    runs = derive(spark, snapshots, policy).snapshot_runs.orderBy(t.CAPTURED_AT).collect()
    return [row[t.HELD] for row in runs]


def test_new_topic_is_one_current_created_version(spark):
    """A topic seen once is one incarnation, version 1, created, current, not deleted."""
    actual = incarnations(spark, [snap(0, topic("orders", X))])
    expected = [version(key_for_id(X), "orders", X, 1, "created", at(0), None,
                        first_seen=at(0), last_seen=at(0))]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


def test_changed_attributes_open_new_versions(spark):
    """Partition count, replication factor and the internal flag each start a version."""
    actual = incarnations(spark, [
        snap(0, topic("orders", X, partitions=3)),
        snap(1, topic("orders", X, partitions=6)),
        snap(2, topic("orders", X, partitions=6)),
        snap(3, topic("orders", X, partitions=6, rf=2)),
        snap(4, topic("orders", X, partitions=6, rf=2, internal=True)),
    ])
    k, seen = key_for_id(X), {"first_seen": at(0), "last_seen": at(4)}
    expected = [
        version(k, "orders", X, 1, "created", at(0), at(1), partitions=3, **seen),
        version(k, "orders", X, 2, "attributes_changed", at(1), at(3), partitions=6, **seen),
        version(k, "orders", X, 3, "attributes_changed", at(3), at(4), partitions=6, rf=2, **seen),
        version(k, "orders", X, 4, "attributes_changed", at(4), None, partitions=6, rf=2,
                internal=True, **seen),
    ]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


def test_same_id_under_new_name_is_renamed(spark):
    """An ID seen under another name is the same incarnation, new version `renamed`."""
    actual = incarnations(spark, [snap(0, topic("orders", X)), snap(1, topic("orders-v2", X))])
    k, seen = key_for_id(X), {"first_seen": at(0), "last_seen": at(1)}
    expected = [
        version(k, "orders", X, 1, "created", at(0), at(1), **seen),
        version(k, "orders-v2", X, 2, "renamed", at(1), None, **seen),
    ]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


def test_only_complete_snapshots_delete(spark):
    """R2: an incomplete snapshot lacking a topic deletes nothing; the next complete one does."""
    actual = incarnations(spark, [
        snap(0, topic("orders", X), topic("payments", Y)),
        snap(1, topic("orders", X), complete=False),
        snap(2, topic("orders", X)),
    ])
    expected = [
        version(key_for_id(X), "orders", X, 1, "created", at(0), None,
                first_seen=at(0), last_seen=at(2)),
        version(key_for_id(Y), "payments", Y, 1, "created", at(0), at(2),
                first_seen=at(0), last_seen=at(0), deleted=at(2)),
    ]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


def test_describe_error_is_present_with_unchanged_attributes(spark):
    """R2: a topic whose describe failed keeps its attributes and is not deleted."""
    actual = incarnations(spark, [
        snap(0, topic("orders", X, partitions=12)),
        snap(1, topic("orders", X, error="TOPIC_AUTHORIZATION_FAILED")),
        snap(2, topic("orders", X, error="TOPIC_AUTHORIZATION_FAILED")),
    ])
    expected = [version(key_for_id(X), "orders", X, 1, "created", at(0), None, partitions=12,
                        first_seen=at(0), last_seen=at(2))]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


def test_incomplete_snapshot_changes_only_what_it_saw(spark):
    """R2: an incomplete snapshot may change what it saw and nothing else."""
    actual = incarnations(spark, [
        snap(0, topic("orders", X), topic("payments", Y)),
        snap(1, topic("orders", X, partitions=6), complete=False),
    ])
    expected = [
        version(key_for_id(X), "orders", X, 1, "created", at(0), at(1),
                first_seen=at(0), last_seen=at(1)),
        version(key_for_id(X), "orders", X, 2, "attributes_changed", at(1), None, partitions=6,
                first_seen=at(0), last_seen=at(1)),
        version(key_for_id(Y), "payments", Y, 1, "created", at(0), None,
                first_seen=at(0), last_seen=at(0)),
    ]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


@pytest.mark.parametrize("complete", [True, False], ids=["complete", "incomplete"])
def test_delete_and_recreate_between_two_snapshots(spark, complete):
    """R1: the name seen with a new ID closes the old incarnation and opens a new one, even when
    the snapshot showing it is incomplete."""
    actual = incarnations(spark, [
        snap(0, topic("orders", X)),
        snap(1, topic("orders", Y), complete=complete),
    ])
    expected = [
        version(key_for_id(X), "orders", X, 1, "created", at(0), at(1),
                first_seen=at(0), last_seen=at(0), deleted=at(1)),
        version(key_for_id(Y), "orders", Y, 1, "created", at(1), None,
                first_seen=at(1), last_seen=at(1)),
    ]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


SIX = [topic(f"t{i}", tid(10 + i)) for i in range(6)]


def _six_rows(current: bool, deleted=None, last_seen=None):
    last_seen = last_seen or at(0)
    return [
        version(key_for_id(tid(10 + i)), f"t{i}", tid(10 + i), 1, "created", at(0),
                None if current else deleted, first_seen=at(0), last_seen=last_seen,
                deleted=None if current else deleted)
        for i in range(6)
    ]


def test_mass_deletion_is_held_until_confirmed(spark):
    """R3: a complete snapshot closing more than half (and >= 5) of the live incarnations is
    held; a later complete snapshot lacking them confirms, deleted_at = the held snapshot."""
    history = [snap(0, *SIX), snap(1)]
    assert held_flags(spark, history) == [False, True]
    assertDataFrameEqual(incarnations(spark, history), expected_frame(spark, _six_rows(True)))

    confirmed = history + [snap(2, topic("other", X))]
    assert held_flags(spark, confirmed) == [False, True, False]
    expected = _six_rows(False, deleted=at(1)) + [
        version(key_for_id(X), "other", X, 1, "created", at(2), None,
                first_seen=at(2), last_seen=at(2)),
    ]
    assertDataFrameEqual(incarnations(spark, confirmed), expected_frame(spark, expected))


def test_held_snapshot_released_when_topics_return(spark):
    """R3: topics seen again after a held snapshot were never deleted."""
    history = [snap(0, *SIX), snap(1), snap(2, *SIX)]
    assertDataFrameEqual(
        incarnations(spark, history), expected_frame(spark, _six_rows(True, last_seen=at(2)))
    )


@pytest.mark.parametrize(
    "policy, held",
    [(HoldPolicy(), True), (HoldPolicy(ratio=0.5, min_count=7), False),
     (HoldPolicy(ratio=0.9, min_count=5), True)],
    ids=["default", "min-above-count", "ratio-above-share"],
)
def test_hold_thresholds_are_configurable(spark, policy, held):
    """R3 thresholds: 6 of 6 closing is held unless the minimum exceeds 6; 5 of 6 (83 %) is not
    held when the ratio is 0.9 or more."""
    assert held_flags(spark, [snap(0, *SIX), snap(1)], policy) == [False, held]
    one_left = [snap(0, *SIX), snap(1, SIX[0])]
    assert held_flags(spark, one_left, policy)[1] == (held and policy.ratio < 5 / 6)


def test_topics_seen_throughout_count_as_live_for_the_hold(spark):
    """R3 over long histories: six topics seen in every snapshot 0-4 are live at 3, where five
    others vanish: 5 of 11 closing is not a mass deletion (the build keeps only the ends of a
    stretch of identical observations; the stretch in between must still count as live)."""
    others = [topic(f"u{i}", tid(30 + i)) for i in range(5)]
    history = [snap(h, *SIX, *(others if h <= 2 else ())) for h in range(5)]
    assert held_flags(spark, history) == [False] * 5
    actual = incarnations(spark, history).select(t.TOPIC_NAME, "deleted_at")
    expected = [(f"t{i}", None) for i in range(6)] + [(f"u{i}", at(3)) for i in range(5)]
    assertDataFrameEqual(actual, spark.createDataFrame(expected, "topic_name STRING, deleted_at TIMESTAMP"))


def test_changes_inside_a_long_history_are_all_seen(spark):
    """Ten hourly snapshots of one topic: a partition change at 5, a describe error at 7 (keeps
    the attributes), an incomplete snapshot without it at 8, then seen again at 9: two versions,
    last seen at 9, never deleted; a topic seen from 0 to 6 only is deleted at 7."""
    history = []
    for h in range(10):
        orders = topic("orders", X, partitions=6 if h >= 5 else 3)
        if h == 7:
            orders = topic("orders", X, error="UNKNOWN_SERVER_ERROR")
        shown = ([] if h == 8 else [orders]) + ([topic("audit", Y)] if h <= 6 else [])
        history.append(snap(h, *shown, complete=h != 8))
    k, seen = key_for_id(X), {"first_seen": at(0), "last_seen": at(9)}
    expected = [
        version(k, "orders", X, 1, "created", at(0), at(5), partitions=3, **seen),
        version(k, "orders", X, 2, "attributes_changed", at(5), None, partitions=6, **seen),
        version(key_for_id(Y), "audit", Y, 1, "created", at(0), at(7), first_seen=at(0),
                last_seen=at(6), deleted=at(7)),
    ]
    assertDataFrameEqual(incarnations(spark, history), expected_frame(spark, expected))


def test_authoritative_snapshot_is_exempt_from_hold(spark):
    """R3: a snapshot replayed from the KRaft metadata log deletes at once."""
    history = [snap(0, *SIX), snap(1, authoritative=True)]
    assert held_flags(spark, history) == [False, False]
    assertDataFrameEqual(
        incarnations(spark, history), expected_frame(spark, _six_rows(False, deleted=at(1)))
    )


def test_id_less_topic_keyed_by_name_until_id_assigned(spark):
    """R4: ID-less observations are one incarnation keyed by name; the first ID joins it as a
    new version `id_assigned`, under the key derived from the name and first sighting."""
    actual = incarnations(spark, [
        snap(0, topic("orders")),
        snap(1, topic("orders", partitions=6)),
        snap(2, topic("orders", X, partitions=6)),
        snap(3, topic("orders", X, partitions=6)),
    ])
    k, seen = key_for_name("orders", at(0)), {"first_seen": at(0), "last_seen": at(3)}
    expected = [
        version(k, "orders", None, 1, "created", at(0), at(1), **seen),
        version(k, "orders", None, 2, "attributes_changed", at(1), at(2), partitions=6, **seen),
        version(k, "orders", X, 3, "id_assigned", at(2), None, partitions=6, **seen),
    ]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


def test_id_less_topic_deleted_then_recreated_is_a_new_incarnation(spark):
    """Without IDs a name cannot `reappear`: after a deletion it is a new incarnation."""
    actual = incarnations(spark, [snap(0, topic("orders")), snap(1), snap(2, topic("orders"))])
    expected = [
        version(key_for_name("orders", at(0)), "orders", None, 1, "created", at(0), at(1),
                first_seen=at(0), last_seen=at(0), deleted=at(1)),
        version(key_for_name("orders", at(2)), "orders", None, 1, "created", at(2), None,
                first_seen=at(2), last_seen=at(2)),
    ]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


def test_id_seen_after_deletion_is_recorded_as_reappeared(spark):
    """R6: an ID seen after its deleted_at gets a `reappeared` version; deleted_at stays so the
    quality gate refuses the build."""
    actual = incarnations(spark, [snap(0, topic("orders", X)), snap(1), snap(2, topic("orders", X))])
    k, seen = key_for_id(X), {"first_seen": at(0), "last_seen": at(2), "deleted": at(1)}
    expected = [
        version(k, "orders", X, 1, "created", at(0), at(1), **seen),
        version(k, "orders", X, 2, "reappeared", at(2), None, **seen),
    ]
    assertDataFrameEqual(actual, expected_frame(spark, expected))


def test_duplicate_snapshot_changes_nothing(spark):
    """The same snapshot twice in the input is still one snapshot (the input is a set)."""
    history = [snap(0, topic("orders", X)), snap(1, topic("orders", X, partitions=6)), snap(2)]
    once = derive(spark, history)
    twice = derive(spark, history + history[:2])
    assertDataFrameEqual(twice.topic_incarnations, once.topic_incarnations)
    assertDataFrameEqual(twice.snapshot_runs, once.snapshot_runs)


def test_clusters_are_isolated(spark):
    """Same names and IDs in two clusters: each cluster's deletions and holds are its own."""
    other = "T3RoZXJDbHVzdGVySWQwMQ"
    history = [
        snap(0, *SIX), snap(0, *SIX, cluster=other, alias="dr"),
        snap(1, cluster=other, alias="dr"),  # mass deletion in `other` only: held there
        snap(2, *SIX[:5]),  # t5 deleted in CLUSTER (1 of 6: not held)
    ]
    runs = derive(spark, history).snapshot_runs.select(t.CLUSTER_ID, t.CAPTURED_AT, t.HELD)
    assertDataFrameEqual(runs, spark.createDataFrame([
        (CLUSTER, at(0), False), (CLUSTER, at(2), False), (other, at(0), False), (other, at(1), True),
    ], "cluster_id STRING, captured_at TIMESTAMP, held BOOLEAN"))
    actual = incarnations(spark, history).select(
        t.CLUSTER_ID, t.CLUSTER_ALIAS, t.TOPIC_NAME, "incarnation_key", "deleted_at", "is_current"
    )
    expected = [
        (CLUSTER, ALIAS, f"t{i}", key_for_id(tid(10 + i)), at(2) if i == 5 else None, i != 5)
        for i in range(6)
    ] + [(other, "dr", f"t{i}", key_for_id(tid(10 + i), other), None, True) for i in range(6)]
    schema = ("cluster_id STRING, cluster_alias STRING, topic_name STRING, incarnation_key STRING, "
              "deleted_at TIMESTAMP, is_current BOOLEAN")
    assertDataFrameEqual(actual, spark.createDataFrame(expected, schema))
