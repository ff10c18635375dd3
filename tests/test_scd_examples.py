"""Histories where the Spark build and the reference (topic_lineage.scd.reference) once disagreed,
or that pin a decision the contract leaves to us; each with its exact expected outcome.

Every failure the property tests (tests/test_scd_properties.py) found is kept here as an
explicit example, named for the bug.
"""

from __future__ import annotations

import pytest
from scd_support import (
    Examples,
    at,
    incarnation_groups,
    key_for_id,
    reference_tables,
    run_rows,
    snap,
    tid,
    topic,
    version,
)

from topic_lineage.scd.hold import HoldPolicy

pytestmark = pytest.mark.spark

SIX = "abcdef"

# Every test's input, registered here and derived together (scd_support.Examples): one Spark
# derivation per hold policy instead of one per test (issue #24, goal 4).
EXAMPLES = Examples()


@pytest.fixture(scope="module")
def derived(spark):
    """This module's examples, each batch derived once, when a test first asks for one of it."""
    return EXAMPLES.on(spark)


def assert_spark_equals_reference(derived, example):
    """Full refresh rows equal the reference's, incarnation_key compared as a grouping."""
    tables = derived[example]
    runs, groups = reference_tables(example.snapshots, example.policy)
    assert run_rows(tables.snapshot_runs.collect()) == runs
    assert incarnation_groups(tables.topic_incarnations.collect()) == groups
    return groups


_IDS = {name: tid(20 + i) for i, name in enumerate(SIX)}
DESCRIBE_ERROR_AFTER_HOLD = EXAMPLES.add([
    snap(1, *[topic(n, _IDS[n]) for n in SIX]),
    snap(2, topic("f", _IDS["f"])),  # a broken listing: 5 of 6 would close -> held
    snap(3, topic("a", error="TOPIC_AUTHORIZATION_FAILED"), complete=False),
    snap(4, *[topic(n, _IDS[n]) for n in SIX]),
])


def test_describe_error_after_a_held_snapshot_is_the_same_topic(derived):
    """Issue #12's reproduction: a held snapshot establishes nothing by itself, so an ID-less
    describe error after it is still the topic last seen with an ID (R2): six live incarnations,
    nothing deleted, no `reappeared`."""
    ids = _IDS
    groups = assert_spark_equals_reference(derived, DESCRIBE_ERROR_AFTER_HOLD)
    seen_a = {"first_seen": at(1), "last_seen": at(4)}
    expected_a = version(key_for_id(ids["a"]), "a", ids["a"], 1, "created", at(1), None, **seen_a)
    assert len(groups) == 6
    assert all(len(versions) == 1 for versions in groups)
    (versions_of_a,) = [g for g in groups if g[0][3] == "a"]
    assert versions_of_a == ((
        expected_a["cluster_id"], expected_a["cluster_alias"], ids["a"], "a", 1, "created", 3, 3,
        False, at(1), None, True, at(1), at(4), None,
    ),)
    assert all(v[11] and v[14] is None for g in groups for v in g)  # current, never deleted


_A, _B = tid(60), tid(61)
_ERROR = "TOPIC_AUTHORIZATION_FAILED"
DESCRIBE_ERROR_WITHOUT_AN_INCARNATION = EXAMPLES.add([
    snap(1, topic("a", error=_ERROR), topic("b", _B), topic("c", error=_ERROR)),  # caught mid-creation
    snap(2, topic("a", _A), topic("b", _B), topic("c")),  # identities: a's ID, c described (no ID)
    snap(3, topic("b", _B), topic("c")),  # a deleted
    snap(4, topic("a", error=_ERROR), topic("b", _B), topic("c")),  # a hidden by an ACL, or mid-deletion
])


def test_a_describe_error_opens_no_incarnation(derived):
    """R2 (clarified in issue #40): a describe error carries no identity. Where its name has no
    live incarnation it opens none: no ID-less row with unknown attributes, no later
    ``id_assigned``. ``a``'s incarnation starts at its first ID (hour 2) and stays deleted at
    hour 3; ``c`` (a cluster that reports no ID for it) starts at its first successful describe."""
    groups = assert_spark_equals_reference(derived, DESCRIBE_ERROR_WITHOUT_AN_INCARNATION)
    by_name = {g[0][3]: g for g in groups}
    assert sorted(by_name) == ["a", "b", "c"] and len(groups) == 3
    cluster, alias = by_name["b"][0][:2]
    assert by_name["a"] == ((cluster, alias, _A, "a", 1, "created", 3, 3, False,
                             at(2), at(3), False, at(2), at(2), at(3)),)
    assert by_name["c"] == ((cluster, alias, None, "c", 1, "created", 3, 3, False,
                             at(2), None, True, at(2), at(4), None),)
    assert by_name["b"][0][5] == "created" and by_name["b"][0][12] == at(1)


# --- R3 boundaries: one cluster per case, all in one derivation -----------------------------
def _mass_deletion(n: int, live: int, closing: int):
    """A cluster with `live` topics, then a complete snapshot lacking `closing` of them."""
    cluster = f"Qm91bmRhcnk{n:02d}AAAAAAAAA"[:22]
    topics = [topic(f"t{i}", tid(40 + i)) for i in range(live)]
    return cluster, [snap(0, *topics, cluster=cluster), snap(1, *topics[closing:], cluster=cluster)]


def _boundaries(cases, policy):
    """One example of all the cases, and the case of each of its clusters."""
    clusters, history = {}, []
    for n, (live, closing) in enumerate(cases):
        cluster, snapshots = _mass_deletion(n, live, closing)
        clusters[cluster] = (live, closing)
        history += snapshots
    return EXAMPLES.add(history, policy), clusters


def _held_by_case(derived, boundaries):
    example, clusters = boundaries
    runs, _ = reference_tables(example.snapshots, example.policy)
    assert run_rows(derived[example].snapshot_runs.collect()) == runs  # the reference agrees
    return {clusters[r[0]]: r[-1] for r in runs if r[2] == at(1)}


DEFAULT_BOUNDARIES = _boundaries([(10, 5), (10, 6), (4, 4), (5, 5), (9, 5)], HoldPolicy())


def test_hold_boundaries_default_thresholds(derived):
    """R3 with ratio 0.5 and min 5: more than half AND at least 5. Exactly half is not held
    (`>` not `>=`), one more is; 4 of 4 is below the minimum, 5 of 5 (exactly the minimum) is
    held ("at least 5")."""
    held = _held_by_case(derived, DEFAULT_BOUNDARIES)
    assert held == {(10, 5): False, (10, 6): True, (4, 4): False, (5, 5): True, (9, 5): True}


CONFIGURED_BOUNDARIES = _boundaries([(8, 2), (8, 3), (2, 2), (1, 1), (10, 5)], HoldPolicy(0.25, 2))


def test_hold_thresholds_are_configurable(derived):
    """The same shapes with ratio 0.25 and min 2: a quarter is not held, one more is; 2 of 2 is."""
    held = _held_by_case(derived, CONFIGURED_BOUNDARIES)
    assert held == {(8, 2): False, (8, 3): True, (2, 2): True, (1, 1): False, (10, 5): True}


# --- found by the property tests ------------------------------------------------------------
X, Y, W = tid(1), tid(2), tid(3)
SHARED_ID = EXAMPLES.add([
    snap(0, topic("b", X), topic("d", Y), topic("e", W)),
    snap(1, topic("b", error="TOPIC_AUTHORIZATION_FAILED"),
         topic("d", error="TOPIC_AUTHORIZATION_FAILED"), topic("e", W)),
    snap(2, topic("b", X), topic("d", X), topic("e", W)),
    snap(3),  # an empty complete listing: held
    snap(4, topic("b", X), topic("d", X), topic("e", W)),
    snap(5, topic("b", X)),
    snap(6, topic("b", X), topic("d", Y), topic("e", W)),
], HoldPolicy(0.5, 2))


def test_shared_id_is_resolved_by_name_order(derived):
    """Found by test_full_refresh_equals_the_reference: two names carrying one ID in one snapshot
    (`b` and `d` both with X) made the Spark windows (ordered by time only) pick an arbitrary
    row, and the hold count of a later snapshot differed run to run. Decided: the first name in
    name order is the ID's observation (`b`); `d`'s own incarnation Y is then lacking from those
    snapshots like any absent topic. Equal to the reference, so deterministic."""
    groups = assert_spark_equals_reference(derived, SHARED_ID)
    x_versions = next(g for g in groups if g[0][2] == X)
    assert [(v[3], v[5]) for v in x_versions] == [("b", "created")]
