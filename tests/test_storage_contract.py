"""What a home promises (:class:`topic_lineage.storage.Home`), tested once against each
implementation: the local disk, and object storage on a real S3 server (SeaweedFS on loopback).
Every module that keeps data relies on these and nothing else of the store, so the whole
pipelines on S3 (tests/test_object_store_*.py) need not prove them again step by step."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from urllib.parse import parse_qsl, urlsplit

import pytest

from topic_lineage import location, storage

IMPLEMENTATIONS = ["local", pytest.param("s3", marks=pytest.mark.s3),
                   pytest.param("gcs", marks=pytest.mark.emulators),
                   pytest.param("azure", marks=pytest.mark.emulators)]


@pytest.fixture(params=IMPLEMENTATIONS)
def home(request, tmp_path, monkeypatch):
    """A fresh home of each kind, as ``$TOPIC_LINEAGE_HOME`` names it: the local disk; S3 on
    SeaweedFS (a bucket of its own); GCS on fake-gcs-server and Azure Blob Storage on Azurite
    (a prefix of its own), each configured by the variables its SDKs read."""
    prefix = f"home-{uuid.uuid4().hex[:12]}"
    if request.param == "local":
        monkeypatch.setenv(location.HOME_ENV, str(tmp_path / "home"))
        return storage.home()
    if request.param == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        env, url = bucket.env(), bucket.url(prefix)
    elif request.param == "gcs":
        server = request.getfixturevalue("gcs_server")
        env, url = server.env(), f"gs://{server.bucket}/{prefix}"
    else:
        server = request.getfixturevalue("azurite_server")
        env = server.env()
        url = f"abfs://{server.container}@{env['AZURE_STORAGE_ACCOUNT_NAME']}.dfs.core.windows.net/{prefix}"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(location.HOME_ENV, url)
    monkeypatch.setenv(location.WORK_DIR_ENV, str(tmp_path / "worker-a"))
    return storage.home()


def _another_worker(home, tmp_path, monkeypatch):
    """The same home seen by another process (on object storage: a working copy of its own)."""
    monkeypatch.setenv(location.WORK_DIR_ENV, str(tmp_path / "worker-b"))
    other = storage.home()
    assert other.url == home.url
    return other


def test_write_then_read_from_another_process(home, tmp_path, monkeypatch):
    """A file written whole is read whole by another process; a missing one reads as None."""
    home.write_bytes("a/b.json", b'{"x": 1}')
    other = _another_worker(home, tmp_path, monkeypatch)
    assert other.read_bytes("a/b.json") == b'{"x": 1}'
    assert other.read_text("a/missing.json") is None
    assert other.exists("a/b.json") and not other.exists("a/missing.json")


def test_replace_is_seen_by_a_reader_that_read_before(home, tmp_path, monkeypatch):
    """A replaced file (a manifest's status) reads as its new content, even by a process whose
    working copy holds the old one."""
    home.write_bytes("m.json", "old")
    other = _another_worker(home, tmp_path, monkeypatch)
    assert other.read_text("m.json") == "old"
    other.fetch("m.json")
    home.write_bytes("m.json", "new, and longer")
    assert other.read_text("m.json") == "new, and longer"
    assert other.fetch("m.json", refresh=True).read_text() == "new, and longer"


def test_create_if_absent_has_one_winner_among_racing_writers(home):
    """Of eight writers creating one name at once, exactly one wins, and its content stays."""
    def writer(i: int, name: str, start: threading.Barrier, wins: list[int]) -> None:
        start.wait()
        if home.create(name, f"writer {i}"):
            wins.append(i)

    for round_ in range(5):
        name, wins, start = f"claims/{round_}", [], threading.Barrier(8)
        threads = [threading.Thread(target=writer, args=(i, name, start, wins)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(wins) == 1, wins
        assert home.read_text(name) == f"writer {wins[0]}"
        assert home.create(name, "late") is False


def test_listing_past_a_thousand_files_skips_hidden_ones(request, home, tmp_path, monkeypatch):
    """A listing names every file under a folder, recursively, with its size; names starting
    with ``.`` or ``_`` only when asked. On object storage the home also lists through a proxy
    and gets the same files, following the store's continuation: S3 answers in pages of 1,000
    (two LIST requests); the emulators answer in one page where GCS and Azure page, so their
    proxy asks for pages of 100 (tests/servers/paging_proxy.py), and 405 files (135 in each of the
    three folders, which Azure may list one by one) are enough there (1,005 took Azurite 11 s)."""
    kind = request.node.callspec.params["home"]
    count = 405 if kind in ("gcs", "azure") else 1005
    for i in range(count):
        home.path(f"many/d{i % 3}/f{i:04d}").parent.mkdir(parents=True, exist_ok=True)
        home.path(f"many/d{i % 3}/f{i:04d}").write_bytes(b"x" * (i % 7))
    home.push_all(f"many/d{i % 3}/f{i:04d}" for i in range(count))
    home.write_bytes("many/.hidden", "h")
    home.write_bytes("many/d0/_SUCCESS", "")
    home.write_bytes("other/f", "not under many/")
    listed = home.listing("many")
    assert len(listed) == count
    assert listed["d1/f0001"][0] == 1 and listed["d0/f0006"][0] == 6
    assert set(home.listing("many", hidden=True)) - set(listed) == {".hidden", "d0/_SUCCESS"}
    assert home.listing("nothing-here") == {}
    if kind == "local":
        return
    with _paging_proxy(request, kind) as (env, continued):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert _another_worker(home, tmp_path, monkeypatch).listing("many") == listed
        assert continued()


@contextlib.contextmanager
def _paging_proxy(request, kind: str):
    """``(variables that point the SDKs, and so a home, at a proxy of the store, a check that
    the listings through it continued past a page)``."""
    from tests.servers import azurite
    from tests.servers.paging_proxy import PagingProxy, azure_pages, gcs_pages

    if kind == "s3":  # the fault proxy, which counts requests by operation
        proxy = request.getfixturevalue("s3_proxy")
        yield request.getfixturevalue("s3_bucket").env(proxy.endpoint), lambda: proxy.counts().get("LIST") == 2
        return
    if kind == "gcs":
        server = request.getfixturevalue("gcs_server")
        paging = PagingProxy(f"127.0.0.1:{server.port}", gcs_pages(100))
        env = {"STORAGE_EMULATOR_HOST": f"http://{paging.authority}"}
    else:
        server = request.getfixturevalue("azurite_server")
        paging = PagingProxy(server.authority, azure_pages(100, azurite.ACCOUNT, azurite.ACCOUNT_KEY))
        env = {"AZURE_STORAGE_CONNECTION_STRING": server.connection_string().replace(
            server.authority, paging.authority)}

    def continued() -> bool:
        pages = [dict(parse_qsl(urlsplit(target).query)) for target in paging.listings()]
        return any(page.get("pageToken") or page.get("marker") for page in pages)

    with paging:
        yield env, continued


def test_remove_and_remove_tree_keep_what_is_kept_and_the_last_file_last(home):
    """Removal of missing files is no error; a tree goes but for the files kept."""
    for name in ("v/a.parquet", "v/t/b.parquet", "v/manifest.json", "w/c.parquet"):
        home.write_bytes(name, name)
    home.remove(["v/missing", "w/c.parquet"])
    assert not home.exists("w/c.parquet")
    home.remove_tree("v", last="manifest.json", keep={"v/t/b.parquet"})
    assert sorted(home.listing("v", hidden=True)) == ["t/b.parquet"]


def test_a_kept_file_reads_as_its_stored_file(home, tmp_path, monkeypatch):
    """``keep``: the target holds the stored file's content without a copy: a hard link on a
    disk, a reference the caller records on object storage (then nothing is uploaded, and a
    reader resolves the reference to the stored object)."""
    home.write_bytes("v1/t/part.parquet", b"rows")
    referenced = home.keep(home.path("v1/t/part.parquet"), home.path("v2/t/part.parquet"))
    other = _another_worker(home, tmp_path, monkeypatch)
    if referenced:
        assert not other.exists("v2/t/part.parquet")  # nothing uploaded under the new name
        assert other.read_bytes("v1/t/part.parquet") == b"rows"
    else:
        assert other.read_bytes("v2/t/part.parquet") == b"rows"
        assert home.path("v2/t/part.parquet").stat().st_ino == home.path("v1/t/part.parquet").stat().st_ino


def test_change_token_changes_with_every_change_and_only_then(home, tmp_path, monkeypatch):
    """The no-op build's question: did anything under a folder change since a token was read?"""
    home.write_bytes("snapshots/a", "1")
    home.changed("snapshots")
    first = home.change_token("snapshots")
    assert home.change_token("snapshots") == first
    other = _another_worker(home, tmp_path, monkeypatch)
    time.sleep(0.01)
    other.write_bytes("snapshots/b", "2")
    other.changed("snapshots")
    assert home.change_token("snapshots") != first


def test_engine_names_round_trip(home):
    """What Spark and pyarrow are given names the same file (a path, or the object's URL), and
    the home finds it again; a name outside the home is a clear error."""
    name = home.engine_name("warehouse/versions/v1/t/p.parquet")
    assert home.name_of(name) == "warehouse/versions/v1/t/p.parquet"
    assert home.url_of("x/y").endswith("/x/y")
    with pytest.raises(location.LocationError, match="is not under"):
        home.name_of("s3://elsewhere/x" if home.url.startswith("file:") else "file:///elsewhere/x")


def test_a_parquet_file_written_by_a_task_reads_back(home, tmp_path, monkeypatch):
    """The walk tasks' write: a Parquet file whole, read by another process."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    task_home = storage.at(home.location)  # as an executor builds it from the home's location
    task_home.write_parquet("v/t/part.parquet", pa.table({"a": [1, 2, 3]}))
    other = _another_worker(home, tmp_path, monkeypatch)
    assert pq.read_table(io.BytesIO(other.read_bytes("v/t/part.parquet"))).column("a").to_pylist() == [1, 2, 3]


@pytest.mark.s3
def test_transient_faults_are_retried_and_a_wrong_secret_is_one_clear_line(s3_bucket, s3_proxy, tmp_path,
                                                                          monkeypatch):
    """Throttling and 5xx answers are retried (the write and read still succeed); refused
    credentials are one LocationError naming the home and what to check, nothing written."""
    for key, value in s3_bucket.env(s3_proxy.endpoint).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(location.HOME_ENV, s3_bucket.url("home"))
    monkeypatch.setenv(location.WORK_DIR_ENV, str(tmp_path / "w"))
    home = storage.home()
    s3_proxy.fail_next(2, status=503, code="SlowDown")
    home.write_bytes("f", "survived")
    s3_proxy.fail_next(2, status=500, code="InternalError")
    assert home.read_text("f") == "survived"
    assert s3_proxy.pending_faults() == 0

    for key, value in s3_bucket.env().items():  # straight to the server (a client of its own)
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    monkeypatch.setenv(location.WORK_DIR_ENV, str(tmp_path / "w2"))
    with pytest.raises(location.LocationError, match="refused the credentials.*AWS_SECRET_ACCESS_KEY"):
        storage.home().write_bytes("g", "never")
    assert "home/g" not in s3_bucket.keys("home/")


@pytest.mark.s3
def test_a_small_file_is_one_request_and_a_large_one_arrives_whole(s3_bucket, s3_proxy, tmp_path, monkeypatch):
    """A file smaller than an upload part is one PutObject (a multipart upload was three
    requests for each: create, the part, complete); a larger one is a multipart upload, whole
    once complete. (A write the server refuses is still one clear line:
    test_transient_faults_are_retried_and_a_wrong_secret_is_one_clear_line, whose error now
    comes as the object is closed.)"""
    import os

    for key, value in s3_bucket.env(s3_proxy.endpoint).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(location.HOME_ENV, s3_bucket.url("home"))
    monkeypatch.setenv(location.WORK_DIR_ENV, str(tmp_path / "w"))
    home = storage.home()
    s3_proxy.reset_counts()
    home.write_bytes("small", b"s" * 100_000)
    writes = [(r.method, sorted(r.query)) for r, _, _ in s3_proxy.requests() if r.method in ("PUT", "POST")]
    assert writes == [("PUT", [])], writes

    large = os.urandom(12 << 20)
    s3_proxy.reset_counts()
    home.write_bytes("large", large)
    writes = [(r.method, sorted(r.query)) for r, _, _ in s3_proxy.requests() if r.method in ("PUT", "POST")]
    assert writes[0] == ("POST", ["uploads"]) and writes[-1] == ("POST", ["uploadId"]), writes
    assert len([w for w in writes if w[0] == "PUT"]) >= 2, writes  # in parts
    monkeypatch.setenv(location.WORK_DIR_ENV, str(tmp_path / "reader"))
    reader = storage.home()
    assert reader.read_bytes("large") == large and reader.read_bytes("small") == b"s" * 100_000


def test_a_bootstrap_server_recorded_by_one_worker_names_the_datasets_on_another(home, tmp_path,
                                                                                 monkeypatch):
    """``lineage.namespaces``: a capture on one worker records how it reached the cluster; a
    ``lineage emit`` on another names the cluster's datasets by that server, not its alias
    (it wrote the record into the working copy only, so another worker fell back to the alias)."""
    from topic_lineage.lineage import namespaces

    namespaces.remember("cluster-1", "prod", "SASL_SSL://broker-1.example:9093,broker-2:9093")
    _another_worker(home, tmp_path, monkeypatch)
    assert namespaces.Namespaces()("cluster-1", "prod") == "kafka://broker-1.example:9093"


def test_each_retry_of_the_store_is_logged_with_its_error(caplog):
    """A transient failure retried by ``location.retried`` is one INFO line of ``topic_lineage``
    (what ``-v`` shows, with its time): which try failed, when the next comes, the error. A
    command that waits on a store that does not answer says what it waits for."""
    import logging

    failures = [OSError("When listing objects under key 'home/' in bucket 'b': AWS Error "
                        "SERVICE_UNAVAILABLE during ListObjectsV2 operation: Service Unavailable")] * 2
    calls = []

    def flaky():
        calls.append(1)
        if failures:
            raise failures.pop()
        return "listed"

    with caplog.at_level(logging.INFO, logger="topic_lineage.location"):
        assert location.retried(flaky) == "listed"
    lines = [r.getMessage() for r in caplog.records if r.name == "topic_lineage.location"]
    assert len(calls) == 3 and len(lines) == 2, lines
    assert lines[0].startswith(f"try 1 of {location.S3_ATTEMPTS} failed, again in ")
    assert all("SERVICE_UNAVAILABLE" in line for line in lines), lines


def _listing_error(store) -> tuple[OSError, int]:
    """The error of ``location.retried`` around a listing of ``store``, and how many times it
    called the listing."""
    import pyarrow.fs as pafs

    calls = []

    def listing():
        calls.append(1)
        return store.filesystem().get_file_info(pafs.FileSelector(store.key(), recursive=True))

    with pytest.raises(OSError) as failed:
        location.retried(listing)
    return failed.value, len(calls)


def test_what_the_sdk_retried_itself_is_not_tried_again(monkeypatch):
    """When pyarrow reports that the AWS SDK could not connect (refused, or no answer to the
    connection request in ``CONNECT_TIMEOUT_S``) or got no answer to its request in the request
    timeout, the SDK has already made all its tries, with backoff: ``location.retried`` gives
    up at once instead of making as many rounds again (an endpoint behind a firewall that drops
    the packets cost 8 x 90 s per request that way). Real pyarrow against loopback: a port
    nothing listens on, a socket whose connection queue is full (the kernel then drops the
    connection requests) and one that queues connections and never answers; the SDK's tries
    and the timeouts made small. The error is the one line that names the endpoint, whatever
    the names it quotes: the bucket's and the key's hold 401, 403 and 503, which the error's
    words once matched as HTTP statuses (a port ending in 401 gave "refused the credentials")."""
    import socket

    monkeypatch.setattr(location, "S3_ATTEMPTS", 2)
    monkeypatch.setattr(location, "CONNECT_TIMEOUT_S", 0.3)
    monkeypatch.setenv(location.TIMEOUT_ENV, "0.5")
    for name, value in {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret",
                        "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    with contextlib.ExitStack() as sockets:
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        refused_port = closed.getsockname()[1]
        closed.close()
        full = sockets.enter_context(socket.socket())
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        for _ in range(3):  # never accepted: the queue fills, later requests go unanswered
            queued = sockets.enter_context(socket.socket())
            queued.setblocking(False)
            queued.connect_ex(full.getsockname())
        silent = sockets.enter_context(socket.socket())  # connections queued, never answered
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        for port, words in ((refused_port, "curlcode: 7,"), (full.getsockname()[1], "connection timed out after"),
                            (silent.getsockname()[1], "operation too slow")):
            monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
            store = location.parse(f"s3://bucket-401-403-503-{port}/home-403")
            error, calls = _listing_error(store)
            assert calls == 1 and not location.transient(error), (calls, error)
            assert words in str(error).lower(), error
            assert f"cannot reach http://127.0.0.1:{port}" in location.describe_failure(store, error)
