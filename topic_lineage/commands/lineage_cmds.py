"""`topic-lineage lineage emit`: OpenLineage events of the published tables (docs/lineage.md)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    lineage = sub.add_parser(
        "lineage", help="tell lineage tools (Marquez, DataHub, OpenMetadata, ...) about "
        "incarnations: OpenLineage events",
        description="OpenLineage events about topic incarnations and consumer lineage "
        "(docs/lineage.md).",
    )
    actions = lineage.add_subparsers(dest="lineage_command", metavar="ACTION", required=True)
    p = actions.add_parser(
        "emit",
        help="emit the published version's changes not emitted yet (all of them the first time)",
        description="Emit, through the configured OpenLineage transport (OPENLINEAGE_URL, "
        "OPENLINEAGE_CONFIG, openlineage.yml), every change of the published tables that was "
        "not emitted before, in order, in batches. Nothing configured: nothing is emitted.",
    )
    p.add_argument("--dry-run", action="store_true",
                   help="print the events as JSON Lines on stdout; send and record nothing")
    p.add_argument("--since", metavar="VERSION",
                   help="only changes that are not in the tables of VERSION (an older version)")
    p.set_defaults(func=_emit)


def _emit(args: argparse.Namespace) -> int:
    from topic_lineage.lineage.emit import emit_published

    result = emit_published(since=args.since, dry_run=args.dry_run, out=sys.stdout)
    print(("dry run: " if args.dry_run else "") + str(result),
          file=sys.stderr if args.dry_run else sys.stdout)
    return 0
