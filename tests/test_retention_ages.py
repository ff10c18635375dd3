"""Retention by age on an object-store home (topic_lineage.warehouse.retention), against the rule
as the docs state it:

    A version that is not the published one is removed only when it is beyond the newest
    ``keep`` and out of use long enough: a version published earlier once the reader grace has
    passed since the next publish after its own; a ``building`` one once its manifest has not
    changed for the stale-build period; any other once the grace has passed since its last
    status change. A time the manifests do not record keeps the version.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from topic_lineage.errors import WarehouseError
from topic_lineage.warehouse import retention

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
AGES = retention.Ages(grace=timedelta(hours=1), stale_build=timedelta(hours=24))


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def manifest(name: str, *steps: tuple[str, float]) -> dict:
    """A version's manifest whose history is ``(status, minutes after T0)`` steps."""
    return {"version": name, "created_at": at(steps[0][1]), "status": steps[-1][0],
            "history": [{"status": status, "at": at(minutes)} for status, minutes in steps]}


def removable(manifests, current, minutes, keep=1):
    return retention.removable(manifests, current, T0 + timedelta(minutes=minutes), keep, AGES)


# v1 published at 10, superseded by v2 published at 30
V1 = manifest("v1", ("building", 0), ("built", 5), ("validated", 8), ("published", 10))
V2 = manifest("v2", ("building", 20), ("built", 25), ("validated", 28), ("published", 30))


def test_a_superseded_version_stays_for_the_grace_after_the_next_publish_then_goes():
    assert removable([V1, V2], "v2", 30 + 59) == []
    assert removable([V1, V2], "v2", 30 + 60) == ["v1"]


def test_the_published_version_is_never_removed_however_old():
    assert removable([V1, V2], "v2", 10_000) == ["v1"]
    old = manifest("v0", ("building", 0), ("built", 1))
    assert removable([V2, old], "v2", 10_000, keep=1) == ["v0"]


def test_a_version_published_again_counts_from_the_later_publish():
    again = manifest("v1", ("building", 0), ("published", 10), ("published", 100))
    # v1 current again since 100: v2 is out of use since then, not since its own publish
    assert removable([again, V2], "v1", 100 + 59) == []
    assert removable([again, V2], "v1", 100 + 60) == ["v2"]


def test_a_superseded_version_without_a_later_publish_recorded_is_kept():
    alone = manifest("v0", ("building", 0), ("published", 10))
    newer = manifest("v9", ("building", 20), ("built", 25))
    assert removable([alone, newer], "v9", 100_000) == []


def test_a_building_version_goes_only_when_its_manifest_is_stale():
    killed = manifest("vk", ("building", 0))
    assert removable([killed, V2], "v2", 24 * 60 - 1) == []
    assert removable([killed, V2], "v2", 24 * 60) == ["vk"]


def test_built_validated_and_rejected_versions_go_a_grace_after_their_last_change():
    for status in ("built", "validated", "rejected", "failed"):
        other = manifest("vx", ("building", 0), (status, 40))
        assert removable([other, V2], "v2", 40 + 59) == [], status
        assert removable([other, V2], "v2", 40 + 60) == ["vx"], status


def test_only_versions_beyond_the_newest_keep_are_candidates():
    old = [manifest(f"v{i}", ("building", i), ("built", i + 1)) for i in range(5)]
    assert removable(old, None, 10_000, keep=3) == ["v0", "v1"]
    assert removable(old, None, 10_000, keep=5) == []
    assert removable(old, None, 10_000, keep=0) == ["v0", "v1", "v2", "v3"]  # at least one kept


def test_the_current_version_is_skipped_and_does_not_count_as_excess():
    old = [manifest(f"v{i}", ("building", i), ("built", i + 1)) for i in range(4)]
    # 4 versions, keep 2: two go, the current (oldest) is not one of them
    assert removable(old, "v0", 10_000, keep=2) == ["v1", "v2"]


def test_a_manifest_without_times_is_kept():
    bare = {"version": "vb", "status": "built"}
    assert removable([bare, V2], "v2", 100_000) == []


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("1h", 3600),
                                               ("2d", 172800), ("0.5h", 1800)])
def test_durations_from_the_environment(monkeypatch, text, seconds):
    monkeypatch.setenv(retention.GRACE_ENV, text)
    assert retention.Ages.from_env().grace == timedelta(seconds=seconds)


def test_a_duration_that_is_not_one_is_one_clear_error(monkeypatch):
    monkeypatch.setenv(retention.STALE_BUILD_ENV, "a day")
    with pytest.raises(WarehouseError, match=r"TOPIC_LINEAGE_STALE_BUILD='a day': give a duration"):
        retention.Ages.from_env()


def test_the_defaults_are_an_hour_and_a_day(monkeypatch):
    monkeypatch.delenv(retention.GRACE_ENV, raising=False)
    monkeypatch.delenv(retention.STALE_BUILD_ENV, raising=False)
    assert retention.Ages.from_env() == retention.Ages(timedelta(hours=1), timedelta(hours=24))


def test_retention_waits_no_period_on_a_local_disk_and_an_hour_and_a_day_on_object_storage(monkeypatch,
                                                                                        tmp_path):
    """One rule on every home, its periods the home's: a local disk's locks reach every reader
    and build, so nothing need wait there; the sweep waits its hour on both (a file younger
    than that may be a running step's). The environment sets both everywhere."""
    monkeypatch.delenv(retention.GRACE_ENV, raising=False)
    monkeypatch.delenv(retention.STALE_BUILD_ENV, raising=False)
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(tmp_path / "home"))
    assert retention.Ages.for_retention() == retention.Ages(timedelta(0), timedelta(0))
    assert retention.Ages.from_env() == retention.Ages(timedelta(hours=1), timedelta(hours=24))
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", "s3://bucket/home")
    monkeypatch.setenv("TOPIC_LINEAGE_WORK_DIR", str(tmp_path / "work"))
    assert retention.Ages.for_retention() == retention.Ages(timedelta(hours=1), timedelta(hours=24))
    monkeypatch.setenv(retention.GRACE_ENV, "90s")
    assert retention.Ages.for_retention().grace == timedelta(seconds=90)


def test_a_running_build_keeps_its_version_whatever_its_age():
    """The lock a running build holds on this machine keeps its ``building`` version, even with
    no stale-build period (a local disk's)."""
    zero = retention.Ages(timedelta(0), timedelta(0))
    building = {"version": "v1", "status": "building", "created_at": "2026-01-01T00:00:00Z",
                "history": [{"status": "building", "at": "2026-01-01T00:00:00Z"}]}
    current = {"version": "v2", "status": "published", "created_at": "2026-01-02T00:00:00Z",
               "history": [{"status": "published", "at": "2026-01-02T00:00:00Z"}]}
    now = datetime(2026, 1, 3, tzinfo=UTC)
    assert retention.removable([building, current], "v2", now, 1, zero, build_running=True) == []
    assert retention.removable([building, current], "v2", now, 1, zero, build_running=False) == ["v1"]


def test_a_bad_period_stops_a_publish_on_object_storage_before_anything_moves(monkeypatch, tmp_path):
    """Checked before the catalog or the store is asked: one line, nothing published."""
    from topic_lineage import warehouse as wh

    monkeypatch.setenv("TOPIC_LINEAGE_HOME", "s3://bucket/home")
    monkeypatch.setenv("TOPIC_LINEAGE_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv(retention.GRACE_ENV, "soon")
    with pytest.raises(WarehouseError, match=r"TOPIC_LINEAGE_READER_GRACE='soon': give a duration"):
        wh.publish("v1")
