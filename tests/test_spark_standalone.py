"""The two-worker standalone cluster of :mod:`tests.servers.standalone`: a job's tasks run
in two executor JVMs of its workers (not in the driver); a build on it walks its Kafka clusters in
those executors and writes the tables a ``local[*]`` build writes (issue #40, goal 3); and leaving
the context manager ends every process it started, the executors and their Python workers
included.

This module does not use conftest's local ``spark`` fixture: a process has one SparkContext, and
these tests need one on the standalone master. The cluster is started once for the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import psutil
import pytest

from tests.benchmarks.bench_scaleout import build, compare
from tests.benchmarks.bench_small import driver_java_options
from tests.benchmarks.run_all import bench_scaleout, table
from tests.servers.standalone import (
    StandaloneClusterError,
    standalone_cluster,
    task_placement,
)
from topic_lineage import tables as t
from topic_lineage.spark import QUICK_JIT_OPTION

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[1]


def _tree(pid: int) -> set[int]:
    try:
        return {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _stop_any_context() -> None:
    """A SparkContext left by code run in-process would be returned by getOrCreate, master and all."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


@pytest.fixture(scope="module")
def finished_cluster(tmp_path_factory):
    """Start the cluster (its master's first two ports taken by another process meanwhile),
    run the placement job on it, note every process it consists of while the job's executors
    still run, then leave the context manager. Returns what was seen."""
    from topic_lineage.spark import get_spark

    _stop_any_context()
    seen: dict = {"work_dir": tmp_path_factory.mktemp("standalone")}
    with _squatted_master_ports() as taken, standalone_cluster(
            workers=2, cores_per_worker=1, memory="1g", work_dir=seen["work_dir"], quick_jit=True) as cluster:
        seen.update(squatted_port=taken, web_ui=cluster.web_ui,
                    workers_state=[w["state"] for w in cluster.state()["workers"]])
        seen.update(master_url=cluster.master_url, ports=list(cluster.ports),
                    daemons={name: proc.pid for name, proc in cluster.processes.items()})
        # C1 only, as conftest's ``spark`` starts it: when this is the worker's first Spark, the
        # JVM serves the worker's later Spark modules too (tests/conftest.py, _DRIVER_JVM)
        spark = get_spark("standalone-test", master=cluster.master_url,
                          conf={**cluster.driver_conf(executor_memory="512m"),
                                "spark.sql.shuffle.partitions": "2"}, quick_jit=True)
        try:
            seen["master_in_use"] = spark.sparkContext.master
            seen["driver_jvm_pid"] = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
            seen["placement"] = task_placement(spark, 4)
            seen["processes"] = set().union(*(_tree(pid) for pid in seen["daemons"].values()))
            seen["executor_parents"] = {psutil.Process(row["executor_pid"]).ppid() for row in seen["placement"]}
            seen["mapped_archive"] = {
                pid: _maps_the_archive(pid)
                for pid in [*seen["daemons"].values(), *(row["executor_pid"] for row in seen["placement"])]}
            seen["app_running"] = [app["name"] for app in cluster.state()["activeapps"]]
        finally:
            spark.stop()
        # A user's build on the cluster: spark_jobs/build.py with the master in its environment,
        # as the benchmark's scale-out phase runs it (run_all --quick skips that phase: it is
        # proved here), after the same store's build on local[*]
        seen["home"] = _small_store(tmp_path_factory.mktemp("standalone-home"))
        seen["events"] = tmp_path_factory.mktemp("local-build-events")  # its Spark event log
        seen["local_build"] = build(seen["home"], "v-local", "local[*]",
                                    conf={"spark.eventLog.enabled": "true",
                                          "spark.eventLog.dir": f"file://{seen['events']}"})
        with pytest.MonkeyPatch.context() as env:  # bench_scaleout sets it: restored on leaving
            env.setenv("TOPIC_LINEAGE_HOME", str(seen["home"]))
            seen["scaleout"] = bench_scaleout(
                seen["home"], tmp_path_factory.mktemp("scaleout-work"),
                seen["local_build"]["build_s"], gate=False, cluster=cluster)
    return seen


def _maps_the_archive(pid: int) -> bool:
    """Whether process ``pid`` (a ``java``: a daemon's ``spark-class`` execs it) has this
    installation's archive of Spark's classes mapped (not only the JDK's own ``classes.jsa``,
    which every JVM maps)."""
    from topic_lineage.local import jvm_archive

    with open(f"/proc/{pid}/maps") as maps:
        return any(line.rstrip().endswith(str(jvm_archive.archive_path())) for line in maps)


def _small_store(home):
    """A seeded history of three Kafka clusters (re-creations, a held snapshot, describe errors)."""
    import subprocess
    import sys

    code = ("from tests.benchmarks.datagen import History; "
            "print(History(topics=90, clusters=3, seed=7).store_rounds(0, 8))")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                   env={**os.environ, "TOPIC_LINEAGE_HOME": str(home)}, cwd=str(ROOT))
    return home


@pytest.mark.slow  # the module's cluster (a master and two workers): not in the fast tier
def test_a_build_walks_its_clusters_on_the_executors_and_writes_the_local_tables(finished_cluster):
    """The same store built on ``local[*]``: every table identical row for row; on the cluster
    each Kafka cluster's walk ran in an executor (both were used), none in the driver. The
    build on the cluster is the benchmark's scale-out phase (run_all.bench_scaleout): its rows
    are also those of the DuckDB reference."""
    seen = finished_cluster
    scaleout = seen["scaleout"]
    assert scaleout["rows_identical_to_reference"] is True, scaleout
    assert scaleout["build_s"] > 0 and scaleout["process_wall_s"] > 0 and scaleout["ratio_to_local"] > 0
    assert scaleout["master"] == "spark standalone, 2 workers, 1 core, 1g (127.0.0.1)"
    printed = table({"scaleout": scaleout})  # run_all's table of figures
    assert "scale-out: standalone full refresh (s)" in printed, printed
    assert re.search(r"scale-out: rows identical to reference +True", printed), printed
    differences = compare(seen["home"] / "warehouse" / "versions", ["v-local", "standalone"])
    assert differences["identical"], differences
    assert differences[t.TOPIC_INCARNATIONS]["rows"]["v-local"] > 90
    tasks = json.loads((seen["home"] / "warehouse" / "versions" / "standalone" / "manifest.json")
                       .read_text())["walk_tasks"]
    assert len(tasks) == 3
    assert {task["executor"] for task in tasks.values()} == {"0", "1"}, tasks
    local = json.loads((seen["home"] / "warehouse" / "versions" / "v-local" / "manifest.json")
                       .read_text())["walk_tasks"]
    assert {task["executor"] for task in local.values()} == {"driver"}
    # `python spark_jobs/build.py` started its JVM as `topic-lineage build` does: a small store,
    # C1 only (from the local build's Spark event log)
    assert QUICK_JIT_OPTION in driver_java_options(seen["events"]).split()


@pytest.mark.slow
def test_tasks_run_on_two_executors_not_the_driver(finished_cluster):
    seen = finished_cluster
    assert seen["master_in_use"] == seen["master_url"]
    assert seen["app_running"] == ["standalone-test"]
    rows = seen["placement"]
    assert [row["partition"] for row in rows] == [0, 1, 2, 3]
    executors = {row["executor_id"] for row in rows}
    assert len(executors) == 2 and "driver" not in executors, rows
    executor_pids = {row["executor_pid"] for row in rows}
    assert len(executor_pids) == 2 and seen["driver_jvm_pid"] not in executor_pids, rows
    assert os.getpid() not in {row["python_pid"] for row in rows}
    # Each executor JVM is a child of a different one of the cluster's two workers.
    workers = {seen["daemons"]["worker-1"], seen["daemons"]["worker-2"]}
    assert seen["executor_parents"] == workers
    assert executor_pids <= seen["processes"], "executors outside the cluster's process trees"
    for name, log in (("master", "master.log"), ("worker-1", "worker-1.log"), ("worker-2", "worker-2.log")):
        assert (seen["work_dir"] / log).stat().st_size > 0, f"{name} left no log"


@pytest.mark.slow
def test_the_daemons_and_executors_map_the_installations_class_archive(finished_cluster):
    """The install made an archive of Spark's classes (tests/test_jvm_archive.py): the cluster's
    JVMs, which run the same Spark, start from it as the drivers do (about half the start)."""
    from topic_lineage.local import jvm_archive

    assert jvm_archive.java_options(), "the install made no class archive"
    assert all(finished_cluster["mapped_archive"].values()), finished_cluster["mapped_archive"]


@pytest.mark.slow
def test_leaving_the_context_ends_every_process(finished_cluster):
    seen = finished_cluster
    # master, two workers, two executor JVMs, at least one Python worker daemon per executor
    assert len(seen["processes"]) >= 7, seen["processes"]
    assert [pid for pid in seen["processes"] if _alive(pid)] == []
    # No java process names one of the cluster's ports, except this process's own driver JVM
    # (its command line carries the master URL; it outlives the SparkContext).
    ours = _tree(os.getpid())
    ports = {str(port) for port in seen["ports"]}
    leftovers = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        words = " ".join(proc.info["cmdline"] or []).replace(":", " ").split()
        if "java" in (proc.info["name"] or "") and proc.info["pid"] not in ours and ports & set(words):
            leftovers.append((proc.info["pid"], " ".join(proc.info["cmdline"])[:300]))
    assert leftovers == []
    assert _processes_in(seen["work_dir"]) == []


@pytest.mark.slow  # a standalone cluster (a deployment, not a rule): the whole suite
def test_a_worker_that_cannot_start_names_its_log(tmp_path):
    expected = r"worker-1 exited .*worker-1\.log"
    with (pytest.raises(StandaloneClusterError, match=expected) as failed,
          standalone_cluster(workers=1, memory="not-a-size", work_dir=tmp_path, timeout_s=90)):
        pass
    assert str(tmp_path / "worker-1.log") in str(failed.value)
    assert _processes_in(tmp_path) == []


def _processes_in(work_dir) -> list[tuple[int, str]]:
    """Processes running in ``work_dir`` (the daemons' working directory) or naming it."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["cwd"] == str(work_dir) or str(work_dir) in cmdline:
            found.append((proc.info["pid"], cmdline[:200]))
    return found


@contextlib.contextmanager
def _squatted_master_ports():
    """A port found free may be taken before the master binds it: here by a web server that
    answers every path with a page, on the port the cluster's next two free-port picks (the
    master's RPC and web UI ports; the workers' are free) return. Yields that port."""
    import http.server
    import threading

    from tests.servers import standalone

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<!DOCTYPE html><html>another process</html>")

        def log_message(self, *args):
            pass

    squatter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    taken = squatter.server_address[1]
    chosen = iter([taken, taken])
    free = standalone._free_port
    standalone._free_port = lambda: next(chosen, None) or free()
    try:
        yield taken
    finally:
        standalone._free_port = free
        squatter.shutdown()


@pytest.mark.slow
def test_ports_taken_before_the_master_binds_them_are_stepped_over(finished_cluster):
    """The module's cluster started with its master's ports taken (:func:`_squatted_master_ports`):
    the master bound the next ones, and the cluster's URLs are the ones it reports, so the
    workers registered and ``state()`` read the master's JSON; leaving the context left no
    process behind (:func:`test_leaving_the_context_ends_every_process`)."""
    seen = finished_cluster
    taken = seen["squatted_port"]
    assert seen["master_url"] != f"spark://127.0.0.1:{taken}"
    assert seen["web_ui"] != f"http://127.0.0.1:{taken}"
    assert seen["workers_state"] == ["ALIVE", "ALIVE"]
    assert _processes_in(seen["work_dir"]) == []
