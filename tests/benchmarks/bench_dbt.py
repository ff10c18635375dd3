"""Peer benchmark: the same generated history through `dbt snapshot` (dbt-core + dbt-duckdb).

    python tests/benchmarks/bench_dbt.py [--topics 1000 --clusters 2 --rounds 20] [--dbt PATH]
    python tests/benchmarks/bench_dbt.py --quick --dbt .venv-dbt/bin/dbt [--json-out FILE]

dbt is an optional dependency (``bash scripts/install_dbt.sh`` makes ``.venv-dbt/`` from
``requirements-dbt.lock``, found by default; or ``pip install -e '.[bench]'``, or any venv:
``--dbt`` names its ``dbt`` executable); without it this prints why and exits 0, unless
``--dbt`` names one that does not exist (exit 2). ``--quick`` is the size of the test
(tests/test_bench_dbt.py): 60 topics x 2 clusters x 5 rounds, with an incomplete snapshot and a
describe error forced (the broken listing is always in round 3 of the last cluster), so every
kind of difference occurs; round 4, the last, undoes them all (each snapshot is a `dbt snapshot`
process of a few seconds: no more rounds than that). The dbt project is
``tests/benchmarks/dbt_peer/``: ``check`` strategy on the topic attributes (name, partitions,
replication factor, internal), unique key cluster + topic ID, ``hard_deletes: new_record``; its
source is the newest snapshot of each cluster. dbt snapshots the *current* state, so the history
is replayed one snapshot per `dbt snapshot` run, in capture order, as a dbt user's schedule would.

topic-lineage stores the same snapshots and builds once (full refresh). Printed: replay time,
the last run (one cycle), topic-lineage's full refresh, and per incarnation where dbt's result
differs from topic-lineage's: deletions topic-lineage does not establish (incomplete snapshots,
the broken listing held by R3), extra versions (describe errors read as attribute changes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PROJECT = Path(__file__).resolve().parent / "dbt_peer"
SCRIPT = Path(sys.executable).with_name("topic-lineage")
# --quick: (cluster index, round) of the forced incomplete snapshot and describe error; the
# broken listing is datagen's GLITCH_ROUND of the last cluster. Each is followed by complete
# rounds, so dbt's spurious deletions and versions are undone again (and show as such).
QUICK = {"topics": 60, "clusters": 2, "rounds": 5,
         "incomplete": ((0, 3),), "describe_errors": ((0, 2),)}
SNAPSHOT_NODE = "snapshot.topic_lineage_peer.topic_versions"
DIFFERENCES = ("false_deletions", "deleted_then_back", "shown_deleted_but_live", "extra_versions",
               "fewer_versions", "missed_deletions", "missing_in_dbt")


def quick_history():
    from tests.benchmarks.datagen import History

    return History(QUICK["topics"], QUICK["clusters"], incomplete=QUICK["incomplete"],
                   describe_errors=QUICK["describe_errors"])


def find_dbt(explicit: str | None) -> str | None:
    if explicit:
        return explicit if Path(explicit).exists() else None
    for candidate in (os.environ.get("PEER_DBT"), str(ROOT / ".venv-dbt" / "bin" / "dbt"),
                      shutil.which("dbt"), str(Path(sys.executable).with_name("dbt"))):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def write_latest(snapshot, latest: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [o for o in snapshot.topics if o.topic_id]
    table = pa.table({
        "cluster_id": [snapshot.cluster_id] * len(rows),
        "topic_id": [o.topic_id for o in rows],
        "topic_name": [o.name for o in rows],
        "partition_count": pa.array([o.partition_count for o in rows], pa.int32()),
        "replication_factor": pa.array([o.replication_factor for o in rows], pa.int32()),
        "is_internal": pa.array([o.is_internal for o in rows], pa.bool_()),
        "captured_at": [snapshot.captured_at] * len(rows),
    })
    tmp = latest / f".{snapshot.cluster_id}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, latest / f"{snapshot.cluster_id}.parquet")


def compare(dbt_db: Path, tl_home: Path) -> dict:
    """Per (cluster, topic ID): versions and deletion in dbt vs topic-lineage."""
    import duckdb

    from topic_lineage import warehouse as wh

    os.environ["TOPIC_LINEAGE_HOME"] = str(tl_home)
    # The one version the full refresh built (unvalidated, so not published).
    inc = wh.version_path(wh.list_versions()[-1]["version"], "topic_incarnations")
    con = duckdb.connect()
    con.execute(f"ATTACH '{dbt_db}' AS peer (READ_ONLY)")
    [(schema,)] = con.execute("SELECT schema_name FROM duckdb_tables() WHERE "
                              "database_name = 'peer' AND table_name = 'topic_versions'").fetchall()
    dbt = ("SELECT cluster_id, topic_id, count(*) FILTER (WHERE NOT coalesce(dbt_is_deleted = 'True', false)) AS versions, "
           "count(*) FILTER (WHERE dbt_is_deleted = 'True') AS deletions, "
           "bool_or(dbt_valid_to IS NULL AND dbt_is_deleted = 'True') AS deleted_now "
           f"FROM peer.{schema}.topic_versions GROUP BY ALL")
    tl = ("SELECT cluster_id, topic_id, count(*) AS versions, bool_or(deleted_at IS NOT NULL) AS deleted "
          f"FROM read_parquet('{inc}/**/*.parquet') GROUP BY ALL")
    query = f"""
        WITH d AS ({dbt}), t AS ({tl})
        SELECT
          cluster_id, topic_id,
          coalesce(d.deletions > 0 AND NOT t.deleted, false) AS false_deletions,
          coalesce(d.deletions > 1 OR (d.deletions > 0 AND NOT d.deleted_now), false)
              AS deleted_then_back,
          coalesce(d.deleted_now AND NOT t.deleted, false) AS shown_deleted_but_live,
          coalesce(d.versions > t.versions, false) AS extra_versions,
          coalesce(d.versions < t.versions, false) AS fewer_versions,
          t.deleted AND NOT coalesce(d.deleted_now, false) AS missed_deletions,
          d.topic_id IS NULL AS missing_in_dbt
        FROM t LEFT JOIN d USING (cluster_id, topic_id)
        ORDER BY cluster_id, topic_id
    """
    rows = con.execute(query).fetchall()
    counts = {"incarnations": len(rows)}
    which = {}
    for i, name in enumerate(DIFFERENCES, start=2):
        which[name] = [[r[0], r[1]] for r in rows if r[i]]
        counts[name] = len(which[name])
    return {"counts": counts, "incarnations": which}


def run_dbt_snapshot(dbt: str, work: Path, env: dict) -> dict:
    """One `dbt snapshot` process; returns its wall time and what dbt's run_results.json says."""
    results = work / "target" / "run_results.json"
    results.unlink(missing_ok=True)
    began = time.perf_counter()
    proc = subprocess.run(
        [dbt, "snapshot", "--project-dir", str(PROJECT), "--profiles-dir", str(PROJECT),
         "--target-path", str(work / "target"), "--log-path", str(work / "logs"), "--quiet"],
        env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if proc.returncode:
        raise SystemExit(f"dbt snapshot failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    run = json.loads(results.read_text())
    return {"wall_s": wall, "command": run["args"]["which"],
            "invocation_id": run["metadata"]["invocation_id"],
            "dbt_version": run["metadata"]["dbt_version"],
            "results": {r["unique_id"]: r["status"] for r in run["results"]}}


def history_facts(snapshots) -> dict:
    """What the replayed history holds, so a reader (and the test) can see every case occurred."""
    from tests.benchmarks.datagen import ERROR_NAME

    return {
        "snapshots": len(snapshots),
        "observations": sum(len(s.topics) for s in snapshots),
        "incomplete_snapshots": sum(not s.complete for s in snapshots),
        "describe_errors": sum(o.error == ERROR_NAME for s in snapshots for o in s.topics),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quick", action="store_true",
                        help="the test's size: 60 topics x 2 clusters x 5 rounds, every case forced")
    parser.add_argument("--dbt", help="the dbt executable (default: $PEER_DBT, .venv-dbt/, PATH, "
                                      "this venv)")
    parser.add_argument("--json-out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    dbt = find_dbt(args.dbt)
    if dbt is None and args.dbt:
        print(f"bench_dbt: no dbt at {args.dbt} (bash scripts/install_dbt.sh makes .venv-dbt/)",
              file=sys.stderr)
        return 2
    if dbt is None:
        print("bench_dbt: skipped: dbt is not installed (bash scripts/install_dbt.sh, "
              "pip install -e '.[bench]' or --dbt PATH)")
        return 0

    from tests.benchmarks.datagen import History
    from topic_lineage import store

    if args.quick:
        args.topics, args.clusters, args.rounds = QUICK["topics"], QUICK["clusters"], QUICK["rounds"]
        history = quick_history()
    else:
        history = History(args.topics, args.clusters)
    work = Path(tempfile.mkdtemp(prefix="tl-bench-dbt-"))
    latest, tl_home = work / "latest", work / "tl-home"
    latest.mkdir()
    env = {**os.environ, "PEER_DUCKDB": str(work / "peer.duckdb"), "PEER_LATEST": str(latest),
           "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DO_NOT_TRACK": "1"}
    os.environ["TOPIC_LINEAGE_HOME"] = str(tl_home)
    snapshots = sorted((s for r in history.rounds(0, args.rounds) for s in r),
                       key=lambda s: s.captured_at)
    runs = []
    started = time.perf_counter()
    for snapshot in snapshots:
        store.save(snapshot, "live")
        write_latest(snapshot, latest)
        runs.append(run_dbt_snapshot(dbt, work, env))
    replay = time.perf_counter() - started
    began = time.perf_counter()
    tl_env = {**os.environ, "TOPIC_LINEAGE_HOME": str(tl_home), "SPARK_LOCAL_IP": "127.0.0.1",
              "TOPIC_LINEAGE_MAX_AGE": "off"}
    proc = subprocess.run([str(SCRIPT), "build", "--full-refresh", "--no-validate",
                           "--no-publish"], env=tl_env,
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"topic-lineage build failed:\n{proc.stderr[-3000:]}")
    tl_full = time.perf_counter() - began
    facts = history_facts(snapshots)
    load = os.getloadavg()
    print(f"dbt peer benchmark ({dbt}, dbt {runs[0]['dbt_version']}): {args.topics} topics x "
          f"{args.rounds} rounds, {args.clusters} clusters, {len(snapshots)} snapshots "
          f"({facts['observations']} observations, {facts['incomplete_snapshots']} incomplete, "
          f"{facts['describe_errors']} describe errors); load average {load[0]:.1f}")
    print(f"  dbt snapshot: replay of {len(runs)} runs {replay:.1f} s (mean {replay / len(runs):.2f} s "
          f"per run, incl. writing the source file); one cycle (last run) {runs[-1]['wall_s']:.2f} s")
    print(f"  topic-lineage: full refresh (build --full-refresh --no-validate --no-publish) {tl_full:.1f} s")
    diff = compare(work / "peer.duckdb", tl_home)
    print("  incarnations where dbt differs from topic-lineage:")
    for key, value in diff["counts"].items():
        print(f"    {key:<24} {value}")
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "sizes": {"topics": args.topics, "clusters": args.clusters, "rounds": args.rounds,
                      "quick": args.quick},
            "history": facts,
            "dbt": {"executable": dbt, "runs": runs, "replay_s": replay,
                    "cycle_s": runs[-1]["wall_s"]},
            "topic_lineage": {"full_refresh_s": tl_full},
            "differences": diff["counts"],
            "difference_incarnations": diff["incarnations"],
            "load_average": load[0],
        }, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
