"""Median latency of the cookbook queries (Spark SQL) and of the UI's JSON API on the published
version of $TOPIC_LINEAGE_HOME.

    .venv/bin/python -m tests.benchmarks.bench_query [--repeat 5] [--master local[2]]

The cookbook queries are the ```sql blocks of docs/warehouse.md when that page has any, else
the built-in :data:`COOKBOOK` below. Prints one JSON document (the last line of output).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

COOKBOOK = {
    "current topics per cluster": (
        "SELECT cluster_alias, count(*) AS topics FROM topic_incarnations "
        "WHERE is_current GROUP BY cluster_alias ORDER BY cluster_alias"
    ),
    "history of one name": (
        "SELECT * FROM topic_incarnations WHERE topic_name = '{name}' ORDER BY valid_from, version"
    ),
    "re-created names": (
        "SELECT cluster_id, topic_name, count(DISTINCT incarnation_key) AS lives "
        "FROM topic_incarnations GROUP BY cluster_id, topic_name HAVING count(DISTINCT incarnation_key) > 1 "
        "ORDER BY lives DESC, topic_name LIMIT 20"
    ),
    "deleted in the last day": (
        "SELECT cluster_alias, topic_name, topic_id, deleted_at FROM topic_incarnations "
        "WHERE deleted_at >= (SELECT max(captured_at) FROM snapshot_runs) - INTERVAL 1 DAY "
        "AND version = 1 ORDER BY deleted_at"
    ),
    "ID lookup (RFC 4122)": "SELECT * FROM topic_incarnations WHERE topic_uuid = '{uuid}'",
    "partition changes": (
        "SELECT cluster_alias, topic_name, valid_from, partition_count FROM topic_incarnations "
        "WHERE change_type = 'attributes_changed' ORDER BY valid_from DESC LIMIT 20"
    ),
    "held snapshots": "SELECT * FROM snapshot_runs WHERE held ORDER BY captured_at",
}


def cookbook() -> dict[str, str]:
    page = ROOT / "docs" / "warehouse.md"
    if page.exists():
        # Each block is labelled by the paragraph above it: its first line, up to a parenthesis.
        blocks = re.findall(r"((?:[^\n]+\n)+)\n*```sql\n(.*?)```", page.read_text(), flags=re.DOTALL)
        queries = {
            f"#{i + 1} {label.strip().splitlines()[0].split(' (')[0].rstrip(':')[:48]}":
                block.strip().rstrip(";")
            for i, (label, block) in enumerate(blocks)
        }
        # Only self-contained SELECTs (no placeholders the page expects the reader to fill in).
        queries = {k: q for k, q in queries.items()
                   if q.upper().startswith(("SELECT", "WITH")) and not re.search(r"<[a-z_ ]+>", q)
                   and ";" not in q}
        if queries:
            return queries
    return COOKBOOK


def _median_ms(fn, repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        timings.append(1000 * (time.perf_counter() - started))
    return round(statistics.median(timings), 2)


def probe_topic() -> dict:
    """A re-created topic of the published version (for the name / ID queries)."""
    import duckdb

    from topic_lineage import warehouse as wh

    path = wh.version_path(wh.current_version(), "topic_incarnations")
    row = duckdb.connect().execute(
        f"SELECT cluster_id, topic_name, arg_max(topic_id, valid_from), arg_max(topic_uuid, valid_from) "
        f"FROM read_parquet('{path}/**/*.parquet') GROUP BY ALL "
        "ORDER BY count(DISTINCT incarnation_key) DESC, topic_name LIMIT 1"
    ).fetchone()
    return {"cluster_id": row[0], "name": row[1], "topic_id": row[2], "uuid": row[3]}


def spark_queries(repeat: int, master: str, probe: dict) -> dict:
    from topic_lineage import warehouse as wh
    from topic_lineage.spark import get_spark

    spark = get_spark("topic-lineage-bench-query", master=master)
    try:
        wh.register_tables(spark)
        out = {}
        for label, sql in cookbook().items():
            # The page's examples name the topic 'orders'; ask for a re-created topic of this data.
            sql = sql.format(**probe) if "{" in sql else sql.replace("'orders'", f"'{probe['name']}'")
            spark.sql(sql).collect()  # warm-up (file listing, code generation)
            out[label] = _median_ms(lambda sql=sql: spark.sql(sql).collect(), repeat)
        return out
    finally:
        spark.stop()


def api_queries(repeat: int, probe: dict) -> dict:
    from fastapi.testclient import TestClient

    from topic_lineage.ui.app import create_app

    client = TestClient(create_app(lambda: "bench-user"))
    started = time.perf_counter()
    assert client.get("/api/status").status_code == 200
    first_ms = round(1000 * (time.perf_counter() - started), 2)
    routes = {
        "search by name": ("/api/search", {"q": probe["name"]}),
        "search by part of a name": ("/api/search", {"q": "svc-0001"}),
        "search by ID (RFC 4122)": ("/api/search", {"q": probe["uuid"]}),
        "ID lookup": (f"/api/ids/{probe['topic_id']}", {}),
        "timeline": ("/api/timeline", {"name": probe["name"]}),
        "cluster overview (30 days)": ("/api/overview", {"cluster_id": probe["cluster_id"], "days": 30}),
        "cluster list": ("/api/clusters", {}),
    }
    out = {"first request (loads the version)": first_ms}
    for label, (path, params) in routes.items():
        def call(path=path, params=params, label=label):
            response = client.get(path, params=params)
            assert response.status_code == 200, (label, response.text[:300])
        out[label] = _median_ms(call, repeat)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    probe = probe_topic()
    result = {"probe": probe, "api_ms": api_queries(max(args.repeat, 5) * 4, probe),
              "sql_ms": spark_queries(args.repeat, args.master, probe)}
    result["sql_median_ms"] = round(statistics.median(result["sql_ms"].values()), 2)
    api = {k: v for k, v in result["api_ms"].items() if not k.startswith("first")}
    result["api_median_ms"] = round(statistics.median(api.values()), 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
