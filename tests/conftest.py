"""Shared fixtures: an isolated TOPIC_LINEAGE_HOME, one SparkSession, a real Kafka-protocol broker,
a real S3 server."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# This process's one JVM serves every Spark test, whichever starts it first (the session fixture,
# or a task or command run in-process): 1-2 GiB fills up over the suite and thrashes in GC.
os.environ["TOPIC_LINEAGE_DRIVER_MEMORY"] = "4g"

pytest_plugins = ["tests.suite_timings"]  # where the suite's time goes (issue #52)

# Airflow reads its home when first imported: give the test session its own, empty one (never
# ~/airflow), with the repository's dags/ as the DAG folder and no example DAGs.
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="tl-test-airflow-")
atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).resolve().parent.parent / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"


@pytest.fixture
def tl_home(tmp_path, monkeypatch):
    """A fresh, empty TOPIC_LINEAGE_HOME for one test."""
    home = tmp_path / "tl-home"
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def spark():
    """A local SparkSession (2 cores, few shuffle partitions), shared by one test module.

    Its JVM, when this fixture starts it, compiles with C1 only (``quick_jit``): the tests' data
    are tiny, so C2's compilations on background threads only compete for the two cores (issue
    #52, 2026-11-28, quiet 2 cores: the Spark files of the fast tier 108.6-113.5 s with both
    compilers, 96.2-99.5 s with C1 only, one worker; the whole fast tier 282 -> 247 s, with
    Azurite's data in memory beside it)."""
    from topic_lineage.spark import get_spark

    return get_spark("topic-lineage-tests", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"},
                     quick_jit=True)


_KEPT_CONTEXT = {"context": None, "modules": 0}
MODULES_PER_CONTEXT = 16
"""Test modules one local SparkContext serves at most before the next starts a new one."""
HEAP_KEPT_BYTES = 1536 * 2**20
"""A context is stopped after a module when its JVM's heap still holds more than this after a
collection (the driver's heap is ``TOPIC_LINEAGE_DRIVER_MEMORY``, 4 GiB here)."""


_DRIVER_JVM: list[str] = []
"""One line on this worker's Spark driver JVM, once it has one: the module that started it and its
JIT. The first ``get_spark`` of a test process starts the JVM that serves every later Spark module
of that process, so its options are those of whichever module came first. With HotSpot's C2 too,
the in-process Spark files used a quarter more CPU than with C1 only (issue #52, 2026-12-04, quiet
2 cores, test_quality_expectations.py, test_quality_in_process.py and test_walk_build.py in one
process, two runs each: 149.1 and 153.7 CPU-seconds against 121.0 and 118.2, the same wall
time), and in a whole run one worker's JVM was started so (by tests/test_spark_standalone.py)."""


def _note_driver_jvm(module: str) -> None:
    from pyspark import SparkContext

    if _DRIVER_JVM or SparkContext._jvm is None:
        return
    from py4j.protocol import Py4JError

    from topic_lineage.spark import QUICK_JIT_OPTION

    try:
        arguments = list(SparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                         .getInputArguments())
    except Py4JError as exc:  # a test ended the JVM
        jit = f"its options unknown ({type(exc).__name__})"
    else:
        jit = "C1 only" if QUICK_JIT_OPTION in arguments else "C1 and C2 (not quick_jit)"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "this process")
    _DRIVER_JVM.append(f"{worker}: started in {module}, {jit}")


@pytest.fixture(scope="module", autouse=True)
def _spark_context_bounded_per_module(request):
    """After each module: keep the local SparkContext a module started (through the ``spark``
    fixture, or a task or command run in-process) for the next modules, up to
    :data:`MODULES_PER_CONTEXT` of them and while its JVM's heap after a collection is under
    :data:`HEAP_KEPT_BYTES`; else stop it, so the next module starts from an empty driver. The
    JVM stays either way (and keeps its heap size). Each new context costs its start, a new
    Python daemon and workers, and their first Arrow batches: ten Spark modules alone on one
    worker (issue #52, 2026-11-29, 2 cores, the fast tier's tests of them) took 118.2
    CPU-seconds with a context per module and 94.2 with one for all. The bounds stand for what
    a context accumulates over hundreds of builds (its status stores, broadcasts, block manager,
    shuffle files): in one context for the whole run the 4 GiB heap once filled up late in the
    suite and joins failed to broadcast. A context on another master (a standalone cluster's)
    is stopped after its module."""
    yield
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from topic_lineage.spark import stop

    _note_driver_jvm(request.node.nodeid)

    context = SparkContext._active_spark_context
    if context is None:
        return
    if _KEPT_CONTEXT["context"] is not context:
        _KEPT_CONTEXT.update(context=context, modules=0)
    _KEPT_CONTEXT["modules"] += 1
    if (context.master.startswith("local") and _KEPT_CONTEXT["modules"] < MODULES_PER_CONTEXT
            and _heap_after_collection(context) < HEAP_KEPT_BYTES):
        return
    _KEPT_CONTEXT.update(context=None, modules=0)
    session = SparkSession._instantiatedSession
    if session is not None:
        stop(session)  # without waiting up to a second for the accumulator server
    else:
        context.stop()


def _heap_after_collection(context) -> int:
    """Bytes the driver JVM's heap holds right after a full collection."""
    jvm = context._jvm
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    return runtime.totalMemory() - runtime.freeMemory()


OFFSETS_TOPIC = "__consumer_offsets"  # on the session broker from the start (broker_session)
_BROKER_STARTS: list[str] = []  # one line per broker a session started, printed at the end


def started_broker(broker) -> None:
    """Record a started broker's one-line description (version, start time) for the summary."""
    _BROKER_STARTS.append(broker.describe())


@pytest.fixture(scope="session")
def broker_session():
    """Real Apache Kafka (KRaft, the default version) on free loopback ports, one per test
    session (per xdist worker): a JVM start costs seconds.

    Its ``__consumer_offsets`` exists from the start, as on any cluster whose groups ever
    committed: whichever test runs first, every capture lists it (one topic more than a test
    creates, :data:`OFFSETS_TOPIC`)."""
    from topic_lineage.local.broker import LocalBroker

    with LocalBroker() as broker:
        started_broker(broker)
        broker.ensure_offsets_topic()
        yield broker


@pytest.fixture(scope="session")
def _brokers_by_version():
    """Brokers of other Kafka versions than the default, started on first use (one each)."""
    brokers: dict = {}
    yield brokers
    for broker in brokers.values():
        broker.stop()


@pytest.fixture
def broker_of_version(request, _brokers_by_version):
    """``get(version)``: a session broker of that Kafka version, reset as ``broker`` is."""
    from topic_lineage.local.broker import LocalBroker
    from topic_lineage.local.kafka_dist import default_version

    def get(version: str):
        if version == default_version():
            broker = request.getfixturevalue("broker_session")
        else:
            broker = _brokers_by_version.get(version)
            if broker is None:
                broker = _brokers_by_version[version] = LocalBroker(version=version).start()
                started_broker(broker)
                broker.ensure_offsets_topic()
        broker.reset()
        return broker

    return get


@pytest.fixture
def broker(broker_session):
    """The session broker, with every topic (but Kafka's internal ones) and every consumer
    group deleted before the test."""
    broker_session.reset()
    return broker_session


@pytest.fixture(scope="session")
def _catalog_postgres(tmp_path_factory):
    """One PostgreSQL server per test session (worker) for Iceberg SQL catalogs."""
    from tests.catalog_postgres import CatalogPostgres

    server = CatalogPostgres(tmp_path_factory.mktemp("catalog-postgres") / "data").start()
    yield server
    server.stop()


@pytest.fixture
def iceberg_postgres(_catalog_postgres):
    """``new(hint)``: the URL of a new database on the session's PostgreSQL, for a test's own
    Iceberg SQL catalog (``PYICEBERG_CATALOG__<NAME>__URI``)."""
    return _catalog_postgres.database


_S3_STARTS: list[str] = []  # one line per S3 server a session started, printed at the end


def started_s3_server(server) -> None:
    """Record a started S3 server's one-line description (address, start time) for the summary."""
    _S3_STARTS.append(server.describe())


def require_seaweedfs() -> None:
    """For a test that needs SeaweedFS's weed binary: a failure when it is not built, a skip
    only when TOPIC_LINEAGE_NO_SEAWEEDFS=1 says it is deliberately not (scripts/test.sh --fast)."""
    from tests.servers import seaweedfs_dist

    if seaweedfs_dist.is_built():
        return
    reason = (f"SeaweedFS's weed is not built ({seaweedfs_dist.weed_path()}): run "
              "bash scripts/install_seaweedfs.sh")
    if os.environ.get(seaweedfs_dist.SKIP_ENV) == "1":
        pytest.skip(f"{seaweedfs_dist.SKIP_ENV}=1: {reason}")
    pytest.fail(reason)


@pytest.fixture
def seaweedfs_built():
    """For a test that starts S3 servers of its own: the weed binary is there (else the
    failure or skip of :func:`require_seaweedfs`)."""
    require_seaweedfs()


# The session's S3 server, started in the background as soon as the session's tests are known
# to need it: SeaweedFS spends most of its ~12 s start waiting (its filer confirms it has no
# peers), which the tests run before the first S3 test no longer wait for. The thread that
# starts it lives until the session ends: the server's process dies with the thread that
# started it (PR_SET_PDEATHSIG, tests/servers/s3_server.py).
_EARLY_S3: dict = {}
_EARLY_S3_READY = threading.Event()
_SESSION_ENDED = threading.Event()


def _start_early_s3_server(items) -> None:
    from tests.servers import seaweedfs_dist

    if not seaweedfs_dist.is_built() or not any("s3_server" in getattr(item, "fixturenames", ())
                                                 for item in items):
        return
    from tests.servers.s3_server import S3Server

    server = S3Server()

    def start():
        try:
            server.start()
        except Exception as exc:  # noqa: BLE001 (the fixture starts one itself, and says why)
            _EARLY_S3["error"] = exc
            _keep_text(str(exc), f"seaweedfs-early-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.txt")
        finally:
            _EARLY_S3_READY.set()
        _SESSION_ENDED.wait()

    _EARLY_S3["server"] = server
    threading.Thread(target=start, name="early-s3-server", daemon=True).start()


def _early_s3_server():
    """The server :func:`_start_early_s3_server` started, once it answers; None when there is
    none (or it failed to start: the fixture starts one itself, and says why if that fails)."""
    server = _EARLY_S3.pop("server", None)
    if server is None:
        return None
    _EARLY_S3_READY.wait()
    return None if _EARLY_S3.pop("error", None) is not None or not server.running else server


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 server (SeaweedFS on free loopback ports, authentication on), one per test
    session (per xdist worker), started in the background when the session's tests were
    collected. Tests that stop, kill or break a server start their own."""
    require_seaweedfs()
    from tests.servers.s3_server import S3Server

    with _early_s3_server() or S3Server() as server:
        started_s3_server(server)
        yield server
        _keep_log(server.log_path, f"seaweedfs-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.log")


def _keep_log(path: Path, name: str) -> None:
    """A copy of a session server's log in ``test-output/`` (its own directory goes with it):
    what a failure of a shared server leaves to read afterwards."""
    with contextlib.suppress(OSError):
        _keep_text(path.read_text(errors="replace"), name)


def _keep_text(text: str, name: str) -> None:
    with contextlib.suppress(OSError):
        target = Path(__file__).resolve().parents[1] / "test-output" / name
        target.parent.mkdir(exist_ok=True)
        target.write_text(text)


@pytest.fixture
def s3_bucket(s3_server, request):
    """A new, empty bucket on the session's S3 server for this test (an ``S3Bucket``: ``env()``,
    ``url(path)``, ``keys(prefix)``, ``client()``, ``filesystem()``), removed afterwards."""
    bucket = s3_server.new_bucket(request.node.name)
    yield bucket
    if s3_server.running:
        bucket.delete()


@pytest.fixture(scope="session")
def gcs_server():
    """fake-gcs-server on a free loopback port, one per test session (per xdist worker); tests
    share its bucket and keep to prefixes of their own."""
    from tests.servers import gcs_emulator

    if not gcs_emulator.installed():
        pytest.skip(f"fake-gcs-server {gcs_emulator.version()} is not installed "
                    f"({gcs_emulator.binary()}): run bash scripts/install_emulators.sh")
    with gcs_emulator.GcsEmulator() as server:
        yield server


@pytest.fixture(scope="session")
def azurite_server():
    """Azurite's blob service on a free loopback port, one per test session (per xdist worker);
    tests share its container and keep to prefixes of their own."""
    from tests.servers import azurite

    if not azurite.installed():
        pytest.skip(f"Azurite {azurite.version()} is not installed ({azurite.blob_main()}, or no "
                    "node on PATH): run bash scripts/install_emulators.sh")
    with azurite.Azurite() as server:
        yield server


@pytest.fixture
def s3_proxy(s3_server):
    """An ``S3FaultProxy`` in front of the session's S3 server, for this test."""
    from tests.servers.s3_faults import S3FaultProxy

    with S3FaultProxy(s3_server.endpoint) as proxy:
        yield proxy


def pytest_collection_finish(session):
    _start_early_s3_server(session.items)


def pytest_sessionfinish(session):
    unused = _early_s3_server()  # started, but no test of this worker asked for it
    if unused is not None:
        unused.close()
    _SESSION_ENDED.set()
    _drop_handlers_of_captured_streams()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the lines to the controller
        workeroutput["broker_starts"] = list(_BROKER_STARTS)
        workeroutput["s3_starts"] = list(_S3_STARTS)
        workeroutput["driver_jvms"] = list(_DRIVER_JVM)


def _drop_handlers_of_captured_streams() -> None:
    """Remove the log handlers that write to pytest's captured output (the root logger has one
    from before the tests, likely from Airflow's logging set-up), which pytest closes after the
    session: records logged at exit (py4j's INFO line when a leftover JVM connection is freed)
    would print "--- Logging error --- ... I/O operation on closed file". Records at WARNING
    and above still reach stderr through logging's last resort."""
    real = (sys.__stderr__, sys.__stdout__)
    for logger in [logging.getLogger(), *logging.root.manager.loggerDict.values()]:
        for handler in list(getattr(logger, "handlers", ())):
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and stream is not None and stream not in real:
                logger.removeHandler(handler)


def pytest_xdist_make_scheduler(config, log):
    """The waiting lane's scheduler when the run asks for one (tests/waiting_lane.py), else
    xdist's own."""
    from tests import waiting_lane

    return waiting_lane.WaitingLaneScheduling(config, log) if waiting_lane.wanted(config) else None


def pytest_testnodedown(node, error):
    _BROKER_STARTS.extend(getattr(node, "workeroutput", {}).get("broker_starts", []))
    _S3_STARTS.extend(getattr(node, "workeroutput", {}).get("s3_starts", []))
    _DRIVER_JVM.extend(getattr(node, "workeroutput", {}).get("driver_jvms", []))


def pytest_terminal_summary(terminalreporter):
    for title, lines in (("local Kafka brokers", _BROKER_STARTS), ("local S3 servers", _S3_STARTS),
                         ("the test processes' Spark driver JVMs", _DRIVER_JVM)):
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _release_cached_frames(request):
    """Unpersist what a test's transforms persisted, so the shared session's heap stays small."""
    yield
    if "spark" in request.fixturenames:
        request.getfixturevalue("spark").catalog.clearCache()


@pytest.fixture(autouse=True)
def _root_log_handlers_restored():
    """The root logger's handlers and level as they were before each test. ``cli.main`` run in
    a test calls ``logging.basicConfig``, whose handler writes to the ``sys.stderr`` of that moment
    (pytest's capture of that test, closed after it): left in place, every later record
    (py4j's INFO lines when a leftover JVM connection is freed) printed "--- Logging error
    --- ... I/O operation on closed file" at the end of every run."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in before]:
        root.removeHandler(handler)
    root.setLevel(level)


# The longest test files, started first so that the two workers (scripts/test.sh) do not end
# on them one after the other; order within a file is kept.
_LONGEST_FIRST = (  # by their measured times in a full run (CI rehearsal of 2f431ad, 2 workers:
    # the sum of each file's tests among the 30 slowest, s), then the order measured before
    "test_object_store_faults.py",  # 152 + 80 + 61
    "test_benchmarks_quick.py",  # 275
    "test_airflow_local_deployment.py",  # 149 + 62 (setup) + ...
    "test_catalog_maintenance.py",  # 190 (rehearsal of e0978fe)
    "test_object_store_home.py",  # 128 + 85 + ... (5-6 min alone)
    "test_airflow_object_store.py",  # 187 + 57 (setup)
    "test_object_store_references.py",  # 454 alone at load 4-7 (four builds, three local builds)
    "test_faults.py",  # 71 + 48 + ... (about 5 min in earlier rounds)
    "test_spark_standalone.py",  # 128 (setup) + 19 + 25 + 14 in the fast tier: its longest file, early there
    "test_iceberg_peers.py",  # 127 + 96 (what the CLI publishes) + 65 + 48 + ...
    "test_spark_server.py",  # 82 + 58 + ...
    "test_bench_dbt.py",  # 156
    "test_object_store_retention.py",  # 99 + 53
    "test_airflow_own_deployment.py",  # 73 (setup) + 68 + ...
    "test_group_spark.py",  # 66 + 35
    "test_scd_publish.py",
    # the files that mostly wait (timeouts, broker and Airflow starts) between files that
    # compute, so that the two workers do not wait at once (fast tier, issue #52)
    "test_dags_run.py",  # 63 + 40 + 22 + 21 + ...
    "test_scd_rules.py",
    "test_capture.py",  # 103 + ...
    "test_spark_s3.py",  # 2.5 min alone
    "test_quality_gate.py",
    "test_scd_order.py",
    "test_cli.py",
    "test_scd_properties.py",
    "test_scd_split.py",
    "test_quality_in_process.py",  # 34 + 33 + 30 in the fast tier
    "test_query_engines.py",  # 51 in the fast tier
    "test_spark_session.py",  # 48 + 20 + 20 in the fast tier
    "test_jvm_archive.py",  # 45 in the fast tier
    # mostly waiting (four SeaweedFS starts, 5 CPU-seconds in 55 s): beside files that compute;
    # next to test_storage_contract.py (half waiting) the two cores were a fifth busy for 35 s
    # (issue #52, 2026-12-03, the per-file CPU of suite_timings.py)
    "test_s3_server.py",
    "test_ui_real_build.py",
    # 15-30 s each in the fast tier: before the many short files, which then even out the end
    "test_quality_expectations.py",
    "test_storage_contract.py",
    "test_scd_walk.py",  # 37 s, all CPU (property tests): it ran last, alone, when unlisted
    "test_walk_build.py",
    "test_iceberg_tables.py",
    "test_bench_scale.py",  # 11 s, mostly waiting
    "test_lineage_emit.py",
    "test_airflow_plugin_registration.py",
    "test_acl_capture.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = item.path.name
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable
