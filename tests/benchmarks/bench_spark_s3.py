"""What S3 costs a Spark session (issue #45): a new driver's start and first job with and without
the S3A jars (``local[*]``), and a write and read of ``--rows`` rows as Parquet on S3 against the
same on local disk. Each run is a process of its own (``tests/spark_s3_job.py``).

    AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... AWS_ENDPOINT_URL=http://127.0.0.1:8333 \\
        .venv/bin/python -m tests.benchmarks.bench_spark_s3 --bucket lineage [--rows 1000000] [--runs 3]

The bucket must exist. Prints one line per run and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _job(spec: dict) -> dict:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tests.spark_s3_job", json.dumps(spec)], cwd=ROOT,
                          capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if "crash" in answer or answer.get("error"):
        raise SystemExit(answer.get("crash") or answer.get("error"))
    answer["process_s"] = time.monotonic() - started
    return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_spark_s3")
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    s3 = [f"s3://{args.bucket}"]
    figures: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)
        print(f"{name:40s} {value:6.2f} s", flush=True)

    for _ in range(args.runs):
        for label, locations in (("without S3A jars", []), ("with S3A jars", s3)):
            answer = _job({"action": "session", "master": "local[*]", "locations": locations})
            note(f"session start, {label}", answer["session_s"])
            note(f"start + first job, {label}", answer["first_job_s"])
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as local:
        for _ in range(args.runs):
            for label, url, locations in (
                    ("local disk", f"file://{local}/{uuid.uuid4().hex}", []),
                    ("S3", f"s3://{args.bucket}/bench/{uuid.uuid4().hex}", s3)):
                answer = _job({"action": "roundtrip", "master": "local[*]", "url": url,
                               "rows": args.rows, "partitions": 4, "locations": locations})
                note(f"write {args.rows:,} rows, {label}", answer["write_s"])
                note(f"read + compare, {label}", answer["read_s"])
    print(f"medians of {args.runs} runs ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}):")
    for name, values in figures.items():
        print(f"  {name:40s} {statistics.median(values):6.2f} s  ({', '.join(f'{v:.1f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
