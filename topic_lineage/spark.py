"""The one place that creates SparkSessions, sized for topic-lineage's data.

Import this only inside tasks and commands: it imports pyspark.
"""

from __future__ import annotations

import contextlib
import os
import sys

DEFAULT_MASTER = "local[*]"
# The driver's heap, for whichever call starts this process's JVM first (a JVM keeps the heap
# it started with: a later session asking for more does not get it).
DRIVER_MEMORY_ENV = "TOPIC_LINEAGE_DRIVER_MEMORY"
DEFAULT_DRIVER_MEMORY = "2g"

# The UI is off, but Spark's status listeners still keep every SQL execution (with its plan
# description and metrics), job and stage in the driver's heap, 1,000 of each by default. A
# derivation plan is large, so a long-lived driver (the Spark Connect server, a test session, a
# demo) fills its heap with the history of queries nobody can look at: keep a few.
STATUS_RETENTION = {
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "5000",
    "spark.ui.dagGraph.retainedRootRDDs": "50",
}


# HotSpot compiles hot code twice: at once with its quick compiler (C1), later with the
# optimizing one (C2), on background threads. A driver JVM that lives for one small build ends
# before most of C2's work pays off, and on 2 cores that work competes with the build's planning.
# Keeping C1 only (issue #24, 2026-11-25, 2 cores, 1,489 observations, one process per run):
# full refresh 28.3-28.6 s with both, 22.0-24.3 s with C1 only; a bare session 7.4-7.8 s and
# 6.2-6.4 s; at 99,462 observations (a 3.1 MB store) 33.9 and 39.3 s against 33.8 and 30.1 s;
# at 601,098 (16.7 MB) 62.0 s against 83.6 s, slower. So never for a JVM that reads much or lives
# long (the Spark Connect server, a test session): C2's code is what runs the data there.
QUICK_JIT_OPTION = "-XX:TieredStopAtLevel=1"
QUICK_JIT_MAX_BYTES = 4 * 1024 * 1024
"""Largest store (snapshot files' bytes) whose one-off build gets :data:`QUICK_JIT_OPTION`
(about 130,000 observations), and never more than :func:`small_input_limit`."""


def quick_jit_for(input_bytes: int) -> bool:
    """Whether a one-off process reading ``input_bytes`` should start its JVM with
    :data:`QUICK_JIT_OPTION` (``$TOPIC_LINEAGE_SMALL_INPUT_MB=0`` turns it off with the other
    small-input settings)."""
    return _tiny(input_bytes, small_input_limit())


def quick_jit_for_store() -> bool:
    """:func:`quick_jit_for` the snapshot store's files: for a one-off command's JVM (build, demo)."""
    from topic_lineage import store

    return quick_jit_for(sum(size for size, _ in store.snapshot_listing().values()))


def _tiny(input_bytes: int, limit: int) -> bool:
    """At most :data:`QUICK_JIT_MAX_BYTES` and the small-input ``limit`` (0: the settings are off)."""
    return limit > 0 and input_bytes <= min(QUICK_JIT_MAX_BYTES, limit)


# PySpark 4 records the Python call site of every Column function in the JVM, for error
# messages: five round trips to the JVM per call (the active session, a setting, set, clear),
# more than half of a build's calls into the JVM (issue #24: 7,808 calls for a small full
# build with it, 3,563 without; that build in a warm JVM 3.9 s against 3.0-3.3 s). Analysis
# errors still name the failing expression and its plan.
CALL_SITE_CONF = {"spark.python.sql.dataFrameDebugging.enabled": "false"}


def driver_java_options(*, quick_jit: bool = False) -> str:
    """The driver JVM's options: UTC, :data:`QUICK_JIT_OPTION` when asked, and this
    installation's archive of Spark's classes when it has one
    (:mod:`topic_lineage.local.jvm_archive`: the JVM starts in about half the time)."""
    from topic_lineage.local import jvm_archive

    options = ["-Duser.timezone=UTC", QUICK_JIT_OPTION if quick_jit else "", jvm_archive.java_options()]
    return " ".join(option for option in options if option)


def get_spark(app_name: str = "topic-lineage", master: str | None = None, conf: dict | None = None,
              *, quick_jit: bool = False):
    """A SparkSession with UTC time, no UI, and partition-type inference off.

    ``master`` defaults to ``$TOPIC_LINEAGE_SPARK_MASTER`` or ``local[*]``. Partition-type
    inference is off so that a cluster ID such as ``123`` stays a string in directory names.
    ``quick_jit``: start the driver's JVM with :data:`QUICK_JIT_OPTION` (a one-off process over
    little data, :func:`quick_jit_for`); no effect when this process's JVM already runs.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must be this interpreter (the venv's), not whatever `python3` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    chosen = master or os.environ.get("TOPIC_LINEAGE_SPARK_MASTER")
    # Under spark-submit (PYSPARK_GATEWAY_PORT is set) its --master, e.g. from Airflow's
    # spark_default connection, applies unless a master was asked for explicitly.
    if chosen or not os.environ.get("PYSPARK_GATEWAY_PORT"):
        builder = builder.master(chosen or DEFAULT_MASTER)
    builder = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("TOPIC_LINEAGE_SHUFFLE_PARTITIONS", "8"))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.driver.memory", os.environ.get(DRIVER_MEMORY_ENV, DEFAULT_DRIVER_MEMORY))
        .config("spark.driver.extraJavaOptions", driver_java_options(quick_jit=quick_jit))
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    for key, value in {**STATUS_RETENTION, **CALL_SITE_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# A build or gate over little data spends its time on Spark's per-stage and per-job overhead,
# not on the data: adaptive query execution re-plans at every shuffle (77 jobs instead of 20 for
# one incremental build) and every shuffle has as many tasks as partitions. Measured on one
# incremental cycle over the 10 M-observation benchmark history, warm session, 2 cores
# (2026-11-24, docs/benchmarks.md): build 20-21 s with the defaults, 13-17 s with these.
# Spark lists more than 32 input paths with a Spark job of its own; a small build's files are
# listed on the driver instead (issue #24: reading a store of 45 snapshot files in a new JVM
# 1.37 s with that job, 0.75 s without; in a warm one 0.31 s and 0.04 s).
SMALL_INPUT_CONF = {"spark.sql.shuffle.partitions": "2", "spark.sql.adaptive.enabled": "false",
                    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000"}
# Spark compiles Java code for each new query (whole-stage code generation, and a projection,
# predicate or ordering class per expression), with Janino, on the driver. Over a few thousand
# rows that compiling is most of a job's time in a young JVM, and every query of a build or gate
# is new. Up to QUICK_JIT_MAX_BYTES of input Spark interprets the plan instead (issue #24,
# 2026-11-25, 2 cores, 4,398 observations, in-process full build, one process per run: 11.2 and
# 12.1 s with code generation, 9.2 and 9.3 s without; the same build again in that JVM 5.9-6.0 s
# and 3.8-4.3 s; at 99,462 observations 14.9 s against 14.2 s, even, hence the limit). Spark's
# own tests run every operator in both modes; the rows are the same (tests/test_cycle_path.py).
INTERPRETED_CONF = {"spark.sql.codegen.wholeStage": "false",
                    "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
SMALL_INPUT_ENV = "TOPIC_LINEAGE_SMALL_INPUT_MB"
DEFAULT_SMALL_INPUT_MB = 64.0


def small_input_limit() -> int:
    """Bytes of input up to which a build or gate runs with :data:`SMALL_INPUT_CONF`
    (``$TOPIC_LINEAGE_SMALL_INPUT_MB``, default 64; 0 turns it off)."""
    from topic_lineage.fsutil import size_setting

    return size_setting(SMALL_INPUT_ENV, DEFAULT_SMALL_INPUT_MB, "turn the small-input settings off")


@contextlib.contextmanager
def sized_for(spark, input_bytes: int):
    """Run the block with :data:`SMALL_INPUT_CONF` when ``input_bytes`` is at most
    :func:`small_input_limit`, and with :data:`INTERPRETED_CONF` too up to
    :data:`QUICK_JIT_MAX_BYTES`, restoring the session's values afterwards (a Connect server's
    session or a test's outlives it). Yields the settings it applied (empty: none). The results
    are the same either way; only the plan's execution differs."""
    limit = small_input_limit()
    if limit == 0 or input_bytes > limit:  # 0: the small-input settings are off
        yield {}
        return
    settings = {**SMALL_INPUT_CONF, **(INTERPRETED_CONF if _tiny(input_bytes, limit) else {})}
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield settings
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
