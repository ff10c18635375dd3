"""``topic-lineage scan-logdirs``: topic IDs on broker disks and stale partition directories."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scan-logdirs",
        help="list topic IDs found in broker log directories (partition.metadata) and stale "
        "directories of deleted incarnations",
        description="Read <topic>-<partition>/partition.metadata in each broker log directory. "
        "Directories renamed -delete or -stray, and directories whose topic ID is not the live "
        "one in the newest stored complete snapshot of the cluster, are reported as stale data "
        "you may want to clean. Nothing is changed or stored.",
    )
    p.add_argument("log_dirs", nargs="+", metavar="LOG_DIR")
    p.add_argument("--cluster", help="cluster ID or alias to compare with (default: the "
                   "cluster.id of meta.properties in the log directory)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_scan_logdirs)


def cmd_scan_logdirs(args: argparse.Namespace) -> int:
    from topic_lineage.importers import partition_metadata as pm
    from topic_lineage.importers.kraft.identity import find_meta_properties, read_meta_properties

    cluster = args.cluster
    if cluster is None:
        found = find_meta_properties([Path(d) for d in args.log_dirs])
        cluster = read_meta_properties(found) if found else None
    known = pm.live_ids_from_store(cluster) if cluster else None
    live_ids, compared_with = known if known else (None, None)
    report = pm.scan(args.log_dirs, live_ids=live_ids, cluster_id=cluster,
                     compared_with=compared_with)
    if args.format == "json":
        print(json.dumps(report.to_json(), indent=2))
        return 0
    topics = report.topics_on_disk()
    print(f"{len(report.directories)} partition directories, {len(topics)} topics on disk")
    for name, ids in sorted(topics.items()):
        print(f"  {name:<40} {', '.join(sorted(i or '(no partition.metadata)' for i in ids))}")
    if compared_with:
        print(f"compared with the snapshot of cluster {cluster} at {compared_with}")
    else:
        print("no stored complete snapshot to compare with (pass --cluster, or capture first)")
    print(f"{len(report.stale)} stale directories")
    for item in report.stale:
        print(f"  {item.directory.path}: {item.reason}")
    return 0
