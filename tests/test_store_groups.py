"""Consumer-group observations (contract R8-R10) survive the store: an import or a live save of a
snapshot carrying groups keeps them, byte for byte as the interchange said; a snapshot without
group fields still means "no group information"; and the store's no-op and conflict rules cover
the groups like every other field."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from topic_lineage import store
from topic_lineage import tables as t
from topic_lineage.snapshot import GroupObservation, GroupOffset, Snapshot, TopicObservation

T0 = datetime(2026, 11, 1, tzinfo=UTC)
ORDERS = TopicObservation("orders", "b8tRS7h4TJ2Vt43Dp85v2A", 3, 3, False)
BILLING = GroupObservation("billing", "Stable", None, (
    GroupOffset("orders", 0, 10, 12), GroupOffset("orders", 1, 1_000_000, 3)))
DENIED = GroupObservation("audit", None, "GROUP_AUTHORIZATION_FAILED", ())


def snap(groups_complete=True, groups=(BILLING, DENIED), captured_at=T0) -> Snapshot:
    return Snapshot("c1", "prod", captured_at, True, (ORDERS,),
                    groups_complete=groups_complete, groups=groups)


def test_groups_round_trip_through_a_live_save(tl_home):
    original = snap()
    store.save(original)
    back = store.read_snapshot(store.snapshot_path("c1", T0))
    assert back.groups_complete is True
    assert sorted(back.groups, key=lambda g: g.group_id) == [DENIED, BILLING]
    assert back.content_hash() == original.content_hash()
    assert store.group_path("c1", T0).is_file()


@pytest.mark.parametrize("groups_complete, groups", [(False, ()), (True, ())],
                         ids=["listing-failed", "no-groups-seen"])
def test_a_snapshot_that_saw_no_group_still_records_its_group_completeness(
        tl_home, groups_complete, groups):
    store.save(snap(groups_complete, groups))
    back = store.read_snapshot(store.snapshot_path("c1", T0))
    assert (back.groups_complete, back.groups) == (groups_complete, ())


def test_a_snapshot_without_group_fields_stores_no_group_file(tl_home):
    store.save(snap(None, ()))
    assert not store.group_path("c1", T0).exists()
    assert store.read_snapshot(store.snapshot_path("c1", T0)).groups_complete is None


def test_debris_of_a_crashed_store_is_never_read_as_a_later_snapshots_groups(tl_home):
    """A group file written before a crash (its topic file never landed) must not attach to a
    snapshot stored later at the same key without group information."""
    store._write_groups(snap())  # the first half of a store that then died
    assert store.group_path("c1", T0).exists()
    store.save(snap(None, ()))
    assert store.read_snapshot(store.snapshot_path("c1", T0)).groups_complete is None


def test_importing_a_file_with_groups_twice_is_a_no_op_and_a_changed_offset_conflicts(
        tl_home, tmp_path):
    path = tmp_path / "snaps.jsonl"
    path.write_text(snap().to_json_line() + "\n")
    assert store.import_jsonl(path).stored == 1
    assert store.import_jsonl(path).unchanged == 1
    moved = GroupObservation("billing", "Stable", None, (GroupOffset("orders", 0, 11, 12),))
    other = tmp_path / "other.jsonl"
    other.write_text(snap(groups=(moved,)).to_json_line() + "\n")
    with pytest.raises(store.SnapshotConflictError, match="different snapshot"):
        store.import_jsonl(other)
    assert set(store.read_snapshot(store.snapshot_path("c1", T0)).groups) == set(snap().groups)


def test_a_bad_group_line_rejects_the_file_whole_and_stores_nothing(tl_home, tmp_path):
    good = snap(captured_at=T0).to_json()
    bad = snap(captured_at=datetime(2026, 11, 2, tzinfo=UTC)).to_json()
    billing = next(g for g in bad["groups"] if g["group_id"] == "billing")
    billing["offsets"][0]["committed_offset"] = -1
    path = tmp_path / "snaps.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(store.SnapshotFormatError) as excinfo:
        store.import_jsonl(path)
    assert excinfo.value.location == f"{path}:2"
    assert excinfo.value.field.endswith("committed_offset")
    assert store.snapshot_files() == []
    assert not t.group_snapshots_dir().exists() or not any(t.group_snapshots_dir().rglob("*.parquet"))


def test_quarantine_takes_the_groups_with_the_snapshot(tl_home):
    store.save(snap())
    store.quarantine(store.snapshot_path("c1", T0))
    assert not store.group_path("c1", T0).exists()
    assert list((t.quarantine_dir() / "group_snapshots").rglob("*.parquet"))
