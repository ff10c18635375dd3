"""Shared fixtures: an isolated TOPIC_LINEAGE_HOME, one SparkSession, a real Kafka-protocol broker."""

from __future__ import annotations

import atexit
import os
import shutil
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


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (2 cores, few shuffle partitions)."""
    from topic_lineage.spark import get_spark

    session = get_spark("topic-lineage-tests", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker_session():
    """A real tansu broker (Kafka protocol, in-memory storage) on a free loopback port."""
    from topic_lineage.local_broker import LocalBroker

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
