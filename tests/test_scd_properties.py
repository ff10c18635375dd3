"""Property tests: the Spark build (the walk, in a Spark task per cluster) equals the executable
specification on random histories.

The specification is :mod:`topic_lineage.scd.reference`, a sequential fold of R1-R6. Hypothesis
draws several independent cluster histories per example (one Spark build covers all of them,
so one example checks many histories for the cost of one build): late, duplicated and
out-of-order snapshots, incomplete snapshots, describe errors, broken near-empty listings (held)
and real mass deletions (confirmed), names re-created during a hold, ID-less topics gaining IDs,
reappearing IDs and shared IDs. Rows must be equal, ``incarnation_key`` compared as a grouping.

Example counts come from the Hypothesis profile: ``TOPIC_LINEAGE_HYPOTHESIS=fast`` (the
development tier, ``bash scripts/test.sh --fast``), ``ci`` (the default), or ``thorough`` (40
full-refresh and 13 incremental examples, for a change to topic_lineage/scd/walk.py or
topic_lineage/scd/walk_job.py; several minutes):

    TOPIC_LINEAGE_HYPOTHESIS=thorough .venv/bin/python -m pytest -q tests/test_scd_properties.py

Every failure found is kept as an explicit example in tests/test_scd_examples.py.
"""

from __future__ import annotations

import contextlib
import os

import pytest
from gate_support import publish_passed
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from scd_histories import POLICY, histories
from scd_support import derive, incarnation_groups, reference_tables, run_rows

from topic_lineage import tables as t
from topic_lineage.scd import walk_job
from topic_lineage.scd.build import WALK_TASKS

pytestmark = [pytest.mark.spark, pytest.mark.property]

# No shrinking: each step is a Spark build. A failure prints the whole (unshrunk) example; the
# reference alone (pure Python) then finds the smallest failing cluster history quickly.
_COMMON = {"deadline": None, "suppress_health_check": list(HealthCheck), "print_blob": True,
               "phases": [Phase.explicit, Phase.reuse, Phase.generate]}
settings.register_profile("ci", max_examples=5, **_COMMON)
settings.register_profile("fast", max_examples=2, **_COMMON)
settings.register_profile("thorough", max_examples=40, **_COMMON)
settings.load_profile(os.environ.get("TOPIC_LINEAGE_HYPOTHESIS", "ci"))
# An incremental example is several builds through the store: a third as many examples.
INCREMENTAL_EXAMPLES = max(1, settings.default.max_examples // 3)

def _assert_equal(runs, incarnations, snapshots):
    expected_runs, expected_groups = reference_tables(snapshots, POLICY)
    assert run_rows(runs) == expected_runs
    assert incarnation_groups(incarnations) == expected_groups


# How a cluster is split (issue #53): walked whole in one task, or in ranges of one or two
# snapshot files (a task each, then a task walking their steps): every example crosses ranges.
SPLITS = st.sampled_from(["", "1", "2"])


@contextlib.contextmanager
def split_by(files: str):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(walk_job.RANGE_FILES_ENV, files)
        yield


@given(histories(), SPLITS)
def test_full_refresh_equals_the_reference(spark, ingested, split):
    """R1-R6 on random histories: a full-refresh build equals the reference fold."""
    with split_by(split):
        derived = derive(spark, ingested, POLICY)
        _assert_equal(derived.snapshot_runs.collect(), derived.topic_incarnations.collect(), ingested)


@pytest.mark.slow
@settings(max_examples=INCREMENTAL_EXAMPLES)
@given(histories(), st.integers(2, 4), st.randoms(use_true_random=False), SPLITS)
def test_incremental_builds_equal_the_reference(spark, tmp_path_factory, ingested, batches, order, split):
    """R5: ingested in random batches in random order, an incremental build after each, the
    published tables equal the reference fold (each task continuing its cluster's saved walk,
    or walking a cluster with a late snapshot again; whole or split in ranges)."""
    with split_by(split), built_incrementally(spark, tmp_path_factory, ingested, batches, order) as read:
        _assert_equal(read(t.SNAPSHOT_RUNS), read(t.TOPIC_INCARNATIONS), ingested)


@contextlib.contextmanager
def built_incrementally(spark, tmp_path_factory, ingested, batches: int, order):
    """Store ``ingested`` in ``batches`` random batches in a new home, an incremental build (and
    a publish) after each; yields
    ``read(table) -> rows`` of the last version."""
    from topic_lineage import store
    from topic_lineage import warehouse as wh
    from topic_lineage.scd.build import build_version

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(t.HOME_ENV, str(tmp_path_factory.mktemp("incremental")))
        mp.setenv("TOPIC_LINEAGE_HOLD_RATIO", str(POLICY.ratio))
        mp.setenv("TOPIC_LINEAGE_HOLD_MIN", str(POLICY.min_count))
        cuts = sorted(order.sample(range(1, len(ingested)), min(batches - 1, len(ingested) - 1)))
        for start, end in zip([0, *cuts], [*cuts, len(ingested)]):
            store.save_all(ingested[start:end], "import:jsonl")
            info = build_version(spark, policy=POLICY)
            assert wh.read_manifest(info.version)["derivation"] == WALK_TASKS
            publish_passed(info.version)  # the gate is not the subject here
        yield lambda table: spark.read.parquet(str(wh.version_path(info.version, table))).collect()
