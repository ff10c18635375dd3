"""Importing ``kafka-topics.sh --describe`` captures saved over time.

The lines below follow TopicCommand.TopicDescription / PartitionDescription.printDescription
(apache/kafka tools/src/main/java/org/apache/kafka/tools/TopicCommand.java): tab separated
``Key: value`` fields, ``TopicId`` left out for clusters without IDs, partition lines indented
with a tab. Kafka before 2.2 printed ``Topic:orders`` (no space).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from topic_lineage import store
from topic_lineage.cli import main
from topic_lineage.importers import ImportInputError, import_files, read_files
from topic_lineage.importers.kafka_topics import DescribeFormatError, captured_at_from_name

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"

MODERN = (
    "Topic: orders\tTopicId: b8tRS7h4TJ2Vt43Dp85v2A\tPartitionCount: 2\tReplicationFactor: 3\t"
    "Configs: cleanup.policy=compact,min.insync.replicas=2\n"
    "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tElr: N/A\t"
    "LastKnownElr: N/A\n"
    "\tTopic: orders\tPartition: 1\tLeader: none\tReplicas: 2,3,1\tIsr: 2\tElr: N/A\t"
    "LastKnownElr: N/A\n"
    "Topic: __consumer_offsets\tTopicId: 0f5e2b1c-7d3a-4e8f-9a6b-1c2d3e4f5a6b\t"
    "PartitionCount: 1\tReplicationFactor: 1\tConfigs: segment.bytes=104857600\n"
    "\tTopic: __consumer_offsets\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n"
)

PRE_ID = (
    "Topic:orders\tPartitionCount:3\tReplicationFactor:2\tConfigs:\n"
    "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2\n"
    "Topic: legacy\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: \tMarkedForDeletion: true\n"
)


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def observed(snapshot):
    return {t.name: (t.topic_id, t.partition_count, t.replication_factor, t.is_internal)
            for t in snapshot.topics}


def test_capture_with_header_time_and_ids(tmp_path):
    path = write(tmp_path, "capture.txt", "# captured_at: 2026-11-01T06:00:00+01:00\n" + MODERN)
    [snap] = read_files("kafka-topics", [path], cluster_id=CLUSTER)
    assert snap.captured_at == datetime(2026, 11, 1, 5, tzinfo=UTC)
    assert snap.complete and not snap.authoritative
    assert (snap.cluster_id, snap.cluster_alias) == (CLUSTER, CLUSTER)
    assert observed(snap) == {
        "orders": ("b8tRS7h4TJ2Vt43Dp85v2A", 2, 3, False),
        # RFC 4122 input is stored in Kafka's canonical form
        "__consumer_offsets": ("D14rHH06To-aaxwtPk9aaw", 1, 1, True),
    }


def test_pre_id_capture_time_from_file_name_and_headers_for_cluster(tmp_path):
    header = "# cluster_id: old-zk-cluster\n# cluster_alias: legacy-eu\n"
    path = write(tmp_path, "describe-2021-03-04T05-06-07Z.txt", header + PRE_ID)
    [snap] = read_files("kafka-topics", [path])
    assert snap.captured_at == datetime(2021, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert (snap.cluster_id, snap.cluster_alias) == ("old-zk-cluster", "legacy-eu")
    assert observed(snap) == {"orders": (None, 3, 2, False), "legacy": (None, 1, 1, False)}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("2026-11-01T00:00:00Z.txt", datetime(2026, 11, 1, tzinfo=UTC)),
        ("topics.20261101T013000Z.out", datetime(2026, 11, 1, 1, 30, tzinfo=UTC)),
        ("x-2026-11-01T02-00-00.250+0100.txt",
         datetime(2026, 11, 1, 1, 0, 0, 250000, tzinfo=UTC)),
        ("describe-2026-11-01.txt", None),  # a date is not a capture time
        ("describe-2026-11-01T00-00-00.txt", None),  # no zone: refused, never guessed
    ],
)
def test_capture_time_in_file_names(name, expected):
    assert captured_at_from_name(name) == expected


def test_no_capture_time_is_an_error(tmp_path):
    path = write(tmp_path, "describe.txt", MODERN)
    with pytest.raises(DescribeFormatError, match="no capture time.*# captured_at:"):
        read_files("kafka-topics", [path], cluster_id=CLUSTER)


def test_no_cluster_id_is_an_error(tmp_path):
    path = write(tmp_path, "2026-11-01T00:00:00Z.txt", MODERN)
    with pytest.raises(DescribeFormatError, match="--cluster-id"):
        read_files("kafka-topics", [path])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("garbage line here", "unrecognised line"),
        ("Topic: other\tTopicId: not-an-id\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: ",
         "not a topic ID"),
        ("Topic: other\tPartitionCount: x\tReplicationFactor: 1\tConfigs: ",
         "PartitionCount is not a number"),
        ("\tTopic: ghost\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1", "before its topic line"),
        ("Topic: orders\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: ", "appears twice"),
        ("Error while executing topic command : Timed out waiting for a node assignment.",
         "the capture failed"),
    ],
    ids=["garbage", "bad-id", "bad-count", "filtered", "duplicate", "failed-run"],
)
def test_damaged_capture_imports_nothing(tl_home, tmp_path, line, message):
    good = write(tmp_path, "a-2026-11-01T00:00:00Z.txt", MODERN)
    bad = write(tmp_path, "b-2026-11-02T00:00:00Z.txt", MODERN + line + "\n")
    with pytest.raises(DescribeFormatError, match=message) as excinfo:
        import_files("kafka-topics", [good, bad], cluster_id=CLUSTER)
    assert str(excinfo.value).startswith(f"{bad}:6:")
    assert store.read_runs() == []  # not even the good file: every input is checked first


def test_empty_capture_is_incomplete(tmp_path):
    path = write(tmp_path, "2026-11-01T00:00:00Z.txt", "# nothing printed\n")
    [snap] = read_files("kafka-topics", [path], cluster_id=CLUSTER)
    assert not snap.complete and snap.topics == ()


def test_two_different_captures_at_one_instant_conflict(tmp_path):
    a = write(tmp_path, "a-2026-11-01T00:00:00Z.txt", MODERN)
    b = write(tmp_path, "b-2026-11-01T00:00:00Z.txt", PRE_ID)
    with pytest.raises(ImportInputError, match="two different snapshots"):
        read_files("kafka-topics", [a, b], cluster_id=CLUSTER)


def test_cli_imports_captures_over_time(tl_home, tmp_path, capsys):
    first = write(tmp_path, "2026-11-01T00:00:00Z.txt", PRE_ID)
    second = write(tmp_path, "2026-11-02T00:00:00Z.txt", MODERN)
    code = main(["import", "--format", "kafka-topics", "--cluster-id", CLUSTER,
                 "--cluster-alias", "prod", str(first), str(second)])
    assert code == 0, capsys.readouterr().err
    runs = store.read_runs("prod")
    assert [(r["source"], r["complete"], r["topic_count"]) for r in runs] == [
        ("import:kafka-topics", True, 2), ("import:kafka-topics", True, 2)]
