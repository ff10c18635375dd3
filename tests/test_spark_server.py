"""The deployment's long-lived Spark Connect server (topic_lineage/local/spark_server.py): started and
stopped per home, used by `topic-lineage query` (which then needs no JVM of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gate_support import build_and_publish
from scd_support import snap, tid, topic

from topic_lineage import store
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.fsutil import pid_alive
from topic_lineage.local import spark_server
from topic_lineage.local.broker import free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = Path(sys.executable).with_name("topic-lineage")
SQL = "SELECT topic_name, version, partition_count FROM topic_lineage.topic_incarnations ORDER BY 1, 2"


def query(home: Path, *args: str, java: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home)}
    env.pop(spark_server.REMOTE_ENV, None)
    if not java:  # a local Spark cannot start: only the server can answer
        env["JAVA_HOME"] = str(home / "no-java")
    command = [str(SCRIPT), "query", SQL, "--format", "json", "--engine", "spark", *args]
    return subprocess.run(command, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_query_uses_the_running_server_and_follows_publishes(tl_home, spark, monkeypatch):
    """One server, started as the deployment starts it (its warm process too):

    - one server per home; `topic-lineage query` uses it (no JVM of its own) and follows each
      new publish; ``--version`` needs a local JVM; stopped, the query starts its own Spark
      and DuckDB answers the same;
    - it takes a token: a client without it, or with another, is refused with an
      authentication error; the product's client (which reads the home's 0600 token file) is
      served; without the file it fails naming the file; the token is on no command line, in
      no file but its own, and kept for the next start (like the admin password)."""
    monkeypatch.setenv(spark_server.PORT_ENV, str(free_port()))
    monkeypatch.setenv("TOPIC_LINEAGE_DRIVER_MEMORY", "1g")  # the server's heap, not this JVM's
    monkeypatch.delenv(spark_server.TOKEN_ENV, raising=False)
    store.save(snap(0, topic("orders", tid(1))), "live")
    build_and_publish(spark)

    assert spark_server.remote_url() is None
    state = spark_server.start()
    try:
        assert spark_server.start()["pid"] == state["pid"]  # one server per home
        assert spark_server.remote_url() == f"sc://127.0.0.1:{state['port']}"

        path = spark_server.token_path()
        assert path.stat().st_mode & 0o777 == 0o600
        token = spark_server.read_token()
        assert len(token) >= 32
        url = spark_server.remote_url()
        assert url == f"sc://127.0.0.1:{state['port']}" and token not in url
        lines = _command_lines(state["pid"])
        assert any(spark_server.SERVER_CLASS in line for line in lines), lines  # the server's JVM
        assert not [line for line in lines if token in line]

        served = _client(tl_home, "product", url)
        assert served.returncode == 0 and "rows 3" in served.stdout, served.stderr[-3000:]

        without = _client(tl_home, "no-token", url)
        assert without.returncode != 0 and "rows" not in without.stdout
        assert "No authentication token provided" in without.stderr, without.stderr[-3000:]

        wrong = _client(tl_home, ("y" if token[0] == "x" else "x") + token[1:], url)  # never the token
        assert wrong.returncode != 0 and "rows" not in wrong.stdout
        assert "Invalid authentication token" in wrong.stderr, wrong.stderr[-3000:]

        # the product's client without the token file: an error that names the file
        path.rename(path.with_name("moved"))
        try:
            missing = _client(tl_home, "product", url)
        finally:
            path.with_name("moved").rename(path)
        assert missing.returncode != 0 and "rows" not in missing.stdout
        assert f"cannot read the Spark Connect server's token {path}" in missing.stderr, \
            missing.stderr[-3000:]

        # a token file others can read is refused too, naming the file
        path.chmod(0o644)
        try:
            with pytest.raises(spark_server.SparkServerError, match=f"{path} is readable by others"):
                spark_server.read_token()
        finally:
            path.chmod(0o600)

        first = query(tl_home, java=False)
        assert first.returncode == 0, first.stderr[-3000:]
        assert json.loads(first.stdout) == [
            {"topic_name": "orders", "version": 1, "partition_count": 3}]

        # A new published version: the server's tables follow it.
        store.save(snap(1, topic("orders", tid(1), partitions=6)), "live")
        build_and_publish(spark)
        second = query(tl_home, java=False)
        assert second.returncode == 0, second.stderr[-3000:]
        assert [r["partition_count"] for r in json.loads(second.stdout)] == [3, 6]

        # --version (another version) does not use the server: it needs a local JVM.
        assert query(tl_home, "--version", wh.list_versions()[0]["version"], java=False).returncode != 0
    finally:
        assert spark_server.stop()
    assert spark_server.remote_url() is None
    assert not pid_alive(state["pid"])
    # the token is in its file only (not in the server's log nor in its state file)
    holding = [f for f in tl_home.rglob("*") if f.is_file() and token.encode() in f.read_bytes()]
    assert holding == [path]
    # the token is kept for the next start (like the admin password)
    assert spark_server.read_token() == token
    # Without the server, the query starts its own local Spark and answers the same.
    local = query(tl_home)
    assert local.returncode == 0, local.stderr[-3000:]
    assert json.loads(local.stdout) == json.loads(second.stdout)
    # The default engine (DuckDB) needs neither the server nor a JVM, and prints the same.
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(tl_home), "JAVA_HOME": str(tl_home / "no-java")}
    duck = subprocess.run([str(SCRIPT), "query", SQL, "--format", "json"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert duck.returncode == 0, duck.stderr[-3000:]
    assert duck.stdout == local.stdout


def _published_rows(home: Path, version: str) -> dict[str, list]:
    """Every table of a version as sorted rows (read with pyarrow: no Spark in this process)."""
    import pyarrow.parquet as pq

    rows = {}
    for table in t.TABLES:
        path = home / "warehouse" / "versions" / version / table
        data = pq.read_table(path, columns=t.ddl_columns(t.TABLE_DDL[table])).to_pylist()
        rows[table] = sorted(data, key=repr)
    return rows


AIRFLOW_TASKS = """
import sys
from topic_lineage import airflow as at, warehouse as wh
version = wh.new_version_id()
built = at.build_on_connect_server(version)
assert built is not None and built["version"] == version, built
at.validate_version(version)
print(at.publish_version(version))
"""


def test_build_validate_publish_on_the_server_equals_the_reference(tl_home, monkeypatch):
    """With the deployment's Spark Connect server running, the CLI's `build` (full refresh) and
    the Airflow build, validate and publish task bodies (an incremental cycle) run on it:
    they need no JVM of their own (JAVA_HOME points nowhere), keep write-audit-publish (each
    version validated before it is published), and publish the rows of a from-scratch
    computation of the same snapshots (the DuckDB reference)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))
    from datagen import History  # the benchmark's generator: a held snapshot in round 3

    monkeypatch.setenv(spark_server.PORT_ENV, str(free_port()))
    monkeypatch.setenv("TOPIC_LINEAGE_DRIVER_MEMORY", "1g")
    monkeypatch.setenv("TOPIC_LINEAGE_MAX_AGE", "off")  # the generated history is old
    history = History(topics=40, clusters=2)
    history.store_rounds(0, 5)
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(tl_home)}
    env.pop(spark_server.REMOTE_ENV, None)
    no_java = {**env, "JAVA_HOME": str(tl_home / "no-java")}

    def run(command: list[str], environment: dict) -> subprocess.CompletedProcess:
        done = subprocess.run(command, env=environment, capture_output=True, text=True,
                              timeout=900, check=False)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        return done

    state = spark_server.start()
    try:
        full = run([str(SCRIPT), "build", "--full-refresh"], no_java)
        assert "quality gate PASSED" in full.stdout and "published" in full.stdout, full.stdout
        # the deployment's warm Python ran it (topic_lineage.local.warm), as a child of its own
        warm_log = (tl_home / "logs" / "warm.out").read_text()
        assert "topic-lineage build --full-refresh" in warm_log, warm_log
        # one new snapshot per cluster: the Airflow task bodies build them incrementally
        history.store_rounds(5, 6, only_cluster=0)
        history.store_rounds(6, 7, only_cluster=1)
        run([sys.executable, "-c", AIRFLOW_TASKS], no_java)
    finally:
        assert spark_server.stop()
    assert not pid_alive(state["pid"])
    deadline = time.monotonic() + 30  # the warm process ends with the server
    while pid_alive(state["warm"]["pid"]):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    published = wh.current_version()
    manifest = wh.read_manifest(published)
    assert manifest["mode"] == "incremental" and manifest["gate"]["passed"]
    statuses = [h["status"] for h in manifest["history"]]
    assert statuses.index("validated") < statuses.index("published")  # write-audit-publish
    # Every build ran in the pipeline's one session on the server (spark_server.connect(shared=
    # True)): the last build's walk tasks ran in Python workers the first build started.
    walked = [m["walk_tasks"] for m in wh.list_versions() if m.get("walk_tasks")]
    assert len(walked) >= 2
    assert {task["pid"] for task in walked[0].values()} & {task["pid"] for task in walked[-1].values()}

    # The same snapshots computed from scratch by the benchmark's DuckDB reference, which shares
    # no code with the build (a local Spark build gives exactly its rows, test_benchmarks_quick.py;
    # a local build here would start a JVM for the same proof): the same rows. The store holds no
    # consumer group, and neither does the published version.
    import reference_duckdb

    reference_duckdb.build(tl_home / "reference")
    check = reference_duckdb.compare(tl_home / "reference", wh.version_dir(published))
    assert check["identical"], check
    assert all(check[table]["rows"] > 0 for table in t.TOPIC_TABLES), check
    published_rows = _published_rows(tl_home, published)
    assert [row for table in t.GROUP_TABLES for row in published_rows[table]] == []


CLIENT = """
import sys
from topic_lineage.local import spark_server
how, url = sys.argv[1], sys.argv[2]
if how == "product":  # as every client the product starts: query, build, validate, the warm process
    spark = spark_server.connect(url)
elif how == "no-token":  # PySpark's own client on the server's URL, as any local process could
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.remote(url).getOrCreate()
else:  # the product's channel with another token
    import os
    from pyspark.sql.connect.session import SparkSession
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    channel = spark_server._loopback_channel(url, how)
    spark = SparkSession.builder.channelBuilder(channel).getOrCreate()
print("rows", spark.range(3).count())
"""


def _client(home: Path, how: str, url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home)}
    for name in (spark_server.REMOTE_ENV, spark_server.TOKEN_ENV):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-c", CLIENT, how, url], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def _command_lines(pid: int) -> list[str]:
    """The command lines of ``pid`` and of every process below it."""
    lines, todo = [], [pid]
    while todo:
        current = todo.pop()
        proc = Path(f"/proc/{current}")
        try:
            lines.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            for task in (proc / "task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # ended meanwhile
            continue
    return lines
