"""The two steps of making the archive of Spark's classes (:mod:`topic_lineage.local.jvm_archive`),
each run in a process of its own by :func:`~topic_lineage.local.jvm_archive.make`:

    python -m topic_lineage.local.jvm_archive_steps --workload CANDIDATE
    python -m topic_lineage.local.jvm_archive_steps --check CANDIDATE

Apart from that module so that it imports no Spark or build code (which imports it).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _record(day: int, topics: list[tuple[str, str, int]], groups: dict[str, int]) -> dict:
    """One snapshot of the workload's cluster: (name, topic ID, partitions) and group offsets."""
    return {
        "cluster_id": "jvm-archive", "cluster_alias": "jvm-archive",
        "captured_at": f"2026-01-{day:02d}T00:00:00Z", "complete": True,
        "topics": [{"name": name, "topic_id": topic_id, "partition_count": partitions,
                    "replication_factor": 1, "is_internal": False, "error": None}
                   for name, topic_id, partitions in topics],
        "groups_complete": True,
        "groups": [{"group_id": group, "state": "Stable", "error": None,
                    "offsets": [{"topic": "orders", "partition": 0, "committed_offset": offset,
                                 "log_end_offset": offset + 5}]}
                   for group, offset in groups.items()],
    }


ORDERS_1, ORDERS_2, PAYMENTS = "sS8XrAINTeKM7e6CvIqgxg", "JA3RiGY4ScmxXIADuAWqgA", "18D5y2tTQbuWCQZg9P-fHg"
WORKLOAD = [  # a re-creation, a partition change, a deletion, group offsets across them
    _record(1, [("orders", ORDERS_1, 1), ("payments", PAYMENTS, 2)], {"billing": 3}),
    _record(2, [("orders", ORDERS_1, 2), ("payments", PAYMENTS, 2)], {"billing": 7}),
    _record(3, [("payments", PAYMENTS, 2)], {}),
    _record(4, [("orders", ORDERS_2, 1), ("payments", PAYMENTS, 2)], {"billing": 7}),
    _record(5, [("orders", ORDERS_2, 1)], {"billing": 9}),
]


def _workload(dump_to: str) -> None:
    """What the archive is made of: a small store's builds, the way the CLI runs them (the walk
    job, whose tasks also derive the consumer-group tables), full and incremental, with and without Spark's generated
    code, in one JVM that writes its loaded classes to ``dump_to`` when it exits. Run in a
    process of its own with ``$TOPIC_LINEAGE_HOME`` a scratch directory."""
    from topic_lineage import store
    from topic_lineage.pipeline import run_build
    from topic_lineage.snapshot import parse_snapshot
    from topic_lineage.spark import INTERPRETED_CONF, driver_java_options, get_spark

    store.save_all([parse_snapshot(record) for record in WORKLOAD[:-1]], "import:jsonl")
    spark = get_spark("topic-lineage-jvm-archive", conf={  # (archives are off in this process)
        "spark.driver.extraJavaOptions": f"{driver_java_options()} -XX:ArchiveClassesAtExit={dump_to}"})
    only_build = {"validate": False, "publish": False}  # a small version's gate runs no Spark
    run_build(spark, full_refresh=True, **only_build)
    store.save_all([parse_snapshot(WORKLOAD[-1])], "import:jsonl")
    run_build(spark, **only_build)  # incremental
    for key, value in INTERPRETED_CONF.items():
        spark.conf.set(key, value)
    run_build(spark, full_refresh=True, **only_build)  # interpreted
    spark.sql("SELECT count(*) FROM parquet.`{}`".format(
        next(Path(os.environ["TOPIC_LINEAGE_HOME"]).rglob("*.parquet")))).collect()
    gateway = spark.sparkContext._gateway
    spark.stop()
    # the JVM exits when its standard input closes (PySpark's gateway), and writes the archive
    # on its way out: wait for that here, not after this process is gone
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=600)


def _check(candidate: Path) -> None:
    """Start a driver JVM that must map ``candidate`` (``-Xshare:on`` fails otherwise) and run a job."""
    from topic_lineage.spark import driver_java_options, get_spark

    spark = get_spark("topic-lineage-jvm-archive-check", conf={
        "spark.driver.extraJavaOptions":
            f"{driver_java_options()} -XX:SharedArchiveFile={candidate} -Xshare:on"})
    if spark.range(3).count() != 3:
        raise SystemExit("the check job gave a wrong count")
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m topic_lineage.local.jvm_archive_steps")
    step = parser.add_mutually_exclusive_group(required=True)
    step.add_argument("--workload", metavar="DUMP_TO")
    step.add_argument("--check", metavar="ARCHIVE")
    args = parser.parse_args(argv)
    if args.workload:
        _workload(args.workload)
    else:
        _check(Path(args.check))
    return 0


if __name__ == "__main__":
    sys.exit(main())
