"""The decisions the Airflow tasks make, tested without Airflow running.

* which clusters to snapshot (one documented Variable, strict parsing);
* whether a snapshot run may record *now*'s metadata for its interval (backfill / late runs
  must not), decided from the run type and the data interval, never the run_id;
* whether a validated version may replace the published one (never one built from fewer or the
  same snapshots), which keeps backfills order-independent (R5): topic_lineage.warehouse
  decides (tests/test_publish_path.py); the publish task only maps "kept" to a skip;
* the health task: fails when the gate warned, passes otherwise.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pytest

from topic_lineage import airflow as at

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
QUARTER = timedelta(minutes=15)


# --- clusters --------------------------------------------------------------------------------
def test_default_cluster_list_is_kafka_default():
    assert at.parse_clusters(None) == [at.ClusterSpec("default", "kafka_default")]
    assert at.parse_clusters("  ") == [at.ClusterSpec("default", "kafka_default")]


def test_cluster_list_from_json_text_and_list():
    raw = [{"alias": "prod-eu", "conn_id": "kafka_eu"}, {"alias": "prod-us", "conn_id": "kafka_us"}]
    expected = [at.ClusterSpec("prod-eu", "kafka_eu"), at.ClusterSpec("prod-us", "kafka_us")]
    assert at.parse_clusters(json.dumps(raw)) == expected
    assert at.parse_clusters(raw) == expected
    assert at.parse_clusters([{"alias": "x"}]) == [at.ClusterSpec("x", "kafka_default")]


@pytest.mark.parametrize(
    "raw, words",
    [
        ("{not json", "not JSON"),
        ("[]", "non-empty"),
        ('{"alias": "a"}', "non-empty JSON list"),
        ('[{"alias": "a", "conn": "x"}]', "keys alias and conn_id"),
        ('[{"conn_id": "x"}]', "no valid alias"),
        ('[{"alias": "a b", "conn_id": "x"}]', "no valid alias"),
        ('[{"alias": "a", "conn_id": ""}]', "empty conn_id"),
        ('[{"alias": "a", "conn_id": "x"}, {"alias": "a", "conn_id": "y"}]', "more than once"),
    ],
    ids=["bad-json", "empty", "object", "unknown-key", "no-alias", "bad-alias", "empty-conn",
         "duplicate"],
)
def test_bad_cluster_list_is_refused_naming_the_variable(raw, words):
    with pytest.raises(at.OrchestrationError) as info:
        at.parse_clusters(raw)
    assert at.CLUSTERS_VARIABLE in str(info.value)
    assert words in str(info.value)


def test_kafka_asset_uri_names_first_bootstrap_server_and_alias():
    uri = at.kafka_asset_uri({"bootstrap.servers": "SASL_SSL://b1:9093,b2:9093"}, "prod-eu")
    assert uri == "kafka://b1:9093/prod-eu"


# --- late / backfill -------------------------------------------------------------------------
def decide(run_type="scheduled", start=T0 - QUARTER, end=T0, now=T0 + timedelta(seconds=5),
           archive=False, run_after=None):
    return at.decide_capture(
        run_type=run_type, interval_start=start, interval_end=end, now=now,
        late_after=QUARTER, archive_configured=archive, run_after=run_after,
    )


def test_on_time_scheduled_run_captures():
    assert decide().action == "capture"
    assert decide(now=T0 + QUARTER).action == "capture"  # exactly at the bound is still on time


def test_backfill_run_never_captures_live_even_for_a_recent_interval():
    """Known from run_type, not the run_id: a backfill of the last interval is still a backfill."""
    decision = decide(run_type="backfill")
    assert decision.action == "skip"
    assert "backfill" in decision.reason and "2026-11-01T11:45:00Z" in decision.reason


def test_backfill_run_type_enum_value_is_recognised():
    from airflow.utils.types import DagRunType

    assert decide(run_type=DagRunType.BACKFILL_JOB).action == "skip"
    assert decide(run_type=DagRunType.SCHEDULED).action == "capture"


def test_late_run_of_an_old_interval_skips_with_the_reason():
    decision = decide(run_type="scheduled", now=T0 + timedelta(days=3))
    assert decision.action == "skip"
    assert "late run" in decision.reason and "72h00m00s" in decision.reason


def test_manual_run_of_an_old_logical_date_is_late():
    assert decide(run_type="manual", now=T0 + timedelta(hours=1)).action == "skip"


def test_manual_trigger_just_before_a_boundary_captures_after_it():
    """Seen in a test run: triggered at 18:29:44, so given [18:00, 18:15); its task started at
    18:30:09, 15m09s after the interval's end, but 25 s after the trigger: on time."""
    triggered = T0 + QUARTER - timedelta(seconds=16)
    started = T0 + QUARTER + timedelta(seconds=9)
    assert decide(run_type="manual", now=started).action == "skip"  # counted from the interval
    assert decide(run_type="manual", now=started, run_after=triggered).action == "capture"
    # still late when the task starts more than the bound after the trigger
    assert decide(run_type="manual", now=triggered + QUARTER + timedelta(seconds=1),
                  run_after=triggered).action == "skip"


def test_trigger_of_an_old_logical_date_or_a_cleared_run_stays_late():
    """run_after counts only when it is within the bound after the interval's end."""
    now = T0 + timedelta(days=3)
    assert decide(run_type="manual", now=now, run_after=now).action == "skip"  # old date, now
    assert decide(now=now, run_after=T0).action == "skip"  # scheduled, cleared 3 days later
    assert decide(run_type="manual", now=now, run_after=T0 + QUARTER).action == "skip"


def test_manual_run_without_interval_captures_now():
    assert decide(run_type="manual", start=None, end=None).action == "capture"


def test_interval_in_the_future_does_not_capture():
    assert decide(start=T0 + QUARTER, end=T0 + 2 * QUARTER).action == "skip"


def test_archive_replaces_skip_when_configured():
    assert decide(run_type="backfill", archive=True).action == "archive"
    assert decide(now=T0 + timedelta(days=1), archive=True).action == "archive"
    assert decide(archive=True).action == "capture"  # on time: the live capture is the truth


def test_late_after_defaults_to_one_interval_but_at_least_five_minutes():
    assert at.late_after(T0 - QUARTER, T0) == QUARTER
    assert at.late_after(T0 - timedelta(hours=1), T0) == timedelta(hours=1)
    assert at.late_after(T0 - timedelta(minutes=1), T0) == timedelta(minutes=5)


# --- publish ---------------------------------------------------------------------------------
A, B, C = "cluster=x/date=2026-11-01/a", "cluster=x/date=2026-11-01/b", "cluster=x/date=2026-11-01/c"


def test_plan_version_names_sort_by_time_and_say_the_run_type(tl_home):
    first = at.plan_version("manual__2026-11-01T00:00:00+00:00", "manual")
    second = at.plan_version("backfill__2026-11-01T00:00:00+00:00", "backfill")
    assert second > first
    assert first.endswith("-manual") and second.endswith("-backfill")


def test_retried_build_removes_only_an_unfinished_version(tl_home):
    """A killed attempt's directory is rebuilt; a finished version is never built twice."""
    from topic_lineage import warehouse as wh

    assert at.prepare_build("v1") is True  # nothing there yet
    wh.version_dir("v1").mkdir(parents=True)
    wh.write_manifest("v1", {"version": "v1", "status": wh.BUILDING})
    (wh.version_dir("v1") / "partial").write_text("x")
    assert at.prepare_build("v1") is True
    assert not wh.version_dir("v1").exists()

    wh.version_dir("v2").mkdir(parents=True)
    wh.write_manifest("v2", {"version": "v2", "status": wh.BUILT, "snapshot_files": {A: 1}})
    assert at.prepare_build("v2") is False
    assert wh.version_dir("v2").exists()
    assert wh.version_inputs("v2") == {(A, 1)}
    assert wh.version_inputs(None) is None and wh.version_inputs("missing") is None


@pytest.mark.s3
def test_a_retried_build_on_another_worker_asks_the_object_store(s3_bucket, iceberg_postgres,
                                                                tmp_path, monkeypatch):
    """With the home on S3 a retry runs in an empty working copy (another worker, or the task's
    own copy): a finished version there is still not built twice, and an unfinished one's
    objects are removed from the store. (Asked of the local directory, both looked unbuilt.)"""
    from topic_lineage import storage
    from topic_lineage import warehouse as wh

    for key, value in s3_bucket.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", s3_bucket.url("home"))
    monkeypatch.setenv("TOPIC_LINEAGE_ICEBERG_CATALOG", "shared")
    monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__URI", iceberg_postgres(tmp_path.name))

    def on_a_worker(name: str) -> None:
        monkeypatch.setenv("TOPIC_LINEAGE_WORK_DIR", str(tmp_path / name))

    on_a_worker("first-attempt")
    wh.version_dir("v1").mkdir(parents=True)
    wh.write_manifest("v1", {"version": "v1", "status": wh.BUILDING})
    (wh.version_dir("v1") / "partial").write_text("x")
    storage.home().push("warehouse/versions/v1/partial")
    wh.version_dir("v2").mkdir(parents=True)
    wh.write_manifest("v2", {"version": "v2", "status": wh.BUILT, "snapshot_files": {A: 1}})

    on_a_worker("retry")
    assert at.prepare_build("v0") is True  # nothing there yet
    assert at.prepare_build("v2") is False
    assert at.prepare_build("v1") is True
    def objects_under(prefix: str) -> list[str]:  # (SeaweedFS lists a folder's marker too)
        return [k for k in s3_bucket.keys(prefix) if not k.endswith("/")]

    assert objects_under("home/warehouse/versions/v1/") == []
    assert objects_under("home/warehouse/versions/v2/") == ["home/warehouse/versions/v2/manifest.json"]


# --- publish and health ----------------------------------------------------------------------
def _validated(version: str, files: dict, warnings: list[str] = ()) -> None:
    from gate_support import pass_gate, write_version
    from published_tables import at as day
    from published_tables import incarnation

    write_version(version, incarnation("k", "MkU3OEVBNTcwNTJENDM2Qg",
                                       [{"name": "orders", "at": day(1), "topic_id": "b8tRS7h4TJ2Vt43Dp85v2A"}]),
                  snapshot_files=files)
    pass_gate(version, warnings=list(warnings))


def test_publish_task_skips_when_a_newer_build_is_published(tl_home):
    from airflow.sdk.exceptions import AirflowSkipException

    from topic_lineage import warehouse as wh

    _validated("newer", {A: 1, B: 1})
    _validated("older", {A: 1})
    assert at.publish_version("newer") == {"version": "newer", "previous": None}
    with pytest.raises(AirflowSkipException, match="superset"):
        at.publish_version("older")
    assert wh.current_version() == "newer"


def test_publish_task_refuses_an_unvalidated_version(tl_home):
    from gate_support import write_version
    from published_tables import at as day
    from published_tables import incarnation

    from topic_lineage import warehouse as wh

    write_version("raw", incarnation("k", "c", [{"name": "o", "at": day(1), "topic_id": "b8tRS7h4TJ2Vt43Dp85v2A"}]))
    with pytest.raises(wh.PublishRefused, match="has not passed it"):
        at.publish_version("raw")
    assert wh.current_version() is None


def test_health_task_fails_on_warnings_only(tl_home):
    """The gate passed both versions; only the one with a warning makes the run unhealthy."""
    from airflow.sdk.exceptions import AirflowFailException

    _validated("healthy", {A: 1})
    _validated("stale", {A: 1, B: 1}, ["snapshot_runs: newest complete snapshot of each cluster is fresh"])
    assert at.check_health("healthy") == {"version": "healthy", "warnings": [], "findings": []}
    with pytest.raises(AirflowFailException, match="1 warning.*newest complete snapshot"):
        at.check_health("stale")


def test_health_task_reports_a_carried_position_without_failing(tl_home, caplog):
    """A carried consumer position (R9) is a finding about the history, true for good: the
    health task logs it but fails only on warnings about the captures."""
    from airflow.sdk.exceptions import AirflowFailException

    carried = "group_incarnations: no consumer group carried its position across a re-creation"
    stale = "snapshot_runs: newest complete snapshot of each cluster is fresh"
    _validated("carried", {A: 1}, [carried])
    _validated("carried-and-stale", {A: 1, B: 1}, [carried, stale])
    with caplog.at_level("WARNING", logger=at.log.name):
        assert at.check_health("carried") == {"version": "carried", "warnings": [],
                                              "findings": [carried]}
    assert "carried its position" in caplog.text
    with pytest.raises(AirflowFailException, match="1 warning.*about its captures.*fresh") as failed:
        at.check_health("carried-and-stale")
    assert "carried its position" not in str(failed.value)


def test_health_of_a_no_op_run_is_the_published_versions(tl_home):
    """A no-op run plans a version that is never written (topic_lineage/noop.py): health then
    judges the published version, instead of failing on a version that does not exist."""
    from airflow.sdk.exceptions import AirflowFailException

    from topic_lineage import warehouse as wh

    assert at.check_health("v-never-built") == {"version": "v-never-built", "warnings": []}
    _validated("stale", {A: 1}, ["snapshot_runs: newest complete snapshot of each cluster is fresh"])
    wh.publish("stale")
    with pytest.raises(AirflowFailException, match="version stale passed .* 1 warning"):
        at.check_health("v-never-built")


def _published_with_fingerprint(version: str, files: dict, warnings: list[str] = ()) -> None:
    """Publish ``version`` as built from the store as it is now (its manifest's fingerprint)."""
    from topic_lineage import noop, store
    from topic_lineage import warehouse as wh

    _validated(version, files, warnings)
    assert wh.publish(version).published
    manifest = wh.read_manifest(version)
    manifest[noop.FINGERPRINT_KEY] = noop.fingerprint(store.snapshot_listing(), 0.5, 5)
    wh.write_manifest(version, manifest)


def test_plan_decides_the_no_op_and_what_a_no_op_run_still_runs(tl_home, monkeypatch):
    """plan's decision (noop_run): build when anything differs from the published version;
    otherwise skip build, validate and publish, and health unless the published gate warned."""
    from scd_support import snap, tid, topic

    from topic_lineage import store

    monkeypatch.delenv("TOPIC_LINEAGE_HOLD_RATIO", raising=False)
    monkeypatch.delenv("TOPIC_LINEAGE_HOLD_MIN", raising=False)
    assert at.noop_run("v-new") is None  # nothing published: build
    store.save(snap(0, topic("orders", tid(1))), "live")
    _published_with_fingerprint("healthy", {A: 1})
    assert at.noop_run("v-new") == []  # nothing new, healthy: plan is the run's only task
    monkeypatch.setenv("TOPIC_LINEAGE_HOLD_MIN", "6")
    assert at.noop_run("v-new") is None  # other hold thresholds: other tables
    monkeypatch.delenv("TOPIC_LINEAGE_HOLD_MIN")
    store.save(snap(1, topic("orders", tid(1)), topic("payments", tid(2))), "live")
    assert at.noop_run("v-new") is None  # a new snapshot: build

    _published_with_fingerprint("stale", {A: 1, B: 1}, ["snapshot_runs: newest complete snapshot is fresh"])
    assert at.noop_run("v-new") == ["health"]  # health runs, and fails as over that version

    # OpenLineage configured and the published version's emission not completed (a receiver
    # failed): lineage runs in a no-op run too, and sends what is missing
    from topic_lineage.lineage import ledger

    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:1")
    assert at.noop_run("v-new") == ["health", "lineage"]
    ledger.complete("stale")
    assert at.noop_run("v-new") == ["health"]


def test_plan_skips_lineage_in_a_building_run_unless_openlineage_is_configured(tl_home, monkeypatch):
    """A run that builds runs lineage only when a transport is configured: otherwise plan skips
    it with the no-op tasks' mechanism, and no task process starts only to skip itself."""
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        monkeypatch.delenv(key)
    assert at.noop_run("v-new") is None  # nothing published: a building run
    assert at.plan_follow("v-new") == ["build", "validate", "publish", "health"]
    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:1")
    assert at.plan_follow("v-new") is None  # everything, lineage too


def test_lineage_task_follows_publish_even_a_skipped_one():
    """DAG shape: lineage follows publish (trigger rule none_failed), with retries: a receiver
    that fails is tried again, and the tables stay published."""
    from pathlib import Path

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parent.parent / "dags"))
    lineage = bag.dags["topic_incarnations"].get_task("lineage")
    assert lineage.upstream_task_ids == {"publish", "plan"}
    assert lineage.trigger_rule == "none_failed" and lineage.retries == 3


def test_health_task_runs_after_publish_even_a_skipped_one():
    """DAG shape: health follows publish with trigger rule none_failed and no retries."""
    from pathlib import Path

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parent.parent / "dags"))
    dag = bag.dags["topic_incarnations"]
    health = dag.get_task("health")
    assert health.upstream_task_ids == {"publish", "plan"}
    assert health.trigger_rule == "none_failed" and health.retries == 0
    assert dag.get_task("validate").downstream_task_ids == {"publish"}
    # plan is directly upstream of every other task, so its no-op skip reaches them all
    assert dag.get_task("plan").downstream_task_ids == {"build", "validate", "publish", "health",
                                                         "lineage"}

