"""The home on object storage (issue #45): what a build costs on S3 next to the same build on the
local disk, end to end as the user waits for it (the CLI, each command a process of its own).

    .venv/bin/python -m tests.benchmarks.bench_object_store [--topics 300] [--rounds 15]
                                                           [--more 15] [--repeat 1]

One seeded history (tests/benchmarks/datagen.py) is stored twice: in a local home (the
embedded catalog, as today) and in a home on a real S3 server on loopback (SeaweedFS,
tests.servers.s3_server) with its catalog on PostgreSQL (the deployment's own server):

- **full refresh**: ``topic-lineage build --full-refresh`` on each (build, gate, publish);
  goal: S3 at most 1.5x the local disk;
- **no-op**: ``topic-lineage build`` with nothing new, on S3, through a proxy that counts the
  requests (tests.servers.s3_faults); goal: at most 1 s, and a number of requests that
  does not grow with the stored snapshots: ``--more`` rounds are stored and built, then the
  no-op is measured again;
- **incremental**: the build of those ``--more`` rounds, on S3 through the same proxy (its
  requests by operation: the files it keeps of its base are referenced, not uploaded again).

Each S3 command runs with an empty working copy (``TOPIC_LINEAGE_WORK_DIR``), as a task on a
new worker does. Prints a table and the JSON of all figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
CLI = str(ROOT / ".venv" / "bin" / "topic-lineage")
GOALS = {"full_refresh_ratio": 1.5, "noop_s": 1.0}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PYICEBERG_", "TOPIC_LINEAGE_", "AWS_", "OPENLINEAGE"))}


def store(env: dict, topics: int, first: int, last: int) -> None:
    code = ("from tests.benchmarks.datagen import History; "
            f"print(History(topics={topics}, clusters=3, seed=7).store_rounds({first}, {last}))")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env,
                   cwd=str(ROOT))


def timed(args: list[str], env: dict, work: Path | None = None) -> float:
    """Seconds of one CLI command (a fresh working copy when ``work`` is given)."""
    if work is not None:
        work.mkdir(parents=True)
        env = {**env, "TOPIC_LINEAGE_WORK_DIR": str(work)}
    started = time.monotonic()
    done = subprocess.run([CLI, *args], env=env, capture_output=True, text=True, cwd=str(ROOT),
                          check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"topic-lineage {' '.join(args)} failed: {done.stdout[-500:]}{done.stderr[-1500:]}")
    return seconds


def put_bytes(proxy) -> dict[str, int]:
    """The bytes of the objects uploaded through ``proxy`` since its last reset (their decoded
    length where the client signed chunks), in all and by part of the home (``snapshots``,
    ``warehouse/versions``, ``warehouse/iceberg``, ``quality``, ...)."""
    by_area: dict[str, int] = {}
    for request, _, _ in proxy.requests():
        if request.operation == "PUT":
            headers = {k.lower(): v for k, v in request.headers}
            size = int(headers.get("x-amz-decoded-content-length") or headers.get("content-length") or 0)
            parts = request.path.strip("/").split("/")[2:]  # bucket, home prefix, then the home's
            area = "/".join(parts[:2]) if parts[:1] == ["warehouse"] else (parts[0] if parts else "")
            by_area[area] = by_area.get(area, 0) + size
    return {"total": sum(by_area.values()), **dict(sorted(by_area.items()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--more", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)

    from tests.catalog_postgres import CatalogPostgres
    from tests.servers.s3_faults import S3FaultProxy
    from tests.servers.s3_server import S3Server

    work = Path(tempfile.mkdtemp(prefix="tl-bench-s3-"))
    result: dict = {"topics": args.topics, "rounds": args.rounds, "clusters": 3,
                    "cores": os.cpu_count(), "load_before": os.getloadavg()[0]}
    catalog = CatalogPostgres(work / "postgres").start()
    try:
        with S3Server() as server, S3FaultProxy(server.endpoint) as proxy:
            log(server.describe())
            local = {**clean_env(), "TOPIC_LINEAGE_HOME": str(work / "local-home")}
            remote = {**clean_env(), **server.env(), "TOPIC_LINEAGE_HOME": f"s3://{server.bucket}/home",
                      "TOPIC_LINEAGE_ICEBERG_CATALOG": "bench", "PYICEBERG_CATALOG__BENCH__TYPE": "sql",
                      "PYICEBERG_CATALOG__BENCH__URI": catalog.database("bench")}
            counted = {**remote, **server.env(proxy.endpoint)}
            log(f"storing {args.rounds} rounds of {args.topics} topics, locally and on S3")
            store(local, args.topics, 0, args.rounds)
            started = time.monotonic()
            store({**remote, "TOPIC_LINEAGE_WORK_DIR": str(work / "store-1")}, args.topics, 0, args.rounds)
            result["store_on_s3_s"] = round(time.monotonic() - started, 2)

            full_local, full_s3 = [], []
            for i in range(args.repeat):  # alternating, so both see the same machine
                full_local.append(timed(["build", "--full-refresh"], local))
                full_s3.append(timed(["build", "--full-refresh"], remote, work / f"full-{i}"))
                log(f"full refresh: local {full_local[-1]:.1f} s, S3 {full_s3[-1]:.1f} s")
            result["full_refresh_local_s"] = round(statistics.median(full_local), 2)
            result["full_refresh_s3_s"] = round(statistics.median(full_s3), 2)
            result["full_refresh_ratio"] = round(result["full_refresh_s3_s"] / result["full_refresh_local_s"], 2)

            def noop(tag: str) -> dict:
                proxy.reset_counts()
                seconds = timed(["build"], counted, work / f"noop-{tag}")
                return {"seconds": round(seconds, 2), "requests": proxy.total(),
                        "by_operation": proxy.counts(), "summary": proxy.summary()}

            result["noop"] = noop("1")
            log(f"no-op: {result['noop']['seconds']} s, {result['noop']['summary']}")
            store({**remote, "TOPIC_LINEAGE_WORK_DIR": str(work / "store-2")}, args.topics,
                  args.rounds, args.rounds + args.more)
            # an incremental build in an empty working copy: the files it keeps of its base are
            # referenced, not uploaded again (what it puts is what it derived)
            proxy.reset_counts()
            seconds = timed(["build"], counted, work / "incremental")
            result["incremental"] = {"seconds": round(seconds, 2), "requests": proxy.total(),
                                     "by_operation": proxy.counts(), "summary": proxy.summary(),
                                     "bytes_put": put_bytes(proxy)}
            log(f"incremental on S3: {seconds:.1f} s, {proxy.summary()}, "
                f"bytes put: {result['incremental']['bytes_put']}")
            result["noop_after_more"] = noop("2")
            log(f"no-op after {args.more} more rounds: {result['noop_after_more']['seconds']} s, "
                f"{result['noop_after_more']['summary']}")
            result["stored_snapshots_after_more"] = 3 * (args.rounds + args.more)
    finally:
        catalog.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["goals"] = {
        "full_refresh_ratio <= 1.5": result["full_refresh_ratio"] <= GOALS["full_refresh_ratio"],
        "noop <= 1 s": result["noop"]["seconds"] <= GOALS["noop_s"],
        "noop requests do not grow": result["noop_after_more"]["requests"] <= result["noop"]["requests"],
    }
    print(f"full refresh, {args.topics} topics x {args.rounds} rounds: local {result['full_refresh_local_s']} s, "
          f"S3 {result['full_refresh_s3_s']} s, ratio {result['full_refresh_ratio']} (goal <= 1.5)")
    print(f"no-op on S3: {result['noop']['seconds']} s, {result['noop']['summary']}; after "
          f"{args.more} more rounds: {result['noop_after_more']['seconds']} s, "
          f"{result['noop_after_more']['summary']} (goal <= 1 s, requests not growing)")
    print(f"incremental on S3 after {args.more} more rounds: {result['incremental']['seconds']} s, "
          f"{result['incremental']['summary']}, bytes put: {result['incremental']['bytes_put']}")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
