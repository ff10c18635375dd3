"""The two topic-lineage DAGs, built by :func:`topic_lineage_dags` (imported by DAG files only).

A DAG file in any Airflow where this package is installed is two lines::

    from topic_lineage.airflow import topic_lineage_dags
    globals().update(topic_lineage_dags())

:func:`topic_lineage_dags` returns ``{dag_id: DAG}`` for ``kafka_topic_snapshot`` and
``topic_incarnations``; its options (:class:`topic_lineage.airflow.config.DagOptions`) replace
the configuration that ``topic-lineage airflow setup`` writes; an option not given leaves
today's behaviour (the ``[topic_lineage]`` config, the Variables, the connections). Nothing here
imports Spark, Great Expectations or confluent-kafka.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, AssetOrTimeSchedule, CronDataIntervalTimetable, dag, task

from topic_lineage import tables
from topic_lineage.airflow import config as c
from topic_lineage.airflow.assets import snapshots_asset_uri, table_asset_uri
from topic_lineage.airflow.capture import run_snapshot_task
from topic_lineage.airflow.operators import BuildVersionOperator, PlanOperator
from topic_lineage.airflow.publish import (
    check_health,
    emit_lineage,
    publish_version,
    validate_version,
)

SNAPSHOT_DOC = """
### kafka_topic_snapshot

Reads the topic metadata (names, KIP-516 topic IDs, partitions, replication) of every configured
Kafka cluster and stores one snapshot per cluster in the topic-lineage snapshot store.

* **Clusters**: the Airflow Variable `topic_lineage_clusters`, a JSON list of
  `{"alias": "...", "conn_id": "..."}` (default: alias `default` on connection `kafka_default`).
  Each connection is of type *Apache Kafka*; its extra is the librdkafka config.
* **One mapped task per cluster** (`capture`, labelled by alias): a cluster that is down fails
  its own task (after retries with exponential backoff) and no other.
* **Schedule**: `[topic_lineage] snapshot_schedule` (default every 15 minutes). No catch-up.
* **Backfills and late runs** never record today's metadata as the past: they skip with a log
  line saying why, or ingest archived snapshots of their interval when the Variable
  `topic_lineage_archive_dir` names an archive.
* **Asset**: every stored snapshot updates the snapshot-store asset, with the cluster, topic
  count and completeness as event metadata; `topic_incarnations` runs on it.
"""

INCARNATIONS_DOC = """
### topic_incarnations

Builds the `topic_incarnations` slowly changing dimension (and `snapshot_runs`,
`topic_snapshots`) from every stored snapshot, checks it with the Great Expectations gate, and
publishes it: write, audit, publish, as three visible tasks.

* **Runs** on every snapshot-store asset event, on `[topic_lineage] build_schedule`
  (default daily), and by hand. No catch-up; one active run at a time.
* **plan** names the version this run builds and decides, without Spark, whether there is
  anything new since the published version. When there is not (a *no-op* run: the usual case
  in a backfill, whose first run publishes), it skips build, validate and publish, so no task
  process is started for them, and health too unless the published version's gate warned;
  the run succeeds.
* **build** runs `spark_jobs/build.py` with `spark-submit` through the `spark_default`
  connection (master `local[*]` unless the connection says otherwise) and only writes. Builds
  run one at a time (pool `topic_lineage_build`, one slot); a build that finds nothing new
  by the time it runs skips too.
* **validate** runs the quality gate; a failure of a critical expectation (the rows are wrong)
  fails it and leaves the previous version published. Warnings (the newest live capture is
  stale, too many describe errors) never block: validate and publish succeed.
* **publish** runs in the pool `topic_lineage_publish` (one slot), so scheduled runs, manual
  runs and backfills never publish at the same time. A version is not published over one built
  from more or the same snapshots (the task is then skipped).
* **health** fails (no retries) when the gate warned about the captures of this run's version
  (a carried consumer position is logged, not failed on), so a run whose tables were published
  but whose captures are unhealthy is red; it runs after publish, even a
  skipped one. In a no-op run it reports the published version's warnings (and is skipped when
  there are none).
* **lineage** (after publish, even a skipped one) emits the OpenLineage events of what the
  published version adds (topic incarnations created, altered, renamed, dropped; consumer
  groups reading them) through the configured transport, each once; skipped when none is
  configured. A failing receiver fails it (retried; the tables stay published), and the next
  run, even a no-op one, sends what is missing (docs/lineage.md).
* **Backfills** (UI: *Trigger* → *Backfill*, or `airflow backfill create --dag-id
  topic_incarnations ...`), in either direction and with any `max_active_runs`, leave the same
  published tables as one normal run: the tables are a pure function of the stored snapshots (R5).
"""


def topic_lineage_dags(**options: Any) -> dict[str, DAG]:
    """Both topic-lineage DAGs, ``{dag_id: DAG}``; see :class:`~topic_lineage.airflow.config.
    DagOptions` for the options (an unknown one raises ``TypeError`` naming it)."""
    opts = c.DagOptions.from_kwargs(options)
    with c.options_environment(opts):  # the assets' URIs name the store under the options' home
        # Named by URI only: an asset name must be unique, and the URI already names the store.
        snapshots = Asset(uri=snapshots_asset_uri())
        table_assets = [Asset(uri=table_asset_uri(name)) for name in tables.TABLES]
    snapshot = snapshot_dag(opts, snapshots)
    incarnations = incarnations_dag(opts, snapshots, table_assets)
    return {snapshot.dag_id: snapshot, incarnations.dag_id: incarnations}


_ONE_RUN_AT_A_TIME = {
    "start_date": datetime(2026, 1, 1, tzinfo=UTC),
    "catchup": False,  # a run never captures or builds for a past interval by itself
    "max_active_runs": 1,
}
"""What both DAGs share besides their task defaults (:func:`_retrying`)."""


def _retrying(retries: int, *, first: timedelta, most: timedelta, timeout: timedelta) -> dict:
    """Both DAGs' task defaults: owned by topic-lineage, retried with exponential backoff."""
    return {
        "owner": c.OWNER,
        "retries": retries,
        "retry_delay": first,
        "retry_exponential_backoff": True,
        "max_retry_delay": most,
        "execution_timeout": timeout,
    }


def snapshot_dag(opts: c.DagOptions, snapshots: Asset) -> DAG:
    @dag(
        dag_id=c.SNAPSHOT_DAG_ID,
        schedule=CronDataIntervalTimetable(
            opts.snapshot_schedule or c.snapshot_cron(), timezone="UTC"
        ),
        **_ONE_RUN_AT_A_TIME,
        dagrun_timeout=timedelta(minutes=30),
        default_args=_retrying(3, first=timedelta(seconds=30), most=timedelta(minutes=5),
                               timeout=timedelta(minutes=10)),
        tags=[*c.TAGS, "snapshot"],
        doc_md=SNAPSHOT_DOC,
    )
    def kafka_topic_snapshot():
        @task(retries=1, execution_timeout=timedelta(minutes=1))
        def clusters() -> list[dict[str, str]]:
            """The configured clusters (Variable `topic_lineage_clusters`)."""
            return c.resolve_clusters(opts.clusters, default_conn_id=opts.kafka_conn_id)

        @task(outlets=[snapshots], map_index_template="{{ task.op_kwargs['cluster']['alias'] }}")
        def capture(cluster: dict[str, str], **context) -> dict:
            """Capture and store one snapshot of one cluster (or skip a backfill / late run)."""
            with c.task_environment(opts):
                return run_snapshot_task(cluster, context, archive_dir=opts.archive_dir)

        capture.expand(cluster=clusters())

    return kafka_topic_snapshot()


def incarnations_dag(opts: c.DagOptions, snapshots: Asset, table_assets: list[Asset]) -> DAG:
    @dag(
        dag_id=c.INCARNATIONS_DAG_ID,
        schedule=AssetOrTimeSchedule(
            timetable=CronDataIntervalTimetable(
                opts.build_schedule or c.build_cron(), timezone="UTC"
            ),
            assets=[snapshots],
        ),
        **_ONE_RUN_AT_A_TIME,
        dagrun_timeout=timedelta(hours=2),
        default_args=_retrying(2, first=timedelta(minutes=1), most=timedelta(minutes=10),
                               timeout=timedelta(hours=1)),
        tags=[*c.TAGS, "spark", "scd2"],
        doc_md=INCARNATIONS_DOC,
    )
    def topic_incarnations():
        version = PlanOperator(
            task_id="plan",
            options=opts,
            execution_timeout=timedelta(minutes=5),
            doc_md="Names the version this run builds; skips the rest of a no-op run (no Spark).",
        ).output

        build = BuildVersionOperator(
            task_id="build",
            version=version,
            options=opts,
            pool=c.BUILD_POOL,
            inlets=[snapshots],
            doc_md="Writes a new, unpublished version of the tables with PySpark (spark-submit).",
        )

        @task(retries=0)
        def validate(version_id: str) -> dict:
            """Great Expectations gate on the written version (R7)."""
            with c.task_environment(opts):
                return validate_version(version_id)

        @task(pool=c.PUBLISH_POOL, outlets=table_assets, execution_timeout=timedelta(minutes=10))
        def publish(version_id: str) -> dict:
            """Atomically make the validated version the published one."""
            with c.task_environment(opts):
                return publish_version(version_id)

        @task(retries=0, trigger_rule="none_failed", execution_timeout=timedelta(minutes=5))
        def health(version_id: str) -> dict:
            """Fails when the quality gate warned (stale captures, describe errors); never blocks
            publishing."""
            with c.task_environment(opts):
                return check_health(version_id)

        @task(retries=3, trigger_rule="none_failed", execution_timeout=timedelta(minutes=30))
        def lineage(version_id: str) -> dict:
            """OpenLineage events of what the published version adds (incarnations, consumer
            lineage; docs/lineage.md), each once; skipped when no transport is configured."""
            with c.task_environment(opts):
                return emit_lineage(version_id)

        checked = validate(version)
        build >> checked
        published = publish(version)
        checked >> published
        published >> health(version)
        published >> lineage(version)

    return topic_incarnations()
