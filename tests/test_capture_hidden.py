"""Topics hidden from Kafka's listing (ACLs): a live capture describes by name every topic held as
live that the listing lacks (contract, "Sources of completeness"; R2).

The decision is tested as a pure function, the "held as live" set against real store and
published files, and the whole path against the real broker with the fault points
``hide@list`` (the listing drops names, as Kafka does for topics the principal may not
DESCRIBE) and ``deny@describe`` (describing answers TOPIC_AUTHORIZATION_FAILED). They stand
for what Kafka's ACLs cannot produce: a topic the listing leaves out that a by-name describe
still finds, and one whose by-name describe confirms it gone (with real ACLs Kafka answers
TOPIC_AUTHORIZATION_FAILED for both). Hidden and denied by real ACLs, through the CLI and the
Airflow snapshot DAG: tests/test_acl_capture.py. The build that follows is in
tests/test_faults.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import OFFSETS_TOPIC

from topic_lineage import store
from topic_lineage.capture import GONE_ERROR, capture_snapshot, decide_topics
from topic_lineage.faults import FAULT_ENV, fault_names
from topic_lineage.snapshot import Snapshot, TopicObservation
from topic_lineage.stored_live import StoredLiveError, stored_live_names

SCRIPT = Path(sys.executable).with_name("topic-lineage")
AUTH = "TOPIC_AUTHORIZATION_FAILED"
CLUSTER = "SGlkZGVuVG9waWNzQ2x1c3Q"


def seen(name: str, partitions: int = 3) -> TopicObservation:
    return TopicObservation(name, f"{name[:1].upper()}" + "A" * 21, partitions, 3, False, None)


def failed(name: str, error: str) -> TopicObservation:
    return TopicObservation(name, None, None, None, None, error)


# --- the decision, as a pure function -----------------------------------------------------------
LISTED = {"orders": seen("orders"), "payments": seen("payments")}


@pytest.mark.parametrize(
    ("known_live", "by_name", "answered", "names", "errors", "complete"),
    [
        pytest.param({"orders", "payments"}, {}, True, ["orders", "payments"], {}, True,
                     id="nothing-hidden"),
        pytest.param({"orders", "audit"}, {"audit": failed("audit", AUTH)}, True,
                     ["audit", "orders", "payments"], {"audit": AUTH}, True,
                     id="authorization-error-keeps-it-present"),
        pytest.param({"audit"}, {"audit": failed("audit", GONE_ERROR)}, True,
                     ["orders", "payments"], {}, True, id="unknown-topic-confirms-it-gone"),
        pytest.param({"audit"}, {"audit": failed("audit", "LEADER_NOT_AVAILABLE")}, True,
                     ["audit", "orders", "payments"], {"audit": "LEADER_NOT_AVAILABLE"}, True,
                     id="other-broker-error-keeps-it-present"),
        pytest.param({"audit"}, {"audit": failed("audit", "TIMED_OUT")}, False,
                     ["audit", "orders", "payments"], {"audit": "TIMED_OUT"}, False,
                     id="client-timeout-keeps-it-present-and-incomplete"),
        pytest.param({"audit"}, {}, True, ["audit", "orders", "payments"], {"audit": "TIMED_OUT"},
                     False, id="no-answer-keeps-it-present-and-incomplete"),
        pytest.param({"audit"}, {"audit": seen("audit")}, True, ["audit", "orders", "payments"],
                     {}, True, id="found-by-name-is-present-with-attributes"),
        pytest.param({"a", "b", "c"}, {"a": failed("a", AUTH), "b": failed("b", GONE_ERROR),
                                       "c": seen("c")}, True,
                     ["a", "c", "orders", "payments"], {"a": AUTH}, True, id="mixed"),
    ],
)
def test_hidden_topic_decision(known_live, by_name, answered, names, errors, complete):
    """A topic the listing lacks is left out only on the broker's UNKNOWN_TOPIC_OR_PART; any
    other answer keeps it present (with its error), no answer makes the snapshot incomplete."""
    topics, is_complete = decide_topics(LISTED, known_live, by_name, answered=answered)
    assert [topic.name for topic in topics] == names
    assert {topic.name: topic.error for topic in topics if topic.error} == errors
    assert is_complete is complete
    if "c" in by_name:
        assert next(topic for topic in topics if topic.name == "c") == by_name["c"]


def test_listed_topics_are_never_overridden_and_incompleteness_is_kept():
    """A listed topic that vanished before its describe stays present (its error kept), and a
    capture whose listed describes were cut short stays incomplete whatever the by-name phase."""
    listed = {"orders": failed("orders", GONE_ERROR), "payments": seen("payments")}
    topics, complete = decide_topics(listed, {"orders", "payments"}, {}, answered=False)
    assert topics == (listed["orders"], listed["payments"]) and complete is False


# --- the fault points ---------------------------------------------------------------------------
def test_fault_names_are_parsed_per_action_and_stage(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "hide@list:a,b ; deny@describe:b;kill@publish")
    assert fault_names("hide", "list") == {"a", "b"}
    assert fault_names("deny", "describe") == {"b"}
    assert fault_names("hide", "describe") == frozenset()
    monkeypatch.delenv(FAULT_ENV)
    assert fault_names("hide", "list") == frozenset()


# --- what is held as live: the store and the published version ----------------------------------
def store_snapshot(hour: int, names, *, complete=True, cluster=CLUSTER, errors=()) -> None:
    topics = tuple(failed(n, AUTH) if n in errors else seen(n) for n in names)
    store.save(Snapshot(cluster, "prod", datetime(2026, 11, 1, hour, tzinfo=UTC), complete, topics),
               "live")


def test_held_as_live_is_the_newest_complete_snapshot_and_every_later_one(tl_home):
    store_snapshot(1, ["old-only", "orders"])
    store_snapshot(2, ["orders", "denied"], errors={"denied"})
    store_snapshot(3, ["partial-only"], complete=False)
    store_snapshot(4, ["other-cluster"], cluster="T3RoZXJDbHVzdGVySWRYWA")
    assert stored_live_names(CLUSTER) == {"orders", "denied", "partial-only"}
    assert stored_live_names("T3RoZXJDbHVzdGVySWRYWA") == {"other-cluster"}
    assert stored_live_names("Tm9uZVN0b3JlZEZvclRoaXM") == frozenset()
    store_snapshot(5, [], cluster="RW1wdHlDbHVzdGVySWRYWFg")  # stored as one marker row
    assert stored_live_names("RW1wdHlDbHVzdGVySWRYWFg") == frozenset()


def test_held_as_live_includes_the_published_current_rows_of_the_cluster(tl_home):
    """The published version can hold live a topic the store's newest complete snapshot lacks
    (e.g. a held snapshot): both are read; deleted rows and other clusters are not."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from published_tables import at, incarnation, publish

    store_snapshot(5, ["orders"])
    publish("v1", [
        *incarnation("k1", CLUSTER, [{"name": "held-live", "at": at(1), "topic_id": "A" * 21 + "Q"}]),
        *incarnation("k2", CLUSTER, [{"name": "deleted", "at": at(1)}], deleted_at=at(2)),
        *incarnation("k3", CLUSTER, [{"name": "old-name", "at": at(1)},
                                     {"name": "renamed", "at": at(2)}]),
        *incarnation("k4", "T3RoZXJDbHVzdGVySWRYWA", [{"name": "elsewhere", "at": at(1)}]),
    ])
    assert stored_live_names(CLUSTER) == {"orders", "held-live", "renamed"}


@pytest.mark.broker
def test_unreadable_store_makes_the_capture_incomplete_never_wrong(broker, tl_home):
    """When the topics held as live cannot be read, nothing can check what the listing hides:
    the snapshot is kept, but incomplete (it establishes no deletion)."""
    broker.create_topics(["orders"])
    store.save(capture_snapshot("prod", {"bootstrap.servers": broker.bootstrap_servers}), "live")
    [path] = store.snapshot_files()
    path.write_bytes(b"garbage")
    with pytest.raises(StoredLiveError, match=str(path)):
        stored_live_names(broker.cluster_id)
    snap = capture_snapshot("prod", {"bootstrap.servers": broker.bootstrap_servers})
    assert [topic.name for topic in snap.topics] == [OFFSETS_TOPIC, "orders"]
    assert snap.complete is False


# --- the real broker, through the command a user runs ---------------------------------------------
def snapshot_cli(home: Path, broker, fault: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home), FAULT_ENV: fault}
    return subprocess.run(
        [str(SCRIPT), "snapshot", "--cluster", "prod", "--bootstrap-servers",
         broker.bootstrap_servers, "--batch-size", "2"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.mark.broker
def test_cli_capture_keeps_topics_an_acl_hides_and_drops_deleted_ones(broker, tl_home):
    """First capture sees everything. Then the listing hides payments, audit and inventory;
    describing payments answers TOPIC_AUTHORIZATION_FAILED (a revoked ACL) and audit was really
    deleted; inventory is only hidden from the listing. The stored snapshot is complete with
    payments present (error), inventory present with its real ID, audit absent."""
    broker.create_topics([("orders", 3), ("payments", 2), ("audit", 1), ("inventory", 4)])
    assert snapshot_cli(tl_home, broker).returncode == 0
    first = store.read_snapshot(store.snapshot_files()[0])
    broker.delete_topics(["audit"])

    result = snapshot_cli(
        tl_home, broker, "hide@list:payments,audit,inventory;deny@describe:payments"
    )

    assert result.returncode == 0, result.stderr
    assert "3 topic(s) held as live were missing from the topic listing" in result.stderr
    assert "1 TOPIC_AUTHORIZATION_FAILED" in result.stderr and "1 confirmed gone" in result.stderr
    assert "4 topic(s), 1 with errors, complete;" in result.stdout  # + __consumer_offsets
    second = store.read_snapshot(store.snapshot_files()[1])
    assert second.complete
    by_name = {topic.name: topic for topic in second.topics}
    assert sorted(by_name) == [OFFSETS_TOPIC, "inventory", "orders", "payments"]
    assert by_name["payments"] == failed("payments", AUTH)
    assert by_name["inventory"].topic_id == first.topic_id("inventory")
    assert by_name["inventory"].partition_count == 4
    assert by_name["orders"].topic_id == first.topic_id("orders")

    # The next capture checks payments again (held live through the stored error), even though
    # nothing is published; once the ACL is fixed it is described normally.
    third = snapshot_cli(tl_home, broker, "hide@list:payments")
    assert third.returncode == 0, third.stderr
    assert "1 found" in third.stderr
    last = store.read_snapshot(store.snapshot_files()[2])
    assert last.topic_id("payments") == first.topic_id("payments")
    assert last.complete and last.error_topic_count == 0

    # A plain deletion is confirmed by the broker: recorded, without a warning.
    broker.delete_topics(["inventory"])
    fourth = snapshot_cli(tl_home, broker)
    assert fourth.returncode == 0 and fourth.stderr == ""
    assert "3 topic(s), 0 with errors, complete;" in fourth.stdout


@pytest.mark.broker
def test_by_name_describe_of_an_unknown_topic_is_the_brokers_unknown_topic(
    broker, tl_home, monkeypatch
):
    """What confluent-kafka reports from Kafka for a name that does not exist is the broker's
    UNKNOWN_TOPIC_OR_PART (the only answer that confirms a hidden topic gone)."""
    broker.create_topics(["orders"])
    snap = capture_snapshot(
        "prod", {"bootstrap.servers": broker.bootstrap_servers},
        known_live=lambda cluster_id: {"orders", "never-existed"},
    )
    assert [topic.name for topic in snap.topics] == [OFFSETS_TOPIC, "orders"] and snap.complete

    from topic_lineage import capture

    answers = {}

    def recording(listed, known_live, by_name, *, answered):
        answers.update({name: observation.error for name, observation in by_name.items()})
        return decide_topics(listed, known_live, by_name, answered=answered)

    monkeypatch.setattr(capture, "decide_topics", recording)
    capture_snapshot("prod", {"bootstrap.servers": broker.bootstrap_servers},
                     known_live=lambda cluster_id: {"never-existed"})
    assert answers == {"never-existed": GONE_ERROR}


# The Airflow snapshot task's capture of a topic an ACL hides and denies is tested with Kafka's
# own ACLs (a SASL_SSL connection, no fault point): tests/test_acl_capture.py.
