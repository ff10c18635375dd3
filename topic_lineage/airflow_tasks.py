"""What the Airflow DAGs do, kept out of the DAG files so it can be imported and unit-tested.

The DAG files in ``dags/`` are thin: they declare schedules, tasks and assets and call the
functions here. Nothing in this module imports Spark, Great Expectations or confluent-kafka at
import time (DAG files import it while being parsed); Airflow itself is imported only inside the
functions that need a running task.

Configuration, in one place each:

* the clusters to snapshot: the Airflow Variable ``topic_lineage_clusters``, a JSON list of
  ``{"alias": ..., "conn_id": ...}``; default ``[{"alias": "default", "conn_id": "kafka_default"}]``.
  Each ``conn_id`` is an Airflow connection of type ``kafka`` whose extra is the librdkafka config.
* an archive of old snapshots for backfills: the Airflow Variable ``topic_lineage_archive_dir``.
* schedules and timeouts: the ``[topic_lineage]`` section of the Airflow config (or the
  ``AIRFLOW__TOPIC_LINEAGE__<OPTION>`` environment variables), see :data:`CONFIG_DEFAULTS`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError

log = logging.getLogger(__name__)

CLUSTERS_VARIABLE = "topic_lineage_clusters"
ARCHIVE_VARIABLE = "topic_lineage_archive_dir"
DEFAULT_KAFKA_CONN_ID = "kafka_default"
DEFAULT_CLUSTERS = ({"alias": "default", "conn_id": DEFAULT_KAFKA_CONN_ID},)
SPARK_CONN_ID = "spark_default"
PUBLISH_POOL = "topic_lineage_publish"
"""A pool with one slot: scheduled, manual and backfill runs never publish at the same time."""
BUILD_POOL = "topic_lineage_build"
"""A pool with one slot for the Spark build (the build holds an exclusive lock anyway)."""

SNAPSHOT_DAG_ID = "kafka_topic_snapshot"
INCARNATIONS_DAG_ID = "topic_incarnations"
OWNER = "topic-lineage"
TAGS = ["topic-lineage", "kafka"]

CONFIG_SECTION = "topic_lineage"
CONFIG_DEFAULTS = {
    # cron of the kafka_topic_snapshot DAG (its data interval is the capture window)
    "snapshot_schedule": "*/15 * * * *",
    # cron of the time-based runs of topic_incarnations (it also runs on every snapshot event)
    "build_schedule": "@daily",
    # a snapshot run whose interval ended longer ago than this is "late" and does not capture;
    # empty = one snapshot interval, at least 5 minutes
    "late_after_seconds": "",
    # bound on one capture of one cluster (passed to capture_snapshot)
    "capture_timeout_seconds": "120",
    # also record consumer groups' committed offsets (contract R8-R10); "false" = topics only
    "capture_groups": "true",
}

# Backfilled runs: Airflow 3 marks them with run_type "backfill" (their run_id may still read
# "scheduled__..."), so the run type is the only reliable sign.
BACKFILL_RUN_TYPE = "backfill"


class OrchestrationError(TopicLineageError):
    """The Airflow configuration of topic-lineage is wrong; the message says how to fix it."""


# --- configuration -----------------------------------------------------------------------------
def config_value(option: str) -> str:
    """``[topic_lineage] <option>`` from the Airflow config, or its documented default."""
    from airflow.sdk import conf

    return conf.get(CONFIG_SECTION, option, fallback=CONFIG_DEFAULTS[option])


def capture_groups_enabled() -> bool:
    """``[topic_lineage] capture_groups``: whether live captures record consumer groups."""
    value = config_value("capture_groups").strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise OrchestrationError(
            f"[{CONFIG_SECTION}] capture_groups is {value!r}; use true or false"
        )
    return value in ("true", "1", "yes", "on")


def snapshot_cron() -> str:
    return config_value("snapshot_schedule")


def build_cron() -> str:
    return config_value("build_schedule")


@dataclass(frozen=True)
class ClusterSpec:
    """One configured cluster: the alias recorded with its snapshots, and its Kafka connection."""

    alias: str
    conn_id: str

    def to_dict(self) -> dict[str, str]:
        return {"alias": self.alias, "conn_id": self.conn_id}


_ALIAS_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def parse_clusters(raw: Any) -> list[ClusterSpec]:
    """The cluster list from the Variable's value (JSON text or a decoded list); ``None`` = default.

    Refuses anything ambiguous (duplicate aliases, missing fields) with a message that names the
    Variable, because a silently dropped cluster would look like a cluster with no topics.
    """
    where = f"Airflow Variable {CLUSTERS_VARIABLE!r}"
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return [ClusterSpec(**c) for c in DEFAULT_CLUSTERS]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise OrchestrationError(
                f"{where} is not JSON ({exc.msg} at column {exc.colno}); expected e.g. "
                '[{"alias": "prod-eu", "conn_id": "kafka_prod_eu"}]'
            ) from None
    if not isinstance(raw, list) or not raw:
        raise OrchestrationError(f"{where} must be a non-empty JSON list of {{alias, conn_id}}")
    clusters: list[ClusterSpec] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) - {"alias", "conn_id"}:
            raise OrchestrationError(
                f"{where}: item {index} must be an object with keys alias and conn_id, got "
                f"{json.dumps(item)}"
            )
        alias = item.get("alias")
        if not isinstance(alias, str) or not _ALIAS_RE.match(alias):
            raise OrchestrationError(
                f"{where}: item {index} has no valid alias (1-100 characters of A-Z a-z 0-9 . _ -)"
            )
        conn_id = item.get("conn_id", DEFAULT_KAFKA_CONN_ID)
        if not isinstance(conn_id, str) or not conn_id.strip():
            raise OrchestrationError(f"{where}: item {index} ({alias}) has an empty conn_id")
        clusters.append(ClusterSpec(alias, conn_id))
    aliases = [c.alias for c in clusters]
    duplicates = sorted({a for a in aliases if aliases.count(a) > 1})
    if duplicates:
        raise OrchestrationError(f"{where}: alias(es) {', '.join(duplicates)} appear more than once")
    return clusters


def resolve_clusters() -> list[dict[str, str]]:
    """The configured clusters as plain dicts (the values the capture task is mapped over)."""
    from airflow.sdk import Variable

    raw = Variable.get(CLUSTERS_VARIABLE, default=None)
    clusters = parse_clusters(raw)
    log.info("snapshotting %d cluster(s): %s", len(clusters), ", ".join(c.alias for c in clusters))
    return [c.to_dict() for c in clusters]


def kafka_config(conn_id: str) -> dict[str, Any]:
    """The librdkafka config of a Kafka connection, built exactly as the Kafka provider builds it
    (its extra, plus allow-listed callbacks and managed-cloud authentication)."""
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

    try:
        return KafkaBaseHook(kafka_config_id=conn_id)._build_config()
    except ValueError as exc:
        raise OrchestrationError(
            f"Airflow connection {conn_id!r}: {exc}; set its extra to the librdkafka config, e.g. "
            '{"bootstrap.servers": "broker:9092"}'
        ) from None


# --- assets (named by URI, so the OpenLineage provider maps them without extra work) -----------
def snapshots_asset_uri() -> str:
    """The snapshot store, as a file URI (OpenLineage namespace ``file``)."""
    return t.snapshots_dir().as_uri()


def table_asset_uri(table: str) -> str:
    """A published table, as a file URI under the warehouse (its readers follow ``CURRENT``)."""
    return (t.warehouse_dir() / table).as_uri()


def kafka_asset_uri(config: Mapping[str, Any], alias: str) -> str:
    """``kafka://<first bootstrap server>/<alias>``: the cluster a snapshot was read from."""
    first = str(config.get("bootstrap.servers", "unknown")).split(",")[0].strip()
    first = re.sub(r"^[A-Za-z_]+://", "", first) or "unknown"
    return f"kafka://{first}/{alias}"


# --- the late / backfill decision ------------------------------------------------------------
@dataclass(frozen=True)
class CaptureDecision:
    """What one snapshot task does: ``capture`` live, ingest from the ``archive``, or ``skip``."""

    action: str
    reason: str


def decide_capture(
    *,
    run_type: str,
    interval_start: datetime | None,
    interval_end: datetime | None,
    now: datetime,
    late_after: timedelta,
    archive_configured: bool,
    run_after: datetime | None = None,
) -> CaptureDecision:
    """Whether a run may record *now*'s metadata for its data interval.

    A live capture reads the cluster as it is now; recording it for an interval that ended long
    ago (a backfill, a run cleared days later, a late catch-up) would claim the past looked like
    the present. Such runs ingest archived snapshots of their interval when an archive is
    configured, and otherwise skip. A run is a backfill by its run type, never by its run_id.

    Lateness counts from when the run became due (``run_after``) when that is within
    ``late_after`` of the interval's end: a run triggered by hand gets the last complete interval,
    which may have ended up to one interval earlier, and must not turn late because its task
    started a few seconds after the next boundary. A trigger for an old logical date, or a run
    cleared long after it was due, is still late.
    """
    run_type = str(getattr(run_type, "value", run_type))
    window = (
        f"[{_iso(interval_start)}, {_iso(interval_end)})" if interval_end is not None else "(none)"
    )
    fallback = "archive" if archive_configured else "skip"
    if run_type == BACKFILL_RUN_TYPE:
        return CaptureDecision(
            fallback,
            f"backfill run for interval {window}: a live capture now would record today's "
            "metadata as if it had been seen then",
        )
    if interval_end is None:  # a manual run without a logical date: "now" is its interval
        return CaptureDecision("capture", "run without a data interval: capturing now")
    if interval_start is not None and now < interval_start:
        return CaptureDecision(fallback, f"interval {window} has not started yet (now {_iso(now)})")
    due = interval_end
    if run_after is not None and interval_end <= run_after <= interval_end + late_after:
        due = run_after
    if now - due > late_after:  # then the interval ended at least that long ago too
        return CaptureDecision(
            fallback,
            f"late run for interval {window}: it ended {_duration(now - interval_end)} ago, "
            f"more than the allowed {_duration(late_after)}; a live capture now would not show "
            "that interval",
        )
    return CaptureDecision("capture", f"on-time run for interval {window}")


MIN_LATE_AFTER = timedelta(minutes=5)
"""Even with a short schedule, a run that waited a few minutes for a worker is not late."""


def late_after(interval_start: datetime | None, interval_end: datetime | None) -> timedelta:
    """The configured lateness bound, or one data interval (at least :data:`MIN_LATE_AFTER`)."""
    configured = config_value("late_after_seconds").strip()
    if configured:
        return timedelta(seconds=float(configured))
    if interval_start is not None and interval_end is not None:
        return max(interval_end - interval_start, MIN_LATE_AFTER)
    return max(timedelta(minutes=15), MIN_LATE_AFTER)


def _iso(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


# --- the snapshot task -----------------------------------------------------------------------
def snapshot_event_extra(snapshot, stored: bool, source: str) -> dict[str, Any]:
    """The metadata attached to the snapshot asset event of one capture or archive ingest."""
    from topic_lineage.snapshot import format_timestamp

    return {
        "cluster": snapshot.cluster_alias,
        "cluster_id": snapshot.cluster_id,
        "captured_at": format_timestamp(snapshot.captured_at),
        "topic_count": len(snapshot.topics),
        "error_topic_count": snapshot.error_topic_count,
        "complete": snapshot.complete,
        "groups_complete": snapshot.groups_complete,
        "group_count": len(snapshot.groups),
        "source": source,
        "stored": stored,
    }


def run_snapshot_task(cluster: Mapping[str, str], context: Mapping[str, Any]) -> dict[str, Any]:
    """Body of one mapped ``capture`` task: decide, then capture + store (or ingest, or skip).

    Returns the asset-event metadata (also set on the task's outlet event). Raises
    ``AirflowSkipException`` for a run that must not capture, and lets
    ``ClusterUnavailableError`` fail the task (Airflow retries it with backoff).
    """
    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowSkipException

    spec = ClusterSpec(cluster["alias"], cluster["conn_id"])
    dag_run = context["dag_run"]
    start = context.get("data_interval_start")
    end = context.get("data_interval_end")
    archive_dir = (Variable.get(ARCHIVE_VARIABLE, default=None) or "").strip() or None
    decision = decide_capture(
        run_type=dag_run.run_type,
        interval_start=start,
        interval_end=end,
        now=datetime.now(UTC),
        late_after=late_after(start, end),
        archive_configured=archive_dir is not None,
        run_after=getattr(dag_run, "run_after", None),
    )
    log.info("cluster %s: %s (%s)", spec.alias, decision.action, decision.reason)
    if decision.action == "skip":
        raise AirflowSkipException(
            f"cluster {spec.alias}: not capturing: {decision.reason}. Configure the Variable "
            f"{ARCHIVE_VARIABLE!r} to ingest archived snapshots for such runs."
        )
    if decision.action == "archive":
        extras = ingest_archive(spec, Path(archive_dir), start, end)
        if not extras:
            raise AirflowSkipException(
                f"cluster {spec.alias}: {decision.reason}; the archive {archive_dir} has no "
                f"snapshot of this cluster in [{_iso(start)}, {_iso(end)})"
            )
        _emit(context, extras[-1] | {"archived_snapshots": len(extras)})
        return extras[-1] | {"archived_snapshots": len(extras)}
    return capture_and_store(spec, context)


def capture_and_store(spec: ClusterSpec, context: Mapping[str, Any]) -> dict[str, Any]:
    from topic_lineage import store
    from topic_lineage.capture import capture_snapshot
    from topic_lineage.kafka_config import redact

    config = kafka_config(spec.conn_id)
    _record_kafka_inlet(context, config, spec.alias)
    log.info("capturing cluster %s with %s", spec.alias, redact(config))
    snapshot = capture_snapshot(
        spec.alias, config, timeout_s=float(config_value("capture_timeout_seconds")),
        groups=capture_groups_enabled(),
    )
    result = store.save(snapshot, "live")
    extra = snapshot_event_extra(snapshot, stored=result.stored == 1, source="live")
    log.info(
        "cluster %s (%s): %d topic(s), complete=%s, stored at %s",
        spec.alias, snapshot.cluster_id, extra["topic_count"], snapshot.complete,
        extra["captured_at"],
    )
    if not snapshot.complete:
        log.warning(
            "cluster %s: the snapshot is INCOMPLETE (the cluster could not be read whole); it "
            "establishes no deletion", spec.alias,
        )
    if snapshot.groups_complete is False:
        log.warning(
            "cluster %s: the consumer group listing was INCOMPLETE; nothing is concluded about "
            "groups it did not show", spec.alias,
        )
    _emit(context, extra)
    return extra


def ingest_archive(
    spec: ClusterSpec, archive_dir: Path, start: datetime | None, end: datetime | None
) -> list[dict[str, Any]]:
    """Store the archived snapshots of one cluster captured in ``[start, end)``."""
    from topic_lineage import store
    from topic_lineage.importers.archive import snapshots_between

    if start is None or end is None:
        return []
    found = [
        s for s in snapshots_between(archive_dir, start, end, cluster_alias=spec.alias)
        if s.cluster_alias == spec.alias
    ]
    found.sort(key=lambda s: s.captured_at)
    if not found:
        return []
    result = store.save_all(found, "import:archive")
    log.info("cluster %s: archive %s: %s", spec.alias, archive_dir, result)
    return [snapshot_event_extra(s, stored=True, source="import:archive") for s in found]


def _emit(context: Mapping[str, Any], extra: dict[str, Any]) -> None:
    """Attach the metadata to this task's snapshot asset event."""
    events = context.get("outlet_events")
    task = context.get("task")
    if events is None or task is None:
        return
    for outlet in task.outlets:
        events[outlet].extra = dict(extra)


def _record_kafka_inlet(context: Mapping[str, Any], config: Mapping[str, Any], alias: str) -> None:
    """Report the cluster read as an input to hook-level lineage (OpenLineage, when installed)."""
    try:
        from airflow.sdk.lineage import get_hook_lineage_collector

        get_hook_lineage_collector().add_input_asset(
            context=context.get("task"), uri=kafka_asset_uri(config, alias)
        )
    except Exception:  # lineage is best effort, never a reason to fail a capture
        log.debug("could not record hook lineage", exc_info=True)


# --- the build -> validate -> publish tasks ---------------------------------------------------
def build_application() -> str:
    """Absolute path of the PySpark build job submitted by the ``build`` task."""
    import importlib.util

    spec = importlib.util.find_spec("spark_jobs")
    if spec is None or not spec.submodule_search_locations:
        raise OrchestrationError("the spark_jobs package is not installed next to topic_lineage")
    return str(Path(next(iter(spec.submodule_search_locations))) / "build.py")


def plan_version(run_id: str, run_type: str) -> str:
    """The version name of this run's build: sorts by planning time, says what kind of run."""
    from topic_lineage import warehouse

    kind = re.sub(r"[^a-z]+", "-", str(getattr(run_type, "value", run_type)).lower()).strip("-")
    version = f"{warehouse.new_version_id()}-{kind or 'run'}"
    log.info("run %s builds version %s", run_id, version)
    return version


NOOP_FOLLOW_ON_WARNINGS = ["health"]


def noop_run(version: str) -> list[str] | None:
    """The ``plan`` task's decision: ``None`` when this run must build ``version``; for a no-op
    run (nothing new since the published version: :mod:`topic_lineage.noop`, no Spark), the
    tasks it still runs.

    A no-op run skips ``build``, ``validate`` and ``publish`` from ``plan``, so no task process
    is started for them. ``health`` runs only when the published version's gate warned about its
    captures (it then fails, as in every run over that version); otherwise it is skipped too and
    ``plan`` is the run's only task process.
    """
    from topic_lineage import noop

    decision = noop.decide(*noop.hold_thresholds())
    if not decision.noop:
        log.info("version %s will be built: %s", version, decision)
        return None
    log.info("no-op run, %s: build, validate and publish are skipped (no Spark)", decision)
    if capture_warnings(decision.version)[0]:
        log.warning("the published version %s passed its gate with warnings; health reports them",
                    decision.version)
        return list(NOOP_FOLLOW_ON_WARNINGS)
    return []


def capture_warnings(version: str) -> tuple[list[str], list[str]]:
    """The gate's warnings on ``version`` about its captures (what makes ``health`` fail), and
    its findings about the history (a carried consumer position: logged, never failed on)."""
    from topic_lineage import warehouse
    from topic_lineage.quality.suites import FINDINGS

    gate = warehouse.read_manifest(version).get("gate") or {}
    warnings = gate.get("warnings") or []
    findings = [w for w in warnings if w.split(": ", 1)[-1] in FINDINGS]
    return [w for w in warnings if w not in findings], findings


def prepare_build(version: str) -> bool:
    """Before (re)running the build of ``version``: ``False`` when it is already built.

    A retried build task must not fail on the directory its killed first attempt left behind:
    an unfinished version (status ``building``, never published) is removed and built again.
    """
    import shutil

    from topic_lineage import warehouse

    directory = warehouse.version_dir(version)
    if not directory.exists():
        return True
    try:
        status = warehouse.read_manifest(version).get("status")
    except warehouse.WarehouseError:
        status = None
    if status in (warehouse.BUILT, warehouse.VALIDATED, warehouse.PUBLISHED, warehouse.REJECTED):
        log.info("version %s is already built (status %s); not building it again", version, status)
        return False
    if version == warehouse.current_version():
        raise OrchestrationError(f"version {version} is published but has status {status!r}")
    log.warning("removing the unfinished version %s (status %s) left by an earlier attempt",
                version, status)
    shutil.rmtree(directory)
    return True


def build_on_connect_server(version: str) -> dict[str, Any] | None:
    """The ``build`` task's body when the deployment's Spark Connect server runs
    (:func:`topic_lineage.spark_server.remote_url`): build ``version`` on it from this task
    process (no spark-submit, no JVM of its own); ``None`` when no server answers (the task
    then submits ``spark_jobs/build.py`` as before). Writes only: validate and publish are the
    next tasks."""
    from topic_lineage import spark_server

    url = spark_server.remote_url()
    if url is None:
        return None
    from spark_jobs.build import build_version, hold_policy

    log.info("building version %s on the Spark Connect server %s", version, url)
    spark = spark_server.connect(url)
    try:
        info = build_version(spark, version, policy=hold_policy())
    finally:
        spark.stop()  # releases this session on the server; the server keeps running
    log.info("%s", info)
    return {"version": info.version, "mode": info.mode, "seconds": info.seconds,
            "row_counts": info.row_counts}


QUIET_LOGGERS = ("great_expectations", "py4j")
"""Loggers held at WARNING during the gate: GX logs hundreds of lines per validation."""


def airflow_base_url() -> str:
    """Where users reach the Airflow api-server: ``[api] base_url``, else ``http://<[api] host>:
    <[api] port>`` (``localhost`` for a wildcard host). The task log links the UI from it."""
    from airflow.sdk import conf

    base = (conf.get("api", "base_url", fallback="") or "").strip()
    if base:
        return base.rstrip("/")
    host = (conf.get("api", "host", fallback="") or "").strip()
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "localhost"
    return f"http://{host}:{conf.get('api', 'port', fallback='8080')}"


@contextlib.contextmanager
def _quiet_loggers(names: tuple[str, ...] = QUIET_LOGGERS) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def _child_stderr_to_stdout() -> Iterator[None]:
    """Processes started inside (Spark's JVM) write their stderr to this task's stdout.

    Airflow logs a task's stderr at ERROR level; the JVM's start-up lines ("Using Spark's
    default log4j profile", the native-hadoop warning) are not errors. The build task's JVM
    output is logged at INFO the same way (through spark-submit's hook).
    """
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = os.dup(2)
        os.dup2(1, 2)
    except OSError:  # no real descriptors (an unusual runner): leave them alone
        yield
        return
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def gate_log_lines(result: Any, base_url: str) -> list[str]:
    """The validate task's log: the verdict, one line per expectation, http links to the pages.

    Links point at the UI (``<base_url>/topic-lineage/data-docs/...``), never at server paths.
    """
    from topic_lineage.quality import context as qc
    from topic_lineage.ui import data_docs_url

    met = sum(1 for o in result.outcomes if o.success)
    verdict = "PASSED" if result.success else "FAILED"
    total = len(result.outcomes)
    lines = [f"quality gate {verdict} for version {result.version}: {met} of {total} expectation(s) met"]
    for outcome in result.outcomes:
        severity = getattr(outcome, "severity", None) or "critical"
        mark = "passed" if outcome.success else ("warning" if severity == "warning" else "FAILED")
        count = "" if outcome.success or outcome.unexpected_count is None else (
            f" ({outcome.unexpected_count} row(s))")
        lines.append(f"  {mark:7} {outcome.table}: {outcome.name}{count}")
    report = qc.quality_link(qc.overview_page()) or "index.html"
    lines.append(f"gate report: {data_docs_url(base_url, report)}")
    for table, link in sorted((result.detail_pages or {}).items()):
        relative = qc.quality_link(link)
        if relative:
            lines.append(f"Data Docs of {table}: {data_docs_url(base_url, relative)}")
    return lines


def validate_version(version: str) -> dict[str, Any]:
    """Run the Great Expectations gate on a written version; raise if a critical expectation
    fails (R7). Warnings (freshness, describe-error share) do not fail this task: they are in
    its return value and log, and the ``health`` task fails on them."""
    from airflow.sdk.exceptions import AirflowFailException

    from topic_lineage.quality import context as qc
    from topic_lineage.quality.gate import validate_version as gate
    from topic_lineage.spark import pipeline_session
    from topic_lineage.ui import data_docs_url

    with _quiet_loggers():
        with _child_stderr_to_stdout():
            # the deployment's Spark Connect server when it runs, else a local Spark
            spark, remote = pipeline_session("topic-lineage-validate")
        try:
            result = gate(spark, version)  # records the verdict in the version's manifest
        finally:
            if remote:  # release the server-side session; a local one ends with the task
                spark.stop()
    base_url = airflow_base_url()
    for line in gate_log_lines(result, base_url):
        log.info("%s", line)
    report = data_docs_url(base_url, qc.quality_link(qc.overview_page()) or "index.html")
    if not result.success:
        raise AirflowFailException(
            f"version {version} failed the quality gate and stays unpublished: "
            f"{result.summary()}. Gate report: {report}"
        )
    for warning in result.warnings:
        log.warning("quality gate warning on version %s: %s", version, warning)
    return {"version": version, "gate_report": report, "warnings": result.warnings}


def publish_version(version: str) -> dict[str, Any]:
    """Publish a validated version through :func:`topic_lineage.warehouse.publish` (its one
    lock and decision); skip when the published version was built over more or the same
    snapshots."""
    from airflow.sdk.exceptions import AirflowSkipException

    from topic_lineage import warehouse

    outcome = warehouse.publish(version, automatic=True)
    if not outcome.published:
        raise AirflowSkipException(str(outcome))
    return {"version": version, "previous": outcome.previous}


def check_health(version: str) -> dict[str, Any]:
    """Fail (without retries) when the quality gate warned about ``version``.

    Warnings never block publishing, so ``validate`` and ``publish`` succeed; this task makes
    the run visibly unhealthy instead (a failed task, a failed run, the usual alerting). A no-op
    run (nothing new since the published version: ``version`` was never written) reports the
    published version's verdict, which still describes the tables readers see.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from topic_lineage import warehouse

    if not warehouse.version_dir(version).exists():
        published = warehouse.current_version()
        if published is None:
            return {"version": version, "warnings": []}
        log.info("version %s was not built (no-op run); health of the published version %s",
                 version, published)
        version = published
    unhealthy, findings = capture_warnings(version)
    for finding in findings:  # history, not capture health: reported, never a failed run
        log.warning("version %s: the quality gate reports %s (see Data Docs and the group_"
                    "incarnations table)", version, finding)
    if unhealthy:
        raise AirflowFailException(
            f"version {version} passed the quality gate with {len(unhealthy)} warning(s) about "
            "its captures: " + "; ".join(unhealthy)
            + " (stale captures or many describe errors; see Data Docs). The tables were "
            "validated and published as usual."
        )
    return {"version": version, "warnings": [], "findings": findings}
