"""`topic-lineage demo`: the main job on embedded defaults, end to end on a local broker.

The demo is a list of small steps (:data:`STEPS`) run in order against one :class:`DemoRun`.
Capture steps need the local broker, which runs for the whole demo and is stopped at the end.
Later stages (build, validate, query) append their own steps to the list.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field

from topic_lineage import capture, store
from topic_lineage import tables as t
from topic_lineage.snapshot import Snapshot, format_timestamp

DEMO_CLUSTER_ID = "topic-lineage-demo"
DEMO_ALIAS = "demo"
FIRST_TOPICS = (("orders", 3), ("payments", 2), ("inventory", 1))


@dataclass
class DemoRun:
    """What the steps share: the broker, the captures so far, and where output goes."""

    broker: object  # topic_lineage.local_broker.LocalBroker
    alias: str = DEMO_ALIAS
    captures: list[Snapshot] = field(default_factory=list)
    out: Callable[[str], None] = print

    def say(self, text: str = "") -> None:
        self.out(text)


def step_create_topics(run: DemoRun) -> None:
    run.broker.create_topics(FIRST_TOPICS)
    run.say("created " + ", ".join(
        f"{name} ({n} partition{'s' if n != 1 else ''})" for name, n in FIRST_TOPICS))


def step_capture(run: DemoRun) -> None:
    snap = capture.capture_snapshot(run.alias, {"bootstrap.servers": run.broker.bootstrap_servers})
    result = store.save(snap, "live")
    run.captures.append(snap)
    from topic_lineage.commands.capture_cmds import summary_line

    path = store.snapshot_path(snap.cluster_id, snap.captured_at)
    run.say("snapshot " + summary_line(snap, path, stored=bool(result.stored)))


def step_change_topics(run: DemoRun) -> None:
    """Re-create `orders` (a new incarnation), delete `inventory`, create `shipments`."""
    broker = run.broker
    broker.delete_topics(["orders"])
    broker.create_topics([("orders", 3)])
    run.say("deleted and re-created orders (same name, new topic ID)")
    broker.delete_topics(["inventory"])
    run.say("deleted inventory")
    broker.create_topics([("shipments", 2)])
    run.say("created shipments (2 partitions)")
    _try_add_partitions(run, "payments", 4)


def _try_add_partitions(run: DemoRun, name: str, total: int) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    futures = run.broker.admin().create_partitions([NewPartitions(name, total)])
    try:
        futures[name].result(timeout=30)
    except KafkaException as exc:
        run.say(f"skipped: adding partitions to {name} ({exc.args[0].name()}: not supported by "
                "this broker)")
        return
    run.say(f"added partitions to {name} (now {total})")


def step_show_snapshots(run: DemoRun) -> None:
    cluster_id = run.captures[-1].cluster_id
    runs = store.read_runs(cluster_id)
    run.say(f"stored snapshots of cluster {cluster_id} under {t.snapshots_dir()}:")
    for row in runs:
        run.say(
            f"  {format_timestamp(row[t.CAPTURED_AT])}  complete={str(row[t.COMPLETE]).lower():<5} "
            f"topics={row[t.TOPIC_COUNT]:<3} errors={row[t.ERROR_TOPIC_COUNT]:<3} {row[t.SOURCE]}"
        )


def step_compare_ids(run: DemoRun) -> None:
    """Show each topic's canonical ID in the first and the last capture of this run."""
    first, last = run.captures[0], run.captures[-1]
    names = sorted({topic.name for topic in first.topics} | {topic.name for topic in last.topics})
    run.say(f"topic IDs (Kafka's canonical form), capture 1 -> capture {len(run.captures)}:")
    run.say(f"  {'topic':<12} {'first':<24} {'last':<24} what happened")
    for name in names:
        before, after = first.topic_ids().get(name), last.topic_ids().get(name)
        if before and after:
            verdict = "same incarnation" if before == after else "NEW ID: deleted and re-created"
        else:
            verdict = "created" if after else "deleted"
        run.say(f"  {name:<12} {before or '-':<24} {after or '-':<24} {verdict}")
    a, b = first.topic_id("orders"), last.topic_id("orders")
    if a == b:  # the demo's point: a re-created topic is a new incarnation
        raise capture.CaptureError(f"orders kept its topic ID {a} across delete/re-create")
    run.say(f"orders has two different canonical IDs: {a} then {b}")


STEPS: list[tuple[str, Callable[[DemoRun], None]]] = [
    ("create topics", step_create_topics),
    ("capture snapshot 1", step_capture),
    ("change topics", step_change_topics),
    ("capture snapshot 2", step_capture),
    ("stored snapshots", step_show_snapshots),
    ("topic IDs", step_compare_ids),
]


def run_demo(steps=None, *, cluster_id: str = DEMO_CLUSTER_ID, alias: str = DEMO_ALIAS,
             out: Callable[[str], None] = print) -> DemoRun:
    from topic_lineage.local_broker import LocalBroker

    steps = STEPS if steps is None else steps
    with LocalBroker(cluster_id) as broker:
        out(f"local broker (tansu, in memory) at {broker.bootstrap_servers}, cluster {cluster_id}")
        out(f"topic-lineage home: {t.home()}")
        run = DemoRun(broker=broker, alias=alias, out=out)
        for number, (title, step) in enumerate(steps, start=1):
            out(f"\n[{number}/{len(steps)}] {title}")
            step(run)
    out("\nlocal broker stopped")
    return run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the main job on a throw-away local broker (needs the dev extra)",
        description="Start a local Kafka-protocol broker, create topics, capture a snapshot, "
        "delete and re-create 'orders', capture again, and show what was stored "
        "(under $TOPIC_LINEAGE_HOME).",
    )
    p.add_argument("--cluster-id", default=DEMO_CLUSTER_ID, help="cluster ID the broker reports")
    p.add_argument("--cluster", default=DEMO_ALIAS, metavar="ALIAS", help="cluster alias")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    run_demo(cluster_id=args.cluster_id, alias=args.cluster)
    return 0
