"""The snapshot task: decide (on time, late, backfill), then capture + store, or ingest the archive.

A run may record *now*'s metadata only for an interval that just ended; other runs ingest
archived snapshots of their interval, or skip. Each capture or ingest sets the metadata of the
task's snapshot asset event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from topic_lineage.airflow.assets import kafka_asset_uri
from topic_lineage.airflow.config import (
    ARCHIVE_VARIABLE,
    ClusterSpec,
    capture_groups_enabled,
    config_value,
    kafka_config,
    log,
)

# Backfilled runs: Airflow 3 marks them with run_type "backfill" (their run_id may still read
# "scheduled__..."), so the run type is the only reliable sign.
BACKFILL_RUN_TYPE = "backfill"


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


def run_snapshot_task(
    cluster: Mapping[str, str], context: Mapping[str, Any], *, archive_dir: str | None = None
) -> dict[str, Any]:
    """Body of one mapped ``capture`` task: decide, then capture + store (or ingest, or skip).

    ``archive_dir``: the archive of old snapshots; ``None`` = the Variable
    ``topic_lineage_archive_dir``, read now.

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
    if archive_dir is None:
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

