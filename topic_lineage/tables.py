"""The one place that knows where topic-lineage keeps its data and what its tables look like.

Everything else asks this module for paths and schemas. Schemas are Spark DDL strings (so no
Spark import is needed to know them) plus, for the snapshot store written from plain Python,
an Arrow schema built on demand.

Layout under ``TOPIC_LINEAGE_HOME`` (default ``~/.topic-lineage``)::

    snapshots/cluster=<cluster_id, %-escaped>/date=<YYYY-MM-DD>/<captured_at>.parquet
    quarantine/                      stored snapshot files moved aside by `topic-lineage quarantine`
    warehouse/versions/<version>/<table>/   one immutable directory per build (Parquet): the
                                     data files of the version's Iceberg snapshots
    warehouse/catalog.db, iceberg/   the embedded Iceberg catalog (when no other is configured)
    warehouse/CURRENT                only in a home from before the Iceberg tables, until moved over
    quality/                         Great Expectations results and Data Docs
    locks/                           build / publish / ingest locks
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, unquote

DATABASE = "topic_lineage"
"""Spark SQL database under which the published tables are registered."""

from topic_lineage.location import DEFAULT_HOME, HOME_ENV  # noqa: F401 (named here as always)

SNAPSHOT_RUNS = "snapshot_runs"
TOPIC_SNAPSHOTS = "topic_snapshots"
TOPIC_INCARNATIONS = "topic_incarnations"
GROUP_OFFSETS = "group_offsets"
GROUP_INCARNATIONS = "group_incarnations"
TOPIC_TABLES = (SNAPSHOT_RUNS, TOPIC_SNAPSHOTS, TOPIC_INCARNATIONS)
GROUP_TABLES = (GROUP_OFFSETS, GROUP_INCARNATIONS)
"""Consumer lineage (contract R8-R10): built, validated and published with the topic tables."""
TABLES = TOPIC_TABLES + GROUP_TABLES
"""Every table of a built version, in the order they are built and validated."""

# --- column names shared by producers and consumers ---------------------------------------
CLUSTER_ID = "cluster_id"
CLUSTER_ALIAS = "cluster_alias"
CAPTURED_AT = "captured_at"
COMPLETE = "complete"
SOURCE = "source"
AUTHORITATIVE = "authoritative"
CONTENT_HASH = "content_hash"
TOPIC_COUNT = "topic_count"
ERROR_TOPIC_COUNT = "error_topic_count"
TOPIC_NAME = "topic_name"
TOPIC_ID = "topic_id"
TOPIC_UUID = "topic_uuid"
PARTITION_COUNT = "partition_count"
REPLICATION_FACTOR = "replication_factor"
IS_INTERNAL = "is_internal"
ERROR = "error"
HELD = "held"
# topic_incarnations (TOPIC_INCARNATIONS_DDL); INCARNATION_KEY is also in the group tables
INCARNATION_KEY = "incarnation_key"
VERSION = "version"
CHANGE_TYPE = "change_type"
IS_CURRENT = "is_current"
VALID_FROM = "valid_from"
VALID_TO = "valid_to"
DELETED_AT = "deleted_at"
FIRST_SEEN_AT = "first_seen_at"
LAST_SEEN_AT = "last_seen_at"

# --- the snapshot store (written by topic_lineage.store, read by Spark and DuckDB) ---------
# One Parquet file per snapshot, one row per topic. A snapshot with no topics is stored as a
# single marker row whose topic columns are NULL, so that the snapshot itself is never lost.
# `authoritative` marks snapshots replayed from the KRaft metadata log: exact, and exempt from
# the mass-deletion hold (R3).
SNAPSHOT_STORE_DDL = (
    "cluster_id STRING NOT NULL, cluster_alias STRING NOT NULL, captured_at TIMESTAMP NOT NULL, "
    "complete BOOLEAN NOT NULL, source STRING NOT NULL, authoritative BOOLEAN NOT NULL, "
    "content_hash STRING NOT NULL, topic_count INT NOT NULL, error_topic_count INT NOT NULL, "
    "topic_name STRING, topic_id STRING, partition_count INT, replication_factor INT, "
    "is_internal BOOLEAN, error STRING"
)

# --- published tables (contract: docs/contract.md, "Tables") -------------------------------
SNAPSHOT_RUNS_DDL = (
    "cluster_id STRING NOT NULL, cluster_alias STRING NOT NULL, captured_at TIMESTAMP NOT NULL, "
    "complete BOOLEAN NOT NULL, topic_count INT NOT NULL, error_topic_count INT NOT NULL, "
    "source STRING NOT NULL, held BOOLEAN NOT NULL"
)

TOPIC_SNAPSHOTS_DDL = (
    "cluster_id STRING NOT NULL, cluster_alias STRING NOT NULL, captured_at TIMESTAMP NOT NULL, "
    "complete BOOLEAN NOT NULL, topic_name STRING NOT NULL, topic_id STRING, topic_uuid STRING, "
    "partition_count INT, replication_factor INT, is_internal BOOLEAN, error STRING"
)

TOPIC_INCARNATIONS_DDL = (
    "incarnation_key STRING NOT NULL, cluster_id STRING NOT NULL, cluster_alias STRING NOT NULL, "
    "topic_id STRING, topic_uuid STRING, topic_name STRING NOT NULL, version INT NOT NULL, "
    "change_type STRING NOT NULL, partition_count INT, replication_factor INT, "
    "is_internal BOOLEAN, valid_from TIMESTAMP NOT NULL, valid_to TIMESTAMP, "
    "is_current BOOLEAN NOT NULL, first_seen_at TIMESTAMP NOT NULL, "
    "last_seen_at TIMESTAMP NOT NULL, deleted_at TIMESTAMP"
)

# Consumer lineage (contract R8-R10). group_offsets: one row per group x partition per snapshot;
# incarnation_key (beyond the contract's columns) is NULL exactly when the offset could be
# attributed to no incarnation, and then topic_id is NULL too.

GROUP_STORE_DDL = (
    "cluster_id STRING NOT NULL, captured_at TIMESTAMP NOT NULL, groups_complete BOOLEAN NOT NULL, "
    "group_id STRING, group_state STRING, group_error STRING, topic_name STRING, partition INT, "
    "committed_offset BIGINT, log_end_offset BIGINT"
)

GROUP_OFFSETS_DDL = (
    "cluster_id STRING NOT NULL, captured_at TIMESTAMP NOT NULL, group_id STRING NOT NULL, "
    "topic_name STRING NOT NULL, topic_id STRING, incarnation_key STRING, partition INT NOT NULL, "
    "committed_offset BIGINT NOT NULL, log_end_offset BIGINT"
)

GROUP_INCARNATIONS_DDL = (
    "cluster_id STRING NOT NULL, group_id STRING NOT NULL, incarnation_key STRING NOT NULL, "
    "topic_id STRING, topic_name STRING NOT NULL, first_seen_at TIMESTAMP NOT NULL, "
    "last_seen_at TIMESTAMP NOT NULL, max_committed_offset BIGINT NOT NULL, "
    "carried_offset BOOLEAN NOT NULL"
)

TABLE_DDL = {
    SNAPSHOT_RUNS: SNAPSHOT_RUNS_DDL,
    TOPIC_SNAPSHOTS: TOPIC_SNAPSHOTS_DDL,
    TOPIC_INCARNATIONS: TOPIC_INCARNATIONS_DDL,
    GROUP_OFFSETS: GROUP_OFFSETS_DDL,
    GROUP_INCARNATIONS: GROUP_INCARNATIONS_DDL,
}

CHANGE_TYPES = ("created", "attributes_changed", "renamed", "id_assigned", "reappeared")


def ddl_columns(ddl: str) -> list[str]:
    """Column names of a DDL string, in order."""
    return [part.strip().split()[0] for part in ddl.split(",")]


def arrow_schema_of(ddl: str):
    """The Arrow schema Spark writes for a DDL string of this module (imports pyarrow lazily):
    for files written without Spark, e.g. a table known to be empty."""
    import pyarrow as pa

    kinds = {
        "STRING": pa.string(), "TIMESTAMP": pa.timestamp("us", tz="UTC"), "INT": pa.int32(),
        "BIGINT": pa.int64(), "BOOLEAN": pa.bool_(), "DOUBLE": pa.float64(),
    }
    fields = []
    for part in ddl.split(","):
        name, kind, *rest = part.split()
        fields.append(pa.field(name, kinds[kind], nullable=rest != ["NOT", "NULL"]))
    return pa.schema(fields)


def arrow_table(columns: dict, ddl: str, names=None):
    """An Arrow table of the DDL's types from ``column -> Python values`` (instants as
    microseconds since the epoch): the DDL's columns, or ``names`` of them in that order."""
    import pyarrow as pa

    schema = arrow_schema_of(ddl)
    if names is not None:
        schema = pa.schema([schema.field(name) for name in names])
    return pa.Table.from_arrays([arrow_array(columns[f.name], f.type) for f in schema], schema=schema)


def arrow_array(values: list, kind):
    """An Arrow array of ``kind`` (string, boolean, integer, timestamp in microseconds since the
    epoch, or double) from Python values, ``None`` for null, built from buffers:
    ``pyarrow.array`` imports pandas to see whether it was given a pandas object, a second of a
    fresh Spark Python worker's time (topic_lineage.scd.walk_job)."""
    import numpy as np
    import pyarrow as pa

    n = len(values)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    nulls = n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if pa.types.is_string(kind):
        encoded = [b"" if v is None else v.encode() for v in values]
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=n), out=offsets[1:])
        buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    elif pa.types.is_boolean(kind):
        bits = np.fromiter((bool(v) for v in values), dtype=bool, count=n)
        buffers = [bitmap, pa.py_buffer(np.packbits(bits, bitorder="little"))]
    else:
        numpy_kind = np.float64 if pa.types.is_floating(kind) else {
            8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}[kind.bit_width]
        data = np.fromiter((0 if v is None else v for v in values), dtype=numpy_kind, count=n)
        buffers = [bitmap, pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, n, buffers, null_count=nulls)


# --- paths -----------------------------------------------------------------------------------
def home() -> Path:
    """The directory this process reads and writes the home's files in: ``$TOPIC_LINEAGE_HOME``
    (default ``~/.topic-lineage``), or with the home on object storage this process's working
    copy of it (:mod:`topic_lineage.storage`); created on first use."""
    from topic_lineage import storage

    return storage.home().root


def snapshots_dir() -> Path:
    return home() / "snapshots"


def group_snapshots_dir() -> Path:
    """Consumer-group observations (contract R8-R10): one file per snapshot that carried group
    information, beside (not inside) the topic store, so every reader of topic snapshots is
    unaffected. A snapshot exists when its topic file does; its group file is written first."""
    return home() / "group_snapshots"


def quarantine_dir() -> Path:
    return home() / "quarantine"


def warehouse_dir() -> Path:
    return home() / "warehouse"


def versions_dir() -> Path:
    return warehouse_dir() / "versions"


def current_pointer() -> Path:
    return warehouse_dir() / "CURRENT"


def quality_dir() -> Path:
    return home() / "quality"


def locks_dir() -> Path:
    path = home() / "locks"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cluster_partition(cluster_id: str) -> str:
    """Directory name of a cluster's snapshot partition (Hive style, %-escaped)."""
    return "cluster=" + quote(cluster_id, safe="")


def cluster_from_partition(name: str) -> str:
    return unquote(name.split("=", 1)[1])


def snapshot_file_name(captured_at_compact: str) -> str:
    return f"{captured_at_compact}.parquet"


def arrow_store_schema():
    """Arrow schema of a stored snapshot file (imports pyarrow lazily)."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            pa.field(CLUSTER_ID, pa.string(), nullable=False),
            pa.field(CLUSTER_ALIAS, pa.string(), nullable=False),
            pa.field(CAPTURED_AT, ts, nullable=False),
            pa.field(COMPLETE, pa.bool_(), nullable=False),
            pa.field(SOURCE, pa.string(), nullable=False),
            pa.field(AUTHORITATIVE, pa.bool_(), nullable=False),
            pa.field(CONTENT_HASH, pa.string(), nullable=False),
            pa.field(TOPIC_COUNT, pa.int32(), nullable=False),
            pa.field(ERROR_TOPIC_COUNT, pa.int32(), nullable=False),
            pa.field(TOPIC_NAME, pa.string()),
            pa.field(TOPIC_ID, pa.string()),
            pa.field(PARTITION_COUNT, pa.int32()),
            pa.field(REPLICATION_FACTOR, pa.int32()),
            pa.field(IS_INTERNAL, pa.bool_()),
            pa.field(ERROR, pa.string()),
        ]
    )


# --- stored consumer-group observations (one file per snapshot; contract R8-R10) -------------
GROUPS_COMPLETE = "groups_complete"
GROUP_ID = "group_id"
GROUP_STATE = "group_state"
GROUP_ERROR = "group_error"
PARTITION = "partition"
COMMITTED_OFFSET = "committed_offset"
LOG_END_OFFSET = "log_end_offset"
# group_incarnations (GROUP_INCARNATIONS_DDL), besides FIRST_SEEN_AT and LAST_SEEN_AT above
MAX_COMMITTED_OFFSET = "max_committed_offset"
CARRIED_OFFSET = "carried_offset"


def arrow_group_store_schema():
    """Arrow schema of a stored group file: one row per group x partition; a group with no
    offsets has one row with NULL topic, and a snapshot that saw no group one row with NULL
    group (so ``groups_complete`` is always stored)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field(CLUSTER_ID, pa.string(), nullable=False),
            pa.field(CAPTURED_AT, pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field(GROUPS_COMPLETE, pa.bool_(), nullable=False),
            pa.field(GROUP_ID, pa.string()),
            pa.field(GROUP_STATE, pa.string()),
            pa.field(GROUP_ERROR, pa.string()),
            pa.field(TOPIC_NAME, pa.string()),
            pa.field(PARTITION, pa.int32()),
            pa.field(COMMITTED_OFFSET, pa.int64()),
            pa.field(LOG_END_OFFSET, pa.int64()),
        ]
    )
