"""A long-lived Spark for the local deployment: a Spark Connect server, so that a query does not
start a JVM of its own.

``topic-lineage airflow start`` starts it (:func:`start`) and ``airflow stop`` stops it
(:func:`stop`); ``topic-lineage query`` uses it when it answers (:func:`remote_url`) and starts
``local[2]`` otherwise. The server is the one in the pyspark wheel
(``org.apache.spark.sql.connect.service.SparkConnectServer``, run by ``spark-submit``), listening
on the loopback address only. Its pid and port are kept in ``$TOPIC_LINEAGE_HOME/spark-connect.json``.

Authentication: the server takes a token (Spark's pre-shared key, ``SPARK_CONNECT_AUTHENTICATE_TOKEN``
in its environment): a client without it, or with another, is refused (``UNAUTHENTICATED``). The
token is generated once per home into ``$TOPIC_LINEAGE_HOME/spark-connect.token`` (mode 0600,
readable by the user only, as the Airflow admin password is) and never put on a command line
(``ps`` shows argv, Airflow's event log records CLI command lines). :func:`connect` reads it
from that file and sends it as ``Authorization: Bearer ...`` on a plaintext gRPC channel with
gRPC's *local* credentials, which carry a token only to a loopback peer: what PySpark itself
does for ``sc://localhost`` with a token (its local mode), with the address pinned to
127.0.0.1, where the server listens (``localhost`` may resolve to ``::1`` first, a port the
server does not hold). PySpark sends a token over TLS to any other host, so the URL stays
``sc://127.0.0.1:PORT`` and carries no token.

Tables: the server's in-memory catalog is shared by its clients, so the published version's
tables are registered there once per published version (marked by a table property) and reused
by every later query; a query of another ``--version`` does not use the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.fsutil import pid_alive
from topic_lineage.spark import (
    PYTHON_WORKERS_CONF,
    STATUS_RETENTION,
    driver_java_options,
    object_store_conf,
    session_locations,
    session_running,
)
from topic_lineage.spark import stop as stop_spark

REMOTE_ENV = "TOPIC_LINEAGE_SPARK_REMOTE"  # e.g. sc://127.0.0.1:15002: use this server
PORT_ENV = "TOPIC_LINEAGE_CONNECT_PORT"
TOKEN_FILE = "spark-connect.token"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
"""Where the server reads its token (Spark's ``Connect.getAuthenticateToken``: the
``spark.connect.authenticate.token`` conf, else this variable); set in its environment only."""
DEFAULT_PORT = 15002
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
VERSION_PROPERTY = "topic_lineage.version"


class SparkServerError(TopicLineageError):
    """The Spark Connect server could not be started."""


def _state_path() -> Path:
    from topic_lineage.local.warm import STATE_FILE

    return t.home() / STATE_FILE


def _spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def token_path() -> Path:
    """This home's Spark Connect token: ``$TOPIC_LINEAGE_HOME/spark-connect.token`` (0600)."""
    return t.home() / TOKEN_FILE


def ensure_token() -> Path:
    """Generate this home's token unless it exists (created 0600, never wider, and never
    replaced: a second writer keeps the first's); its path."""
    path = token_path()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)  # fails when another process made one meanwhile: keep that one
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_token() -> str:
    """This home's token; :class:`SparkServerError` naming the file when it is missing,
    unreadable, empty or readable by others."""
    path = token_path()
    try:
        mode = path.stat().st_mode & 0o777
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise SparkServerError(
            f"cannot read the Spark Connect server's token {path} ({exc.strerror}): the server "
            "refuses clients without it; 'topic-lineage airflow stop' and 'topic-lineage "
            "airflow start' restart the server with a new one") from None
    if mode & 0o077:
        raise SparkServerError(f"the Spark Connect server's token {path} is readable by others "
                               f"(mode {mode:04o}); run: chmod 600 {path}")
    if not token:
        raise SparkServerError(f"the Spark Connect server's token {path} is empty; delete it "
                               "and restart the server ('topic-lineage airflow stop', 'start')")
    return token


def _answers(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _state() -> dict | None:
    try:
        state = json.loads(_state_path().read_text())
    except (OSError, ValueError):
        return None
    return state if pid_alive(int(state.get("pid", 0))) else None


def remote_url() -> str | None:
    """``sc://127.0.0.1:PORT`` of a running server that accepts connections, else ``None``."""
    if os.environ.get(REMOTE_ENV):
        return os.environ[REMOTE_ENV]
    state = _state()
    if state and _answers(int(state["port"])):
        return f"sc://127.0.0.1:{state['port']}"
    return None


def start_for_deployment() -> dict | None:
    """``topic-lineage airflow start``: start the server in the background when
    ``$TOPIC_LINEAGE_CONNECT=on`` (queries fall back to ``local[2]`` until it listens).

    Opt-in (issue #40 decides the default): the server refuses clients without this home's
    token (:func:`read_token`), but runs SQL, and so writes files, with the user's rights for
    any client that has it."""
    if os.environ.get("TOPIC_LINEAGE_CONNECT", "").lower() not in ("on", "1", "true", "yes"):
        return None
    try:
        return start(wait_s=0)
    except SparkServerError as exc:
        print(f"Spark Connect server not started: {exc}", file=sys.stderr)
        return None


def start(*, port: int | None = None, wait_s: float = 300, memory: str | None = None) -> dict:
    """Start the server (own process group, log in ``$TOPIC_LINEAGE_HOME/logs``) unless one runs;
    wait up to ``wait_s`` until it accepts connections. Returns ``{"pid", "port", "log"}``."""
    running = _state()
    if running:
        return running
    port = port or int(os.environ.get(PORT_ENV, DEFAULT_PORT))
    if _answers(port):
        raise SparkServerError(f"port {port} is taken; set ${PORT_ENV} to a free port")
    logs = t.home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / "spark-connect.out"
    ensure_token()
    # The token goes in the server's environment, never on its command line (ps shows argv).
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           TOKEN_ENV: read_token()}
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.sql.shuffle.partitions": os.environ.get("TOPIC_LINEAGE_SHUFFLE_PARTITIONS", "8"),
        "spark.driver.extraJavaOptions": driver_java_options(),  # UTC; the class archive
        **STATUS_RETENTION,  # a server lives for days: keep its heap for data
        **PYTHON_WORKERS_CONF,  # its Python workers import the installed pyspark
        # the pipeline's shared session (connect(shared=True)) lives as long as the server
        "spark.connect.session.manager.defaultSessionTimeout": "3650d",
        # a home on S3: the S3A jars and settings, never a credential (the server's environment
        # has those, as it has the token)
        **object_store_conf(session_locations()),
    }
    command = [_spark_submit(), "--class", SERVER_CLASS, "--master",
               os.environ.get("TOPIC_LINEAGE_SPARK_MASTER", "local[*]"), "--name",
               "topic-lineage-connect", "--driver-memory",
               memory or os.environ.get("TOPIC_LINEAGE_DRIVER_MEMORY", "2g")]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command.append("spark-internal")
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    from topic_lineage.local import warm

    state = {"pid": proc.pid, "port": port, "log": str(log_path), "warm": warm.start(logs),
             "pipeline_session": str(uuid.uuid4())}
    _state_path().write_text(json.dumps(state))
    deadline = time.monotonic() + wait_s
    while wait_s > 0:
        if _answers(port):
            warm.wait(state["warm"], deadline)  # until then, commands run in their own processes
            return state
        if proc.poll() is not None:
            _state_path().unlink(missing_ok=True)
            raise SparkServerError(f"the Spark Connect server exited at start; see {log_path}")
        if time.monotonic() > deadline:
            stop()
            raise SparkServerError(f"the Spark Connect server did not listen on {port} in "
                                   f"{wait_s:g}s; see {log_path}")
        time.sleep(1)
    return state


def stop(timeout_s: float = 30) -> bool:
    """Stop the server this home started; ``False`` when none was running."""
    state = _state()
    _state_path().unlink(missing_ok=True)
    if not state:
        return False
    from topic_lineage.local import warm

    warm.stop(state.get("warm"))
    pid = int(state["pid"])
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5)):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return True
        deadline = time.monotonic() + wait
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.3)
        if not pid_alive(pid):
            return True
    return True


def _home_server_url() -> str | None:
    """``sc://127.0.0.1:PORT`` of this home's server while its process lives, else ``None``."""
    state = _state()
    return f"sc://127.0.0.1:{state['port']}" if state else None


def _loopback_channel(url: str, token: str):
    """PySpark's channel builder for ``url`` (``sc://127.0.0.1:PORT``) that sends ``token`` as
    a bearer token over plaintext, to a loopback peer only (gRPC's local credentials refuse any
    other): PySpark's own way for ``sc://localhost`` (``DefaultChannelBuilder.toChannel``),
    for the address the server listens on."""
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder

    class LoopbackChannelBuilder(DefaultChannelBuilder):
        def toChannel(self):
            credentials = grpc.composite_channel_credentials(
                grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP),
                grpc.access_token_call_credentials(self.token))
            return self._secure_channel(self.endpoint, credentials)

    builder = LoopbackChannelBuilder(url)
    builder.set(DefaultChannelBuilder.PARAM_TOKEN, token)
    return builder


def connect(url: str, *, shared: bool = False):
    """A Spark Connect session on ``url``: on this home's server with its token
    (:func:`read_token`, an error naming the file when it cannot be read); on another server
    (``$TOPIC_LINEAGE_SPARK_REMOTE``) as PySpark connects to ``url`` (its ``;token=`` or
    ``$SPARK_CONNECT_AUTHENTICATE_TOKEN``, over TLS).

    ``shared``: on this home's server, the pipeline's one session (its ID in the server's state
    file), which ``stop()`` leaves open. A build's walk runs in Spark's Python workers, and the
    server starts those per session: every build in a session of its own would start them and
    import the walk again (about 1.5 s of a warm build). Builds hold the build lock, so they do
    not use it at once; a validation beside a build shares only settings that change how, not
    what, Spark computes (topic_lineage.spark.sized_for)."""
    if url != _home_server_url():
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(url).getOrCreate()
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    channel = _loopback_channel(url, read_token())
    session_id = (_state() or {}).get("pipeline_session") if shared else None
    if session_id:
        channel.set(DefaultChannelBuilder.PARAM_SESSION_ID, session_id)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # as SparkSession.builder.remote() sets it
    session = ConnectSession.builder.channelBuilder(channel).getOrCreate()
    if session_id:
        session.release_session_on_close = False  # stop() closes this client only
    return session


def use_published_tables(spark, version: str) -> None:
    """Make ``topic_lineage.<table>`` name ``version``'s tables in the server's shared catalog:
    registered once per version and set of snapshots read (the mark is a property of the last
    table registered)."""
    from topic_lineage import warehouse as wh
    from topic_lineage.warehouse import reads

    marked = f"{t.DATABASE}.{t.TABLES[-1]}"
    key = reads.snapshot_key(version)  # the version's snapshots: another engine's compaction moves them
    try:
        rows = spark.sql(f"SHOW TBLPROPERTIES {marked} ('{VERSION_PROPERTY}')").collect()
        current = rows[0][1] if rows else None
    except Exception:  # noqa: BLE001 - not registered yet (the error class varies)
        current = None
    if current == key:
        spark.sql(f"USE {t.DATABASE}")
        return
    wh.register_tables(spark, version)
    # the tables are read-only views (warehouse.register_tables)
    spark.sql(f"ALTER VIEW {marked} SET TBLPROPERTIES ('{VERSION_PROPERTY}' = '{key}')")


def pipeline_session(app_name: str, master: str | None = None, *, quick_jit: bool = False):
    """The session a build or a validation runs on: the deployment's Spark Connect server when
    one answers (:func:`remote_url`) and no ``master`` was asked for,
    so the step starts no JVM and plans on a warm one; else :func:`get_spark` as before
    (``quick_jit``: see there).

    Returns ``(spark, remote_url_or_None)``. ``spark.stop()`` on a Connect session only releases
    it on the server; the server keeps running.
    """
    from topic_lineage.spark import get_spark

    if master is None:
        url = remote_url()
        if url:
            return connect(url, shared=True), url
    return get_spark(app_name, master=master, quick_jit=quick_jit), None


class LazySession:
    """A :func:`pipeline_session` opened on first call, for a step that may need none (the gate
    validates a small version in process). Use as a context manager; calling it returns the
    session, started once; leaving releases a Connect session on the server (a local one ends
    with the process, as with :func:`pipeline_session`).

    ``opening``: a context manager factory wrapped around the start (the Airflow task sends the
    JVM's output to its log with it).
    """

    def __init__(self, app_name: str, *, opening=contextlib.nullcontext):
        self.app_name, self.opening = app_name, opening
        self.spark, self.remote = None, None

    def __call__(self):
        if self.spark is None:
            with self.opening():
                self.spark, self.remote = pipeline_session(self.app_name)
        return self.spark

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.remote:
            self.spark.stop()


class StartingSession:
    """A :func:`pipeline_session` started in a thread of its own, so that the caller goes on
    while a JVM starts (4-6 s): a small build lists, reads and walks its store meanwhile, which
    needs no Spark (issue #24). Calling it waits for the session and returns it (a failed start
    raises there); :meth:`ready` says whether that would wait. :meth:`stop` waits for the start
    and ends the session (a Connect session is only released on the server), unless the
    process ran one before: a command run inside a process that has its own session (a
    notebook's, a test's, through :func:`topic_lineage.cli.main`) builds on it and leaves it
    running for its owner."""

    def __init__(self, app_name: str, master: str | None = None, *, quick_jit: bool = False):
        import threading
        from concurrent.futures import Future

        import pyspark.sql  # noqa: F401 - here, so that no module is imported in two threads at once

        self._started: Future = Future()
        self._borrowed = session_running()  # the owner's session: left running

        def start() -> None:
            try:
                self._started.set_result(pipeline_session(app_name, master, quick_jit=quick_jit))
            except BaseException as exc:  # noqa: BLE001 - raised to the caller by __call__
                self._started.set_exception(exc)

        threading.Thread(target=start, name="spark-start", daemon=True).start()

    def ready(self) -> bool:
        return self._started.done()

    def __call__(self):
        return self._started.result()[0]

    @property
    def remote(self) -> str | None:
        return self._started.result()[1]

    def stop(self) -> None:
        if self._started.exception() is None and not self._borrowed:
            stop_spark(self())
