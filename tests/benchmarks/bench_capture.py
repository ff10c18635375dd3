"""Live capture time on the local broker, against a bare describe_topics of the same names.

    .venv/bin/python tests/benchmarks/bench_capture.py [--quick] [--sizes 1000 10000] [--repeat 3]

For each size, a fresh local broker (Apache Kafka, KRaft) gets that many single-partition topics.
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

Consumer groups (issue #26), a mode of its own:

    .venv/bin/python tests/benchmarks/bench_capture.py --groups 1000 --group-topics 10 \
        [--sizes 1000] [--partitions 1] [--repeat 5] [--json-out FILE]

For each size (default 1,000 topics; 100 with ``--quick``), a fresh local broker gets that many
topics of ``--partitions`` partitions each, and ``--groups`` consumer groups each commit an
offset (0: the topics are empty, so each is an honest position at the log end) on every
partition of ``--group-topics`` of them (group ``i`` on topics ``i*K .. i*K+K-1`` modulo the
topic count, so the groups cover every topic when groups x group-topics >= topics). The offsets
are committed with ``alter_consumer_group_offsets`` (one group per request: the client allows no
more), many requests in flight, and read back before measuring. Then, ``--repeat`` times each,
alternating (the order swapped every round):

- ``with groups``: ``capture_snapshot(..., groups=True)`` (the default: the topic capture, then
  :func:`topic_lineage.group_capture.capture_groups`), checked to hold every group, each with
  all its committed offsets and a log end offset for each, and ``groups_complete`` true: the
  run fails loudly otherwise;
- ``topics only``: ``capture_snapshot(..., groups=False)`` (what ``--no-groups`` runs).

The store holds the same steady state as above (an earlier capture, a published version). The
figure is the ratio of the medians (with groups / topics only; issue #26: within 2x at 1,000
groups x 10 topics). Each round also times the phases of the group capture alone (listing,
describes, committed offsets, log end offsets) on a connected client, to show where the time
goes.
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
    from topic_lineage.local.broker import LocalBroker
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
    groups = parser.add_argument_group("consumer groups (issue #26)")
    groups.add_argument("--groups", type=int, metavar="N",
                        help="measure the consumer group capture with N groups (a mode of its "
                             "own; --sizes: topic counts, default 1000, 100 with --quick)")
    groups.add_argument("--group-topics", type=int, default=10, metavar="K",
                        help="topics each group has committed offsets on (default 10)")
    groups.add_argument("--partitions", type=int, default=1,
                        help="partitions per topic in the groups mode (default 1)")
    parser.add_argument("--json-out", type=Path, metavar="FILE",
                        help="also write the JSON document to FILE")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.groups is not None:
        return main_groups(parser, args)
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
    write_json({"benchmark": "capture", "results": results}, args.json_out)
    return 0


def write_json(document: dict, path: Path | None) -> None:
    text = json.dumps(document, indent=2)
    print(text)
    if path is not None:
        path.write_text(text + "\n")


# --- consumer groups (issue #26) -------------------------------------------------------------


def group_name(i: int) -> str:
    return f"bench-group-{i:06d}"


def group_topics(i: int, names: list[str], per_group: int) -> list[str]:
    """The topics group ``i`` commits on: ``per_group`` consecutive ones, modulo the count."""
    return [names[(i * per_group + j) % len(names)] for j in range(per_group)]


def _drain(admin, submit, items, window: int, what: str) -> dict:
    """Run ``submit(item) -> {key: future}`` for every item, ``window`` requests in flight; the
    result of every future by key. Fails loudly on the first error."""
    from confluent_kafka import KafkaException

    results: dict = {}
    in_flight: list[dict] = []

    def settle(futures: dict) -> None:
        for key, future in futures.items():
            try:
                results[key] = future.result(timeout=120)
            except KafkaException as exc:
                raise SystemExit(f"{what} failed for {key}: {exc.args[0]}") from None

    for item in items:
        in_flight.append(dict(submit(item)))
        if len(in_flight) >= window:
            settle(in_flight.pop(0))
    for futures in in_flight:
        settle(futures)
    return results


def commit_group_offsets(broker, names: list[str], groups: int, per_group: int,
                         partitions: int, *, window: int = 64) -> dict[str, int]:
    """Commit offset 0 on every partition of each group's topics (``alter_consumer_group_offsets``,
    ``window`` requests in flight), read them back, and return ``{group: offsets read back}``
    (fails loudly when any group lacks one)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = broker.admin()
    expected = {
        group_name(i): {(t, p) for t in group_topics(i, names, per_group) for p in range(partitions)}
        for i in range(groups)
    }

    def alter(group_id):
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, 0) for t, p in sorted(expected[group_id])])
        return admin.alter_consumer_group_offsets([request], request_timeout=120)

    def read(group_id):
        return admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)],
                                                 request_timeout=120)

    _drain(admin, alter, expected, window, "committing offsets")
    read_back = _drain(admin, read, expected, window, "reading committed offsets back")
    counts = {}
    for group_id, answer in read_back.items():
        seen = {(tp.topic, tp.partition) for tp in answer.topic_partitions or ()
                if tp.error is None and tp.offset == 0}
        if seen != expected[group_id]:
            raise SystemExit(f"group {group_id}: {len(seen)} committed offset(s) read back, "
                             f"expected {len(expected[group_id])}")
        counts[group_id] = len(seen)
    return counts


def check_group_snapshot(snap, topics: int, groups: int, offsets_per_group: int) -> None:
    """Fail loudly unless the snapshot holds every topic, every group, each with all its committed
    offsets and their log end offsets, and ``groups_complete``: measuring an empty or partial
    group capture would be worthless."""
    problems = []
    if len(snap.topics) != topics or snap.error_topic_count or not snap.complete:
        problems.append(f"{len(snap.topics)} topics, {snap.error_topic_count} errors, "
                        f"complete={snap.complete} (expected {topics}, none, True)")
    if snap.groups_complete is not True:
        problems.append(f"groups_complete={snap.groups_complete}")
    ours = [g for g in snap.groups if g.group_id.startswith("bench-group-")]
    if len(ours) != groups or len(snap.groups) != groups:
        problems.append(f"{len(snap.groups)} groups ({len(ours)} of the bench's), expected {groups}")
    wrong = [g.group_id for g in ours if g.error is not None or len(g.offsets) != offsets_per_group
             or any(o.committed_offset != 0 or o.log_end_offset is None for o in g.offsets)]
    if wrong:
        first = next(g for g in ours if g.group_id == wrong[0])
        problems.append(f"{len(wrong)} group(s) wrong, e.g. {first.group_id}: error={first.error}, "
                        f"{len(first.offsets)} offsets (expected {offsets_per_group}, each "
                        f"committed 0 with a log end offset): {first.offsets[:3]}")
    if problems:
        raise SystemExit("group capture is wrong: " + "; ".join(problems))


def check_topics_only(snap, topics: int) -> None:
    if len(snap.topics) != topics or not snap.complete or snap.groups_complete is not None \
            or snap.groups:
        raise SystemExit(f"topics-only capture is wrong: {len(snap.topics)} topics, "
                         f"complete={snap.complete}, groups_complete={snap.groups_complete}, "
                         f"{len(snap.groups)} groups")


def group_phases(bootstrap: str, max_in_flight: int) -> dict[str, float]:
    """The group capture's phases, timed one by one on a new, connected AdminClient with the
    ``max_in_flight`` that ``capture_snapshot`` passes on (its own)."""
    from confluent_kafka.admin import AdminClient

    from topic_lineage.group_capture import GroupCapture

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=30)
    run = GroupCapture(admin, time.monotonic() + 120, max_in_flight=max_in_flight)
    timings = {}
    started = time.perf_counter()
    group_ids, _ = run.list_groups()
    timings["list"] = time.perf_counter() - started
    started = time.perf_counter()
    run.describe(group_ids)
    timings["describe"] = time.perf_counter() - started
    started = time.perf_counter()
    offsets, _ = run.committed_offsets(group_ids)
    timings["committed_offsets"] = time.perf_counter() - started
    started = time.perf_counter()
    run.log_end_offsets({(t, p) for seen in offsets.values() for t, p, _ in seen})
    timings["log_end_offsets"] = time.perf_counter() - started
    return timings


def measure_groups(size: int, groups: int, per_group: int, partitions: int, repeat: int) -> dict:
    from topic_lineage import store
    from topic_lineage.capture import DEFAULT_MAX_IN_FLIGHT, capture_snapshot
    from topic_lineage.local.broker import LocalBroker

    names = [f"bench-{i:06d}" for i in range(size)]
    offsets_per_group = per_group * partitions
    with LocalBroker() as broker, temporary_home():
        bootstrap = broker.bootstrap_servers
        started = time.perf_counter()
        broker.create_topics([(n, partitions) for n in names])
        create_s = time.perf_counter() - started
        # The steady state of the topic benchmark: the store holds every topic as live from an
        # earlier capture, and a published version holds each as one current incarnation.
        first = capture_snapshot("bench", {"bootstrap.servers": bootstrap},
                                 known_live=lambda cluster_id: (), groups=False)
        store.save(first, "live")
        publish_incarnations(first)
        broker.ensure_offsets_topic()  # as on any cluster whose groups ever committed
        started = time.perf_counter()
        read_back = commit_group_offsets(broker, names, groups, per_group, partitions)
        commit_s = time.perf_counter() - started
        print(f"  {groups} groups x {offsets_per_group} committed offsets in {commit_s:.2f} s "
              "(read back)", file=sys.stderr, flush=True)

        def with_groups() -> float:
            started = time.perf_counter()
            snap = capture_snapshot("bench", {"bootstrap.servers": bootstrap}, timeout_s=120,
                                    groups=True)
            elapsed = time.perf_counter() - started
            check_group_snapshot(snap, size + 1, groups, offsets_per_group)  # + __consumer_offsets
            return elapsed

        def topics_only() -> float:
            started = time.perf_counter()
            snap = capture_snapshot("bench", {"bootstrap.servers": bootstrap}, timeout_s=120,
                                    groups=False)
            elapsed = time.perf_counter() - started
            check_topics_only(snap, size + 1)
            return elapsed

        grouped, alone, phases = [], [], []
        for round_ in range(repeat):
            if round_ % 2 == 0:
                grouped.append(with_groups())
                alone.append(topics_only())
            else:
                alone.append(topics_only())
                grouped.append(with_groups())
            phases.append(group_phases(bootstrap, DEFAULT_MAX_IN_FLIGHT))
    grouped_s, alone_s = statistics.median(grouped), statistics.median(alone)
    extra_s = grouped_s - alone_s
    phase_names = ("list", "describe", "committed_offsets", "log_end_offsets")
    return {
        "topics": size,
        "partitions_per_topic": partitions,
        "groups": groups,
        "topics_per_group": per_group,
        "offsets_per_group": offsets_per_group,
        "committed_offsets": groups * offsets_per_group,
        "groups_read_back": len(read_back),
        "groups_complete": True,  # checked on every with-groups capture (or the run failed)
        "repeat": repeat,
        "max_in_flight": DEFAULT_MAX_IN_FLIGHT,
        "with_groups_s": round(grouped_s, 4),
        "topics_only_s": round(alone_s, 4),
        "ratio": round(grouped_s / alone_s, 2) if alone_s else None,
        "groups_extra_s": round(extra_s, 4),
        "groups_per_s": round(groups / extra_s) if extra_s > 0 else None,
        "snapshot_groups_per_s": round(groups / grouped_s),
        "with_groups_runs_s": [round(x, 4) for x in grouped],
        "topics_only_runs_s": [round(x, 4) for x in alone],
        "group_phases_s": {name: median_s([p[name] for p in phases]) for name in phase_names},
        "create_topics_s": round(create_s, 2),
        "commit_offsets_s": round(commit_s, 2),
    }


def main_groups(parser, args) -> int:
    if args.groups < 1 or args.group_topics < 1 or args.partitions < 1:
        parser.error("--groups, --group-topics and --partitions must be at least 1")
    sizes = args.sizes or ([100] if args.quick else [1000])
    if min(sizes) < args.group_topics:
        parser.error(f"--sizes must be at least --group-topics ({args.group_topics})")
    load_before = os.getloadavg()
    started = time.time()
    results = []
    for size in sizes:
        print(f"measuring {args.groups} groups x {args.group_topics} topics on {size} topics "
              f"of {args.partitions} partition(s) ...", file=sys.stderr, flush=True)
        results.append(measure_groups(size, args.groups, args.group_topics, args.partitions,
                                      args.repeat))
    print(f"{'topics':>7} {'groups':>7} {'offsets/g':>9} {'with groups s':>14} "
          f"{'topics only s':>14} {'ratio':>6} {'extra s':>8} {'groups/s':>9}")
    for r in results:
        print(f"{r['topics']:>7} {r['groups']:>7} {r['offsets_per_group']:>9} "
              f"{r['with_groups_s']:>14.3f} {r['topics_only_s']:>14.3f} {r['ratio']:>6} "
              f"{r['groups_extra_s']:>8.3f} {r['groups_per_s'] or '-':>9}")
    for r in results:
        phases = ", ".join(f"{k} {v:.3f}" for k, v in r["group_phases_s"].items())
        print(f"group capture phases at {r['topics']} topics (s, median): {phases}")
    write_json({
        "benchmark": "capture_groups",
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
