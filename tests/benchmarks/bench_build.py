"""Build benchmark: incremental cost vs history length, and full-refresh throughput.

    .venv/bin/python -m tests.benchmarks.bench_build [--quick] [--topics N] [--histories A B C]

For each history length (default 10 / 100 / 1,000 rounds of 10,000 live topics over 3 clusters,
seeded, tests/benchmarks/datagen.py): store the history, full refresh, then store ONE new
snapshot and build incrementally. Prints the incremental build times, their ratio largest vs
smallest history (goal <= 1.5), and for the largest history the full refresh's observations/s
and peak resident memory of the build process. Each build is ``spark_jobs/build.py`` in its own
process, as in production. ``--quick``: 1,000 topics, history 3 / 10 / 30.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    from tests.benchmarks.run_all import bench_builds

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--topics", type=int)
    parser.add_argument("--histories", type=int, nargs=3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    topics = args.topics or (1_000 if args.quick else 10_000)
    histories = args.histories or ([3, 10, 30] if args.quick else [10, 100, 1_000])
    work = Path(tempfile.mkdtemp(prefix="bench-build-"))
    try:
        incremental, full, _ = bench_builds(work, topics, histories, args.seed)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for run in incremental["runs"]:
        print(f"incremental: +{run['new_observations']} observations on {run['history_rounds']} "
              f"rounds ({run['history_observations']} observations): {run['build_s']:.1f} s "
              f"(process {run['process_wall_s']:.1f} s)")
    print(f"ratio largest vs smallest history: {incremental['ratio_largest_vs_smallest']} "
          f"(goal <= {incremental['goal']}: {'met' if incremental['meets_goal'] else 'NOT met'})")
    print(f"full refresh: {full['observations']} observations in {full['build_s']:.1f} s = "
          f"{full['observations_per_s']} observations/s, peak RSS {full['peak_rss_mib']} MiB")
    print(json.dumps({"incremental": incremental, "full_refresh": full}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
