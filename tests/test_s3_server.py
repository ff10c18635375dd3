"""The tests' S3 server (SeaweedFS on loopback, tests/servers/s3_server.py) and its fault
proxy (tests/servers/s3_faults.py), and what the project's two S3 clients, pyarrow's
``S3FileSystem`` and botocore, do against them: the requests object storage will rely on
(conditional creates and compare-and-swap), retries through throttling and slow answers, and
what refused credentials look like. Writers racing to create one name (exactly one wins) and a
listing past a page of 1,000 keys (two LIST requests) are promises of the home, proved on this
server by tests/test_storage_contract.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.servers.s3_faults import OPERATIONS, S3FaultProxy, operation

pytestmark = pytest.mark.s3

ROOT = Path(__file__).resolve().parents[1]


def _error_code(exc) -> str:
    return exc.response["Error"]["Code"]


# --- the server ---------------------------------------------------------------------------------
def test_the_binary_is_the_release_compose_runs(seaweedfs_built):
    """``weed version`` of the binary the tests built names the release whose image
    docker-compose.yml runs (``seaweedfs_dist.RELEASE``, tests/test_compose.py), and the pinned
    commit: what the tests run is what Compose runs."""
    from tests.servers import seaweedfs_dist

    done = subprocess.run([str(seaweedfs_dist.weed_executable()), "version"], capture_output=True,
                          text=True, timeout=60, check=True, stdin=subprocess.DEVNULL)
    words = done.stdout.split()
    assert seaweedfs_dist.RELEASE in words, done.stdout
    assert seaweedfs_dist.commit()[:8] in words, done.stdout


def test_every_component_listens_on_loopback_only(s3_server):
    """Master, volume server, filer and S3 gateway (HTTP and gRPC): no socket of the weed process
    listens on anything but 127.0.0.1."""
    pid = s3_server.pid
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    listening = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                listening.append((table, fields[1]))
    assert len(listening) >= 8, listening  # 4 components, HTTP and gRPC each
    loopback = {"tcp": "0100007F"}
    outside = [(t, a) for t, a in listening if loopback.get(t) != a.split(":")[0]]
    assert not outside, f"listening beyond 127.0.0.1: {outside}"


@pytest.mark.slow
def test_a_first_start_that_fails_is_made_again_on_new_ports_and_keeps_nothing_of_it(
        seaweedfs_built, tmp_path):
    """The filer's gRPC port taken before weed binds it (the master and the volume server have
    started and written their state): ``weed`` exits, and the start is made again on new ports,
    keeping nothing of the failed attempt: in a new data directory when the server made its own,
    in the given one with the attempt's state removed otherwise (its log stays; a volume server
    that kept the failed master's topology ID made the next master refuse to grow volumes, and
    no bucket took an object: a flake of tests/test_object_store_faults.py, 2026-11-29); the
    server then takes objects with content. The two cases run side by side: each is mostly a
    fresh start waiting on SeaweedFS's filer to join its master (about 13 s; the whole test
    took 3.3 CPU-seconds in 18.9 s, pytest's start included)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:  # each server lives and ends in the thread that started it
        cases = [pool.submit(_first_start_fails_then_starts_afresh, tmp_path / name, given)
                 for name, given in (("its-own-directory", False), ("a-given-directory", True))]
    for case in cases:
        case.result()  # its assertion error, if any


def _first_start_fails_then_starts_afresh(tmp_path: Path, given: bool) -> None:
    import socket

    from tests.servers.s3_server import _PORTS, S3Server
    from topic_lineage.local.broker import free_port

    server = S3Server(tmp_path / "s3" if given else None)
    server.ports = {name: free_port() for name in _PORTS}
    server._prepare()
    first_dir, taken = server.data_dir, server.ports["filer_grpc"]
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", taken))
        blocker.listen()
        with server:
            assert server.ports["filer_grpc"] != taken
            if given:  # its log goes on from the failed attempt's
                assert server.data_dir == first_dir
                assert "bind: address already in use" in server.log_path.read_text()
            else:
                assert server.data_dir != first_dir and not first_dir.exists()
            server.client().put_object(Bucket=server.bucket, Key="k", Body=b"content")
            assert server.client().get_object(Bucket=server.bucket, Key="k")["Body"].read() == b"content"


# A server killed (SIGKILL) and started again serves the same objects on the same endpoint and
# leaves no gRPC socket behind: tests/test_object_store_faults.py, on the server it kills in the
# middle of a build (a server start less). Every session's server ends with a stop (SIGTERM).


# --- pyarrow ------------------------------------------------------------------------------------
def test_pyarrow_writes_reads_lists_and_deletes(s3_bucket):
    from pyarrow import fs

    s3 = s3_bucket.filesystem()
    base = f"{s3_bucket.name}/dir"
    for name in ("a.txt", "sub/b.txt"):
        with s3.open_output_stream(f"{base}/{name}") as out:
            out.write(name.encode() * 3)
    with s3.open_input_stream(f"{base}/sub/b.txt") as stream:
        assert stream.read() == b"sub/b.txt" * 3
    listed = s3.get_file_info(fs.FileSelector(base, recursive=True))
    files = sorted(i.path for i in listed if i.type == fs.FileType.File)
    assert files == [f"{base}/a.txt", f"{base}/sub/b.txt"]
    s3.delete_file(f"{base}/a.txt")
    assert s3.get_file_info(f"{base}/a.txt").type == fs.FileType.NotFound
    # pyarrow's delete_file puts an empty directory marker ("dir/") in place of what it deleted
    keys = s3_bucket.keys("dir/")
    print(f"\nkeys after pyarrow's delete_file: {keys}")
    assert [k for k in keys if not k.endswith("/")] == ["dir/sub/b.txt"]


def test_pyarrow_finds_the_server_from_the_environment_alone(s3_bucket):
    """``FileSystem.from_uri("s3://...")`` and a botocore client made without arguments, in a
    process with only the standard variables set (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, keys,
    region): both reach the local server, by path-style addressing without being told."""
    code = """
import sys
from pyarrow import fs
s3, path = fs.FileSystem.from_uri(sys.argv[1])
with s3.open_output_stream(path) as out:
    out.write(b"from the environment")
with s3.open_input_stream(path) as stream:
    print(stream.read().decode(), type(s3).__name__)
import botocore.session
bucket, key = path.split("/", 1)
client = botocore.session.get_session().create_client("s3")
print(client.get_object(Bucket=bucket, Key=key)["Body"].read().decode())
"""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    for names in (("AWS_ENDPOINT_URL",), ("AWS_ENDPOINT_URL_S3",)):
        env = {k: v for k, v in s3_bucket.env().items()
               if not k.startswith("AWS_ENDPOINT_URL") or k in names}
        done = subprocess.run([sys.executable, "-c", code, s3_bucket.url(f"env/{names[0]}")],
                              env={**base, **env}, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, f"{names}: {done.stderr[-1500:]}"
        assert done.stdout.split() == ["from", "the", "environment", "S3FileSystem",
                                       "from", "the", "environment"], done.stdout
    assert s3_bucket.keys("env/") == ["env/AWS_ENDPOINT_URL", "env/AWS_ENDPOINT_URL_S3"]


# --- conditional writes (botocore) ---------------------------------------------------------------
def test_if_none_match_creates_only_when_absent(s3_bucket):
    """PutObject with ``If-None-Match: *``: 200 on a new key, 412 PreconditionFailed when the key
    exists (the object unchanged): how "only one writer wins" a snapshot's name."""
    from botocore.exceptions import ClientError

    client = s3_bucket.client()
    client.put_object(Bucket=s3_bucket.name, Key="snap", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as lost:
        client.put_object(Bucket=s3_bucket.name, Key="snap", Body=b"second", IfNoneMatch="*")
    assert lost.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert _error_code(lost.value) == "PreconditionFailed"
    print(f"\nIf-None-Match on an existing key: {lost.value}")
    assert client.get_object(Bucket=s3_bucket.name, Key="snap")["Body"].read() == b"first"


def test_if_match_replaces_only_the_version_read(s3_bucket):
    """PutObject with ``If-Match: <ETag>`` (compare-and-swap): it replaces the object whose ETag
    it names, and is refused with 412 once someone else replaced it."""
    from botocore.exceptions import ClientError

    client = s3_bucket.client()
    first = client.put_object(Bucket=s3_bucket.name, Key="pointer", Body=b"v1")["ETag"]
    second = client.put_object(Bucket=s3_bucket.name, Key="pointer", Body=b"v2", IfMatch=first)["ETag"]
    assert second != first
    with pytest.raises(ClientError) as stale:
        client.put_object(Bucket=s3_bucket.name, Key="pointer", Body=b"v3", IfMatch=first)
    assert _error_code(stale.value) == "PreconditionFailed"
    with pytest.raises(ClientError) as missing:
        client.put_object(Bucket=s3_bucket.name, Key="absent", Body=b"x", IfMatch=first)
    print(f"\nIf-Match with a stale ETag: {stale.value}\nIf-Match on a missing key: {missing.value}")
    assert client.get_object(Bucket=s3_bucket.name, Key="pointer")["Body"].read() == b"v2"


# --- the fault proxy ----------------------------------------------------------------------------
def test_operations_are_named_from_method_path_and_query():
    assert operation("GET", "/b/k", {}) == "GET"
    assert operation("GET", "/b", {"list-type": ["2"], "prefix": ["x/"]}) == "LIST"
    assert operation("GET", "/b/", {}) == "LIST"
    assert operation("GET", "/b", {"location": [""]}) == "BUCKET_GET"
    assert operation("HEAD", "/b/k/with/slashes", {}) == "HEAD"
    assert operation("HEAD", "/b", {}) == "BUCKET_HEAD"
    assert operation("PUT", "/b", {}) == "BUCKET_PUT"
    assert operation("DELETE", "/b/k", {}) == "DELETE"
    assert operation("POST", "/b", {"delete": [""]}) == "BUCKET_POST"
    assert operation("GET", "/", {}) == "SERVICE"
    assert set(OPERATIONS) >= {"GET", "HEAD", "PUT", "LIST", "DELETE"}


def test_requests_through_the_proxy_verify_and_are_counted(s3_bucket, s3_proxy):
    """Signed requests pass the proxy unchanged (SeaweedFS verifies SigV4 over the Host the client
    signed); the counts say what each client call cost."""
    client = s3_bucket.client(s3_proxy.endpoint)
    client.put_object(Bucket=s3_bucket.name, Key="k", Body=b"x" * 100_000)
    client.head_object(Bucket=s3_bucket.name, Key="k")
    assert client.get_object(Bucket=s3_bucket.name, Key="k")["Body"].read() == b"x" * 100_000
    client.list_objects_v2(Bucket=s3_bucket.name, Prefix="k")
    client.delete_object(Bucket=s3_bucket.name, Key="k")
    assert s3_proxy.counts() == {"PUT": 1, "HEAD": 1, "GET": 1, "LIST": 1, "DELETE": 1}
    assert s3_proxy.counts_by_method() == {"PUT": 1, "HEAD": 1, "GET": 2, "DELETE": 1}
    assert all(status < 300 for _, status, _ in s3_proxy.requests())
    s3_proxy.reset_counts()
    assert s3_proxy.total() == 0

    s3 = s3_bucket.filesystem(s3_proxy.endpoint)
    with s3.open_output_stream(f"{s3_bucket.name}/p") as out:
        out.write(b"y" * 100_000)
    with s3.open_input_stream(f"{s3_bucket.name}/p") as stream:
        assert stream.read() == b"y" * 100_000
    print(f"\npyarrow write + read of one small object: {s3_proxy.summary()}")
    assert s3_proxy.counts().get("PUT") == 1
    assert all(status < 300 or op in ("HEAD", "BUCKET_HEAD") for (r, status, _), op
               in ((x, x[0].operation) for x in s3_proxy.requests()))


def test_slowdown_is_retried_by_botocore_and_pyarrow(s3_bucket, s3_proxy):
    """``503 SlowDown`` answers to the next requests of each kind (two for botocore, one for
    pyarrow): botocore (standard retry mode) and pyarrow (its default retry strategy) retry,
    and the operations succeed."""
    from pyarrow import fs

    client = s3_bucket.client(s3_proxy.endpoint)
    s3_proxy.fail_next(2, operation="PUT")
    client.put_object(Bucket=s3_bucket.name, Key="b", Body=b"botocore")
    s3_proxy.fail_next(2, operation="GET")
    assert client.get_object(Bucket=s3_bucket.name, Key="b")["Body"].read() == b"botocore"
    injected = [(r.operation, status, how) for r, status, how in s3_proxy.requests()]
    assert injected == [("PUT", 503, "error")] * 2 + [("PUT", 200, "")] \
        + [("GET", 503, "error")] * 2 + [("GET", 200, "")], injected

    s3_proxy.reset_counts()
    s3 = s3_bucket.filesystem(s3_proxy.endpoint)
    data = b"pyarrow " * 125  # 1,000 bytes: see the next test for smaller objects
    for operation_ in ("POST", "PUT"):  # a write is CreateMultipartUpload, UploadPart, Complete...
        s3_proxy.fail_next(1, operation=operation_)
        with s3.open_output_stream(f"{s3_bucket.name}/p") as out:
            out.write(data)
    s3_proxy.fail_next(1, operation="GET")
    with s3.open_input_stream(f"{s3_bucket.name}/p") as stream:
        assert stream.read() == data
    for operation_, list_ in (("HEAD", False), ("LIST", True)):
        s3_proxy.fail_next(1, operation=operation_)
        if list_:
            assert len(s3.get_file_info(fs.FileSelector(s3_bucket.name, recursive=True))) == 2
        else:
            assert s3.get_file_info(f"{s3_bucket.name}/p").size == len(data)
    print(f"\npyarrow through a SlowDown per POST, PUT, GET, HEAD, LIST: {s3_proxy.summary()}")
    assert s3_proxy.pending_faults() == 0
    assert s3_proxy.counts() == {"POST": 1 + 4, "PUT": 1 + 2, "GET": 2, "HEAD": 1 + 2, "LIST": 2}, \
        s3_proxy.summary()
    assert s3_bucket.keys() == ["b", "p"]


def test_pyarrow_does_not_retry_a_slowdown_on_a_get_of_a_tiny_object(s3_bucket, s3_proxy):
    """A known limit of pyarrow's S3 client (the AWS SDK for C++ under pyarrow 26): it reads a
    GetObject's answer into a buffer of the object's size, so an error body longer than the
    object (S3's XML, about 200 bytes) overflows it and the 503 becomes a final INTERNAL_FAILURE
    instead of a retry. Larger objects are retried (the test above). Should this start to pass
    the retry, the limit is gone."""
    s3 = s3_bucket.filesystem(s3_proxy.endpoint)
    with s3.open_output_stream(f"{s3_bucket.name}/tiny") as out:
        out.write(b"tiny")
    s3_proxy.reset_counts()
    s3_proxy.fail_next(1, operation="GET")
    with pytest.raises(OSError, match="Failed to flush response stream"), \
            s3.open_input_stream(f"{s3_bucket.name}/tiny") as stream:
        stream.read()
    assert s3_proxy.counts() == {"HEAD": 1, "GET": 1}


def test_a_slow_answer_times_out_and_the_retry_succeeds(s3_bucket, s3_proxy):
    """An answer delayed past the client's read timeout: botocore gives up on it and retries;
    the delayed request itself still reached the server (after_upstream=True: it did the work),
    so a conditional create retried this way meets its own object (412)."""
    from botocore.exceptions import ClientError

    client = s3_bucket.client(s3_proxy.endpoint, read_timeout=1, connect_timeout=1)
    s3_proxy.delay_next(1, 2.5, operation="GET")
    client.put_object(Bucket=s3_bucket.name, Key="slow", Body=b"s")
    began = time.monotonic()
    assert client.get_object(Bucket=s3_bucket.name, Key="slow")["Body"].read() == b"s"
    assert 1 <= time.monotonic() - began < 2.5
    assert s3_proxy.counts() == {"PUT": 1, "GET": 2}  # the first still held by the proxy
    assert [injected for _, _, injected in s3_proxy.requests()] == ["", "delay", ""]

    s3_proxy.delay_next(1, 2.5, operation="PUT", after_upstream=True)
    with pytest.raises(ClientError) as own:
        client.put_object(Bucket=s3_bucket.name, Key="claimed", Body=b"c", IfNoneMatch="*")
    assert _error_code(own.value) == "PreconditionFailed"
    assert client.get_object(Bucket=s3_bucket.name, Key="claimed")["Body"].read() == b"c"


# --- refused credentials ------------------------------------------------------------------------
def test_refused_credentials_as_each_client_says_it(s3_bucket):
    """A wrong secret, then an unknown access key: botocore's ClientError code and pyarrow's
    OSError text (printed with -s: what a one-line error will be made from)."""
    from botocore.exceptions import ClientError
    from pyarrow import fs

    s3_bucket.client().put_object(Bucket=s3_bucket.name, Key="k", Body=b"x")
    messages = {}
    for label, override in (("wrong secret", {"secret_key": "not-the-secret"}),
                            ("unknown key", {"access_key": "nobody"})):
        options = {**s3_bucket.pyarrow_options(), **override}
        session_args = {"aws_access_key_id": options["access_key"],
                        "aws_secret_access_key": options["secret_key"]}
        import botocore.session

        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=s3_bucket.endpoint, region_name="us-east-1", **session_args)
        with pytest.raises(ClientError) as refused:
            client.get_object(Bucket=s3_bucket.name, Key="k")
        messages[f"botocore {label}"] = f"{_error_code(refused.value)}: {refused.value}"
        s3 = fs.S3FileSystem(**options, retry_strategy=fs.AwsStandardS3RetryStrategy(1))
        with pytest.raises(OSError) as pa_refused:
            s3.open_input_stream(f"{s3_bucket.name}/k").read()
        messages[f"pyarrow {label}"] = str(pa_refused.value)
        with pytest.raises(OSError) as pa_write, s3.open_output_stream(f"{s3_bucket.name}/w") as out:
            out.write(b"x")
        messages[f"pyarrow write, {label}"] = str(pa_write.value)
    print("\n" + json.dumps(messages, indent=1))
    assert "SignatureDoesNotMatch" in messages["botocore wrong secret"]
    assert "InvalidAccessKeyId" in messages["botocore unknown key"]
    # a HEAD answer has no body: pyarrow's reads only say ACCESS_DENIED
    assert "ACCESS_DENIED during HeadObject" in messages["pyarrow wrong secret"]
    assert "ACCESS_DENIED during HeadObject" in messages["pyarrow unknown key"]
    assert "SIGNATURE_DOES_NOT_MATCH" in messages["pyarrow write, wrong secret"]
    assert "INVALID_ACCESS_KEY_ID" in messages["pyarrow write, unknown key"]
    assert s3_bucket.keys() == ["k"]


def test_the_proxy_forwards_to_a_stopped_server_as_502(tmp_path):
    """A proxy whose server is gone answers 502 (the client's retries see a server error)."""
    import urllib.error
    import urllib.request

    from topic_lineage.local.broker import free_port

    with S3FaultProxy(f"http://127.0.0.1:{free_port()}") as proxy:
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(f"{proxy.endpoint}/b/k", timeout=10)
        assert gone.value.code == 502
        assert proxy.counts() == {"GET": 1}
