"""A throw-away Azure Blob Storage on loopback, for the tests: Azurite's blob service.

It runs Azurite (MIT; installed from the npm registry by ``scripts/install_emulators.sh``) with
the machine's Node.js, its blob service only, on a free port of 127.0.0.1, its data in memory
(nothing written to disk, no periodic save of its index), telemetry off, with one container
created. Azurite's one account is the well-known development account (:data:`ACCOUNT`,
:data:`ACCOUNT_KEY`, published by Microsoft for the emulator: not a secret) and it checks every
request's Shared Key signature.

    with Azurite() as azurite:
        fs = pyarrow.fs.AzureFileSystem(**azurite.pyarrow_options())
        fs.open_output_stream(f"{azurite.container}/x")
        conditional_writes.create_azure(ACCOUNT, azurite.container, "y", b"...",
                                        endpoint=azurite.blob_endpoint, account_key=ACCOUNT_KEY)

or, to try it by hand (serves until Ctrl-C)::

    .venv/bin/python -m tests.servers.azurite

What pyarrow needs (:meth:`Azurite.pyarrow_options`): the account and its key, the blob *and*
the dfs authority both ``127.0.0.1:PORT`` and both schemes ``http``. Azurite has no Data Lake
(dfs, hierarchical namespace) endpoint: pyarrow's probe for one (``HEAD
/<container>/?action=getAccessControl``) gets a 400, and pyarrow goes on as with a flat-namespace
account, through the Blob API only. Azurite refuses REST versions newer than it knows, and
pyarrow 26's Azure SDK asks for 2026-10-06: so ``--skipApiVersionCheck``.
"""

from __future__ import annotations

import shutil
import urllib.error
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

VERSION_NAME = "AZURITE_VERSION"
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
               "K1SZFPTOtr/KBHBeksoGMGw==")
DEFAULT_CONTAINER = "topic-lineage"


def version() -> str:
    return pinned(VERSION_NAME)


def install_dir() -> Path:
    return base_dir() / f"azurite-{version()}"


def blob_main() -> Path:
    """Azurite's blob-service entry point (what ``azurite-blob`` runs)."""
    return install_dir() / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"


def installed() -> bool:
    return blob_main().is_file() and shutil.which("node") is not None


class Azurite(Emulator):
    """Azurite's blob service on ``127.0.0.1``; :attr:`blob_endpoint` is
    ``http://127.0.0.1:<port>/devstoreaccount1``, :attr:`container` exists once it has started.
    A context manager."""

    prefix = "azurite-"

    def __init__(self, *, container: str = DEFAULT_CONTAINER, data_dir: Path | None = None):
        super().__init__(data_dir)
        self.container = container
        self.authority = f"{HOST}:{self.port}"
        self.blob_endpoint = f"http://{self.authority}/{ACCOUNT}"

    def start(self) -> Self:
        if not installed():
            raise EmulatorError(f"Azurite is not installed ({blob_main()} is missing, or no "
                                f"node on PATH): run bash scripts/install_emulators.sh")
        argv = [shutil.which("node") or "node", str(blob_main()),
                "--blobHost", HOST, "--blobPort", str(self.port),
                "--disableTelemetry", "--skipApiVersionCheck", "--silent", "--inMemoryPersistence"]
        self._run("Azurite", argv, self._ready)
        self.filesystem().create_dir(self.container)
        return self

    def _ready(self) -> bool:
        # Any answer of the blob service (an unsigned request gets a 403) means it listens.
        try:
            with urllib.request.urlopen(f"{self.blob_endpoint}?comp=list", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True

    def pyarrow_options(self) -> dict:
        """Keyword arguments of ``pyarrow.fs.AzureFileSystem`` for this server."""
        return {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY,
                "blob_storage_authority": self.authority, "dfs_storage_authority": self.authority,
                "blob_storage_scheme": "http", "dfs_storage_scheme": "http"}

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.AzureFileSystem(**self.pyarrow_options())

    def connection_string(self) -> str:
        """The Azure SDKs' form (``AZURE_STORAGE_CONNECTION_STRING``)."""
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
                f"BlobEndpoint={self.blob_endpoint};")

    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
                "AZURE_STORAGE_CONNECTION_STRING": self.connection_string()}


def main() -> int:
    azurite = Azurite()
    return serve(azurite, [*(f"export {name}='{value}'" for name, value in azurite.env().items()),
                           f"# container {azurite.container}; blob endpoint {azurite.blob_endpoint}"])


if __name__ == "__main__":
    raise SystemExit(main())
