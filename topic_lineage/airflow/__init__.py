"""What the Airflow DAGs do, kept out of the DAG files so it can be imported and unit-tested.

A DAG file is two lines (``dags/topic_lineage.py``)::

    from topic_lineage.airflow import topic_lineage_dags
    globals().update(topic_lineage_dags())

:func:`topic_lineage_dags` (in :mod:`.dags`, imported on first call) declares both DAGs'
schedules, tasks and assets and calls the functions here. Nothing in this package imports Spark, Great Expectations or confluent-kafka at
import time (DAG files import it while being parsed); Airflow itself is imported only inside the
functions that need a running task, and by :mod:`topic_lineage.airflow.operators` (imported by
the DAG files only, never here).

* :mod:`.config`: names, ``[topic_lineage]`` config values, the cluster Variable, connections;
* :mod:`.assets`: the assets' URIs;
* :mod:`.capture`: the snapshot task (on time, late, backfill; capture + store, archive ingest);
* :mod:`.build`: plan, no-op, prepare and build a version (Spark Connect or spark-submit);
* :mod:`.publish`: validate (the gate's log lines), publish, health;
* :mod:`.operators`: the operators of the incarnations DAG;
* :mod:`.dags`: the two DAGs, built by :func:`topic_lineage_dags` (its options:
  :class:`DagOptions`).

Inside this package ``airflow`` is always Airflow itself (absolute imports only).
"""

from __future__ import annotations

from topic_lineage.airflow.assets import (
    kafka_asset_uri,
    snapshots_asset_uri,
    table_asset_uri,
)
from topic_lineage.airflow.build import (
    NOOP_FOLLOW_ON_WARNINGS,
    build_application,
    build_on_connect_server,
    noop_run,
    plan_follow,
    plan_version,
    prepare_build,
)
from topic_lineage.airflow.capture import (
    BACKFILL_RUN_TYPE,
    MIN_LATE_AFTER,
    CaptureDecision,
    capture_and_store,
    decide_capture,
    ingest_archive,
    late_after,
    run_snapshot_task,
    snapshot_event_extra,
)
from topic_lineage.airflow.config import (
    ARCHIVE_VARIABLE,
    BUILD_POOL,
    CLUSTERS_VARIABLE,
    CONFIG_DEFAULTS,
    CONFIG_SECTION,
    DEFAULT_CLUSTERS,
    DEFAULT_KAFKA_CONN_ID,
    INCARNATIONS_DAG_ID,
    OWNER,
    PUBLISH_POOL,
    SNAPSHOT_DAG_ID,
    SPARK_CONN_ID,
    TAGS,
    ClusterSpec,
    DagOptions,
    OrchestrationError,
    build_cron,
    capture_groups_enabled,
    config_value,
    kafka_config,
    log,
    parse_clusters,
    resolve_clusters,
    snapshot_cron,
)
from topic_lineage.airflow.publish import (
    QUIET_LOGGERS,
    airflow_base_url,
    capture_warnings,
    check_health,
    gate_log_lines,
    publish_version,
    validate_version,
)

__all__ = [
    "ARCHIVE_VARIABLE",
    "BACKFILL_RUN_TYPE",
    "BUILD_POOL",
    "CLUSTERS_VARIABLE",
    "CONFIG_DEFAULTS",
    "CONFIG_SECTION",
    "DEFAULT_CLUSTERS",
    "DEFAULT_KAFKA_CONN_ID",
    "INCARNATIONS_DAG_ID",
    "MIN_LATE_AFTER",
    "NOOP_FOLLOW_ON_WARNINGS",
    "OWNER",
    "PUBLISH_POOL",
    "QUIET_LOGGERS",
    "SNAPSHOT_DAG_ID",
    "SPARK_CONN_ID",
    "TAGS",
    "CaptureDecision",
    "ClusterSpec",
    "DagOptions",
    "OrchestrationError",
    "airflow_base_url",
    "build_application",
    "build_cron",
    "build_on_connect_server",
    "capture_and_store",
    "capture_groups_enabled",
    "capture_warnings",
    "check_health",
    "config_value",
    "decide_capture",
    "gate_log_lines",
    "ingest_archive",
    "kafka_asset_uri",
    "kafka_config",
    "late_after",
    "log",
    "noop_run",
    "parse_clusters",
    "plan_follow",
    "plan_version",
    "prepare_build",
    "publish_version",
    "resolve_clusters",
    "run_snapshot_task",
    "snapshot_cron",
    "snapshot_event_extra",
    "snapshots_asset_uri",
    "table_asset_uri",
    "topic_lineage_dags",
    "validate_version",
]


def topic_lineage_dags(**options):
    """``{dag_id: DAG}`` of ``kafka_topic_snapshot`` and ``topic_incarnations``; options:
    :class:`DagOptions` (an unknown one raises ``TypeError``). Imports Airflow on call."""
    from topic_lineage.airflow.dags import topic_lineage_dags as build

    return build(**options)
