"""Consumer-group capture (contract R8-R10) against real Apache Kafka (the local broker): committed
offsets with the log end offset read in the same capture, a group listing that fails and a group
whose offsets are denied (fault points), and a deadline that passes.

Records are produced in batches (one flush): Kafka's log end offset counts every record."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from topic_lineage.faults import FAULT_ENV
from topic_lineage.group_capture import capture_groups
from topic_lineage.local.kafka_dist import COMPAT_VERSION, DEFAULT_VERSION
from topic_lineage.snapshot import GroupOffset

pytestmark = pytest.mark.broker


@pytest.fixture(params=[DEFAULT_VERSION, COMPAT_VERSION], ids=lambda v: f"kafka-{v}")
def broker(request, broker_of_version):
    """Every live group capture test here runs on the default Kafka and on the newest 3.9."""
    return broker_of_version(request.param)



def produce(broker, topic: str, count: int) -> None:
    producer = Producer(broker.client_config(**{"linger.ms": 0}))
    for _ in range(count):
        producer.produce(topic, b"x", partition=0)
    assert producer.flush(30) == 0


def commit(broker, group: str, topic: str, offset: int, partition: int = 0) -> None:
    """A standalone commit, as a consumer that keeps its position across a re-creation does."""
    consumer = Consumer(broker.client_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        consumer.close()


def by_id(groups):
    return {g.group_id: g for g in groups}


def test_committed_offsets_come_with_the_log_end_offset_of_the_same_capture(broker):
    broker.create_topics([("orders", 2)])
    produce(broker, "orders", 12)
    commit(broker, "billing", "orders", 10)
    commit(broker, "billing", "orders", 0, partition=1)
    complete, groups = capture_groups(broker.admin(), 20)
    assert complete is True
    billing = by_id(groups)["billing"]
    assert billing.error is None and billing.state == "Empty"
    assert billing.offsets == (GroupOffset("orders", 0, 10, 12), GroupOffset("orders", 1, 0, 0))


def test_a_position_carried_across_a_re_creation_reads_beyond_the_new_log_end(broker):
    """Issue #26's scenario: the old position committed on the re-created topic exceeds the log
    end offset read in the same capture (R9's evidence)."""
    broker.create_topics(["orders"])
    produce(broker, "orders", 12)
    commit(broker, "billing", "orders", 10)
    broker.delete_topics(["orders"])
    broker.create_topics(["orders"])
    produce(broker, "orders", 3)
    commit(broker, "billing", "orders", 1_000_000)
    _, groups = capture_groups(broker.admin(), 20)
    assert by_id(groups)["billing"].offsets == (GroupOffset("orders", 0, 1_000_000, 3),)


def test_a_failed_group_listing_says_nothing_was_seen(broker, monkeypatch):
    broker.create_topics(["orders"])
    commit(broker, "billing", "orders", 0)
    monkeypatch.setenv(FAULT_ENV, "fail@groups")
    assert capture_groups(broker.admin(), 20) == (False, ())


def test_a_group_whose_offsets_are_denied_is_kept_with_the_error_and_no_offsets(broker, monkeypatch):
    broker.create_topics(["orders"])
    produce(broker, "orders", 2)
    commit(broker, "billing", "orders", 1)
    commit(broker, "audit", "orders", 2)
    monkeypatch.setenv(FAULT_ENV, "deny@offsets:billing")
    complete, groups = capture_groups(broker.admin(), 20)
    assert complete is True
    assert (by_id(groups)["billing"].error, by_id(groups)["billing"].offsets) == (
        "GROUP_AUTHORIZATION_FAILED", ())
    assert by_id(groups)["audit"].offsets == (GroupOffset("orders", 0, 2, 2),)


def test_a_deadline_that_passes_leaves_the_group_information_incomplete(broker):
    broker.create_topics(["orders"])
    commit(broker, "billing", "orders", 0)
    assert capture_groups(broker.admin(), 0) == (False, ())
