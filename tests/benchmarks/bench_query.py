"""Median latency of the cookbook queries (Spark SQL) and of the UI's JSON API on the published
version of $TOPIC_LINEAGE_HOME; with ``--cli``, `topic-lineage query` end to end per engine.

    .venv/bin/python -m tests.benchmarks.bench_query [--repeat 5] [--master local[2]]
    .venv/bin/python -m tests.benchmarks.bench_query --cli [--topics 3000 --clusters 3 --rounds 30]
        [--runs 6] [--spark-runs 3] [--queries N] [--no-connect] [--home DIR] [--json-out F]

The cookbook queries are the ```sql blocks of docs/warehouse.md when that page has any, else
the built-in :data:`COOKBOOK` below. Prints one JSON document (the last line of output).

``--cli`` (issue #16 goal 3, "what a user waits for"): a published version of the generated
history (tests/benchmarks/datagen.py, one `build --full-refresh`; or the one of ``--home``), then
each query of :data:`CLI_QUERIES` as a user runs it, every call a new `topic-lineage query`
process: the DuckDB engine, the Spark engine with its own local Spark, and (unless
``--no-connect``) the Spark engine through the Spark Connect server. For each: the first call
(cold: Python's bytecode cache empty, as after an install) and the median of the warm ones;
process wall time, split by an instrumented run of the same command into Python start, imports
(the CLI and the engine's client: duckdb / pyspark / pyspark's Connect client) and the query
itself (for Spark, JVM start or connect, table registration, the query and printing). The outputs
of the engines must be byte-identical. Prints a table and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

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
    from topic_lineage.spark import get_spark, quick_jit_for_version

    # the JVM starts as `topic-lineage query --engine spark`'s does: C1 only over a small version
    spark = get_spark("topic-lineage-bench-query", master=master, quick_jit=quick_jit_for_version(None))
    try:
        wh.register_tables(spark)
        out = {}
        for label, sql in cookbook().items():
            # The page's examples name the topic 'orders'; ask for a re-created topic of this data.
            sql = sql.format(**probe) if "{" in sql else sql.replace("'orders'", f"'{probe['name']}'")
            if repeat > 1:  # warm-up (file listing, code generation); --repeat 1 (run_all
                spark.sql(sql).collect()  # --quick, its test) times the first run alone
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


# --- `topic-lineage query` end to end (--cli) ---------------------------------------------------
CLI_QUERIES = {
    "incarnations by change type": (
        "SELECT change_type, count(*) AS n FROM topic_lineage.topic_incarnations "
        "GROUP BY change_type ORDER BY change_type"
    ),
    "observations per cluster (topic_snapshots)": (
        "SELECT cluster_alias, count(*) AS observations, count(DISTINCT topic_name) AS names, "
        "max(captured_at) AS newest FROM topic_snapshots GROUP BY cluster_alias ORDER BY cluster_alias"
    ),
}

SCRIPT = Path(sys.executable).with_name("topic-lineage")

# The same command as SCRIPT, timed from inside: imports of the CLI and the engine's client, then
# the query (cli.main). Prints "imports_s query_s" on stderr's last line.
_PROBE = """
import sys, time
started = time.perf_counter()
from topic_lineage import cli
{imports}
imported = time.perf_counter()
code = cli.main(sys.argv[1:])
sys.stdout.flush()
print(f"PROBE {{imported - started:.4f}} {{time.perf_counter() - imported:.4f}}", file=sys.stderr)
sys.exit(code)
"""
_ENGINE_IMPORTS = {
    "duckdb": "import duckdb, topic_lineage.duckdb_sql",
    "spark": "import pyspark.sql, topic_lineage.spark",
    "connect": "import pyspark.sql, topic_lineage.spark, pyspark.sql.connect.session",
}


def _run(command: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"{' '.join(command[:3])} ... failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, proc


def _engine_args(engine: str) -> list[str]:
    return [] if engine == "duckdb" else ["--engine", "spark"]


def measure_engine(engine: str, sql: str, env: dict, runs: int, split_runs: int) -> dict:
    """``runs`` calls of `topic-lineage query` (the first is cold), then ``split_runs``
    instrumented calls of the same command for the split."""
    walls, outputs = [], set()
    for _ in range(runs):
        seconds, proc = _run([str(SCRIPT), "query", *_engine_args(engine), sql], env)
        walls.append(seconds)
        outputs.add(proc.stdout)
    assert len(outputs) == 1, f"{engine}: different outputs across calls"
    splits = []
    for _ in range(split_runs):
        probe = _PROBE.format(imports=_ENGINE_IMPORTS[engine])
        seconds, proc = _run([sys.executable, "-c", probe, "query", *_engine_args(engine), sql], env)
        imports_s, query_s = map(float, proc.stderr.strip().splitlines()[-1].split()[1:])
        splits.append((seconds - imports_s - query_s, imports_s, query_s, seconds))
    median = lambda i: round(statistics.median(s[i] for s in splits), 3) if splits else None
    return {
        "cold_s": round(walls[0], 3),
        "warm_s": [round(w, 3) for w in walls[1:]],
        "warm_median_s": round(statistics.median(walls[1:]), 3) if len(walls) > 1 else None,
        "split_runs": len(splits),
        "python_start_s": median(0), "imports_s": median(1), "query_s": median(2),
        "split_wall_s": median(3),
        "output": outputs.pop(),
    }


def python_start(env: dict, runs: int = 5) -> float:
    """A bare interpreter start (``python -c pass``), for scale."""
    return round(statistics.median(_run([sys.executable, "-c", "pass"], env)[0] for _ in range(runs)), 3)


def publish_history(env: dict, topics: int, clusters: int, rounds: int) -> dict:
    from tests.benchmarks.datagen import History

    observations = History(topics=topics, clusters=clusters).store_rounds(0, rounds)
    seconds, _ = _run([str(SCRIPT), "build", "--full-refresh"], env)
    return {"observations": observations, "build_full_refresh_s": round(seconds, 1)}


def version_size() -> dict:
    from topic_lineage import warehouse as wh

    version = wh.current_version()
    manifest = wh.read_manifest(version)
    files = [p for p in wh.version_dir(version).rglob("*.parquet")]
    return {"version": version, "row_counts": manifest.get("row_counts"),
            "parquet_files": len(files),
            "parquet_mib": round(sum(p.stat().st_size for p in files) / 2**20, 1)}


def cli_main(args) -> int:
    from topic_lineage.local import spark_server

    work = Path(tempfile.mkdtemp(prefix="tl-bench-query-cli-"))
    home = Path(args.home) if args.home else work / "home"
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "TOPIC_LINEAGE_MAX_AGE": "off"}
    env.pop(spark_server.REMOTE_ENV, None)
    # A user's Python caches bytecode after the first run; here into a fresh directory (the
    # first call compiles everything it imports: the cold start after an install).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    result = {"load_before": os.getloadavg(), "cpus": os.cpu_count()}
    if not args.home:
        result["data"] = {"topics": args.topics, "clusters": args.clusters, "rounds": args.rounds,
                          **publish_history(env, args.topics, args.clusters, args.rounds)}
    result["size"] = version_size()
    result["python_start_s"] = python_start(env)
    result["queries"] = {}
    queries = dict(list(CLI_QUERIES.items())[:args.queries])
    for label, sql in queries.items():
        found = result["queries"][label] = {"sql": sql}
        found["duckdb"] = measure_engine("duckdb", sql, env, args.runs, args.split_runs)
        found["spark local"] = measure_engine("spark", sql, env, args.spark_runs, 1)
    # The machine's own setting here (PYTHONDONTWRITEBYTECODE=1, no cache): every call compiles.
    nocache = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
    nocache.pop("PYTHONPYCACHEPREFIX")
    for label, sql in queries.items():
        result["queries"][label]["duckdb, no bytecode cache"] = measure_engine(
            "duckdb", sql, nocache, max(args.runs - 1, 2), 0)
    if not args.no_connect:
        began = time.perf_counter()
        spark_server.start()
        result["connect_server_start_s"] = round(time.perf_counter() - began, 1)
        env[spark_server.REMOTE_ENV] = spark_server.remote_url()
        try:
            for label, sql in queries.items():
                result["queries"][label]["spark via Connect"] = measure_engine(
                    "connect", sql, env, args.spark_runs, 1)
        finally:
            spark_server.stop()
    result["load_after"] = os.getloadavg()
    for label, found in result["queries"].items():
        outputs = {engine: m.pop("output") for engine, m in found.items() if engine != "sql"}
        assert len(set(outputs.values())) == 1, (label, outputs)
    print_cli_table(result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0


def print_cli_table(result: dict) -> None:
    size = result["size"]
    data = result.get("data")
    if data:
        print(f"data: {data['topics']:,} topics x {data['rounds']} rounds, {data['clusters']} "
              f"clusters ({data['observations']:,} observations); full refresh "
              f"{data['build_full_refresh_s']} s")
    print(f"published version: {size['row_counts']}; {size['parquet_files']} Parquet files, "
          f"{size['parquet_mib']} MiB")
    print(f"load average before {result['load_before'][0]:.2f}, after "
          f"{result['load_after'][0]:.2f} ({result['cpus']} CPUs); bare python start "
          f"{result['python_start_s']} s"
          + (f"; Connect server start {result['connect_server_start_s']} s"
             if "connect_server_start_s" in result else ""))
    header = (f"  {'engine':<28} {'cold s':>7} {'warm median s':>14}   {'python start':>12} "
              f"{'imports':>8} {'query':>8}  (split: median of instrumented runs)")
    for label, found in result["queries"].items():
        print(f"{label}: {found['sql']}")
        print(header)
        for engine, m in found.items():
            if engine == "sql":
                continue
            split = ("" if not m["split_runs"] else
                     f"{m['python_start_s']:>12} {m['imports_s']:>8} {m['query_s']:>8}")
            print(f"  {engine:<28} {m['cold_s']:>7} {m['warm_median_s']!s:>14}   {split}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--cli", action="store_true",
                        help="time `topic-lineage query` end to end per engine (module docstring)")
    parser.add_argument("--topics", type=int, default=3000)
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--home", help="use the published version of this TOPIC_LINEAGE_HOME")
    parser.add_argument("--runs", type=int, default=6, help="DuckDB calls per query (1 cold)")
    parser.add_argument("--split-runs", type=int, default=3)
    parser.add_argument("--spark-runs", type=int, default=3, help="Spark calls per query (1 cold)")
    parser.add_argument("--no-connect", action="store_true")
    parser.add_argument("--queries", type=int, help="only the first N of CLI_QUERIES")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    if args.cli:
        return cli_main(args)
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
