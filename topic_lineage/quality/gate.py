"""The quality gate of write-audit-publish (R7): validate a built version before it is published.

:func:`validate_version` reads the three tables of a version directory, runs one GX checkpoint per
table (suite, validation definition and checkpoint are stored in the package's GX context,
``topic_lineage/quality/gx/``; a first pass gives verdicts only, a table that fails it runs
again for its offending rows, :data:`FIRST_PASS_FORMAT`), updates the Data Docs site under
``$TOPIC_LINEAGE_HOME/quality/data_docs`` and returns a :class:`GateResult`: the verdict, every
failed expectation with a few offending rows, and the Data Docs index path.

Thresholds (:class:`GateConfig`) come from arguments, else from the environment:

- ``TOPIC_LINEAGE_MAX_AGE``: maximum age of each live-captured cluster's newest complete
  snapshot, e.g. ``36h``, ``2d``, ``90m``, ``3600`` (seconds); ``off`` disables the freshness
  check. Default ``24h``.
- ``TOPIC_LINEAGE_MAX_ERROR_SHARE``: maximum share of topics per snapshot whose describe failed,
  between 0 and 1. Default ``0.5``.

Severity (the GX ``severity`` of each expectation, set in :mod:`~topic_lineage.quality.suites`):
a failed *critical* expectation fails the gate (the version is rejected); a failed *warning*
(freshness, error share) is reported everywhere a failure is, but the gate passes.

Engine: a version whose files to read are at most :func:`in_process_limit` bytes
(``$TOPIC_LINEAGE_GATE_IN_PROCESS_MB``, default 4 MiB, and at most the small-input limit of
``topic_lineage.spark``) is validated in this process, without a Spark job: its Parquet files
read with pyarrow into pandas DataFrames (:func:`read_version_pandas`), the same suites run on
GX's pandas engine, and the row queries of the custom expectations with DuckDB. On a few
thousand rows Spark costs one job per metric, seconds in all, for milliseconds of data (issue
#24). A larger version is validated with Spark. Same suites, verdicts and report either way
(tests/test_quality_expectations.py runs every case on both engines).

What is read: all of ``snapshot_runs`` and ``topic_incarnations``; of ``topic_snapshots`` only the
files the version does not share with a base that passed the same suite (:func:`snapshot_scope`):
an incremental build hard-links its base's files, whose rows were validated there, so a cycle
validates its new observations, not the whole history (issue #16: 95-105 s of a cycle on 10 M
observations before, docs/benchmarks.md). ``validate_version(..., all_rows=True)`` (``validate
--all-rows``) reads everything.

Imports Spark and Great Expectations lazily: import this module anywhere.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.quality.suites import columns_read

log = logging.getLogger(__name__)

IN_PROCESS_ENV = "TOPIC_LINEAGE_GATE_IN_PROCESS_MB"
DEFAULT_IN_PROCESS_MB = 4.0
MAX_AGE_ENV = "TOPIC_LINEAGE_MAX_AGE"
MAX_ERROR_SHARE_ENV = "TOPIC_LINEAGE_MAX_ERROR_SHARE"
DEFAULT_MAX_AGE = timedelta(hours=24)
DEFAULT_MAX_ERROR_SHARE = 0.5
SAMPLE_ROWS = 5
"""Offending rows kept per failed expectation (all of them are in the Data Docs)."""

_DISABLED = {"off", "none", "disabled", "0"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class GateError(TopicLineageError):
    """The gate could not run (bad configuration, missing version); nothing was published."""


class QualityGateFailed(TopicLineageError):
    """A version failed validation: it was not published. ``result`` holds the details."""

    exit_code = 1

    def __init__(self, result: GateResult):
        self.result = result
        super().__init__(result.report())


def parse_max_age(text: str | None) -> timedelta | None:
    """``"36h"`` -> 36 hours; ``"off"`` -> ``None`` (freshness disabled); bare numbers are seconds."""
    if text is None or text.strip().lower() in _DISABLED:
        return None
    match = _DURATION.match(text.lower())
    if not match:
        raise GateError(
            f"invalid maximum age {text!r}: give a number with an optional unit s, m, h, d or w "
            f"(e.g. 36h), or 'off' to disable the freshness check"
        )
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def parse_share(text: str) -> float:
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise GateError(f"invalid error share {text!r}: give a number between 0 and 1, e.g. 0.5")
    return share


@dataclass(frozen=True)
class GateConfig:
    """Thresholds of the gate. ``max_age=None`` disables the freshness check."""

    max_age: timedelta | None = DEFAULT_MAX_AGE
    max_error_share: float = DEFAULT_MAX_ERROR_SHARE

    @classmethod
    def from_env(cls) -> GateConfig:
        age = os.environ.get(MAX_AGE_ENV)
        share = os.environ.get(MAX_ERROR_SHARE_ENV)
        return cls(
            max_age=DEFAULT_MAX_AGE if age is None else parse_max_age(age),
            max_error_share=DEFAULT_MAX_ERROR_SHARE if share is None else parse_share(share),
        )


CRITICAL, WARNING = "critical", "warning"


class Failure(NamedTuple):
    """One failed expectation: its name, what it means, and a few offending rows."""

    name: str
    description: str
    rows: list[dict]
    table: str = ""
    unexpected_count: int | None = None
    severity: str = CRITICAL


class Outcome(NamedTuple):
    """One evaluated expectation (passed or not), as shown in the overview page."""

    table: str
    name: str
    description: str
    success: bool
    unexpected_count: int | None
    rows: list[dict]
    severity: str = CRITICAL


@dataclass(frozen=True)
class GateResult:
    """``success``: no critical expectation failed. ``failures``: every failed expectation,
    critical ones and warnings (see ``Failure.severity``)."""

    version: str
    success: bool
    failures: list[Failure]
    docs_index: Path
    outcomes: list[Outcome] = field(default_factory=list)
    detail_pages: dict[str, str] = field(default_factory=dict)
    """Table -> URL of its Great Expectations validation page for this run."""
    config: GateConfig | None = None
    validated_at: datetime | None = None
    seconds: float = 0.0
    scope: dict[str, str] = field(default_factory=dict)
    """Table -> what of it was read, for a table not read whole (:class:`SnapshotScope`)."""

    @property
    def failed_names(self) -> list[str]:
        return [failure.name for failure in self.failures]

    @property
    def critical_failures(self) -> list[Failure]:
        return [f for f in self.failures if f.severity != WARNING]

    @property
    def warning_failures(self) -> list[Failure]:
        return [f for f in self.failures if f.severity == WARNING]

    @property
    def warnings(self) -> list[str]:
        """``"<table>: <name>"`` of every failed warning-severity expectation."""
        return [f"{f.table}: {f.name}" for f in self.warning_failures]

    def summary(self) -> str:
        """The failed critical expectations in one line (what a rejection names)."""
        return "; ".join(f"{f.table}: {f.name}" for f in self.critical_failures) or "see Data Docs"

    @property
    def evaluated(self) -> int:
        return len(self.outcomes)

    def report(self) -> str:
        """The verdict in words: what failed, on which rows, and where the details are."""
        met = self.evaluated - len(self.failures)
        if self.success:
            lines = [f"quality gate PASSED for version {self.version}: {met} of {self.evaluated} "
                     f"expectation(s) met" + (f", {len(self.warnings)} warning(s)" if self.warnings else "")]
        else:
            lines = [
                (
                    f"quality gate FAILED for version {self.version}: "
                    f"{len(self.critical_failures)} of {self.evaluated} expectation(s) not met"
                )
            ]
            for failure in self.critical_failures:
                count = "" if failure.unexpected_count is None else f" ({failure.unexpected_count} row(s))"
                lines.append(f"  x {failure.table}: {failure.name}{count}")
                if failure.description:
                    lines.append(f"      {failure.description}")
                for row in failure.rows:
                    lines.append("      " + ", ".join(f"{k}={show(v)}" for k, v in row.items()))
        for failure in self.warning_failures:  # one line each: they never block
            rows = "; ".join(", ".join(f"{k}={show(v)}" for k, v in row.items()) for row in failure.rows[:3])
            lines.append(f"  ! warning: {failure.table}: {failure.name}" + (f" ({rows})" if rows else ""))
        for table, scope in sorted(self.scope.items()):
            lines.append(f"  {table}: {scope}")
        lines.append(f"Data Docs: {self.docs_index}")
        return "\n".join(lines)


def show(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "NULL" if value is None else str(value)


# --- reading a version ---------------------------------------------------------------------------
def version_table_path(version: str, table: str) -> Path:
    from topic_lineage import warehouse

    return Path(warehouse.version_path(version, table))


def _check_table(version: str, table: str) -> Path:
    """The table's directory in a built version; a clear error when the version lacks it."""
    path = version_table_path(version, table)
    if not path.exists():
        raise GateError(
            f"version {version!r} has no table {table} at {path}; build it again with "
            f"'topic-lineage build'"
        )
    return path


def read_version(spark, version: str, *, skip: tuple[str, ...] = ()) -> dict:
    """Every table of a built version as DataFrames of the columns the gate validates
    (``suites.columns_read``), in the contract's order; the tables in ``skip`` are checked to
    exist but not read (the caller reads part of them)."""
    from topic_lineage.duckdb_sql import table_files

    frames = {}
    for table in t.TABLES:
        _check_table(version, table)
        if table in skip:
            continue
        # the files of the version's staged Iceberg snapshot: what publishing would publish
        files = [str(f) for f in table_files(version, table)]
        frames[table] = spark.read.parquet(*files).select(*columns_read(table))
    return frames


# --- reading a small version in process -----------------------------------------------------------
def in_process_limit() -> int:
    """Bytes of files to validate up to which the gate runs in this process on pandas
    DataFrames instead of with Spark (``$TOPIC_LINEAGE_GATE_IN_PROCESS_MB``, default 4; 0 turns
    it off). Never above ``topic_lineage.spark.small_input_limit()``: ``$TOPIC_LINEAGE_SMALL_INPUT_MB=0``
    turns it off too, with the other small-input settings."""
    from topic_lineage.fsutil import size_setting
    from topic_lineage.spark import small_input_limit

    return min(size_setting(IN_PROCESS_ENV, DEFAULT_IN_PROCESS_MB, "validate every version with Spark"),
               small_input_limit())


def validates_in_process(input_bytes: int) -> bool:
    """Whether a version whose files to validate hold ``input_bytes`` is validated in process."""
    limit = in_process_limit()
    return limit > 0 and input_bytes <= limit


def arrow_to_pandas(table: str, data):
    """An Arrow table of ``table``'s columns as the pandas DataFrame the gate validates: the
    columns it reads (``suites.columns_read``) in the contract's order and types, TIMESTAMP
    columns as naive UTC (the instants Spark compares, its session being in UTC; what Spark's
    rows hold on a UTC machine), integer columns as pandas' nullable integers (a NULL offset
    stays NULL, not a float NaN)."""
    import pandas as pd
    import pyarrow as pa

    read = columns_read(table)
    schema = t.arrow_schema_of(t.TABLE_DDL[table])
    naive = pa.schema([
        pa.field(f.name, pa.timestamp("us") if pa.types.is_timestamp(f.type) else f.type)
        for f in schema if f.name in read
    ])
    data = data.select(naive.names).cast(naive)
    nullable = {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype()}
    return data.to_pandas(types_mapper=nullable.get)


def read_version_pandas(version: str, *, scope: SnapshotScope | None = None) -> dict:
    """Every table of a built version as pandas DataFrames (:func:`arrow_to_pandas`), read with
    pyarrow, no Spark; of ``topic_snapshots`` only ``scope.new_files`` when a scope is given."""
    import pyarrow.dataset as ds

    from topic_lineage.duckdb_sql import table_files

    frames = {}
    for table in t.TABLES:
        _check_table(version, table)
        files = (list(scope.new_files) if scope is not None and table == t.TOPIC_SNAPSHOTS
                 else table_files(version, table))
        schema = t.arrow_schema_of(t.TABLE_DDL[table])
        data = (ds.dataset([str(f) for f in files], format="parquet").to_table(columns=columns_read(table))
                if files else schema.empty_table())
        frames[table] = arrow_to_pandas(table, data)
    return frames


# --- what of topic_snapshots needs validating ----------------------------------------------------
SUITE_FINGERPRINT = "topic_snapshots_suite"
"""Key of the verdict (version manifest, ``gate``) holding the fingerprint of the
``topic_snapshots`` suite that passed the version's files."""


@dataclass(frozen=True)
class SnapshotScope:
    """The ``topic_snapshots`` files of a version the gate reads: ``new_files``, and not the
    ``inherited`` ones, which are the very files (same device and inode: hard links) of the
    version's ``base``, a version the gate passed with the same suite.

    Sound because every ``topic_snapshots`` expectation is about one row (canonical, not
    reserved) or one snapshot (no ID carried by two names), and an incremental build writes each
    new snapshot's rows to new files only (``spark_jobs/build.py``): a snapshot is in the base's
    files or in the new ones, never in both. Files are never rewritten in place."""

    base: str
    new_files: tuple[Path, ...]
    inherited: int

    def describe(self) -> str:
        return (f"validated the rows of {len(self.new_files)} new file(s); {self.inherited} file(s) "
                f"are those of version {self.base}, which passed the same suite")


def suite_fingerprint(ctx, table: str = t.TOPIC_SNAPSHOTS) -> str:
    """sha256 of the stored suite's expectations (type, arguments, severity): a verdict
    inherited by file is only taken from a base checked by the same expectations."""
    import hashlib
    import json

    configs = [e.configuration.to_json_dict() for e in ctx.suites.get(table).expectations]
    for config in configs:
        config.pop("id", None)
        config.pop("rendered_content", None)
    return hashlib.sha256(json.dumps(configs, sort_keys=True, default=str).encode()).hexdigest()


def snapshot_scope(version: str, fingerprint: str) -> SnapshotScope | None:
    """What of ``version``'s ``topic_snapshots`` to read, or None to read it all: when it has
    no base, when the base's verdict did not pass or came from another suite, or when no file is
    shared (copied instead of linked, or the base is gone)."""
    from topic_lineage import warehouse

    try:
        manifest = warehouse.read_manifest(version)
        base = manifest.get("base_version")
        base_manifest = warehouse.read_manifest(base) if base else {}
    except warehouse.WarehouseError:
        return None
    verdict = base_manifest.get("gate") or {}
    if verdict.get("passed") is not True or verdict.get(SUITE_FINGERPRINT) != fingerprint:
        return None
    from topic_lineage.warehouse import reads

    if not reads.reads_its_own_files(version, t.TOPIC_SNAPSHOTS, manifest):
        return None  # the catalog names other files (another engine compacted main): read them all
    ours = version_table_path(version, t.TOPIC_SNAPSHOTS)
    theirs = version_table_path(base, t.TOPIC_SNAPSHOTS)
    # on object storage a kept file is a reference (the working copy may not hold the base)
    kept = manifest.get(warehouse.REFERENCES) or {}
    base_kept = base_manifest.get(warehouse.REFERENCES) or {}
    new_files, inherited = [], 0
    for path in sorted(ours.glob("*.parquet")):
        name = f"{t.TOPIC_SNAPSHOTS}/{path.name}"
        if name in kept:  # the base's file when the base's is stored in the same object
            same = kept[name] == base_kept.get(name, f"{base}/{name}")
        else:
            try:
                same = os.path.samefile(path, theirs / path.name)
            except OSError:  # not in the base (new), or the base is gone
                same = False
        if same:
            inherited += 1
        else:
            new_files.append(path)
    if not inherited:
        return None
    return SnapshotScope(base=base, new_files=tuple(new_files), inherited=inherited)


def _scoped_snapshots(spark, version: str, scope: SnapshotScope):
    table = version_table_path(version, t.TOPIC_SNAPSHOTS)
    columns = columns_read(t.TOPIC_SNAPSHOTS)
    if not scope.new_files:  # nothing new: no rows to check (the schema, read from the table)
        return spark.read.parquet(str(table)).select(*columns).limit(0)
    return spark.read.parquet(*[str(path) for path in scope.new_files]).select(*columns)


# --- validating ----------------------------------------------------------------------------------
def validate_version(
    spark,
    version: str,
    *,
    max_age: timedelta | None | str = "env",
    max_error_share: float | None = None,
    now: datetime | None = None,
    all_rows: bool = False,
) -> GateResult:
    """Validate the tables of ``version`` (a directory under ``tables.versions_dir()``).

    ``max_age``: a timedelta, ``None`` to disable freshness, or ``"env"`` (default) for
    ``$TOPIC_LINEAGE_MAX_AGE`` / 24 hours. ``now`` (aware) is the instant freshness and "no
    snapshot from the future" are judged against; default: the current time. ``all_rows``:
    read all of ``topic_snapshots``, also the files a passed base shares (:func:`snapshot_scope`).

    ``spark``: a SparkSession, or a callable returning one, called only when the version is
    validated with Spark (a small version is validated in process: no session is needed then,
    so a command or task that has none starts none).
    """
    from topic_lineage import warehouse
    from topic_lineage.fsutil import files_bytes
    from topic_lineage.quality import context as qc
    from topic_lineage.spark import sized_for

    config = GateConfig.from_env()
    if max_age != "env":
        config = GateConfig(max_age=max_age, max_error_share=config.max_error_share)
    if max_error_share is not None:
        config = GateConfig(max_age=config.max_age, max_error_share=max_error_share)
    ctx = qc.get_context()
    fingerprint = suite_fingerprint(ctx)
    with warehouse.reading(version):  # retention cannot remove it while it is validated
        scope = None if all_rows else snapshot_scope(version, fingerprint)
        read = [version_table_path(version, x)
                for x in (t.SNAPSHOT_RUNS, t.TOPIC_INCARNATIONS, *t.GROUP_TABLES)]
        read += scope.new_files if scope else [version_table_path(version, t.TOPIC_SNAPSHOTS)]
        input_bytes = files_bytes(*read)
        described = {t.TOPIC_SNAPSHOTS: scope.describe()} if scope else None
        if validates_in_process(input_bytes):  # a few thousand rows: pandas, no Spark job
            frames = read_version_pandas(version, scope=scope)
            result = validate_frames(None, frames, version=version, config=config, now=now,
                                     ctx=ctx, scope=described)
        else:
            spark = spark() if callable(spark) else spark
            frames = read_version(spark, version, skip=(t.TOPIC_SNAPSHOTS,) if scope else ())
            if scope is not None:
                frames[t.TOPIC_SNAPSHOTS] = _scoped_snapshots(spark, version, scope)
            with sized_for(spark, input_bytes):  # little to read: settings for that
                result = validate_frames(spark, frames, version=version, config=config, now=now,
                                         ctx=ctx, scope=described)
    # the verdict publish() checks: the version is validated (warnings allowed) or rejected
    warehouse.record_verdict(
        version, passed=result.success, warnings=result.warnings,
        failures=[f"{f.table}: {f.name}" for f in result.critical_failures],
        report=result.report() if not result.success else "",
        details={SUITE_FINGERPRINT: fingerprint,
                 "topic_snapshots_read": scope.describe() if scope else "all rows"},
    )
    return result


def validate_frames(
    spark,
    frames: dict,
    *,
    version: str,
    config: GateConfig | None = None,
    now: datetime | None = None,
    sample_rows: int = SAMPLE_ROWS,
    ctx=None,
    scope: dict[str, str] | None = None,
) -> GateResult:
    """Run every table's checkpoint on the given DataFrames (keyed by table name): Spark
    DataFrames on the Spark checkpoint, pandas DataFrames (:func:`read_version_pandas`) on the
    pandas one (``spark`` is not used then and may be None).

    Tables missing from ``frames`` are not validated (tests validate one table at a time); the
    gate proper always passes all of them. ``ctx``: the GX context (default: opened here);
    ``scope``: table -> what of it the frame holds, when not the whole table (reported).
    """
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
    )

    from topic_lineage.quality import context as qc
    from topic_lineage.quality import overview, suites

    config = config or GateConfig.from_env()
    keep_runs = overview.keep_runs()  # a bad setting fails before the validation, not after
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        raise GateError(f"'now' must be an aware UTC datetime, got {now!r}")
    parameters = {
        suites.NOW: now.astimezone(UTC).isoformat(),
        suites.MAX_AGE_SECONDS: None if config.max_age is None else config.max_age.total_seconds(),
        suites.MAX_ERROR_SHARE: config.max_error_share,
    }
    started = time.monotonic()
    qc.pull_results()  # with the home on object storage: the runs and results stored elsewhere
    ctx = ctx or qc.get_context()
    validated_at = datetime.now(UTC)
    run_id = RunIdentifier(run_name=version, run_time=validated_at)
    outcomes: list[Outcome] = []
    detail_pages: dict[str, str] = {}
    validated: list = []  # (table, result key) of every table, for its Data Docs page
    docs_pending: list = []  # resources of the tables whose Data Docs the first pass owes
    for table in suites.SUITE_BUILDERS:
        if table not in frames:
            continue
        engine = qc.PANDAS if _is_pandas(frames[table]) else qc.SPARK
        # on Spark every expectation scans the table: read it once
        frame = frames[table] if engine == qc.PANDAS else frames[table].cache()
        try:
            checkpoint = ctx.checkpoints.get(qc.checkpoint_name(table, engine))
            batch = {"dataframe": frame}
            run_results = _first_pass(checkpoint, batch, parameters, run_id)
            if all(_met(suite_result) for suite_result in run_results.values()):
                for key, suite_result in run_results.items():
                    docs_pending += [key, ExpectationSuiteIdentifier(name=suite_result.suite_name)]
            else:
                # the checkpoint's own format (COMPLETE): the offending rows the report shows;
                # the same run and batch, so its result replaces the first one in the store
                run_results = checkpoint.run(
                    batch_parameters=batch, expectation_parameters=parameters, run_id=run_id,
                ).run_results
        finally:
            if engine == qc.SPARK:
                frame.unpersist()
        for key, suite_result in run_results.items():
            outcomes.extend(_outcomes(table, suite_result, sample_rows))
            validated.append((table, key))
    if docs_pending:  # one site build for the tables that passed (a checkpoint builds its own)
        ctx.build_data_docs(resource_identifiers=docs_pending, build_index=True)
    for table, key in validated:
        urls = ctx.get_docs_sites_urls(resource_identifier=key)
        if urls and urls[0].get("site_url"):
            detail_pages[table] = urls[0]["site_url"]
    failures = [
        Failure(o.name, o.description, o.rows, o.table, o.unexpected_count, o.severity)
        for o in outcomes
        if not o.success
    ]
    gate_result = GateResult(
        version=version,
        success=not any(f.severity != WARNING for f in failures),
        failures=failures,
        docs_index=qc.overview_page(),
        outcomes=outcomes,
        detail_pages=detail_pages,
        config=config,
        validated_at=validated_at,
        seconds=time.monotonic() - started,
        scope=dict(scope or {}),
    )
    overview.record(gate_result, keep=keep_runs)
    log.info("validated version %s in %.1f s", version, gate_result.seconds)
    return gate_result


def _is_pandas(frame) -> bool:
    import pandas as pd

    return isinstance(frame, pd.DataFrame)


FIRST_PASS_FORMAT = {"result_format": "BOOLEAN_ONLY"}
"""The result format of a table's first validation: the verdict of each expectation and no
details (issue #24: on small tables the details, lists of offending rows even where there are
none, were 45 % of the validation's time). A table with an expectation not met, or not
evaluated, is validated again with its checkpoint's own format (COMPLETE) for the report."""


def _first_pass(checkpoint, batch: dict, parameters: dict, run_id) -> dict:
    """A checkpoint's validation definitions run with :data:`FIRST_PASS_FORMAT`, keyed as the
    checkpoint keys its results. Each result is stored (by the validation definition, as when the
    checkpoint runs it); the checkpoint's action, the Data Docs update, is left to the caller."""
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    results = {}
    for definition in checkpoint.validation_definitions:
        result = definition.run(
            checkpoint_id=checkpoint.id, batch_parameters=batch,
            expectation_parameters=parameters, result_format=FIRST_PASS_FORMAT, run_id=run_id,
        )
        key = ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=definition.suite.name),
            run_id=run_id, batch_identifier=result.batch_id,
        )
        results[key] = result
    return results


def _met(suite_result) -> bool:
    """Every expectation of a suite's result evaluated and met (warnings included: a failed
    warning is reported with its offending rows too)."""
    return all(
        evaluated.success and not (evaluated.exception_info or {}).get("raised_exception")
        for evaluated in suite_result.results
    )


def _outcomes(table: str, suite_result, sample_rows: int) -> list[Outcome]:
    outcomes = []
    for evaluated in suite_result.results:
        config = evaluated.expectation_config
        name = (config.meta or {}).get("name") or config.type
        # custom expectations carry their description as a class default, not in the config
        description = config.description or (config.to_domain_obj().description or "")
        severity = _severity(config)
        message = _raised(evaluated.exception_info or {})
        if message is not None:
            description = f"{description} (could not be evaluated: {message})"
            outcomes.append(Outcome(table, name, description, False, None, [], severity))
            continue
        rows, count = ([], None) if evaluated.success else _offending_rows(evaluated.result or {}, sample_rows)
        outcomes.append(Outcome(table, name, description, bool(evaluated.success), count, rows, severity))
    return outcomes


def _raised(info: dict) -> str | None:
    """The message of the exception an expectation raised, else ``None``. GX keeps it in the
    result's ``exception_info``, or, when one of its metrics raised (a missing column, a query
    that fails), under that metric's id there."""
    for found in (info, *(v for v in info.values() if isinstance(v, dict))):
        if found.get("raised_exception"):
            return found.get("exception_message") or "raised an exception"
    return None


def _severity(config) -> str:
    """GX's ``severity`` of an evaluated expectation: warning, or critical (GX's default; an
    ``info`` expectation is reported like a warning)."""
    value = getattr(config, "severity", None)
    value = getattr(value, "value", value) or CRITICAL
    return CRITICAL if value == CRITICAL else WARNING


def _offending_rows(result: dict, sample_rows: int) -> tuple[list[dict], int | None]:
    """A few offending rows from a GX result, whatever the expectation type."""
    unexpected = (result.get("details") or {}).get("unexpected_rows")
    if unexpected is not None:  # UnexpectedRowsExpectation: the query's rows
        return [_native_row(row) for row in unexpected[:sample_rows]], result.get("observed_value")
    indexed = result.get("unexpected_index_list") or result.get("partial_unexpected_index_list")
    if indexed:  # map expectations: identifying columns + the offending value(s)
        return [_native_row(row) for row in indexed[:sample_rows]], result.get("unexpected_count")
    values = result.get("partial_unexpected_list") or []
    return [{"value": _native(value)} for value in values[:sample_rows]], result.get("unexpected_count")


def _native_row(row) -> dict:
    return {key: _native(value) for key, value in dict(row).items()}


def _native(value: Any) -> Any:
    """A value of an offending row as Spark's rows hold it, whichever engine found it: pandas'
    Timestamp a datetime, numpy's scalars Python's, NaT / NA / NaN None."""
    import math

    if type(value).__name__ in ("NaTType", "NAType") or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "to_pydatetime"):  # pandas.Timestamp (naive UTC, as Spark's)
        return value.to_pydatetime()
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    return value
