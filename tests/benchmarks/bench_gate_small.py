"""The quality gate on a small version, in process (pandas, DuckDB) against Spark (issue #24).

    .venv/bin/python -m tests.benchmarks.bench_gate_small [--topics 300] [--rounds 15] [--warm 3]

The seeded store of bench_small (300 topics over 3 clusters x 15 rounds, about 4,400
observations) is built once without the gate; then ``validate_version`` runs on that version
in a fresh process per path, each with its local Spark session already started (as in a build
or a ``validate`` command): the first call (cold: Great Expectations imported and its context
opened in that call) and ``--warm`` more. Paths: **in process** (the default for a small
version) and **spark** (``$TOPIC_LINEAGE_GATE_IN_PROCESS_MB=0``). Each call's Spark jobs are
counted with the session's status tracker. Prints a table and the JSON of all figures.
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
PATHS = {"in process": None, "spark": "0"}


def child(version: str, warm: int) -> None:
    """One process: a Spark session, then the gate ``1 + warm`` times; JSON on the last line."""
    from topic_lineage.quality.gate import validate_version
    from topic_lineage.spark import get_spark

    spark = get_spark("bench-gate-small")
    tracker = spark.sparkContext.statusTracker()
    runs = []
    for n in range(1 + warm):
        group = f"gate-{n}"
        spark.sparkContext.setJobGroup(group, group)
        started = time.perf_counter()
        result = validate_version(spark, version, max_age=None)
        seconds = time.perf_counter() - started
        spark.sparkContext.setJobGroup("", "")
        runs.append({"s": round(seconds, 2), "jobs": len(tracker.getJobIdsForGroup(group)),
                     "passed": result.success, "evaluated": result.evaluated})
    spark.stop()
    print(json.dumps(runs))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--child", metavar="VERSION", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.warm)
        return 0

    from tests.benchmarks.datagen import History

    work = Path(tempfile.mkdtemp(prefix="tl-bench-gate-"))
    env = dict(os.environ, TOPIC_LINEAGE_HOME=str(work / "home"), SPARK_LOCAL_IP="127.0.0.1")
    env.pop("TOPIC_LINEAGE_SPARK_REMOTE", None)
    os.environ.update(TOPIC_LINEAGE_HOME=env["TOPIC_LINEAGE_HOME"])
    result: dict = {"topics": args.topics, "rounds": args.rounds, "load_before": os.getloadavg()}
    try:
        History(topics=args.topics, clusters=3, seed=42).store_rounds(0, args.rounds)
        build = ("from topic_lineage.pipeline import run_build; from topic_lineage.spark import "
                 "get_spark; print(run_build(get_spark('bench'), validate=False, publish=False).version)")
        out = subprocess.run([sys.executable, "-c", build], env=env, cwd=ROOT, capture_output=True,
                             text=True, check=True)
        version = out.stdout.strip().splitlines()[-1]
        from topic_lineage import warehouse
        from topic_lineage.fsutil import files_bytes

        result["version_bytes"] = files_bytes(warehouse.version_path(version, "."))
        for label, limit in PATHS.items():
            run_env = dict(env)
            if limit is None:
                run_env.pop("TOPIC_LINEAGE_GATE_IN_PROCESS_MB", None)
            else:
                run_env["TOPIC_LINEAGE_GATE_IN_PROCESS_MB"] = limit
            out = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_gate_small",
                                  "--child", version, "--warm", str(args.warm)], env=run_env,
                                 cwd=ROOT, capture_output=True, text=True, check=False)
            if out.returncode:
                raise SystemExit(f"{label} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")
            result[label] = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["load_after"] = os.getloadavg()
    print(f"gate on a small version: {args.topics} topics x {args.rounds} rounds, 3 clusters, "
          f"{result['version_bytes']:,} bytes of files; load average before "
          f"{result['load_before'][0]:.1f}, after {result['load_after'][0]:.1f}")
    print(f"{'path':<12} {'cold s':>7} {'jobs':>5}   warm s (jobs)")
    for label in PATHS:
        cold, *warm = result[label]
        print(f"{label:<12} {cold['s']:>7.2f} {cold['jobs']:>5}   "
              + ", ".join(f"{run['s']:.2f} ({run['jobs']})" for run in warm))
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
