"""One pipeline cycle through the CLI, as a user runs it, with its breakdown (issue #16).

    python tests/benchmarks/bench_cycle.py [--topics 10000 --clusters 3 --rounds 1000] [--json-out F]

On the benchmark's generated history (tests/benchmarks/datagen.py), in a fresh
$TOPIC_LINEAGE_HOME, each step a `topic-lineage` process of its own:

1. full refresh: `build --full-refresh` (build, validate, publish) over rounds 0 .. n-1;
2. no-op: `build` with nothing new (no JVM is started: topic_lineage/noop.py);
3. one cycle: a new snapshot of one cluster, then `build` (incremental build, validate, publish);
   the breakdown comes from the version manifest's status times;
4. queries: `query` with its own local Spark, then through the Spark Connect server
   (topic_lineage/local/spark_server.py): its start-up, the first query (registers the tables), and
   the next ones.

Prints a table and the load average (the machine may be shared: compare ratios in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SCRIPT = Path(sys.executable).with_name("topic-lineage")
QUERY = ("SELECT change_type, count(*) AS n FROM topic_lineage.topic_incarnations "
         "GROUP BY change_type ORDER BY change_type")


def cli(env: dict, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    proc = subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"topic-lineage {' '.join(args)} failed ({proc.returncode}):\n"
                         f"{proc.stderr[-3000:]}")
    return round(seconds, 2), proc


def _at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def breakdown(wall_s: float, started_at: float) -> dict:
    """Where a `build` process's time went, from the published version's status times."""
    from topic_lineage import warehouse as wh

    manifest = wh.read_manifest(wh.current_version())
    times = {h["status"]: _at(h["at"]) for h in manifest["history"]}
    return {
        "process_wall_s": wall_s,
        "start_to_building_s": round(times["building"] - started_at, 2),  # imports + JVM + plan
        "build_s": round(times["built"] - times["building"], 2),
        "validate_s": round(times["validated"] - times["built"], 2),
        "publish_s": round(times["published"] - times["validated"], 2),
        "mode": manifest["mode"], "new_snapshots": manifest["new_snapshots"],
        "snapshots": manifest["snapshot_count"],
        # issue #16: what made the cycle cheap, as the build and the gate recorded it
        "spark_settings": manifest.get("spark_settings"),
        "topic_snapshots_read": (manifest.get("gate") or {}).get("topic_snapshots_read"),
    }


def store_one_snapshot(history, round_no: int) -> float:
    """Store round ``round_no`` of the first cluster, as a capture stores it; return the seconds
    of storing only (the generator replays the history from round 0 to make the snapshot, which
    is the benchmark's cost, not the cycle's)."""
    from topic_lineage import store

    snapshot = next(iter(history.rounds(round_no, round_no + 1)))[0]
    started = time.perf_counter()
    store.save_all([snapshot], "live")
    return round(time.perf_counter() - started, 2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--queries", type=int, default=3, help="queries through the server")
    parser.add_argument("--connect-cycles", type=int, default=2,
                        help="cycles (new snapshot + build) on the Spark Connect server")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)

    from tests.benchmarks.datagen import History
    from topic_lineage.local import spark_server

    work = Path(tempfile.mkdtemp(prefix="tl-bench-cycle-"))
    home = work / "home"
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "TOPIC_LINEAGE_MAX_AGE": "off"}
    env.pop(spark_server.REMOTE_ENV, None)
    history = History(topics=args.topics, clusters=args.clusters)
    result = {"topics": args.topics, "clusters": args.clusters, "rounds": args.rounds,
              "load_before": os.getloadavg()}
    result["observations"] = history.store_rounds(0, args.rounds)

    result["full_refresh_s"], _ = cli(env, "build", "--full-refresh")
    result["noop_s"], out = cli(env, "build")
    assert "nothing new to build" in out.stdout, out.stdout

    result["store_one_snapshot_s"] = store_one_snapshot(history, args.rounds)
    started = time.time()
    wall, _ = cli(env, "build")
    result["cycle"] = breakdown(wall, started)
    result["cycle"]["end_to_end_s"] = round(wall + result["store_one_snapshot_s"], 2)
    result["noop_after_cycle_s"], _ = cli(env, "build")

    result["query_local_s"], local = cli(env, "query", QUERY, "--engine", "spark")
    from topic_lineage.local.broker import free_port

    os.environ.setdefault(spark_server.PORT_ENV, str(free_port()))
    env[spark_server.PORT_ENV] = os.environ[spark_server.PORT_ENV]
    began = time.perf_counter()
    spark_server.start()
    result["connect_server_start_s"] = round(time.perf_counter() - began, 2)
    try:
        times = []
        for _ in range(args.queries):
            seconds, remote = cli(env, "query", QUERY, "--engine", "spark")
            assert remote.stdout == local.stdout, (remote.stdout, local.stdout)
            times.append(seconds)
        result["query_connect_first_s"], result["query_connect_next_s"] = times[0], times[1:]
        # After the queries (they compare with the local query over the same version): cycles
        # on the server (build and validate run on it: no JVM start in the process).
        result["connect_cycles"] = []
        for extra in range(args.connect_cycles):
            store_s = store_one_snapshot(history, args.rounds + 1 + extra)
            started = time.time()
            wall, _ = cli(env, "build")
            cycle = breakdown(wall, started)
            cycle["store_s"], cycle["end_to_end_s"] = store_s, round(wall + store_s, 2)
            result["connect_cycles"].append(cycle)
    finally:
        spark_server.stop()
    result["load_after"] = os.getloadavg()

    c = result["cycle"]
    print(f"cycle benchmark: {args.topics} topics x {args.rounds} rounds, {args.clusters} clusters "
          f"({result['observations']:,} observations); load average before "
          f"{result['load_before'][0]:.1f}, after {result['load_after'][0]:.1f}")
    rows = [
        ("full refresh (build --full-refresh: build+validate+publish)", result["full_refresh_s"]),
        ("no-op build (nothing new; no JVM)", result["noop_s"]),
        ("one cycle end to end (store 1 snapshot + build+validate+publish)", c["end_to_end_s"]),
        ("  store the snapshot", result["store_one_snapshot_s"]),
        ("  process start to build start (imports, JVM)", c["start_to_building_s"]),
        ("  build (incremental)", c["build_s"]),
        ("  validate (Great Expectations)", c["validate_s"]),
        ("  publish", c["publish_s"]),
        ("no-op build after the cycle", result["noop_after_cycle_s"]),
    ]
    for n, k in enumerate(result["connect_cycles"], 1):
        rows += [
            (f"cycle {n} on the Spark Connect server, end to end", k["end_to_end_s"]),
            ("  process start to build start (imports, connect)", k["start_to_building_s"]),
            ("  build (incremental)", k["build_s"]),
            ("  validate (Great Expectations)", k["validate_s"]),
            ("  publish", k["publish_s"]),
        ]
    rows += [
        ("query, own local Spark (cold)", result["query_local_s"]),
        ("Spark Connect server start (once per deployment)", result["connect_server_start_s"]),
        ("query via Spark Connect, first (registers tables)", result["query_connect_first_s"]),
        ("query via Spark Connect, next", ", ".join(map(str, result["query_connect_next_s"]))),
    ]
    for label, value in rows:
        print(f"  {label:<68} {value} s")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
