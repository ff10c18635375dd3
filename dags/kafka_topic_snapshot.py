"""
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

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import Asset, CronDataIntervalTimetable, dag, task

from topic_lineage import airflow as at

# Named by URI only: an asset name must be unique, and the URI already names the store.
SNAPSHOTS = Asset(uri=at.snapshots_asset_uri())


@dag(
    dag_id=at.SNAPSHOT_DAG_ID,
    schedule=CronDataIntervalTimetable(at.snapshot_cron(), timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=30),
    default_args={
        "owner": at.OWNER,
        "retries": 3,
        "retry_delay": timedelta(seconds=30),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=5),
        "execution_timeout": timedelta(minutes=10),
    },
    tags=[*at.TAGS, "snapshot"],
    doc_md=__doc__,
)
def kafka_topic_snapshot():
    @task(retries=1, execution_timeout=timedelta(minutes=1))
    def clusters() -> list[dict[str, str]]:
        """The configured clusters (Variable `topic_lineage_clusters`)."""
        return at.resolve_clusters()

    @task(outlets=[SNAPSHOTS], map_index_template="{{ task.op_kwargs['cluster']['alias'] }}")
    def capture(cluster: dict[str, str], **context) -> dict:
        """Capture and store one snapshot of one cluster (or skip a backfill / late run)."""
        return at.run_snapshot_task(cluster, context)

    capture.expand(cluster=clusters())


kafka_topic_snapshot()
