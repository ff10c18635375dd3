"""A throw-away Google Cloud Storage on loopback, for the tests: fake-gcs-server.

It runs fake-gcs-server (BSD-2-Clause; the binary ``scripts/install_emulators.sh`` builds with
Go at install time) over plain HTTP on a free port of 127.0.0.1, its objects in a directory of
its own (the filesystem backend), with one bucket created. It asks for no credentials.

    with GcsEmulator() as gcs:
        fs = pyarrow.fs.GcsFileSystem(**gcs.pyarrow_options())
        fs.open_output_stream(f"{gcs.bucket}/x")
        conditional_writes.create_gcs(gcs.bucket, "y", b"...", endpoint=gcs.endpoint)

or, to try it by hand (serves until Ctrl-C and prints the variables to export)::

    .venv/bin/python -m tests.servers.gcs_emulator

What pyarrow needs: ``GcsFileSystem(anonymous=True, scheme="http",
endpoint_override="127.0.0.1:PORT")`` (:meth:`GcsEmulator.pyarrow_options`). Google's own
client libraries read ``STORAGE_EMULATOR_HOST`` instead (:meth:`GcsEmulator.env`), and so does
:func:`topic_lineage.storage.conditional_writes.create_gcs` when given no endpoint.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Self

from tests.servers.emulator_process import (
    HOST,
    Emulator,
    EmulatorError,
    base_dir,
    pinned,
    serve,
)

VERSION_NAME = "FAKE_GCS_VERSION"
DEFAULT_BUCKET = "topic-lineage"
PROJECT = "topic-lineage-test"


def version() -> str:
    return pinned(VERSION_NAME)


def binary() -> Path:
    return base_dir() / f"fake-gcs-server-{version()}" / "fake-gcs-server"


def installed() -> bool:
    return binary().is_file()


class GcsEmulator(Emulator):
    """fake-gcs-server on ``127.0.0.1``; :attr:`endpoint` is ``http://127.0.0.1:<port>``,
    :attr:`bucket` exists once it has started. A context manager."""

    prefix = "fake-gcs-"

    def __init__(self, *, bucket: str = DEFAULT_BUCKET, data_dir: Path | None = None):
        super().__init__(data_dir)
        self.bucket = bucket
        self.endpoint = f"http://{HOST}:{self.port}"

    def start(self) -> Self:
        if not installed():
            raise EmulatorError(f"fake-gcs-server is not installed ({binary()} is missing): run "
                                f"bash scripts/install_emulators.sh")
        argv = [str(binary()), "-scheme", "http", "-host", HOST, "-port", str(self.port),
                "-backend", "filesystem", "-filesystem-root", str(self.data_dir / "storage"),
                "-external-url", self.endpoint, "-public-host", f"{HOST}:{self.port}",
                "-log-level", "warn"]
        self._run("fake-gcs-server", argv, self._ready)
        self._create_bucket()
        return self

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=2) as answer:
            return answer.status == 200

    def _create_bucket(self) -> None:
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project={PROJECT}", method="POST",
            data=json.dumps({"name": self.bucket}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            if answer.status != 200:
                raise EmulatorError(f"fake-gcs-server did not create bucket {self.bucket!r}: "
                                    f"HTTP {answer.status}")

    def pyarrow_options(self) -> dict:
        """Keyword arguments of ``pyarrow.fs.GcsFileSystem`` for this server."""
        return {"anonymous": True, "scheme": "http", "endpoint_override": f"{HOST}:{self.port}",
                "project_id": PROJECT}

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.GcsFileSystem(**self.pyarrow_options())

    def env(self) -> dict[str, str]:
        """What Google's client libraries (and ``create_gcs`` without an endpoint) read."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "GOOGLE_CLOUD_PROJECT": PROJECT}


def main() -> int:
    gcs = GcsEmulator()
    return serve(gcs, [*(f"export {name}={value}" for name, value in gcs.env().items()),
                       f"# bucket {gcs.bucket}; pyarrow.fs.GcsFileSystem(**{gcs.pyarrow_options()!r})"])


if __name__ == "__main__":
    raise SystemExit(main())
