"""Faults of the object store under a home on S3 (issue #45), on a real S3 server (SeaweedFS on
loopback) with the catalog on PostgreSQL, each step a process on a worker of its own:

- the server stopped in the middle of a build: the build fails in one line, nothing is
  published, and the next build (server back) completes with the tables a local build has;
- two builds at once on two workers: one publishes, the other fails clearly and publishes
  nothing;
- throttling (``503 SlowDown``) and a request that times out are retried with backoff: the
  store and the build after the server's restart succeed (the first test);
- the server itself, stopped or killed and started again, serves the same objects on the same
  endpoint (the first test: what tests/test_s3_server.py would otherwise start a server for).

Each stores the same five rounds of the seeded history, so one local build is the reference of
both (``local_tables`` builds it once per test process).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.object_store_support import (
    Worker,
    local_tables,
    query_all,
    shared_env,
    store_rounds,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]


def _published_versions(worker: Worker) -> list[str]:
    """The versions ``topic-lineage versions`` marks published (``*``)."""
    listed = worker.run("versions").stdout
    return [line.split()[1] for line in listed.splitlines() if line.startswith("* ")]


def test_the_server_stopped_mid_build_publishes_nothing_and_the_next_build_retries_through_faults(
        tmp_path, iceberg_postgres, seaweedfs_built):
    """A server of its own, its S3 also reached through a fault proxy (steps on ``proxied``
    workers). The store is throttled (``503 SlowDown``) and retried; a build on the server itself
    is paused while writing, the server stopped (SIGTERM) and the build let go: it fails in one
    line and nothing is published. The server started again on the same endpoint serves what
    was stored; the next build, throttled and with a request that times out, is retried and
    completes with the tables a local build has. Last, what the server restarts themselves
    promise: killed (SIGKILL) right after a write and started again it serves every object, and
    it leaves no gRPC socket behind."""
    from tests.servers.s3_faults import S3FaultProxy
    from tests.servers.s3_server import S3Server

    with S3Server(tmp_path / "s3") as server, S3FaultProxy(server.endpoint) as proxy:
        catalog = iceberg_postgres("stopped")
        shared = shared_env(server.env(), f"s3://{server.bucket}/home", catalog)
        proxied = {**shared_env(server.env(proxy.endpoint), f"s3://{server.bucket}/home", catalog),
                   "TOPIC_LINEAGE_OBJECT_STORE_TIMEOUT": "2"}
        proxy.fail_next(3)  # the first requests of the store: SlowDown
        store_rounds(Worker(proxied, tmp_path / "capture").env, 0, 5)
        builder = Worker(shared, tmp_path / "build-1")
        build = builder.start("build", "--version-id", "v1", TOPIC_LINEAGE_FAULT="pause@write",
                              TOPIC_LINEAGE_OBJECT_STORE_TIMEOUT="3")
        wait_for(builder.reached("write"), build)
        endpoint = server.endpoint
        server.stop()
        assert not server.running
        builder.release("write")
        reference = local_tables(tmp_path, [(0, 5)])  # while the build retries the stopped server
        assert build.wait(timeout=600) == 2, builder.output()
        last = builder.output().strip().splitlines()[-1]
        assert "cannot reach" in last or "127.0.0.1" in last, builder.output()
        assert "Traceback" not in builder.output()
        server.start()
        assert server.endpoint == endpoint
        assert _published_versions(Worker(shared, tmp_path / "look")) == []
        proxy.fail_next(4, operation="GET")
        proxy.delay_next(1, seconds=6, operation="LIST")
        Worker(proxied, tmp_path / "build-2").run("build", "--version-id", "v2")
        answered = [(status, injected) for _, status, injected in proxy.requests()]
        assert answered.count((503, "error")) == 7, proxy.summary()
        assert [i for _, i in answered].count("delay") == 1, proxy.summary()
        assert proxy.pending_faults() == 0
        tables = query_all(Worker(shared, tmp_path / "query"))

        client = server.client()
        client.put_object(Bucket=server.bucket, Key="a/1", Body=b"one")
        stored = sorted(_keys(client, server.bucket))
        server.kill()
        server.start()
        assert server.endpoint == endpoint
        assert sorted(_keys(client, server.bucket)) == stored
        assert client.get_object(Bucket=server.bucket, Key="a/1")["Body"].read() == b"one"
        ports = dict(server.ports)
        server.kill()  # the end needs no graceful stop (up to 9 s of SeaweedFS's filer)
    assert tables == reference
    assert (tmp_path / "s3" / "weed.log").is_file()  # a directory given is kept
    left = [p for p in Path("/tmp").glob("seaweedfs-*-grpc-*.sock")
            if int(p.stem.rsplit("-", 1)[1]) in ports.values()]
    assert not left, f"weed's gRPC sockets left in /tmp: {left}"


def _keys(client, bucket: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_two_builds_at_once_one_publishes_the_other_fails_clearly(tmp_path, s3_bucket, iceberg_postgres):
    """Both builds paused where publishing moves ``main`` (or stopped before, having lost on a
    table), then let go together: exactly one publishes; the other says in one line that the
    table changed meanwhile and that nothing it published changed."""
    import time

    shared = shared_env(s3_bucket.env(), s3_bucket.url("home"), iceberg_postgres("two"))
    store_rounds(Worker(shared, tmp_path / "capture").env, 0, 5)
    builds = {}
    for version in ("va", "vb"):
        worker = Worker(shared, tmp_path / f"build-{version}")
        builds[version] = (worker, worker.start("build", "--version-id", version,
                                                TOPIC_LINEAGE_FAULT="pause@publish"))
    deadline = time.monotonic() + 600
    while not all(w.reached("publish").exists() or p.poll() is not None for w, p in builds.values()):
        assert time.monotonic() < deadline, [w.output()[-500:] for w, _ in builds.values()]
        time.sleep(0.2)
    for worker, _ in builds.values():
        worker.release("publish")
    codes = {version: proc.wait(timeout=300) for version, (_, proc) in builds.items()}
    winners = [version for version, code in codes.items() if code == 0]
    assert len(winners) == 1, {v: w.output()[-800:] for v, (w, _) in builds.items()}
    loser = next(worker for version, (worker, _) in builds.items() if version not in winners)
    said = loser.output().strip().splitlines()[-1]
    assert "changed meanwhile" in said and "nothing published changed" in said, loser.output()
    assert _published_versions(Worker(shared, tmp_path / "look")) == winners
    assert query_all(Worker(shared, tmp_path / "query")) == local_tables(tmp_path, [(0, 5)])
