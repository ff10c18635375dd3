"""R5 order independence and incrementality, through the store and real builds.

One history (two clusters; creation, attribute change, incomplete snapshot, delete-and-recreate,
ID assignment, describe error, rename, a held and then confirmed mass deletion, a reappearance)
is ingested in order, in reverse batches and shuffled with duplicates, with an (incremental)
build after every batch. Every published result must equal the full refresh, row for row.
"""

from __future__ import annotations

import random

import pytest
from gate_support import pass_gate
from pyspark.testing import assertDataFrameEqual
from scd_support import snap, tid, topic

from topic_lineage import store
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.scd.build import WALK_TASKS, build_version

pytestmark = [pytest.mark.spark, pytest.mark.slow]

B = "QkJCQkJCQkJCQkJCQkJCQg"
X, Y, Z, W, V, Q = tid(1), tid(2), tid(3), tid(4), tid(5), tid(6)
SIX = [topic(f"t{i}", tid(10 + i)) for i in range(6)]

A_HISTORY = [
    snap(0, topic("orders", X), topic("payments", Y), topic("logs"), *SIX),
    snap(1, topic("orders", X, partitions=6), complete=False),
    snap(2, topic("orders", Z), topic("payments", Y, error="UNKNOWN_SERVER_ERROR"),
         topic("logs", W), *SIX),
    snap(3, topic("orders", Z), topic("payments", Y), topic("logs", W)),  # held: 6 of 9
    snap(4, topic("orders", Z), topic("payments-v2", Y), topic("logs", W)),  # confirms
    snap(5, topic("orders", Z), topic("payments-v2", Y), topic("logs", W), topic("old", X),
         topic("payments", V)),
]
B_HISTORY = [  # X's name taken by Q in an incomplete snapshot: X ends there (R1)
    snap(0, topic("orders", X), cluster=B, alias="dr"),
    snap(1, topic("orders", Q), cluster=B, alias="dr", complete=False),
    snap(2, topic("orders", Q, rf=1), cluster=B, alias="dr", complete=False),
    snap(3, cluster=B, alias="dr"),
]
A0, A1, A2, A3, A4, A5 = A_HISTORY
B0, B1, B2, B3 = B_HISTORY


def tables_of(spark, version):
    return {
        table: spark.read.parquet(str(wh.version_path(version, table))).select(
            *t.ddl_columns(t.TABLE_DDL[table])
        )
        for table in t.TABLES
    }


def build_batches(spark, batches, derivation):
    infos = []
    for batch in batches:
        store.save_all(batch, "import:jsonl")
        info = build_version(spark)
        assert wh.read_manifest(info.version)["derivation"] == derivation
        pass_gate(info.version)  # the gate is not the subject here (tests/gate_support.py)
        wh.publish(info.version)
        infos.append(info)
    return infos


@pytest.fixture
def derivation():
    """What every version's manifest names: the walk, in a Spark task per cluster."""
    return WALK_TASKS


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    """The full refresh over the whole history (its shape is checked below, and the rules on it
    by tests/test_scd_properties.py against the plain reference)."""
    mp = pytest.MonkeyPatch()
    mp.setenv(t.HOME_ENV, str(tmp_path_factory.mktemp("reference")))
    try:
        store.save_all(A_HISTORY + B_HISTORY, "import:jsonl")
        info = build_version(spark, full_refresh=True)
        frames = {name: df.collect() for name, df in tables_of(spark, info.version).items()}
        yield frames
    finally:
        mp.undo()


def assert_same_tables(spark, version, reference):
    for table, frame in tables_of(spark, version).items():
        expected = spark.createDataFrame(reference[table], t.TABLE_DDL[table])
        assertDataFrameEqual(frame, expected)


def test_reference_has_the_expected_shape(reference):
    """Guards the history itself: hold, confirmation, recreate, id_assigned, rename, reappeared."""
    runs = {(r.cluster_id, r.captured_at.hour): r.held for r in reference[t.SNAPSHOT_RUNS]}
    assert [h for (c, _), h in sorted(runs.items()) if c != B] == [False] * 3 + [True, False, False]
    changes = sorted((r.topic_name, r.change_type) for r in reference[t.TOPIC_INCARNATIONS]
                     if r.cluster_id != B)
    assert ("logs", "id_assigned") in changes and ("payments-v2", "renamed") in changes
    assert ("old", "reappeared") in changes
    six = [r for r in reference[t.TOPIC_INCARNATIONS] if r.topic_name.startswith("t")]
    assert {r.deleted_at.hour for r in six} == {3}  # the held snapshot's time
    in_b = {r.topic_id: (r.deleted_at.hour, r.valid_to.hour) for r in reference[t.TOPIC_INCARNATIONS]
            if r.cluster_id == B and r.version == 1}
    assert in_b == {X: (1, 1), Q: (3, 2)}


def test_in_order_incremental_builds_equal_full_refresh(spark, tl_home, reference, derivation):
    infos = build_batches(spark, [[A0, A1, B0], [A2, A3, B1, B2], [A4, A5, B3]], derivation)
    assert [i.mode for i in infos] == ["full", "incremental", "incremental"]
    assert all(not i.recomputed_clusters for i in infos[1:])
    assert_same_tables(spark, infos[-1].version, reference)


def test_reverse_batches_equal_full_refresh(spark, tl_home, reference, derivation):
    infos = build_batches(spark, [[A4, A5, B3], [A2, A3, B1, B2], [A0, A1, B0]], derivation)
    assert infos[1].mode == "incremental" and infos[1].recomputed_clusters  # late snapshots
    assert_same_tables(spark, infos[-1].version, reference)


def test_shuffled_batches_with_duplicates_equal_full_refresh(spark, tl_home, reference, derivation):
    everything = A_HISTORY + B_HISTORY
    random.Random(7).shuffle(everything)
    batches = [everything[:3], everything[3:6] + everything[:2], everything[6:] + everything[4:5]]
    infos = build_batches(spark, batches, derivation)
    assert_same_tables(spark, infos[-1].version, reference)
    # and a build with nothing new changes nothing
    again = build_version(spark)
    assert again.new_snapshots == 0
    assert_same_tables(spark, again.version, reference)
