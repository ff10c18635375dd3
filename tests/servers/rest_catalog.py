"""A local Iceberg REST catalog server over a local warehouse, for the tests and a local try.

It runs Iceberg's own REST catalog server (``org.apache.iceberg.rest.RESTCatalogServer`` from
Iceberg 1.11.0's ``iceberg-open-api`` test fixtures, the server the Iceberg project's REST
compatibility kit runs) on a free port, with the classpath that ``scripts/install_iceberg_peers.sh``
fetches from Maven Central into ``.venv-iceberg/jars/rest-server/``. Behind it: Iceberg's
JdbcCatalog on a SQLite file in the warehouse (``rest-catalog.db``, so the catalog outlives the
server) and HadoopFileIO on ``file://`` paths, so pyiceberg in our process writes the data
files where the server writes the metadata.

    with RestCatalogServer(warehouse_dir) as server:
        catalog = pyiceberg.catalog.load_catalog("rest", **server.catalog_properties)

or, to try it by hand (serves until Ctrl-C and prints the pyiceberg properties)::

    .venv/bin/python -m tests.servers.rest_catalog /tmp/warehouse

The server listens on every interface of its port (the fixture binds no host); clients here use
127.0.0.1.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

from topic_lineage.errors import TopicLineageError
from topic_lineage.local.broker import _die_with_parent_preexec

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
JARS_ENV = "TOPIC_LINEAGE_ICEBERG_REST_JARS"  # a directory of the server's jars, to override
_REPO_JARS = Path(__file__).resolve().parents[2] / ".venv-iceberg" / "jars" / "rest-server"


class RestCatalogError(TopicLineageError, RuntimeError):
    """The local REST catalog server could not be found, started or stopped."""


def server_jars_dir() -> Path:
    """The directory of the server's jars (``$TOPIC_LINEAGE_ICEBERG_REST_JARS`` or the
    checkout's ``.venv-iceberg/jars/rest-server``)."""
    override = os.environ.get(JARS_ENV)
    jars = Path(override) if override else _REPO_JARS
    if not any(jars.glob("iceberg-open-api-*-test-fixtures.jar")):
        raise RestCatalogError(
            f"no Iceberg REST catalog server jars in {jars}: run bash scripts/install_iceberg_peers.sh "
            f"in the checkout (or set {JARS_ENV} to a directory holding them)"
        )
    return jars


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RestCatalogServer:
    """Iceberg's REST catalog server on ``http://127.0.0.1:<free port>`` over ``warehouse_dir``.

    A context manager; :meth:`stop` (also run at interpreter exit) ends the server's whole
    process group. ``start_seconds`` is how long it took to answer ``GET /v1/config``.
    """

    def __init__(
        self,
        warehouse_dir: str | os.PathLike,
        *,
        port: int | None = None,
        startup_timeout_s: float = 120.0,
        java: str = "java",
        heap: str = "256m",
    ):
        self.warehouse_dir = Path(warehouse_dir).resolve()
        self._requested_port = port
        self.startup_timeout_s = startup_timeout_s
        self.java = java
        self.heap = heap
        self.port: int | None = None
        self.pid: int | None = None  # the server's, also its process group's; kept after stop()
        self.start_seconds: float | None = None
        self.log_path = self.warehouse_dir / "rest-catalog-server.log"
        self.catalog_db = self.warehouse_dir / "rest-catalog.db"
        self._process: subprocess.Popen | None = None

    # --- what clients need ---------------------------------------------------------------------
    @property
    def uri(self) -> str:
        if self.port is None:
            raise RestCatalogError("the REST catalog server is not running")
        return f"http://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> str:
        return self.warehouse_dir.as_uri()

    @property
    def catalog_properties(self) -> dict[str, str]:
        """pyiceberg's catalog properties (``load_catalog(name, **props)``)."""
        return {"type": "rest", "uri": self.uri, "warehouse": self.warehouse}

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # --- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> Self:
        if self.running:
            return self
        jars = server_jars_dir()
        self.warehouse_dir.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self._requested_port else 3  # a free port can be taken before Jetty binds
        last_error = ""
        for _ in range(attempts):
            try:
                self._spawn(jars, self._requested_port or _free_port())
                self._wait_ready()
                atexit.register(self.stop)
                log.info("Iceberg REST catalog at %s (pid %s) started in %.1f s",
                         self.uri, self._process.pid, self.start_seconds)
                return self
            except RestCatalogError as exc:
                last_error = str(exc)
                self.stop()
        raise RestCatalogError(last_error)

    def _spawn(self, jars: Path, port: int) -> None:
        # RESTCatalogServer reads its backend catalog's properties from CATALOG_* variables
        # (CATALOG_A_B__C -> a.b-c); none of the caller's may leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        env.update({
            "CATALOG_CATALOG__IMPL": "org.apache.iceberg.jdbc.JdbcCatalog",
            "CATALOG_URI": f"jdbc:sqlite:{self.catalog_db}",
            "CATALOG_JDBC_SCHEMA__VERSION": "V1",
            "CATALOG_WAREHOUSE": self.warehouse,
            "CATALOG_REST_PORT": str(port),
        })
        log_file = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                [self.java, f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-cp", f"{jars}/*", SERVER_CLASS],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,  # its own process group: stop() ends all of it
                # and SIGTERM when the thread that started it dies, e.g. a killed test run
                preexec_fn=_die_with_parent_preexec(),  # noqa: PLW1509 (see broker.py)
            )
        finally:
            log_file.close()
        self.port = port
        self.pid = self._process.pid
        self._started_at = time.monotonic()

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace").strip()[-2000:]
        except OSError:
            return ""

    def _wait_ready(self) -> None:
        deadline = self._started_at + self.startup_timeout_s
        url = f"{self.uri}/v1/config"
        while True:
            if self._process.poll() is not None:
                raise RestCatalogError(
                    f"the Iceberg REST catalog server exited with {self._process.returncode} "
                    f"before answering {url}; its log ({self.log_path}) ends:\n{self._log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    json.load(answer)
                self.start_seconds = time.monotonic() - self._started_at
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RestCatalogError(
                    f"the Iceberg REST catalog server did not answer {url} within "
                    f"{self.startup_timeout_s:.0f} s; its log ({self.log_path}) ends:\n{self._log_tail()}"
                )
            time.sleep(0.2)

    def stop(self, timeout_s: float = 15.0) -> None:
        """Ends the server's process group: SIGTERM, then SIGKILL after ``timeout_s``."""
        process, self._process, self.port = self._process, None, None
        if process is None:
            return
        atexit.unregister(self.stop)
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(10)
        _signal_group(process.pid, signal.SIGKILL)  # anything of the group still there


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tests.servers.rest_catalog",
        description="Serve an Iceberg REST catalog over a local warehouse until Ctrl-C.",
    )
    parser.add_argument("warehouse_dir")
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # a kill stops the server too, not only Ctrl-C
    signal.signal(signal.SIGINT, interrupt)
    with RestCatalogServer(args.warehouse_dir, port=args.port) as server:
        print(f"Iceberg REST catalog at {server.uri} over {server.warehouse} "
              f"(started in {server.start_seconds:.1f} s; log: {server.log_path})")
        print("pyiceberg: load_catalog('rest', **" + json.dumps(server.catalog_properties) + ")")
        try:
            while server.running:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
