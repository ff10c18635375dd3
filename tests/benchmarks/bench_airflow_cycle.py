"""Wall time of one snapshot + build + validate + publish cycle through the Airflow DAGs.

Creates N topics (default 1,000) on a fresh local broker, then runs ``kafka_topic_snapshot``
and ``topic_incarnations`` with ``dag.test()`` (real Airflow metadata DB, real tasks: the
capture, spark-submit of the build, the Great Expectations gate, the publish) in a throw-away
TOPIC_LINEAGE_HOME and AIRFLOW_HOME. Prints the time of each task and of the whole cycle.

    .venv/bin/python tests/benchmarks/bench_airflow_cycle.py [--topics 1000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tl-bench-airflow-"))
    os.environ.update({
        "AIRFLOW_HOME": str(work / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "TOPIC_LINEAGE_HOME": str(work / "home"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": args.master}),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TOPIC_LINEAGE_SPARK_MASTER": args.master,
    })
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                   capture_output=True)

    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    from topic_lineage import store, warehouse
    from topic_lineage.local.broker import LocalBroker

    settings.configure_orm()
    with LocalBroker() as broker:
        broker.create_topics([f"topic-{i:05d}" for i in range(args.topics)])
        os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": broker.bootstrap_servers}}
        )
        bag = DagBag(dag_folder=str(REPO / "dags"))
        assert not bag.import_errors, bag.import_errors
        started = time.monotonic()
        snap = bag.dags["kafka_topic_snapshot"].test()
        captured = time.monotonic()
        build = bag.dags["topic_incarnations"].test()
        finished = time.monotonic()

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.run_id.in_([snap.run_id, build.run_id])).all()
        for ti in sorted(tis, key=lambda ti: ti.start_date):
            print(f"  {ti.dag_id:22} {ti.task_id:10} {ti.state:8} {ti.duration or 0:7.1f}s")
    runs = store.read_runs()
    print(f"topics: {runs[0]['topic_count']}; snapshot run {snap.state}, build run {build.state}; "
          f"published {warehouse.current_version()}")
    print(f"snapshot DAG {captured - started:.1f}s + incarnations DAG {finished - captured:.1f}s "
          f"= cycle {finished - started:.1f}s (load average {os.getloadavg()[0]:.1f})")
    return 0 if snap.state == build.state == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
