"""Commands on the snapshot store: import, snapshots, verify, quarantine."""

from __future__ import annotations

import argparse
import json

from topic_lineage import store
from topic_lineage import tables as t
from topic_lineage.snapshot import check_jsonl, format_timestamp


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="ingest snapshot files (JSON Lines interchange format, or --format for others)",
        description="Validate each file whole, then store its snapshots. A file with any invalid "
        "line is rejected with an error naming file, line and field, and nothing is stored.",
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", default="jsonl", help="input format (default: jsonl): jsonl, "
                   "kraft-log, kraft-dump, kafka-topics (see docs/importers.md)")
    p.add_argument("--cluster-id", help="cluster ID for formats that do not carry one (for "
                   "kraft-log/kraft-dump also the path of the cluster's meta.properties)")
    p.add_argument("--cluster-alias", help="cluster alias for formats that do not carry one")
    p.add_argument("--complete", action="store_true", help="kafka-topics only: each file "
                   "covers the whole cluster (an unfiltered 'kafka-topics.sh --describe'), so "
                   "topics it lacks were deleted. Without it (and without a '# complete: true' "
                   "header line) a capture is stored as incomplete and deletes nothing")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("snapshots", help="list stored snapshots")
    p.add_argument("--cluster", help="only this cluster (ID or alias)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_snapshots)

    p = sub.add_parser(
        "verify", help="read every stored snapshot file and report unreadable ones",
        description="Read every stored snapshot file and report unreadable ones. Also report "
        "the files nothing references (what a killed build, store or retention leaves behind), "
        "one line per kind with counts and bytes; files younger than "
        "$TOPIC_LINEAGE_READER_GRACE (default 1h) are left alone, a step elsewhere may be "
        "writing them.")
    p.add_argument("--clean", action="store_true",
                   help="also apply retention (versions beyond $TOPIC_LINEAGE_KEEP_VERSIONS that "
                   "are out of use long enough) and remove the unreferenced objects it reports")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("quarantine", help="move an unreadable stored snapshot file aside")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=cmd_quarantine)


def cmd_import(args: argparse.Namespace) -> int:
    if args.format == "jsonl":
        if args.complete:
            from topic_lineage.importers import ImportInputError

            raise ImportInputError("--complete applies to kafka-topics only: a jsonl snapshot "
                                   "carries its own 'complete' field")
        for path in args.files:  # every file is checked before any is stored
            check_jsonl(path)
        for path in args.files:
            result = store.import_jsonl(path)
            print(f"{path}: {result}")
        return 0
    from topic_lineage import importers

    notes: list[str] = []
    result = importers.import_files(
        args.format, args.files, cluster_id=args.cluster_id, cluster_alias=args.cluster_alias,
        complete=args.complete, notes=notes,
    )
    for note in notes:
        print(f"note: {note}")
    print(result)
    return 0


def cmd_snapshots(args: argparse.Namespace) -> int:
    runs = store.read_runs(args.cluster)
    if args.format == "json":
        for run in runs:
            run[t.CAPTURED_AT] = format_timestamp(run[t.CAPTURED_AT])
        print(json.dumps(runs, indent=2))
        return 0
    print(f"{'cluster':<24} {'alias':<12} {'captured_at':<28} {'complete':<8} {'topics':>6} "
          f"{'errors':>6}  source")
    for run in runs:
        print(
            f"{run[t.CLUSTER_ID]:<24} {run[t.CLUSTER_ALIAS]:<12} "
            f"{format_timestamp(run[t.CAPTURED_AT]):<28} {str(run[t.COMPLETE]).lower():<8} "
            f"{run[t.TOPIC_COUNT]:>6} {run[t.ERROR_TOPIC_COUNT]:>6}  {run[t.SOURCE]}"
        )
    print(f"{len(runs)} snapshot(s) under {t.snapshots_dir()}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    problems = store.verify()
    for problem in problems:
        print(problem)
    print(f"{len(store.snapshot_files())} stored file(s), {len(problems)} unreadable")
    if args.clean:
        from topic_lineage import warehouse as wh

        removed = wh.apply_retention(sweep_after=False)
        print(f"retention removed {len(removed)} version(s)" + (f": {', '.join(removed)}" if removed else ""))
    from topic_lineage import sweep

    found = sweep.find()
    if args.clean:
        found = sweep.clean(found)
    for line in found.lines():
        print(f"{'removed' if args.clean else 'unreferenced'} {line}")
    if found.total_count and not args.clean:
        print("remove them with 'topic-lineage verify --clean'")
    return 1 if problems else 0


def cmd_quarantine(args: argparse.Namespace) -> int:
    for path in args.files:
        print(f"{path} -> {store.quarantine(path)}")
    return 0
