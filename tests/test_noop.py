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


def build_and_publish_automatically(spark) -> wh.PublishOutcome:
    """A build, then the publish a build makes (automatic: it may keep the published version)."""
    from gate_support import pass_gate

    from topic_lineage.pipeline import run_build

    built = run_build(spark, validate=False, publish=False)
    pass_gate(built.version)
    return wh.publish(built.version, automatic=True)


def test_an_identical_rebuild_after_new_modification_times_records_the_store(tl_home, spark):
    """Issue #24: after the store's files get new modification times (a copy without -p, a
    restore), one build runs, finds the tables identical and keeps the published version; it
    records the store's new fingerprint there, so the next build is a no-op (no JVM)."""
    store.save_all([snap(0, topic("orders", tid(1))), snap(1, topic("orders", tid(2)))],
                   "import:jsonl")
    first = build_and_publish(spark)
    for path in store.snapshot_files():
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert not noop.decide(0.5, 5).noop

    again = build_and_publish_automatically(spark)
    assert not again.published and "identical" in again.reason
    assert wh.current_version() == first.version
    assert noop.decide(0.5, 5).noop
    result = cli_build_without_java(tl_home)
    assert result.returncode == 0 and "nothing new to build" in result.stdout, result.stderr[-2000:]


def test_the_first_build_after_an_upgrade_publishes_over_the_same_snapshots(tl_home, spark):
    """A version built by older code (its manifest records no build code) is replaced by a build
    over the same snapshots with the current code, whose tables may differ (new tables)."""
    store.save(snap(0, topic("orders", tid(1))), "live")
    old = build_and_publish(spark)
    manifest = wh.read_manifest(old.version)
    del manifest["build_code"], manifest[noop.FINGERPRINT_KEY]
    wh.write_manifest(old.version, manifest)

    new = build_and_publish_automatically(spark)
    assert new.published and "other build code" in new.reason
    assert wh.current_version() == new.version
