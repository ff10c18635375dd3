"""`topic-lineage snapshot`: capture one live snapshot of a cluster and store it."""

from __future__ import annotations

import argparse

from topic_lineage import capture, store
from topic_lineage.kafka_config import load_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="capture the topic metadata of a live cluster and store it as one snapshot",
        description="Read the cluster ID and every topic (internal ones included) with its topic "
        "ID, partition count, replication factor and internal flag through the Kafka Admin API, "
        "and store the result. Topics the store holds as live that the listing lacks (hidden by "
        "ACLs) are described by name and kept unless the broker says they do not exist. "
        "Topics whose describe failed are kept with the Kafka error name; "
        "a capture that could not see the whole cluster is stored with complete=false; an "
        "unreachable cluster is an error and stores nothing.",
    )
    p.add_argument("--cluster", required=True, metavar="ALIAS", help="your name for the cluster")
    p.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="brokers to contact (overrides bootstrap.servers of --config)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="librdkafka settings (.properties or JSON), e.g. security.protocol, sasl.*, ssl.*",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=capture.DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up after this long (default {capture.DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=capture.DEFAULT_BATCH_SIZE,
        help=f"topics per describe request (default {capture.DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--max-in-flight",
        type=int,
        default=capture.DEFAULT_MAX_IN_FLIGHT,
        help=f"describe requests in flight at once (default {capture.DEFAULT_MAX_IN_FLIGHT})",
    )
    p.add_argument(
        "--no-groups",
        dest="groups",
        action="store_false",
        help="skip consumer groups (by default each group's committed offsets are recorded with "
        "the partitions' log end offsets)",
    )
    p.set_defaults(func=cmd_snapshot)


def cmd_snapshot(args: argparse.Namespace) -> int:
    config = load_config(args.config) if args.config else {}
    if args.bootstrap_servers:
        config["bootstrap.servers"] = args.bootstrap_servers
    snap = capture.capture_snapshot(
        args.cluster,
        config,
        timeout_s=args.timeout,
        batch_size=args.batch_size,
        max_in_flight=args.max_in_flight,
        groups=args.groups,
    )
    result = store.save(snap, "live")
    path = store.snapshot_path(snap.cluster_id, snap.captured_at)
    print(summary_line(snap, path, stored=bool(result.stored)))
    return 0


def summary_line(snap, path, *, stored: bool = True) -> str:
    from topic_lineage.snapshot import format_timestamp

    state = "complete" if snap.complete else "INCOMPLETE"
    verb = "stored" if stored else "already stored"
    groups = ""
    if snap.groups_complete is not None:
        group_errors = sum(1 for g in snap.groups if g.error is not None)
        groups = (
            f"{len(snap.groups)} consumer group(s), {group_errors} with errors, "
            f"{'complete' if snap.groups_complete else 'INCOMPLETE'}; "
        )
    return (
        f"cluster {snap.cluster_id} ({snap.cluster_alias}) at {format_timestamp(snap.captured_at)}: "
        f"{len(snap.topics)} topic(s), {snap.error_topic_count} with errors, {state}; "
        f"{groups}{verb} {path}"
    )
