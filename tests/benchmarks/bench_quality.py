"""Cost of the quality gate vs the build it guards, on the realistic 10,000-topic history.

    .venv/bin/python -m tests.benchmarks.bench_quality [--topics 10000] [--rounds 24] [--master local[2]]

Stores ``rounds`` hourly rounds of ``topics`` live topics over 3 clusters (seeded,
tests/benchmarks/datagen.py), runs one full-refresh build (``spark_jobs/build.py`` in its own
process, as in production, not validated), then validates the built version with the gate in
this process (three GX checkpoints on Spark, Data Docs updated) twice: the first run includes
loading Great Expectations and the context, the second is the steady-state cost. Prints one JSON
line with the build seconds, both validation seconds and the ratio validation / build.
Freshness is judged against the history's own last snapshot (``now`` = newest captured_at).
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-quality-"))
    home = work / "home"
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)
    try:
        from tests.benchmarks.datagen import History
        from tests.benchmarks.run_all import run_build

        started = time.perf_counter()
        observations = History(args.topics, 3, args.seed).store_rounds(0, args.rounds)
        store_s = time.perf_counter() - started
        build = run_build(home, "bench", full=True, master=args.master)

        from topic_lineage.quality.gate import validate_version
        from topic_lineage.spark import get_spark
        from topic_lineage.store import read_runs

        newest = max(run["captured_at"] for run in read_runs(None))
        spark = get_spark("bench-quality", master=args.master,
                          conf={"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"})
        try:
            timings = []
            for _ in range(2):
                started = time.perf_counter()
                result = validate_version(spark, "bench", now=newest)
                timings.append(round(time.perf_counter() - started, 2))
        finally:
            spark.stop()
        print(json.dumps({
            "topics": args.topics, "rounds": args.rounds, "observations": observations,
            "row_counts": build["row_counts"], "store_s": round(store_s, 2),
            "build_s": build["build_s"], "build_process_wall_s": build["process_wall_s"],
            "validate_first_s": timings[0], "validate_steady_s": timings[1],
            "validate_over_build": round(timings[1] / build["process_wall_s"], 3),
            "gate_success": result.success, "failed": result.failed_names,
            "expectations": result.evaluated,
        }))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
