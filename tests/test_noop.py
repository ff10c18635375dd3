"""No-op builds (topic_lineage/noop.py): a build over the published version's snapshots, hold
thresholds and build code answers without a JVM; any change to the stored set makes it build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gate_support import build_and_publish
from scd_support import snap, tid, topic

from topic_lineage import noop, store
from topic_lineage import warehouse as wh

pytestmark = pytest.mark.spark

SCRIPT = Path(sys.executable).with_name("topic-lineage")


def cli_build_without_java(home: Path) -> subprocess.CompletedProcess:
    """`topic-lineage build` with no usable Java: it can only succeed if no JVM is started."""
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home), "JAVA_HOME": str(home / "no-java"),
           "TOPIC_LINEAGE_MAX_AGE": "off"}
    return subprocess.run([str(SCRIPT), "build"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def versions() -> list[str]:
    return [m["version"] for m in wh.list_versions()]


def test_unchanged_store_is_a_no_op_without_a_jvm_and_any_change_builds(tl_home, spark):

    store.save_all([snap(0, topic("orders", tid(1))), snap(1, topic("orders", tid(1), partitions=6))],
                   "import:jsonl")
    first = build_and_publish(spark)
    manifest = wh.read_manifest(first.version)
    assert manifest[noop.FINGERPRINT_KEY]

    result = cli_build_without_java(tl_home)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "nothing new to build" in result.stdout and first.version in result.stdout
    assert versions() == [first.version] and wh.current_version() == first.version

    # Other hold thresholds, or a different build code, would build other tables.
    assert not noop.decide(0.5, 6).noop and not noop.decide(0.4, 5).noop
    assert noop.decide(0.5, 5).noop

    # A new snapshot: not a no-op (the CLI must start Spark, so without Java it fails) ...
    store.save(snap(2, topic("orders", tid(1), partitions=6), topic("payments", tid(2))))
    assert not noop.decide(0.5, 5).noop
    assert cli_build_without_java(tl_home).returncode != 0
    second = build_and_publish(spark)
    assert noop.decide(0.5, 5).noop

    # ... and a quarantined one too (the set shrank), even though nothing was added.
    original = store.snapshot_files()[0]
    moved = store.quarantine(original)
    assert not noop.decide(0.5, 5).noop
    # Put back as it was (same path, size and time), the store is the built set again.
    os.replace(moved, original)
    assert noop.decide(0.5, 5).noop
    # A different snapshot at the same path (same key re-imported after quarantine) is a change.
    path = store.snapshot_files()[0]
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert not noop.decide(0.5, 5).noop
    assert wh.current_version() == second.version


def test_a_version_without_fingerprint_is_never_a_no_op(tl_home, spark):
    """Versions built before fingerprints existed: the first build after an upgrade is real."""

    store.save(snap(0, topic("orders", tid(1))), "live")
    built = build_and_publish(spark)
    manifest = wh.read_manifest(built.version)
    del manifest[noop.FINGERPRINT_KEY]
    wh.write_manifest(built.version, manifest)
    decision = noop.decide(0.5, 5)
    assert not decision.noop and "no store fingerprint" in decision.reason
