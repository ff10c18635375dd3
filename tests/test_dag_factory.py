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


def test_a_url_home_passes_through_intact_and_an_unusable_one_is_one_line(home):
    """``home="s3://bucket/prefix"`` reaches the tasks as written (it was once made a path,
    ``s3:/bucket/prefix``), and the assets name the bucket; a URL the project cannot use
    stops the DAG file with the location's one line."""
    from topic_lineage.airflow import topic_lineage_dags
    from topic_lineage.airflow.config import DagOptions
    from topic_lineage.location import LocationError

    opts = DagOptions.from_kwargs({"home": "s3://lineage-bucket/prod/home"})
    assert opts.environment()["TOPIC_LINEAGE_HOME"] == "s3://lineage-bucket/prod/home"
    dags = topic_lineage_dags(home="s3://lineage-bucket/prod/home")
    assert dags["kafka_topic_snapshot"].get_task("capture").outlets[0].uri == (
        "s3://lineage-bucket/prod/home/snapshots")
    assert {a.uri for a in dags["topic_incarnations"].get_task("publish").outlets} >= {
        "s3://lineage-bucket/prod/home/warehouse/topic_incarnations"}
    assert DagOptions.from_kwargs({"home": "~/lineage"}).home == str(Path("~/lineage").expanduser())
    for bad, says in (("s3:lineage-bucket/home", "write the URL as s3://bucket/prefix"),
                      ("hdfs://nn/home", "hdfs:// is none of them")):
        with pytest.raises(LocationError) as raised:
            topic_lineage_dags(home=bad)
        message = str(raised.value)
        assert message.startswith("topic_lineage_dags(home=...): ") and says in message
        assert "\n" not in message


SECRET_KEY = "wJalrXUtnFEMI-secret-0f3c"


@pytest.fixture
def s3_connection(monkeypatch):
    """An Amazon provider ``aws`` connection as Airflow keeps it (here from the environment)."""
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_S3", json.dumps({
        "conn_type": "aws", "login": "AKIDLINEAGE", "password": SECRET_KEY,
        "extra": {"region_name": "eu-west-1", "endpoint_url": "http://s3.internal:8333",
                  "service_config": {"s3": {"endpoint_url": "http://s3-only.internal:8333"}}}}))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "TOPIC_LINEAGE_WORK_DIR"):
        monkeypatch.delenv(name, raising=False)
    return "lineage_s3"


def test_the_object_store_connection_fills_the_task_environment_and_its_own_working_copy(
        s3_connection, tmp_path, monkeypatch):
    """With the home on S3, a task's body runs with the connection's ``AWS_*`` variables and a
    new working copy in its TMPDIR; both are gone when it ends."""
    from topic_lineage import tables
    from topic_lineage.airflow.config import DagOptions, task_environment

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", "/before")
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    opts = DagOptions.from_kwargs({"home": "s3://lineage-bucket/home",
                                   "object_store_conn_id": s3_connection})
    before = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}  # e.g. AWS_CA_BUNDLE
    with task_environment(opts):
        assert {k: os.environ[k] for k in os.environ if k.startswith("AWS_") and k not in before} == {
            "AWS_ACCESS_KEY_ID": "AKIDLINEAGE", "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-1",
            "AWS_ENDPOINT_URL": "http://s3.internal:8333",
            "AWS_ENDPOINT_URL_S3": "http://s3-only.internal:8333"}
        work = tables.home()
        assert work.parent == tmp_path and work.name.startswith("topic-lineage-task-")
        (work / "snapshots").mkdir()
    assert not work.exists()
    assert {k: v for k, v in os.environ.items() if k.startswith("AWS_")} == before
    assert os.environ["TOPIC_LINEAGE_HOME"] == "/before" and "TOPIC_LINEAGE_WORK_DIR" not in os.environ
    # a working copy the user configured is kept; a local home gets neither
    monkeypatch.setenv("TOPIC_LINEAGE_WORK_DIR", str(tmp_path / "lasting"))
    with task_environment(opts):
        assert tables.home() == tmp_path / "lasting"
    assert (tmp_path / "lasting").is_dir()
    monkeypatch.delenv("TOPIC_LINEAGE_WORK_DIR")
    with task_environment(DagOptions.from_kwargs({"home": str(tmp_path / "local"),
                                                  "object_store_conn_id": "nowhere"})):
        assert "AWS_ACCESS_KEY_ID" not in os.environ and "TOPIC_LINEAGE_WORK_DIR" not in os.environ


def test_a_missing_or_unusable_object_store_connection_is_one_line_naming_it(s3_connection, monkeypatch):
    from topic_lineage.airflow.config import DagOptions, OrchestrationError, task_environment

    monkeypatch.delenv("AIRFLOW_CONN_LINEAGE_GONE", raising=False)
    cases = {
        "lineage_gone": "does not exist",
        "lineage_role": "role_arn (assuming a role) is not supported",
        "lineage_half": "give both the access key id (login) and the secret access key",
    }
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_ROLE", json.dumps(
        {"conn_type": "aws", "extra": {"role_arn": "arn:aws:iam::1:role/x"}}))
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_HALF", json.dumps(
        {"conn_type": "aws", "password": SECRET_KEY}))
    for conn_id, says in cases.items():
        opts = DagOptions.from_kwargs({"home": "s3://lineage-bucket/home",
                                       "object_store_conn_id": conn_id})
        with pytest.raises(OrchestrationError) as raised, task_environment(opts):
            pass
        message = str(raised.value)
        assert f"Airflow connection {conn_id!r}" in message and says in message, message
        assert "\n" not in message and SECRET_KEY not in message
    assert "AWS_SECRET_ACCESS_KEY" not in os.environ


@pytest.mark.s3
def test_the_build_spark_submit_gets_the_credentials_by_its_environment_only(
        s3_connection, s3_bucket, monkeypatch):
    """The spark-submit of ``build`` inherits the connection's variables; its command line
    (which Airflow's event log and ``ps`` show) holds none of them. (The hook looks at the
    store on the real S3 server, with the connection's credentials, to choose the driver's
    JIT.)"""
    from topic_lineage.airflow import topic_lineage_dags
    from topic_lineage.airflow.config import task_environment

    real = s3_bucket.env()
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_S3", json.dumps({
        "conn_type": "aws", "login": real["AWS_ACCESS_KEY_ID"],
        "password": real["AWS_SECRET_ACCESS_KEY"],
        "extra": {"region_name": real["AWS_REGION"], "endpoint_url": real["AWS_ENDPOINT_URL"]}}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    dags = topic_lineage_dags(home=s3_bucket.url("home"), object_store_conn_id=s3_connection)
    build = dags["topic_incarnations"].get_task("build")
    with task_environment(build.topic_lineage_options):
        hook = build._get_hook()
        hook._application_args = ["--version-id", "v1"]  # the plan's XCom, at run time
        command = hook._build_spark_submit_command(build.application)
        # what the child inherits
        assert os.environ["AWS_SECRET_ACCESS_KEY"] == real["AWS_SECRET_ACCESS_KEY"]
    assert hook._env is None  # no env_vars: the child's environment is this process's
    assert command[0].endswith("spark-submit") and "local[2]" in command
    # the driver's JVM, started by spark-submit, has S3A from its start (build.py cannot add it)
    assert any(part.startswith("spark.jars=") and "hadoop-aws" in part for part in command), command
    assert f"spark.hadoop.fs.s3a.endpoint={real['AWS_ENDPOINT_URL']}" in command
    assert not any(real["AWS_SECRET_ACCESS_KEY"] in part for part in command), command
