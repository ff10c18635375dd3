"""Topic IDs on broker disks (``partition.metadata``) and stale partition directories.

File format: PartitionMetadata.encode() = "version: 0\\ntopic_id: <Uuid.toString()>" and
PartitionMetadataReadBuffer (apache/kafka storage/.../checkpoint). Directory names:
LocalLog.scala logDirName ("<topic>-<partition>"), logDeleteDirName / logStrayDirName
("<topic>-<partition>.<32 hex>-delete" / "-stray"), logFutureDirName ("-future").
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from topic_lineage import store
from topic_lineage.cli import main
from topic_lineage.importers import UnknownFormatError, read_files
from topic_lineage.importers.partition_metadata import (
    PartitionMetadataError,
    read_partition_metadata,
    scan,
)
from topic_lineage.snapshot import Snapshot, TopicObservation

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
ORDERS_OLD = "b8tRS7h4TJ2Vt43Dp85v2A"
ORDERS_NEW = "D14rHH06To-aaxwtPk9aaw"
PAYMENTS = "AAECAwQFBgcICQoLDA0ODw"
GONE = "EBESExQVFhcYGRobHB0eHw"


def partition_dir(log_dir, name: str, topic_id: str | None):
    path = log_dir / name
    path.mkdir(parents=True)
    (path / "00000000000000000000.log").write_bytes(b"")
    if topic_id is not None:
        (path / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}")
    return path


@pytest.fixture
def log_dir(tmp_path):
    root = tmp_path / "kafka-logs"
    root.mkdir()
    (root / "meta.properties").write_text(f"version=1\nnode.id=1\ncluster.id={CLUSTER}\n")
    partition_dir(root, "orders-0", ORDERS_NEW)
    partition_dir(root, "orders-1", ORDERS_OLD)  # left behind by an older incarnation
    partition_dir(root, "payments-0", PAYMENTS)
    partition_dir(root, "payments-1.3f2a9c0e5d7b4a1c8e6f0b2d4a6c8e0f-future", PAYMENTS)
    partition_dir(root, "gone-0.0123456789abcdef0123456789abcdef-delete", GONE)
    partition_dir(root, "gone-2.fedcba9876543210fedcba9876543210-stray", GONE)
    partition_dir(root, "__cluster_metadata-0", None)
    (root / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    return root


def test_reads_kafka_uuid_and_rfc4122_ids(tmp_path):
    path = tmp_path / "partition.metadata"
    path.write_text(f"version: 0\ntopic_id: {ORDERS_OLD}")
    assert read_partition_metadata(path) == ORDERS_OLD
    path.write_text("version: 0\ntopic_id: 6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8\n")
    assert read_partition_metadata(path) == ORDERS_OLD


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: 0\n", "expected 'version: 0'"),
        ("version: x\ntopic_id: b8tRS7h4TJ2Vt43Dp85v2A", ":1: malformed"),
        ("version: 0\ntopicid b8tRS7h4TJ2Vt43Dp85v2A", ":2: malformed"),
        ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "zero topic ID"),
    ],
)
def test_malformed_files_are_named(tmp_path, text, message):
    path = tmp_path / "partition.metadata"
    path.write_text(text)
    with pytest.raises(PartitionMetadataError, match=message) as excinfo:
        read_partition_metadata(path)
    assert str(path) in str(excinfo.value)


def test_without_catalog_conflicting_ids_and_renamed_dirs_are_stale(log_dir):
    report = scan([log_dir])
    assert report.topics_on_disk() == {"orders": {ORDERS_NEW, ORDERS_OLD}, "payments": {PAYMENTS}}
    stale = {s.directory.path.rsplit("/", 1)[1]: s.reason for s in report.stale}
    assert set(stale) == {
        "orders-0", "orders-1",
        "gone-0.0123456789abcdef0123456789abcdef-delete",
        "gone-2.fedcba9876543210fedcba9876543210-stray",
    }
    assert "different topic IDs" in stale["orders-0"]


def test_with_catalog_only_the_old_incarnation_is_stale(log_dir):
    report = scan([log_dir], live_ids={"orders": ORDERS_NEW, "payments": PAYMENTS})
    stale = {s.directory.path.rsplit("/", 1)[1]: s.reason for s in report.stale}
    assert "orders-0" not in stale
    assert f"live 'orders' is {ORDERS_NEW}" in stale["orders-1"]
    assert {s.directory.topic_id for s in report.stale} == {ORDERS_OLD, GONE}


def test_cli_compares_with_the_newest_stored_complete_snapshot(tl_home, log_dir, capsys):
    store.save(Snapshot(CLUSTER, "prod", datetime(2026, 11, 1, tzinfo=UTC), True, (
        TopicObservation("orders", ORDERS_NEW, 2, 1, False),
    )))
    assert main(["scan-logdirs", "--format", "json", str(log_dir)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cluster_id"] == CLUSTER  # from meta.properties in the log dir
    assert report["compared_with_snapshot"] == "2026-11-01T00:00:00Z"
    reasons = {item["path"].rsplit("/", 1)[1]: item["reason"] for item in report["stale"]}
    assert "older incarnation" in reasons["orders-1"]
    assert "does not exist in the latest snapshot" in reasons["payments-0"]
    assert "orders-0" not in reasons
    assert main(["scan-logdirs", str(log_dir)]) == 0
    assert "4 stale directories" in capsys.readouterr().out


def test_import_format_points_to_scan_logdirs(log_dir):
    with pytest.raises(UnknownFormatError, match="scan-logdirs"):
        read_files("partition-metadata", [log_dir])
