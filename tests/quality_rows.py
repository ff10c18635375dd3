"""Builders of small contract-shaped tables for the quality-gate tests.

Each builder returns rows as dicts with every contract column (defaults describe a healthy,
live, single-version incarnation); :func:`frame` turns them into a Spark DataFrame with the
contract schema from ``topic_lineage.tables``, :func:`pandas_frame` into the pandas DataFrame
the gate validates a small version as (the Arrow table Spark would write, converted by the gate's
own ``arrow_to_pandas``), and :func:`frame_on` into either, by engine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from topic_lineage import tables as t
from topic_lineage.topic_id import rfc4122

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
ALIAS = "prod-eu"
ID_A = "b8tRS7h4TJ2Vt43Dp85v2A"
ID_B = "D5xNQ2CuVo-53xG1_JrJag"
ID_C = "JS750iFNXXqKvQ9tkuvG0Q"


def at(hours_before_now: float) -> datetime:
    return NOW - timedelta(hours=hours_before_now)


def incarnation(**overrides) -> dict:
    """One version row of ``topic_incarnations``; defaults: live, current, version 1."""
    topic_id = overrides.get(t.TOPIC_ID, ID_A)
    row = {
        "incarnation_key": f"{CLUSTER}/{topic_id}",
        t.CLUSTER_ID: CLUSTER,
        t.CLUSTER_ALIAS: ALIAS,
        t.TOPIC_ID: topic_id,
        t.TOPIC_UUID: None,
        t.TOPIC_NAME: "orders",
        "version": 1,
        "change_type": "created",
        t.PARTITION_COUNT: 3,
        t.REPLICATION_FACTOR: 3,
        t.IS_INTERNAL: False,
        "valid_from": at(48),
        "valid_to": None,
        "is_current": True,
        "first_seen_at": at(48),
        "last_seen_at": at(1),
        "deleted_at": None,
    }
    row.update(overrides)
    if row[t.TOPIC_UUID] is None and _is_real_id(row[t.TOPIC_ID]):
        row[t.TOPIC_UUID] = rfc4122(row[t.TOPIC_ID])
    return row


def _is_real_id(value) -> bool:
    try:
        rfc4122(value)
    except Exception:  # noqa: BLE001 - malformed IDs are what some tests feed in
        return False
    return value is not None


def snapshot_run(**overrides) -> dict:
    row = {
        t.CLUSTER_ID: CLUSTER,
        t.CLUSTER_ALIAS: ALIAS,
        t.CAPTURED_AT: at(1),
        t.COMPLETE: True,
        t.TOPIC_COUNT: 10,
        t.ERROR_TOPIC_COUNT: 0,
        t.SOURCE: "live",
        t.HELD: False,
    }
    row.update(overrides)
    return row


def topic_snapshot(**overrides) -> dict:
    row = {
        t.CLUSTER_ID: CLUSTER,
        t.CLUSTER_ALIAS: ALIAS,
        t.CAPTURED_AT: at(1),
        t.COMPLETE: True,
        t.TOPIC_NAME: "orders",
        t.TOPIC_ID: ID_A,
        t.TOPIC_UUID: None,
        t.PARTITION_COUNT: 3,
        t.REPLICATION_FACTOR: 3,
        t.IS_INTERNAL: False,
        t.ERROR: None,
    }
    row.update(overrides)
    return row


def frame(spark, table: str, rows: list[dict]):
    """A DataFrame with the contract schema of ``table`` holding ``rows``, of the columns the
    gate reads (``suites.columns_read``, as ``quality.gate.read_version`` selects them)."""
    from topic_lineage.quality.suites import columns_read

    columns = t.ddl_columns(t.TABLE_DDL[table])
    # Nullability comes from the DDL; the builders never leave a NOT NULL column empty.
    data = spark.createDataFrame([tuple(row[c] for c in columns) for row in rows], t.TABLE_DDL[table])
    return data.select(*columns_read(table))


def pandas_frame(table: str, rows: list[dict]):
    """The pandas DataFrame the gate validates for a small version holding ``rows``: the Arrow
    table of the contract schema (as Spark writes it), read the way the gate reads files."""
    import pyarrow as pa

    from topic_lineage.quality.gate import arrow_to_pandas

    schema = t.arrow_schema_of(t.TABLE_DDL[table])
    data = pa.Table.from_pylist([{c: row[c] for c in schema.names} for row in rows], schema=schema)
    return arrow_to_pandas(table, data)


SPARK, PANDAS = "spark", "pandas"
ENGINES = (SPARK, PANDAS)


def frame_on(engine: str, spark, table: str, rows: list[dict]):
    """``rows`` as a DataFrame of ``engine``: Spark's (:func:`frame`) or pandas' (:func:`pandas_frame`)."""
    return frame(spark, table, rows) if engine == SPARK else pandas_frame(table, rows)


def group_offset(**overrides) -> dict:
    """A ``group_offsets`` row: group billing's committed offset on orders-0, attributed (R8)."""
    row = {
        t.CLUSTER_ID: CLUSTER, t.CAPTURED_AT: at(2), t.GROUP_ID: "billing",
        t.TOPIC_NAME: "orders", t.TOPIC_ID: ID_A, "incarnation_key": "k-orders-1",
        t.PARTITION: 0, t.COMMITTED_OFFSET: 10, t.LOG_END_OFFSET: 12,
    }
    row.update(overrides)
    return row


def group_incarnation(**overrides) -> dict:
    """A ``group_incarnations`` row: group billing read orders' incarnation, not carried."""
    row = {
        t.CLUSTER_ID: CLUSTER, t.GROUP_ID: "billing", "incarnation_key": "k-orders-1",
        t.TOPIC_ID: ID_A, t.TOPIC_NAME: "orders", "first_seen_at": at(5), "last_seen_at": at(2),
        "max_committed_offset": 10, "carried_offset": False,
    }
    row.update(overrides)
    return row
