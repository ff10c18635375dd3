"""One big Kafka cluster in several Spark tasks (issue #53): local[1] against local[2], side by side.

    .venv/bin/python -m tests.benchmarks.bench_split [--topics 10000 --rounds 1000] [--standalone]
        [--skip-one-task] [--work DIR] [--keep] [--reuse-store] [--json-out FILE]

One cluster of ``topics`` x ``rounds`` observations (``datagen.History`` with one cluster: it
has the glitches, a broken listing that is held and confirmed, incomplete snapshots and describe
errors), then full refreshes, each in a process of its own (``bench_scaleout.build``: wall time,
peak resident set of the process tree and of each process in it):

- ``one_task_local1``: the cluster walked whole in one task (``TOPIC_LINEAGE_WALK_RANGE_BYTES``
  larger than the store: the engine before the split), on local[1];
- ``split_local1``, ``split_local2``: the default split (ranges of
  ``walk_job.RANGE_BYTES``: a task each diffs its snapshots, then one task walks the steps) on
  local[1] and local[2];
- with ``--standalone``, ``split_standalone``: the same on a standalone master with two workers
  of one core (which executors took part is in ``executors_used``);

and every version compared table by table with the first (``bench_scaleout.compare``). Prints one
line per step, then the JSON document; exit status 1 when a step fails or the tables differ.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.bench_scale import compared_status, generate, steps_of, stored
from tests.benchmarks.bench_scaleout import build, compare, on_standalone
from tests.benchmarks.run_all import log, utc_now

RANGE_BYTES_ENV = "TOPIC_LINEAGE_WALK_RANGE_BYTES"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--standalone", action="store_true", help="also on a two-worker standalone cluster")
    parser.add_argument("--skip-one-task", action="store_true", help="no one-task build (the larger sizes)")
    parser.add_argument("--work")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse-store", action="store_true")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="tl-split-"))
    work.mkdir(parents=True, exist_ok=True)
    home = work / "home"
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)
    doc: dict = {"work": str(work), "topics": args.topics, "rounds": args.rounds, "clusters": 1,
                 "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg(), "started_at": utc_now()}
    with steps_of(doc, args, work, "split"):
        if args.reuse_store:
            doc["generate"] = stored(home)
            shutil.rmtree(home / "warehouse", ignore_errors=True)
        else:
            log(f"split: generating {args.rounds} rounds x {args.topics} topics, one cluster")
            doc["generate"] = generate(home, args.topics, 1, args.rounds, args.seed)
        log(f"split: store {doc['generate']['observations']} observations, {doc['generate']['store_mib']} MiB")
        runs = doc["builds"] = {}
        steps = [("one_task_local1", "local[1]", str(10**15))] if not args.skip_one_task else []
        steps += [("split_local1", "local[1]", ""), ("split_local2", "local[2]", "")]
        for version, master, range_bytes in steps:
            os.environ[RANGE_BYTES_ENV] = range_bytes
            runs[version] = r = build(home, version, master)
            r["largest_process_mib"] = (r.get("largest_process") or {}).get("rss_mib")
            ranges = next(iter(r["walk_tasks"].values()), {}).get("ranges", [])
            log(f"split: {version} ({master}): build {r['build_s']} s, process {r['process_wall_s']} s, "
                f"process tree peak {r['driver_peak_rss_mib']} MiB, largest process "
                f"{r['largest_process_mib']} MiB, task peak RSS at most {r.get('task_peak_rss_mib_max')} MiB, "
                f"{len(ranges)} range task(s), executors {r.get('executors_used')}")
        os.environ[RANGE_BYTES_ENV] = ""
        if args.standalone:
            runs["split_standalone"] = s = on_standalone(home, work / "standalone", "split_standalone")
            log(f"split: standalone (2 workers x 1 core): build {s['build_s']} s, executors {s.get('executors_used')}")
        doc["ratio_split_local1_to_local2"] = round(runs["split_local1"]["build_s"] / runs["split_local2"]["build_s"], 2)
        doc["ratio_process_local1_to_local2"] = round(
            runs["split_local1"]["process_wall_s"] / runs["split_local2"]["process_wall_s"], 2)
        if "one_task_local1" in runs:
            doc["ratio_one_task_local1_to_split_local2"] = round(
                runs["one_task_local1"]["build_s"] / runs["split_local2"]["build_s"], 2)
        log(f"split: build time local[1]/local[2], split: {doc['ratio_split_local1_to_local2']} "
            f"(process wall {doc['ratio_process_local1_to_local2']}); one task local[1] / split local[2]: "
            f"{doc.get('ratio_one_task_local1_to_split_local2')}")
        doc["comparison"] = compare(home / "warehouse" / "versions", list(runs))
        log(f"split: outputs identical: {doc['comparison']['identical']}")
    return compared_status(doc)


if __name__ == "__main__":
    sys.exit(main())
