"""Write published-table fixtures (Parquet in the contract schema) for UI tests and benchmarks.

The layout is the one builds write: ``versions/<version>/<table>/*.parquet``, with the writer
litter (``_SUCCESS``, ``.crc``) readers must ignore; publishing stages the files in the Iceberg
tables and moves their ``main``, as a build's publish does.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from topic_lineage import tables
from topic_lineage.topic_id import rfc4122

_ARROW_TYPES = {
    "STRING": pa.string(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
}


def arrow_schema(ddl: str) -> pa.Schema:
    fields = []
    for part in ddl.split(","):
        words = part.split()
        fields.append(pa.field(words[0], _ARROW_TYPES[words[1].upper()], nullable="NOT" not in words))
    return pa.schema(fields)


def at(day: int, hour: int = 0) -> datetime:
    """2026-11-<day> <hour>:00 UTC."""
    return datetime(2026, 11, 1, tzinfo=UTC) + timedelta(days=day - 1, hours=hour)


def incarnation(
    key: str,
    cluster_id: str,
    versions: list[dict],
    *,
    cluster_alias: str | None = None,
    deleted_at: datetime | None = None,
    last_seen_at: datetime | None = None,
) -> list[dict]:
    """The version rows of one incarnation.

    ``versions``: dicts with ``name``, ``at`` (valid_from), optional ``topic_id``,
    ``change_type`` (default: created for the first, attributes_changed after),
    ``partitions`` (default 3), ``rf`` (default 3), ``internal`` (default False), and to
    override the derived values, ``valid_to`` and ``is_current``.
    """
    rows = []
    first_seen = versions[0]["at"]
    last_seen = last_seen_at or deleted_at or versions[-1]["at"]
    for index, v in enumerate(versions):
        next_from = versions[index + 1]["at"] if index + 1 < len(versions) else deleted_at
        next_from = v.get("valid_to", next_from)
        topic_id = v.get("topic_id")
        rows.append(
            {
                "incarnation_key": key,
                "cluster_id": cluster_id,
                "cluster_alias": cluster_alias or cluster_id,
                "topic_id": topic_id,
                "topic_uuid": rfc4122(topic_id) if topic_id else None,
                "topic_name": v["name"],
                "version": index + 1,
                "change_type": v.get("change_type") or ("created" if index == 0 else "attributes_changed"),
                "partition_count": v.get("partitions", 3),
                "replication_factor": v.get("rf", 3),
                "is_internal": v.get("internal", False),
                "valid_from": v["at"],
                "valid_to": next_from,
                "is_current": v.get("is_current", next_from is None and deleted_at is None),
                "first_seen_at": first_seen,
                "last_seen_at": last_seen,
                "deleted_at": deleted_at,
            }
        )
    return rows


def snapshot_run(cluster_id: str, captured_at: datetime, *, alias: str | None = None,
                 topic_count: int = 0, complete: bool = True) -> dict:
    return {
        "cluster_id": cluster_id,
        "cluster_alias": alias or cluster_id,
        "captured_at": captured_at,
        "complete": complete,
        "topic_count": topic_count,
        "error_topic_count": 0,
        "source": "live",
        "held": False,
    }


def write_table(version_dir: Path, table: str, rows: list[dict], *, files: int = 1) -> None:
    """One table of one version as ``files`` Parquet part files plus writer litter."""
    schema = arrow_schema(tables.TABLE_DDL[table])
    directory = version_dir / table
    directory.mkdir(parents=True, exist_ok=True)
    chunk = max(1, -(-len(rows) // files)) if rows else 1
    for part in range(files):
        part_rows = rows[part * chunk:(part + 1) * chunk]
        if part and not part_rows:
            break
        table_data = pa.Table.from_pylist(part_rows, schema=schema)
        pq.write_table(table_data, directory / f"part-{part:05d}.parquet")
    (directory / "_SUCCESS").write_bytes(b"")
    (directory / ".part-00000.parquet.crc").write_bytes(b"not parquet")


def publish(version: str, incarnations: list[dict], runs: list[dict] = (),
            snapshots: list[dict] = (), *, point: bool = True, files: int = 1,
            group_offsets: list[dict] = (), group_incarnations: list[dict] = ()) -> Path:
    """Write a whole version (every table; the group tables empty unless given) under
    ``$TOPIC_LINEAGE_HOME`` and (optionally) publish it."""
    version_dir = tables.versions_dir() / version
    write_table(version_dir, tables.TOPIC_INCARNATIONS, list(incarnations), files=files)
    write_table(version_dir, tables.SNAPSHOT_RUNS, list(runs))
    write_table(version_dir, tables.TOPIC_SNAPSHOTS, list(snapshots))
    write_table(version_dir, tables.GROUP_OFFSETS, list(group_offsets))
    write_table(version_dir, tables.GROUP_INCARNATIONS, list(group_incarnations))
    if point:
        point_at(version)
    return version_dir


def point_at(version: str) -> None:
    """Publish a version written here: stage its files in the Iceberg tables and move their
    ``main`` (as a build's publish does, without the gate)."""
    from topic_lineage.warehouse import iceberg

    version_dir = tables.versions_dir() / version
    staged = iceberg.stage(version, {table: version_dir / table for table in tables.TABLES})
    iceberg.publish_main(version, staged[iceberg.SNAPSHOTS_KEY])


def point_at_legacy(version: str) -> None:
    """Name a version in the ``CURRENT`` file, as homes did before the Iceberg tables (read as
    published until the next build or publish moves it over)."""
    tables.warehouse_dir().mkdir(parents=True, exist_ok=True)
    tables.current_pointer().write_text(version + "\n", encoding="utf-8")
