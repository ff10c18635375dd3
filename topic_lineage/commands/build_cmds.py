"""Commands on the warehouse: build, publish, versions, query (read-only)."""

from __future__ import annotations

import argparse
import csv
import json
import sys

from topic_lineage import warehouse as wh
from topic_lineage.scd import hold

ENGINES = ("duckdb", "spark")

def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build",
        help="build a new version of the tables from the snapshot store, validate and publish it",
        description="Incremental by default (only new snapshots are processed; a late snapshot "
        "recomputes its cluster); when the published version was built from the same stored "
        "snapshots, hold thresholds and build code, nothing is built (no Spark is started). "
        "The mass-deletion hold (R3) thresholds come from "
        "--hold-ratio/--hold-min or $TOPIC_LINEAGE_HOLD_RATIO/$TOPIC_LINEAGE_HOLD_MIN.",
    )
    p.add_argument("--full-refresh", action="store_true", help="recompute everything from the store")
    p.add_argument("--version-id", help="name of the new version (default: time-based)")
    p.add_argument("--no-publish", action="store_true", help="build (and validate) but do not publish")
    p.add_argument("--no-validate", action="store_true",
                   help="skip the quality gate; only with --no-publish (an unvalidated version is "
                   "never published)")
    p.add_argument("--master", help="Spark master URL (default: the deployment's Spark Connect "
                   "server when it runs, else $TOPIC_LINEAGE_SPARK_MASTER or local[*]); a master "
                   "given here never uses the server")
    p.add_argument("--hold-ratio", type=float, help="R3: hold a snapshot closing more than this share "
                   f"of live incarnations (default {hold.DEFAULT_RATIO})")
    p.add_argument("--hold-min", type=int, help=f"R3: ... and at least this many (default {hold.DEFAULT_MIN_COUNT})")
    from topic_lineage.commands.quality_cmds import add_gate_options

    add_gate_options(p)  # quality gate thresholds (--max-age, --max-error-share)
    p.set_defaults(func=cmd_build)

    p = sub.add_parser(
        "publish",
        help="publish a version the quality gate passed (switch readers to it atomically)",
        description="Only a version the quality gate passed can be published (validate one with "
        "'topic-lineage validate --version V'). --force --reason TEXT publishes one anyway; the "
        "override is recorded in the version's manifest and shown by 'versions' and the UI. "
        "Exit status: 0 published, 3 refused, 2 error.",
    )
    p.add_argument("version_arg", nargs="?", metavar="VERSION", help="the version to publish")
    p.add_argument("--version", help="the version to publish (same as VERSION)")
    p.add_argument("--force", action="store_true",
                   help="publish even though the quality gate has not passed the version")
    p.add_argument("--reason", help="why the gate is overridden (required with --force)")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("versions", help="list built versions with their status")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_versions)

    p = sub.add_parser(
        "query",
        help="run read-only SQL over the published tables (DuckDB; --engine spark for Spark SQL)",
        description="Tables: topic_lineage.snapshot_runs, topic_lineage.topic_snapshots, "
        "topic_lineage.topic_incarnations (the current schema is topic_lineage, so the short "
        "names work too). Timestamps are printed in ISO 8601 UTC. The default engine, duckdb, "
        "reads the version's Parquet files in-process and answers in well under a second (no "
        "JVM); --engine spark runs Spark SQL in a local Spark (--master), or on the deployment's "
        "Spark Connect server when it runs. Where the dialects agree, both print the same bytes.",
    )
    p.add_argument("sql")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.add_argument("--version", help="query this version instead of the published one")
    p.add_argument("--engine", choices=ENGINES,
                   help="duckdb (default; DuckDB SQL dialect) or spark (Spark SQL dialect); "
                   "--master implies spark")
    p.epilog = ("Queries are read-only: one statement, a query (SELECT, WITH, VALUES, SHOW, "
                "DESCRIBE, EXPLAIN); INSERT, COPY, CREATE, DROP, ALTER, SET, ATTACH etc. are "
                "refused, and the duckdb engine cannot read or write any file outside the "
                "version's tables.")
    p.add_argument("--master", help="Spark master URL for --engine spark (default: local[2])")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser(
        "jvm-archive",
        help="make the archive of Spark's classes that lets every Spark driver start faster",
        description="Runs a small build in a JVM that writes the classes it loaded to a "
        "class-data-sharing archive for this JDK and these Spark jars; later Spark drivers map it "
        "and start in about half the time. scripts/install.sh runs it; after installing the wheel "
        "elsewhere, run it once. About a minute. $TOPIC_LINEAGE_JVM_ARCHIVE=off never uses one.",
    )
    p.add_argument("--force", action="store_true", help="make it again even when it exists")
    p.set_defaults(func=cmd_jvm_archive)


def cmd_build(args: argparse.Namespace) -> int:
    from topic_lineage.commands.quality_cmds import gate_options
    from topic_lineage.noop import hold_policy

    if args.no_validate and not args.no_publish:  # before Spark starts
        raise wh.PublishRefused(
            "--no-validate builds a version the quality gate has not passed, which is never "
            "published: add --no-publish (then 'topic-lineage validate --version V' and "
            "'topic-lineage publish V')"
        )
    options = gate_options(args)
    policy = hold_policy(args.hold_ratio, args.hold_min)
    if not args.full_refresh:  # no-op runs: decided without a JVM (topic_lineage/noop.py)
        from topic_lineage import noop

        decision = noop.decide(policy.ratio, policy.min_count)
        if decision.noop:
            wh.refresh_init_sql()  # main's files may have moved (another engine's compaction)
            print(decision)
            return 0
    wh.refuse_if_building()  # at once, not after a JVM's start
    # The deployment's Spark Connect server when it runs (no JVM start), unless --master. A JVM
    # started for a small store's build lives for that build only: quick JIT (topic_lineage.spark).
    # It starts in a thread: the imports below, and a small store's walk, run meanwhile.
    from topic_lineage.local.spark_server import StartingSession
    from topic_lineage.spark import quick_jit_for_store

    spark = StartingSession("topic-lineage-build", master=args.master,
                            quick_jit=quick_jit_for_store())
    try:
        from topic_lineage.pipeline import import_in_background, run_build

        import_in_background(gate=not args.no_validate)  # while the JVM starts and the build runs
        result = run_build(
            spark, version_id=args.version_id, full_refresh=args.full_refresh,
            publish=not args.no_publish, validate=not args.no_validate, gate_options=options,
            policy=policy,
        )
    finally:
        spark.stop()
    print(result)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    version = args.version_arg or args.version
    if not version or (args.version_arg and args.version and args.version_arg != args.version):
        raise wh.WarehouseError("name one version to publish: 'topic-lineage publish VERSION'")
    if args.force and not (args.reason or "").strip():
        raise wh.PublishRefused("--force needs --reason TEXT saying why the quality gate is overridden")
    if args.reason and not args.force:
        raise wh.WarehouseError("--reason is only used with --force")
    outcome = wh.publish(version, force_reason=args.reason if args.force else None)
    print(outcome)
    return 0


def cmd_versions(args: argparse.Namespace) -> int:
    from topic_lineage.warehouse import iceberg

    try:
        current = wh.current_version()
    except iceberg.ForeignCommitError as exc:  # listed all the same, the foreign commit named
        print(f"topic-lineage versions: warning: {exc}", file=sys.stderr)
        current = exc.version
    versions = wh.list_versions()
    if args.format == "json":
        print(json.dumps([
            {k: m.get(k) for k in ("version", "status", "created_at", "mode", "base_version",
                                   "snapshot_count", "row_counts", "rejected_reason", "gate",
                                   "forced", "iceberg_snapshots")}
            | {"current": m["version"] == current, "gate_passed": wh.gate_passed(m)}
            for m in versions
        ], indent=2))
        return 0
    print(f"  {'version':<40} {'status':<10} {'mode':<12} {'snapshots':>9}  {'created_at':<28}  gate")
    for m in versions:
        mark = "*" if m["version"] == current else " "
        print(f"{mark} {m['version']:<40} {m.get('status', '?'):<10} {m.get('mode') or '-':<12} "
              f"{m.get('snapshot_count', '-'):>9}  {m.get('created_at', ''):<28}  {_gate_cell(m)}")
    print(f"{len(versions)} version(s); * = published")
    name, props, embedded = iceberg.catalog_properties()
    where = "embedded" if embedded else iceberg.catalog_place(props)
    print(f"Iceberg catalog {name!r} ({where}), namespace {iceberg.NAMESPACE}: main of every table "
          f"is the published version; each version's snapshots are on branch audit-<version>")
    return 0


def _gate_cell(manifest: dict) -> str:
    """The quality gate's verdict on a version, and any forced publish, in one cell."""
    gate = manifest.get("gate")
    if gate is None:
        cell = "passed" if wh.gate_passed(manifest) else "not validated"
    elif gate.get("passed"):
        warned = gate.get("warnings") or []
        cell = "passed" + (f", {len(warned)} warning(s): {'; '.join(warned)}" if warned else "")
    else:
        cell = "FAILED: " + "; ".join(gate.get("failures") or [])
    for forced in manifest.get("forced") or []:
        cell += f" | FORCED by {forced.get('by')} at {forced.get('at')}: {forced.get('reason')}"
    return cell


# --- query -----------------------------------------------------------------------------------
def _printable(df):
    """Timestamps as ISO 8601 UTC text (the session time zone is UTC)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    columns = []
    for field in df.schema.fields:
        if isinstance(field.dataType, (TimestampType, TimestampNTZType)):
            text = F.date_format(F.col(f"`{field.name}`"), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS")
            columns.append(F.concat(F.regexp_replace(text, r"\.000000$", ""), F.lit("Z")).alias(field.name))
        else:
            columns.append(F.col(f"`{field.name}`"))
    return df.select(*columns)


def _iso_utc(value) -> str:
    """A timestamp as the Spark engine prints it (:func:`_printable`): ISO 8601 in UTC with a
    ``Z``, microseconds only when not zero."""
    from datetime import UTC

    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d}T"
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
    return text + (f".{value.microsecond:06d}" if value.microsecond else "") + "Z"


def _plain(value):
    """A fetched value as both engines print it (timestamps as text)."""
    from datetime import datetime

    return _iso_utc(value) if isinstance(value, datetime) else value


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def format_rows(names: list[str], rows: list, fmt: str) -> str:
    """Rows as text: an aligned table, a JSON array of objects, or CSV (the same for both
    engines)."""
    import io

    rows = [[_plain(v) for v in row] for row in rows]
    if fmt == "json":
        return json.dumps([dict(zip(names, row)) for row in rows], indent=2, default=str)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([["" if v is None else _cell(v) for v in row] for row in rows])
        return buffer.getvalue().rstrip("\n")
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def printed_rows(df) -> tuple[list[str], list[list]]:
    """A Spark DataFrame's column names and rows as the Spark engine prints them (one job)."""
    df = _printable(df)
    names = df.columns
    return names, [[row[i] for i in range(len(names))] for row in df.collect()]


def render_rows(df, fmt: str) -> str:
    """A Spark DataFrame's rows as text (:func:`format_rows`)."""
    return format_rows(*printed_rows(df), fmt)


def print_rows(df, fmt: str = "table", out=print) -> None:
    out(render_rows(df, fmt))


def query_engine(args: argparse.Namespace) -> str:
    """duckdb unless --engine spark, or --master (a Spark setting) without --engine."""
    engine = args.engine or ("spark" if args.master else "duckdb")
    if engine == "duckdb" and args.master:
        raise wh.WarehouseError("--master is a Spark setting: use it with --engine spark")
    return engine


def cmd_query(args: argparse.Namespace) -> int:
    engine = query_engine(args)
    text = _query_duckdb(args) if engine == "duckdb" else _query_spark(args)
    print(text)
    return 0


def _query_duckdb(args: argparse.Namespace) -> str:
    from topic_lineage import duckdb_sql
    from topic_lineage.faults import fault_point

    # pinned for the whole read: retention cannot remove the version meanwhile
    with wh.reading(args.version) as version:
        if version is None:
            raise wh.WarehouseError("nothing is published yet; run 'topic-lineage build' first")
        # fault suite: a reader mid-read (topic_lineage/faults.py), checked, files not yet read
        names, rows = duckdb_sql.run(version, args.sql, on_ready=lambda: fault_point("read"))
        return format_rows(names, rows, args.format)


def _query_spark(args: argparse.Namespace) -> str:
    from topic_lineage.faults import fault_point
    from topic_lineage.local import spark_server
    from topic_lineage.spark import get_spark, quick_jit_for_version, session_running
    from topic_lineage.spark import stop as stop_spark

    # The deployment's long-lived Spark Connect server when it runs (topic_lineage/local/spark_server.py).
    remote = None if (args.master or args.version) else spark_server.remote_url()
    borrowed = False  # a session the process ran before (a notebook's, a test's): left running
    if remote:
        spark = spark_server.connect(remote)
    else:
        borrowed = session_running()
        spark = get_spark("topic-lineage-query", master=args.master or "local[2]",
                          conf={"spark.sql.shuffle.partitions": "4"},
                          quick_jit=not borrowed and quick_jit_for_version(args.version))
        spark.sparkContext.setLogLevel("FATAL")  # a bad query is reported once, below
    try:
        # pinned for the whole read: retention cannot remove the version meanwhile
        with wh.reading(args.version) as version:
            if version is None:
                raise wh.WarehouseError("nothing is published yet; run 'topic-lineage build' first")
            if remote:
                spark_server.use_published_tables(spark, version)
            else:
                wh.register_tables(spark, version)
            wh.check_read_only(spark, args.sql)  # before anything runs
            fault_point("read")  # fault suite: a reader mid-read (topic_lineage/faults.py)
            try:
                return render_rows(spark.sql(args.sql), args.format)  # Connect reports at collect
            except Exception as exc:  # analysis/parse errors are the user's to fix
                from pyspark.errors import PySparkException

                if isinstance(exc, PySparkException):
                    raise wh.WarehouseError(f"query failed: {str(exc).splitlines()[0]}") from None
                raise
    finally:
        if not borrowed:
            stop_spark(spark)


def cmd_jvm_archive(args: argparse.Namespace) -> int:
    from topic_lineage.local import jvm_archive

    return 0 if jvm_archive.make(force=args.force) else 1
