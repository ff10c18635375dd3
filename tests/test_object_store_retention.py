"""Retention and the sweep of unreferenced objects with the home on S3 (issue #45), on a real S3
server (SeaweedFS on loopback) with the catalog on PostgreSQL, each step a process on a worker of
its own. No file lock reaches another machine, so retention goes by the ages the manifests
record (topic_lineage.warehouse.retention) and ``verify`` reports, and ``verify --clean``
removes, what a killed step leaves behind (topic_lineage.sweep):

- a build killed while staging and a store killed between its claim and its file leave objects
  nothing references; the sweep leaves them while they are younger than the grace, then removes
  exactly them, and nothing a published or kept version has;
- the killed build's version (status ``building``) goes with the next publish once its manifest
  is stale; the version that publish superseded stays until the reader grace has passed, then
  goes but for the files the published version keeps of it by reference;
- a version another worker is building is not removed by a publish on this one
  (tests/test_object_store_references.py, whose publish with keep 1 and no grace runs while
  another worker's build is paused).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.object_store_support import ROOT, Worker, shared_env, store_rounds

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]

GRACE = "TOPIC_LINEAGE_READER_GRACE"
STALE = "TOPIC_LINEAGE_STALE_BUILD"
KEEP = "TOPIC_LINEAGE_KEEP_VERSIONS"


@pytest.fixture
def shared(s3_bucket, iceberg_postgres, tmp_path):
    return shared_env(s3_bucket.env(), s3_bucket.url("home"), iceberg_postgres(tmp_path.name))


def _objects(bucket) -> set[str]:
    """The keys of the home's objects (not the folders SeaweedFS lists once emptied)."""
    return {k for k in bucket.keys("home/") if not k.endswith("/")}


def _version_keys(keys, version: str) -> set[str]:
    return {k for k in keys if k.startswith(f"home/warehouse/versions/{version}/")}


def _line(output: str, kind: str) -> str:
    return next(line for line in output.splitlines() if kind in line)


def test_what_killed_steps_leave_is_swept_after_the_grace_and_nothing_kept_is(shared, s3_bucket, tmp_path):
    store_rounds(Worker(shared, tmp_path / "capture-1").env, 0, 4)
    Worker(shared, tmp_path / "build-1").run("build", "--version-id", "v1")
    before = _objects(s3_bucket)

    killed = Worker({**shared, "TOPIC_LINEAGE_FAULT": "kill@stage"}, tmp_path / "build-2")
    done = killed.run("build", "--full-refresh", "--version-id", "v2", check=False)
    assert done.returncode == -9, done.stdout + done.stderr
    code = ("from tests.benchmarks.datagen import History; "
            "History(topics=40, clusters=2, seed=11).store_rounds(4, 5)")
    stored = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                            env={**Worker(shared, tmp_path / "capture-2").env,
                                 "TOPIC_LINEAGE_FAULT": "kill@store"}, cwd=str(ROOT), timeout=300)
    assert stored.returncode == -9, stored.stderr[-2000:]
    # a gate killed after uploading a page, before the quality index names it
    assert any(k.startswith("home/quality/") for k in before)
    with s3_bucket.filesystem().open_output_stream(f"{s3_bucket.name}/home/quality/data_docs/lost.html") as page:
        page.write(b"<html></html>")
    after = _objects(s3_bucket)
    v2 = _version_keys(after, "v2")
    leftovers = after - before - v2
    claims = {k for k in leftovers if k.endswith(".claim")}
    iceberg = {k for k in leftovers if k.startswith("home/warehouse/iceberg/") and k.endswith(".avro")}
    assert v2 and len(claims) == 1 and iceberg, sorted(after - before)
    assert leftovers == claims | iceberg | {"home/quality/data_docs/lost.html"} | {
        k for k in leftovers if k.startswith("home/group_snapshots/")}

    # younger than the default grace (1 h): reported as such, and --clean touches nothing
    young = Worker(shared, tmp_path / "verify-1").run("verify", "--clean").stdout
    assert "snapshot claims without a snapshot: 0 (0 bytes); 1 younger than the grace" in young, young
    assert _objects(s3_bucket) == after

    time.sleep(1.5)
    seen = Worker({**shared, GRACE: "1s"}, tmp_path / "verify-2").run("verify").stdout
    assert "snapshot claims without a snapshot: 1 (" in seen, seen
    assert f"Iceberg files no table metadata reaches: {len(iceberg)} (" in seen, seen
    assert "quality files the quality index does not name: 1 (13 bytes)" in seen, seen
    assert _objects(s3_bucket) == after  # reported only
    cleaned = Worker({**shared, GRACE: "1s"}, tmp_path / "verify-3").run("verify", "--clean").stdout
    now = _objects(s3_bucket)
    assert after - now == leftovers, (sorted(after - now), cleaned)
    # what was added: the commits expiring snapshots no branch reaches (each table's first,
    # empty one, which main left at the first publish)
    assert all(k.endswith(".metadata.json") for k in now - after), sorted(now - after)
    assert "removed Iceberg snapshots no branch reaches: 5 " in cleaned, cleaned
    # their manifest lists are now unreferenced: the next sweep takes them
    again = Worker({**shared, GRACE: "1s"}, tmp_path / "verify-4").run("verify", "--clean").stdout
    assert "removed Iceberg files no table metadata reaches: 5 (" in _line(again, "Iceberg files"), again
    assert _version_keys(_objects(s3_bucket), "v2") == v2  # building, not stale: kept

    # the next publish: the killed build's version is stale (1 s here) and goes; v1, superseded
    # by this publish, stays for the reader grace (1 h by default), then a sweep takes it
    store_rounds(Worker(shared, tmp_path / "capture-3").env, 5, 6)
    Worker({**shared, STALE: "1s", KEEP: "1"}, tmp_path / "build-3").run("build", "--version-id", "v3")
    keys = _objects(s3_bucket)
    assert not _version_keys(keys, "v2")
    assert _version_keys(keys, "v1") == _version_keys(before, "v1")
    Worker({**shared, KEEP: "1"}, tmp_path / "verify-5").run("verify", "--clean")
    assert _version_keys(_objects(s3_bucket), "v1") == _version_keys(before, "v1")
    time.sleep(1.5)
    swept = Worker({**shared, GRACE: "1s", KEEP: "1"}, tmp_path / "verify-6").run("verify", "--clean")
    assert "retention removed 1 version(s): v1" in swept.stdout, swept.stdout
    # v1's manifest is gone; what stays of it is exactly what v3 (built on it) keeps by reference
    with s3_bucket.filesystem().open_input_stream(
            f"{s3_bucket.name}/home/warehouse/versions/v3/manifest.json") as manifest:
        kept = json.loads(manifest.read())["file_references"].values()
    assert _version_keys(_objects(s3_bucket), "v1") == {
        f"home/warehouse/versions/{stored}" for stored in kept if stored.startswith("v1/")}
    assert "home/warehouse/versions/v1/manifest.json" not in _objects(s3_bucket)
    reader = Worker(shared, tmp_path / "query")
    listed = json.loads(reader.run("versions", "--format", "json").stdout)
    assert [(m["version"], m["current"]) for m in listed] == [("v3", True)]
    rows = json.loads(reader.run("query", "--format", "json",
                                 "SELECT count(*) AS n FROM topic_incarnations").stdout)
    assert rows[0]["n"] > 40
