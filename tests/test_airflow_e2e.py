"""A real Airflow (api-server, scheduler, dag-processor; SQLite; LocalExecutor) runs the DAGs.

Set up and started with the same helper users run (``topic-lineage airflow setup/start``), with
the Kafka connection pointing at the local broker and snapshots every minute. Scheduled runs
capture a create, a delete and a re-create; then a real ``airflow backfill create`` of
``topic_incarnations`` over a past range (backwards, two runs at a time) and of
``kafka_topic_snapshot`` run. Asserts the run types and states Airflow recorded, that the
backfilled snapshot runs recorded nothing, and the published table. Every Airflow process is
stopped at the end, also on failure.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(1500)]

SNAPSHOT_DAG = "kafka_topic_snapshot"
BUILD_DAG = "topic_incarnations"


def wait_for(what: str, predicate, timeout_s: float, every_s: float = 3.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


@pytest.fixture
def local_airflow(tl_home, broker):
    from topic_lineage.commands import airflow_cmds as ac
    from topic_lineage.local_broker import free_port

    state = ac.setup(
        bootstrap_servers=broker.bootstrap_servers, clusters=None, spark_master="local[2]",
        port=free_port(), snapshot_schedule="* * * * *", build_schedule="@daily",
        archive_dir=None,
    )
    try:
        ac.start(state, wait_s=300)
        yield state
    finally:
        ac.stop()
        assert not ac._running_pids()


def airflow_cli(state, *args: str) -> str:
    from topic_lineage.commands import airflow_cmds as ac

    for _ in range(3):  # SQLite: a busy scheduler can hold the write lock for a while
        out = subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), *args], env=ac._full_env(state),
            capture_output=True, text=True, timeout=300, check=False,
        )
        if out.returncode == 0 or "database is locked" not in out.stderr:
            break
        time.sleep(5)
    assert out.returncode == 0, f"airflow {' '.join(args)}: {out.stderr[-2000:]}"
    return out.stdout


def dag_runs(dag_id: str) -> list[dict]:
    from topic_lineage.commands import airflow_cmds as ac

    with sqlite3.connect(ac.airflow_home() / "airflow.db", timeout=30) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT run_id, run_type, state, logical_date FROM dag_run WHERE dag_id = ?", (dag_id,)
        ).fetchall()
    return [dict(r) for r in rows]


def task_states(dag_id: str, run_id: str) -> dict[str, str]:
    from topic_lineage.commands import airflow_cmds as ac

    with sqlite3.connect(ac.airflow_home() / "airflow.db", timeout=30) as db:
        rows = db.execute(
            "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
            (dag_id, run_id),
        ).fetchall()
    return dict(rows)


def stored_after(moment: datetime, topic_count: int):
    from topic_lineage import store

    return [
        r for r in store.read_runs()
        if r["captured_at"] > moment and r["topic_count"] == topic_count and r["source"] == "live"
    ]


def test_real_airflow_schedules_snapshots_and_backfills(local_airflow, broker, tl_home):
    from topic_lineage import store, warehouse

    state = local_airflow
    # --- scheduled snapshots see a create, a delete and a re-create ------------------------
    broker.create_topics(["orders", "payments"])
    t0 = datetime.now(UTC)
    wait_for("a scheduled snapshot with both topics", lambda: stored_after(t0, 2), 300)
    broker.delete_topics(["orders"])
    t1 = datetime.now(UTC)
    wait_for("a scheduled snapshot after the deletion", lambda: stored_after(t1, 1), 240)
    broker.create_topics([("orders", 2)])
    t2 = datetime.now(UTC)
    wait_for("a scheduled snapshot after the re-creation", lambda: stored_after(t2, 2), 240)
    scheduled = [r for r in dag_runs(SNAPSHOT_DAG) if r["run_type"] == "scheduled"]
    assert len(scheduled) >= 3 and any(r["state"] == "success" for r in scheduled)

    # --- a real backfill of the snapshot DAG over a past hour records nothing -----------------
    # (runs of a paused DAG are not scheduled, backfills included: pause only afterwards)
    hour_ago = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    airflow_cli(
        state, "backfill", "create", "--dag-id", SNAPSHOT_DAG, "--from-date",
        hour_ago.isoformat(), "--to-date", (hour_ago + timedelta(minutes=2)).isoformat(),
    )

    def finished_backfills(dag_id: str, at_least: int):
        runs = [r for r in dag_runs(dag_id) if r["run_type"] == "backfill"]
        done = [r for r in runs if r["state"] not in ("queued", "running")]
        return runs if len(runs) >= at_least and len(done) == len(runs) else None

    snapshot_backfills = wait_for(
        "the snapshot backfill", lambda: finished_backfills(SNAPSHOT_DAG, 2), 300, every_s=5
    )
    for run in snapshot_backfills:
        assert task_states(SNAPSHOT_DAG, run["run_id"])["capture"] == "skipped", run
    airflow_cli(state, "dags", "pause", SNAPSHOT_DAG)
    wait_for(
        "running snapshot runs to end",
        lambda: all(r["state"] not in ("queued", "running") for r in dag_runs(SNAPSHOT_DAG)),
        300,
    )
    # captured_at is always the real capture time: nothing was dated in the past
    assert all(r["captured_at"] >= t0 for r in store.read_runs())

    # --- a real backfill of topic_incarnations, backwards, two runs at a time -----------------
    today = datetime.now(UTC).date()
    airflow_cli(
        state, "backfill", "create", "--dag-id", BUILD_DAG,
        "--from-date", str(today - timedelta(days=3)), "--to-date", str(today - timedelta(days=2)),
        "--run-backwards", "--max-active-runs", "2",
    )
    wait_for("the topic_incarnations backfill", lambda: finished_backfills(BUILD_DAG, 2), 900,
             every_s=10)
    wait_for(
        "every topic_incarnations run to finish",
        lambda: all(r["state"] not in ("queued", "running") for r in dag_runs(BUILD_DAG)),
        600, every_s=10,
    )

    build_backfills = [r for r in dag_runs(BUILD_DAG) if r["run_type"] == "backfill"]
    assert len(build_backfills) >= 2
    assert {r["state"] for r in build_backfills} == {"success"}, build_backfills
    for run in build_backfills:
        states = task_states(BUILD_DAG, run["run_id"])
        assert states["build"] == "success" and states["validate"] == "success", states
        assert states["publish"] in ("success", "skipped")  # skipped: same snapshots published
    asset_runs = [r for r in dag_runs(BUILD_DAG) if r["run_type"] == "asset_triggered"]
    assert asset_runs, "the snapshots' asset events triggered no build"

    # --- the published tables cover every stored snapshot --------------------------------------
    current = warehouse.current_version()
    assert current is not None
    manifest = warehouse.read_manifest(current)
    root = tl_home / "snapshots"
    assert set(manifest["snapshot_files"]) == {
        str(p.relative_to(root.resolve())) for p in store.snapshot_files()
    }
    import pyarrow.dataset as ds

    rows = ds.dataset(
        str(warehouse.version_path(current, "topic_incarnations")), format="parquet"
    ).to_table().to_pylist()
    orders = [r for r in rows if r["topic_name"] == "orders"]
    assert len({r["topic_id"] for r in orders}) == 2  # deleted and re-created: two incarnations
    assert sorted(r["is_current"] for r in orders) == [False, True]
    assert [r["deleted_at"] is not None for r in orders if not r["is_current"]] == [True]
    assert len([r for r in rows if r["topic_name"] == "payments" and r["is_current"]]) == 1
