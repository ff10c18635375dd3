"""Faults of the object store under a home on S3 (issue #45), on a real S3 server (SeaweedFS on
loopback) with the catalog on PostgreSQL, each step a process on a worker of its own:

- the server killed in the middle of a build: the build fails in one line, nothing is
  published, and the next build on the restarted server publishes (on a server of the test's
  own);
- two builds at once on two workers, one of them throttled (``503 SlowDown``) and with a
  request that times out, both retried with backoff: one publishes the tables a local build
  has, the other fails clearly and publishes nothing (on the session's server, through a fault
  proxy, while the first build retries the killed server: its retries are mostly waiting);
- the server itself, killed right after a write and started again, serves the same objects on
  the same endpoint, and leaves no gRPC socket behind (what tests/test_s3_server.py would
  otherwise start a server for; every session's server ends with a graceful stop).

Both homes hold the seeded history the object-store tests share: the reference is one local
build of it (``local_tables``: one per test session, shared with the other object-store tests).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.object_store_support import (
    HISTORY,
    Worker,
    local_tables,
    query_all,
    shared_env,
    store_steps,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]


def _published_versions(worker: Worker) -> list[str]:
    """The versions ``topic-lineage versions`` marks published (``*``)."""
    listed = worker.run("versions").stdout
    return [line.split()[1] for line in listed.splitlines() if line.startswith("* ")]


def test_a_killed_server_publishes_nothing_and_of_two_builds_at_once_retried_through_faults_one_wins(
        tmp_path, tmp_path_factory, iceberg_postgres, s3_bucket, s3_proxy, seaweedfs_built):
    """On a server of its own: a build paused while writing, the server killed (SIGKILL, right
    after a write of its own) and the build let go: it fails in one line and nothing is
    published; the server started again on the same endpoint serves every object it had, and
    the next build there publishes the tables a local build has. Killed at the end, it leaves
    no gRPC socket behind.

    Meanwhile, on the session's server (a bucket of its own), also reached through a fault
    proxy (steps on ``proxied`` workers): the store is throttled and retried; then two builds
    at once, one throttled and with a request that times out (through the proxy), one on the
    server itself; both paused where publishing moves ``main`` (or stopped before, having lost
    on a table) and let go together: exactly one publishes, the tables a local build has; the
    other says in one line that the table changed meanwhile and that nothing it published
    changed."""
    from tests.servers.s3_server import S3Server

    with S3Server(tmp_path / "s3") as server:
        own = shared_env(server.env(), f"s3://{server.bucket}/home", iceberg_postgres("killed"))
        store_steps(Worker(own, tmp_path / "capture").env, *HISTORY)
        builder = Worker(own, tmp_path / "build-1")
        # -v: its output has each retry with its time (where its wait went, should it be long)
        build = builder.start("-v", "build", "--version-id", "v1", TOPIC_LINEAGE_FAULT="pause@write",
                              TOPIC_LINEAGE_OBJECT_STORE_TIMEOUT="3")
        wait_for(builder.reached("write"), build)
        endpoint = server.endpoint
        client = server.client()
        client.put_object(Bucket=server.bucket, Key="a/1", Body=b"one")
        stored = sorted(_keys(client, server.bucket))
        server.kill()  # right after a write: nothing flushed
        assert not server.running
        builder.release("write")

        # while the build retries the killed server (a minute of backoff, mostly waiting)
        catalog = iceberg_postgres("two")
        shared = shared_env(s3_bucket.env(), s3_bucket.url("home"), catalog)
        proxied = {**shared_env(s3_bucket.env(s3_proxy.endpoint), s3_bucket.url("home"), catalog),
                   "TOPIC_LINEAGE_OBJECT_STORE_TIMEOUT": "2"}
        s3_proxy.fail_next(3)  # the first requests of the store: SlowDown
        store_steps(Worker(proxied, tmp_path / "capture-2").env, *HISTORY)
        s3_proxy.fail_next(4, operation="GET")
        s3_proxy.delay_next(1, seconds=6, operation="LIST")
        builds = {}
        for version, env in (("va", proxied), ("vb", shared)):
            worker = Worker(env, tmp_path / f"build-{version}")
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
        assert "Traceback" not in loser.output()
        assert _published_versions(Worker(shared, tmp_path / "look-2")) == winners
        # the proxied steps' requests: the store's 3 and the build's 4 SlowDowns, its delayed LIST
        answered = [(status, injected) for _, status, injected in s3_proxy.requests()]
        assert answered.count((503, "error")) == 7, s3_proxy.summary()
        assert [i for _, i in answered].count("delay") == 1, s3_proxy.summary()
        assert s3_proxy.pending_faults() == 0
        assert query_all(Worker(shared, tmp_path / "query")) == local_tables(tmp_path_factory)

        assert build.wait(timeout=600) == 2, builder.output()
        last = builder.output().strip().splitlines()[-1]
        assert "cannot reach" in last or "127.0.0.1" in last, builder.output()
        assert "Traceback" not in builder.output()
        server.start()
        assert server.endpoint == endpoint
        # started again, it serves every object it had
        assert sorted(_keys(client, server.bucket)) == stored
        assert client.get_object(Bucket=server.bucket, Key="a/1")["Body"].read() == b"one"
        assert _published_versions(Worker(own, tmp_path / "look")) == []
        # and the next build on it completes, whatever the failed one left on the bucket
        Worker(own, tmp_path / "build-2").run("build", "--version-id", "v2")
        assert _published_versions(Worker(own, tmp_path / "look-3")) == ["v2"]
        assert query_all(Worker(own, tmp_path / "query-own")) == local_tables(tmp_path_factory)
        ports = dict(server.ports)
        server.kill()  # the end needs no graceful stop (up to 9 s of SeaweedFS's filer)
    assert (tmp_path / "s3" / "weed.log").is_file()  # a directory given is kept
    left = [p for p in Path("/tmp").glob("seaweedfs-*-grpc-*.sock")
            if int(p.stem.rsplit("-", 1)[1]) in ports.values()]
    assert not left, f"weed's gRPC sockets left in /tmp: {left}"


def _keys(client, bucket: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]
