"""The one place that creates SparkSessions, sized for topic-lineage's data.

Import this only inside tasks and commands: it imports pyspark.
"""

from __future__ import annotations

import contextlib
import os
import sys

from topic_lineage.errors import TopicLineageError

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


QUICK_JIT_MAX_ROWS = 130_000
"""Most rows a version's tables may hold, all tables together, for a one-off ``query --engine
spark`` over them to get :data:`QUICK_JIT_OPTION`: the observations of :data:`QUICK_JIT_MAX_BYTES`
of snapshots. A query of the demo's tables (issue #52, 2026-11-29, 2 cores, 294 rows, a group-by):
13.6-14.0 CPU-seconds and 7.8-8.0 s with both compilers, 6.7-7.7 CPU-seconds and 5.2-5.8 s with C1
only."""


def quick_jit_for_version(version: str | None) -> bool:
    """Whether a one-off process that queries ``version`` (None: the published one) should start
    its JVM with :data:`QUICK_JIT_OPTION`: its manifest's row counts at most
    :data:`QUICK_JIT_MAX_ROWS`, the small-input settings on. False when there is no such version
    or its manifest counts no rows (one built before they were recorded): the query then says
    what is wrong, or runs with both compilers."""
    from topic_lineage.errors import TopicLineageError
    from topic_lineage.warehouse import versions

    if small_input_limit() == 0:
        return False
    try:
        name = version or versions.current_version()
        counts = versions.read_manifest(name).get("row_counts") if name else None
    except TopicLineageError:
        return False
    return bool(counts) and sum(counts.values()) <= QUICK_JIT_MAX_ROWS


def _tiny(input_bytes: int, limit: int) -> bool:
    """At most :data:`QUICK_JIT_MAX_BYTES` and the small-input ``limit`` (0: the settings are off)."""
    return limit > 0 and input_bytes <= min(QUICK_JIT_MAX_BYTES, limit)


# PySpark 4 records the Python call site of every Column function in the JVM, for error
# messages: five round trips to the JVM per call (the active session, a setting, set, clear),
# more than half of a build's calls into the JVM (issue #24: 7,808 calls for a small full
# build with it, 3,563 without; that build in a warm JVM 3.9 s against 3.0-3.3 s). Analysis
# errors still name the failing expression and its plan.
CALL_SITE_CONF = {"spark.python.sql.dataFrameDebugging.enabled": "false"}

# The executors' Python workers import pyspark from the installed, byte-compiled package, not
# from the source zip Spark puts first on their path (topic_lineage/spark_daemon.py: about 1 s
# of every session's first Python task on 2 cores, issue #53).
PYTHON_WORKERS_CONF = {"spark.python.daemon.module": "topic_lineage.spark_daemon"}


def driver_java_options(*, quick_jit: bool = False) -> str:
    """The driver JVM's options: UTC, :data:`QUICK_JIT_OPTION` when asked, and this
    installation's archive of Spark's classes when it has one
    (:mod:`topic_lineage.local.jvm_archive`: the JVM starts in about half the time)."""
    from topic_lineage.local import jvm_archive

    options = ["-Duser.timezone=UTC", QUICK_JIT_OPTION if quick_jit else "", jvm_archive.java_options()]
    return " ".join(option for option in options if option)


# --- object storage (issue #45) -------------------------------------------------------------------
# Spark reads and writes s3:// and s3a:// locations through Hadoop's S3A connector, whose jars the
# install fetches (topic_lineage.local.s3a_jars). They are given to a session only when a location
# it will use is on S3: 37 jars more on the driver's class path cost JVM start time, which the
# small one-off builds are measured by (docs/benchmarks.md).
OBJECT_STORE_SCHEMES = ("s3", "s3a")
# The AWS SDK's provider that reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN
# from the JVM's own environment, so the secret is never a Spark setting: PySpark passes every
# setting given before the JVM starts on spark-submit's command line (ps, Airflow's logs), and
# settings show in the UI and event log (redacted only by spark.redaction.regex). Executors read
# their own environment: on a cluster, the workers' (instance roles aside, the workers must be
# started with the variables).
ENV_CREDENTIALS_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
S3A_COMMITTER_FACTORY = "org.apache.hadoop.fs.s3a.commit.S3ACommitterFactory"
# S3 has no rename: Hadoop's FileOutputCommitter "renames" each task's and the job's output by
# copying and deleting every object (slow, and a failure half way leaves half the files). S3A's
# magic committer uploads each file as a multipart upload that the job's commit completes, so
# files appear only at the job's commit, without copies. Spark SQL reaches it through
# spark-hadoop-cloud's PathOutputCommitProtocol (the S3A committers are not FileOutputCommitters).
S3_COMMIT_CONF = {
    "spark.hadoop.fs.s3a.committer.name": "magic",
    "spark.hadoop.fs.s3a.committer.magic.enabled": "true",
    "spark.hadoop.mapreduce.outputcommitter.factory.scheme.s3a": S3A_COMMITTER_FACTORY,
    "spark.hadoop.mapreduce.outputcommitter.factory.scheme.s3": S3A_COMMITTER_FACTORY,
    "spark.sql.sources.commitProtocolClass": "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol",
    "spark.sql.parquet.output.committer.class":
        "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter",
}
# S3A retries a failed request in the SDK (fs.s3a.attempts.maximum, 5 by default) and again in
# S3A (fs.s3a.retry.limit, 7, with growing pauses), and waits 30 s for a connection: an endpoint
# that does not answer took minutes to fail. A refused credential (403) is never retried.
S3_RETRY_CONF = {
    "spark.hadoop.fs.s3a.attempts.maximum": "2",
    "spark.hadoop.fs.s3a.retry.limit": "2",
    "spark.hadoop.fs.s3a.retry.interval": "250ms",
    "spark.hadoop.fs.s3a.connection.establish.timeout": "5s",
}


def is_object_store(location: object) -> bool:
    """Whether ``location`` (a string or path) is an ``s3://`` or ``s3a://`` URL."""
    text = str(location or "")
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.lower() in OBJECT_STORE_SCHEMES


def object_store_conf(locations, environ=None) -> dict[str, str]:
    """The Spark settings for a session that will read or write ``locations`` (URLs or paths;
    ``None`` entries are skipped): none when no location is on S3; otherwise the S3A jars
    (``spark.jars``: local files, which executors fetch from the driver), ``s3://`` served by
    S3A as ``s3a://`` is, the endpoint and region from ``environ`` (default ``os.environ``:
    ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, a custom endpoint with path-style access;
    ``AWS_REGION``), credentials from the JVMs' environment when ``AWS_ACCESS_KEY_ID`` is set
    (else S3A's default chain: instance and container roles), the magic committer and quick
    failures. Never a credential: those stay in the environment.

    Raises :class:`topic_lineage.local.s3a_jars.S3aJarsError` when the jars are not installed."""
    if not any(is_object_store(location) for location in locations or ()):
        return {}
    from topic_lineage.local.s3a_jars import jar_paths

    env = os.environ if environ is None else environ
    conf = {
        "spark.jars": ",".join(str(path) for path in jar_paths()),
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
        **S3_COMMIT_CONF,
        **S3_RETRY_CONF,
    }
    if env.get("AWS_ACCESS_KEY_ID"):
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = ENV_CREDENTIALS_PROVIDER
    from topic_lineage import location

    endpoint, region = location.endpoint(env), location.region(env)
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.lower().startswith("https://")).lower()
        region = region or "us-east-1"  # an S3-compatible server ignores it; the SDK needs one
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    return conf


def session_locations(locations=()) -> list[str]:
    """The locations a session will use: ``$TOPIC_LINEAGE_HOME`` (read as it is written: an
    ``s3://`` home is no local path) and ``locations``."""
    from topic_lineage.tables import HOME_ENV

    return [location for location in (os.environ.get(HOME_ENV), *locations) if location]


def merged_conf(base: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """``base`` updated by ``extra``, with ``spark.jars`` joined rather than replaced."""
    merged = {**base, **extra}
    jars = [value for value in (base.get("spark.jars"), extra.get("spark.jars")) if value]
    if jars:
        merged["spark.jars"] = ",".join(jars)
    return merged


def get_spark(app_name: str = "topic-lineage", master: str | None = None, conf: dict | None = None,
              *, quick_jit: bool = False, locations=()):
    """A SparkSession with UTC time, no UI, and partition-type inference off.

    ``master`` defaults to ``$TOPIC_LINEAGE_SPARK_MASTER`` or ``local[*]``. Partition-type
    inference is off so that a cluster ID such as ``123`` stays a string in directory names.
    ``quick_jit``: start the driver's JVM with :data:`QUICK_JIT_OPTION` (a one-off process over
    little data, :func:`quick_jit_for`); no effect when this process's JVM already runs.
    ``locations``: URLs the session will read or write besides ``$TOPIC_LINEAGE_HOME``; when one
    of them is on S3 the session gets :func:`object_store_conf` (``conf`` wins over it).
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
    object_store = object_store_conf(session_locations(locations))
    settings = merged_conf({**STATUS_RETENTION, **CALL_SITE_CONF, **PYTHON_WORKERS_CONF, **object_store},
                          conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    _quiet_gateway(builder)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if object_store:
        _check_s3a_loadable(spark)
    return spark


def starts_a_jvm() -> bool:
    """Whether this process's next session starts a JVM (none runs yet, and no spark-submit
    started one for it): only then do the driver's JVM options (:func:`driver_java_options`)
    take effect."""
    from pyspark import SparkContext

    return SparkContext._gateway is None and not os.environ.get("PYSPARK_GATEWAY_PORT")


def session_running() -> bool:
    """Whether this process runs a classic Spark session already (a notebook's, a test's): a
    command run inside it (:func:`topic_lineage.cli.main`) uses that session and leaves it
    running for its owner, where a one-off command stops the session it started."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def stop(spark) -> None:
    """``spark.stop()`` without its wait of up to a second at the end.

    PySpark's ``SparkContext.stop`` stops the JVM's context, then shuts down the context's
    accumulator server and waits for it, and that server's handler reads the JVM's connection
    (open once a Python worker has run) in polls of one second: every command that ran a Python
    task waited 0.5-1.0 s there before it could exit (measured 2026-11-29, 2 cores: ``stop``
    1.0 s, and 0.1 s without the wait). Here the context stops as before, and the server is
    told to shut down and finishes doing so within that second on a thread of its own: a one-off
    command exits at once, a longer-lived process (a test run, a Connect server's owner) starts
    its next context meanwhile, with a server of its own. A Connect session has no accumulator
    server: its ``stop`` is called as it is."""
    import threading

    context = getattr(spark, "_sc", None)  # a classic session's SparkContext (Connect: none)
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        context._accumulatorServer = None  # so that SparkContext.stop does not wait for it
    try:
        spark.stop()
    finally:
        if server is not None:
            server.server_shutdown = True  # its handler's poll loop ends within a second
            threading.Thread(target=server.shutdown, name="spark-accumulator-shutdown",
                             daemon=True).start()


SPARK_LOGS_ENV = "TOPIC_LINEAGE_SPARK_LOGS"
"""``1``: leave the driver JVM's standard error as Spark writes it (its start-up lines too)."""

START_UP_CHATTER = (
    "WARNING: Using incubator modules:",  # the JDK: Spark's launcher adds jdk.incubator.vector
    "Using Spark's default log4j profile:",
    'Setting default log level to "WARN".',
    "To adjust logging level use sc.setLogLevel(newLevel).",
    "WARN NativeCodeLoader: Unable to load native-hadoop library",
)
"""The lines every driver JVM writes as it starts, before :func:`get_spark` can set the log level:
the user of ``topic-lineage build`` sees what topic-lineage says, not these (issue #53)."""


def _quiet_gateway(builder) -> None:
    """Start this process's Spark JVM (when none runs yet, and not under ``spark-submit``, whose
    JVM already runs) with its standard error read by a thread that drops
    :data:`START_UP_CHATTER` and passes every other line on to ours: a JVM's real error still
    reaches the user. ``$TOPIC_LINEAGE_SPARK_LOGS=1`` leaves it alone."""
    import threading

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if not starts_a_jvm() or os.environ.get(SPARK_LOGS_ENV) == "1":
        return
    conf = SparkConf()
    for key, value in builder._options.items():  # what getOrCreate would give spark-submit
        conf.set(key, value)
    read_end, write_end = os.pipe()

    def relay() -> None:
        with os.fdopen(read_end, "rb") as errors:
            for line in iter(errors.readline, b""):
                text = line.decode(errors="replace")
                if not any(chatter in text for chatter in START_UP_CHATTER):
                    sys.stderr.write(text)
                    sys.stderr.flush()

    relaying = threading.Thread(target=relay, name="spark-driver-stderr", daemon=True)
    relaying.start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})
    except BaseException:
        os.close(write_end)
        relaying.join(timeout=10)  # a JVM that failed to start said why: before our error
        raise
    os.close(write_end)  # the JVM holds the pipe's other end
    SparkContext._ensure_initialized(gateway=gateway)


class ObjectStoreSessionError(TopicLineageError, RuntimeError):
    """This process's Spark JVM cannot reach S3: it was started without the S3A jars."""


def _check_s3a_loadable(spark) -> None:
    """The driver loads jars only when its JVM starts: a session asked for S3 in a process whose
    JVM an earlier session without S3 started has no S3A, and would fail later on an obscure
    ``No FileSystem for scheme``."""
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    if hadoop_conf.getClassByNameOrNull("org.apache.hadoop.fs.s3a.S3AFileSystem") is None:
        raise ObjectStoreSessionError(
            "this process's Spark JVM was started without Hadoop's S3A jars (by a session that "
            "used no s3:// location), and a JVM cannot add them later: start the session that "
            "uses S3 first, or in a process of its own")


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
