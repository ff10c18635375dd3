"""The ``spark-submit`` entry of a build: a thin edge over :mod:`topic_lineage.scd.build`.

    spark-submit spark_jobs/build.py --version-id V [--full-refresh] [--hold-ratio R] [--hold-min N]
                                     [--base-version B] [--publish]

Without ``--publish`` it only writes a version (the Airflow ``build`` task); ``--publish`` then
runs the quality gate and publishes through :func:`topic_lineage.pipeline.audit_and_publish`,
like ``topic-lineage build``. The package never imports this file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run by spark-submit as a file: the package lives beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from topic_lineage.cli import configure_logging
from topic_lineage.errors import TopicLineageError
from topic_lineage.noop import HOLD_MIN_ENV, HOLD_RATIO_ENV
from topic_lineage.scd.hold import DEFAULT_MIN_COUNT, DEFAULT_RATIO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark_jobs/build.py", description=__doc__.splitlines()[0])
    parser.add_argument("--version-id", help="name of the version to write (default: time-based)")
    parser.add_argument("--full-refresh", action="store_true", help="recompute everything")
    parser.add_argument("--base-version", help="incremental base (default: the published version)")
    parser.add_argument("--hold-ratio", type=float, help=f"R3 ratio (default ${HOLD_RATIO_ENV} or {DEFAULT_RATIO})")
    parser.add_argument("--hold-min", type=int, help=f"R3 minimum (default ${HOLD_MIN_ENV} or {DEFAULT_MIN_COUNT})")
    parser.add_argument("--publish", action="store_true",
                        help="validate with the quality gate, then publish (never without the gate)")
    args = parser.parse_args(argv)
    configure_logging(1)  # topic-lineage's progress in the task's log, not every library's
    from topic_lineage.pipeline import import_in_background
    from topic_lineage.scd.build import build_version, hold_policy
    from topic_lineage.spark import get_spark, quick_jit_for_store, starts_a_jvm
    from topic_lineage.spark import stop as stop_spark

    # $TOPIC_LINEAGE_DRIVER_MEMORY and, for a small store, the quick JIT take effect when this
    # process starts the JVM (python build.py), as for `topic-lineage build`; spark-submit starts
    # it before (Airflow's build task gives it the same options, topic_lineage.airflow.operators),
    # and the store is then not listed for an option without effect.
    import_in_background(gate=args.publish)  # while the JVM starts and the build runs
    spark = get_spark("topic-lineage-build", quick_jit=starts_a_jvm() and quick_jit_for_store())
    try:
        info = build_version(
            spark, args.version_id, args.full_refresh,
            policy=hold_policy(args.hold_ratio, args.hold_min), base_version=args.base_version,
        )
        print(info)
        if args.publish:  # the same gate + publish as 'topic-lineage build'
            from topic_lineage.pipeline import audit_and_publish

            gate, outcome = audit_and_publish(spark, info.version)
            print(gate.report())
            print(outcome)
    except TopicLineageError as exc:
        print(f"build: error: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        stop_spark(spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
