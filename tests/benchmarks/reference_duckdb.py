"""A straightforward reference implementation of the contract's rules in DuckDB SQL.

    .venv/bin/python -m tests.benchmarks.reference_duckdb OUT_DIR      # over $TOPIC_LINEAGE_HOME

It reads the snapshot store's Parquet files directly and writes the three contract tables as
Parquet (``OUT_DIR/<table>.parquet``). It exists to time the Spark build against a single-node
engine and to cross-check its rows (:func:`compare`); it shares no code with ``spark_jobs``.

Scope: every observation must carry a topic ID (R4, ID-less migration, is not implemented here:
:func:`build` refuses such a store). Implemented: R1 (identity by ID, a name under another ID
closes the old incarnation), R2 (only complete snapshots close; describe errors are present and
keep the attributes), R3 (mass-deletion hold, confirmation by a second complete snapshot, the
held snapshot's time as ``deleted_at``), R6 (``reappeared`` versions), version numbering,
``valid_from``/``valid_to``, ``first_seen_at``/``last_seen_at``, the incarnation key.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from topic_lineage import tables as t


class ReferenceScopeError(RuntimeError):
    """The store holds something the reference does not implement (ID-less topics)."""


def _store_glob() -> str:
    return str(t.snapshots_dir() / "**" / "*.parquet")


def _uuid_sql(col: str) -> str:
    hexed = f"lower(hex(from_base64(replace(replace({col}, '-', '+'), '_', '/') || '==')))"
    return (
        f"CASE WHEN {col} IS NULL THEN NULL ELSE concat_ws('-', substr({hexed}, 1, 8), "
        f"substr({hexed}, 9, 4), substr({hexed}, 13, 4), substr({hexed}, 17, 4), "
        f"substr({hexed}, 21, 12)) END"
    )


def _statements(ratio: float, min_count: int) -> list[str]:
    glob = _store_glob().replace("'", "''")
    return [
        f"""CREATE OR REPLACE TABLE store AS
            SELECT * FROM read_parquet('{glob}', hive_partitioning = false)""",
        """CREATE OR REPLACE TABLE runs AS
            SELECT DISTINCT cluster_id, cluster_alias, captured_at, complete, topic_count,
                   error_topic_count, source, authoritative FROM store""",
        """CREATE OR REPLACE TABLE obs AS
            SELECT DISTINCT cluster_id, cluster_alias, captured_at, complete, topic_name, topic_id,
                   partition_count, replication_factor, is_internal, error
            FROM store WHERE topic_name IS NOT NULL""",
        "DROP TABLE store",
        # Complete snapshots numbered per cluster.
        """CREATE OR REPLACE TABLE completes AS
            SELECT cluster_id, captured_at,
                   row_number() OVER (PARTITION BY cluster_id ORDER BY captured_at) AS rank
            FROM runs WHERE complete""",
        """CREATE OR REPLACE TABLE run_pos AS
            SELECT cluster_id, captured_at,
                   sum(complete::INTEGER) OVER (PARTITION BY cluster_id ORDER BY captured_at
                       ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS completes_upto
            FROM runs""",
        # Each observation, its identity's next observation and its name's next observation.
        """CREATE OR REPLACE TABLE o1 AS
            SELECT *,
                lag(captured_at) OVER w_id AS prev_at,
                lead(captured_at) OVER w_id AS next_at,
                lead(captured_at) OVER w_name AS next_name_at,
                lead(topic_id) OVER w_name AS next_name_id
            FROM obs o JOIN run_pos p USING (cluster_id, captured_at)
            WINDOW w_id AS (PARTITION BY cluster_id, topic_id ORDER BY captured_at),
                   w_name AS (PARTITION BY cluster_id, topic_name ORDER BY captured_at)""",
        # The gap after each observation: first and second complete snapshot in it, and the
        # first snapshot showing the name under another ID.
        """CREATE OR REPLACE TABLE o2 AS
            SELECT o.*,
                CASE WHEN o.next_at IS NULL OR c1.captured_at < o.next_at THEN c1.captured_at END AS c1,
                CASE WHEN o.next_at IS NULL OR c2.captured_at < o.next_at THEN c2.captured_at END AS c2,
                CASE WHEN o.next_name_id <> o.topic_id
                      AND (o.next_at IS NULL OR o.next_name_at < o.next_at) THEN o.next_name_at END
                    AS displaced_at
            FROM o1 o
            LEFT JOIN completes c1 ON c1.cluster_id = o.cluster_id AND c1.rank = o.completes_upto + 1
            LEFT JOIN completes c2 ON c2.cluster_id = o.cluster_id AND c2.rank = o.completes_upto + 2""",
        "DROP TABLE o1",
        # R3: a complete snapshot closing >= min_count and more than ratio of the live ones.
        f"""CREATE OR REPLACE TABLE runs_held AS
            WITH closing AS (
                SELECT cluster_id, c1 AS captured_at, count(*) AS n FROM o2
                WHERE c1 IS NOT NULL AND (displaced_at IS NULL OR displaced_at > c1)
                GROUP BY ALL),
            again AS (
                SELECT cluster_id, captured_at, count(*) AS n FROM o2
                WHERE prev_at IS NOT NULL GROUP BY ALL)
            SELECT r.*,
                coalesce(r.complete AND NOT r.authoritative
                         AND coalesce(c.n, 0) >= {int(min_count)}
                         AND coalesce(c.n, 0) > {float(ratio)} * (coalesce(c.n, 0) + coalesce(a.n, 0)),
                         false) AS held
            FROM runs r
            LEFT JOIN closing c USING (cluster_id, captured_at)
            LEFT JOIN again a USING (cluster_id, captured_at)""",
        """CREATE OR REPLACE TABLE o3 AS
            SELECT o.*,
                least(o.displaced_at,
                      CASE WHEN o.c1 IS NOT NULL AND (NOT h.held OR o.c2 IS NOT NULL) THEN o.c1 END)
                    AS gap_end
            FROM o2 o LEFT JOIN runs_held h ON h.cluster_id = o.cluster_id AND h.captured_at = o.c1""",
        "DROP TABLE o2",
        # Effective attributes (a describe error keeps the last known ones) and change types.
        """CREATE OR REPLACE TABLE o4 AS
            SELECT *,
                last(CASE WHEN error IS NULL THEN partition_count END IGNORE NULLS) OVER w AS pc,
                last(CASE WHEN error IS NULL THEN replication_factor END IGNORE NULLS) OVER w AS rf,
                last(CASE WHEN error IS NULL THEN is_internal END IGNORE NULLS) OVER w AS internal,
                lag(gap_end) OVER (PARTITION BY cluster_id, topic_id ORDER BY captured_at) AS prev_gap_end
            FROM o3
            WINDOW w AS (PARTITION BY cluster_id, topic_id ORDER BY captured_at
                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)""",
        "DROP TABLE o3",
        """CREATE OR REPLACE TABLE o5 AS
            SELECT *,
                CASE WHEN prev_at IS NULL THEN 'created'
                     WHEN prev_gap_end IS NOT NULL THEN 'reappeared'
                     WHEN lag(topic_name) OVER w IS DISTINCT FROM topic_name THEN 'renamed'
                     WHEN lag(pc) OVER w IS DISTINCT FROM pc OR lag(rf) OVER w IS DISTINCT FROM rf
                       OR lag(internal) OVER w IS DISTINCT FROM internal THEN 'attributes_changed'
                END AS change
            FROM o4
            WINDOW w AS (PARTITION BY cluster_id, topic_id ORDER BY captured_at)""",
        "DROP TABLE o4",
        """CREATE OR REPLACE TABLE o6 AS
            SELECT *,
                sum(CASE WHEN change IS NOT NULL THEN 1 ELSE 0 END) OVER (
                    PARTITION BY cluster_id, topic_id ORDER BY captured_at
                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS version
            FROM o5""",
        "DROP TABLE o5",
        f"""CREATE OR REPLACE TABLE topic_incarnations AS
            WITH v AS (
                SELECT cluster_id, topic_id, version,
                    arg_min(cluster_alias, captured_at) AS cluster_alias,
                    arg_min(topic_name, captured_at) AS topic_name,
                    arg_min(change, captured_at) AS change_type,
                    arg_min(pc, captured_at) AS partition_count,
                    arg_min(rf, captured_at) AS replication_factor,
                    arg_min(internal, captured_at) AS is_internal,
                    min(captured_at) AS valid_from,
                    arg_max(gap_end, captured_at) AS closed_at
                FROM o6 GROUP BY cluster_id, topic_id, version),
            inc AS (
                SELECT cluster_id, topic_id, min(captured_at) AS first_seen_at,
                       max(captured_at) AS last_seen_at, min(gap_end) AS deleted_at
                FROM o6 GROUP BY cluster_id, topic_id)
            SELECT
                substr(sha256(concat_ws(chr(31), v.cluster_id, 'id', v.topic_id)), 1, 32) AS incarnation_key,
                v.cluster_id, v.cluster_alias, v.topic_id, {_uuid_sql('v.topic_id')} AS topic_uuid,
                v.topic_name, v.version::INTEGER AS version, v.change_type,
                v.partition_count, v.replication_factor, v.is_internal,
                v.valid_from,
                coalesce(v.closed_at, lead(v.valid_from) OVER (
                    PARTITION BY v.cluster_id, v.topic_id ORDER BY v.version)) AS valid_to,
                coalesce(v.closed_at, lead(v.valid_from) OVER (
                    PARTITION BY v.cluster_id, v.topic_id ORDER BY v.version)) IS NULL AS is_current,
                i.first_seen_at, i.last_seen_at, i.deleted_at
            FROM v JOIN inc i USING (cluster_id, topic_id)""",
        "DROP TABLE o6",
        """CREATE OR REPLACE TABLE snapshot_runs AS
            SELECT cluster_id, cluster_alias, captured_at, complete, topic_count,
                   error_topic_count, source, held FROM runs_held""",
        f"""CREATE OR REPLACE VIEW topic_snapshots AS
            SELECT cluster_id, cluster_alias, captured_at, complete, topic_name, topic_id,
                   {_uuid_sql('topic_id')} AS topic_uuid,
                   partition_count, replication_factor, is_internal, error
            FROM obs""",
    ]


def connect(database: Path | str = ":memory:"):
    """A DuckDB connection in UTC. Row order is never relied on (outputs are compared as
    multisets), so DuckDB may drop insertion order, which saves memory on large tables."""
    import duckdb

    con = duckdb.connect(str(database))
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    return con


def build(out_dir: Path | str, *, ratio: float = 0.5, min_count: int = 5, con=None,
          database: Path | str = ":memory:") -> dict:
    """Compute the contract tables from the store into ``out_dir``; return timings and counts.

    Each intermediate table is dropped once the next step has read it. ``database`` is where the
    tables live: in memory (spilling uncompressed to a temporary directory beyond DuckDB's memory
    limit) or, for large stores, a file, where DuckDB keeps them compressed."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    con = con or connect(database)
    started = time.perf_counter()
    glob = _store_glob().replace("'", "''")
    missing = con.execute(
        f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = false) "
        "WHERE topic_name IS NOT NULL AND (topic_id IS NULL OR topic_id = 'AAAAAAAAAAAAAAAAAAAAAA')"
    ).fetchone()[0]
    if missing:
        raise ReferenceScopeError(f"{missing} observation(s) without a topic ID: R4 is not implemented here")
    for statement in _statements(ratio, min_count):
        con.execute(statement)
    counts = {}
    for table in t.TOPIC_TABLES:  # the consumer-lineage tables are not in this reference
        con.execute(f"COPY {table} TO '{out / (table + '.parquet')}' (FORMAT parquet, COMPRESSION zstd)")
        counts[table] = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return {"seconds": round(time.perf_counter() - started, 3), "row_counts": counts}


def compare(reference_dir: Path | str, spark_version_dir: Path | str) -> dict:
    """Rows of each table present in one output and not the other (multiset difference)."""
    con = connect()
    result = {}
    for table in t.TOPIC_TABLES:
        columns = ", ".join(t.ddl_columns(t.TABLE_DDL[table]))
        ref = f"SELECT {columns} FROM read_parquet('{Path(reference_dir) / (table + '.parquet')}')"
        spark = f"SELECT {columns} FROM read_parquet('{Path(spark_version_dir) / table}/**/*.parquet')"
        only_ref = con.execute(f"SELECT count(*) FROM ({ref} EXCEPT ALL {spark})").fetchone()[0]
        only_spark = con.execute(f"SELECT count(*) FROM ({spark} EXCEPT ALL {ref})").fetchone()[0]
        rows = con.execute(f"SELECT count(*) FROM ({ref})").fetchone()[0]
        result[table] = {"rows": rows, "only_reference": only_ref, "only_spark": only_spark}
    result["identical"] = all(
        v["only_reference"] == 0 and v["only_spark"] == 0 for k, v in result.items() if k in t.TOPIC_TABLES
    )
    return result


if __name__ == "__main__":
    print(build(sys.argv[1]))
