"""`topic-lineage validate`: run the quality gate on the published (or a given) version."""

from __future__ import annotations

import argparse

from topic_lineage.errors import TopicLineageError


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    """The gate's thresholds as options (shared by ``validate`` and ``build``)."""
    parser.add_argument(
        "--max-age",
        metavar="AGE",
        help="maximum age of each live-captured cluster's newest complete snapshot, e.g. 36h, "
        "2d, 90m; 'off' disables the check. A warning: it never blocks publishing. Default: "
        "$TOPIC_LINEAGE_MAX_AGE or 24h",
    )
    parser.add_argument(
        "--max-error-share",
        metavar="SHARE",
        help="maximum share (0..1) of topics per snapshot whose describe failed. A warning: it "
        "never blocks publishing. Default: $TOPIC_LINEAGE_MAX_ERROR_SHARE or 0.5",
    )


def gate_options(args: argparse.Namespace) -> dict:
    """Keyword arguments of ``gate.validate_version`` from the parsed options."""
    from topic_lineage.quality import gate

    options: dict = {}
    if getattr(args, "max_age", None) is not None:
        options["max_age"] = gate.parse_max_age(args.max_age)
    if getattr(args, "max_error_share", None) is not None:
        options["max_error_share"] = gate.parse_share(args.max_error_share)
    return options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="validate the published (or a given) version with the Great Expectations suites",
        description="Run the quality gate on a version of the tables and print the verdict, the "
        "failed expectations with a few offending rows, one line per warning, and the path of "
        "the Data Docs page. The verdict is recorded in the version's manifest: a built version "
        "that passes becomes publishable ('topic-lineage publish V'). Critical expectations "
        "fail the gate; warnings (freshness, describe-error share) never do. "
        "Exit status: 0 passed (with or without warnings), 1 failed, 2 could not validate.",
    )
    p.add_argument("--version", help="version to validate (default: the published one)")
    p.add_argument(
        "--all-rows",
        action="store_true",
        help="read every topic_snapshots row; by default the files a version shares with the "
        "base it was built on are skipped when the gate passed that base with the same suite",
    )
    add_gate_options(p)
    p.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from topic_lineage import warehouse
    from topic_lineage.quality import gate

    options = gate_options(args)  # bad thresholds fail before Spark starts
    version = args.version or warehouse.current_version()
    if version is None:
        raise TopicLineageError(
            "nothing is published yet; build the tables with 'topic-lineage build', or name a "
            "built version with --version"
        )
    from topic_lineage.local.spark_server import LazySession

    # the Connect server when it runs, else a local Spark; neither for a small version (the gate
    # validates it in process)
    with LazySession("topic-lineage-validate") as spark:
        result = gate.validate_version(spark, version, all_rows=args.all_rows, **options)
    print(result.report())
    return 0 if result.success else 1
