"""Faults of the object store under a home on S3 (issue #45), on a real S3 server (SeaweedFS on
loopback) with the catalog on PostgreSQL, each step a process on a worker of its own:

- the server stopped in the middle of a build: the build fails in one line, nothing is
  published, and the next build (server back) completes with the tables a local build has;
- two builds at once on two workers: one publishes, the other fails clearly and publishes
  nothing;
- throttling (``503 SlowDown``) and a request that times out are retried with backoff: the
  build succeeds.

Each stores the same five rounds of the seeded history, so one local build is the reference of
all three (``local_tables`` builds it once per test process).
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

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]


def _published_versions(worker: Worker) -> list[str]:
    """The versions ``topic-lineage versions`` marks published (``*``)."""
    listed = worker.run("versions").stdout
    return [line.split()[1] for line in listed.splitlines() if line.startswith("* ")]


def test_the_server_stopped_mid_build_publishes_nothing_and_the_next_build_completes(
        tmp_path, iceberg_postgres, seaweedfs_built):
    from tests.servers.s3_server import S3Server

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
        assert _published_versions(Worker(shared, tmp_path / "look")) == []
        Worker(shared, tmp_path / "build-2").run("build", "--version-id", "v2")
        tables = query_all(Worker(shared, tmp_path / "query"))
    assert tables == local_tables(tmp_path, [(0, 5)])


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


def test_throttling_and_a_timed_out_request_are_retried(tmp_path, s3_server, s3_bucket, iceberg_postgres):
    from tests.servers.s3_faults import S3FaultProxy

    with S3FaultProxy(s3_server.endpoint) as proxy:
        shared = shared_env(s3_bucket.env(proxy.endpoint), s3_bucket.url("home"),
                            iceberg_postgres("throttled"))
        shared["TOPIC_LINEAGE_OBJECT_STORE_TIMEOUT"] = "2"
        proxy.fail_next(3)  # the first requests of the store: SlowDown
        store_rounds(Worker(shared, tmp_path / "capture").env, 0, 5)
        proxy.fail_next(4, operation="GET")
        proxy.delay_next(1, seconds=6, operation="LIST")
        Worker(shared, tmp_path / "build").run("build")
        answered = [(status, injected) for _, status, injected in proxy.requests()]
        assert answered.count((503, "error")) == 7, proxy.summary()
        assert [i for _, i in answered].count("delay") == 1, proxy.summary()
        assert proxy.pending_faults() == 0
        tables = query_all(Worker(shared, tmp_path / "query"))
    assert tables == local_tables(tmp_path, [(0, 5)])
