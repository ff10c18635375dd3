"""Consumer lineage as the build derives it (topic_lineage.scd.groups, in each cluster's walk
task) equals the plain-Python reference (topic_lineage.scd.group_reference) row for row: on every
explicit history of tests/group_support.py, and on random multi-cluster histories with random
groups (Hypothesis; profiles as in tests/test_scd_properties.py), with each cluster walked whole
or split into ranges of two snapshots (a split cluster's groups are derived by its second pass)."""

from __future__ import annotations

from dataclasses import replace

import group_support as ex
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scd_histories import CLUSTERS_PER_EXAMPLE, NAMES, POLICY, _cluster_id, cluster_history
from scd_support import _utc, derive
from test_scd_properties import INCREMENTAL_EXAMPLES, built_incrementally

from topic_lineage import tables as t
from topic_lineage.scd import reference, walk_job
from topic_lineage.scd.group_reference import derive_groups
from topic_lineage.snapshot import GroupObservation, GroupOffset

pytestmark = pytest.mark.spark


def _rows(rows, ddl):
    columns = t.ddl_columns(ddl)
    return sorted((tuple(_utc((r if isinstance(r, dict) else r.asDict())[c]) for c in columns)
                   for r in rows), key=repr)


def spark_lineage(spark, snapshots, policy=None):
    """``group_offsets`` and ``group_incarnations`` of a full build of ``snapshots``."""
    unique = list({(s.cluster_id, s.captured_at): s for s in snapshots}.values())
    derived = derive(spark, unique, policy)
    return (_rows(derived.group_offsets.collect(), t.GROUP_OFFSETS_DDL),
            _rows(derived.group_incarnations.collect(), t.GROUP_INCARNATIONS_DDL))


def reference_lineage(snapshots, policy=None):
    kwargs = {} if policy is None else {"ratio": policy.ratio, "min_count": policy.min_count}
    _, incarnations = reference.derive(snapshots, **kwargs)
    offsets, per_incarnation = derive_groups(snapshots, incarnations)
    return _rows(offsets, t.GROUP_OFFSETS_DDL), _rows(per_incarnation, t.GROUP_INCARNATIONS_DDL)


def test_every_explicit_history_equals_the_reference(spark):
    """One Spark derivation over all explicit histories, each on a cluster of its own."""
    history = []
    for n, make in enumerate(ex.EXAMPLES.values()):
        history += [replace(s, cluster_id=_cluster_id(n)) for s in make()]
    offsets, per_incarnation = spark_lineage(spark, history)
    assert (offsets, per_incarnation) == reference_lineage(history)
    assert any(row[-1] is True for row in per_incarnation)  # the carried case is in there
    assert any(row[5] is None for row in offsets)  # and an unattributed offset


GROUP_IDS = ("billing", "audit", "etl")


@st.composite
def groups_of(draw):
    """What one snapshot's group capture saw: sometimes nothing (no capture), sometimes an
    incomplete listing, groups with errors, offsets on names that exist or not, positions
    beyond the log end (carried) or with an unknown log end."""
    shape = draw(st.sampled_from(["none", "complete", "complete", "incomplete"]))
    if shape == "none":
        return None, ()
    seen = []
    for group_id in draw(st.sets(st.sampled_from(GROUP_IDS))):
        if draw(st.integers(0, 5)) == 0:
            seen.append(GroupObservation(group_id, None, "GROUP_AUTHORIZATION_FAILED"))
            continue
        partitions = draw(st.sets(st.tuples(st.sampled_from(NAMES + "z"), st.integers(0, 1)),
                                  max_size=4))
        seen.append(GroupObservation(group_id, "Stable", None, tuple(
            GroupOffset(name, p, draw(st.integers(0, 20)),
                        draw(st.one_of(st.none(), st.integers(0, 20))))
            for name, p in sorted(partitions))))
    return shape == "complete", tuple(seen)


@st.composite
def histories_with_groups(draw):
    snapshots = []
    for n in range(CLUSTERS_PER_EXAMPLE):
        for s in draw(cluster_history(_cluster_id(n))):
            complete, seen = draw(groups_of())
            snapshots.append(replace(s, groups_complete=complete, groups=seen))
    repeated = draw(st.lists(st.sampled_from(snapshots), max_size=4))
    order = draw(st.randoms(use_true_random=False))
    ingested = snapshots + repeated
    order.shuffle(ingested)
    return ingested


@pytest.mark.property
@given(histories_with_groups(), st.booleans())
def test_random_histories_equal_the_reference(spark, ingested, split):
    """R8-R10 (and R5: shuffled, repeated) on random histories: the build equals the reference,
    each cluster walked whole or (Hypothesis draws which, per history) split into ranges of two
    snapshots, whose group rows the cluster's second pass derives."""
    with pytest.MonkeyPatch.context() as mp:
        if split:
            mp.setenv(walk_job.RANGE_FILES_ENV, "2")
        assert spark_lineage(spark, ingested, POLICY) == reference_lineage(ingested, POLICY)


@pytest.mark.slow
@pytest.mark.property
@settings(max_examples=INCREMENTAL_EXAMPLES)
@given(histories_with_groups(), st.integers(2, 4), st.randoms(use_true_random=False))
def test_incremental_builds_write_the_reference_group_tables(spark, tmp_path_factory, ingested,
                                                             batches, order):
    """R5 and R7 for consumer lineage through the build itself: snapshots with groups stored in
    random batches, an incremental build after each (late snapshots recompute their cluster,
    the others keep the base's group rows), and the last version's group_offsets and
    group_incarnations equal the reference over everything stored."""
    with built_incrementally(spark, tmp_path_factory, ingested, batches, order) as read:
        built = (_rows(read(t.GROUP_OFFSETS), t.GROUP_OFFSETS_DDL),
                 _rows(read(t.GROUP_INCARNATIONS), t.GROUP_INCARNATIONS_DDL))
    assert built == reference_lineage(ingested, POLICY)
