"""A Spark standalone cluster on this machine: one master and N workers on the loopback address.

Why: a build whose derivation runs in Spark tasks (one task per Kafka cluster) only proves that
it scales out when its tasks run in executor processes other than the driver, on more than one
worker. ``local[N]`` runs every task in the driver's JVM; this cluster gives each worker an
executor JVM of its own, as a real deployment does, without Docker or a network.

    from tests.servers.standalone import standalone_cluster
    with standalone_cluster(workers=2, cores_per_worker=1, memory="2g") as cluster:
        spark = get_spark(master=cluster.master_url, conf=cluster.driver_conf())

The master and the workers are the pyspark installation's own (``$SPARK_HOME/bin/spark-class``
``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``; pyspark's package directory is
its SPARK_HOME), each in a process group of its own so that stopping it also ends the executor
JVMs and Python workers it started. Their logs (``master.log``, ``worker-1.log``, ...; the
executors' in ``work/app-*/``) stay in the working directory and errors name them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from topic_lineage.errors import TopicLineageError
from topic_lineage.spark import QUICK_JIT_OPTION

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# What the master prints once it listens: its RPC URL, then its web UI's. A port chosen free may
# be taken by another process before the master binds it; Spark then binds the next one, so the
# cluster's addresses are the ones the master reports, not the ones it was asked for.
MASTER_URL_LINE = re.compile(r"Starting Spark master at (spark://\S+)")
MASTER_UI_LINE = re.compile(r"Bound MasterWebUI to \S+ and started at (http://\S+)")

# The master and worker daemons only schedule and launch executors: a small heap is plenty
# (Spark's default is 1g each), leaving the machine's memory to the driver and executors.
DAEMON_MEMORY = "512m"


class StandaloneClusterError(TopicLineageError):
    """The standalone cluster did not start or stop; the message names the log to read."""


@dataclass
class Cluster:
    """A running cluster: its master's URL, web UI and the daemons' processes and logs."""

    master_url: str
    web_ui: str
    work_dir: Path
    workers: int
    cores_per_worker: int
    memory: str
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)  # name -> daemon
    ports: list[int] = field(default_factory=list)
    quick_jit: bool = False  # the daemons and executors compile with C1 only (standalone_cluster)

    def log(self, name: str) -> Path:
        return self.work_dir / f"{name}.log"

    def state(self) -> dict:
        """The master's view: its web UI's JSON (``aliveworkers``, ``workers``, ``activeapps``)."""
        with urllib.request.urlopen(f"{self.web_ui}/json/", timeout=5) as answer:
            return json.load(answer)

    def driver_conf(self, executor_memory: str = "1g") -> dict[str, str]:
        """Settings for a driver on this cluster (``get_spark(master=..., conf=...)``): the
        driver reachable on the loopback address, and executors that each take one worker's
        cores, so the application gets one executor per worker. ``executor_memory`` must fit in
        the worker's ``memory``, or the master never launches the executor. The first job waits
        (up to 30 s) until every executor has registered: otherwise all of a short job's tasks
        may run on whichever executor came first."""
        conf = {
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.executor.cores": str(self.cores_per_worker),
            "spark.cores.max": str(self.workers * self.cores_per_worker),
            "spark.executor.memory": executor_memory,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        }
        archive = _archive_option()
        if archive:  # the executors are JVMs of this installation's Spark too
            conf["spark.executor.defaultJavaOptions"] = archive
        if self.quick_jit:  # through the executors' environment: a second option would be a second word
            conf["spark.executorEnv.JAVA_TOOL_OPTIONS"] = QUICK_JIT_OPTION
        return conf


def _archive_option() -> str:
    """The JVM option that maps this installation's archive of Spark's classes
    (:mod:`topic_lineage.local.jvm_archive`), or ``""`` when it has none. The daemons and the
    executors here run this installation's Spark: with it each starts in about half the time
    (a cluster's start 17-19 s instead of 31-34 s, 2 busy cores). One word (``-Xshare:auto`` is
    the JVM's default): callers pass driver settings in ``PYSPARK_SUBMIT_ARGS``, split at spaces."""
    from topic_lineage.local import jvm_archive

    return f"-XX:SharedArchiveFile={jvm_archive.archive_path()}" if jvm_archive.java_options() else ""


def spark_home() -> Path:
    """The pyspark installation, which is a complete SPARK_HOME (bin/, jars/, sbin/)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start(cluster: Cluster, name: str, *args: str) -> None:
    env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=HOST,
               SPARK_LOCAL_HOSTNAME=HOST, SPARK_NO_DAEMONIZE="1", SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
               # The REST submission server listens on a fixed port (6066): two clusters on one
               # machine would race for it, and applications here are submitted by their drivers.
               SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
               # Executors' Python workers must be this interpreter: tasks import topic_lineage.
               PYSPARK_PYTHON=sys.executable)
    daemon_options = " ".join(filter(None, [env.get("SPARK_DAEMON_JAVA_OPTS"), _archive_option(),
                                            QUICK_JIT_OPTION if cluster.quick_jit else ""]))
    if daemon_options:
        env["SPARK_DAEMON_JAVA_OPTS"] = daemon_options
    env.pop("PYSPARK_GATEWAY_PORT", None)  # never a driver's, should this process be one
    with open(cluster.log(name), "w") as log:  # the child keeps its own descriptor
        cluster.processes[name] = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args], env=env, cwd=cluster.work_dir,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _check_running(cluster: Cluster) -> None:
    for name, proc in cluster.processes.items():
        if proc.poll() is not None:
            raise StandaloneClusterError(
                f"spark standalone {name} exited with {proc.returncode} while starting; "
                f"its log, {cluster.log(name)}, ends:\n{_tail(cluster.log(name))}")


def _master_reports(cluster: Cluster, line: re.Pattern, deadline: float) -> str | None:
    """The address the master's log reports on ``line``, once it does; None at the deadline."""
    while time.monotonic() < deadline:
        _check_running(cluster)
        with contextlib.suppress(OSError):
            found = line.search(cluster.log("master").read_text(errors="replace"))
            if found:
                return found.group(1).rstrip("/")
        time.sleep(0.1)
    return None


def _wait_ready(cluster: Cluster, timeout_s: float) -> None:
    """Until the master reports every worker ALIVE; a daemon that exits, or the timeout, fails."""
    deadline = time.monotonic() + timeout_s
    seen = "the master never reported its web UI"
    web_ui = _master_reports(cluster, MASTER_UI_LINE, deadline)
    if web_ui:
        cluster.web_ui, seen = web_ui, "the master's web UI never answered"
        cluster.ports[1] = int(web_ui.rsplit(":", 1)[1])
    while web_ui and time.monotonic() < deadline:
        _check_running(cluster)
        try:
            state = cluster.state()
            alive = sum(worker.get("state") == "ALIVE" for worker in state.get("workers", []))
            seen = f"{alive} of {cluster.workers} workers ALIVE"
            if alive >= cluster.workers:
                return
        except (OSError, ValueError):  # not listening yet, or not yet answering JSON
            pass
        time.sleep(0.5)
    logs = ", ".join(str(cluster.log(name)) for name in cluster.processes)
    raise StandaloneClusterError(
        f"spark standalone cluster at {cluster.master_url} not ready after {timeout_s:.0f} s "
        f"({seen}); logs: {logs}")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _stop(cluster: Cluster, timeout_s: float) -> None:
    """Workers first (each ends its executors), then the master; what outlives ``timeout_s``
    after SIGTERM is killed with its whole process group. Raises if a group still lives."""
    order = [name for name in cluster.processes if name != "master"] + ["master"]
    for name in order:
        proc = cluster.processes.get(name)
        if proc is not None and _group_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for name in order:
        proc = cluster.processes.get(name)
        if proc is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.1, deadline - time.monotonic()))
        while _group_alive(proc.pid) and time.monotonic() < deadline:  # its executors, exiting
            time.sleep(0.2)
        if _group_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    time.sleep(0.2)  # a killed group's orphans are reaped by init
    left = [name for name, proc in cluster.processes.items() if _group_alive(proc.pid)]
    if left:
        raise StandaloneClusterError(f"processes of spark standalone {', '.join(left)} outlived "
                                     f"SIGKILL; logs in {cluster.work_dir}")


@contextlib.contextmanager
def standalone_cluster(workers: int = 2, cores_per_worker: int = 1, memory: str = "2g",
                       work_dir: Path | str | None = None, *, timeout_s: float = 120,
                       stop_timeout_s: float = 30, quick_jit: bool = False) -> Iterator[Cluster]:
    """Start a master and ``workers`` workers (each offering ``cores_per_worker`` cores and
    ``memory``) on free loopback ports; yield the :class:`Cluster` once the master counts every
    worker ALIVE; stop every process it started on exit. ``work_dir`` (default: a new temporary
    directory, kept) holds the daemons' logs and the workers' application directories. Stop a
    SparkSession on the cluster before leaving: its driver would otherwise wait for executors.

    ``quick_jit``: the daemons, and the executors of a driver given :meth:`Cluster.driver_conf`,
    compile with C1 only (:data:`topic_lineage.spark.QUICK_JIT_OPTION`), as the tests' drivers do:
    the tests' jobs are small. The benchmarks' clusters keep HotSpot's default, as a user's do."""
    if workers < 1 or cores_per_worker < 1:
        raise ValueError("a standalone cluster needs at least one worker with at least one core")
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="tl-standalone-"))
    work.mkdir(parents=True, exist_ok=True)
    port, ui = _free_port(), _free_port()
    cluster = Cluster(f"spark://{HOST}:{port}", f"http://{HOST}:{ui}", work, workers,
                      cores_per_worker, memory, ports=[port, ui], quick_jit=quick_jit)
    try:
        _start(cluster, "master", MASTER_CLASS, "--host", HOST, "--port", str(port),
               "--webui-port", str(ui))
        # Workers register at the address the master reports (see MASTER_URL_LINE).
        master_url = _master_reports(cluster, MASTER_URL_LINE, time.monotonic() + timeout_s)
        if master_url is None:
            raise StandaloneClusterError(
                f"spark standalone master did not report its address in {timeout_s:.0f} s; "
                f"its log, {cluster.log('master')}, ends:\n{_tail(cluster.log('master'))}")
        cluster.master_url = master_url
        cluster.ports[0] = int(master_url.rsplit(":", 1)[1])
        for i in range(1, workers + 1):
            worker_port, worker_ui = _free_port(), _free_port()
            cluster.ports += [worker_port, worker_ui]
            worker_dir = work / f"worker-{i}"
            worker_dir.mkdir(exist_ok=True)
            # A worker that starts before the master listens retries its registration.
            _start(cluster, f"worker-{i}", WORKER_CLASS, cluster.master_url, "--host", HOST,
                   "--port", str(worker_port), "--webui-port", str(worker_ui),
                   "--cores", str(cores_per_worker), "--memory", memory,
                   "--work-dir", str(worker_dir))
        _wait_ready(cluster, timeout_s)
        yield cluster
    finally:
        _stop(cluster, stop_timeout_s)


# --- where a job's tasks run ---------------------------------------------------------------------
def task_placement(spark, tasks: int) -> list[dict]:
    """Where the tasks of ``spark.range(0, tasks, 1, tasks).mapInArrow(...)`` ran, one dict per
    task (``partition``, ``python_pid``, ``executor_pid``, ``executor_id``): the shape of a
    build that walks one Kafka cluster per task. The function the tasks run is defined here, in
    the call, so that it is shipped to the executors by value: their Python imports
    topic_lineage (installed) but not this module (the tests are not installed)."""

    def placement(batches):
        import os

        import pyarrow as pa
        from pyspark import TaskContext

        from topic_lineage.scd.walk_job import executor_of_this_worker

        for _ in batches:
            pass
        executor_pid, executor_id = executor_of_this_worker()
        yield pa.RecordBatch.from_pylist([{
            "partition": TaskContext.get().partitionId(), "python_pid": os.getpid(),
            "executor_pid": executor_pid, "executor_id": executor_id}], schema=pa.schema([
                ("partition", pa.int32()), ("python_pid", pa.int64()), ("executor_pid", pa.int64()),
                ("executor_id", pa.string())]))

    schema = "partition int, python_pid long, executor_pid long, executor_id string"
    rows = spark.range(0, tasks, 1, tasks).mapInArrow(placement, schema).collect()
    return sorted((row.asDict() for row in rows), key=lambda row: row["partition"])
