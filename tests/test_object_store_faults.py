"""Faults of the object store under a home on S3 (issue #45), on a real S3 server (SeaweedFS on
loopback) with the catalog on PostgreSQL, each step a process on a worker of its own:

- the server stopped in the middle of a build: the build fails in one line, nothing is
  published, and the next build (server back) completes with the tables a local build has;
- two builds at once on two workers: one publishes, the other fails clearly and publishes
  nothing;
- throttling (``503 SlowDown``) and a request that times out are retried with backoff: the
  build succeeds.
"""

from __future__ import annotations

import pytest

from tests.object_store_support import (
    Worker,
    local_tables,
    query_all,
    shared_env,
    store_rounds,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.s3]


def _published(worker: Worker) -> str:
    return worker.run("versions").stdout


def test_the_server_stopped_mid_build_publishes_nothing_and_the_next_build_completes(
        tmp_path, iceberg_postgres, seaweedfs_built):
    from topic_lineage.local.s3_server import S3Server

    with S3Server(tmp_path / "s3") as server:
        shared = shared_env(server.env(), f"s3://{server.bucket}/home", iceberg_postgres("stopped"))
        store_rounds(Worker(shared, tmp_path / "capture").env, 0, 5)
        builder = Worker(shared, tmp_path / "build-1")
        build = builder.start("build", "--version-id", "v1", TOPIC_LINEAGE_FAULT="pause@write",
                              TOPIC_LINEAGE_OBJECT_STORE_TIMEOUT="3")
        wait_for(builder.reached("write"), build)
        server.stop()
        builder.release("write")
        assert build.wait(timeout=600) == 2, builder.output()
        last = builder.output().strip().splitlines()[-1]
        assert "cannot reach" in last or "127.0.0.1" in last, builder.output()
        assert "Traceback" not in builder.output()
        server.start()
        assert "0 version(s)" in _published(Worker(shared, tmp_path / "look")) or \
            "* " not in _published(Worker(shared, tmp_path / "look-2"))
        Worker(shared, tmp_path / "build-2").run("build", "--version-id", "v2")
        tables = query_all(Worker(shared, tmp_path / "query"))
    assert tables == local_tables(tmp_path, [(0, 5)])


def test_two_builds_at_once_one_publishes_the_other_fails_clearly(tmp_path, s3_bucket, iceberg_postgres):
    shared = shared_env(s3_bucket.env(), s3_bucket.url("home"), iceberg_postgres("two"))
    store_rounds(Worker(shared, tmp_path / "capture").env, 0, 4)
    first, second = Worker(shared, tmp_path / "build-a"), Worker(shared, tmp_path / "build-b")
    a = first.start("build", "--version-id", "va", TOPIC_LINEAGE_FAULT="pause@publish")
    b = second.start("build", "--version-id", "vb", TOPIC_LINEAGE_FAULT="pause@publish")
    wait_for(first.reached("publish"), a)
    wait_for(second.reached("publish"), b)
    first.release("publish")
    assert a.wait(timeout=300) == 0, first.output()
    second.release("publish")
    assert b.wait(timeout=300) != 0, second.output()
    said = second.output().strip().splitlines()[-1]
    assert "changed meanwhile" in said and "nothing published changed" in said, second.output()
    listed = _published(Worker(shared, tmp_path / "look"))
    published = [line.split()[1] for line in listed.splitlines() if line.startswith("* ")]
    assert published == ["va"], listed
    assert query_all(Worker(shared, tmp_path / "query")) == local_tables(tmp_path, [(0, 4)])


def test_throttling_and_a_timed_out_request_are_retried(tmp_path, s3_server, s3_bucket, iceberg_postgres):
    from topic_lineage.local.s3_faults import S3FaultProxy

    with S3FaultProxy(s3_server.endpoint) as proxy:
        shared = shared_env(s3_bucket.env(proxy.endpoint), s3_bucket.url("home"),
                            iceberg_postgres("throttled"))
        shared["TOPIC_LINEAGE_OBJECT_STORE_TIMEOUT"] = "2"
        proxy.fail_next(3)  # the first requests of the store: SlowDown
        store_rounds(Worker(shared, tmp_path / "capture").env, 0, 3)
        proxy.fail_next(4, operation="GET")
        proxy.delay_next(1, seconds=6, operation="LIST")
        Worker(shared, tmp_path / "build").run("build")
        answered = [(status, injected) for _, status, injected in proxy.requests()]
        assert answered.count((503, "error")) == 7, proxy.summary()
        assert [i for _, i in answered].count("delay") == 1, proxy.summary()
        assert proxy.pending_faults() == 0
        tables = query_all(Worker(shared, tmp_path / "query"))
    assert tables == local_tables(tmp_path, [(0, 3)])
