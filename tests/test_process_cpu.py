"""The process-CPU report of the suite (tests/benchmarks/process_cpu.py, issue #52): each kind
of process is recognised from its command line, and a command's child that burns CPU is counted
with its CPU time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.benchmarks import process_cpu

ROOT = Path(__file__).resolve().parent.parent
SPARK = "/venv/lib/python3.11/site-packages/pyspark"


@pytest.mark.parametrize(("cmdline", "kind"), [
    (f"bash {SPARK}/bin/spark-class org.apache.spark.deploy.SparkSubmit pyspark-shell",
     "Spark JVMs (drivers, standalone daemons)"),
    (f"/usr/bin/java -cp {SPARK}/conf:{SPARK}/jars/* org.apache.spark.deploy.worker.Worker",
     "Spark JVMs (drivers, standalone daemons)"),
    ("bash /w/.venv-iceberg/lib/python3.11/site-packages/pyspark/bin/spark-class x",
     "Spark 4.1 peer JVMs (Iceberg readers)"),
    ("/usr/bin/java -Xmx384m -cp /v/kafka-4.4.0/libs/* kafka.Kafka server.properties", "Kafka broker JVMs"),
    ("/v/bin/python -m pyspark.daemon", "PySpark Python workers"),
    ("[pytest-xdist running] tests/test_cli.py::test_demo", "pytest workers (in-process tests)"),
    ("/v/bin/python -m pytest -n 2 tests", "pytest workers (in-process tests)"),
    ("/v/bin/python /v/bin/topic-lineage import /tmp/pytest-of-root/pytest-1/x/topics.txt",
     "other Python processes (commands, helpers)"),
    ("/v/seaweedfs/weed -config_dir=/tmp/pytest-of-root/pytest-1/s3 server", "SeaweedFS, Azurite, fake-gcs-server"),
    ("/v/bin/python /v/bin/airflow scheduler", "Airflow processes"),
    ("/v/bin/python /v/bin/topic-lineage build --full-refresh", "topic-lineage build processes (Python side)"),
    ("/v/bin/python /v/bin/topic-lineage query SELECT 1", "other Python processes (commands, helpers)"),
    ("postgres: checkpointer", "PostgreSQL"),
    ("/v/seaweedfs-7506e5f91cd6/weed -logtostderr=true server", "SeaweedFS, Azurite, fake-gcs-server"),
    ("", "kernel threads"),
])
def test_each_kind_is_recognised_from_the_command_line(cmdline, kind):
    assert process_cpu.kind_of(cmdline) == kind


@pytest.mark.slow  # a benchmark's tool (not a rule): the whole suite
def test_a_child_that_burns_cpu_is_counted_with_its_time(tmp_path):
    """A command whose child spins 1.5 s of CPU: the report has at least 1 CPU-second of Python
    processes and the machine's busy time covers it; the command's status is the report's."""
    out = tmp_path / "report.json"
    spin = "import time\nend = time.process_time() + 1.5\nwhile time.process_time() < end: pass"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}]); sys.exit(3)"
    done = subprocess.run([sys.executable, "-m", "tests.benchmarks.process_cpu", "--json-out", str(out),
                           "--", sys.executable, "-c", parent],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3, done.stderr
    report = json.loads(out.read_text())
    python = report["kinds"]["other Python processes (commands, helpers)"]
    assert python["cpu_s"] >= 1.0 and python["processes"] >= 2, report
    assert report["busy_cpu_s"] >= 1 and report["status"] == 3
    assert "other Python processes (commands, helpers)" in done.stdout


@pytest.mark.slow  # the suite's own report (not a rule): the whole suite
def test_the_per_file_cpu_counts_waited_children_and_those_that_leave_the_tree():
    """tests/suite_timings.py's per-file CPU (:class:`TreeCpu`): a child that spins 0.6 s and is
    waited for counts; so does a grandchild that spins 0.6 s after its parent ended without
    waiting for it (reparented: the JVM of a command that exits first), seen leaving by the
    watching thread; a process outside the tree does not count."""
    from tests.suite_timings import TreeCpu

    spin = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"
    tree, unwatched = TreeCpu(interval_s=0.1), TreeCpu(interval_s=0)
    subprocess.run([sys.executable, "-c", spin], check=True, timeout=30)
    waited = tree.seconds()
    assert 0.5 <= waited < 2.0, waited
    leaving = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {spin!r}]); "
               "time.sleep(0.4)")
    subprocess.run([sys.executable, "-c", leaving], check=True, timeout=30)
    time.sleep(1.0)  # the grandchild spins on, reparented
    both = tree.seconds()
    assert both - waited >= 0.55, (waited, both)
    # not looked at while the grandchild lived outside the tree: its time reached no one in it
    assert unwatched.seconds() < both - 0.4, (unwatched.seconds(), both)
    elsewhere = TreeCpu(root=1 << 22, interval_s=0)  # no such process: nothing under it
    subprocess.run([sys.executable, "-c", spin], check=True, timeout=30)
    assert elsewhere.seconds() == 0.0
