"""Consumer lineage (R8-R10) with real consumers of both group protocols (issue #46).

Kafka 4 has two consumer group protocols: the classic one (JoinGroup/SyncGroup, the client
assigns) and KIP-848's (``group.protocol=consumer``: ConsumerGroupHeartbeat, the broker
assigns). Committed offsets are kept the same way for both, keyed by topic *name*. Each case
runs a real subscribed consumer of that protocol: its committed offsets are captured; when the
topic is deleted Kafka deletes the group's offsets on it; and a consumer that commits its old
position on the re-created topic shows up as a carried position on the new incarnation
(R9), attributed by the rules' reference folds (:mod:`topic_lineage.scd.reference`,
:mod:`topic_lineage.scd.group_reference`). The classic protocol also runs on Kafka 3.9 (where
KIP-848 is not production-ready).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from topic_lineage.capture import capture_snapshot
from topic_lineage.local.kafka_dist import COMPAT_VERSION, DEFAULT_VERSION
from topic_lineage.scd import group_reference, reference

pytestmark = pytest.mark.broker

CASES = [
    pytest.param((DEFAULT_VERSION, "classic"), id=f"kafka-{DEFAULT_VERSION}-classic"),
    pytest.param((DEFAULT_VERSION, "consumer"), id=f"kafka-{DEFAULT_VERSION}-consumer"),
    pytest.param((COMPAT_VERSION, "classic"), id=f"kafka-{COMPAT_VERSION}-classic"),
]


@pytest.fixture
def kafka(request, broker_of_version):
    version, protocol = request.param
    return broker_of_version(version), protocol


def produce(broker, topic: str, count: int) -> None:
    producer = Producer(broker.client_config(**{"linger.ms": 0}))
    for _ in range(count):
        producer.produce(topic, b"x", partition=0)
    assert producer.flush(30) == 0


def member(broker, group: str, protocol: str, topic: str) -> Consumer:
    """A consumer of ``protocol`` subscribed to ``topic``, returned once it has its partition."""
    config = {"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
              "group.protocol": protocol}
    if protocol == "classic":
        config["session.timeout.ms"] = 6000
    consumer = Consumer(broker.client_config(**config))
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while not consumer.assignment():
        assert time.monotonic() < deadline, f"{protocol} consumer got no assignment of {topic}"
        consumer.poll(0.2)
    return consumer


def consume(consumer: Consumer, count: int) -> int:
    """Read records until the consumer's position is ``count`` (the first ``count`` records:
    ``member``'s polls for the assignment may already have returned some); that position."""
    position, deadline = 0, time.monotonic() + 60
    while position < count:
        assert time.monotonic() < deadline, f"at position {position} of {count}"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            position = message.offset() + 1
    return position


def committed(broker, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    [future] = broker.admin().list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)]).values()
    return {tp.partition: tp.offset for tp in future.result(timeout=30).topic_partitions
            if tp.topic == topic and tp.offset >= 0}


def group_rows(snapshots):
    _, topics = reference.derive(snapshots)
    _, groups = group_reference.derive_groups(snapshots, topics)
    return topics, groups


@pytest.mark.parametrize("kafka", CASES, indirect=True)
def test_a_real_consumers_position_is_captured_dropped_with_the_topic_and_carried(kafka):
    broker, protocol = kafka
    run = uuid.uuid4().hex[:8]
    topic, group = f"gp-{run}.orders", f"gp-{run}.billing-{protocol}"
    config = {"bootstrap.servers": broker.bootstrap_servers}

    broker.create_topics([topic])
    produce(broker, topic, 12)
    consumer = member(broker, group, protocol, topic)
    try:
        position = consume(consumer, 10)
        consumer.commit(asynchronous=False)  # its position: 10
        live = capture_snapshot("gp", config, known_live=lambda cluster_id: set())
    finally:
        consumer.close()
    assert position == 10
    [seen] = [g for g in live.groups if g.group_id == group]
    assert seen.error is None and seen.state == "Stable"  # captured while the member was there
    assert [(o.topic, o.partition, o.committed_offset, o.log_end_offset) for o in seen.offsets] \
        == [(topic, 0, 10, 12)]

    broker.delete_topics([topic])
    deadline = time.monotonic() + 30
    while committed(broker, group, topic):  # Kafka deletes a deleted topic's offsets
        assert time.monotonic() < deadline, committed(broker, group, topic)
        time.sleep(0.2)
    gone = capture_snapshot("gp", config, known_live=lambda cluster_id: set())
    assert all(o.topic != topic for g in gone.groups if g.group_id == group for o in g.offsets)

    broker.create_topics([topic])
    produce(broker, topic, 3)
    consumer = member(broker, group, protocol, topic)
    try:  # it kept its position in memory (or elsewhere) and commits it on the new topic
        consumer.commit(offsets=[TopicPartition(topic, 0, position)], asynchronous=False)
        carried = capture_snapshot("gp", config, known_live=lambda cluster_id: set())
    finally:
        consumer.close()
    [seen] = [g for g in carried.groups if g.group_id == group]
    assert [(o.topic, o.committed_offset, o.log_end_offset) for o in seen.offsets] \
        == [(topic, 10, 3)]

    topics, groups = group_rows([live, gone, carried])
    incarnations = sorted((r for r in topics if r["topic_name"] == topic),
                          key=lambda r: r["valid_from"])
    assert [r["topic_id"] for r in incarnations] == [live.topic_id(topic), carried.topic_id(topic)]
    assert incarnations[0]["deleted_at"] == gone.captured_at
    mine = sorted((r for r in groups if r["group_id"] == group), key=lambda r: r["first_seen_at"])
    assert [(r["topic_id"], r["max_committed_offset"], r["carried_offset"]) for r in mine] == [
        (live.topic_id(topic), 10, False),
        (carried.topic_id(topic), 10, True),  # R9: beyond the new log's end in the same capture
    ]
