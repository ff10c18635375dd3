"""The JSON Lines interchange format: strict validation whose errors name file, line and field."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topic_lineage import topic_id as tid
from topic_lineage.errors import TopicLineageError
from topic_lineage.snapshot import (
    GroupObservation,
    GroupOffset,
    Snapshot,
    SnapshotFormatError,
    TopicObservation,
    check_jsonl,
    parse_snapshot,
    read_jsonl,
    write_jsonl,
)

ORDERS_ID = "b8tRS7h4TJ2Vt43Dp85v2A"


def record(**overrides):
    """The contract's example record, with top-level fields replaced."""
    base = {
        "cluster_id": "MkU3OEVBNTcwNTJENDM2Qg",
        "cluster_alias": "prod-eu",
        "captured_at": "2026-11-01T00:00:00Z",
        "complete": True,
        "topics": [topic()],
    }
    base.update(overrides)
    return base


def topic(**overrides):
    base = {
        "name": "orders",
        "topic_id": ORDERS_ID,
        "partition_count": 3,
        "replication_factor": 3,
        "is_internal": False,
        "error": None,
    }
    base.update(overrides)
    return base


def group(**overrides):
    """The contract's consumer-group example, with fields replaced."""
    base = {"group_id": "billing", "state": "Stable", "error": None,
            "offsets": [offset()]}
    base.update(overrides)
    return base


def offset(**overrides):
    base = {"topic": "orders", "partition": 0, "committed_offset": 10, "log_end_offset": 12}
    base.update(overrides)
    return base


def write_lines(path, *records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_contract_example_parses():
    snap = parse_snapshot(record())
    assert snap.cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    assert snap.captured_at == datetime(2026, 11, 1, tzinfo=UTC)
    assert snap.complete is True
    assert snap.topics == (TopicObservation("orders", ORDERS_ID, 3, 3, False, None),)


@pytest.mark.parametrize(
    "given_id",
    [ORDERS_ID, "6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8", "6fcb514bb8784c9d95b78dc3a7ce6fd8",
     base64.b64encode(tid.to_bytes(ORDERS_ID)).decode()],
    ids=["canonical", "rfc4122", "rfc4122-no-dashes", "standard-base64"],
)
def test_topic_ids_are_normalised_to_canonical(given_id):
    assert parse_snapshot(record(topics=[topic(topic_id=given_id)])).topics[0].topic_id == ORDERS_ID


@pytest.mark.parametrize("no_id", [None, tid.ZERO_UUID])
def test_null_and_zero_uuid_mean_no_id(no_id):
    snap = parse_snapshot(record(topics=[topic(topic_id=no_id)]))
    assert snap.topics[0].topic_id is None
    assert snap.topic_id("orders") == tid.ZERO_UUID
    assert snap.topic_ids() == {}


def test_topic_id_lookup_mirrors_kafka_cluster():
    """topic_ids() is Cluster.topicIds(); topic_id(name) is Cluster.topicId(name)."""
    snap = parse_snapshot(record(topics=[
        topic(),
        topic(name="legacy", topic_id=None),
        topic(name="hidden", topic_id=None, partition_count=None, replication_factor=None,
              is_internal=None, error="TOPIC_AUTHORIZATION_FAILED"),
    ]))
    assert snap.topic_ids() == {"orders": ORDERS_ID}
    assert snap.topic_id("orders") == ORDERS_ID
    assert snap.topic_id("legacy") == tid.ZERO_UUID
    assert snap.topic_id("hidden") == tid.ZERO_UUID
    assert snap.topic_id("never-seen") == tid.ZERO_UUID


def test_timestamps_with_offsets_are_normalised_to_utc():
    snap = parse_snapshot(record(captured_at="2026-11-01T01:30:00.25+01:30"))
    assert snap.captured_at == datetime(2026, 11, 1, 0, 0, 0, 250000, tzinfo=UTC)


def test_failed_describe_may_leave_attributes_unknown():
    """A topic whose describe failed is present with null attributes."""
    bare = topic(topic_id=None, partition_count=None, replication_factor=None, is_internal=None,
                 error="TOPIC_AUTHORIZATION_FAILED")
    snap = parse_snapshot(record(topics=[bare]))
    assert snap.topics[0].error == "TOPIC_AUTHORIZATION_FAILED"
    assert snap.error_topic_count == 1


# Each case: a bad second line and the field the error must name.
BAD_LINES = [
    ("naive-timestamp", record(captured_at="2026-11-01T00:00:00"), "captured_at", "no time zone"),
    ("bad-timestamp", record(captured_at="yesterday"), "captured_at", "ISO 8601"),
    ("bad-id", record(topics=[topic(topic_id="not-an-id")]), "topics[0].topic_id", "not a topic ID"),
    ("duplicate-names", record(topics=[topic(), topic(topic_id=None)]), "topics[1].name", "twice"),
    ("unknown-field", record(owner="team-a"), "owner", "unknown field"),
    ("unknown-topic-field", record(topics=[topic(leader=1)]), "topics[0].leader", "unknown field"),
    ("missing-field", {k: v for k, v in record().items() if k != "complete"}, "complete", "missing"),
    ("missing-topic-field", record(topics=[{k: v for k, v in topic().items() if k != "name"}]),
     "topics[0].name", "missing"),
    ("string-count", record(topics=[topic(partition_count="3")]), "topics[0].partition_count",
     "expected int"),
    ("bool-count", record(topics=[topic(replication_factor=True)]),
     "topics[0].replication_factor", "expected an integer"),
    ("null-without-error", record(topics=[topic(partition_count=None)]),
     "topics[0].partition_count", "expected int"),
    ("negative-count", record(topics=[topic(partition_count=-1)]), "topics[0].partition_count",
     "out of range"),
    ("bad-error-name", record(topics=[topic(error="denied")]), "topics[0].error",
     "not a Kafka error name"),
    ("illegal-topic-name", record(topics=[topic(name="a/b")]), "topics[0].name",
     "not a legal Kafka topic name"),
    ("empty-cluster", record(cluster_id=" "), "cluster_id", "must not be empty"),
    ("complete-as-string", record(complete="true"), "complete", "expected bool"),
    ("topics-not-list", record(topics={}), "topics", "expected list"),
    # consumer lineage (R8-R10): the optional group fields are validated like the rest
    ("groups-without-complete", record(groups=[group()]), "groups_complete", "missing"),
    ("groups-complete-as-string", record(groups_complete="yes", groups=[]), "groups_complete",
     "expected bool"),
    ("groups-not-list", record(groups_complete=True, groups={}), "groups", "expected list"),
    ("negative-committed-offset", record(groups_complete=True, groups=[group(
        offsets=[offset(committed_offset=-1)])]), "groups[0].offsets[0].committed_offset",
     "out of range"),
    ("negative-log-end-offset", record(groups_complete=True, groups=[group(
        offsets=[offset(log_end_offset=-5)])]), "groups[0].offsets[0].log_end_offset",
     "out of range"),
    ("string-partition", record(groups_complete=True, groups=[group(
        offsets=[offset(partition="0")])]), "groups[0].offsets[0].partition", "expected int"),
    ("bool-offset", record(groups_complete=True, groups=[group(
        offsets=[offset(committed_offset=True)])]), "groups[0].offsets[0].committed_offset",
     "expected an integer"),
    ("offset-beyond-int64", record(groups_complete=True, groups=[group(
        offsets=[offset(committed_offset=2**63)])]), "groups[0].offsets[0].committed_offset",
     "out of range"),
    ("offset-illegal-topic", record(groups_complete=True, groups=[group(
        offsets=[offset(topic="a b")])]), "groups[0].offsets[0].topic",
     "not a legal Kafka topic name"),
    ("duplicate-partition", record(groups_complete=True, groups=[group(
        offsets=[offset(), offset(committed_offset=11)])]), "groups[0].offsets[1].partition",
     "twice"),
    ("duplicate-group", record(groups_complete=True, groups=[group(), group(offsets=[])]),
     "groups[1].group_id", "twice"),
    ("empty-group-id", record(groups_complete=True, groups=[group(group_id="")]),
     "groups[0].group_id", "must not be empty"),
    ("unknown-group-field", record(groups_complete=True, groups=[group(members=3)]),
     "groups[0].members", "unknown field"),
    ("unknown-offset-field", record(groups_complete=True, groups=[group(
        offsets=[offset(metadata="x")])]), "groups[0].offsets[0].metadata", "unknown field"),
    ("bad-group-error", record(groups_complete=True, groups=[group(error="denied")]),
     "groups[0].error", "not a Kafka error name"),
    ("offsets-missing", record(groups_complete=True, groups=[
        {k: v for k, v in group().items() if k != "offsets"}]), "groups[0].offsets", "missing"),
]


@pytest.mark.parametrize("bad, field, reason", [c[1:] for c in BAD_LINES], ids=[c[0] for c in BAD_LINES])
def test_every_error_names_file_line_and_field(tmp_path, bad, field, reason):
    path = write_lines(tmp_path / "snaps.jsonl", record(), bad)
    with pytest.raises(SnapshotFormatError) as excinfo:
        check_jsonl(path)
    error = excinfo.value
    assert error.location == f"{path}:2"
    assert error.field == field
    assert reason in str(error)
    assert str(error).startswith(f"{path}:2: field '{field}'")
    assert isinstance(error, TopicLineageError)


@pytest.mark.parametrize(
    "line, reason",
    [("{not json", "bad JSON"), ("[1, 2]", "must be a JSON object"), ('"text"', "JSON object")],
    ids=["bad-json", "array", "string"],
)
def test_undecodable_lines_name_file_and_line(tmp_path, line, reason):
    path = write_lines(tmp_path / "snaps.jsonl", record(), "", line)
    with pytest.raises(SnapshotFormatError) as excinfo:
        check_jsonl(path)
    assert excinfo.value.location == f"{path}:3"  # blank lines still count
    assert reason in str(excinfo.value)


def test_conflicting_lines_name_both(tmp_path):
    """Two different snapshots for one (cluster_id, captured_at) in one file is an error."""
    other = record(topics=[topic(partition_count=6)])
    path = write_lines(tmp_path / "snaps.jsonl", record(), record(captured_at="2026-11-02T00:00:00Z"),
                       other)
    with pytest.raises(SnapshotFormatError) as excinfo:
        check_jsonl(path)
    assert excinfo.value.location == f"{path}:3"
    assert f"{path}:1" in str(excinfo.value)


def test_identical_duplicate_lines_are_one_snapshot(tmp_path):
    """The same snapshot twice, even written with another ID form or offset, is not a conflict."""
    same = record(captured_at="2026-11-01T01:00:00+01:00",
                  topics=[topic(topic_id="6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8")])
    path = write_lines(tmp_path / "snaps.jsonl", record(), same)
    assert len(check_jsonl(path)) == 1
    assert len(read_jsonl(path)) == 1


def test_non_utf8_file_is_rejected(tmp_path):
    path = tmp_path / "snaps.jsonl"
    path.write_bytes(json.dumps(record()).encode() + b"\n\xff\xfe\n")
    with pytest.raises(SnapshotFormatError, match="not UTF-8"):
        check_jsonl(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(SnapshotFormatError, match="no such file"):
        check_jsonl(tmp_path / "absent.jsonl")


# --- round trips ---------------------------------------------------------------------------
names = st.from_regex(r"[a-zA-Z0-9._-]{1,30}", fullmatch=True).filter(lambda n: n not in (".", ".."))
observations = st.builds(
    TopicObservation,
    name=names,
    topic_id=st.one_of(st.none(), st.binary(min_size=16, max_size=16).map(tid.canonical_or_none)),
    partition_count=st.integers(1, 10_000),
    replication_factor=st.integers(1, 7),
    is_internal=st.booleans(),
    error=st.none(),
)
failed = st.builds(
    TopicObservation, name=names, topic_id=st.none(), partition_count=st.none(),
    replication_factor=st.none(), is_internal=st.none(),
    error=st.sampled_from(["TOPIC_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PART", "TIMED_OUT"]),
)
snapshots = st.builds(
    Snapshot,
    cluster_id=st.from_regex(r"[A-Za-z0-9_-]{1,22}", fullmatch=True),
    cluster_alias=st.sampled_from(["prod-eu", "dev", "demo"]),
    captured_at=st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
    ),
    complete=st.booleans(),
    topics=st.lists(st.one_of(observations, failed), max_size=8, unique_by=lambda t: t.name).map(tuple),
)


offsets_st = st.builds(
    GroupOffset, topic=names, partition=st.integers(0, 2**31 - 1),
    committed_offset=st.integers(0, 2**63 - 1),
    log_end_offset=st.one_of(st.none(), st.integers(0, 2**63 - 1)),
)
groups_st = st.builds(
    GroupObservation,
    group_id=st.text(min_size=1, max_size=20),
    state=st.one_of(st.none(), st.sampled_from(["Stable", "Empty", "Dead", "PreparingRebalance"])),
    error=st.one_of(st.none(), st.just("GROUP_AUTHORIZATION_FAILED")),
    offsets=st.lists(offsets_st, max_size=4, unique_by=lambda o: (o.topic, o.partition)).map(tuple),
)
snapshots_with_groups = st.builds(
    lambda snap, complete, groups: Snapshot(
        snap.cluster_id, snap.cluster_alias, snap.captured_at, snap.complete, snap.topics,
        groups_complete=complete, groups=groups),
    snapshots,
    st.booleans(),
    st.lists(groups_st, max_size=4, unique_by=lambda g: g.group_id).map(tuple),
)


@settings(max_examples=100, deadline=None)
@given(st.one_of(snapshots, snapshots_with_groups))
def test_json_line_round_trip(snap):
    again = parse_snapshot(json.loads(snap.to_json_line()))
    assert again.to_json() == snap.to_json()
    assert again.content_hash() == snap.content_hash()


def test_write_then_read_file(tmp_path):
    snaps = [parse_snapshot(record()),
             parse_snapshot(record(captured_at="2026-11-01T00:00:01Z", topics=[]))]
    write_jsonl(snaps, tmp_path / "out.jsonl")
    assert sorted(s.captured_at for s in read_jsonl(tmp_path / "out.jsonl")) == [
        snaps[0].captured_at, snaps[0].captured_at + timedelta(seconds=1)]


def test_contract_group_example_parses():
    snap = parse_snapshot(record(groups_complete=True, groups=[group()]))
    assert snap.groups_complete is True
    assert snap.groups == (GroupObservation("billing", "Stable", None, (GroupOffset("orders", 0, 10, 12),)),)


def test_a_snapshot_without_group_fields_says_nothing_about_groups():
    """Invariant: old snapshots stay valid, mean "no group information", and keep their
    content hash (so re-importing a pre-R8 file stays a no-op)."""
    old = parse_snapshot(record())
    assert old.groups_complete is None and old.groups == ()
    assert "groups" not in old.to_json() and "groups_complete" not in old.to_json()
    seen_none = parse_snapshot(record(groups_complete=True, groups=[]))
    assert seen_none.content_hash() != old.content_hash()  # "no groups" is information


def test_a_failed_group_listing_may_carry_no_groups():
    snap = parse_snapshot(record(groups_complete=False))
    assert snap.groups_complete is False and snap.groups == ()


def test_unreadable_log_end_offset_is_null_not_rejected():
    snap = parse_snapshot(record(groups_complete=True, groups=[group(
        error="GROUP_AUTHORIZATION_FAILED", state=None, offsets=[offset(log_end_offset=None)])]))
    assert snap.groups[0].offsets[0].log_end_offset is None
    assert snap.groups[0].error == "GROUP_AUTHORIZATION_FAILED"


def test_content_hash_ignores_group_and_offset_order():
    two = [group(offsets=[offset(partition=1), offset()]), group(group_id="audit", offsets=[])]
    a = parse_snapshot(record(groups_complete=True, groups=two))
    b = parse_snapshot(record(groups_complete=True, groups=[
        group(group_id="audit", offsets=[]), group(offsets=[offset(), offset(partition=1)])]))
    assert a.content_hash() == b.content_hash()


def test_content_hash_ignores_topic_order():
    a = parse_snapshot(record(topics=[topic(), topic(name="payments", topic_id=None)]))
    b = parse_snapshot(record(topics=[topic(name="payments", topic_id=None), topic()]))
    assert a.content_hash() == b.content_hash()
    c = parse_snapshot(record(topics=[topic(partition_count=4)]))
    assert c.content_hash() != parse_snapshot(record()).content_hash()
