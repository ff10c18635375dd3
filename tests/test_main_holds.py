"""Which version's rows ``main`` of a table holds, decided from the table's metadata alone
(topic_lineage.warehouse.iceberg.main_holds; issue #51 item 3). The whole path, with a real
catalog and another engine's maintenance, is tests/test_catalog_maintenance.py; here each rule
on small metadata, a passing and a failing case side by side."""

from __future__ import annotations

import json

import pytest

from topic_lineage.warehouse import iceberg

TABLE = "topic_incarnations"


def snap(sid: int, parent: int | None, operation: str, *, version: str | None = None,
         records: int = 3, **counts: int) -> dict:
    summary = {"operation": operation, "total-records": str(records), "total-data-files": "1",
               **{k.replace("_", "-"): str(v) for k, v in counts.items()}}
    if version:
        summary[iceberg.VERSION_PROPERTY] = version
    found = {"snapshot-id": sid, "summary": summary}
    if parent is not None:
        found["parent-snapshot-id"] = parent
    return found


def metadata(*snapshots: dict, main: int, published: dict | None = None, **branches: int) -> dict:
    refs = {"main": {"snapshot-id": main, "type": "branch"}}
    refs.update({name: {"snapshot-id": sid, "type": "branch"} for name, sid in branches.items()})
    properties = {iceberg.PUBLISHED_PROPERTY: json.dumps(published)} if published else {}
    return {"snapshots": list(snapshots), "refs": refs, "properties": properties}


EMPTY = {"snapshot-id": 1, "summary": {"operation": "append", "total-records": "0", "total-data-files": "0"}}
OURS = snap(10, None, "append", version="v1", records=3, added_data_files=1, added_records=3)
PUBLISHED = {"version": "v1", "snapshot-id": 10, "records": "3"}


def test_main_at_our_snapshot_holds_its_version():
    assert iceberg.main_holds(TABLE, metadata(EMPTY, OURS, main=10)).version == "v1"


def test_a_table_with_only_its_empty_start_holds_nothing():
    assert iceberg.main_holds(TABLE, metadata(EMPTY, main=1)).version is None


def test_compactions_on_top_of_ours_hold_its_rows():
    """Iceberg's ``replace``: files added and removed without changing table data."""
    first = snap(20, 10, "replace", added_data_files=1, deleted_data_files=2)
    second = snap(21, 20, "replace", added_data_files=1, deleted_data_files=1)
    held = iceberg.main_holds(TABLE, metadata(EMPTY, OURS, first, second, main=21))
    assert (held.version, held.snapshot_id, held.ours) == ("v1", 21, 10)


def test_a_commit_that_adds_no_file_changes_no_row():
    touch = snap(20, 10, "append")  # an empty append: no counts, totals carried over
    assert iceberg.main_holds(TABLE, metadata(OURS, touch, main=20)).version == "v1"


@pytest.mark.parametrize("operation, counts", [
    ("delete", {"deleted_data_files": 1, "deleted_records": 3}),
    ("overwrite", {"added_records": 2, "deleted_records": 3}),
    ("append", {"added_data_files": 1, "added_records": 1}),
])
def test_a_foreign_commit_that_changes_rows_is_named_even_under_a_compaction(operation, counts):
    theirs = snap(30, 10, operation, **counts)
    compacted = snap(31, 30, "replace", added_data_files=1, deleted_data_files=1)
    for head in (theirs, compacted):
        snapshots = [OURS, theirs] + ([compacted] if head is compacted else [])
        with pytest.raises(iceberg.ForeignCommitError) as caught:
            iceberg.main_holds(TABLE, metadata(*snapshots, main=head["snapshot-id"]))
        assert caught.value.snapshot_id == 30 and caught.value.version == "v1"
        assert "snapshot 30" in str(caught.value) and operation in str(caught.value)
        assert "\n" not in str(caught.value)


def test_expired_history_is_bridged_by_the_published_property_when_the_row_count_agrees():
    """Expiry left the compaction without its parent (pyiceberg drops the link; Java keeps an ID
    that is gone): the table property names the version."""
    for parent in (None, 20):
        compacted = snap(21, parent, "replace", records=3, added_data_files=1, deleted_data_files=1)
        held = iceberg.main_holds(TABLE, metadata(OURS, compacted, main=21, published=PUBLISHED))
        assert (held.version, held.ours) == ("v1", 10)


def test_expired_history_with_another_row_count_or_no_property_is_reported():
    fewer = snap(21, None, "replace", records=2, added_data_files=1, deleted_data_files=1)
    with pytest.raises(iceberg.ForeignCommitError, match="holding 2 rows where published version v1 holds 3"):
        iceberg.main_holds(TABLE, metadata(OURS, fewer, main=21, published=PUBLISHED))
    same = snap(21, None, "replace", records=3, added_data_files=1, deleted_data_files=1)
    with pytest.raises(iceberg.ForeignCommitError, match="no topic-lineage publish is recorded"):
        iceberg.main_holds(TABLE, metadata(OURS, same, main=21))


def test_a_summary_that_says_nothing_is_taken_to_change_rows():
    assert iceberg.changes_rows({"operation": "overwrite"})
    assert not iceberg.changes_rows({"operation": "replace"})
    assert not iceberg.changes_rows({"operation": "append", "total-records": "3"})
