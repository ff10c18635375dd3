"""Live capture time on the local broker, against a bare describe_topics of the same names.

    .venv/bin/python tests/benchmarks/bench_capture.py [--quick] [--sizes 1000 10000] [--repeat 3]

For each size, a fresh local broker (tansu, in memory) gets that many single-partition topics.
Then, ``--repeat`` times each, alternating:

- ``capture``: :func:`topic_lineage.capture.capture_snapshot` end to end (new AdminClient,
  DescribeCluster, listing, batched describes, building the snapshot), without storing it;
- ``bare``: one ``describe_topics`` call for all the names on an already connected
  AdminClient, waiting for every future (the least work that reads the same IDs).

Prints a table and a JSON document (median seconds, topics/s, capture/bare ratio). The numbers
are wall-clock on a shared machine: compare them within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def bare_describe(admin, names) -> float:
    from confluent_kafka import TopicCollection

    started = time.perf_counter()
    futures = admin.describe_topics(TopicCollection(names), request_timeout=120)
    for future in futures.values():
        future.result(timeout=120)
    return time.perf_counter() - started


def capture_once(bootstrap, expected) -> float:
    from topic_lineage.capture import capture_snapshot

    started = time.perf_counter()
    snap = capture_snapshot("bench", {"bootstrap.servers": bootstrap}, timeout_s=120)
    elapsed = time.perf_counter() - started
    if len(snap.topics) != expected or snap.error_topic_count or not snap.complete:
        raise SystemExit(
            f"capture is wrong: {len(snap.topics)} topics, {snap.error_topic_count} errors, "
            f"complete={snap.complete} (expected {expected})"
        )
    return elapsed


def measure(size: int, repeat: int) -> dict:
    from topic_lineage.local_broker import LocalBroker

    names = [f"bench-{i:06d}" for i in range(size)]
    with LocalBroker() as broker:
        started = time.perf_counter()
        broker.create_topics(names)
        create_s = time.perf_counter() - started
        admin = broker.admin()
        bare_describe(admin, names[:10])  # connect once, outside the measurement
        captures, bares = [], []
        for _ in range(repeat):
            captures.append(capture_once(broker.bootstrap_servers, size))
            bares.append(bare_describe(admin, names))
    capture_s, bare_s = statistics.median(captures), statistics.median(bares)
    return {
        "topics": size,
        "repeat": repeat,
        "capture_s": round(capture_s, 4),
        "bare_describe_s": round(bare_s, 4),
        "ratio": round(capture_s / bare_s, 2) if bare_s else None,
        "capture_topics_per_s": round(size / capture_s),
        "bare_topics_per_s": round(size / bare_s),
        "capture_runs_s": [round(x, 4) for x in captures],
        "bare_runs_s": [round(x, 4) for x in bares],
        "create_topics_s": round(create_s, 2),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (100 and 1,000)")
    parser.add_argument("--sizes", type=int, nargs="+", help="topic counts (default 1000 10000)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = args.sizes or ([100, 1000] if args.quick else [1000, 10000])

    results = []
    for size in sizes:
        print(f"measuring {size} topics ...", file=sys.stderr, flush=True)
        results.append(measure(size, args.repeat))

    print(f"{'topics':>7} {'capture s':>10} {'bare s':>8} {'ratio':>6} {'capture/s':>10} "
          f"{'bare/s':>9} {'create s':>9}")
    for r in results:
        print(f"{r['topics']:>7} {r['capture_s']:>10.3f} {r['bare_describe_s']:>8.3f} "
              f"{r['ratio']:>6} {r['capture_topics_per_s']:>10} {r['bare_topics_per_s']:>9} "
              f"{r['create_topics_s']:>9}")
    print(json.dumps({"benchmark": "capture", "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
