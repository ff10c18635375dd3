"""Histories where the Spark build and the reference (topic_lineage.reference) once disagreed,
or that pin a decision the contract leaves to us; each with its exact expected outcome.

Every failure the property tests (tests/test_scd_properties.py) found is kept here as an
explicit example, named for the bug.
"""

from __future__ import annotations

import pytest
from scd_support import (
    at,
    derive,
    incarnation_groups,
    key_for_id,
    reference_tables,
    run_rows,
    snap,
    tid,
    topic,
    version,
)

from spark_jobs.incarnations import HoldPolicy

pytestmark = pytest.mark.spark

SIX = "abcdef"


def assert_spark_equals_reference(spark, snapshots, policy=None):
    """Full refresh rows equal the reference's, incarnation_key compared as a grouping."""
    derived = derive(spark, snapshots, policy)
    runs, groups = reference_tables(snapshots, policy)
    assert run_rows(derived.snapshot_runs.collect()) == runs
    assert incarnation_groups(derived.topic_incarnations.collect()) == groups
    return groups


def test_describe_error_after_a_held_snapshot_is_the_same_topic(spark):
    """Issue #12's reproduction: a held snapshot establishes nothing by itself, so an ID-less
    describe error after it is still the topic last seen with an ID (R2): six live incarnations,
    nothing deleted, no `reappeared`."""
    ids = {name: tid(20 + i) for i, name in enumerate(SIX)}
    history = [
        snap(1, *[topic(n, ids[n]) for n in SIX]),
        snap(2, topic("f", ids["f"])),  # a broken listing: 5 of 6 would close -> held
        snap(3, topic("a", error="TOPIC_AUTHORIZATION_FAILED"), complete=False),
        snap(4, *[topic(n, ids[n]) for n in SIX]),
    ]
    groups = assert_spark_equals_reference(spark, history)
    seen_a = {"first_seen": at(1), "last_seen": at(4)}
    expected_a = version(key_for_id(ids["a"]), "a", ids["a"], 1, "created", at(1), None, **seen_a)
    assert len(groups) == 6
    assert all(len(versions) == 1 for versions in groups)
    rows = {r.topic_name: r for r in derive(spark, history).topic_incarnations.collect()}
    assert rows["a"].asDict() | {"valid_from": at(1), "first_seen_at": at(1), "last_seen_at": at(4)} \
        == {**expected_a, "valid_from": at(1)}
    assert all(r.is_current and r.deleted_at is None for r in rows.values())
