"""Every DAG in dags/ imports cleanly and follows the project's DAG policy.

The DagBag is what Airflow's DAG processor builds; an import error here is a DAG that silently
disappears from the UI. The policy checks are the conventions users rely on (owner, retries,
tags, docs, a schedule that can be backfilled) and that nothing heavy is imported at parse time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

DAGS_DIR = Path(__file__).resolve().parent.parent / "dags"
EXPECTED_DAGS = ("kafka_topic_snapshot", "topic_incarnations")
HEAVY_MODULES = ("pyspark", "great_expectations", "confluent_kafka", "openlineage")


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TOPIC_LINEAGE_HOME", str(tmp_path_factory.mktemp("dagbag-home")))
        return DagBag(dag_folder=str(DAGS_DIR))


def test_every_dag_imports_without_errors(dagbag):
    """A DAG file that raises at import is dropped by Airflow: there must be none."""
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dag_ids) == sorted(EXPECTED_DAGS)


@pytest.mark.parametrize("dag_id", EXPECTED_DAGS)
def test_dag_policy(dagbag, dag_id):
    """Owner, retries with backoff, timeouts, tags, docs and no catch-up on every DAG."""
    dag = dagbag.dags[dag_id]
    assert dag.doc_md and dag_id in dag.doc_md
    assert "topic-lineage" in dag.tags
    assert dag.catchup is False
    assert dag.dagrun_timeout is not None
    for task in dag.tasks:
        assert task.owner == "topic-lineage", task.task_id
        assert task.execution_timeout is not None, task.task_id
        assert task.doc_md or task.doc or getattr(task, "python_callable", None).__doc__, task.task_id
    retried = [t for t in dag.tasks if t.retries > 0]
    assert retried, "some task must retry"
    assert all(t.retry_exponential_backoff for t in retried)


def test_snapshot_dag_maps_one_task_per_cluster(dagbag):
    """The capture task is mapped over the cluster list and labelled by cluster alias."""
    from airflow.sdk import CronDataIntervalTimetable
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    dag = dagbag.dags["kafka_topic_snapshot"]
    capture = dag.get_task("capture")
    assert isinstance(capture, MappedOperator)
    assert "alias" in capture.map_index_template
    assert capture.outlets[0].uri.startswith("file://")
    # A data-interval timetable (a plain cron string gives an EMPTY interval in Airflow 3): the
    # capture task needs the interval to recognise late and backfilled runs.
    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    assert dag.timetable.expression == "*/15 * * * *"


def test_incarnations_dag_is_asset_and_time_scheduled(dagbag):
    """Scheduled on the snapshot asset AND a timetable, so it can be backfilled; publish is
    serialized through a pool of one and build goes through the Spark provider."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import AssetOrTimeSchedule, CronDataIntervalTimetable

    snapshot_dag = dagbag.dags["kafka_topic_snapshot"]
    dag = dagbag.dags["topic_incarnations"]
    # A DAG scheduled only on assets cannot be backfilled (DagNonPeriodicScheduleException).
    assert isinstance(dag.timetable, AssetOrTimeSchedule)
    assert isinstance(dag.timetable.timetable, CronDataIntervalTimetable)
    snapshots_uri = snapshot_dag.get_task("capture").outlets[0].uri
    assert snapshots_uri in [a.uri for a in dag.get_task("build").inlets]
    assert isinstance(dag.get_task("build"), SparkSubmitOperator)
    assert dag.get_task("build")._conn_id == "spark_default"
    assert dag.get_task("publish").pool == "topic_lineage_publish"
    assert dag.get_task("build").pool == "topic_lineage_build"
    assert dag.get_task("build").application.endswith("spark_jobs/build.py")
    assert dag.get_task("validate").pool != "topic_lineage_publish"
    assert {"topic_incarnations", "snapshot_runs", "topic_snapshots"} <= {
        a.uri.rsplit("/", 1)[-1] for a in dag.get_task("publish").outlets
    }
    assert dag.get_task("build").downstream_task_ids == {"validate"}
    # plan decides a no-op run and skips the rest itself (no task process for them)
    from airflow.providers.standard.utils.skipmixin import SkipMixin

    assert isinstance(dag.get_task("plan"), SkipMixin)
    assert dag.get_task("plan").downstream_task_ids == {"build", "validate", "publish", "health",
                                                         "lineage"}
    assert dag.get_task("validate").downstream_task_ids == {"publish"}


def test_no_heavy_imports_at_parse_time(tmp_path):
    """Parsing the DAG files must not import Spark, Great Expectations or confluent-kafka."""
    code = (
        "import sys, runpy\n"
        f"for f in {[str(p) for p in sorted(DAGS_DIR.glob('*.py'))]!r}:\n"
        "    runpy.run_path(f)\n"
        f"heavy = [m for m in sys.modules if m.split('.')[0] in {HEAVY_MODULES!r}]\n"
        "print(sorted(heavy))\n"
    )
    env = {**__import__("os").environ, "TOPIC_LINEAGE_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_ruff_airflow_rules_clean():
    """`ruff check --select AIR dags/` is clean (Airflow 3 API, no deprecated imports)."""
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment")
    out = subprocess.run(
        [str(ruff), "check", "--select", "AIR", str(DAGS_DIR)], capture_output=True, text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
