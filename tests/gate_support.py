"""Versions for publishing tests, and a stand-in for the quality gate's verdict.

``pass_gate`` records the verdict the gate records when it passes a version
(:func:`topic_lineage.warehouse.record_verdict`). Use it only where the subject is not the gate
(retention, atomic switches, incremental builds); tests of the gate run the real one.
"""

from __future__ import annotations

from datetime import UTC, datetime

from published_tables import publish as write_tables

from topic_lineage import tables as t
from topic_lineage import warehouse as wh


def pass_gate(version: str, warnings: list[str] = ()) -> dict:
    return wh.record_verdict(version, passed=True, warnings=list(warnings), failures=[])


def publish_passed(version: str, **kwargs) -> wh.PublishOutcome:
    """Record a passing verdict, then publish through the one publish function."""
    pass_gate(version)
    return wh.publish(version, **kwargs)


def write_version(version: str, incarnations: list[dict], runs: list[dict] = (),
                  snapshots: list[dict] = (), *, status: str = wh.BUILT,
                  snapshot_files: dict | None = None, created_at: str | None = None,
                  group_offsets: list[dict] = (), group_incarnations: list[dict] = ()) -> None:
    """A whole version written with pyarrow (no Spark) plus a manifest, as a build leaves it."""
    directory = write_tables(version, incarnations, runs, snapshots, point=False,
                             group_offsets=group_offsets, group_incarnations=group_incarnations)
    for crc in directory.rglob(".*.crc"):  # Spark's local file system would verify these
        crc.unlink()
    now = created_at or datetime.now(UTC).isoformat().replace("+00:00", "Z")
    rows = {t.TOPIC_INCARNATIONS: incarnations, t.SNAPSHOT_RUNS: runs, t.TOPIC_SNAPSHOTS: snapshots,
            t.GROUP_OFFSETS: group_offsets, t.GROUP_INCARNATIONS: group_incarnations}
    wh.write_manifest(version, {
        "version": version, "status": status, "created_at": now, "history": [],
        "snapshot_files": snapshot_files if snapshot_files is not None else {},
        "row_counts": {table: len(written) for table, written in rows.items()},
    })


def build_and_publish(spark, **kwargs):
    """A real Spark build, published with the stand-in verdict (where the subject is not the
    gate: it costs a JVM-side validation per build otherwise)."""
    from topic_lineage.pipeline import run_build

    built = run_build(spark, validate=False, publish=False, **kwargs)
    publish_passed(built.version)
    return built
