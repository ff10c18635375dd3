"""Importing ``kafka-topics.sh --describe`` captures saved over time.

The lines below follow TopicCommand.TopicDescription / PartitionDescription.printDescription
(apache/kafka tools/src/main/java/org/apache/kafka/tools/TopicCommand.java): tab separated
``Key: value`` fields, ``TopicId`` left out for clusters without IDs, partition lines indented
with a tab. Kafka before 2.2 printed ``Topic:orders`` (no space).
"""

from __future__ import annotations

from datetime import UTC, datetime

import kafka_builders as kb
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
    assert not snap.complete and not snap.authoritative  # not declared whole
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
                 "--cluster-alias", "prod", "--complete", str(first), str(second)])
    assert code == 0, capsys.readouterr().err
    runs = store.read_runs("prod")
    assert [(r["source"], r["complete"], r["topic_count"]) for r in runs] == [
        ("import:kafka-topics", True, 2), ("import:kafka-topics", True, 2)]


# --- issue 13 ------------------------------------------------------------------------------
def one_topic(name: str, topic_id: str) -> str:
    """What 'kafka-topics.sh --describe --topic NAME' prints: one topic, not the cluster."""
    return (f"Topic: {name}\tTopicId: {topic_id}\tPartitionCount: 1\tReplicationFactor: 1\t"
            f"Configs: \n\tTopic: {name}\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n")


def test_a_capture_is_complete_only_when_declared_whole(tl_home, tmp_path, capsys):
    """Point 2: two '--describe --topic X' captures used to be stored complete, and the second
    one deleted the first one's topic."""
    a = write(tmp_path, "orders-2026-11-01T00:00:00Z.txt", one_topic("orders", ORDERS))
    b = write(tmp_path, "payments-2026-11-02T00:00:00Z.txt",
              one_topic("payments", "AAECAwQFBgcICQoLDA0ODw"))
    assert main(["import", "--format", "kafka-topics", "--cluster-id", CLUSTER, str(a),
                 str(b)]) == 0
    assert [(r["complete"], r["topic_count"]) for r in store.read_runs(CLUSTER)] == [
        (False, 1), (False, 1)]
    # declared by a header line, or by --complete; the header wins over the flag
    whole = write(tmp_path, "all-2026-11-03T00:00:00Z.txt", "# complete: true\n" + MODERN)
    not_whole = write(tmp_path, "x-2026-11-04T00:00:00Z.txt", "# complete: false\n" + MODERN)
    plain = write(tmp_path, "y-2026-11-05T00:00:00Z.txt", MODERN)
    snaps = read_files("kafka-topics", [whole, not_whole, plain], cluster_id=CLUSTER)
    assert [s.complete for s in snaps] == [True, False, False]
    snaps = read_files("kafka-topics", [whole, not_whole, plain], cluster_id=CLUSTER,
                       complete=True)
    assert [s.complete for s in snaps] == [True, False, True]
    bad = write(tmp_path, "z-2026-11-06T00:00:00Z.txt", "# complete: yes\n" + MODERN)
    with pytest.raises(DescribeFormatError, match="complete header must be true or false"):
        read_files("kafka-topics", [bad], cluster_id=CLUSTER)
    assert main(["import", "--format", "kraft-dump", "--complete", "--cluster-id", CLUSTER,
                 str(a)]) == 2
    assert "--complete applies to kafka-topics only" in capsys.readouterr().err


ORDERS = "b8tRS7h4TJ2Vt43Dp85v2A"


@pytest.mark.parametrize(("name", "expected"), [
    ("kt01-apache-kafka-docs-quickstart.txt",
     {"quickstart-events": ("NPmZHyhbR9y00wMglMH2sg", 1, 1, False)}),
    ("kt02-apache-kafka-docs-ops-increase-rf.txt", {"foo": (None, 1, 3, False)}),
    ("kt03-apache-kafka-docs-streams-quickstart.txt",
     {"streams-wordcount-output": (None, 1, 1, False),
      "streams-plaintext-input": (None, 1, 1, False)}),
], ids=["kt01-spaces", "kt02-pre-2.2", "kt03-pre-2.2-configs"])
def test_output_as_kafka_documentation_prints_it(tmp_path, name, expected):
    """Point 3: read in place (a symlink gives the capture time a name, as real captures
    carry none); kt01 has spaces where the tool prints tabs and was refused as 'not a legal
    Kafka topic name'."""
    link = tmp_path / f"{name[:-4]}-20240101T000000Z.txt"
    link.symlink_to(kb.real_kafka("kafka-topics", name))
    [snap] = read_files("kafka-topics", [link], cluster_id=CLUSTER)
    assert observed(snap) == expected
    assert snap.captured_at == datetime(2024, 1, 1, tzinfo=UTC)


def test_fields_are_read_by_name_whatever_the_whitespace(tmp_path):
    import re

    tabs = write(tmp_path, "tabs-2026-11-01T00:00:00Z.txt", MODERN)
    spaces = write(tmp_path, "spaces-2026-11-01T00:00:00Z.txt",
                   re.sub(r"\t", lambda m: "   ", MODERN))
    reassigning = write(tmp_path, "r-2026-11-01T00:00:00Z.txt", (
        "Topic: orders TopicId: b8tRS7h4TJ2Vt43Dp85v2A PartitionCount: 1 ReplicationFactor: 3 "
        "Configs: cleanup.policy=compact MarkedForDeletion: true\n"
        "  Topic: orders Partition: 0 Leader: 1 Replicas: 1,2,3,4 Isr: 1,2,3 "
        "Adding Replicas: 4 Removing Replicas:  Elr: N/A LastKnownElr: N/A\n"))
    a, b, c = (read_files("kafka-topics", [p], cluster_id=CLUSTER)[0]
               for p in (tabs, spaces, reassigning))
    assert a.topics == b.topics
    assert observed(c) == {"orders": (ORDERS, 1, 3, False)}


WARN_38 = ("[2025-01-06 08:18:26,460] WARN [AdminClient clientId=adminclient-1] The "
           "DescribeTopicPartitions API is not supported, using Metadata API to describe topics. "
           "(org.apache.kafka.clients.admin.KafkaAdminClient)")
ZK_INFO = [
    ("[2018-03-05 10:15:32,123] INFO Client environment:zookeeper.version=3.4.10-39d3a4f2, built "
    "on 03/23/2017 10:13 GMT (org.apache.zookeeper.ZooKeeper)"),
    ("[2018-03-05 10:15:32,200] INFO Opening socket connection to server localhost/127.0.0.1:2181."
    " Will not attempt to authenticate using SASL (unknown error) "
    "(org.apache.zookeeper.ClientCnxn)"),
]


def test_tool_log_lines_are_skipped_and_counted(tl_home, tmp_path, capsys):
    """Point 4: output captured with 2>&1 mixes log4j lines into the capture."""
    lines = MODERN.splitlines()
    mixed = "\n".join([WARN_38, lines[0], *ZK_INFO, *lines[1:]]) + "\n"
    clean = write(tmp_path, "a-2026-11-01T00:00:00Z.txt", MODERN)
    noisy = write(tmp_path, "b-2026-11-02T00:00:00Z.txt", mixed)
    notes: list[str] = []
    a, b = read_files("kafka-topics", [clean, noisy], cluster_id=CLUSTER, notes=notes)
    assert a.topics == b.topics
    assert notes == [f"{noisy}: skipped 3 log line(s) of the tool (line 1, 3, 4)"]
    assert main(["import", "--format", "kafka-topics", "--cluster-id", CLUSTER, str(noisy)]) == 0
    assert f"note: {noisy}: skipped 3 log line(s)" in capsys.readouterr().out
    # anything else is still refused, naming file and line
    other = write(tmp_path, "c-2026-11-03T00:00:00Z.txt",
                  mixed + "Exception in thread main java.lang.NullPointerException\n")
    with pytest.raises(DescribeFormatError, match=f"^{other}:9: unrecognised line"):
        read_files("kafka-topics", [other], cluster_id=CLUSTER)
    # an ERROR logged by the tool: the capture may lack topics, so it cannot be declared whole
    error = write(tmp_path, "d-2026-11-04T00:00:00Z.txt", "[2025-01-06 08:18:27,001] ERROR "
                  "[AdminClient clientId=adminclient-1] Connection to node 2 failed "
                  "(org.apache.kafka.clients.NetworkClient)\n" + MODERN)
    [snap] = read_files("kafka-topics", [error], cluster_id=CLUSTER)
    assert not snap.complete
    with pytest.raises(DescribeFormatError, match=f"^{error}:1: declared complete, but the tool "
                                                  "logged an error"):
        read_files("kafka-topics", [error], cluster_id=CLUSTER, complete=True)
