"""GCS and Azure Blob Storage, through the same pyarrow file systems topic-lineage uses, against
their emulators on loopback: fake-gcs-server and Azurite (``scripts/install_emulators.sh``;
:mod:`tests.servers.gcs_emulator`, :mod:`tests.servers.azurite`).

What the storage interface needs of a store, each proved on both: an object written whole
(``open_output_stream``) and read back, its info, a missing key's info, a delete, and the
conditional create of :mod:`topic_lineage.storage.conditional_writes`: of writers racing on one
name, exactly one wins, and the object holds its bytes; on Azure, the lease-free delete of that
module. Each emulator starts once for the module. A listing past a page (through a proxy that asks
for pages, as GCS and Azure page where the emulators do not) is a promise of the home:
tests/test_storage_contract.py.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs
import pytest

from tests.servers import azurite as azurite_server
from topic_lineage.storage import conditional_writes
from topic_lineage.storage.conditional_writes import ConditionalWriteError

pytestmark = [pytest.mark.emulators]


@pytest.fixture
def gcs(gcs_server):
    return gcs_server


@pytest.fixture
def azurite(azurite_server):
    return azurite_server


@dataclass
class Store:
    """One emulator as the tests use it: its file system, the bucket or container, and its
    conditional create."""

    name: str
    server: Any
    fs: pafs.FileSystem
    root: str

    def create(self, key: str, data: bytes) -> bool:
        if self.name == "gcs":
            return conditional_writes.create_gcs(self.root, key, data,
                                                 endpoint=self.server.endpoint)
        return conditional_writes.create_azure(
            azurite_server.ACCOUNT, self.root, key, data, endpoint=self.server.blob_endpoint,
            account_key=azurite_server.ACCOUNT_KEY)

    def read(self, key: str) -> bytes:
        with self.fs.open_input_stream(f"{self.root}/{key}") as source:
            return source.read()

    def write(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(f"{self.root}/{key}") as sink:
            sink.write(data)

    def delete(self, key: str) -> bool | None:
        """The delete the home makes: pyarrow's on GCS; one ``Delete Blob`` on Azure, True when
        it deleted the blob, False when none was there."""
        if self.name == "gcs":
            self.fs.delete_file(f"{self.root}/{key}")
            return None
        return conditional_writes.delete_azure(azurite_server.ACCOUNT, self.root, key,
                                               endpoint=self.server.blob_endpoint,
                                               account_key=azurite_server.ACCOUNT_KEY)


@pytest.fixture(params=["gcs", "azure"])
def store(request) -> Store:
    if request.param == "gcs":
        server = request.getfixturevalue("gcs")
        return Store("gcs", server, server.filesystem(), server.bucket)
    server = request.getfixturevalue("azurite")
    return Store("azure", server, server.filesystem(), server.container)


def _unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


def test_write_read_info_delete(store):
    base = _unique("whole")
    data = bytes(range(256)) * 4097  # ~1 MiB, not a multiple of any buffer
    store.write(f"{base}/a/object.bin", data)

    assert store.read(f"{base}/a/object.bin") == data
    info = store.fs.get_file_info(f"{store.root}/{base}/a/object.bin")
    assert (info.type, info.size) == (pafs.FileType.File, len(data))

    missing = store.fs.get_file_info(f"{store.root}/{base}/a/missing.bin")
    assert missing.type == pafs.FileType.NotFound
    with pytest.raises(FileNotFoundError):
        store.read(f"{base}/a/missing.bin")

    store.write(f"{base}/a/object.bin", b"replaced whole")
    assert store.read(f"{base}/a/object.bin") == b"replaced whole"

    store.delete(f"{base}/a/object.bin")
    assert store.fs.get_file_info(f"{store.root}/{base}/a/object.bin").type == pafs.FileType.NotFound


def test_conditional_create(store):
    key = _unique("claim") + "/snapshot"
    assert store.create(key, b"first") is True
    # An emulator that ignored the precondition would answer True here and overwrite.
    assert store.create(key, b"second") is False, (
        f"{store.name}'s emulator does not enforce the create-only-if-absent precondition")
    assert store.read(key) == b"first"


def _race(store: Store, key: str, writers: int) -> list[bool | None]:
    """``writers`` threads creating ``key`` at once (released together by a barrier)."""
    barrier = threading.Barrier(writers)
    won: list[bool | None] = [None] * writers

    def write(number: int) -> None:
        barrier.wait()
        won[number] = store.create(key, f"writer {number}".encode())

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return won


def test_racing_writers_exactly_one_wins(store):
    writers, rounds = 8, 10
    for round_number in range(rounds):
        key = _unique(f"race{round_number}") + "/snapshot"
        won = _race(store, key, writers)
        assert won.count(True) == 1 and won.count(False) == writers - 1, won
        assert store.read(key) == f"writer {won.index(True)}".encode()


def _losing_the_first_answer(monkeypatch, methods=("PUT", "POST")) -> list[str]:
    """Make the first create request (or the first request of ``methods``) reach the store but
    its answer get lost (a dropped connection after the store acted): what a retry must not
    misread as someone else's win."""
    real_send = conditional_writes._send
    lost: list[str] = []

    def send(method, url, headers, body, timeout_s, where):
        answer = real_send(method, url, headers, body, timeout_s, where)
        if method in methods and not lost:
            lost.append(url)
            raise conditional_writes._Transient("connection reset (test)", sent=True)
        return answer

    monkeypatch.setattr(conditional_writes, "_send", send)
    return lost


def test_a_lost_answer_is_not_taken_for_a_loss(store, monkeypatch):
    key = _unique("lost") + "/snapshot"
    lost = _losing_the_first_answer(monkeypatch)
    assert store.create(key, b"mine") is True
    assert lost and store.read(key) == b"mine"


def test_a_lost_answer_then_someone_elses_object_is_a_loss(store, monkeypatch):
    key = _unique("theirs") + "/snapshot"
    assert store.create(key, b"theirs") is True
    lost = _losing_the_first_answer(monkeypatch)
    assert store.create(key, b"mine") is False
    assert lost and store.read(key) == b"theirs"


def test_a_missing_bucket_or_container_is_an_error(store):
    other = Store(store.name, store.server, store.fs, "no-such-root")
    with pytest.raises(ConditionalWriteError, match="no such bucket or container"):
        other.create("k", b"x")


def test_azurite_checks_the_shared_key_signature(azurite):
    wrong_key = "A" * 86 + "=="
    with pytest.raises(ConditionalWriteError, match="refused the credentials"):
        conditional_writes.create_azure(azurite_server.ACCOUNT, azurite.container, "signed",
                                        b"x", endpoint=azurite.blob_endpoint,
                                        account_key=wrong_key)
    assert conditional_writes.create_azure(
        azurite_server.ACCOUNT, azurite.container, "signed/ü and space+%.txt", b"x",
        endpoint=azurite.blob_endpoint, account_key=azurite_server.ACCOUNT_KEY) is True


def test_azure_delete_takes_no_lease_and_a_lost_answer_is_still_a_delete(azurite, monkeypatch):
    """The home's delete on Azure: one ``Delete Blob`` (True), none there (False), its
    neighbours untouched, a wrong key or a missing container one clear line, and a retry after
    a lost answer (the first request deleted) still this call's delete."""
    base = _unique("delete")
    store = Store("azure", azurite, azurite.filesystem(), azurite.container)
    for name in ("gone/ü and space+%.txt", "kept", "lost"):
        store.write(f"{base}/{name}", name.encode())
    with pytest.raises(ConditionalWriteError, match="^removing .*refused the credentials"):
        conditional_writes.delete_azure(azurite_server.ACCOUNT, azurite.container, f"{base}/kept",
                                        endpoint=azurite.blob_endpoint, account_key="A" * 86 + "==")
    with pytest.raises(ConditionalWriteError, match="^removing .*no such bucket or container"):
        Store("azure", azurite, store.fs, "no-such-root").delete(f"{base}/kept")
    assert store.delete(f"{base}/gone/ü and space+%.txt") is True
    assert store.delete(f"{base}/gone/ü and space+%.txt") is False

    lost = _losing_the_first_answer(monkeypatch, methods=("DELETE",))
    assert store.delete(f"{base}/lost") is True and lost
    listed = store.fs.get_file_info(pafs.FileSelector(f"{store.root}/{base}", recursive=True))
    assert [i.base_name for i in listed if i.type == pafs.FileType.File] == ["kept"]
    assert store.read(f"{base}/kept") == b"kept"


def test_gcs_endpoint_from_storage_emulator_host(gcs, monkeypatch):
    for name, value in gcs.env().items():
        monkeypatch.setenv(name, value)
    key = _unique("env") + "/snapshot"
    assert conditional_writes.create_gcs(gcs.bucket, key, b"x") is True
    assert conditional_writes.create_gcs(gcs.bucket, key, b"y") is False


def test_azurite_is_a_flat_namespace_to_pyarrow(azurite):
    """Azurite serves no Data Lake (dfs) endpoint: pyarrow treats it as a flat-namespace account,
    where it implements no ``move`` (arrow issue 40405). The storage interface needs none."""
    fs = azurite.filesystem()
    with fs.open_output_stream(f"{azurite.container}/flat/a") as sink:
        sink.write(b"a")
    with pytest.raises(NotImplementedError, match="Hierarchical Namespace"):
        fs.move(f"{azurite.container}/flat/a", f"{azurite.container}/flat/b")


def test_credentials_are_sent(gcs, azurite, monkeypatch):
    """A token provider's token goes with every GCS request and, with no account key, with
    every Azure request (the emulators check neither: what is sent is checked here)."""
    real_send = conditional_writes._send
    sent: list[dict] = []

    def send(method, url, headers, body, timeout_s, where):
        sent.append(dict(headers))
        return real_send(method, url, headers, body, timeout_s, where)

    monkeypatch.setattr(conditional_writes, "_send", send)
    monkeypatch.delenv(conditional_writes.AZURE_KEY_ENV, raising=False)
    key = _unique("token") + "/snapshot"
    assert conditional_writes.create_gcs(gcs.bucket, key, b"x", endpoint=gcs.endpoint,
                                         token_provider=lambda: "gcs-token") is True
    assert sent[-1]["Authorization"] == "Bearer gcs-token"
    # Azurite refuses the bearer token here (403: its OAuth needs --oauth basic and https)
    with pytest.raises(ConditionalWriteError, match="refused the credentials"):
        conditional_writes.create_azure(azurite_server.ACCOUNT, azurite.container, key, b"x",
                                        endpoint=azurite.blob_endpoint,
                                        token_provider=lambda: "azure-token")
    assert sent[-1]["Authorization"] == "Bearer azure-token"
    with pytest.raises(ConditionalWriteError, match="no credentials"):
        conditional_writes.create_azure(azurite_server.ACCOUNT, azurite.container, key, b"x",
                                        endpoint=azurite.blob_endpoint)
