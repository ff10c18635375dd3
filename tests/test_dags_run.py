"""Both DAGs run with ``dag.test()`` (a real Airflow metadata DB, in-process tasks) against the
real local Kafka-protocol broker and a real local Spark.

Guards: one mapped capture per cluster, labelled by alias; a down cluster fails only its own
task; the snapshot asset event carries cluster, topic count and completeness; a run of an old
interval records nothing; build -> validate -> publish publishes the tables, and builds run
as a backfill (in reverse order, over snapshots ingested in other batches) publish the same
tables as one normal run (R5).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

# Airflow runs its DAGs (a deployment, not a rule: the task bodies and the run-type decisions are
# tests/test_airflow_tasks.py's, in the fast tier too): the whole suite
pytestmark = [pytest.mark.airflow, pytest.mark.broker, pytest.mark.slow]

DAGS_DIR = Path(__file__).resolve().parent.parent / "dags"


_MIGRATED: list[str] = []  # the AIRFLOW_HOME whose DB this process migrated (conftest: one a process)


@pytest.fixture(scope="module")
def airflow_db():
    """The test session's Airflow metadata DB (SQLite), migrated once per process (the modules
    that import this fixture share it: tests/test_acl_capture.py)."""
    if _MIGRATED == [os.environ["AIRFLOW_HOME"]]:
        return _MIGRATED[0]
    airflow = Path(sys.executable).parent / "airflow"
    out = subprocess.run(
        [str(airflow), "db", "migrate"], capture_output=True, text=True, timeout=300, check=False,
        env=os.environ.copy(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    from airflow import settings

    settings.configure_orm()
    _MIGRATED[:] = [os.environ["AIRFLOW_HOME"]]
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture
def airflow_env(monkeypatch, tl_home, airflow_db):
    """Connections, Variables and config through AIRFLOW_* environment variables."""

    def set_clusters(clusters: dict[str, str]):
        """``{alias: bootstrap servers}``: one Kafka connection and one Variable entry each."""
        entries = []
        for alias, servers in clusters.items():
            conn_id = f"kafka_{alias.replace('-', '_')}"
            monkeypatch.setenv(
                f"AIRFLOW_CONN_{conn_id.upper()}",
                json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": servers}}),
            )
            entries.append({"alias": alias, "conn_id": conn_id})
        monkeypatch.setenv("AIRFLOW_VAR_TOPIC_LINEAGE_CLUSTERS", json.dumps(entries))

    monkeypatch.setenv("AIRFLOW__TOPIC_LINEAGE__CAPTURE_TIMEOUT_SECONDS", "8")
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"})
    )
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("TOPIC_LINEAGE_SHUFFLE_PARTITIONS", "2")
    return set_clusters


def load_dag(dag_id: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_DIR))
    assert bag.import_errors == {}
    return bag.dags[dag_id]


def task_instances(dag_run):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = (
            session.query(TaskInstance)
            .filter(TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)
            .all()
        )
        return {(ti.task_id, ti.rendered_map_index or ti.map_index): ti.state for ti in tis}


def tries(dag_run) -> dict[str, int]:
    """Each task's try number: 0 for a task that was never scheduled (no process was started)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = (
            session.query(TaskInstance)
            .filter(TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)
            .all()
        )
        return {ti.task_id: ti.try_number for ti in tis}


def asset_events(uri: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
            .all()
        )
        return [dict(row.extra) for row in rows]


def test_snapshot_dag_captures_each_cluster_and_isolates_a_down_one(broker, airflow_env, tl_home):
    """Two clusters: the live one is stored with its asset event; the down one fails alone."""
    from topic_lineage import store
    from topic_lineage import tables as t
    from topic_lineage.local import broker as local_broker

    broker.create_topics(["orders", ("payments", 3)])
    airflow_env({"live": broker.bootstrap_servers, "down": f"127.0.0.1:{local_broker.free_port()}"})
    dag = load_dag("kafka_topic_snapshot")
    dag.get_task("capture").partial_kwargs["retries"] = 0  # the down cluster fails at once

    run = dag.test()

    states = task_instances(run)
    assert states[("clusters", -1)] == "success"
    assert states[("capture", "live")] == "success"
    assert states[("capture", "down")] == "failed"
    assert run.state == "failed"  # loudly: the run shows the down cluster

    runs = store.read_runs()
    assert [(r[t.CLUSTER_ALIAS], r[t.TOPIC_COUNT], r[t.COMPLETE]) for r in runs] == [
        ("live", 3, True)  # orders, payments and Kafka's __consumer_offsets
    ]
    events = asset_events((tl_home / "snapshots").resolve().as_uri())
    assert len(events) == 1
    assert events[0]["cluster"] == "live" and events[0]["topic_count"] == 3  # + __consumer_offsets
    assert events[0]["complete"] is True and events[0]["cluster_id"] == broker.cluster_id


def test_snapshot_dag_run_of_an_old_interval_records_nothing(broker, airflow_env, tl_home):
    """A run whose interval ended days ago skips: today's metadata is never dated in the past."""
    from topic_lineage import store

    broker.create_topics(["orders"])
    airflow_env({"live": broker.bootstrap_servers})
    dag = load_dag("kafka_topic_snapshot")

    run = dag.test(logical_date=datetime.now(UTC) - timedelta(days=3))

    assert task_instances(run)[("capture", "live")] == "skipped"
    assert store.read_runs() == []
    assert asset_events((tl_home / "snapshots").resolve().as_uri()) == []


# --- topic_incarnations: build -> validate -> publish -----------------------------------------
@pytest.fixture
def build_env(airflow_env, monkeypatch):
    monkeypatch.setenv("TOPIC_LINEAGE_SPARK_MASTER", "local[2]")
    monkeypatch.setenv("TOPIC_LINEAGE_MAX_AGE", "off")  # fixed, old snapshots in some tests
    return airflow_env


def published_incarnations() -> list[tuple]:
    """The published topic_incarnations rows, sorted (what a reader of the tables sees)."""
    import pyarrow.dataset as ds

    from topic_lineage import tables as t
    from topic_lineage import warehouse

    current = warehouse.current_version()
    assert current is not None, "nothing published"
    table = ds.dataset(str(warehouse.version_path(current, t.TOPIC_INCARNATIONS)), format="parquet")
    columns = t.ddl_columns(t.TOPIC_INCARNATIONS_DDL)
    return sorted(tuple(row[c] for c in columns) for row in table.to_table().to_pylist())


def published_rows(table: str) -> list[dict]:
    """The rows of one published table (pyarrow: no Spark in the test process)."""
    import pyarrow.dataset as ds

    from topic_lineage import warehouse

    path = warehouse.version_path(warehouse.current_version(), table)
    return ds.dataset(str(path), format="parquet").to_table().to_pylist()


def test_snapshot_then_incarnations_dag_publish_a_recreated_topic(broker, build_env, tl_home):
    """Capture, delete + re-create, capture again through the snapshot DAG; the incarnations DAG
    builds, validates and publishes two incarnations of the re-created name (R1), and the
    consumer group that carried its position across the re-creation on the new one (R9).

    Its lineage task tells a real OpenLineage HTTP receiver on loopback (issue #41): one DROP of
    the first incarnation, one CREATE of the second, at the table's times, billing reading each
    with the carried position on the second; a second run with nothing new sends nothing."""
    from lineage_receiver import Receiver, openlineage_environment

    with Receiver() as receiver, openlineage_environment(OPENLINEAGE_URL=receiver.url):
        _recreated_topic_through_the_dags(broker, build_env, receiver)


def _recreated_topic_through_the_dags(broker, build_env, receiver):
    from lineage_receiver import by_kind
    from test_group_capture import commit, produce

    from topic_lineage import tables as t
    from topic_lineage import warehouse

    broker.create_topics(["orders", "payments"])
    produce(broker, "orders", 5)
    commit(broker, "billing", "orders", 4)
    build_env({"live": broker.bootstrap_servers})
    snapshot_dag = load_dag("kafka_topic_snapshot")
    assert snapshot_dag.test().state == "success"
    broker.delete_topics(["orders"])
    broker.create_topics([("orders", 2)])
    commit(broker, "billing", "orders", 4)  # the group carries its position to the new orders
    assert snapshot_dag.test().state == "success"
    # the snapshot events say what the capture saw of consumer groups (issue #26)
    from topic_lineage import airflow as at

    events = asset_events(at.snapshots_asset_uri())
    assert events[-1]["groups_complete"] is True and events[-1]["group_count"] >= 1

    run = load_dag("topic_incarnations").test()

    states = task_instances(run)
    assert [states[(task, -1)] for task in ("plan", "build", "validate", "publish")] == [
        "success"
    ] * 4
    assert run.state == "success"
    rows = [dict(zip(("key", "cluster", "alias", "id", "uuid", "name"), r[:6])) for r in
            published_incarnations()]
    orders = [r for r in published_incarnations() if r[5] == "orders"]
    assert len(orders) == 2 and len({r[3] for r in orders}) == 2  # two IDs, two incarnations
    assert sorted(r[13] for r in orders) == [False, True]  # is_current: old closed, new open
    assert len([r for r in rows if r["name"] == "payments"]) == 1
    assert warehouse.read_manifest(warehouse.current_version())["status"] == "published"
    # Consumer lineage (R8, R9) in the same published version: billing read both incarnations
    # of orders, and its position on the new one was carried (4 > the new log end, 0).
    billing = sorted(
        (row["topic_id"], row["carried_offset"]) for row in published_rows("group_incarnations")
        if row["group_id"] == "billing" and row["topic_name"] == "orders"
    )
    by_id = {r[3]: r[13] for r in orders}  # topic_id -> is_current
    assert sorted((by_id[topic_id], carried) for topic_id, carried in billing) == [
        (False, False), (True, True)
    ]

    # OpenLineage (issue #41): the lineage task told the receiver which incarnation is which
    assert states[("lineage", -1)] == "success"
    old_row, new_row = sorted(orders, key=lambda r: r[11])  # by valid_from
    columns = t.ddl_columns(t.TOPIC_INCARNATIONS_DDL)
    old_row, new_row = dict(zip(columns, old_row)), dict(zip(columns, new_row))
    events = [e for e in receiver.events
              if any(d["name"] == "orders" for d in e["inputs"] + e["outputs"])]
    kinds = by_kind(events)
    assert [k for k in kinds if k[0] == "DROP"] == [("DROP", "orders", old_row["topic_id"])]
    assert [k for k in kinds if k[0] == "CREATE"] == [
        ("CREATE", "orders", old_row["topic_id"]), ("CREATE", "orders", new_row["topic_id"])]
    assert old_row["topic_id"] != new_row["topic_id"]
    when = {k: datetime.fromisoformat(e["eventTime"]) for k, e in zip(kinds, events, strict=True)}
    assert when[("DROP", "orders", old_row["topic_id"])] == old_row["deleted_at"]
    assert when[("CREATE", "orders", new_row["topic_id"])] == new_row["valid_from"]
    assert kinds.index(("DROP", "orders", old_row["topic_id"])) < kinds.index(
        ("CREATE", "orders", new_row["topic_id"]))  # in order, for the one dataset
    assert {e["outputs"][0]["namespace"] for e in events if e["outputs"]} == {
        "kafka://" + broker.bootstrap_servers.split(",")[0]}
    reads = {e["inputs"][0]["facets"]["topicLineage_incarnation"]["topicId"]:
             e["inputs"][0]["inputFacets"] for e in events
             if e["inputs"] and e["job"]["name"] == "live.consumer_group.billing"}
    assert set(reads) == {old_row["topic_id"], new_row["topic_id"]}
    assert "topicLineage_carriedPosition" not in reads[old_row["topic_id"]]
    assert reads[new_row["topic_id"]]["topicLineage_carriedPosition"]["groupId"] == "billing"
    sent = len(receiver.events)

    # Nothing new stored since: the next run is a no-op, decided by plan (topic_lineage/noop.py):
    # plan skips build (no spark-submit), validate, publish and, the published gate having
    # warned about nothing, health. None of them is ever scheduled, so no task process is
    # started for them; the run succeeds.
    published = warehouse.current_version()
    again = load_dag("topic_incarnations").test()
    states = task_instances(again)
    assert [states[(task, -1)] for task in ("plan", "build", "validate", "publish", "health")] == [
        "success", "skipped", "skipped", "skipped", "skipped"
    ]
    assert tries(again) == {"plan": 1, "build": 0, "validate": 0, "publish": 0, "health": 0,
                            "lineage": 0}
    assert again.state == "success"
    assert len(receiver.events) == sent  # nothing emitted again
    assert warehouse.current_version() == published
    assert [m["version"] for m in warehouse.list_versions()] == [published]


def _history():
    """A small history of one cluster: create, change, delete, re-create (four snapshots)."""
    import uuid

    from topic_lineage import topic_id as tid
    from topic_lineage.snapshot import Snapshot, TopicObservation

    def obs(name, n, partitions=1):
        return TopicObservation(name, tid.canonical(uuid.UUID(int=n + 1000)), partitions, 1, False)

    day = datetime(2026, 10, 1, tzinfo=UTC)
    return [
        Snapshot("cluster-r5", "r5", day, True, (obs("a", 1), obs("b", 2))),
        Snapshot("cluster-r5", "r5", day + timedelta(days=1), True, (obs("a", 1, 3), obs("b", 2))),
        Snapshot("cluster-r5", "r5", day + timedelta(days=2), True, (obs("b", 2),)),
        Snapshot("cluster-r5", "r5", day + timedelta(days=3), True, (obs("a", 3), obs("b", 2))),
    ]


@pytest.mark.slow  # 60-110 s: one `airflow dags test` per date, twice
def test_backfill_in_reverse_order_publishes_the_same_tables_as_one_run(
    build_env, tl_home, tmp_path, monkeypatch
):
    """R5 through the DAG: runs over snapshots arriving in other batches and order (newest
    interval first, then an older one with late snapshots) publish exactly the rows of one
    normal run over all snapshots; a further run over the same snapshots publishes nothing new."""
    from topic_lineage import store, warehouse

    history = _history()
    build_env({"r5": "127.0.0.1:1"})
    dag = load_dag("topic_incarnations")
    store.save_all(history, "import:jsonl")
    # (a date no later run takes: dag.test deletes an earlier run of its date, and Airflow's
    # delete loads DagRun.serialized_dag by dag_id alone, which the new home's second version of
    # the DAG makes two rows: SQLAlchemy's "Multiple rows returned with uselist=False")
    assert dag.test(logical_date=datetime(2026, 10, 6, tzinfo=UTC)).state == "success"
    one_run = published_incarnations()
    assert len(one_run) == 4  # a v1, a v2 (attributes changed), b, re-created a

    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(tmp_path / "backfill-home"))
    dag = load_dag("topic_incarnations")  # its asset URIs name the new home
    store.save_all([history[3], history[1]], "import:jsonl")
    newest = dag.test(logical_date=datetime(2026, 10, 5, tzinfo=UTC))
    assert newest.state == "success"
    store.save_all([history[2], history[0]], "import:jsonl")  # late: older than the newest
    older = dag.test(logical_date=datetime(2026, 10, 2, tzinfo=UTC))
    assert older.state == "success"
    assert task_instances(older)[("publish", -1)] == "success"
    assert published_incarnations() == one_run

    published = warehouse.current_version()
    again = dag.test(logical_date=datetime(2026, 10, 3, tzinfo=UTC))
    assert task_instances(again)[("publish", -1)] == "skipped"  # same snapshots: nothing new
    assert warehouse.current_version() == published
    assert published_incarnations() == one_run


def test_snapshot_dag_old_interval_ingests_the_archive_when_configured(
    broker, airflow_env, tl_home, tmp_path, monkeypatch
):
    """With ``topic_lineage_archive_dir`` set, a run of an old interval stores the archived
    snapshots captured inside that interval (and only those), never a live capture."""
    from topic_lineage import store
    from topic_lineage import tables as t
    from topic_lineage.snapshot import Snapshot, TopicObservation, write_jsonl

    broker.create_topics(["live-only"])
    airflow_env({"live": broker.bootstrap_servers})
    logical = datetime(2026, 10, 1, 12, 0, tzinfo=UTC)
    inside = logical - timedelta(minutes=5)  # the interval is [11:45, 12:00)
    outside = logical + timedelta(minutes=5)
    archive = tmp_path / "archive"
    archive.mkdir()
    write_jsonl(
        [
            Snapshot("c-arch", "live", when, True, (TopicObservation("old", None, 1, 1, False),))
            for when in (inside, outside)
        ],
        archive / "history.jsonl",
    )
    monkeypatch.setenv("AIRFLOW_VAR_TOPIC_LINEAGE_ARCHIVE_DIR", str(archive))

    run = load_dag("kafka_topic_snapshot").test(logical_date=logical)

    assert task_instances(run)[("capture", "live")] == "success"
    runs = store.read_runs()
    assert [(r[t.CAPTURED_AT], r[t.SOURCE]) for r in runs] == [(inside, "import:archive")]
    events = asset_events((tl_home / "snapshots").resolve().as_uri())
    assert events[-1]["source"] == "import:archive" and events[-1]["archived_snapshots"] == 1
