"""The home on object storage (issue #45): ``TOPIC_LINEAGE_HOME=s3://bucket/prefix`` on a real
S3 server (SeaweedFS on loopback), the Iceberg catalog on PostgreSQL, and every step in a
process of its own with its own empty ``HOME``, ``TMPDIR`` and working copy: the steps share
only the bucket and the catalog, as Airflow tasks on different workers do. The tables equal
those of the same history built on the local disk.

The store's writes are whole objects; a snapshot's name is claimed with a conditional write, so
a different snapshot under the same name is a conflict whoever writes second; a location that
refuses the credentials is one clear line and changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.object_store_support import (
    HISTORY,
    ROOT,
    Worker,
    local_tables,
    query_all,
    shared_env,
    store_steps,
)

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]


@pytest.fixture
def shared(s3_bucket, iceberg_postgres, tmp_path):
    return shared_env(s3_bucket.env(), s3_bucket.url("home"), iceberg_postgres(tmp_path.name))

def test_every_step_on_its_own_worker_shares_only_the_bucket_and_the_catalog(shared, s3_bucket, broker, tmp_path,
                                                                           tmp_path_factory):
    """Store, build, validate, publish and query each in a fresh process; then more snapshots
    and an incremental build on yet another: the tables equal a local full build's of the
    same snapshots (``local_tables``: the session's one reference, which
    test_a_build_on_standalone_workers_that_share_no_directory and the other object-store
    tests compare with too).

    Before that build, two live captures from a real broker (a cluster of its own, ``prod``),
    a delete and re-create between them; after it, the OpenLineage export on one worker and
    again on another: prod's datasets are named by the bootstrap server the capture used, and
    the second export sends nothing (what was sent is recorded on the object store, not on the
    first worker's disk). First of all, a build with a secret the server refuses: one line naming
    the variables to check, and nothing on the bucket changes; the same once a version is
    published (the catalog's metadata file is then the first thing read)."""
    from tests.lineage_receiver import Receiver, by_kind

    store_steps(Worker(shared, tmp_path / "capture-1").env, HISTORY[0])
    # a build with a secret the server refuses: one line, and nothing on the bucket changes
    stored = s3_bucket.keys("home/")
    wrong = Worker({**shared, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}, tmp_path / "wrong")
    _build_is_refused_in_one_line(wrong)
    assert s3_bucket.keys("home/") == stored

    Worker(shared, tmp_path / "build-1").run("build", "--no-publish", "--no-validate",
                                              "--version-id", "v1")
    verdict = Worker(shared, tmp_path / "gate-1").run("validate", "--version", "v1")
    assert "passed" in verdict.stdout.lower(), verdict.stdout
    Worker(shared, tmp_path / "publish-1").run("publish", "v1")
    # the published version read from PostgreSQL and the metadata file on S3 with their own
    # drivers (a no-op build's path, no pyiceberg) is what pyiceberg reads
    readers = subprocess.run(
        [sys.executable, "-c", ("from topic_lineage.warehouse import iceberg as i; "
         "n, p, _ = i.catalog_properties(); "
         "print(i._sql_published_version(n, p), i._pyiceberg_published_version())")],
        env=Worker(shared, tmp_path / "readers").env, capture_output=True, text=True,
        cwd=str(ROOT), timeout=120, check=True)
    assert readers.stdout.split() == ["v1", "v1"], readers.stdout + readers.stderr
    first = query_all(Worker(shared, tmp_path / "query-1"))
    assert len(json.loads(first["incarnations"])) > 40
    # the same refused secret once a version is published (the catalog's metadata file on S3
    # is the first thing read): the same one line, naming what to check
    _build_is_refused_in_one_line(wrong)
    # the UI on a worker of its own (the API server's machine) shows the gate's verdict and
    # serves its Data Docs pages, which the gate stored on the bucket
    ui = _ui_requests(Worker(shared, tmp_path / "ui-1"))
    assert ui["gate"]["available"] and ui["gate"]["version"] == "v1" and ui["gate"]["success"], ui["gate"]
    assert ui["pages"] and all(status == 200 and "v1" in text for status, text in ui["pages"]), ui["pages"]
    assert ui["index"][0] == 200 and "v1" in ui["index"][1], ui["index"]

    bootstrap = broker.bootstrap_servers
    broker.create_topics([("orders", 2), "payments"])
    Worker(shared, tmp_path / "live-1").run("snapshot", "--cluster", "prod", "--bootstrap-servers", bootstrap)
    broker.delete_topics(["orders"])
    broker.create_topics([("orders", 2)])
    Worker(shared, tmp_path / "live-2").run("snapshot", "--cluster", "prod", "--bootstrap-servers", bootstrap)
    store_steps(Worker(shared, tmp_path / "capture-2").env, *HISTORY[1:])
    built = Worker(shared, tmp_path / "build-2").run("build", "--version-id", "v2")
    assert "incremental" in built.stdout + built.stderr, built.stdout + built.stderr
    second = query_all(Worker(shared, tmp_path / "query-2"))
    assert second != first
    # the seeded clusters' rows equal the local build's; prod's are the live captures'
    seeded = {row["cluster_id"] for row in json.loads(first["runs"])}
    local = local_tables(tmp_path_factory)
    assert _only_clusters(second, seeded) == _only_clusters(local, seeded)
    prod_runs = [row for row in json.loads(second["runs"]) if row["cluster_id"] not in seeded]
    assert len(prod_runs) == 2 and all(row["complete"] for row in prod_runs), prod_runs
    incarnations = json.loads(Worker(shared, tmp_path / "query-orders").run(
        "query", "--format", "json",
        "SELECT topic_id, deleted_at IS NULL AS live FROM topic_incarnations WHERE topic_name = 'orders'").stdout)
    assert sorted(row["live"] for row in incarnations) == [False, True], incarnations

    with Receiver() as receiver:
        lineage = Worker({**shared, "OPENLINEAGE_URL": receiver.url}, tmp_path / "lineage-1")
        lineage.run("lineage", "emit")
        sent = len(receiver.events)
        assert ("DROP", "orders") in {(kind, name) for kind, name, _ in by_kind(receiver.events)}
        # prod's datasets are named by the bootstrap server the capture used (recorded on the
        # store by the capture's worker), not by the cluster's alias
        datasets = [d for e in receiver.events for d in e.get("outputs", []) + e.get("inputs", [])]
        named = {d["namespace"] for d in datasets if d["name"].endswith(("orders", "payments"))}
        assert named == {f"kafka://{bootstrap.split(',')[0]}"}, named
        again = Worker({**shared, "OPENLINEAGE_URL": receiver.url}, tmp_path / "lineage-2")
        again.run("lineage", "emit")
        assert len(receiver.events) == sent > 0

    listed = s3_bucket.keys("home/")
    assert any(k.startswith("home/snapshots/cluster=") for k in listed)
    assert any(k.startswith("home/warehouse/versions/v2/topic_incarnations/") for k in listed)
    assert any(k.startswith("home/warehouse/iceberg/") and k.endswith(".metadata.json") for k in listed)
    assert any(k.startswith("home/warehouse/openlineage/emitted/") for k in listed)
    # nothing of a step's own outlives it on another's disk: each worker has only its own copy
    assert not (tmp_path / "query-2" / "work" / "warehouse" / "catalog.db").exists()


def _build_is_refused_in_one_line(wrong) -> None:
    """A build on ``wrong`` (a worker whose secret the server refuses): exit 2 and one line that
    names the variables to check, without the secret."""
    done = wrong.run("build", check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    message = done.stderr.strip()
    assert message.count("\n") == 0 and "Traceback" not in message, message
    assert "refused the credentials" in message and "AWS_SECRET_ACCESS_KEY" in message, message
    assert "not-the-secret" not in message


def _only_clusters(tables: dict[str, str], clusters: set[str]) -> dict[str, list[dict]]:
    """The rows of ``tables`` (what :data:`QUERIES` answer) of ``clusters`` only (those of a
    table without a cluster column all)."""
    kept = {}
    for name, text in tables.items():
        rows = json.loads(text)
        kept[name] = [row for row in rows if "cluster_id" not in row or row["cluster_id"] in clusters]
    return kept


UI_REQUESTS = """
import json
from fastapi.testclient import TestClient
from topic_lineage.ui.app import create_app
client = TestClient(create_app(lambda: "worker"))
gate = client.get("/api/gate").json()
pages = [client.get("/data-docs/" + link) for link in (gate.get("detail_pages") or {}).values()]
index = client.get("/data-docs/data_docs/index.html")
print(json.dumps({"gate": gate, "pages": [(p.status_code, p.text) for p in pages],
                  "index": (index.status_code, index.text)}))
"""


def _names(text: str, word: str) -> bool:
    """``word`` in ``text`` as a value of its own (``key=word``, ``--opt word``), not as part of a
    longer name (the server's access key, ``topic-lineage``, is also this project's name, in the
    paths of the jars on every command line)."""
    return re.search(rf"(?<![\w./-]){re.escape(word)}(?![\w./-])", text) is not None


def _ui_requests(worker: Worker) -> dict:
    """The UI's gate result, the Data Docs pages it links and the site index, from a process
    on ``worker``."""
    done = subprocess.run([sys.executable, "-c", UI_REQUESTS], env=worker.env, capture_output=True,
                          text=True, cwd=str(worker.root), timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_different_snapshot_under_a_stored_name_is_a_conflict_on_any_worker(shared, tmp_path):
    code = """
import os, sys
from datetime import UTC, datetime
from topic_lineage import store
from topic_lineage.snapshot import Snapshot, TopicObservation
name = sys.argv[1]
topics = (TopicObservation(name, "AAAAAAAAAAAAAAAAAAAAAA", 1, 1, False, None),)
snap = Snapshot("c1", "one", datetime(2026, 11, 1, tzinfo=UTC), True, topics)
try:
    print(store.save(snap))
except store.SnapshotConflictError as exc:
    print("CONFLICT", exc)
"""
    runs = [subprocess.run([sys.executable, "-c", code, topic], env=Worker(shared, tmp_path / f"w{i}").env,
                           capture_output=True, text=True, cwd=str(ROOT), timeout=120, check=False)
            for i, topic in enumerate(["orders", "orders", "payments"])]
    outs = [r.stdout.strip() + r.stderr.strip()[-300:] for r in runs]
    assert outs[0].startswith("1 snapshot(s) stored"), outs
    assert outs[1].startswith("0 snapshot(s) stored, 1 already present"), outs
    assert outs[2].startswith("CONFLICT") and "already stored" in outs[2], outs
    listed = Worker(shared, tmp_path / "reader").run("snapshots").stdout
    assert "c1" in listed and listed.count("2026-11-01") == 1, listed


def test_a_build_on_standalone_workers_that_share_no_directory(shared, s3_bucket, tmp_path, tmp_path_factory,
                                                                monkeypatch):
    """Spark's standalone master with two workers, each in its own working directory; the
    store and the version only on S3. The walk tasks run on the workers' executors, read the
    snapshots and write the version through S3, and the tables equal a local build's. The
    clusters are split into ranges of two snapshots (``TOPIC_LINEAGE_WALK_RANGE_FILES``): the
    range tasks' steps go through S3 too. The executors keep nothing: their ``HOME`` (a
    directory of the test's) holds no file of topic-lineage's afterwards (each build used to
    leave its saved walks and steps in the executors' ``~/.cache``).

    First, on the same cluster, Spark's own Parquet writer and reader (``tests/spark_s3_job.py``,
    as in tests/test_spark_s3.py): the executors, not the driver, write and read the files
    through S3A, with the jars the driver gave them, the credentials of their environment and
    the magic committer (``df.write.mode("error").parquet("s3://...")``: only data files and
    ``_SUCCESS`` remain). What Spark shows of its settings and what ``ps`` shows of the
    driver's processes carry neither the secret nor the access key ID."""
    from tests.servers.standalone import standalone_cluster
    from tests.spark_s3_job import run_job

    for key, value in s3_bucket.env().items():  # the workers' (and so the executors') credentials
        monkeypatch.setenv(key, value)
    executors_home = tmp_path / "executors-home"  # the workers' (and so the executors') HOME
    executors_home.mkdir()
    monkeypatch.setenv("HOME", str(executors_home))
    store_steps(Worker(shared, tmp_path / "capture").env, *HISTORY)
    with standalone_cluster(workers=2, cores_per_worker=1, memory="1g", work_dir=tmp_path / "cluster",
                            quick_jit=True) as cluster:
        roundtrip = run_job({"action": "roundtrip", "url": s3_bucket.url("spark/x"), "rows": 5000,
                             "master": cluster.master_url, "placement": True,
                             "conf": cluster.driver_conf(executor_memory="512m"),
                             "locations": [s3_bucket.url("spark")]}, dict(os.environ))
        driver = Worker(shared, tmp_path / "driver")
        driver.env["PYSPARK_SUBMIT_ARGS"] = " ".join(
            [f"--conf {k}={v}" for k, v in cluster.driver_conf(executor_memory="512m").items()]
            + ["pyspark-shell"])
        driver.env["TOPIC_LINEAGE_WALK_RANGE_FILES"] = "2"
        driver.run("build", "--version-id", "vs", "--master", cluster.master_url)

    assert roundtrip.get("error") is None, roundtrip["error"]
    assert roundtrip["count"] == 5000 and roundtrip["same_rows"]
    names = [path.rsplit("/", 1)[1] for path in roundtrip["listing"]]
    assert "_SUCCESS" in names and len([name for name in names if name.endswith(".parquet")]) == 4, names
    assert not [path for path in roundtrip["listing"] if "_temporary" in path or "__magic" in path]
    assert roundtrip["success_committer"] == "magic"  # no copy-and-delete "rename" on S3
    assert roundtrip["conf"]["spark.sql.sources.commitProtocolClass"].endswith("PathOutputCommitProtocol")
    # the driver still maps the installation's archive of Spark's classes, the S3A jars added
    assert roundtrip["maps_archive"] in (True, None)
    # what Spark shows (its settings, as the UI and event log would) and what ps shows of the
    # driver's processes carry neither the secret nor the access key ID
    assert roundtrip["conf"]["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        "EnvironmentVariableCredentialsProvider")
    secret, access_key = s3_bucket.server.secret_key, s3_bucket.server.access_key
    assert not [key for key, value in roundtrip["conf"].items() if secret in value]
    assert not [line for line in roundtrip["cmdlines"] if secret in line]
    assert not [key for key, value in roundtrip["conf"].items() if _names(value, access_key)]
    assert not [line for line in roundtrip["cmdlines"] if _names(line, access_key)]
    assert any("hadoop-aws-3.5.0.jar" in line for line in roundtrip["cmdlines"])  # the JVM's, seen
    assert {row["executor_id"] for row in roundtrip["placement"]} == {"0", "1"}, roundtrip["placement"]
    # the jars went to that application's executors from the driver: each worker has them
    application = roundtrip["conf"]["spark.app.id"]
    for worker in ("worker-1", "worker-2"):
        fetched = list((tmp_path / "cluster" / worker).glob(f"{application}/*/hadoop-aws-3.5.0.jar"))
        assert fetched, f"{worker} got no hadoop-aws jar"

    fs = s3_bucket.filesystem()
    with fs.open_input_stream(f"{s3_bucket.name}/home/warehouse/versions/vs/manifest.json") as f:
        manifest = json.loads(f.read())
    executors = {task["executor"] for task in manifest["walk_tasks"].values()}
    assert executors and executors <= {"0", "1"}, manifest["walk_tasks"]
    ranges = [part for task in manifest["walk_tasks"].values() for part in task.get("ranges", [])]
    assert len(ranges) > 2 and {part["executor"] for part in ranges} <= {"0", "1"}, manifest["walk_tasks"]
    # the executors kept nothing of the build: no saved walk, no steps, no working copy
    left = [str(path.relative_to(executors_home)) for path in executors_home.rglob("*") if path.is_file()]
    assert not [name for name in left if "topic-lineage" in name], left
    assert query_all(Worker(shared, tmp_path / "query")) == local_tables(tmp_path_factory)
    # the executors' directories hold no snapshot file: they read the store on S3
    assert not list((tmp_path / "cluster").rglob("*.parquet"))
