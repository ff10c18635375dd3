"""A replayed metadata log builds into the exact incarnations, and the quality gate passes.

Issue 8's "done when": creations, deletions and a delete-and-recreate of the same name give
incarnations whose deletion times equal the RemoveTopicRecords' timestamps; replayed snapshots
are authoritative, so a mass deletion in the log is not held (R3).
"""

from __future__ import annotations

from datetime import UTC

import kafka_builders as kb
import pytest
from test_import_kraft_log import CLUSTER, OFFSETS, ORDERS_1, ORDERS_2, PAYMENTS, T0, at, history

from topic_lineage import topic_id as tid
from topic_lineage.importers import import_files

pytestmark = pytest.mark.spark


def _incarnations(spark, version):
    from topic_lineage import warehouse as wh

    rows = spark.read.parquet(str(wh.version_path(version, "topic_incarnations"))).collect()
    return sorted((r.asDict() for r in rows), key=lambda r: (r["topic_id"], r["version"]))


def _utc(value):

    return value.astimezone(UTC) if value is not None else None


def test_metadata_log_builds_exact_incarnations_and_passes_the_gate(spark, tl_home, tmp_path):
    from topic_lineage.quality.gate import validate_version
    from topic_lineage.scd.build import build_version

    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(history()))
    import_files("kraft-log", [tmp_path], cluster_id=CLUSTER, cluster_alias="prod")
    info = build_version(spark, "v-kraft", full_refresh=True)
    got = [
        (r["topic_id"], r["topic_name"], r["version"], r["change_type"], r["partition_count"],
         r["replication_factor"], _utc(r["valid_from"]), _utc(r["valid_to"]), r["is_current"],
         _utc(r["deleted_at"]))
        for r in _incarnations(spark, info.version)
    ]
    expected = [
        (ORDERS_1, "orders", 1, "created", 3, 3, at(T0 + 1000), at(T0 + 4000), False,
         at(T0 + 5000)),
        (ORDERS_1, "orders", 2, "attributes_changed", 4, 3, at(T0 + 4000), at(T0 + 5000), False,
         at(T0 + 5000)),
        (ORDERS_2, "orders", 1, "created", 2, 1, at(T0 + 6000), None, True, None),
        (PAYMENTS, "payments", 1, "created", 1, 2, at(T0 + 2000), None, True, None),
        (OFFSETS, "__consumer_offsets", 1, "created", 1, 1, at(T0 + 2000), None, True, None),
    ]
    assert sorted(got, key=lambda r: (r[0], r[2])) == sorted(expected, key=lambda r: (r[0], r[2]))
    result = validate_version(spark, info.version, max_age=None)
    assert result.success, result.report()


def test_mass_deletion_in_the_log_is_not_held(spark, tl_home, tmp_path):
    """Six of seven topics removed in one batch: exact history, so no R3 hold."""
    ids = [tid.canonical(bytes([i + 1]) * 16) for i in range(7)]
    create = [kb.Rec(kb.topic_record(f"t{i}", ids[i])) for i in range(7)]
    create += [kb.Rec(kb.partition_record(ids[i], 0, [1])) for i in range(7)]
    batches = [
        kb.Batch(0, T0, create),
        kb.Batch(14, T0 + 1000, [kb.Rec(kb.remove_topic_record(ids[i])) for i in range(6)]),
    ]
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches))
    import_files("kraft-log", [tmp_path], cluster_id=CLUSTER)
    from topic_lineage.scd.build import build_version

    info = build_version(spark, "v-mass", full_refresh=True)
    rows = _incarnations(spark, info.version)
    deleted = {r["topic_name"]: _utc(r["deleted_at"]) for r in rows}
    assert deleted == {**{f"t{i}": at(T0 + 1000) for i in range(6)}, "t6": None}
