"""The walk (topic_lineage.scd.walk) equals the executable specification on random histories.

The walk is the derivation of small stores: one pass over each cluster's snapshots that keeps
only the incarnations whose gap can still change. The reference (topic_lineage.scd.reference)
looks at every incarnation at every snapshot. Both are plain Python, so these tests afford
hundreds of histories per run (``TOPIC_LINEAGE_HYPOTHESIS``: ``fast`` 60 examples, ``ci`` 300,
``thorough`` 3,000), on the same history strategy as the Spark property tests and on a wider
one (more names, longer histories, bigger thresholds).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scd_histories import POLICY, cluster_history, histories
from scd_support import CLUSTER, incarnation_groups, reference_tables, run_rows, snap, tid, topic

from topic_lineage import tables as t
from topic_lineage.scd import walk
from topic_lineage.scd.hold import HoldPolicy
from topic_lineage.store import _to_arrow

pytestmark = [pytest.mark.property]

_EXAMPLES = {"fast": 60, "ci": 300, "thorough": 3000}[os.environ.get("TOPIC_LINEAGE_HYPOTHESIS", "ci")]
_SETTINGS = settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                     print_blob=True)


def store_rows(snapshots) -> pa.Table:
    """The store's rows of a set of snapshots, as topic_lineage.store writes them."""
    unique = {(s.cluster_id, s.captured_at): s for s in snapshots}  # the store: a set
    if not unique:
        return t.arrow_store_schema().empty_table()
    return pa.concat_tables([_to_arrow(s, "import:jsonl") for s in unique.values()])


def walked(snapshots, policy=POLICY):
    runs, incarnations = walk.derive(store_rows(snapshots), policy)
    return run_rows(runs.to_pylist()), incarnation_groups(incarnations.to_pylist())


@_SETTINGS
@given(histories())
def test_walk_equals_the_reference(ingested):
    """R1-R6: the walk's runs and incarnation versions equal the reference fold's, row for row
    (``incarnation_key`` by value too: both hash the same first observation)."""
    assert walked(ingested) == reference_tables(ingested, POLICY)


def one_after_another(parts) -> list:
    """Several histories of one cluster as one, each shifted 10 hours after the one before."""
    return [snap(number * 10 + s.captured_at.hour, *s.topics, complete=s.complete, cluster=s.cluster_id,
                 alias=s.cluster_alias)
            for number, part in enumerate(parts) for s in part]


@_SETTINGS
@given(st.lists(cluster_history("Q2x1c3RlcjAwAAAAAAAAAA"), min_size=1, max_size=4),
       st.integers(1, 6), st.sampled_from([0.0, 0.3, 0.5, 0.8]))
def test_walk_equals_the_reference_on_long_histories(parts, min_count, ratio):
    """Several histories of one cluster one after another (hours shifted), with other R3
    thresholds: holds, confirmations and displacements across long gaps."""
    snapshots = one_after_another(parts)
    policy = HoldPolicy(ratio=ratio, min_count=min_count)
    assert walked(snapshots, policy) == reference_tables(snapshots, policy)


def test_keys_and_instants_are_the_references_values():
    """The walk's own columns, not only their grouping: keys (sha256 of the first observation),
    versions and instants as UTC timestamps of the contract's types."""
    snapshots = [
        snap(0, topic("orders", tid(1)), topic("legacy")),
        snap(1, topic("orders", tid(2)), topic("legacy", tid(3))),
    ]
    runs, incarnations = walk.derive(store_rows(snapshots), POLICY)
    _, expected = __import__("topic_lineage.scd.reference", fromlist=["derive"]).derive(
        snapshots, ratio=POLICY.ratio, min_count=POLICY.min_count)
    got = sorted(incarnations.to_pylist(), key=lambda r: (r[t.INCARNATION_KEY], r[t.VERSION]))
    want = sorted(expected, key=lambda r: (r["incarnation_key"], r["version"]))
    assert [(r[t.INCARNATION_KEY], r[t.VERSION], r[t.CHANGE_TYPE], r[t.VALID_FROM], r[t.DELETED_AT])
            for r in got] == [(r["incarnation_key"], r["version"], r["change_type"], r["valid_from"],
                               r["deleted_at"]) for r in want]
    assert incarnations.schema.field(t.VALID_FROM).type == pa.timestamp("us", tz="UTC")
    assert got[0][t.VALID_FROM].tzinfo is not None
    assert [r[t.CAPTURED_AT] for r in runs.to_pylist()] == [
        datetime(2026, 11, 1, 0, tzinfo=UTC), datetime(2026, 11, 1, 1, tzinfo=UTC)]
    assert [c for c in incarnations.column_names] == list(walk.INCARNATION_COLUMNS)


def test_an_empty_store_gives_empty_tables():
    runs, incarnations = walk.derive(t.arrow_store_schema().empty_table(), POLICY)
    assert runs.num_rows == 0 and incarnations.num_rows == 0
    assert runs.column_names == list(walk.RUN_COLUMNS)


def test_an_empty_snapshot_is_a_run_and_closes_what_it_lacks():
    """An empty complete snapshot (the store's marker row) is a run of its own and, when not
    held, closes every live incarnation (R2)."""
    snapshots = [snap(0, topic("a", tid(1))), snap(1)]
    runs, incarnations = walk.derive(store_rows(snapshots), HoldPolicy(ratio=0.5, min_count=5))
    assert [(r[t.TOPIC_COUNT], r[t.HELD]) for r in runs.to_pylist()] == [(1, False), (0, False)]
    assert [r[t.DELETED_AT] for r in incarnations.to_pylist()] == [datetime(2026, 11, 1, 1, tzinfo=UTC)]


def _deleted_at(snapshots, policy, topic_id):
    runs, incarnations = walk.derive(store_rows(snapshots), policy)
    assert walked(snapshots, policy) == reference_tables(snapshots, policy)
    return {r[t.DELETED_AT] for r in incarnations.to_pylist() if r[t.TOPIC_ID] == topic_id}, runs


def test_a_confirmed_hold_moves_a_displaced_end_back_to_the_held_snapshot():
    """R3 with R1: ``a`` lacks from a held listing (hour 1), its name is shown under a new ID by
    an incomplete snapshot (hour 2: displaced), and a complete snapshot confirms the absence
    (hour 3): ``deleted_at`` is the held snapshot's time, the earliest complete evidence. The
    displaced incarnation must stay in the walk's active set until the confirmation."""
    policy = HoldPolicy(ratio=0.5, min_count=2)
    snapshots = [
        snap(0, topic("a", tid(1)), topic("b", tid(2)), topic("c", tid(3))),
        snap(1),
        snap(2, topic("a", tid(4)), complete=False),
        snap(3, topic("a", tid(4)), topic("b", tid(2)), topic("c", tid(3))),
    ]
    deleted, runs = _deleted_at(snapshots, policy, tid(1))
    assert [r[t.HELD] for r in runs.to_pylist()] == [False, True, False, False]
    assert deleted == {datetime(2026, 11, 1, 1, tzinfo=UTC)}


def test_an_id_less_name_seen_again_counts_as_shown_again_for_the_hold():
    """R3: a complete snapshot showing an ID-less name whose incarnation had ended counts it
    among the live ones (shown again): 2 closing of 4 is not more than half, so not held."""
    policy = HoldPolicy(ratio=0.5, min_count=2)
    snapshots = [
        snap(0, topic("x"), topic("p", tid(1)), topic("q", tid(2)), topic("r", tid(3))),
        snap(1, topic("p", tid(1)), topic("q", tid(2)), topic("r", tid(3))),
        snap(2, topic("x"), topic("r", tid(3))),
    ]
    deleted, runs = _deleted_at(snapshots, policy, tid(1))
    assert [r[t.HELD] for r in runs.to_pylist()] == [False, False, False]
    assert deleted == {datetime(2026, 11, 1, 2, tzinfo=UTC)}


@settings(max_examples=max(20, _EXAMPLES // 5), deadline=None,
          suppress_health_check=list(HealthCheck), print_blob=True)
@given(histories(), st.randoms(use_true_random=False))
def test_a_walk_saved_and_continued_equals_one_walk(ingested, order):
    """R5 for the walk's incremental builds: each cluster walked in batches of its snapshots
    (time order), its state saved (``dumps``) and loaded again between two batches, gives the
    rows of the reference over the whole history; so do the rows read at each stop (``tables``
    changes nothing)."""
    unique = sorted({(s.cluster_id, s.captured_at): s for s in ingested}.values(),
                    key=lambda s: (s.cluster_id, s.captured_at))
    walks = {}
    for head, topics in walk.snapshots_of(store_rows(unique)):
        cluster_id = head[t.CLUSTER_ID]
        state = walks.get(cluster_id) or walk.ClusterWalk(cluster_id, POLICY)
        if order.random() < 0.4:
            state.tables()
            state = walk.ClusterWalk.loads(state.dumps(), cluster_id, POLICY)
        state.snapshot(head, topics)
        walks[cluster_id] = state
    runs, incarnations = walk.concat(walks.values())
    assert (run_rows(runs.to_pylist()), incarnation_groups(incarnations.to_pylist())) == \
        reference_tables(ingested, POLICY)


def split_walked(snapshots, size: int, choose, policy=POLICY):
    """The rows of a split walk (topic_lineage.scd.walk_job's two passes, in process): each
    cluster's snapshots in ranges of ``size``, each range diffed by a Differ given the snapshot
    before it, its steps through the task's file format (``encode_steps``) walked in order. With
    ``choose``, a range may instead be walked whole (``snapshot``, the one-task path), and the
    walk saved and loaded between two ranges (an incremental build of either kind)."""
    from topic_lineage.scd import walk_job

    by_cluster = {}
    for head, topics in walk.snapshots_of(store_rows(snapshots)):
        by_cluster.setdefault(head[t.CLUSTER_ID], []).append((head, topics))
    walks = []
    for cluster_id, steps in by_cluster.items():
        state = walk.ClusterWalk(cluster_id, policy)
        for start in range(0, len(steps), size):
            if choose.random() < 0.3:
                state = walk.ClusterWalk.loads(state.dumps(), cluster_id, policy)
            part = steps[start:start + size]
            if choose.random() < 0.25:
                for head, topics in part:
                    state.snapshot(head, topics)
                continue
            differ = walk.Differ(steps[start - 1][1] if start else None)
            data = walk_job.encode_steps([differ.step(head, topics) for head, topics in part])
            for step in walk_job.decode_steps(data):
                state.step(step)
        walks.append(state)
    runs, incarnations = walk.concat(walks)
    return run_rows(runs.to_pylist()), incarnation_groups(incarnations.to_pylist())


@_SETTINGS
@given(histories(), st.integers(1, 3), st.randoms(use_true_random=False))
def test_a_split_walk_equals_the_reference(ingested, size, choose):
    """Issue #53: a cluster split into ranges of one to three snapshots, each diffed apart and
    walked in a second pass (some ranges walked whole, the walk saved between ranges), gives the
    reference's rows: every example crosses range boundaries."""
    assert split_walked(ingested, size, choose) == reference_tables(ingested, POLICY)


@_SETTINGS
@given(st.lists(cluster_history("Q2x1c3RlcjAwAAAAAAAAAA"), min_size=1, max_size=4),
       st.integers(1, 6), st.sampled_from([0.0, 0.3, 0.5, 0.8]), st.integers(1, 3),
       st.randoms(use_true_random=False))
def test_a_split_walk_equals_the_reference_on_long_histories(parts, min_count, ratio, size, choose):
    """The same on long histories of one cluster with other R3 thresholds."""
    snapshots = one_after_another(parts)
    policy = HoldPolicy(ratio=ratio, min_count=min_count)
    assert split_walked(snapshots, size, choose, policy) == reference_tables(snapshots, policy)


def test_a_saved_walk_is_only_loaded_for_its_cluster_and_hold_policy():
    """A state of another cluster or other hold thresholds, or a damaged one, is no state: the
    build walks that cluster's history again."""
    state = walk.ClusterWalk(CLUSTER, POLICY)
    for head, topics in walk.snapshots_of(store_rows([snap(0, topic("a", tid(1)))])):
        state.snapshot(head, topics)
    data = state.dumps()
    assert walk.ClusterWalk.loads(data, CLUSTER, POLICY).tables()[1].num_rows == 1
    assert walk.ClusterWalk.loads(data, "b3RoZXIAAAAAAAAAAAAAAA", POLICY) is None
    assert walk.ClusterWalk.loads(data, CLUSTER, HoldPolicy(0.9, 3)) is None
    assert walk.ClusterWalk.loads(data[:-20], CLUSTER, POLICY) is None


def test_a_snapshot_out_of_time_order_is_refused():
    state = walk.ClusterWalk(CLUSTER, POLICY)
    (first, topics_1), (second, topics_2) = walk.snapshots_of(
        store_rows([snap(0, topic("a", tid(1))), snap(1, topic("a", tid(1)))]))
    state.snapshot(second, topics_2)
    with pytest.raises(ValueError, match="time order"):
        state.snapshot(first, topics_1)


# --- the task's Arrow without pandas ---------------------------------------------------------------
_KINDS = {
    "string": (pa.string(), st.text(max_size=5)),
    "int32": (pa.int32(), st.integers(-2**31, 2**31 - 1)),
    "int64": (pa.int64(), st.integers(-2**63, 2**63 - 1)),
    "bool": (pa.bool_(), st.booleans()),
    "double": (pa.float64(), st.floats(allow_nan=False)),
    "timestamp": (pa.timestamp("us", tz="UTC"), st.integers(0, 2**62)),
}


@_SETTINGS
@given(st.sampled_from(sorted(_KINDS)).flatmap(
    lambda name: st.tuples(st.just(name), st.lists(st.none() | _KINDS[name][1], max_size=40))))
def test_arrow_array_equals_pyarrows(case):
    """``tables.arrow_array`` (buffers, no pandas) builds the array ``pyarrow.array`` builds."""
    name, values = case
    kind = _KINDS[name][0]
    built = t.arrow_array(values, kind)
    built.validate(full=True)
    expected = pa.array(values, pa.int64()).cast(kind) if name == "timestamp" else pa.array(values, kind)
    assert built.equals(expected)


def test_a_walk_task_imports_no_pandas(tmp_path, monkeypatch):
    """A walk task in a fresh Python (a new Spark Python worker) reads, walks and writes without
    importing pandas: ``pyarrow.array``, ``to_pylist`` of a zoned timestamp, ``pa.scalar`` and
    ``to_numpy`` all import it, a second of a small build's time (issue #40, goal 4)."""
    import subprocess
    import sys

    from topic_lineage import store

    home = tmp_path / "home"
    history = [snap(0, topic("a", tid(1)), topic("b", tid(2))), snap(1, topic("a", tid(3)), topic("b", tid(2))),
               snap(2, topic("b", tid(2), partitions=6), topic("c"))]
    code = f"""
import pathlib, sys
from topic_lineage import tables as t
from topic_lineage.scd import walk_job
from topic_lineage.scd.hold import HoldPolicy
out = t.home() / "out"; (out / "_walk_state").mkdir(parents=True)
stamps = sorted(p.stem for p in t.snapshots_dir().rglob("*.parquet"))
span = walk_job.Span.of(str(t.snapshots_dir() / t.cluster_partition({CLUSTER!r})), stamps)
task = walk_job.ClusterTask({CLUSTER!r}, span, "", (), None, 0, "v1", str(out),
                            str(out / "_walk_state" / "c.walk"), HoldPolicy(), 1, home=str(t.home()))
summary = walk_job.walk_cluster(task)
assert summary["error"] is None and summary["walked"] == 6, summary
print("pandas" in sys.modules)
"""
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(home))
    store.save_all(history, "import:jsonl")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False"], done.stderr
