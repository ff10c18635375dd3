"""Issue #16, goal 5: a full refresh at scale, its peak memory, and the DuckDB reference beside it.

    .venv/bin/python -m tests.benchmarks.bench_scale [--topics 20000 --rounds 5000 --clusters 3]
        [--work DIR] [--keep] [--reuse-store] [--json-out FILE] [--skip-reference] [--skip-compare]

Steps, each in a process of its own as a user runs it, peak resident set of the process tree
sampled every 0.2 s:
1. generate and store the seeded history (``datagen.History``; the default sizes give 100 M
   observations in 15,000 snapshot files);
2. ``spark_jobs/build.py --full-refresh`` on ``local[*]`` (no gate: the figure is the build's);
3. the DuckDB reference (``reference_duckdb.py``) on the same store;
4. a row-by-row comparison of the two outputs (multiset difference per table).

Prints one line per step as it ends, then the JSON document. Exit status 1 when a step fails (the
JSON names it and its last error line) or when the two outputs differ: a fast wrong answer is no
figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.run_all import PY, log, run_build, run_measured, utc_now
from topic_lineage.fsutil import files_bytes

RSS_GOAL_MIB = 4096


def _disk_mib(path: Path) -> float:
    return round(files_bytes(path) / 2**20, 1)


class StepFailed(RuntimeError):
    """A measured step's process failed; the message names the step and its last error line."""


def _child(home: Path, code: str, *args: str, what: str, cwd: Path = ROOT) -> dict:
    """Run ``python -c code args`` as a process of its own; its last stdout line is a JSON
    object, returned with the process's wall time and peak resident set."""
    env = dict(os.environ, TOPIC_LINEAGE_HOME=str(home), PYTHONPATH=str(ROOT))
    proc, wall, peak, at_peak = run_measured([PY, "-c", code, *args], env=env, cwd=cwd)
    wall = round(wall, 2)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["(no error output)"])[-1]
        raise StepFailed(f"{what} failed after {wall} s (exit {proc.returncode}, peak RSS {peak} MiB): {last}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result.update(process_wall_s=wall, peak_rss_mib=peak, peak_rss_by_process=at_peak)
    return result


def generate(home: Path, topics: int, clusters: int, rounds: int, seed: int) -> dict:
    code = (
        "import json; from tests.benchmarks.datagen import History; "
        f"h = History(topics={topics}, clusters={clusters}, seed={seed}); "
        f"print(json.dumps({{'observations': h.store_rounds(0, {rounds})}}))"
    )
    result = _child(home, code, what="generating the history")
    result.update(seconds=result["process_wall_s"], store_mib=_disk_mib(home / "snapshots"))
    return result


def stored(home: Path) -> dict:
    """The observations and size of a store left by an earlier run (``--reuse-store``): its rows
    that name a topic, counted by DuckDB over the store's Parquet files."""
    from tests.benchmarks import reference_duckdb as ref

    glob = ref._store_glob().replace("'", "''")  # the store of $TOPIC_LINEAGE_HOME, set by main()
    rows = ref.connect().execute(
        f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = false) WHERE topic_name IS NOT NULL"
    ).fetchone()[0]
    return {"observations": rows, "reused": True, "store_mib": _disk_mib(home / "snapshots")}


def reference(home: Path, out: Path) -> dict:
    code = (
        "import json, sys; from tests.benchmarks import reference_duckdb as r; "
        "print(json.dumps(r.build(sys.argv[1], database=sys.argv[2])))"
    )
    # In a database file DuckDB keeps the intermediate 100 M-row tables compressed; in memory it
    # spilled them uncompressed and filled 70 GB of disk. Its temporary files go beside the file:
    # the working directory, not the checkout.
    database = out.parent / "reference.duckdb"
    database.unlink(missing_ok=True)
    try:
        return _child(home, code, str(out), str(database), what="the DuckDB reference", cwd=out.parent)
    finally:
        database.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5_000)
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--work", help="working directory (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    parser.add_argument("--json-out", help="also write the JSON document to this file")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--reuse-store", action="store_true",
                        help="build the store a --keep run left in --work instead of generating one "
                             "(its sizes as that run's; 7 minutes saved at 100 M)")
    args = parser.parse_args(argv)
    if min(args.topics, args.rounds, args.clusters) < 1:
        parser.error("--topics, --rounds and --clusters must be at least 1")
    if args.reuse_store and not (args.work and (Path(args.work) / "home" / "snapshots").is_dir()):
        parser.error("--reuse-store needs --work DIR holding a store (DIR/home/snapshots) from a --keep run")

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="tl-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    home = work / "home"
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)
    doc = {"work": str(work), "topics": args.topics, "rounds": args.rounds, "clusters": args.clusters,
           "seed": args.seed, "cpus": os.cpu_count(), "started_at": utc_now()}
    status = 0
    try:
        if args.reuse_store:
            log(f"scale: reusing the store in {home}")
            doc["generate"] = stored(home)
            shutil.rmtree(home / "warehouse", ignore_errors=True)  # the earlier run's outputs
        else:
            log(f"scale: generating {args.rounds} rounds x {args.topics} topics, {args.clusters} clusters")
            doc["generate"] = generate(home, args.topics, args.clusters, args.rounds, args.seed)
        log(f"scale: stored {doc['generate']}")
        observations = doc["generate"]["observations"]

        log("scale: full refresh (spark_jobs/build.py --full-refresh, local[*], no gate)")
        full = run_build(home, "base", full=True, publish=False)
        full["observations_per_s"] = round(observations / full["build_s"])
        full["meets_rss_goal"] = full["peak_rss_mib"] <= RSS_GOAL_MIB
        full["output_mib"] = _disk_mib(home / "warehouse" / "versions" / "base")
        doc["full_refresh"] = full
        log(f"scale: full refresh {full}")

        if not args.skip_reference:
            log("scale: DuckDB reference")
            out = work / "reference-rows"
            try:
                doc["reference"] = reference(home, out)
            except StepFailed as failed:
                doc["reference"] = {"error": str(failed)}
                raise
            doc["spark_to_duckdb_ratio"] = round(full["build_s"] / doc["reference"]["seconds"], 2)
            log(f"scale: reference {doc['reference']}")
            if not args.skip_compare:
                from tests.benchmarks import reference_duckdb as ref

                started = time.perf_counter()
                doc["cross_check"] = ref.compare(out, home / "warehouse" / "versions" / "base")
                doc["cross_check"]["seconds"] = round(time.perf_counter() - started, 1)
                log(f"scale: cross-check {doc['cross_check']}")
    except StepFailed as failed:
        log(f"scale: {failed}")
        status = 1
    finally:
        finish(doc, args, work)
    return status or (0 if doc.get("cross_check", {}).get("identical", True) else 1)


@contextlib.contextmanager
def steps_of(doc: dict, args: argparse.Namespace, work: Path, name: str):
    """The block of a comparing benchmark's steps: a step that fails is logged and named in the
    document (``error``), which is printed (:func:`finish`) either way. :func:`compared_status`
    is then its exit status."""
    try:
        yield
    except Exception as failed:  # noqa: BLE001 - the document names the failed step; exit 1
        log(f"{name}: {type(failed).__name__}: {failed}")
        doc["error"] = f"{type(failed).__name__}: {failed}"
    finally:
        finish(doc, args, work)


def compared_status(doc: dict) -> int:
    """0 when no step failed and the versions compared identical, else 1."""
    return 0 if "error" not in doc and doc.get("comparison", {}).get("identical") else 1


def finish(doc: dict, args: argparse.Namespace, work: Path) -> None:
    """Print the JSON document (and write it to ``--json-out``); remove the working directory
    unless ``--keep`` or ``--work`` asked to keep it."""
    doc["finished_at"] = utc_now()
    text = json.dumps(doc, indent=1)
    print(text, flush=True)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    if not args.keep and not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
