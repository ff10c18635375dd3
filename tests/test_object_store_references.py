"""Kept files by reference with the home on object storage (issue #45, "hard links to file
references"), on a real S3 server (SeaweedFS on loopback) with the catalog on PostgreSQL, each
step a process on a worker of its own (an empty working copy).

On a local disk a new version shares the files it keeps of its base by hard links. On object
storage it references them instead (``file_references`` in its manifest): an incremental build
uploads only what it derived, the Iceberg snapshot of the version names the base's objects, the
gate knows those files are the base's without the base in its working copy, and retention keeps
the objects a kept version references after their own version goes, until none does (then the
sweep takes them). Every table of a version that reads through references to two earlier ones
equals a full build of the same snapshots on the local disk.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.object_store_support import (
    ROOT,
    Worker,
    full_build_tables,
    local_env,
    query_all,
    shared_env,
)

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]

VERSIONS = "home/warehouse/versions"

# Rounds of the seeded two-cluster history, each snapshot with a consumer group that commits on
# three of its live topics (so the group tables have rows to keep and to derive again).
STORE = """
import dataclasses, sys
from tests.benchmarks.datagen import History
from topic_lineage import store
from topic_lineage.snapshot import GroupObservation, GroupOffset
first, last, only = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for snaps in History(topics=40, clusters=2, seed=11).rounds(first, last):
    chosen = [s for i, s in enumerate(snaps) if only == "all" or i == int(only)]
    stored = []
    for snap in chosen:
        live = [x for x in snap.topics if x.topic_id and x.partition_count and not x.error][:3]
        offsets = tuple(GroupOffset(x.name, 0, 5 + first, 9 + first) for x in live)
        stored.append(dataclasses.replace(snap, groups_complete=True,
                                          groups=(GroupObservation("billing", "Stable", None, offsets),)))
    store.save_all(stored, "live")
"""


def _store(env: dict, first: int, last: int, only: str = "all") -> None:
    subprocess.run([sys.executable, "-c", STORE, str(first), str(last), only], env=env, check=True,
                   capture_output=True, text=True, cwd=str(ROOT), timeout=300)


@pytest.fixture
def shared(s3_bucket, iceberg_postgres, tmp_path):
    return shared_env(s3_bucket.env(), s3_bucket.url("home"), iceberg_postgres(tmp_path.name))


def _keys(bucket, version: str) -> set[str]:
    """A version's own objects, by their names in the version (``<table>/<file>``)."""
    prefix = f"{VERSIONS}/{version}/"
    return {k.removeprefix(prefix) for k in bucket.keys(prefix) if not k.endswith("/")}


def _manifest(bucket, version: str) -> dict:
    with bucket.filesystem().open_input_stream(f"{bucket.name}/{VERSIONS}/{version}/manifest.json") as f:
        return json.loads(f.read())


def test_kept_files_are_referenced_not_uploaded_and_outlive_their_version_while_referenced(
        shared, s3_bucket, tmp_path):
    _store(Worker(shared, tmp_path / "capture-1").env, 0, 4)
    Worker(shared, tmp_path / "build-1").run("build", "--version-id", "v1")
    v1 = _keys(s3_bucket, "v1")

    # only the first cluster has new snapshots: the second one's parts, its saved walk and
    # every topic_snapshots file of v1 are kept
    _store(Worker(shared, tmp_path / "capture-2").env, 4, 6, "0")
    built = Worker(shared, tmp_path / "build-2").run("build", "--version-id", "v2")
    assert "incremental" in built.stdout + built.stderr, built.stdout + built.stderr
    manifest = _manifest(s3_bucket, "v2")
    kept = manifest["file_references"]
    assert {name for name in v1 if name.startswith("topic_snapshots/")} \
        <= {name for name in kept if name.startswith("topic_snapshots/")}
    kept_tables = {name.split("/")[0] for name in kept}
    assert {"topic_snapshots", "snapshot_runs", "topic_incarnations", "_walk_state"} <= kept_tables, kept
    assert all(stored.startswith("v1/") and stored.removeprefix("v1/") in v1 for stored in kept.values()), kept
    # nothing kept was uploaded again: the version's own objects are what it derived
    own = _keys(s3_bucket, "v2")
    assert not own & set(kept), own & set(kept)
    assert any(name.startswith("topic_incarnations/") for name in own), own
    # its Iceberg snapshot names the base's objects for the kept files
    files = [f for table_files in manifest["iceberg_files"].values() for f in table_files]
    data = {name for name in kept if not name.startswith("_walk_state/")}
    assert {f.split("/versions/", 1)[1] for f in files} >= {kept[name] for name in data}, files
    # the gate, in a working copy without v1, took the kept snapshot files as v1's
    assert "are those of version v1" in built.stdout + built.stderr, built.stdout + built.stderr
    assert json.loads(Worker(shared, tmp_path / "query-2").run(
        "query", "--format", "json", "SELECT count(*) AS n FROM topic_incarnations").stdout)[0]["n"] > 40

    # v1 and v2 go (keep 1, no grace); what v3 references of them stays, and reads
    _store(Worker(shared, tmp_path / "capture-3").env, 6, 7, "0")
    retaining = {**shared, "TOPIC_LINEAGE_KEEP_VERSIONS": "1", "TOPIC_LINEAGE_READER_GRACE": "0"}
    Worker(retaining, tmp_path / "build-3").run("build", "--version-id", "v3")
    v3 = _manifest(s3_bucket, "v3")["file_references"]
    assert {stored.split("/")[0] for stored in v3.values()} == {"v1", "v2"}, v3
    left = {f"v1/{n}" for n in _keys(s3_bucket, "v1")} | {f"v2/{n}" for n in _keys(s3_bucket, "v2")}
    assert left == set(v3.values()), left ^ set(v3.values())  # exactly what v3 references: no manifest
    # v3 reads through references to v1 and to v2 (the tables are compared once, here: a
    # version's rows come from its files, wherever they are stored)
    local = local_env(tmp_path)
    for step in ((0, 4, "all"), (4, 6, "0"), (6, 7, "0")):
        _store(local, *step)
    assert query_all(Worker(shared, tmp_path / "query-3")) == full_build_tables(local, tmp_path)
    verified = Worker(shared, tmp_path / "verify-3").run("verify")
    assert "version files without a manifest: 0" in verified.stdout, verified.stdout

    # once no version references them, the sweep after the next publish takes them (a full
    # refresh references nothing; it has a snapshot more, else it would not replace v3)
    _store(Worker(shared, tmp_path / "capture-4").env, 7, 8)
    Worker(retaining, tmp_path / "build-4").run("build", "--full-refresh", "--version-id", "v4")
    assert not _keys(s3_bucket, "v1") | _keys(s3_bucket, "v2") | _keys(s3_bucket, "v3")
    print(f"v2 kept {len(kept)} file(s) by reference and uploaded {len(own)} object(s); "
          f"v3 referenced {len(v3)}")
