"""Live capture time on the local broker, against a bare describe_topics of the same names.

    .venv/bin/python tests/benchmarks/bench_capture.py [--quick] [--sizes 1000 10000] [--repeat 3]

For each size, a fresh local broker (tansu, in memory) gets that many single-partition topics.
Then, ``--repeat`` times each, alternating:

- ``capture``: :func:`topic_lineage.capture.capture_snapshot` end to end (new AdminClient,
  DescribeCluster, listing, batched describes, building the snapshot), without storing it;
- ``bare``: one ``describe_topics`` call for all the names on an already connected
  AdminClient, waiting for every future (the least work that reads the same IDs).

The store (a temporary ``TOPIC_LINEAGE_HOME``) holds one earlier capture of every topic and a
published version with each as a current incarnation, so ``capture`` includes reading which
topics are held as live (``known_live_read_s``: that read alone).

Hidden topics (``--hidden-at SIZE``, default the largest size): with the fault points
``hide@list`` and ``deny@describe`` (topic_lineage/faults.py: what an ACL does, which the local
broker cannot), the listing leaves out 0, 100 and all of the topics and describing those answers
TOPIC_AUTHORIZATION_FAILED, so the capture describes them by name. Each is compared, in the same
rounds, with ``listing only``: ``capture_snapshot`` told that nothing is held as live (what a
capture did before it checked hidden topics: no store read, no by-name describes).

Prints tables and a JSON document (median seconds, topics/s, ratios). The numbers are
wall-clock on a shared machine: compare them within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
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


def capture_once(bootstrap, expected, *, hidden: list[str] = (), listing_only=False) -> float:
    """One ``capture_snapshot``; ``hidden`` topics are left out of the listing and denied."""
    from topic_lineage.capture import capture_snapshot
    from topic_lineage.faults import FAULT_ENV

    names = ",".join(hidden)
    os.environ[FAULT_ENV] = f"hide@list:{names};deny@describe:{names}" if hidden else ""
    try:
        started = time.perf_counter()
        snap = capture_snapshot(
            "bench", {"bootstrap.servers": bootstrap}, timeout_s=120,
            known_live=(lambda cluster_id: ()) if listing_only else None,
        )
        elapsed = time.perf_counter() - started
    finally:
        os.environ.pop(FAULT_ENV, None)
    denied = sum(1 for t in snap.topics if t.error == "TOPIC_AUTHORIZATION_FAILED")
    if len(snap.topics) != expected or snap.error_topic_count != len(hidden) or not snap.complete \
            or denied != len(hidden):
        raise SystemExit(
            f"capture is wrong: {len(snap.topics)} topics, {snap.error_topic_count} errors, "
            f"complete={snap.complete} (expected {expected}, {len(hidden)} denied)"
        )
    return elapsed


@contextlib.contextmanager
def temporary_home():
    """A fresh TOPIC_LINEAGE_HOME for the measurement (the caller's is restored after)."""
    from topic_lineage.tables import HOME_ENV

    previous = os.environ.get(HOME_ENV)
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as home:
        os.environ[HOME_ENV] = home
        try:
            yield Path(home)
        finally:
            if previous is None:
                os.environ.pop(HOME_ENV, None)
            else:
                os.environ[HOME_ENV] = previous


def publish_incarnations(snapshot) -> None:
    """A published version with one current incarnation per topic of ``snapshot``."""
    from tests.published_tables import incarnation, publish

    rows = []
    for topic in snapshot.topics:
        rows += incarnation(f"k-{topic.name}", snapshot.cluster_id, [
            {"name": topic.name, "at": snapshot.captured_at, "topic_id": topic.topic_id}])
    publish("v-bench", rows)


def median_s(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def measure(size: int, repeat: int, hidden_counts: list[int] = ()) -> dict:
    from topic_lineage import store
    from topic_lineage.capture import capture_snapshot
    from topic_lineage.local_broker import LocalBroker
    from topic_lineage.stored_live import stored_live_names

    names = [f"bench-{i:06d}" for i in range(size)]
    with LocalBroker() as broker, temporary_home():
        started = time.perf_counter()
        broker.create_topics(names)
        create_s = time.perf_counter() - started
        # The steady state: the store holds every topic as live from an earlier capture, and a
        # published version holds each as one current incarnation.
        first = capture_snapshot("bench", {"bootstrap.servers": broker.bootstrap_servers},
                                 known_live=lambda cluster_id: ())
        store.save(first, "live")
        publish_incarnations(first)
        admin = broker.admin()
        bare_describe(admin, names[:10])  # connect once, outside the measurement
        captures, bares, reads = [], [], []
        listing_only: list[float] = []
        with_hidden: dict[int, list[float]] = {k: [] for k in hidden_counts}
        for _ in range(repeat):
            captures.append(capture_once(broker.bootstrap_servers, size))
            bares.append(bare_describe(admin, names))
            started = time.perf_counter()
            assert len(stored_live_names(broker.cluster_id)) == size
            reads.append(time.perf_counter() - started)
            if hidden_counts:
                listing_only.append(
                    capture_once(broker.bootstrap_servers, size, listing_only=True))
            for k in hidden_counts:
                with_hidden[k].append(capture_once(broker.bootstrap_servers, size,
                                                   hidden=names[:k]))
    capture_s, bare_s = statistics.median(captures), statistics.median(bares)
    result = {
        "topics": size,
        "repeat": repeat,
        "capture_s": round(capture_s, 4),
        "bare_describe_s": round(bare_s, 4),
        "ratio": round(capture_s / bare_s, 2) if bare_s else None,
        "capture_topics_per_s": round(size / capture_s),
        "bare_topics_per_s": round(size / bare_s),
        "capture_runs_s": [round(x, 4) for x in captures],
        "bare_runs_s": [round(x, 4) for x in bares],
        "known_live_read_s": median_s(reads),
        "create_topics_s": round(create_s, 2),
    }
    if hidden_counts:
        base = statistics.median(listing_only)
        result["listing_only_s"] = round(base, 4)
        result["listing_only_runs_s"] = [round(x, 4) for x in listing_only]
        result["hidden"] = [
            {
                "hidden": k,
                "capture_s": median_s(runs),
                "extra_s": round(statistics.median(runs) - base, 4),
                "ratio_vs_listing_only": round(statistics.median(runs) / base, 2),
                "runs_s": [round(x, 4) for x in runs],
            }
            for k, runs in with_hidden.items()
        ]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (100 and 1,000)")
    parser.add_argument("--sizes", type=int, nargs="+", help="topic counts (default 1000 10000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hidden-at", type=int, metavar="SIZE",
                        help="size at which 0, 100 and all topics are hidden (default: largest)")
    args = parser.parse_args(argv)
    # The capture warns about every hidden topic it describes by name: expected here.
    logging.getLogger("topic_lineage.capture").setLevel(logging.ERROR)
    sizes = args.sizes or ([100, 1000] if args.quick else [1000, 10000])
    hidden_at = args.hidden_at or max(sizes)
    if hidden_at not in sizes:
        sizes.append(hidden_at)

    results = []
    for size in sizes:
        print(f"measuring {size} topics ...", file=sys.stderr, flush=True)
        hidden = sorted({0, min(100, size), size}) if size == hidden_at else []
        results.append(measure(size, args.repeat, hidden))

    print(f"{'topics':>7} {'capture s':>10} {'bare s':>8} {'ratio':>6} {'capture/s':>10} "
          f"{'bare/s':>9} {'live read s':>12} {'create s':>9}")
    for r in results:
        print(f"{r['topics']:>7} {r['capture_s']:>10.3f} {r['bare_describe_s']:>8.3f} "
              f"{r['ratio']:>6} {r['capture_topics_per_s']:>10} {r['bare_topics_per_s']:>9} "
              f"{r['known_live_read_s']:>12.3f} {r['create_topics_s']:>9}")
    for r in results:
        if "hidden" not in r:
            continue
        print(f"\nhidden topics at {r['topics']} topics (listing only: {r['listing_only_s']:.3f} s)")
        print(f"{'hidden':>7} {'capture s':>10} {'extra s':>8} {'ratio':>6}")
        for h in r["hidden"]:
            print(f"{h['hidden']:>7} {h['capture_s']:>10.3f} {h['extra_s']:>8.3f} "
                  f"{h['ratio_vs_listing_only']:>6}")
    print(json.dumps({"benchmark": "capture", "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
