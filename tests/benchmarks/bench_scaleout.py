"""Scale-out: one full refresh on local[1], local[2] and a two-worker standalone cluster.

    .venv/bin/python -m tests.benchmarks.bench_scaleout [--topics 16000 --rounds 1000 --clusters 8]
        [--quick] [--work DIR] [--keep] [--reuse-store] [--json-out FILE]

Why: the build is meant to derive one Kafka cluster per Spark task. Then a second core (local[2])
or a second worker should shorten a full refresh of many clusters; this benchmark is the
yardstick, and its row-by-row comparison says the answer does not depend on where tasks ran. The
default store is 8 clusters x 2,000 topics x 1,000 rounds = 16 M observations (about 2 M per
cluster); ``--quick`` is 8 x 100 x 24 (about 19,000).

Steps, each in a process of its own (``run_all.run_measured``: wall time, peak resident set of
the process tree sampled every 0.2 s, and each process's share at that peak):
1. generate and store the seeded history (``datagen.History``, as ``bench_scale``);
2. ``spark_jobs/build.py --full-refresh`` (no gate), master by ``$TOPIC_LINEAGE_SPARK_MASTER``:
   ``local[1]``, then ``local[2]``, then ``spark://`` on a standalone cluster of two workers with
   one core and 2 GiB each (:mod:`tests.servers.standalone`); there the executors are the
   workers' children, not the build's, so each worker's process tree is sampled as well;
3. the three versions compared table by table (multiset difference, DuckDB over their Parquet;
   above 20 M rows by bucket fingerprints first: :func:`compare`).

Prints one line per step as it ends, then the JSON document. Exit status 1 when a step fails or
the outputs differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.bench_scale import StepFailed, compared_status, generate, steps_of, stored
from tests.benchmarks.run_all import PY, PeakRss, log, run_measured, spark_env, utc_now

QUICK = {"topics": 800, "rounds": 24, "clusters": 8}
WORKERS, CORES_PER_WORKER, WORKER_MEMORY = 2, 1, "2g"


def build(home: Path, version: str, master: str, conf: dict | None = None,
          also_sample: dict[str, int] | None = None) -> dict:
    """One full refresh in its own process on ``master``; ``conf`` goes to the driver through
    ``PYSPARK_SUBMIT_ARGS`` (build.py takes no Spark settings); ``also_sample`` names processes
    outside the build's tree (the standalone workers) whose trees' peak RSS is measured too."""
    env = spark_env(home, master)
    env["PYSPARK_SUBMIT_ARGS"] = " ".join(
        [f"--conf {key}={value}" for key, value in {"spark.ui.showConsoleProgress": "false", **(conf or {})}.items()]
        + ["pyspark-shell"])
    samplers = {name: PeakRss(pid) for name, pid in (also_sample or {}).items()}
    cmd = [PY, str(ROOT / "spark_jobs" / "build.py"), "--version-id", version, "--full-refresh"]
    try:
        details: dict = {}
        proc, wall, peak, at_peak = run_measured(cmd, env=env, merge_stderr=True, details=details)
    finally:
        others = {name: {"peak_rss_mib": sampler.stop(), "at_peak": sampler.at_peak, "largest_process": sampler.largest}
                  for name, sampler in samplers.items()}
    if proc.returncode:
        last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise StepFailed(f"build {version} on {master} failed after {wall:.1f} s (exit {proc.returncode}): {last}")
    manifest = json.loads((home / "warehouse" / "versions" / version / "manifest.json").read_text())
    tasks = manifest.get("walk_tasks", {})
    fields = ("executor", "seconds", "walked", "peak_rss_mib")
    result = {"master": master, "build_s": manifest["seconds"], "process_wall_s": round(wall, 2),
              "driver_peak_rss_mib": peak, "driver_at_peak": at_peak, "row_counts": manifest["row_counts"],
              "largest_process": details.get("largest_process"),
              # each Kafka cluster's walk: the task's executor, time, observations, worker memory;
              # a split cluster's ranges too (issue #53)
              "walk_tasks": {cluster: {**{k: task[k] for k in fields},
                                       **({"ranges": [{k: r[k] for k in fields} for r in task["ranges"]]}
                                          if task.get("ranges") else {})}
                             for cluster, task in tasks.items()}}
    every = [part for task in tasks.values() for part in (task, *task.get("ranges", []))]
    if every:
        rates = [task["walked"] / task["seconds"] for task in tasks.values() if task["seconds"]]
        result["task_observations_per_s"] = {"min": round(min(rates)), "max": round(max(rates))}
        result["task_peak_rss_mib_max"] = max(task["peak_rss_mib"] for task in every)
        result["executors_used"] = sorted({str(task["executor"]) for task in every})
    if others:
        result["outside_driver"] = others
    return result


def on_standalone(home: Path, work: Path, version: str) -> dict:
    from tests.servers.standalone import standalone_cluster

    started = time.perf_counter()
    with standalone_cluster(workers=WORKERS, cores_per_worker=CORES_PER_WORKER, memory=WORKER_MEMORY,
                            work_dir=work) as cluster:
        start_s = round(time.perf_counter() - started, 1)
        daemons = {name: proc.pid for name, proc in cluster.processes.items()}
        result = build(home, version, cluster.master_url, cluster.driver_conf(), also_sample=daemons)
    result["cluster"] = {"workers": WORKERS, "cores_per_worker": CORES_PER_WORKER, "memory": WORKER_MEMORY,
                         "start_s": start_s, "logs": str(work)}
    # The worker launched an executor for the application where it has an executor directory.
    result["executors_per_worker"] = {
        worker.name: len(list(worker.glob("app-*/*/stderr"))) for worker in sorted(work.glob("worker-*"))
        if worker.is_dir()}
    return result


def _rows_sql(table_dir: Path, columns: str) -> str:
    glob = str(table_dir / "**" / "*.parquet").replace("'", "''")
    return f"SELECT {columns} FROM read_parquet('{glob}', union_by_name = true)"


EXACT_ROWS = 20_000_000
"""A table with more rows than this (in the first version) is compared by fingerprint: the
multiset difference of two 100 M-row tables held 20 GiB and spilled 26 GB before it was stopped
(2026-12-02), where a fingerprint reads each version once in bounded memory."""
BUCKETS = 256


def compare(versions_dir: Path, names: list[str], *, exact_rows: int = EXACT_ROWS) -> dict:
    """Rows of each table that one version has and the first one (``names[0]``) does not, and
    the other way round (duplicates count).

    Up to ``exact_rows`` rows, by ``EXCEPT ALL``. Above, each version's rows are split by their
    hash into :data:`BUCKETS` buckets, and a bucket's fingerprint is its row count and the sum of
    its rows' 64-bit hashes (a multiset's: order does not count, duplicates do); only buckets
    whose fingerprints differ are then compared with ``EXCEPT ALL``. Two tables that differ yet
    agree on every bucket would need a 64-bit hash collision. ``method`` says which was used.
    DuckDB runs with a memory limit and spills into a temporary directory of its own."""
    import tempfile

    import duckdb

    from topic_lineage import tables as t

    with tempfile.TemporaryDirectory(prefix="tl-compare-") as spill:
        con = duckdb.connect()
        con.execute("SET memory_limit = '4GB'")
        con.execute(f"SET temp_directory = '{spill}'")
        result: dict = {}
        for table in t.TABLES:
            present = {name: any((versions_dir / name / table).glob("**/*.parquet")) for name in names}
            if not any(present.values()):
                continue
            if not all(present.values()):
                result[table] = {"error": f"only in {[n for n, p in present.items() if p]}"}
                continue
            columns = ", ".join(t.ddl_columns(t.TABLE_DDL[table]))
            rows = {name: _rows_sql(versions_dir / name / table, columns) for name in names}
            base = names[0]
            entry = {"rows": {name: con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]
                              for name, sql in rows.items()}}
            by_hash = entry["rows"][base] > exact_rows
            entry["method"] = "bucket fingerprints, then EXCEPT ALL" if by_hash else "EXCEPT ALL"
            fingerprints = {name: _fingerprints(con, sql, columns) for name, sql in rows.items()} if by_hash else {}
            for other in names[1:]:
                where = ""
                if by_hash:
                    differ = sorted(b for b in set(fingerprints[base]) | set(fingerprints[other])
                                    if fingerprints[base].get(b) != fingerprints[other].get(b))
                    entry[f"buckets_differing_{base}_{other}"] = len(differ)
                    if not differ:
                        entry[f"only_{base}_not_{other}"] = entry[f"only_{other}_not_{base}"] = 0
                        continue
                    where = f" WHERE {bucket_sql(columns)} IN ({', '.join(map(str, differ))})"
                left, right = f"SELECT * FROM ({rows[base]}){where}", f"SELECT * FROM ({rows[other]}){where}"
                entry[f"only_{base}_not_{other}"] = con.execute(
                    f"SELECT count(*) FROM ({left} EXCEPT ALL {right})").fetchone()[0]
                entry[f"only_{other}_not_{base}"] = con.execute(
                    f"SELECT count(*) FROM ({right} EXCEPT ALL {left})").fetchone()[0]
            result[table] = entry
    result["identical"] = bool(result) and all(
        "error" not in entry and not any(v for k, v in entry.items() if k.startswith("only_"))
        for entry in result.values())
    return result


def bucket_sql(columns: str) -> str:
    """The SQL expression of a row's bucket (of :data:`BUCKETS`) by the hash of ``columns``."""
    return f"hash({columns}) % {BUCKETS}"


def _fingerprints(con, rows_sql: str, columns: str) -> dict[int, tuple[int, int]]:
    """Bucket -> (row count, sum of the rows' hashes) of the rows ``rows_sql`` selects."""
    answer = con.execute(
        f"SELECT {bucket_sql(columns)} AS bucket, count(*), sum(hash({columns})) "
        f"FROM ({rows_sql}) GROUP BY bucket").fetchall()
    return {int(bucket): (int(count), int(total)) for bucket, count, total in answer}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, help="live topics over all clusters (default 16000)")
    parser.add_argument("--rounds", type=int, help="snapshots per cluster (default 1000)")
    parser.add_argument("--clusters", type=int, help="Kafka clusters (default 8)")
    parser.add_argument("--quick", action="store_true", help=f"small sizes, {QUICK}")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--work", help="working directory (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    parser.add_argument("--reuse-store", action="store_true",
                        help="build the store a --keep run left in --work instead of generating one")
    parser.add_argument("--json-out", help="also write the JSON document to this file")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else {"topics": 16_000, "rounds": 1_000, "clusters": 8}
    topics, rounds, clusters = (getattr(args, k) or sizes[k] for k in ("topics", "rounds", "clusters"))
    if min(topics, rounds, clusters) < 1:
        parser.error("--topics, --rounds and --clusters must be at least 1")
    if args.reuse_store and not (args.work and (Path(args.work) / "home" / "snapshots").is_dir()):
        parser.error("--reuse-store needs --work DIR holding a store (DIR/home/snapshots) from a --keep run")

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="tl-scaleout-"))
    work.mkdir(parents=True, exist_ok=True)
    home = work / "home"
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)
    doc: dict = {"work": str(work), "topics": topics, "rounds": rounds, "clusters": clusters,
                 "seed": args.seed, "cpus": os.cpu_count(), "started_at": utc_now()}
    with steps_of(doc, args, work, "scaleout"):
        if args.reuse_store:
            doc["generate"] = stored(home)
            shutil.rmtree(home / "warehouse", ignore_errors=True)
        else:
            log(f"scaleout: generating {rounds} rounds x {topics} topics, {clusters} clusters")
            doc["generate"] = generate(home, topics, clusters, rounds, args.seed)
        log(f"scaleout: store {doc['generate']['observations']} observations, {doc['generate']['store_mib']} MiB")

        runs = doc["builds"] = {}
        for version, master in (("local1", "local[1]"), ("local2", "local[2]")):
            runs[version] = build(home, version, master)
            log(f"scaleout: {master}: build {runs[version]['build_s']} s, process {runs[version]['process_wall_s']} s, "
                f"peak RSS {runs[version]['driver_peak_rss_mib']} MiB")
        runs["standalone"] = s = on_standalone(home, work / "standalone", "standalone")
        outside = ", ".join(f"{name} tree {v['peak_rss_mib']} MiB" for name, v in s["outside_driver"].items())
        log(f"scaleout: standalone (2 workers x 1 core): build {s['build_s']} s, process {s['process_wall_s']} s, "
            f"driver peak RSS {s['driver_peak_rss_mib']} MiB; {outside}; executors {s['executors_per_worker']}")

        doc["ratio_local1_to_local2"] = round(runs["local1"]["build_s"] / runs["local2"]["build_s"], 2)
        doc["ratio_local1_to_standalone"] = round(runs["local1"]["build_s"] / s["build_s"], 2)
        doc["process_ratio_local1_to_local2"] = round(
            runs["local1"]["process_wall_s"] / runs["local2"]["process_wall_s"], 2)
        log(f"scaleout: build local[1]/local[2] {doc['ratio_local1_to_local2']} (goal >= 1.6; whole "
            f"process, JVM start included: {doc['process_ratio_local1_to_local2']}), "
            f"local[1]/standalone {doc['ratio_local1_to_standalone']}")
        for version, run in runs.items():
            log(f"scaleout: {version}: executors {run.get('executors_used')}, per task "
                f"{run.get('task_observations_per_s')} observations/s, worker peak RSS at most "
                f"{run.get('task_peak_rss_mib_max')} MiB")
        one = runs["local1"]
        if one.get("task_observations_per_s"):
            rate = one["task_observations_per_s"]["min"]
            doc["one_cluster_of_1000m_s"] = round(1e9 / rate)
            log(f"scaleout: one Kafka cluster is one task: 1,000 M observations at {rate:,} "
                f"observations/s (the slowest task of local[1]) take about {1e9 / rate / 60:.0f} min")

        started = time.perf_counter()
        doc["comparison"] = compare(home / "warehouse" / "versions", list(runs))
        doc["comparison"]["seconds"] = round(time.perf_counter() - started, 1)
        log(f"scaleout: outputs identical: {doc['comparison']['identical']} "
            f"({ {k: v['rows'] for k, v in doc['comparison'].items() if isinstance(v, dict) and 'rows' in v} })")
    return compared_status(doc)


if __name__ == "__main__":
    sys.exit(main())
