"""A throw-away S3-compatible server on loopback, for the tests and a local try: SeaweedFS.

It runs SeaweedFS (Apache-2.0; the ``weed`` binary :mod:`tests.servers.seaweedfs_dist`
builds at install time) as one ``weed server`` process holding a master, a volume server, a
filer and the S3 gateway, every one bound to 127.0.0.1 on free ports (gRPC ports too), with S3
authentication on: one identity (:attr:`S3Server.access_key`, :attr:`S3Server.secret_key`)
allowed everything, and no anonymous access. Its data directory is in memory (under ``/dev/shm``)
where the machine has it, ``$TOPIC_LINEAGE_S3_DIR`` elsewhere, or the one given.
:meth:`S3Server.stop` ends the process and keeps the data; :meth:`S3Server.start` again serves
the same data on the same endpoint (a server stopped mid-build, then restarted). Leaving the
``with`` block also removes a data directory the server made itself. Telemetry is off.

    with S3Server() as server:
        os.environ.update(server.env())  # AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...
        pyarrow.fs.S3FileSystem(**server.pyarrow_options()).open_output_stream(f"{server.bucket}/x")

or, to try it by hand (serves until Ctrl-C and prints the variables to export)::

    .venv/bin/python -m tests.servers.s3_server [DATA_DIR]

Clients address buckets by path (``http://127.0.0.1:PORT/BUCKET/KEY``): SeaweedFS serves no
virtual-host buckets without a domain name, and botocore and pyarrow both use path style for an
IP endpoint.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from tests.servers import seaweedfs_dist
from tests.servers.rest_catalog import _signal_group
from topic_lineage.errors import TopicLineageError
from topic_lineage.local.broker import _die_with_parent_preexec, free_port

log = logging.getLogger(__name__)

DIR_ENV = "TOPIC_LINEAGE_S3_DIR"  # where a server's own data directory goes
SHM = Path("/dev/shm")
HOST = "127.0.0.1"
REGION = "us-east-1"
DEFAULT_BUCKET = "topic-lineage"
ACCESS_KEY = "topic-lineage"  # the default identity; the secret is random per server
# A bucket is a SeaweedFS collection with volumes of its own: one volume per collection (instead
# of 7) and small ones keep a server with a bucket per test small and quick.
_MASTER_TOML = """\
[master.volume_growth]
copy_1 = 1
"""
_STATE_DIRS = ("master", "volume", "filer")  # what a server writes in its data directory
_PORTS = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc")


class S3ServerError(TopicLineageError, RuntimeError):
    """The local S3 server could not be started or used."""


class S3Server:
    """SeaweedFS's S3 gateway (with its master, volume server and filer) on ``127.0.0.1``.

    A context manager. :attr:`endpoint` is ``http://127.0.0.1:<port>``; :attr:`bucket` exists
    once it has started. The ports are chosen at the first start and kept for later ones.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        *,
        bucket: str = DEFAULT_BUCKET,
        access_key: str = ACCESS_KEY,
        secret_key: str | None = None,
        startup_timeout_s: float = 60.0,
        volume_size_mb: int = 64,
        max_volumes: int = 200,
    ):
        self._owns_dir = data_dir is None
        self.data_dir: Path | None = Path(data_dir).resolve() if data_dir is not None else None
        self.bucket = bucket
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_hex(20)
        self.region = REGION
        self.startup_timeout_s = startup_timeout_s
        self.volume_size_mb = volume_size_mb
        self.max_volumes = max_volumes
        self.ports: dict[str, int] = {}
        self.start_seconds: float | None = None  # from `weed server` to a PutObject answered
        self.starts = 0
        self._process: subprocess.Popen | None = None
        self._client = None

    # --- what clients need -------------------------------------------------------------------
    @property
    def port(self) -> int:
        if "s3" not in self.ports:
            raise S3ServerError("the local S3 server has not started")
        return self.ports["s3"]

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """The standard variables an S3 client reads (the AWS SDKs, botocore, the AWS CLI, pyarrow
        where it reads them), for this server or another ``endpoint`` in front of it (a proxy)."""
        endpoint = endpoint or self.endpoint
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ENDPOINT_URL_S3": endpoint,
            # no variable is needed for path-style addressing (http://127.0.0.1:PORT/BUCKET/KEY):
            # botocore and pyarrow use it for an IP endpoint by themselves (checked in
            # tests/test_s3_server.py); and no probe of an instance metadata service
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def pyarrow_options(self, endpoint: str | None = None) -> dict:
        """Keyword arguments of ``pyarrow.fs.S3FileSystem`` for this server (or ``endpoint``)."""
        return {
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "region": self.region,
            "endpoint_override": endpoint or self.endpoint,
            "force_virtual_addressing": False,
        }

    def client(self, endpoint: str | None = None, **config):
        """A botocore S3 client for this server (or ``endpoint``); ``config`` goes to
        ``botocore.config.Config`` (e.g. ``retries={"mode": "standard"}``)."""
        import botocore.config
        import botocore.session

        settings = {"s3": {"addressing_style": "path"}, "retries": {"mode": "standard"}}
        settings.update(config)
        return botocore.session.get_session().create_client(
            "s3", region_name=self.region, endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=botocore.config.Config(**settings))

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (nothing when this identity already has it); its name."""
        from botocore.exceptions import ClientError

        try:
            self._admin().create_bucket(Bucket=name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou",
                                                                "BucketAlreadyExists"):
                raise
        return name

    def new_bucket(self, hint: str = "t") -> S3Bucket:
        """A new, empty bucket named after ``hint`` (made a valid bucket name) and a random
        suffix: one per test on a shared server."""
        stem = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")[:40].strip("-") or "t"
        return S3Bucket(self, self.create_bucket(f"{stem}-{secrets.token_hex(4)}"))

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        if self.data_dir is None:
            raise S3ServerError("the local S3 server has no data directory yet")
        return self.data_dir / "weed.log"

    def describe(self) -> str:
        """One line: what runs where, and how long it took to start."""
        return (f"SeaweedFS {seaweedfs_dist.commit()} S3 at {self.endpoint} (bucket {self.bucket}, "
                f"data {self.data_dir}), started in {self.start_seconds:.1f} s")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def start(self) -> Self:
        """Start the server (on the data directory and ports of an earlier start, if any), wait
        until S3 answers and a PutObject succeeds, and create :attr:`bucket`."""
        if self.running:
            return self
        self.stop()  # a process that exited by itself: reap it
        weed = seaweedfs_dist.weed_executable()
        kept = self._holds_data()
        self._prepare()
        # a free port can be taken before weed binds it: new ports, unless clients know them.
        # A first start keeps nothing of a failed attempt: a new directory if it is ours, else
        # the given one's state removed unless it held data before (a volume server that keeps
        # the failed master's topology ID is refused by the next one, "volume growth frozen",
        # and no bucket takes an object)
        attempts = 3 if self.starts == 0 else 1
        errors: list[str] = []
        for attempt in range(attempts):
            if attempt:
                self.ports = {}
                if self._owns_dir and self.data_dir is not None:
                    shutil.rmtree(self.data_dir, ignore_errors=True)
                    self.data_dir = None
                elif not kept and self.data_dir is not None:
                    for name in _STATE_DIRS:
                        shutil.rmtree(self.data_dir / name, ignore_errors=True)
                self._prepare()
            began = time.monotonic()
            try:
                self._spawn(weed)
                self._wait_ready()
            except S3ServerError as exc:
                errors.append(f"attempt {attempt + 1}: {exc}")
                self.stop()
                continue
            self.start_seconds = time.monotonic() - began
            self.starts += 1
            atexit.register(self.close)
            log.info("local S3 server %s", self.describe())
            return self
        if self.starts == 0:  # nothing of a server that never started is kept (the error quotes its log)
            self.close()
        raise S3ServerError("\n".join(errors))

    def _holds_data(self) -> bool:
        """Whether the data directory holds a server's state (from a start before this one)."""
        return self.data_dir is not None and any(
            any((self.data_dir / name).iterdir()) for name in _STATE_DIRS if (self.data_dir / name).is_dir())

    def _prepare(self) -> None:
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="tl-s3-", dir=_parent_dir()))
        for name in _STATE_DIRS:
            (self.data_dir / name).mkdir(parents=True, exist_ok=True)
        if not self.ports:
            self.ports = {name: free_port() for name in _PORTS}
        (self.data_dir / "master.toml").write_text(_MASTER_TOML)
        # the filer's metadata store, named here so that no filer.toml elsewhere
        # (~/.seaweedfs, /etc/seaweedfs) applies
        (self.data_dir / "filer.toml").write_text(
            f'[leveldb2]\nenabled = true\ndir = "{self.data_dir / "filer"}"\n')
        identities = {"identities": [{
            "name": "topic-lineage",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}
        config = self.data_dir / "s3.json"
        config.write_text(json.dumps(identities, indent=2))
        config.chmod(0o600)

    def command(self, weed: Path) -> list[str]:
        d, p = self.data_dir, self.ports
        return [
            str(weed), "-logtostderr=true", f"-config_dir={d}", "server",
            f"-ip={HOST}", f"-ip.bind={HOST}", f"-dir={d / 'volume'}",
            f"-master.dir={d / 'master'}", f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}", "-master.telemetry=false",
            f"-master.volumeSizeLimitMB={self.volume_size_mb}", "-master.peers=none",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
            f"-volume.max={self.max_volumes}", "-volume.preStopSeconds=0",
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={d / 'filer.sock'}",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={d / 's3.json'}",
            f"-s3.localSocket={d / 's3.sock'}", "-s3.iam=false",
            "-s3.allowDeleteBucketNotEmpty=true",  # S3Bucket.delete() after a test
        ]

    def _spawn(self, weed: Path) -> None:
        with self.log_path.open("ab") as log_file:
            log_file.write(f"--- start {self.starts + 1}: {time.strftime('%Y-%m-%dT%H:%M:%S')}\n"
                           .encode())
            log_file.flush()
            self._process = subprocess.Popen(
                self.command(weed), cwd=self.data_dir,
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all of it
                # and SIGTERM when the thread that started it dies, e.g. a killed test run
                preexec_fn=_die_with_parent_preexec(),  # noqa: PLW1509 (see broker.py)
            )

    def _log_tail(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        text = text.rsplit("--- start ", 1)[-1]
        # glog's error and fatal lines (E1127 ..., F1127 ...) are the cause; else the end
        errors = [line for line in text.splitlines() if line[:1] in ("E", "F") and line[1:5].isdigit()]
        return "\n".join(errors[:5]) or text.strip()[-1500:]

    def _admin(self):
        if self._client is None:
            self._client = self.client(retries={"mode": "standard", "max_attempts": 1},
                                       connect_timeout=2, read_timeout=10)
        return self._client

    def _wait_ready(self) -> None:
        """Wait until the gateway answers a signed request and its bucket takes an object with
        content (the master has a volume server, grew a volume for the bucket's collection, and
        the filer is up). An empty object would prove less: SeaweedFS keeps it in the filer
        alone, so a server that cannot write to a volume would pass."""
        from botocore.exceptions import BotoCoreError, ClientError

        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer"
        probe = ".topic-lineage-ready"
        # A probe given up on by the client still lands when the server gets to it: a restarted
        # server held a PUT for 10 s (the admin client's read timeout) until its filers' lock
        # ring formed, the next attempt's PUT and DELETE went through, then the first PUT landed
        # and the probe stayed in the bucket (2026-12-02, test_object_store_faults, a fresh
        # clone's whole suite). So the probe waits as long as the start may take.
        prober = self.client(retries={"mode": "standard", "max_attempts": 1}, connect_timeout=2,
                             read_timeout=max(10.0, self.startup_timeout_s))
        while True:
            if self._process.poll() is not None:
                raise S3ServerError(
                    f"SeaweedFS (weed server) exited with code {self._process.returncode} before "
                    f"S3 answered on {self.endpoint}; its log ({self.log_path}) says:\n"
                    f"{self._log_tail() or 'nothing'}")
            try:
                self.create_bucket(self.bucket)
                prober.put_object(Bucket=self.bucket, Key=probe, Body=b"ready")
                prober.delete_object(Bucket=self.bucket, Key=probe)
                return
            except (BotoCoreError, ClientError) as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise S3ServerError(
                    f"SeaweedFS's S3 gateway did not take an object on {self.endpoint} within "
                    f"{self.startup_timeout_s:.0f} s (last: {last}); its log ({self.log_path}) "
                    f"says:\n{self._log_tail() or 'nothing'}")
            time.sleep(0.1)

    def stop(self, timeout_s: float = 15.0) -> None:
        """End the server's process group (SIGTERM, SIGKILL after ``timeout_s``); the data
        directory and the ports stay for :meth:`start`. Idempotent."""
        self._client = None
        process, self._process = self._process, None
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(10)
        _signal_group(process.pid, signal.SIGKILL)  # anything of the group still there
        self._remove_sockets()

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing flushed); :meth:`start` serves the data again."""
        self._client = None
        process, self._process = self._process, None
        if process is not None:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(10)
            self._remove_sockets()

    def _remove_sockets(self) -> None:
        """``weed server`` puts a Unix socket per gRPC port in /tmp (a fixed place:
        ``/tmp/seaweedfs-<component>-grpc-<port>.sock``) and leaves them there: remove ours."""
        for name in ("master", "volume", "filer", "s3"):
            port = self.ports.get(f"{name}_grpc")
            if port:
                Path(f"/tmp/seaweedfs-{name}-grpc-{port}.sock").unlink(missing_ok=True)

    def close(self) -> None:
        """:meth:`stop`, and remove the data directory if the server made it (then without a
        graceful stop, which can take SeaweedFS's filer 9 s: nothing of it is kept). Idempotent."""
        if self._owns_dir:
            self.kill()
        else:
            self.stop()
        atexit.unregister(self.close)
        if self._owns_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            self.ports = {}


@dataclass(frozen=True)
class S3Bucket:
    """A bucket of an :class:`S3Server`: what a test or a benchmark hands its code."""

    server: S3Server
    name: str

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def url(self, path: str = "") -> str:
        """``s3://<bucket>/<path>``."""
        return f"s3://{self.name}/{path.lstrip('/')}" if path else f"s3://{self.name}"

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        return self.server.env(endpoint)

    def client(self, endpoint: str | None = None, **config):
        return self.server.client(endpoint, **config)

    def pyarrow_options(self, endpoint: str | None = None) -> dict:
        return self.server.pyarrow_options(endpoint)

    def filesystem(self, endpoint: str | None = None, **options):
        """A ``pyarrow.fs.S3FileSystem`` on the server (or ``endpoint``); paths are
        ``<bucket>/<key>``."""
        from pyarrow import fs

        return fs.S3FileSystem(**{**self.pyarrow_options(endpoint), **options})

    def keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``, sorted (ListObjectsV2, all pages)."""
        pages = self.server._admin().get_paginator("list_objects_v2").paginate(
            Bucket=self.name, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", ()))

    def delete(self) -> None:
        """Remove the bucket and everything in it."""
        self.server._admin().delete_bucket(Bucket=self.name)


def _parent_dir() -> str | None:
    """``$TOPIC_LINEAGE_S3_DIR``, else memory (``/dev/shm``) where there is one."""
    setting = os.environ.get(DIR_ENV, "").strip()
    if setting:
        return setting
    return str(SHM) if SHM.is_dir() and os.access(SHM, os.W_OK) else None


def main(argv: list[str] | None = None) -> int:
    import argparse
    import shlex
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m tests.servers.s3_server",
        description="Serve a local S3 (SeaweedFS) on loopback until Ctrl-C and print the "
                    "variables that point S3 clients at it.")
    parser.add_argument("data_dir", nargs="?", help="keep the data here (default: a temporary "
                        "directory, removed at the end)")
    parser.add_argument("--bucket", default=DEFAULT_BUCKET)
    parser.add_argument("--secret-key", default=None, help="default: a random one")
    args = parser.parse_args(argv)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # a kill stops the server too, not only Ctrl-C
    signal.signal(signal.SIGINT, interrupt)
    try:
        server = S3Server(args.data_dir, bucket=args.bucket, secret_key=args.secret_key).start()
    except TopicLineageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        print(f"# {server.describe()}; log: {server.log_path}; Ctrl-C stops it")
        for key, value in server.env().items():
            print(f"export {key}={shlex.quote(value)}")
        print(f"# e.g. s3://{server.bucket}/some/key", flush=True)
        while server.running:
            time.sleep(1)
        print(f"error: the server exited; its log ({server.log_path}) says:\n{server._log_tail()}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.close()


if __name__ == "__main__":
    raise SystemExit(main())
