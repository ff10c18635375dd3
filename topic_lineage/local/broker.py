"""A throw-away Apache Kafka broker on loopback, for the demo and the tests.

It runs real Apache Kafka (the jars :mod:`topic_lineage.local.kafka_dist` fetched from Maven
Central at install time) in KRaft mode: one JVM that is both broker and controller, on free
ports of 127.0.0.1, with its storage in a temporary directory (in memory, under ``/dev/shm``,
where the machine has it; ``$TOPIC_LINEAGE_BROKER_DIR`` elsewhere). Starting it formats that
directory (``kafka.tools.StorageTool format``, like ``kafka-storage.sh format``) and then runs
``kafka.Kafka``, like ``kafka-server-start.sh``; :meth:`LocalBroker.stop` shuts it down cleanly
(SIGTERM: a controlled shutdown) and removes the directory.

What it is: the cluster ID it was formatted with (a random Kafka UUID unless given), topic IDs
given by Kafka's controller (random UUIDv4; a re-created topic gets a new one), the internal
topic ``__consumer_offsets`` once a group commits, its KRaft metadata log in
:attr:`LocalBroker.metadata_dir` and its partitions (with their ``partition.metadata`` files)
in :attr:`LocalBroker.log_dir`. With ``sasl_ssl=`` it also has a SASL_SSL listener
(SCRAM-SHA-512) and the standard authorizer; the PLAINTEXT listener the project drives it
through is then its super user.

    with LocalBroker() as broker:
        broker.create_topics(["orders", ("payments", 3)])
        capture_snapshot("local", {"bootstrap.servers": broker.bootstrap_servers})
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from topic_lineage.errors import TopicLineageError
from topic_lineage.local import kafka_dist

log = logging.getLogger(__name__)

HEAP_ENV = "TOPIC_LINEAGE_BROKER_HEAP"
DIR_ENV = "TOPIC_LINEAGE_BROKER_DIR"  # where the broker's temporary directory goes
SHM = Path("/dev/shm")
DEFAULT_HEAP = "384m"
INTERNAL_PREFIX = "__"  # __consumer_offsets, __transaction_state, __share_group_state


class LocalBrokerError(TopicLineageError, RuntimeError):
    """The local broker could not be found, started or driven."""


class _QuietLogger:
    """Receives librdkafka's log lines (instead of raw stderr) and keeps them at DEBUG."""

    def __init__(self, name: str):
        self._log = logging.getLogger(name)

    def log(self, level, fmt, *args):  # signature used by confluent-kafka's log callback
        self._log.debug(fmt, *args)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def new_cluster_id() -> str:
    """A random Kafka UUID in Kafka's text form (URL-safe base64, no padding), as
    ``kafka-storage.sh random-uuid`` prints one: like Kafka's ``Uuid.randomUuid``, never one whose
    text starts with ``-``, which a command line would take for an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _die_with_parent_preexec():
    """A ``preexec_fn`` asking Linux to SIGTERM the broker when the thread that started it
    exits (PR_SET_PDEATHSIG), so a killed test run or demo leaves no orphaned broker.

    ``prctl`` is looked up here, in the parent: the forked child only makes the one call (no
    imports, no dlopen), which is safe even though librdkafka threads are running.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux / no libc symbol: rely on stop() and atexit
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


@dataclass(frozen=True)
class SaslSsl:
    """A SASL_SSL listener (SCRAM-SHA-512 over TLS) and the standard authorizer.

    ``keystore`` is a PKCS12 file with the broker's key and certificate. The passwords end up
    in the broker's own ``server.properties`` (in its private temporary directory), never on a
    command line.
    """

    keystore: Path
    keystore_password: str
    super_users: tuple[str, ...] = ("User:ANONYMOUS",)  # the PLAINTEXT listener: the project


_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""
_LOG4J1 = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
"""


class LocalBroker:
    """An Apache Kafka broker+controller (KRaft) on ``127.0.0.1:<free port>``.

    A context manager; :meth:`stop` (also run at interpreter exit) shuts it down.
    """

    def __init__(
        self,
        cluster_id: str | None = None,
        *,
        version: str | None = None,
        port: int | None = None,
        startup_timeout_s: float = 90.0,
        heap: str | None = None,
        sasl_ssl: SaslSsl | None = None,
        config: dict[str, str] | None = None,
        archive_out: Path | None = None,
    ):
        if cluster_id is not None:
            from topic_lineage import topic_id as tid

            if not tid.is_canonical(cluster_id):
                raise LocalBrokerError(
                    f"cluster ID {cluster_id!r} is not a Kafka UUID (22 URL-safe base64 "
                    "characters, as `kafka-storage.sh random-uuid` prints one)")
        self._requested_cluster_id = cluster_id
        self._requested_port = port
        self.version = version or kafka_dist.default_version()
        self.startup_timeout_s = startup_timeout_s
        self.heap = heap or os.environ.get(HEAP_ENV, "").strip() or DEFAULT_HEAP
        self.sasl_ssl = sasl_ssl
        self.extra_config = dict(config or {})
        self._archive_out = archive_out  # make the class archive (kafka_dist.make_archive)
        self.port: int | None = None
        self.controller_port: int | None = None
        self.sasl_ssl_port: int | None = None
        self.cluster_id: str | None = None
        self.work_dir: Path | None = None
        self.start_seconds: float | None = None  # from `java` (format included) to Metadata answered
        self.format_seconds: float | None = None
        self._process: subprocess.Popen | None = None
        self._admin = None

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise LocalBrokerError("the local broker is not running")
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        if self.sasl_ssl_port is None:
            raise LocalBrokerError("the local broker has no SASL_SSL listener")
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def metadata_dir(self) -> Path:
        """The KRaft metadata log directory (``__cluster_metadata-0`` and ``meta.properties``)."""
        return self._dir("metadata")

    @property
    def log_dir(self) -> Path:
        """The broker's data log directory (one directory per partition)."""
        return self._dir("data")

    @property
    def log_file(self) -> Path:
        return self._dir("logs") / "server.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _dir(self, name: str) -> Path:
        if self.work_dir is None:
            raise LocalBrokerError("the local broker is not running")
        return self.work_dir / name

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def describe(self) -> str:
        """One line: what runs where, and how long it took to start."""
        return (f"Apache Kafka {self.version} (KRaft, broker+controller) at "
                f"{self.bootstrap_servers}, cluster {self.cluster_id}, started in "
                f"{self.start_seconds:.1f} s (storage format {self.format_seconds:.1f} s)")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> LocalBroker:
        if self.running:
            return self
        libs = kafka_dist.ensure(self.version)
        java = kafka_dist.java_executable()
        attempts = 1 if self._requested_port else 3  # a free port can be taken before Kafka binds
        last_error = ""
        for _ in range(attempts):
            began = time.monotonic()
            try:
                self._prepare()
                self._format(java, libs)
                self._spawn(java, libs)
                self._wait_ready()
            except LocalBrokerError as exc:
                last_error = str(exc)
                self.stop()
                continue
            self.start_seconds = time.monotonic() - began
            atexit.register(self.stop)
            log.info("local broker %s", self.describe())
            return self
        raise LocalBrokerError(last_error)

    @staticmethod
    def _parent_dir() -> str | None:
        """``$TOPIC_LINEAGE_BROKER_DIR``, else memory (``/dev/shm``) where there is one: Kafka
        syncs each new partition's files, and on a shared disk creating 2,000 topics took 18.7 s
        against 6.1 s in memory, deleting them 26.0 s against 4.3 s (2026-11-27, 2 cores)."""
        setting = os.environ.get(DIR_ENV, "").strip()
        if setting:
            return setting
        return str(SHM) if SHM.is_dir() and os.access(SHM, os.W_OK) else None

    def _prepare(self) -> None:
        self.work_dir = Path(tempfile.mkdtemp(prefix="tl-kafka-", dir=self._parent_dir()))
        for name in ("metadata", "data", "logs"):
            (self.work_dir / name).mkdir()
        self.port = self._requested_port or free_port()
        self.controller_port = free_port()
        self.sasl_ssl_port = free_port() if self.sasl_ssl else None
        self.cluster_id = self._requested_cluster_id or new_cluster_id()
        (self.work_dir / "server.properties").write_text(self._server_properties())
        template = _LOG4J2 if kafka_dist.major(self.version) >= 4 else _LOG4J1
        for name, log_file in (("server", self.log_file), ("tools", self.work_dir / "logs" / "tools.log")):
            (self.work_dir / f"{name}-log4j.properties").write_text(template.format(log=log_file))

    def _server_properties(self) -> str:
        host = "127.0.0.1"
        listeners = [f"PLAINTEXT://{host}:{self.port}", f"CONTROLLER://{host}:{self.controller_port}"]
        advertised = [f"PLAINTEXT://{host}:{self.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        config = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{host}:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.work_dir / "data"),
            "metadata.log.dir": str(self.work_dir / "metadata"),
            # topics are created explicitly: a client's Metadata request must not create one
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            # few threads and small preallocated indexes: 2 shared cores, thousands of partitions
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "num.replica.fetchers": "1",
            "log.cleaner.threads": "1",
            "log.index.size.max.bytes": "1048576",
            # idle, a one-node cluster need not wake every half second: no no-op records in the
            # metadata log (KIP-835; they tell brokers of other nodes the controller lives) and
            # heartbeats to its own controller every 6 s instead of 2 (a session of 30 s: a
            # loaded machine's pauses fence it less often). Idle CPU, 2 cores (issue #52,
            # 2026-11-29, 40 s each, Kafka 4.x and 3.9): 2.1% of a core before, 1.1% after
            "metadata.max.idle.interval.ms": "0",
            "broker.heartbeat.interval.ms": "6000",
            "broker.session.timeout.ms": "30000",
        }
        if kafka_dist.major(self.version) >= 4:
            config["share.coordinator.state.topic.replication.factor"] = "1"
            config["share.coordinator.state.topic.min.isr"] = "1"
        if self.sasl_ssl is not None:
            s = self.sasl_ssl
            listeners.append(f"SASL_SSL://{host}:{self.sasl_ssl_port}")
            advertised.append(f"SASL_SSL://{host}:{self.sasl_ssl_port}")
            protocols.append("SASL_SSL:SASL_SSL")
            config.update({
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(s.keystore),
                "ssl.keystore.password": s.keystore_password,
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": ";".join(s.super_users),
                "allow.everyone.if.no.acl.found": "false",
            })
        config["listeners"] = ",".join(listeners)
        config["advertised.listeners"] = ",".join(advertised)
        config["listener.security.protocol.map"] = ",".join(protocols)
        config.update(self.extra_config)
        return "".join(f"{key}={value}\n" for key, value in config.items())

    def _jvm(self, java: str, libs: Path, main: str, *args: str, heap: str,
             logs: str = "tools") -> list[str]:
        config = self.work_dir / f"{logs}-log4j.properties"
        logging_option = (
            f"-Dlog4j2.configurationFile={config}" if kafka_dist.major(self.version) >= 4
            else f"-Dlog4j.configuration=file:{config}"
        )
        if self._archive_out is not None:
            sharing = [f"-XX:ArchiveClassesAtExit={self._archive_out}"] if main == "kafka.Kafka" else []
        else:
            archive = kafka_dist.usable_archive(self.version)
            sharing = [f"-XX:SharedArchiveFile={archive}"] if archive else []
        return [
            java, f"-Xmx{heap}", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            # the JVM's own warnings (e.g. an archive it cannot map) to stderr, never stdout
            *sharing, "-Xlog:disable", "-Xlog:all=warning:stderr",
            "-Xss512k", "-Djava.awt.headless=true", "-Dlog4j2.disable.jmx=true",
            f"-Dkafka.logs.dir={self.work_dir / 'logs'}", logging_option,
            "-cp", str(libs / "*"), main, *args,
        ]

    def _format(self, java: str, libs: Path) -> None:
        began = time.monotonic()
        command = self._jvm(java, libs, "kafka.tools.StorageTool", "format",
                            f"--cluster-id={self.cluster_id}",  # one starting with '-' is no option
                            "-c", str(self.work_dir / "server.properties"), heap="256m")
        result = subprocess.run(command, capture_output=True, text=True, check=False,
                                stdin=subprocess.DEVNULL, timeout=self.startup_timeout_s)
        if result.returncode != 0:
            text = " ".join((result.stdout + result.stderr).split())[-600:]
            raise LocalBrokerError(
                f"formatting the local broker's KRaft storage failed (Apache Kafka {self.version}, "
                f"exit {result.returncode}): {text or 'no output'}")
        self.format_seconds = time.monotonic() - began

    def _spawn(self, java: str, libs: Path) -> None:
        command = self._jvm(java, libs, "kafka.Kafka", str(self.work_dir / "server.properties"),
                            heap=self.heap, logs="server")
        with open(self.work_dir / "logs" / "stdout.log", "wb") as stdout:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                start_new_session=False,
                preexec_fn=_die_with_parent_preexec(),  # noqa: PLW1509 (see its docstring)
            )

    def _output(self) -> str:
        texts = []
        for path in (self.work_dir / "logs" / "stdout.log", self.log_file):
            try:
                text = path.read_text(errors="replace").strip()
            except OSError:
                continue
            # the first errors are the cause, later ones the shutdown they set off
            errors = [line for line in text.splitlines() if " ERROR " in line or " FATAL " in line]
            texts.append("\n".join(errors[:3]) or text[-800:])
        return "\n".join(t for t in texts if t)[-2000:]

    def _wait_ready(self) -> None:
        """Wait until the broker answers a Metadata request (the Kafka protocol, not just TCP)."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise LocalBrokerError(
                    f"Apache Kafka {self.version} exited with code {self._process.returncode} "
                    f"on port {self.port}: {self._output() or 'no output'}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.1)
                continue
            try:
                metadata = self.admin().list_topics(timeout=max(0.5, min(5, deadline - time.monotonic())))
            except KafkaException:
                time.sleep(0.1)
                continue
            if metadata.cluster_id != self.cluster_id or not metadata.brokers:
                time.sleep(0.1)
                continue
            return
        raise LocalBrokerError(  # its directory goes with stop(): quote the log's end here
            f"Apache Kafka {self.version} did not answer on {self.bootstrap_servers} within "
            f"{self.startup_timeout_s:.0f}s: {self._output() or 'no output'}"
        )

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Shut the broker down (SIGTERM: a controlled shutdown; SIGKILL after ``timeout_s``)
        and remove its directory. Idempotent."""
        self._admin = None
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
        atexit.unregister(self.stop)

    def kill(self) -> None:
        """SIGKILL the broker (a crash: no controlled shutdown); :meth:`stop` still cleans up."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)

    # --- Kafka's own tools ----------------------------------------------------------------------
    def tool(self, main: str, *args: str, timeout_s: float = 180.0) -> str:
        """Run one of Kafka's command-line tools (a main class, as the ``bin/*.sh`` scripts do)
        with this broker's jars; its standard output. Its log goes to ``logs/tools.log``."""
        command = self._jvm(kafka_dist.java_executable(), kafka_dist.libs_dir(self.version), main,
                            *args, heap="256m")
        result = subprocess.run(command, capture_output=True, text=True, check=False,
                                stdin=subprocess.DEVNULL, timeout=timeout_s)
        if result.returncode != 0:
            raise LocalBrokerError(f"{main} {' '.join(args)} exited {result.returncode}: "
                                   f"{(result.stderr or result.stdout).strip()[-1000:]}")
        return result.stdout

    def describe_topics_text(self) -> str:
        """What ``kafka-topics.sh --bootstrap-server ... --describe`` prints for every topic:
        Kafka's own ``TopicCommand``."""
        return self.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                         self.bootstrap_servers, "--describe")

    # --- helpers -----------------------------------------------------------------------------
    def client_config(self, **overrides) -> dict:
        """A librdkafka config for this broker (librdkafka logs go to Python logging)."""
        config = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": _QuietLogger("topic_lineage.local.broker.librdkafka"),
        }
        config.update(overrides)
        return config

    def admin(self):
        """A confluent-kafka AdminClient connected to this broker (one, reused)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self.client_config())
        return self._admin

    def topic_names(self, *, internal: bool = True) -> set[str]:
        names = set(self.admin().list_topics(timeout=30).topics)
        return names if internal else {n for n in names if not n.startswith(INTERNAL_PREFIX)}

    def create_topics(
        self, topics: Iterable[str | tuple[str, int]], *, batch_size: int = 1000
    ) -> None:
        """Create topics given as names (1 partition) or ``(name, partitions)``; waits for all."""
        from confluent_kafka.admin import NewTopic

        specs = [
            NewTopic(t, 1, 1) if isinstance(t, str) else NewTopic(t[0], int(t[1]), 1)
            for t in topics
        ]
        for start in range(0, len(specs), batch_size):
            futures = self.admin().create_topics(
                specs[start:start + batch_size], operation_timeout=60, request_timeout=60
            )
            self._wait_all(futures, "create")
        self._wait_listed({spec.topic for spec in specs})

    def _wait_listed(self, names: set[str], timeout_s: float | None = None) -> None:
        """Wait until the broker lists every topic with a leader for each partition: the
        controller has committed a creation before the broker's metadata cache has it (and
        its log directories; thousands of partitions take minutes on 2 loaded cores)."""
        timeout_s = timeout_s or max(60.0, 0.05 * len(names))
        pause = 0.05 if len(names) < 100 else 0.5
        deadline = time.monotonic() + timeout_s
        while True:
            topics = self.admin().list_topics(timeout=30).topics
            missing = [n for n in names if n not in topics or topics[n].error is not None
                       or any(p.leader < 0 for p in topics[n].partitions.values())]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise LocalBrokerError(f"{len(missing)} topic(s) not ready {timeout_s:.0f}s "
                                       f"after creation: {sorted(missing)[:5]}")
            time.sleep(pause)

    def delete_topics(self, names: Iterable[str], *, batch_size: int = 1000) -> None:
        """Delete topics and wait until the broker no longer lists them."""
        names = list(names)
        for start in range(0, len(names), batch_size):
            futures = self.admin().delete_topics(
                names[start:start + batch_size], operation_timeout=60, request_timeout=60
            )
            self._wait_all(futures, "delete")
        deadline = time.monotonic() + 30
        while set(names) & self.topic_names():
            if time.monotonic() > deadline:
                raise LocalBrokerError(f"topics still listed 30s after deletion: {names[:5]}...")
            time.sleep(0.05)

    def delete_all_topics(self) -> None:
        """Delete every topic but Kafka's internal ones (``__consumer_offsets``, ...)."""
        names = sorted(self.topic_names(internal=False))
        if names:
            self.delete_topics(names)

    def delete_all_groups(self) -> None:
        """Delete every consumer group (a group with members is left alone)."""
        groups = self.admin().list_consumer_groups(request_timeout=30).result(timeout=60)
        ids = [g.group_id for g in groups.valid]
        if not ids:
            return
        for future in self.admin().delete_consumer_groups(ids, request_timeout=30).values():
            try:
                future.result(timeout=60)
            except Exception as exc:  # noqa: BLE001 (a group with members stays; say so)
                log.debug("could not delete a group: %s", exc)

    def ensure_offsets_topic(self) -> None:
        """Have Kafka create ``__consumer_offsets`` (it does when a group first needs its
        coordinator), so that every capture of this broker lists it from now on."""
        if "__consumer_offsets" in self.topic_names():
            return
        from confluent_kafka import Consumer, TopicPartition

        scratch = f"tl-scratch-{uuid.uuid4().hex[:8]}"
        self.create_topics([scratch])
        consumer = Consumer(self.client_config(**{"group.id": scratch, "enable.auto.commit": False}))
        try:
            consumer.commit(offsets=[TopicPartition(scratch, 0, 0)], asynchronous=False)
        finally:
            consumer.close()
        self.delete_topics([scratch])
        self.delete_all_groups()
        self._wait_listed({"__consumer_offsets"})

    def reset(self) -> None:
        """Delete every topic and consumer group: the broker as a test starts from."""
        self.delete_all_topics()
        self.delete_all_groups()

    @staticmethod
    def _wait_all(futures: dict, action: str) -> None:
        from confluent_kafka import KafkaException

        failures = []
        for name, future in futures.items():
            try:
                future.result(timeout=90)
            except KafkaException as exc:
                failures.append(f"{name}: {exc.args[0].name()}")
        if failures:
            raise LocalBrokerError(f"could not {action} {len(failures)} topic(s): {failures[:5]}")


__all__ = ["LocalBroker", "LocalBrokerError", "SaslSsl", "free_port", "new_cluster_id"]


def make_archive(version: str, *, out=None) -> Path:
    """Make the class archive of ``version`` (nothing when it is there): start a broker whose
    JVM writes the classes it loaded when it exits, create and delete a topic, stop it; then check
    that a JVM maps the file (``-Xshare:on`` refuses one it cannot) before it gets its name."""
    target = kafka_dist.archive_path(version)
    if target.is_file():
        return target
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    if out:
        out(f"making the class archive of Apache Kafka {version}'s broker (about half a minute)")
    try:
        broker = LocalBroker(version=version, archive_out=tmp).start()
        try:
            broker.create_topics(["archive-warmup"])
            broker.delete_topics(["archive-warmup"])
        finally:
            broker.stop()
        check = subprocess.run(
            [kafka_dist.java_executable(), "-Xshare:on", f"-XX:SharedArchiveFile={tmp}", "-cp",
             kafka_dist.classpath(version), "-version"], capture_output=True, text=True, check=False)
        if not tmp.is_file() or check.returncode != 0:
            raise kafka_dist.KafkaDistError(f"the class archive of Apache Kafka {version} was not usable: "
                                 f"{' '.join(check.stderr.split())[-300:]}")
        tmp.rename(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _main(argv: list[str] | None = None) -> int:
    """``python -m topic_lineage.local.broker --class-archive VERSION``: make that version's class
    archive (``python -m topic_lineage.local.kafka_dist`` runs it after fetching the jars)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m topic_lineage.local.broker")
    parser.add_argument("--class-archive", metavar="VERSION", required=True)
    args = parser.parse_args(argv)
    try:
        print(f"class archive: {make_archive(args.class_archive, out=print)}")
    except TopicLineageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
