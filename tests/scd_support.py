"""Small explicit inputs and expected rows for the SCD tests (tests/test_scd_*.py)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from topic_lineage import tables as t
from topic_lineage.snapshot import Snapshot, TopicObservation
from topic_lineage.topic_id import canonical, rfc4122

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
ALIAS = "prod-eu"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def at(hours: float) -> datetime:
    """T0 + hours."""
    return T0 + timedelta(hours=hours)


def tid(n: int) -> str:
    """A distinct, valid canonical topic ID for small integers."""
    return canonical(bytes([0x10 + n % 200]) + bytes(14) + bytes([n % 256 or 1]))


def topic(name, topic_id=None, partitions=3, rf=3, internal=False, error=None) -> TopicObservation:
    if error is not None:
        return TopicObservation(name, topic_id, None, None, None, error)
    return TopicObservation(name, topic_id, partitions, rf, internal, None)


def snap(hours, *topics, complete=True, cluster=CLUSTER, alias=ALIAS, authoritative=False) -> Snapshot:
    return Snapshot(cluster, alias, at(hours), complete, tuple(topics), authoritative=authoritative)


def store_frame(spark, snapshots, source="import:jsonl"):
    """Store-shaped rows (tables.SNAPSHOT_STORE_DDL) of snapshots, as topic_lineage.store writes them."""
    import pyarrow as pa

    from topic_lineage.store import _to_arrow

    if not snapshots:
        return spark.createDataFrame([], t.SNAPSHOT_STORE_DDL)
    table = pa.concat_tables([_to_arrow(s, source) for s in snapshots])
    return spark.createDataFrame(table.to_pandas(), schema=t.SNAPSHOT_STORE_DDL)


def derive(spark, snapshots, policy=None):
    """The three tables derived from scratch (full refresh) from snapshots."""
    from topic_lineage.scd import incarnations as inc

    rows = store_frame(spark, snapshots)
    derived = inc.derive(rows, inc.snapshot_runs_input(rows), None, policy or inc.HoldPolicy())
    return derived


def key_for_id(topic_id: str, cluster: str = CLUSTER) -> str:
    return hashlib.sha256(f"{cluster}\x1fid\x1f{topic_id}".encode()).hexdigest()[:32]


def key_for_name(name: str, first_seen: datetime, cluster: str = CLUSTER) -> str:
    stamp = first_seen.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return hashlib.sha256(f"{cluster}\x1fname\x1f{name}\x1f{stamp}".encode()).hexdigest()[:32]


def version(
    key, name, topic_id, n, change, valid_from, valid_to, *, first_seen, last_seen,
    deleted=None, partitions=3, rf=3, internal=False, cluster=CLUSTER, alias=ALIAS,
) -> dict:
    """One expected topic_incarnations row."""
    return {
        "incarnation_key": key, "cluster_id": cluster, "cluster_alias": alias,
        "topic_id": topic_id, "topic_uuid": rfc4122(topic_id) if topic_id else None,
        "topic_name": name, "version": n, "change_type": change,
        "partition_count": partitions, "replication_factor": rf, "is_internal": internal,
        "valid_from": valid_from, "valid_to": valid_to, "is_current": valid_to is None,
        "first_seen_at": first_seen, "last_seen_at": last_seen, "deleted_at": deleted,
    }


def expected_frame(spark, rows, ddl=t.TOPIC_INCARNATIONS_DDL):
    import pandas as pd

    columns = t.ddl_columns(ddl)
    return spark.createDataFrame(pd.DataFrame(rows, columns=columns) if rows else [], schema=ddl) \
        if rows else spark.createDataFrame([], ddl)


# --- comparing the Spark build with the plain-Python reference (topic_lineage.scd.reference) ------
_COMPARED = [c for c in t.ddl_columns(t.TOPIC_INCARNATIONS_DDL) if c not in ("incarnation_key", "topic_uuid")]
_RUN_COLUMNS = ["cluster_id", "cluster_alias", "captured_at", "complete", "topic_count",
                "error_topic_count", "held"]


def _utc(value):
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # Spark collects naive UTC (conftest: session time zone UTC)
    return value


def incarnation_groups(rows) -> list:
    """Incarnation rows as a sorted list of incarnations, each the tuple of its versions: the
    ``incarnation_key`` compared as a grouping, not by value."""
    groups: dict = {}
    for row in rows:
        row = row if isinstance(row, dict) else row.asDict()
        groups.setdefault(row["incarnation_key"], []).append(
            tuple(_utc(row[c]) for c in _COMPARED)
        )
    return sorted((tuple(sorted(versions, key=repr)) for versions in groups.values()), key=repr)


def run_rows(rows) -> list:
    out = []
    for row in rows:
        row = row if isinstance(row, dict) else row.asDict()
        out.append(tuple(_utc(row[c]) for c in _RUN_COLUMNS))
    return sorted(out, key=repr)


def reference_tables(snapshots, policy=None):
    """(runs, incarnation groups) of topic_lineage.scd.reference for snapshots."""
    from topic_lineage.scd import reference

    kwargs = {} if policy is None else {"ratio": policy.ratio, "min_count": policy.min_count}
    runs, incarnations = reference.derive(snapshots, **kwargs)
    return run_rows(runs), incarnation_groups(incarnations)
