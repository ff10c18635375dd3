"""
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
* **Backfills** (UI: *Trigger* → *Backfill*, or `airflow backfill create --dag-id
  topic_incarnations ...`), in either direction and with any `max_active_runs`, leave the same
  published tables as one normal run: the tables are a pure function of the stored snapshots (R5).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import Asset, AssetOrTimeSchedule, CronDataIntervalTimetable, dag, task

from topic_lineage import airflow as at
from topic_lineage import tables
from topic_lineage.airflow.operators import BuildVersionOperator, PlanOperator

# Named by URI only: an asset name must be unique, and the URI already names the store.
SNAPSHOTS = Asset(uri=at.snapshots_asset_uri())
TABLES = [Asset(uri=at.table_asset_uri(name)) for name in tables.TABLES]


@dag(
    dag_id=at.INCARNATIONS_DAG_ID,
    schedule=AssetOrTimeSchedule(
        timetable=CronDataIntervalTimetable(at.build_cron(), timezone="UTC"), assets=[SNAPSHOTS]
    ),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=2),
    default_args={
        "owner": at.OWNER,
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
        "execution_timeout": timedelta(hours=1),
    },
    tags=[*at.TAGS, "spark", "scd2"],
    doc_md=__doc__,
)
def topic_incarnations():
    version = PlanOperator(
        task_id="plan",
        execution_timeout=timedelta(minutes=5),
        doc_md="Names the version this run builds; skips the rest of a no-op run (no Spark).",
    ).output

    build = BuildVersionOperator(
        task_id="build",
        version=version,
        pool=at.BUILD_POOL,
        inlets=[SNAPSHOTS],
        doc_md="Writes a new, unpublished version of the tables with PySpark (spark-submit).",
    )

    @task(retries=0)
    def validate(version_id: str) -> dict:
        """Great Expectations gate on the written version (R7)."""
        return at.validate_version(version_id)

    @task(pool=at.PUBLISH_POOL, outlets=TABLES, execution_timeout=timedelta(minutes=10))
    def publish(version_id: str) -> dict:
        """Atomically make the validated version the published one."""
        return at.publish_version(version_id)

    @task(retries=0, trigger_rule="none_failed", execution_timeout=timedelta(minutes=5))
    def health(version_id: str) -> dict:
        """Fails when the quality gate warned (stale captures, describe errors); never blocks
        publishing."""
        return at.check_health(version_id)

    checked = validate(version)
    build >> checked
    published = publish(version)
    checked >> published
    published >> health(version)


topic_incarnations()
