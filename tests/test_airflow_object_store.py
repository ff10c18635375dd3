"""The local Airflow with ``TOPIC_LINEAGE_HOME`` on object storage, started as the docs say, the
store's credentials only in an Airflow connection (issue #45: "an Airflow connection by conn_id
in DAGs"; "Airflow tasks on different workers").

``topic-lineage airflow setup --object-store-conn-id lineage_s3`` then ``start --detach``, with
the home on a bucket of the tests' S3 server (SeaweedFS), the Iceberg catalog on PostgreSQL and
no ``AWS_*`` variable in the deployment's environment; the connection (type ``aws``: login,
password, extra ``region_name`` and ``endpoint_url``) is created through the REST API, as the UI's
*Admin > Connections* form does. Two snapshots of a real broker (a topic deleted and re-created
between them), then ``topic_incarnations``: capture, plan, build (spark-submit), validate,
publish, health and the OpenLineage export each run in a task process with a working copy of
its own, sharing only the bucket and the catalog. Then:

- every task of the building run succeeded, and every run;
- the published tables equal those of a build on the local disk of the same stored snapshots;
- no file of the home was written under the deployment's local directories, and every task's
  working copy is gone;
- the connection's secret key is in no event log entry, task log, file of the deployment, nor
  the command line of any process seen while the DAGs ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from browser_support import wait_for
from test_airflow_local_deployment import (
    Api,
    cli,
    dag_runs,
    files_containing,
    private_root,
    task_instances,
    trigger,
)

from tests.object_store_support import CLI, QUERIES, Worker, query_all, run_queries, shared_env

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.broker, pytest.mark.s3,
              pytest.mark.spark, pytest.mark.timeout(1800)]

SNAPSHOT_DAG, BUILD_DAG = "kafka_topic_snapshot", "topic_incarnations"
CONN_ID = "lineage_s3"
BUILDING_RUN = {"plan", "build", "validate", "publish", "health", "lineage"}


def secret_on_a_command_line(secret: bytes) -> list[str]:
    """The processes whose command line holds ``secret`` now."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if secret in cmdline.read_bytes():
                found.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200])
        except OSError:
            continue
    return found


def run_to_the_end(api: Api, dag_id: str, run_id: str, secret: bytes, timeout_s: float) -> str:
    """Wait for a run to end, looking at every process's command line meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert secret_on_a_command_line(secret) == []
        state = next(r for r in dag_runs(api, dag_id) if r["dag_run_id"] == run_id)["state"]
        if state in ("success", "failed"):
            return state
        time.sleep(0.5)
    raise AssertionError(f"{dag_id} run {run_id} not done after {timeout_s:.0f} s")


def copy_the_store(bucket, local_home: Path) -> int:
    """The snapshot store's files from the bucket into a local home (hidden claims and the
    generation token are the object store's own: left out)."""
    import pyarrow.fs as pafs

    fs = bucket.filesystem()
    copied = 0
    for folder in ("snapshots", "group_snapshots"):
        infos = fs.get_file_info(pafs.FileSelector(f"{bucket.name}/home/{folder}", recursive=True,
                                                   allow_not_found=True))
        for info in infos:
            if info.type != pafs.FileType.File or info.base_name.startswith((".", "_")):
                continue
            target = local_home / info.path.split("/home/", 1)[1]
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(info.path) as source:
                target.write_bytes(source.read())
            copied += 1
    return copied


class LocalBuild:
    """``topic-lineage build --full-refresh`` of a local home in the background (started while
    Airflow builds on the bucket), then :data:`QUERIES` on its tables."""

    def __init__(self, store_files_home: Path, tmp_path: Path):
        self.proc: subprocess.Popen | None = None
        self.cwd = tmp_path
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PYICEBERG_", "TOPIC_LINEAGE_", "AWS_"))}
        self.env.update(TOPIC_LINEAGE_HOME=str(store_files_home), HOME=str(tmp_path / "local-user"))
        self.log = tmp_path / "local-build.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([CLI, "build", "--full-refresh"], env=self.env, cwd=str(tmp_path),
                                         stdout=out, stderr=subprocess.STDOUT)

    def tables(self) -> dict[str, str]:
        code = self.proc.wait(timeout=600)
        assert code == 0, f"local build exited {code}: {self.log.read_text()[-3000:]}"
        answers = run_queries(self.env, self.cwd, [["--format", "json", sql] for sql in QUERIES.values()])
        return dict(zip(QUERIES, answers, strict=True))

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def local_build(tmp_path):
    """``start(home)``: a :class:`LocalBuild` of ``home``, killed at the end if still running."""
    builds = []

    def start(home: Path) -> LocalBuild:
        builds.append(LocalBuild(home, tmp_path))
        return builds[-1]

    yield start
    for build in builds:
        build.kill()


@pytest.fixture
def deployment(broker, s3_bucket, iceberg_postgres, tmp_path):
    """`topic-lineage airflow setup --object-store-conn-id ...` + `start --detach` with the home
    on the bucket and nothing of the store's credentials in the environment; stopped at the
    end."""
    from lineage_receiver import Receiver

    root = private_root("tl-airflow-s3-")
    catalog = {"TOPIC_LINEAGE_ICEBERG_CATALOG": "shared", "PYICEBERG_CATALOG__SHARED__TYPE": "sql",
               "PYICEBERG_CATALOG__SHARED__URI": iceberg_postgres(tmp_path.name)}
    receiver = Receiver().__enter__()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "PYICEBERG_", "TOPIC_LINEAGE_", "OPENLINEAGE", "XDG_"))}
    env.update(catalog, HOME=str(root / "user"), TMPDIR=str(root / "tmp"),
               TOPIC_LINEAGE_HOME=s3_bucket.url("home"), OPENLINEAGE_URL=receiver.url,
               AWS_EC2_METADATA_DISABLED="true")  # no instance role to look for on loopback
    for name in ("user", "tmp"):
        (root / name).mkdir()
    started = time.monotonic()
    cli(env, "airflow", "setup", "--bootstrap-servers", broker.bootstrap_servers,
        "--object-store-conn-id", CONN_ID)
    try:
        banner = cli(env, "airflow", "start", "--detach")
        print(f"setup + start: {time.monotonic() - started:.0f}s")
        base = banner.split("UI:", 1)[1].split()[0].rstrip("/")
        password = banner.split("password", 1)[1].split()[0]
        yield {"root": root, "env": env, "api": Api(base, "admin", password), "catalog": catalog,
               "receiver": receiver}
    finally:
        cli(env, "airflow", "stop")
        receiver.__exit__(None, None, None)
        shutil.rmtree(root, ignore_errors=True)


def test_the_dags_on_object_storage_with_the_credentials_in_a_connection(
        deployment, broker, s3_bucket, local_build, tmp_path):
    api, root = deployment["api"], deployment["root"]
    s3 = s3_bucket.env()
    secret = s3["AWS_SECRET_ACCESS_KEY"]
    # The connection, as the UI's form creates it (its password is stored encrypted).
    api.json("/api/v2/connections", "POST", {
        "connection_id": CONN_ID, "conn_type": "aws", "login": s3["AWS_ACCESS_KEY_ID"],
        "password": secret,
        "extra": json.dumps({"region_name": s3["AWS_REGION"], "endpoint_url": s3["AWS_ENDPOINT_URL"]}),
    }, expect=201)
    wait_for(lambda: {d["dag_id"] for d in api.json("/api/v2/dags")["dags"]} >= {SNAPSHOT_DAG, BUILD_DAG},
             120, "both DAGs parsed", interval=1)
    # builds only when asked here (a snapshot's asset event would start one on its own)
    api.json(f"/api/v2/dags/{BUILD_DAG}", "PATCH", {"is_paused": True})

    started = time.monotonic()
    broker.create_topics([("orders", 2), "payments"])
    for snapshot in range(2):
        if snapshot:
            broker.delete_topics(["orders"])
            broker.create_topics([("orders", 2)])
        run = trigger(api, SNAPSHOT_DAG)
        assert run_to_the_end(api, SNAPSHOT_DAG, run["dag_run_id"], secret.encode(), 300) == "success"
        assert task_instances(api, SNAPSHOT_DAG, run["dag_run_id"])["capture"]["state"] == "success"
    # no scheduled capture from now on: the build and the reference read the same snapshots
    api.json(f"/api/v2/dags/{SNAPSHOT_DAG}", "PATCH", {"is_paused": True})
    # The reference: the stored snapshots built on local disk, meanwhile
    assert copy_the_store(s3_bucket, tmp_path / "local-home") >= 2
    reference = local_build(tmp_path / "local-home")
    api.json(f"/api/v2/dags/{BUILD_DAG}", "PATCH", {"is_paused": False})
    run = trigger(api, BUILD_DAG)
    assert run_to_the_end(api, BUILD_DAG, run["dag_run_id"], secret.encode(), 900) == "success"
    # (a run for the snapshots' asset events, queued while the DAG was paused, may come first)
    wait_for(lambda: all(r["state"] in ("success", "failed") for r in dag_runs(api, BUILD_DAG)),
             600, "every topic_incarnations run to end", interval=1)
    assert {r["state"] for r in dag_runs(api, BUILD_DAG) + dag_runs(api, SNAPSHOT_DAG)} == {"success"}
    runs = [{task: ti["state"] for task, ti in task_instances(api, BUILD_DAG, r["dag_run_id"]).items()}
            for r in dag_runs(api, BUILD_DAG)]
    building = [states for states in runs if states["build"] == "success"]
    assert building == [dict.fromkeys(BUILDING_RUN, "success")], runs  # each task its own process
    for states in runs:  # the others found nothing new (plan skipped the rest)
        assert states["plan"] == "success" and set(states.values()) <= {"success", "skipped"}, runs
    print(f"two snapshots and a build through Airflow on S3: {time.monotonic() - started:.0f}s")

    # The published tables equal a local-disk build of the same stored snapshots.
    shared = shared_env(s3, s3_bucket.url("home"), deployment["catalog"]["PYICEBERG_CATALOG__SHARED__URI"])
    reader = Worker(shared, tmp_path / "reader")
    on_s3 = query_all(reader)
    orders = [r for r in json.loads(on_s3["incarnations"]) if r["topic_name"] == "orders"]
    assert len({r["topic_id"] for r in orders}) == 2, orders  # deleted and re-created
    assert on_s3 == reference.tables()
    # the lineage export ran as a task: the drop of the first orders was sent, and recorded
    from lineage_receiver import by_kind

    sent = {(kind, name) for kind, name, _ in by_kind(deployment["receiver"].events)}
    assert ("DROP", "orders") in sent, sent
    listed = s3_bucket.keys("home/")
    assert any(k.startswith("home/warehouse/openlineage/emitted/") for k in listed)

    # Nothing of the home on the deployment's disk; every task's working copy removed.
    assert not list(root.rglob("*.parquet")), list(root.rglob("*.parquet"))[:5]
    # the home's local directory (its working copy's place) holds the deployment's own files only
    [work] = (root / "user" / ".cache" / "topic-lineage").iterdir()
    assert {p.name for p in work.iterdir()} <= {"airflow", "spark-connect.token"}, list(work.iterdir())
    for name in ("snapshots", "group_snapshots", "warehouse", "quality"):
        assert not [p for p in root.rglob(name) if p.is_dir() and "postgres" not in p.parts], name
    assert not list((root / "tmp").glob("topic-lineage-task-*"))

    # The secret key: not in the event log, a task log, any file of the deployment.
    events = api.json("/api/v2/eventLogs?limit=1000")
    assert events["total_entries"] > 0 and secret not in json.dumps(events)
    assert secret not in json.dumps(api.json(f"/api/v2/connections/{CONN_ID}"))
    logs = list(root.rglob("*.log"))
    assert any("credentials of Airflow connection" in p.read_text(errors="replace") for p in logs)
    assert files_containing(root, secret.encode()) == []
