"""The page's questions, asked of the published tables in DuckDB.

Every value that comes from a user (a topic name, an ID, a cluster) is a bound parameter, never
part of the SQL text: a topic called ``x'; DROP TABLE t; --`` is just a name.
Functions take a DuckDB cursor and return plain JSON-ready dicts; timestamps are ISO 8601 UTC
text with a ``Z`` (Kafka and the snapshot format use the same form).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from topic_lineage import tables
from topic_lineage.topic_id import RESERVED_IDS, TopicIdError, canonical, rfc4122

INCARNATIONS = tables.TOPIC_INCARNATIONS
RUNS = tables.SNAPSHOT_RUNS
GROUP_INCARNATIONS = tables.GROUP_INCARNATIONS

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Timestamps leave DuckDB as epoch microseconds, so no Python timezone library is involved.
_TIMESTAMP_COLUMNS = (tables.VALID_FROM, tables.VALID_TO, tables.FIRST_SEEN_AT, tables.LAST_SEEN_AT, tables.DELETED_AT)
_VERSION_SELECT = (
    "incarnation_key, cluster_id, cluster_alias, topic_id, topic_uuid, topic_name, version, "
    "change_type, partition_count, replication_factor, is_internal, is_current, "
    + ", ".join(f"epoch_us({c}) AS {c}" for c in _TIMESTAMP_COLUMNS)
)

MAX_SEARCH_RESULTS = 50

SUMMARY = "incarnation_summary"
DERIVED_TABLES = {
    # One row per incarnation, computed once per loaded version (the overview and the cluster
    # list read it instead of re-aggregating every version row on each request). `ordinal`
    # counts the incarnations created under the same name in the same cluster: a re-creation
    # is an incarnation with ordinal > 1.
    SUMMARY: f"""
        SELECT cluster_id, incarnation_key,
               arg_max(cluster_alias, version) AS cluster_alias,
               arg_min(topic_name, version) AS created_name,
               min(first_seen_at) AS first_seen_at,
               max(last_seen_at) AS last_seen_at,
               max(deleted_at) AS deleted_at,
               bool_or(is_current) AS is_live,
               bool_or(change_type = 'reappeared') AS has_reappeared,
               row_number() OVER (
                   PARTITION BY cluster_id, arg_min(topic_name, version)
                   ORDER BY min(first_seen_at), incarnation_key
               ) AS ordinal
        FROM {INCARNATIONS}
        GROUP BY cluster_id, incarnation_key
    """,
}


def iso(epoch_us: int | None) -> str | None:
    """ISO 8601 UTC text of epoch microseconds (``None`` stays ``None``)."""
    if epoch_us is None:
        return None
    value = _EPOCH + timedelta(microseconds=int(epoch_us))
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}"
    return text + "Z"


def _rows(cursor, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cursor.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def parse_topic_id(text: str) -> str:
    """Canonical form of a user-typed ID; reserved IDs are refused (they name no incarnation)."""
    value = canonical(text)
    if value in RESERVED_IDS:
        raise TopicIdError(
            f"{text!r} is Kafka's reserved ID {value} (no ID / cluster metadata); "
            "it never identifies a topic incarnation"
        )
    return value


def _like_pattern(text: str) -> str:
    """An ILIKE pattern matching ``text`` anywhere, with its own % and _ taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# --- clusters ---------------------------------------------------------------------------------
def clusters(cursor) -> list[dict[str, Any]]:
    """Every cluster in the published tables with its live/deleted counts and newest snapshot."""
    rows = _rows(
        cursor,
        f"""
        WITH inc AS (
            SELECT * FROM {SUMMARY}
        ), runs AS (
            SELECT cluster_id, max(captured_at) AS newest_snapshot,
                   max(captured_at) FILTER (WHERE complete) AS newest_complete_snapshot,
                   arg_max(cluster_alias, captured_at) AS cluster_alias
            FROM {RUNS} GROUP BY cluster_id
        )
        SELECT coalesce(inc.cluster_id, runs.cluster_id) AS cluster_id,
               coalesce(runs.cluster_alias, arg_max(inc.cluster_alias, inc.last_seen_at))
                   AS cluster_alias,
               count(inc.incarnation_key) FILTER (WHERE inc.is_live) AS live_topics,
               count(inc.incarnation_key) FILTER (WHERE inc.deleted_at IS NOT NULL)
                   AS deleted_incarnations,
               count(inc.incarnation_key) AS incarnations,
               epoch_us(max(runs.newest_snapshot)) AS newest_snapshot,
               epoch_us(max(runs.newest_complete_snapshot)) AS newest_complete_snapshot
        FROM inc FULL OUTER JOIN runs ON inc.cluster_id = runs.cluster_id
        GROUP BY coalesce(inc.cluster_id, runs.cluster_id), runs.cluster_alias
        ORDER BY cluster_alias, cluster_id
        """,
        [],
    )
    for row in rows:
        row["newest_snapshot"] = iso(row["newest_snapshot"])
        row["newest_complete_snapshot"] = iso(row["newest_complete_snapshot"])
    return rows


# --- search -------------------------------------------------------------------------------------
def search(cursor, query: str, cluster_id: str | None = None) -> dict[str, Any]:
    """Topics matching ``query``: by ID (any accepted form), exact name, or part of a name.

    One result per ``(cluster, name)``; exact matches (ID or whole name) come first.
    """
    text = query.strip()
    try:
        topic_id = parse_topic_id(text)
    except TopicIdError:
        topic_id = None
    rows = _rows(
        cursor,
        f"""
        WITH named AS (
            SELECT cluster_id, topic_name,
                   arg_max(cluster_alias, valid_from) AS cluster_alias,
                   count(DISTINCT incarnation_key) AS incarnations,
                   bool_or(is_current) AS is_live,
                   bool_or(topic_id = $topic_id) AS id_match,
                   epoch_us(max(last_seen_at)) AS last_seen_at
            FROM {INCARNATIONS}
            WHERE ($cluster_id IS NULL OR cluster_id = $cluster_id)
              AND (topic_id = $topic_id OR topic_name ILIKE $pattern ESCAPE '\\')
            GROUP BY cluster_id, topic_name
        )
        SELECT *, CASE WHEN coalesce(id_match, false) THEN 'id'
                       WHEN topic_name = $text THEN 'name'
                       ELSE 'partial' END AS matched_by
        FROM named
        ORDER BY (matched_by = 'partial'), topic_name, cluster_alias, cluster_id
        LIMIT {MAX_SEARCH_RESULTS + 1}
        """,
        {
            "topic_id": topic_id,
            "cluster_id": cluster_id,
            "pattern": _like_pattern(text),
            "text": text,
        },
    )
    for row in rows:
        row.pop("id_match")
        row[tables.LAST_SEEN_AT] = iso(row[tables.LAST_SEEN_AT])
    return {
        "query": text,
        "topic_id": topic_id,
        "results": rows[:MAX_SEARCH_RESULTS],
        "truncated": len(rows) > MAX_SEARCH_RESULTS,
    }


# --- timeline -----------------------------------------------------------------------------------
def _incarnation(versions: list[dict[str, Any]]) -> dict[str, Any]:
    """One incarnation's summary from its version rows (sorted by version)."""
    first, last = versions[0], versions[-1]
    ids = [v[tables.TOPIC_ID] for v in versions if v[tables.TOPIC_ID]]
    topic_id = ids[-1] if ids else None
    uuids = [v["topic_uuid"] for v in versions if v["topic_uuid"]]
    topic_uuid = uuids[-1] if uuids else (rfc4122(topic_id) if topic_id else None)
    deleted_at = max(
        (v[tables.DELETED_AT] for v in versions if v[tables.DELETED_AT] is not None), default=None
    )
    partitions = []
    for v in versions:
        if not partitions or partitions[-1]["partition_count"] != v[tables.PARTITION_COUNT]:
            partitions.append({"at": iso(v[tables.VALID_FROM]), "partition_count": v[tables.PARTITION_COUNT]})
    return {
        "incarnation_key": first[tables.INCARNATION_KEY],
        "cluster_id": first[tables.CLUSTER_ID],
        "cluster_alias": last["cluster_alias"],
        "topic_id": topic_id,
        "topic_uuid": topic_uuid,
        "created_name": first[tables.TOPIC_NAME],
        "current_name": last[tables.TOPIC_NAME],
        "first_seen_at": iso(min(v[tables.FIRST_SEEN_AT] for v in versions)),
        "last_seen_at": iso(max(v[tables.LAST_SEEN_AT] for v in versions)),
        "deleted_at": iso(deleted_at),
        "is_live": any(v[tables.IS_CURRENT] for v in versions),
        "has_reappeared": any(v[tables.CHANGE_TYPE] == "reappeared" for v in versions),
        "partition_history": partitions,
        "versions": [
            {
                "version": v[tables.VERSION],
                "change_type": v[tables.CHANGE_TYPE],
                "topic_name": v[tables.TOPIC_NAME],
                "topic_id": v[tables.TOPIC_ID],
                "partition_count": v[tables.PARTITION_COUNT],
                "replication_factor": v["replication_factor"],
                "is_internal": v["is_internal"],
                "valid_from": iso(v[tables.VALID_FROM]),
                "valid_to": iso(v[tables.VALID_TO]),
                "is_current": v[tables.IS_CURRENT],
            }
            for v in versions
        ],
    }


def timeline(cursor, name: str, cluster_id: str | None = None) -> list[dict[str, Any]]:
    """Every incarnation that ever carried ``name``, grouped by cluster, oldest first.

    Each incarnation brings all its versions (also those under another name, after a rename)
    and ``groups``: the consumer groups that committed offsets on it (:func:`_groups`).
    An empty list means no cluster ever had a topic of that name.
    """
    rows = _rows(
        cursor,
        f"""
        SELECT {_VERSION_SELECT} FROM {INCARNATIONS}
        WHERE (cluster_id, incarnation_key) IN (
            SELECT cluster_id, incarnation_key FROM {INCARNATIONS}
            WHERE topic_name = $name AND ($cluster_id IS NULL OR cluster_id = $cluster_id)
        )
        ORDER BY cluster_id, incarnation_key, version
        """,
        {"name": name, "cluster_id": cluster_id},
    )
    by_cluster: dict[str, dict[str, list]] = {}
    for row in rows:
        by_cluster.setdefault(row[tables.CLUSTER_ID], {}).setdefault(row[tables.INCARNATION_KEY], []).append(
            row
        )
    groups = _groups(cursor, name, cluster_id)
    result = []
    for cluster, incarnations in by_cluster.items():
        summaries = sorted(
            (_incarnation(versions) for versions in incarnations.values()),
            key=lambda inc: (inc[tables.FIRST_SEEN_AT], inc[tables.INCARNATION_KEY]),
        )
        for ordinal, summary in enumerate(summaries, start=1):
            summary["ordinal"] = ordinal
            summary["is_recreation"] = ordinal > 1
            summary["groups"] = groups.get((cluster, summary["incarnation_key"]), [])
        result.append(
            {
                "cluster_id": cluster,
                "cluster_alias": summaries[-1]["cluster_alias"],
                "topic_name": name,
                "incarnations": summaries,
                "recreations": len(summaries) - 1,
                "span": {
                    "start": min(s[tables.FIRST_SEEN_AT] for s in summaries),
                    "end": _newest_snapshot(cursor, cluster)
                    or max(s[tables.DELETED_AT] or s[tables.LAST_SEEN_AT] for s in summaries),
                },
            }
        )
    result.sort(key=lambda c: (c["cluster_alias"], c["cluster_id"]))
    return result


def _has_table(cursor, table: str) -> bool:
    cursor.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?",
        [table],
    )
    return cursor.fetchone()[0] > 0


def _groups(cursor, name: str, cluster_id: str | None) -> dict[tuple[str, str], list[dict]]:
    """The consumer groups that committed offsets on each incarnation that ever carried
    ``name`` (contract R8-R10), by ``(cluster_id, incarnation_key)``, ordered by group ID.

    ``carried_offset`` is true when, in some snapshot, a committed offset of the group on the
    incarnation exceeded its log end offset read in the same snapshot (R9): a position carried
    over from an earlier incarnation of the same name. A version published without the group
    tables (built before they existed) has no groups.
    """
    if not _has_table(cursor, GROUP_INCARNATIONS):
        return {}
    rows = _rows(
        cursor,
        f"""
        SELECT cluster_id, incarnation_key, group_id,
               epoch_us(first_seen_at) AS first_seen_at, epoch_us(last_seen_at) AS last_seen_at,
               max_committed_offset, carried_offset
        FROM {GROUP_INCARNATIONS}
        WHERE (cluster_id, incarnation_key) IN (
            SELECT cluster_id, incarnation_key FROM {INCARNATIONS}
            WHERE topic_name = $name AND ($cluster_id IS NULL OR cluster_id = $cluster_id)
        )
        ORDER BY cluster_id, incarnation_key, group_id
        """,
        {"name": name, "cluster_id": cluster_id},
    )
    by_incarnation: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        by_incarnation.setdefault((row[tables.CLUSTER_ID], row[tables.INCARNATION_KEY]), []).append(
            {
                "group_id": row["group_id"],
                "first_seen_at": iso(row[tables.FIRST_SEEN_AT]),
                "last_seen_at": iso(row[tables.LAST_SEEN_AT]),
                "max_committed_offset": row["max_committed_offset"],
                "carried_offset": row["carried_offset"],
            }
        )
    return by_incarnation


def incarnations_by_id(cursor, topic_id: str) -> list[dict[str, Any]]:
    """Incarnations (any cluster) that carry the canonical ``topic_id``, with their names."""
    rows = _rows(
        cursor,
        f"""
        SELECT cluster_id, incarnation_key,
               arg_max(cluster_alias, version) AS cluster_alias,
               arg_min(topic_name, version) AS created_name,
               arg_max(topic_name, version) AS current_name,
               list(DISTINCT topic_name ORDER BY topic_name) AS names
        FROM {INCARNATIONS}
        WHERE (cluster_id, incarnation_key) IN (
            SELECT cluster_id, incarnation_key FROM {INCARNATIONS} WHERE topic_id = $topic_id
        )
        GROUP BY cluster_id, incarnation_key
        ORDER BY cluster_alias, cluster_id
        """,
        {"topic_id": topic_id},
    )
    return rows


def _newest_snapshot(cursor, cluster_id: str) -> str | None:
    cursor.execute(
        f"SELECT epoch_us(max(captured_at)) FROM {RUNS} WHERE cluster_id = ?", [cluster_id]
    )
    return iso(cursor.fetchone()[0])


# --- cluster overview ---------------------------------------------------------------------------
def overview(cursor, cluster_id: str, days: int, top: int = 10) -> dict[str, Any] | None:
    """Live topics, deletions and re-creations over the last ``days`` days of one cluster.

    The window ends at the cluster's newest snapshot (or newest event when no snapshot table
    is published), so a cluster whose captures stopped still shows its last active days.
    A re-creation is an incarnation created under a name an earlier incarnation of the same
    cluster was created under. Returns ``None`` for an unknown cluster.
    """
    cursor.execute(
        f"""
        SELECT epoch_us(greatest(
                   (SELECT max(captured_at) FROM {RUNS} WHERE cluster_id = $c),
                   max(last_seen_at), max(deleted_at))),
               count(*), arg_max(cluster_alias, last_seen_at)
        FROM {SUMMARY} WHERE cluster_id = $c
        """,
        {"c": cluster_id},
    )
    end_us, row_count, alias = cursor.fetchone()
    if not row_count:
        return None
    end = _EPOCH + timedelta(microseconds=int(end_us))
    start = end - timedelta(days=days)
    params = {"c": cluster_id, "start": _micros(start), "end": int(end_us)}
    in_window = "epoch_us({column}) > $start AND epoch_us({column}) <= $end"
    deleted_in_window = in_window.format(column="deleted_at")
    created_in_window = in_window.format(column="first_seen_at")
    cursor.execute(
        f"""
        SELECT count(*) FILTER (WHERE is_live),
               count(*) FILTER (WHERE {deleted_in_window}),
               count(*) FILTER (WHERE ordinal > 1 AND {created_in_window}),
               count(*) FILTER (WHERE has_reappeared)
        FROM {SUMMARY} WHERE cluster_id = $c
        """,
        params,
    )
    live, deletions, recreations, reappeared = cursor.fetchone()
    daily = _rows(
        cursor,
        f"""
        WITH events AS (
            SELECT CAST(deleted_at AS DATE) AS day, 1 AS deletions, 0 AS recreations
            FROM {SUMMARY} WHERE cluster_id = $c AND {deleted_in_window}
            UNION ALL
            SELECT CAST(first_seen_at AS DATE), 0, 1
            FROM {SUMMARY} WHERE cluster_id = $c AND ordinal > 1 AND {created_in_window}
        )
        SELECT strftime(day, '%Y-%m-%d') AS day, sum(deletions)::INT AS deletions,
               sum(recreations)::INT AS recreations
        FROM events GROUP BY day ORDER BY day
        """,
        params,
    )
    most = _rows(
        cursor,
        f"""
        SELECT created_name AS topic_name, count(*) AS incarnations,
               count(*) - 1 AS recreations, epoch_us(max(first_seen_at)) AS last_created_at,
               bool_or(is_live) AS is_live
        FROM {SUMMARY} WHERE cluster_id = $c
        GROUP BY created_name HAVING count(*) > 1
        ORDER BY recreations DESC, topic_name LIMIT $top
        """,
        {"c": cluster_id, "top": top},
    )
    for row in most:
        row["last_created_at"] = iso(row["last_created_at"])
    return {
        "cluster_id": cluster_id,
        "cluster_alias": alias,
        "days": days,
        "window_start": iso(_micros(start)),
        "window_end": iso(end_us),
        "live_topics": live,
        "deletions": deletions,
        "recreations": recreations,
        "reappeared_incarnations": reappeared,
        "daily": daily,
        "most_recreated": most,
    }


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(microseconds=1)
