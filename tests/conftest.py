"""Shared fixtures: an isolated TOPIC_LINEAGE_HOME, one SparkSession, a real Kafka-protocol broker."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# This process's one JVM serves every Spark test, whichever starts it first (the session fixture,
# or a task or command run in-process): 1-2 GiB fills up over the suite and thrashes in GC.
os.environ["TOPIC_LINEAGE_DRIVER_MEMORY"] = "4g"

# Airflow reads its home when first imported: give the test session its own, empty one (never
# ~/airflow), with the repository's dags/ as the DAG folder and no example DAGs.
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="tl-test-airflow-")
atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).resolve().parent.parent / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"


@pytest.fixture
def tl_home(tmp_path, monkeypatch):
    """A fresh, empty TOPIC_LINEAGE_HOME for one test."""
    home = tmp_path / "tl-home"
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def spark():
    """A local SparkSession (2 cores, few shuffle partitions), shared by one test module."""
    from topic_lineage.spark import get_spark

    return get_spark("topic-lineage-tests", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})


@pytest.fixture(scope="module", autouse=True)
def _fresh_spark_context_per_module():
    """Stop whatever SparkContext a module started (through the ``spark`` fixture or a task or
    command run in-process), so the next module starts from an empty driver. The JVM stays (and
    keeps its heap size), but everything a context accumulates over hundreds of builds (its
    status stores, broadcasts, block manager, cached plans) goes: in one context for the whole
    run, the 4 GiB heap filled up late in the suite and joins failed to broadcast."""
    yield
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    if session is not None:
        session.stop()
    elif SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


@pytest.fixture(scope="session")
def broker_session():
    """A real tansu broker (Kafka protocol, in-memory storage) on a free loopback port."""
    from topic_lineage.local.broker import LocalBroker

    with LocalBroker() as broker:
        yield broker


@pytest.fixture
def broker(broker_session):
    """The session broker, with every topic deleted before the test."""
    broker_session.delete_all_topics()
    return broker_session


@pytest.fixture(autouse=True)
def _release_cached_frames(request):
    """Unpersist what a test's transforms persisted, so the shared session's heap stays small."""
    yield
    if "spark" in request.fixturenames:
        request.getfixturevalue("spark").catalog.clearCache()


# The longest test files, started first so that the two workers (scripts/test.sh) do not end
# on them one after the other; order within a file is kept.
_LONGEST_FIRST = (  # by their measured time in a full run (CI rehearsal, 2 workers)
    "test_benchmarks_quick.py",
    "test_airflow_local_deployment.py",
    "test_airflow_own_deployment.py",  # not measured in a full run yet: 3-4 min alone
    "test_faults.py",
    "test_spark_server.py",
    "test_scd_rules.py",
    "test_scd_publish.py",
    "test_dags_run.py",
    "test_quality_gate.py",
    "test_scd_order.py",
    "test_cli.py",
    "test_scd_properties.py",
    "test_bench_dbt.py",
    "test_iceberg_peers.py",  # 4 min alone on a busy machine (two Spark 4.1 starts)
    "test_ui_real_build.py",
    "test_ui_browser.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = item.path.name
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable
