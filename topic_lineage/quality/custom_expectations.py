"""The one module that defines topic-lineage's named Great Expectations expectations.

GX looks an expectation up by the snake-case name of its class when it loads a suite, and
silently drops expectations whose class is not registered. So this module must be imported
before any suite is loaded: :func:`topic_lineage.quality.context.get_context` does that, and a
test proves that the loaded suites contain every expectation.

Every class here is an ``UnexpectedRowsExpectation``: a SQL query over ``{batch}`` that returns
the offending rows (cluster, name, ID first, so that a failure can be read at a glance).
Through ``_OffendingRowsExpectation``, a ``BOOLEAN_ONLY`` validation only counts those rows.
The parametrised ones (freshness, no snapshot from the future, error share) take their thresholds
as suite parameters at validation time; their query is derived from those values.

One query text, two engines: on Spark DataFrames GX runs it with Spark SQL; on pandas
DataFrames (a version small enough to validate in process, ``quality.gate.in_process_limit``)
:class:`UnexpectedRowsQueryRowCountOnPandas` and :class:`UnexpectedRowsQueryTableOnPandas` run
it with DuckDB over the batch's DataFrame (GX has no pandas implementation of these metrics).
Every query is written in the SQL both dialects read the same way (``max_by``, ``count_if``,
``FILTER (WHERE ...)``, window functions, ``array_agg`` / ``array_sort`` / ``concat_ws``,
``TIMESTAMP '...'`` literals in UTC, thresholds computed into literals rather than interval
arithmetic, which the two spell differently), so there is one query text per expectation and
no translation; tests/test_quality_expectations.py runs every case on both engines.
"""

from __future__ import annotations

# GX validates expectation fields with pydantic v1; keep typing.Union in field annotations.
# ruff: noqa: UP007
import os
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Union

import great_expectations.expectations as gxe
from great_expectations.compatibility import pydantic
from great_expectations.core.metric_domain_types import MetricDomainTypes
from great_expectations.core.result_format import ResultFormat
from great_expectations.core.suite_parameters import is_suite_parameter
from great_expectations.execution_engine import PandasExecutionEngine
from great_expectations.expectations.metrics.metric_provider import metric_value
from great_expectations.expectations.metrics.query_metrics import (
    UnexpectedRowsQueryRowCount,
    UnexpectedRowsQueryTable,
)

from topic_lineage import tables as t

# Offending rows of incarnation checks always start with these, in this order.
_WHO = f"{t.CLUSTER_ID}, {t.TOPIC_NAME}, {t.TOPIC_ID}"

_ROWS, _ROW_COUNT = "unexpected_rows_query.table", "unexpected_rows_query.row_count"


class _OffendingRowsExpectation(gxe.UnexpectedRowsExpectation):
    """GX's ``UnexpectedRowsExpectation``, asking only for the count in a ``BOOLEAN_ONLY``
    validation (the gate's first pass, topic_lineage.quality.gate.FIRST_PASS_FORMAT).

    GX runs the query twice, once counting its rows and once fetching them, whatever the result
    format, and then drops the rows when the format is ``BOOLEAN_ONLY``. Each run is a Spark
    job, which on small tables costs more than the data (issue #24). The verdict is the same:
    met when the query returns no row.
    """

    def get_validation_dependencies(self, execution_engine=None, runtime_configuration=None):
        dependencies = super().get_validation_dependencies(
            execution_engine=execution_engine, runtime_configuration=runtime_configuration,
        )
        if dependencies.result_format.get("result_format") == ResultFormat.BOOLEAN_ONLY:
            dependencies.remove_metric_configuration(_ROWS)
        return dependencies

    def _validate(self, metrics: dict, runtime_configuration: dict | None = None,
                  execution_engine=None):
        if _ROWS not in metrics:  # BOOLEAN_ONLY: the count is the verdict
            return {"success": metrics[_ROW_COUNT] == 0}
        return super()._validate(metrics, runtime_configuration, execution_engine)


# --- the row queries on pandas DataFrames, with DuckDB --------------------------------------------
_BATCH_VIEW = "batch"
"""The name the batch's DataFrame is registered under in DuckDB (``{batch}`` in a query)."""

_database: tuple[int, Any] | None = None  # (pid, in-memory DuckDB database)
_database_lock = threading.Lock()


def _duckdb_cursor():
    """A new connection (cursor) to this process's in-memory DuckDB database, opened on first use.

    Every query of the gate runs on a cursor of its own: registered DataFrames and settings are
    the cursor's, and a cursor costs about 1 ms where a database costs about 15 ms (issue #24: a
    small version's gate runs a few dozen queries). A forked child (the warm process's) opens a
    database of its own: DuckDB's threads do not survive a fork."""
    global _database
    import duckdb

    with _database_lock:
        if _database is None or _database[0] != os.getpid():
            _database = (os.getpid(), duckdb.connect())
        return _database[1].cursor()


def _duckdb_rows(cls, execution_engine, metric_domain_kwargs: dict, metric_value_kwargs: dict,
                 wrap: str) -> tuple[list[str], list[tuple]]:
    """The metric's query, wrapped in ``wrap`` (``... FROM ({query}) ...``), run by DuckDB over
    the batch's pandas DataFrame: (column names, rows).

    The session's time zone is UTC, as Spark's (``topic_lineage.spark``): the tables' TIMESTAMP
    columns reach pandas as naive UTC (``quality.gate.arrow_to_pandas``), the queries' literals
    are UTC, and nothing is converted through the machine's local zone."""
    frame, _, _ = execution_engine.get_compute_domain(
        metric_domain_kwargs, domain_type=MetricDomainTypes.TABLE
    )
    query = cls._format_query(cls._get_query_from_metric_value_kwargs(metric_value_kwargs),
                              batch=_BATCH_VIEW)
    with _duckdb_cursor() as connection:
        connection.execute("SET TimeZone = 'UTC'")
        connection.register(_BATCH_VIEW, frame)
        cursor = connection.execute(wrap.format(query=query))
        return [column[0] for column in cursor.description], cursor.fetchall()


class UnexpectedRowsQueryRowCountOnPandas(UnexpectedRowsQueryRowCount):
    """``unexpected_rows_query.row_count`` on GX's pandas engine: the query's rows counted by
    DuckDB. Registered for the pandas engine only (the Spark and SQL implementations are GX's
    own, inherited unchanged)."""

    @metric_value(engine=PandasExecutionEngine)
    def _pandas(cls, execution_engine, metric_domain_kwargs: dict, metric_value_kwargs: dict,
                metrics: dict, runtime_configuration: dict) -> int:
        _, rows = _duckdb_rows(cls, execution_engine, metric_domain_kwargs, metric_value_kwargs,
                               "SELECT count(*) FROM ({query})")
        return int(rows[0][0])


class UnexpectedRowsQueryTableOnPandas(UnexpectedRowsQueryTable):
    """``unexpected_rows_query.table`` on GX's pandas engine: the query's rows (at most GX's
    ``MAX_RESULT_RECORDS`` unless ``fetch_all``), as dicts, as GX's Spark implementation
    returns them."""

    @metric_value(engine=PandasExecutionEngine)
    def _pandas(cls, execution_engine, metric_domain_kwargs: dict, metric_value_kwargs: dict,
                metrics: dict, runtime_configuration: dict) -> list[dict]:
        from great_expectations.constants import MAX_RESULT_RECORDS

        wrap = "{query}" if metric_value_kwargs.get("fetch_all", False) else (
            f"SELECT * FROM ({{query}}) LIMIT {int(MAX_RESULT_RECORDS)}")
        names, rows = _duckdb_rows(cls, execution_engine, metric_domain_kwargs,
                                   metric_value_kwargs, wrap)
        return [dict(zip(names, row, strict=True)) for row in rows]


# --- topic_incarnations ------------------------------------------------------------------------
class ExpectDeletedTopicIdsNeverToComeBack(_OffendingRowsExpectation):
    """Deleted topic IDs never come back (R6, KAFKA-19383).

    Fails on any ``reappeared`` version and on any version that starts at or after the deletion
    of its incarnation.
    """

    unexpected_rows_query: str = (
        f"SELECT {_WHO}, version, change_type, valid_from, deleted_at FROM {{batch}} "
        f"WHERE change_type = 'reappeared' OR valid_from >= deleted_at"
    )
    description: str = (
        "Deleted topic IDs never come back: no `reappeared` version, and no version with "
        "valid_from >= deleted_at."
    )


class ExpectOneCurrentRowPerLiveIncarnation(_OffendingRowsExpectation):
    """Exactly one current row per live incarnation, none for a deleted one."""

    unexpected_rows_query: str = (
        f"SELECT {t.CLUSTER_ID}, max_by({t.TOPIC_NAME}, version) AS {t.TOPIC_NAME}, "
        f"max_by({t.TOPIC_ID}, version) AS {t.TOPIC_ID}, incarnation_key, "
        f"count_if(is_current) AS current_rows, max(deleted_at) AS deleted_at "
        f"FROM {{batch}} GROUP BY {t.CLUSTER_ID}, incarnation_key "
        f"HAVING (max(deleted_at) IS NULL AND count_if(is_current) <> 1) "
        f"OR (max(deleted_at) IS NOT NULL AND count_if(is_current) > 0)"
    )
    description: str = (
        "Exactly one current row per live incarnation, and none for a deleted incarnation."
    )


class ExpectVersionsOfAnIncarnationNotToOverlap(_OffendingRowsExpectation):
    """Ordered by valid_from, each version ends (valid_to) no later than the next one starts."""

    unexpected_rows_query: str = (
        f"SELECT {_WHO}, incarnation_key, version, valid_from, valid_to, "
        f"previous_version, previous_valid_to FROM ("
        f"SELECT *, "
        f"lag(version) OVER (PARTITION BY incarnation_key ORDER BY valid_from, version) "
        f"AS previous_version, "
        f"lag(valid_to) OVER (PARTITION BY incarnation_key ORDER BY valid_from, version) "
        f"AS previous_valid_to, "
        f"row_number() OVER (PARTITION BY incarnation_key ORDER BY valid_from, version) AS position "
        f"FROM {{batch}}) "
        f"WHERE position > 1 AND (previous_valid_to IS NULL OR previous_valid_to > valid_from)"
    )
    description: str = (
        "Versions of one incarnation do not overlap: each version is closed (valid_to) no "
        "later than the next one opens (valid_from)."
    )


# --- consumer lineage (R8-R10) -----------------------------------------------------------------
class ExpectNoCarriedPositions(_OffendingRowsExpectation):
    """R9: no group committed, on an incarnation, a position beyond that incarnation's log end
    offset read in the same snapshot: a position carried across a delete + re-create (Kafka
    matches committed offsets by topic name). A *warning*: the history is right, the consumer is
    not; each offending row names the cluster, group, topic and incarnation."""

    unexpected_rows_query: str = (
        f"SELECT {t.CLUSTER_ID}, {t.GROUP_ID}, {t.TOPIC_NAME}, {t.TOPIC_ID}, incarnation_key, "
        f"max_committed_offset, first_seen_at, last_seen_at FROM {{batch}} WHERE carried_offset"
    )
    description: str = (
        "No consumer group carried a committed position across a topic's re-creation: a "
        "committed offset above the log end offset of the incarnation it was committed on."
    )


class ExpectUnattributedOffsetsToCarryNoTopicId(_OffendingRowsExpectation):
    """R8: an offset that belongs to no incarnation has no topic ID either (and the other way
    round, a topic ID always comes with its incarnation)."""

    unexpected_rows_query: str = (
        f"SELECT {t.CLUSTER_ID}, {t.CAPTURED_AT}, {t.GROUP_ID}, {t.TOPIC_NAME}, {t.TOPIC_ID}, "
        f"incarnation_key FROM {{batch}} WHERE incarnation_key IS NULL AND {t.TOPIC_ID} IS NOT NULL"
    )
    description: str = (
        "An offset attributed to no incarnation carries no topic ID (R8: it stays in "
        "group_offsets with a NULL topic_id)."
    )


# --- snapshot_runs (parametrised) ---------------------------------------------------------------
def _utc(value: Any) -> datetime:
    """An aware datetime or ISO text (the ``now`` suite parameter) as a UTC datetime; naive
    values are refused (their zone would be the machine's)."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no time zone; give it in UTC")
    return moment.astimezone(UTC)


def _utc_literal(value: Any) -> str:
    """A timestamp literal, in UTC to the microsecond, for an aware datetime or ISO text.

    ``TIMESTAMP 'yyyy-mm-dd hh:mm:ss.ffffff'`` is the same instant in both dialects because
    both sessions are in UTC: Spark reads the literal in its session time zone (UTC,
    ``topic_lineage.spark``) and compares TIMESTAMP (UTC instants); DuckDB compares it, as a
    plain TIMESTAMP, with the naive UTC columns of the pandas batch."""
    return "TIMESTAMP '" + _utc(value).strftime("%Y-%m-%d %H:%M:%S.%f") + "'"


# --- topic_snapshots ---------------------------------------------------------------------------
class ExpectObservedTopicIdsToBeUniquePerSnapshot(_OffendingRowsExpectation):
    """No snapshot shows two names carrying one topic ID (contract, "Shared IDs").

    Such a snapshot (a broker bug of the KAFKA-19383 family) is stored as observed and the build
    stays deterministic, but nothing built from it is published: the offending row names the
    cluster, the instant, the ID and every name that carried it.

    Two steps, the second exact: the IDs that two names carried anywhere in the table (one
    group per ID, a few thousand where a snapshot has thousands of topics), then, for the rows
    of those IDs only, the snapshots in which they did. Grouping every row by (cluster,
    instant, ID) directly, one group per row, took 10-14 s on 10 M rows on 2 cores; these two
    steps 2 s (docs/benchmarks.md). The suspects are few (none in a healthy history), so
    Spark broadcasts them (the hint; DuckDB reads it as a comment).
    """

    unexpected_rows_query: str = (
        f"WITH suspects AS (SELECT {t.CLUSTER_ID}, {t.TOPIC_ID} FROM {{batch}} "
        f"WHERE {t.TOPIC_ID} IS NOT NULL GROUP BY {t.CLUSTER_ID}, {t.TOPIC_ID} "
        f"HAVING count(DISTINCT {t.TOPIC_NAME}) > 1) "
        f"SELECT /*+ BROADCAST(s) */ b.{t.CLUSTER_ID}, b.{t.CAPTURED_AT}, b.{t.TOPIC_ID}, "
        f"concat_ws(', ', array_sort(array_agg(DISTINCT b.{t.TOPIC_NAME}))) AS {t.TOPIC_NAME}, "
        f"count(DISTINCT b.{t.TOPIC_NAME}) AS names FROM {{batch}} b JOIN suspects s "
        f"ON b.{t.CLUSTER_ID} = s.{t.CLUSTER_ID} AND b.{t.TOPIC_ID} = s.{t.TOPIC_ID} "
        f"GROUP BY b.{t.CLUSTER_ID}, b.{t.CAPTURED_AT}, b.{t.TOPIC_ID} "
        f"HAVING count(DISTINCT b.{t.TOPIC_NAME}) > 1"
    )
    description: str = (
        "No snapshot shows two topic names carrying one topic ID: a Kafka topic ID names one "
        "topic (a broker bug of the KAFKA-19383 family otherwise)."
    )


class _ParametrisedRowsExpectation(_OffendingRowsExpectation):
    """An UnexpectedRowsExpectation whose query is derived from its own (suite-parameter) fields.

    While a field is still a ``{"$PARAMETER": ...}`` placeholder (in the stored suite) the query
    shows the placeholder; at validation time GX substitutes the values, re-creates the
    expectation, and the query is built from them.
    """

    unexpected_rows_query: Union[str, dict] = ""
    parameter_names: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def _query(cls, **values: Any) -> str:  # pragma: no cover - every subclass defines it
        raise TypeError(f"{cls.__name__} must define _query")

    @pydantic.root_validator(pre=True)
    def _derive_query(cls, values: dict) -> dict:
        params = {name: values.get(name, cls.__fields__[name].default) for name in cls.parameter_names}
        if any(is_suite_parameter(value) for value in params.values()):
            placeholders = {
                name: f"<{value['$PARAMETER']}>" if is_suite_parameter(value) else value
                for name, value in params.items()
            }
            values["unexpected_rows_query"] = cls._query(placeholder=True, **placeholders)
        else:
            values["unexpected_rows_query"] = cls._query(placeholder=False, **params)
        return values


class ExpectNewestCompleteSnapshotOfEachClusterToBeFresh(_ParametrisedRowsExpectation):
    """The newest complete snapshot of every cluster captured live is younger than
    ``max_age_seconds``. Clusters known only from imports (archived history) are not judged.

    ``max_age_seconds = None`` disables the check (replaying archived history): the query then
    selects nothing.
    """

    now: Union[str, dict, None] = None
    max_age_seconds: Union[float, dict, None] = None
    parameter_names: ClassVar[tuple[str, ...]] = ("now", "max_age_seconds")
    description: str = (
        "The newest complete snapshot of each live-captured cluster is fresher than the "
        "configured maximum age (clusters known only from imports are not judged)."
    )

    @classmethod
    def _query(cls, placeholder: bool, now: Any, max_age_seconds: Any) -> str:
        newest = f"max({t.CAPTURED_AT}) FILTER (WHERE {t.COMPLETE})"
        select = (
            f"SELECT {t.CLUSTER_ID}, max({t.CLUSTER_ALIAS}) AS {t.CLUSTER_ALIAS}, "
            f"{newest} AS newest_complete_snapshot FROM {{batch}} GROUP BY {t.CLUSTER_ID} "
        )
        captured_live = f"count_if({t.SOURCE} = 'live') > 0"
        if placeholder:
            return select + (f"HAVING {captured_live} AND ({newest} IS NULL OR "
                             f"{newest} < {now} - {max_age_seconds} seconds)")
        if max_age_seconds is None:
            return select + "HAVING false"
        # the cutoff computed here, one literal: interval arithmetic is spelled differently in
        # Spark SQL (make_dt_interval) and DuckDB (to_seconds); a literal reads the same in both
        cutoff = _utc_literal(_utc(now) - timedelta(seconds=float(max_age_seconds)))
        return select + f"HAVING {captured_live} AND ({newest} IS NULL OR {newest} < {cutoff})"


class ExpectNoSnapshotFromTheFuture(_ParametrisedRowsExpectation):
    """No snapshot was captured after ``now`` (a wrong clock or a bad import)."""

    now: Union[str, dict, None] = None
    parameter_names: ClassVar[tuple[str, ...]] = ("now",)
    description: str = "No snapshot is from the future (captured_at <= the validation time)."

    @classmethod
    def _query(cls, placeholder: bool, now: Any) -> str:
        limit = now if placeholder else _utc_literal(now)
        return (
            f"SELECT {t.CLUSTER_ID}, {t.CLUSTER_ALIAS}, {t.CAPTURED_AT}, {t.SOURCE} FROM {{batch}} "
            f"WHERE {t.CAPTURED_AT} > {limit}"
        )


class ExpectErrorTopicShareOfEachSnapshotToBeAtMost(_ParametrisedRowsExpectation):
    """In every snapshot, at most ``max_share`` of the topics failed to describe."""

    max_share: Union[float, dict, None] = None
    parameter_names: ClassVar[tuple[str, ...]] = ("max_share",)
    description: str = (
        "In each snapshot, the share of topics whose describe failed is at most the configured "
        "maximum."
    )

    @classmethod
    def _query(cls, placeholder: bool, max_share: Any) -> str:
        share = max_share if placeholder else repr(float(1.0 if max_share is None else max_share))
        return (
            f"SELECT {t.CLUSTER_ID}, {t.CLUSTER_ALIAS}, {t.CAPTURED_AT}, {t.TOPIC_COUNT}, "
            f"{t.ERROR_TOPIC_COUNT} FROM {{batch}} "
            f"WHERE {t.TOPIC_COUNT} > 0 AND {t.ERROR_TOPIC_COUNT} > {share} * {t.TOPIC_COUNT}"
        )


CUSTOM_EXPECTATIONS: tuple[type, ...] = (
    ExpectDeletedTopicIdsNeverToComeBack,
    ExpectOneCurrentRowPerLiveIncarnation,
    ExpectVersionsOfAnIncarnationNotToOverlap,
    ExpectNewestCompleteSnapshotOfEachClusterToBeFresh,
    ExpectNoSnapshotFromTheFuture,
    ExpectErrorTopicShareOfEachSnapshotToBeAtMost,
)
