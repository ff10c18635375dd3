"""The ``topic-lineage`` command line.

Each command lives in a module of ``topic_lineage.commands`` that defines
``register(subparsers)``; this file only wires them together and turns user errors into one
clear line on stderr (no traceback) and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from topic_lineage.errors import TopicLineageError

# One line per command module; each module registers its own sub-commands.
COMMAND_MODULES = (
    "topic_lineage.commands.store_cmds",
    "topic_lineage.commands.logdir_cmds",
    "topic_lineage.commands.capture_cmds",
    "topic_lineage.commands.build_cmds",
    "topic_lineage.commands.quality_cmds",
    "topic_lineage.commands.demo_cmds",
    "topic_lineage.commands.airflow_cmds",
    "topic_lineage.commands.lineage_cmds",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topic-lineage",
        description="Kafka topic incarnations (KIP-516 topic IDs) as a slowly changing dimension.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log topic-lineage's progress to stderr; -vv: every library's log too")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def configure_logging(verbosity: int) -> None:
    """Warnings only; with ``verbosity`` 1 (``-v``) topic-lineage's own progress too (the
    ``topic_lineage`` loggers at INFO); with 2 (``-vv``) every library's INFO as well: Great
    Expectations, py4j and pyiceberg log hundreds of lines a build, which buried ours."""
    logging.basicConfig(level=logging.INFO if verbosity > 1 else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if verbosity == 1:
        logging.getLogger("topic_lineage").setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except TopicLineageError as exc:
        print(f"topic-lineage {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"topic-lineage {args.command}: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The ``topic-lineage`` command (console script): :func:`main`, then a quick exit.

    A build's process holds Great Expectations, pandas and PySpark, and the interpreter took
    0.75-1 s to tear them down object by object after the work was done (issue #24). So the
    exit runs what must run at exit (the ``atexit`` handlers: logging, PySpark's gateway, the
    Spark Connect client), flushes the output and ends the process without that teardown.
    Every command waits for its own threads before it returns.

    ``build`` and ``validate`` run in the deployment's warm process when it takes them
    (:mod:`topic_lineage.local.warm`): the same :func:`main`, with modules loaded already.
    """
    import atexit
    import os

    from topic_lineage.local import warm

    code = warm.run(sys.argv[1:])  # in the deployment's warm process, when one takes it
    if code is None:
        code = main()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
