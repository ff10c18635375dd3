"""Live capture against real Apache Kafka (the local KRaft broker), never a mock."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka import KafkaError, TopicCollection
from conftest import OFFSETS_TOPIC

from topic_lineage import store
from topic_lineage import topic_id as tid
from topic_lineage.capture import CaptureError, ClusterUnavailableError, capture_snapshot
from topic_lineage.kafka_config import KafkaConfigError
from topic_lineage.local import kafka_dist
from topic_lineage.local.broker import LocalBroker, free_port, new_cluster_id
from topic_lineage.local.kafka_dist import COMPAT_VERSION, DEFAULT_VERSION

# librdkafka's own (client-side) errors: negative codes, names with a leading "_"
LOCAL_ERROR_NAMES = {
    name for name in dir(KafkaError)
    if name.startswith("_") and not name.startswith("__")
    and isinstance(getattr(KafkaError, name), int) and getattr(KafkaError, name) < 0
}

pytestmark = pytest.mark.broker


@pytest.fixture(params=[DEFAULT_VERSION, COMPAT_VERSION], ids=lambda v: f"kafka-{v}")
def broker(request, broker_of_version):
    """Every live capture test here runs on the default Kafka and on the newest 3.9."""
    return broker_of_version(request.param)


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
    assert stored[0].cluster_id == stored[1].cluster_id == broker.cluster_id
    assert tid.is_canonical(broker.cluster_id)  # a KRaft cluster ID is a Kafka UUID
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
    assert snap.topic_ids() == {**expected_ids, OFFSETS_TOPIC: snap.topic_id(OFFSETS_TOPIC)}
    by_name = {t.name: t for t in snap.topics}
    assert {n: by_name[n].partition_count for n, _ in specs} == dict(specs)
    assert {t.replication_factor for t in snap.topics} == {1}
    assert any(("+" in v or "/" in v) for v in (
        str(d.result().topic_id) for d in broker.admin().describe_topics(
            TopicCollection([n for n, _ in specs])).values()
    )), "no ID used the standard-base64-only characters; the alphabet check proved nothing"


def test_internal_topics_are_captured_with_the_brokers_flag(broker):
    """Internal topics are not filtered out, and is_internal is what the broker reports: Kafka
    makes ``__consumer_offsets`` (internal) when a group first commits; ``_schemas`` only
    looks internal."""
    from confluent_kafka import Consumer, TopicPartition

    broker.create_topics(["_schemas", "orders"])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "internal-t",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    snap = capture_snapshot("local", config(broker))
    assert {t.name for t in snap.topics} == {"__consumer_offsets", "_schemas", "orders"}
    futures = broker.admin().describe_topics(TopicCollection(["__consumer_offsets", "_schemas"]))
    assert futures["__consumer_offsets"].result(timeout=30).is_internal is True
    by_name = {t.name: t for t in snap.topics}
    assert by_name["__consumer_offsets"].is_internal is True
    assert by_name["_schemas"].is_internal is False and by_name["orders"].is_internal is False


def test_topic_vanished_between_listing_and_describing_is_recorded(broker, tl_home):
    broker.create_topics(["orders", "payments"])
    seen = []

    def delete_orders(names):
        seen.extend(names)
        broker.delete_topics(["orders"])

    snap = capture_snapshot("local", config(broker), on_listed=delete_orders)
    assert [n for n in seen if not n.startswith("__")] == ["orders", "payments"]  # + Kafka's own
    [orders] = [t for t in snap.topics if t.name == "orders"]
    assert orders.error == "UNKNOWN_TOPIC_OR_PART"
    assert (orders.topic_id, orders.partition_count, orders.is_internal) == (None, None, None)
    assert snap.topic_id("orders") == tid.ZERO_UUID
    assert snap.complete  # the broker answered for every topic
    assert snap.error_topic_count == 1
    store.save(snap, "live")
    assert store.read_runs()[0]["error_topic_count"] == 1


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

    A dedicated broker: its 10,000 partitions would slow every later test of the session
    broker, and killing it, then removing its directory, throws them away at once."""
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
        big.kill()  # thrown away: no controlled shutdown of 10,000 logs (about 5 s), then removed
    print(f"captured 10,000 topics in {elapsed:.2f}s")


# --- the local broker helper ---------------------------------------------------------------
def test_new_cluster_ids_never_start_with_a_dash():
    """One in 64 random UUIDs would (Kafka's Uuid.randomUuid draws again, and so do we)."""
    ids = [new_cluster_id() for _ in range(2_000)]
    assert all(tid.is_canonical(i) and not i.startswith("-") for i in ids) and len(set(ids)) == 2_000


def test_local_broker_stops_and_frees_its_port():
    """Formatted with a cluster ID whose text starts with '-' (a valid Kafka UUID a user may
    ask for: the format command once took it for an option)."""
    import socket

    cluster_id = "-" + new_cluster_id()[1:]
    assert tid.is_canonical(cluster_id)
    with LocalBroker(cluster_id) as lb:
        assert lb.cluster_id == cluster_id
        assert lb.admin().list_topics(timeout=10).cluster_id == cluster_id  # formatted with it
        process, port, work_dir = lb._process, lb.port, lb.work_dir
        lb.create_topics([("t", 2)])
        assert lb.topic_names() == {"t"}
        deadline = time.monotonic() + 30  # Kafka writes partition.metadata shortly after
        while not (lb.log_dir / "t-0" / "partition.metadata").is_file():
            assert time.monotonic() < deadline, sorted(p.name for p in (lb.log_dir / "t-0").iterdir())
            time.sleep(0.1)
        assert (lb.metadata_dir / "__cluster_metadata-0").is_dir()
        assert lb.start_seconds > 0 and "started in" in lb.describe()
        # the install made the class archive its JVMs map (kafka_dist.make_archive)
        assert f"-XX:SharedArchiveFile={kafka_dist.usable_archive(lb.version)}" in process.args
    # SIGTERM ran the JVM's shutdown hooks (a controlled shutdown: exit 128+15, not -SIGKILL)
    assert process.poll() == 143 and not lb.running
    assert not work_dir.exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_broker_that_cannot_start_says_why():
    """Its port taken: Kafka exits, and the error quotes Kafka's own reason (its directory,
    with the log, is removed)."""
    import socket

    from topic_lineage.local.broker import LocalBrokerError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(LocalBrokerError) as excinfo:
            LocalBroker(port=port, startup_timeout_s=60).start()
    message = str(excinfo.value)
    assert f"Apache Kafka {kafka_dist.default_version()} exited" in message
    assert f"on port {port}" in message and "Unable to start acceptor for PLAINTEXT" in message


def test_missing_java_or_jars_is_one_clear_line(monkeypatch, tmp_path):
    """No Java, or no jars and no Maven to fetch them: one line naming what to install."""
    import shutil

    from topic_lineage.errors import TopicLineageError
    from topic_lineage.local.kafka_dist import KafkaDistError

    java = shutil.which("java")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # neither java nor mvn
    with pytest.raises(KafkaDistError) as excinfo:
        LocalBroker().start()
    assert "needs Java 17" in str(excinfo.value) and "openjdk-17" in str(excinfo.value)
    assert "\n" not in str(excinfo.value)

    java_only = tmp_path / "bin"
    java_only.mkdir()
    (java_only / "java").symlink_to(java)
    monkeypatch.setenv("PATH", str(java_only))
    monkeypatch.setenv("TOPIC_LINEAGE_KAFKA_DIR", str(tmp_path / "kafka"))  # nothing fetched
    with pytest.raises(KafkaDistError) as excinfo:
        LocalBroker().start()
    assert "needs Maven" in str(excinfo.value) and "apt-get install maven" in str(excinfo.value)
    assert isinstance(excinfo.value, TopicLineageError)  # the CLI prints it as one line
