"""Peer benchmark: the same generated history through `dbt snapshot` (dbt-core + dbt-duckdb).

    python tests/benchmarks/bench_dbt.py [--topics 1000 --clusters 2 --rounds 20] [--dbt PATH]

dbt is an optional dependency (``pip install -e '.[bench]'``, or any venv: ``--dbt`` names its
``dbt`` executable); without it this prints why and exits 0. The dbt project is
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


def find_dbt(explicit: str | None) -> str | None:
    for candidate in (explicit, os.environ.get("PEER_DBT"), shutil.which("dbt"),
                      str(Path(sys.executable).with_name("dbt"))):
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
    inc = wh.version_path(wh.current_version(), "topic_incarnations")
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
          count(*) AS incarnations,
          count(*) FILTER (WHERE d.deletions > 0 AND NOT t.deleted) AS false_deletions,
          count(*) FILTER (WHERE d.deletions > 1 OR (d.deletions > 0 AND NOT d.deleted_now))
              AS deleted_then_back,
          count(*) FILTER (WHERE d.deleted_now AND NOT t.deleted) AS shown_deleted_but_live,
          count(*) FILTER (WHERE d.versions > t.versions) AS extra_versions,
          count(*) FILTER (WHERE d.versions < t.versions) AS fewer_versions,
          count(*) FILTER (WHERE t.deleted AND NOT coalesce(d.deleted_now, false)) AS missed_deletions,
          count(*) FILTER (WHERE d.topic_id IS NULL) AS missing_in_dbt
        FROM t LEFT JOIN d USING (cluster_id, topic_id)
    """
    names = [c[0] for c in con.execute(query).description]
    return dict(zip(names, con.execute(query).fetchone()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--dbt", help="the dbt executable (default: $PEER_DBT, PATH, this venv)")
    args = parser.parse_args(argv)
    dbt = find_dbt(args.dbt)
    if dbt is None:
        print("bench_dbt: skipped: dbt is not installed (pip install -e '.[bench]' or --dbt PATH)")
        return 0

    from tests.benchmarks.datagen import History
    from topic_lineage import store

    work = Path(tempfile.mkdtemp(prefix="tl-bench-dbt-"))
    latest, tl_home = work / "latest", work / "tl-home"
    latest.mkdir()
    env = {**os.environ, "PEER_DUCKDB": str(work / "peer.duckdb"), "PEER_LATEST": str(latest),
           "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DO_NOT_TRACK": "1"}
    os.environ["TOPIC_LINEAGE_HOME"] = str(tl_home)
    snapshots = sorted((s for r in History(args.topics, args.clusters).rounds(0, args.rounds) for s in r),
                       key=lambda s: s.captured_at)
    runs = []
    started = time.perf_counter()
    for snapshot in snapshots:
        store.save(snapshot, "live")
        write_latest(snapshot, latest)
        began = time.perf_counter()
        proc = subprocess.run(
            [dbt, "snapshot", "--project-dir", str(PROJECT), "--profiles-dir", str(PROJECT),
             "--target-path", str(work / "target"), "--log-path", str(work / "logs"), "--quiet"],
            env=env, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise SystemExit(f"dbt snapshot failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        runs.append(time.perf_counter() - began)
    replay = time.perf_counter() - started
    began = time.perf_counter()
    tl_env = {**os.environ, "TOPIC_LINEAGE_HOME": str(tl_home), "SPARK_LOCAL_IP": "127.0.0.1",
              "TOPIC_LINEAGE_MAX_AGE": "off"}
    proc = subprocess.run([str(SCRIPT), "build", "--full-refresh", "--no-validate"], env=tl_env,
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"topic-lineage build failed:\n{proc.stderr[-3000:]}")
    tl_full = time.perf_counter() - began
    print(f"dbt peer benchmark ({dbt}): {args.topics} topics x {args.rounds} rounds, "
          f"{args.clusters} clusters, {len(snapshots)} snapshots; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"  dbt snapshot: replay of {len(runs)} runs {replay:.1f} s (mean {replay / len(runs):.2f} s "
          f"per run, incl. writing the source file); one cycle (last run) {runs[-1]:.2f} s")
    print(f"  topic-lineage: full refresh (build --full-refresh --no-validate) {tl_full:.1f} s")
    diff = compare(work / "peer.duckdb", tl_home)
    print("  incarnations where dbt differs from topic-lineage:")
    for key, value in diff.items():
        print(f"    {key:<24} {value}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
