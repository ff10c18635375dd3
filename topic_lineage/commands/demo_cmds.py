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

# The demo broker's KRaft cluster ID: a Kafka UUID (16 bytes, URL-safe base64), the same on
# every run, so a second demo in the same home continues the same cluster's history.
DEMO_CLUSTER_ID = "dG9waWMtbGluZWFnZS1kbQ"
DEMO_ALIAS = "demo"
FIRST_TOPICS = (("orders", 3), ("payments", 2), ("inventory", 1))


@dataclass
class DemoRun:
    """What the steps share: the broker, the captures so far, and where output goes."""

    broker: object  # topic_lineage.local.broker.LocalBroker
    alias: str = DEMO_ALIAS
    captures: list[Snapshot] = field(default_factory=list)
    out: Callable[[str], None] = print
    airflow_state: dict | None = None
    _spark: object = None

    def say(self, text: str = "") -> None:
        self.out(text)

    def spark(self):
        """One SparkSession for the build and query steps, started on first use. The demo's
        store is small and its JVM lives for the demo only: quick JIT (topic_lineage.spark)."""
        if self._spark is None:
            from topic_lineage.spark import get_spark, quick_jit_for_store

            self._spark = get_spark("topic-lineage-demo", quick_jit=quick_jit_for_store())
        return self._spark

    def stop_spark(self) -> None:
        if self._spark is not None:
            from topic_lineage.spark import stop as stop_spark

            stop_spark(self._spark)
            self._spark = None


DEMO_GROUP = "billing"
DEMO_RECORDS = 5


def step_create_topics(run: DemoRun) -> None:
    run.broker.create_topics(FIRST_TOPICS)
    run.say("created " + ", ".join(
        f"{name} ({n} partition{'s' if n != 1 else ''})" for name, n in FIRST_TOPICS))
    _produce(run, "orders", DEMO_RECORDS)
    _commit(run, DEMO_GROUP, "orders", DEMO_RECORDS)
    run.say(f"produced {DEMO_RECORDS} records to orders; consumer group {DEMO_GROUP} committed "
            f"offset {DEMO_RECORDS} on orders-0")


def _produce(run: DemoRun, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": run.broker.bootstrap_servers, "linger.ms": 0})
    for _ in range(count):
        producer.produce(topic, b"demo", partition=0)
    if producer.flush(30):
        raise capture.CaptureError(f"could not produce {count} records to {topic}")


def _commit(run: DemoRun, group: str, topic: str, offset: int) -> None:
    """What a consumer that keeps its position in memory commits (Kafka keys it by name)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": run.broker.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


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
    _commit(run, DEMO_GROUP, "orders", DEMO_RECORDS)
    run.say(f"consumer group {DEMO_GROUP} committed its old position ({DEMO_RECORDS}) on the new "
            "orders, whose log is empty: Kafka matches committed offsets by name")
    broker.delete_topics(["inventory"])
    run.say("deleted inventory")
    broker.create_topics([("shipments", 2)])
    run.say("created shipments (2 partitions)")
    _add_partitions(run, "payments", 4)


def _add_partitions(run: DemoRun, name: str, total: int) -> None:
    """A changed attribute of a live incarnation (same ID): a new version, not a new one."""
    from confluent_kafka.admin import NewPartitions

    futures = run.broker.admin().create_partitions([NewPartitions(name, total)])
    futures[name].result(timeout=30)
    run.say(f"added partitions to {name} (now {total}; same topic ID)")


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
    width = max(12, *(len(name) for name in names))
    run.say(f"  {'topic':<{width}} {'first':<24} {'last':<24} what happened")
    partitions = [{t.name: t.partition_count for t in snap.topics} for snap in (first, last)]
    for name in names:
        before, after = first.topic_ids().get(name), last.topic_ids().get(name)
        if before and after:
            verdict = "same incarnation" if before == after else "NEW ID: deleted and re-created"
            if before == after and partitions[0][name] != partitions[1][name]:
                verdict += f" (partitions {partitions[0][name]} -> {partitions[1][name]})"
        else:
            verdict = "created" if after else "deleted"
        run.say(f"  {name:<{width}} {before or '-':<24} {after or '-':<24} {verdict}")
    a, b = first.topic_id("orders"), last.topic_id("orders")
    if a == b:  # the demo's point: a re-created topic is a new incarnation
        raise capture.CaptureError(f"orders kept its topic ID {a} across delete/re-create")
    run.say(f"orders has two different canonical IDs: {a} then {b}")


def step_build(run: DemoRun) -> None:
    """Build the incarnation table from every stored snapshot, validate it, publish it (R7)."""
    from functools import partial

    from topic_lineage.pipeline import run_build
    from topic_lineage.quality.context import overview_page
    from topic_lineage.quality.gate import validate_version

    result = run_build(run.spark(), validate=partial(validate_version))
    run.say(str(result))
    run.say(f"quality gate passed; Data Docs: {overview_page()}")


ORDERS_HISTORY_SQL = """
SELECT incarnation_key, topic_id, version, change_type, partition_count,
       valid_from, valid_to, is_current, deleted_at
FROM topic_lineage.topic_incarnations
WHERE cluster_id = '{cluster_id}' AND topic_name = 'orders'
ORDER BY valid_from, version
"""


def step_query(run: DemoRun) -> None:
    """Query the published table: the re-created `orders` is two incarnations."""
    from topic_lineage import warehouse as wh
    from topic_lineage.commands.build_cmds import print_rows

    spark = run.spark()
    wh.register_tables(spark)
    sql = ORDERS_HISTORY_SQL.format(cluster_id=run.captures[-1].cluster_id)
    run.say("topic-lineage query \"" + " ".join(sql.split()) + "\"")
    df = spark.sql(sql)
    print_rows(df, "table", out=run.say)
    keys = {row["incarnation_key"] for row in df.select("incarnation_key").collect()}
    if len(keys) < 2:
        raise capture.CaptureError(f"expected orders to be two incarnations, found {len(keys)}")
    run.say(f"orders: {len(keys)} incarnations (deleted and re-created = a new incarnation)")


ORDERS_GROUPS_SQL = """
SELECT group_id, topic_id, first_seen_at, last_seen_at, max_committed_offset, carried_offset
FROM topic_lineage.group_incarnations
WHERE cluster_id = '{cluster_id}' AND topic_name = 'orders'
ORDER BY group_id, first_seen_at
"""


def step_groups(run: DemoRun) -> None:
    """Consumer lineage (R8, R9): the group read both incarnations, and its position on the new
    one was carried over from the old."""
    from topic_lineage.commands.build_cmds import print_rows

    spark = run.spark()
    sql = ORDERS_GROUPS_SQL.format(cluster_id=run.captures[-1].cluster_id)
    run.say("topic-lineage query \"" + " ".join(sql.split()) + "\"")
    df = spark.sql(sql)
    print_rows(df, "table", out=run.say)
    carried = [row for row in df.collect() if row["group_id"] == DEMO_GROUP and row["carried_offset"]]
    if not carried:
        raise capture.CaptureError(f"expected group {DEMO_GROUP}'s carried position on orders")
    run.say(f"group {DEMO_GROUP}: a position carried across the re-creation of orders (the gate "
            "warned about it above; it never blocks publishing)")


def step_airflow(run: DemoRun) -> None:
    """The same pipeline through Airflow: one snapshot DAG run and one build DAG run."""
    from topic_lineage import airflow as at
    from topic_lineage.local import supervisor as ac

    run.stop_spark()  # the build DAG submits its own Spark application
    state = ac.setup(
        bootstrap_servers=run.broker.bootstrap_servers, clusters=None, spark_master="local[*]",
        port=ac._free_port(ac.DEFAULT_PORT), snapshot_schedule=None, build_schedule=None,
        archive_dir=None,
    )
    run.say(f"Airflow home {ac.airflow_home()} (its own PostgreSQL), Kafka connection -> "
            f"{run.broker.bootstrap_servers}")
    with ac.database(state):
        for dag_id in (at.SNAPSHOT_DAG_ID, at.INCARNATIONS_DAG_ID):
            run.say(f"airflow dags test {dag_id} ...")
            ac._airflow(state, "dags", "test", dag_id, timeout=1800)
            run.say(f"  {dag_id}: success")
    run.airflow_state = state
    from topic_lineage import warehouse as wh

    runs = store.read_runs(run.captures[-1].cluster_id)
    run.say(f"now {len(runs)} stored snapshot(s) (the last one captured by Airflow, source "
            f"{runs[-1][t.SOURCE]}); published version: {wh.current_version()}")


def step_next(run: DemoRun) -> None:
    run.say(f"""Everything is under {t.home()}:
  snapshots:   {t.snapshots_dir()}
  tables:      topic-lineage query "SELECT * FROM topic_incarnations WHERE is_current"
  Data Docs:   {t.quality_dir() / 'index.html'}
To open the Airflow UI (with the Topic lineage page) and trigger a backfill:
  topic-lineage airflow start          # prints the UI address, the backfill command, and how to stop
  (the demo broker is gone once the demo ends: run `topic-lineage demo --serve` to keep a broker and
   Airflow running together, or point `topic-lineage airflow setup --bootstrap-servers` at your Kafka)""")


STEPS: list[tuple[str, Callable[[DemoRun], None]]] = [
    ("create topics", step_create_topics),
    ("capture snapshot 1", step_capture),
    ("change topics", step_change_topics),
    ("capture snapshot 2", step_capture),
    ("stored snapshots", step_show_snapshots),
    ("topic IDs", step_compare_ids),
    ("build, validate, publish", step_build),
    ("query the published table", step_query),
    ("consumer groups across the re-creation", step_groups),
    ("run the pipeline through Airflow", step_airflow),
    ("what next", step_next),
]

CAPTURE_ONLY = STEPS[:6]


def run_demo(steps=None, *, cluster_id: str = DEMO_CLUSTER_ID, alias: str = DEMO_ALIAS,
             out: Callable[[str], None] = print, serve: bool = False) -> DemoRun:
    from topic_lineage.local.broker import LocalBroker

    steps = STEPS if steps is None else steps
    with LocalBroker(cluster_id) as broker:
        out(f"local broker: {broker.describe()}")
        out(f"topic-lineage home: {t.home()}")
        run = DemoRun(broker=broker, alias=alias, out=out)
        try:
            for number, (title, step) in enumerate(steps, start=1):
                out(f"\n[{number}/{len(steps)}] {title}")
                step(run)
        finally:
            run.stop_spark()
        if serve:
            _serve(run)
    out("\nlocal broker stopped (its directory removed)")
    return run


def _serve(run: DemoRun) -> None:
    """Keep the broker and a local Airflow running until Ctrl-C (for the UI and backfills)."""
    import time

    from topic_lineage.local import supervisor as ac

    state = run.airflow_state or ac.load_state()
    ac.start(state)
    run.say("\n" + ac.banner(state))
    run.say(f"Kafka broker: {run.broker.bootstrap_servers}. Press Ctrl-C to stop everything.")
    try:
        while True:
            time.sleep(5)
    except KeyboardInterrupt:
        pass
    finally:
        ac.stop()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the main job on a throw-away local Apache Kafka broker",
        description="Start a local Apache Kafka broker (KRaft), create topics, capture a snapshot, "
        "delete and re-create 'orders', capture again, and show what was stored "
        "(under $TOPIC_LINEAGE_HOME).",
    )
    p.add_argument("--cluster-id", default=DEMO_CLUSTER_ID,
                   help="the KRaft cluster ID to format the broker with (a Kafka UUID, e.g. "
                   "from `kafka-storage.sh random-uuid`)")
    p.add_argument("--cluster", default=DEMO_ALIAS, metavar="ALIAS", help="cluster alias")
    p.add_argument("--capture-only", action="store_true",
                   help="stop after the captures (no Spark build, no Airflow)")
    p.add_argument("--skip-airflow", action="store_true",
                   help="build, validate and query through the CLI only")
    p.add_argument("--serve", action="store_true",
                   help="afterwards keep the broker and a local Airflow running until Ctrl-C")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    steps = STEPS
    if args.capture_only:
        steps = CAPTURE_ONLY
    elif args.skip_airflow:
        steps = [step for step in STEPS if step[1] is not step_airflow]
    run_demo(steps, cluster_id=args.cluster_id, alias=args.cluster, serve=args.serve)
    return 0
