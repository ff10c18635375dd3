"""``topic_lineage.airflow.topic_lineage_dags(**options)``: both DAGs from the package.

The repository's ``dags/`` is the two-line DAG file a user writes; the DAGs it gives are the
factory's defaults (tests/test_dag_integrity.py checks their policy). Options replace what
``topic-lineage airflow setup`` configures; options not given leave today's behaviour.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _shape(dag) -> dict:
    return {
        "tasks": sorted(t.task_id for t in dag.tasks),
        "doc_md": dag.doc_md,
        "tags": sorted(dag.tags),
        "owners": sorted({t.owner for t in dag.tasks}),
        "retries": sorted((t.task_id, t.retries) for t in dag.tasks),
        "timetable": repr(getattr(dag.timetable, "timetable", dag.timetable).expression),
        "upstream": sorted((t.task_id, sorted(t.upstream_task_ids)) for t in dag.tasks),
    }


def test_the_dag_file_is_two_lines():
    text = (REPO / "dags" / "topic_lineage.py").read_text()
    assert [line for line in text.splitlines() if line.strip()] == [
        "from topic_lineage.airflow import topic_lineage_dags",
        "globals().update(topic_lineage_dags())",
    ]
    assert sorted(p.name for p in (REPO / "dags").glob("*.py")) == ["topic_lineage.py"]


def test_the_docs_give_users_this_dag_file():
    """docs/airflow.md's "In your own Airflow" shows this file, the one
    tests/test_airflow_own_deployment.py installs into an empty DAGs folder."""
    docs = (REPO / "docs" / "airflow.md").read_text()
    section = docs.split("\n## In your own Airflow\n", 1)[1].split("\n## ", 1)[0]
    assert (REPO / "dags" / "topic_lineage.py").read_text().strip() in section


def test_defaults_are_the_dags_of_dags_folder(home):
    from airflow.dag_processing.dagbag import DagBag

    from topic_lineage.airflow import topic_lineage_dags

    dags = topic_lineage_dags()
    assert sorted(dags) == ["kafka_topic_snapshot", "topic_incarnations"]
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    for dag_id, dag in dags.items():
        assert dag.dag_id == dag_id
        assert _shape(dag) == _shape(bag.dags[dag_id])
        # the DAG file (re-parsed by task processes) is the user's, not the package's module
        assert bag.dags[dag_id].fileloc == str(REPO / "dags" / "topic_lineage.py")
    assert dags["kafka_topic_snapshot"].timetable.expression == "*/15 * * * *"
    assert dags["topic_incarnations"].timetable.timetable.expression == "0 0 * * *"  # @daily
    assert dags["topic_incarnations"].get_task("build")._conn_id == "spark_default"


def test_config_schedules_are_read_as_today(home, monkeypatch):
    from topic_lineage.airflow import topic_lineage_dags

    monkeypatch.setenv("AIRFLOW__TOPIC_LINEAGE__SNAPSHOT_SCHEDULE", "*/5 * * * *")
    monkeypatch.setenv("AIRFLOW__TOPIC_LINEAGE__BUILD_SCHEDULE", "@hourly")
    dags = topic_lineage_dags()
    assert dags["kafka_topic_snapshot"].timetable.expression == "*/5 * * * *"
    assert dags["topic_incarnations"].timetable.timetable.expression == "0 * * * *"  # @hourly


def test_unknown_options_raise_a_type_error_naming_them(home):
    from topic_lineage.airflow import topic_lineage_dags

    with pytest.raises(TypeError, match="snapshot_cron, spark_home"):
        topic_lineage_dags(spark_home="/x", snapshot_cron="* * * * *", home=str(home))
    with pytest.raises(TypeError, match="clusters"):
        topic_lineage_dags(clusters="prod")


def test_options(home, tmp_path, monkeypatch):
    from topic_lineage.airflow import topic_lineage_dags

    other = tmp_path / "other-home"
    dags = topic_lineage_dags(
        snapshot_schedule="*/7 * * * *",
        build_schedule="@weekly",
        clusters=[{"alias": "prod", "conn_id": "kafka_prod"}, {"alias": "dev"}],
        kafka_conn_id="kafka_dev",
        spark_conn_id="spark_cluster",
        spark_master="local[3]",
        spark_connect_url="sc://spark:15002",
        archive_dir=str(tmp_path / "archive"),
        home=str(other),
    )
    snapshot, incarnations = dags["kafka_topic_snapshot"], dags["topic_incarnations"]
    assert snapshot.timetable.expression == "*/7 * * * *"
    assert incarnations.timetable.timetable.expression == "0 0 * * 0"
    # the clusters task returns the option's clusters without reading the Variable
    monkeypatch.setenv("AIRFLOW_VAR_TOPIC_LINEAGE_CLUSTERS", json.dumps([{"alias": "var"}]))
    assert snapshot.get_task("clusters").python_callable() == [
        {"alias": "prod", "conn_id": "kafka_prod"}, {"alias": "dev", "conn_id": "kafka_dev"},
    ]
    # the assets name the store under the option's home; the environment is left as it was
    capture_uri = snapshot.get_task("capture").outlets[0].uri
    assert capture_uri == (other / "snapshots").as_uri()
    assert [a.uri for a in incarnations.get_task("build").inlets] == [capture_uri]
    assert all(a.uri.startswith(other.as_uri()) for a in incarnations.get_task("publish").outlets)
    assert os.environ["TOPIC_LINEAGE_HOME"] == str(home)
    build = incarnations.get_task("build")
    assert build._conn_id == "spark_cluster"
    opts = build.topic_lineage_options
    assert opts.archive_dir == str(tmp_path / "archive")
    assert opts.environment() == {
        "TOPIC_LINEAGE_HOME": str(other), "TOPIC_LINEAGE_SPARK_REMOTE": "sc://spark:15002",
    }
    assert incarnations.get_task("plan").topic_lineage_options is opts
    # spark_master replaces the connection's master in the provider's spark-submit, and the
    # standalone REST endpoint the provider derived from the connection's host goes with it
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps({
        "conn_type": "spark", "host": "spark://nowhere:7077", "extra": {"deploy-mode": "cluster"}}))
    hook = build._get_hook()
    assert hook._connection["master"] == "local[3]"
    assert hook._connection["rest_endpoint"] is None
    assert not hook._is_yarn and not hook._is_kubernetes
    # a driver that runs elsewhere gets no JVM options naming this machine's files ...
    assert "spark.driver.extraJavaOptions" not in hook._conf
    # ... one that runs here starts as the CLI's driver does (the class archive, the quick JIT)
    from topic_lineage.spark import QUICK_JIT_OPTION, driver_java_options

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps({
        "conn_type": "spark", "host": "spark://nowhere:7077"}))
    options = build._get_hook()._conf["spark.driver.extraJavaOptions"]
    assert options == driver_java_options(quick_jit=True) and QUICK_JIT_OPTION in options


def test_kafka_conn_id_is_the_default_clusters_connection(home, monkeypatch):
    from topic_lineage.airflow import topic_lineage_dags

    monkeypatch.delenv("AIRFLOW_VAR_TOPIC_LINEAGE_CLUSTERS", raising=False)
    monkeypatch.setenv("AIRFLOW_VAR_TOPIC_LINEAGE_CLUSTERS", "")
    dags = topic_lineage_dags(kafka_conn_id="kafka_main")
    assert dags["kafka_topic_snapshot"].get_task("clusters").python_callable() == [
        {"alias": "default", "conn_id": "kafka_main"}
    ]


def test_options_environment_restores(monkeypatch):
    from topic_lineage.airflow.config import DagOptions, options_environment

    monkeypatch.delenv("TOPIC_LINEAGE_SPARK_REMOTE", raising=False)
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", "/before")
    opts = DagOptions.from_kwargs({"home": "/after", "spark_connect_url": "sc://x:1"})
    with options_environment(opts):
        assert os.environ["TOPIC_LINEAGE_HOME"] == "/after"
        assert os.environ["TOPIC_LINEAGE_SPARK_REMOTE"] == "sc://x:1"
    assert os.environ["TOPIC_LINEAGE_HOME"] == "/before"
    assert "TOPIC_LINEAGE_SPARK_REMOTE" not in os.environ
    with options_environment(DagOptions()):
        assert os.environ["TOPIC_LINEAGE_HOME"] == "/before"
