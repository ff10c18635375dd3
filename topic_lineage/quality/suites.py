"""The expectation suites of the quality gate: one suite per published table.

This module is the source of the suites, validation definitions and checkpoints stored in the
GX context, ``topic_lineage/quality/gx/`` (the repository's ``expectations/`` links to it).
After editing it, rewrite them with::

    .venv/bin/python -m topic_lineage.quality.suites

and commit the changed JSON files; a test fails while the stored suites differ from this module.

Every expectation carries ``meta.name``: the short name the gate prints when it fails (and that
tests look for), and a ``description`` in plain words that Data Docs shows.

Severity (GX's ``severity`` field, stored in the suite JSON): everything about the rows being
right is ``critical`` (GX's default) and blocks publishing; the health of the captures
(:data:`WARNINGS`: freshness, share of describe errors) is ``warning`` and never blocks.

Thresholds are suite parameters, given at validation time (see :mod:`topic_lineage.quality.gate`):
``now``, ``max_age_seconds`` (``None`` disables freshness) and ``max_error_share``.
"""

from __future__ import annotations

import contextlib

from topic_lineage import tables as t
from topic_lineage.topic_id import CANONICAL_PATTERN, RESERVED_IDS

# --- names of the expectations (what a failure prints) -----------------------------------------
LIVE_IDS_UNIQUE = "live topic IDs are unique per cluster"
LIVE_NAMES_UNIQUE = "live topic names are unique per cluster"
DELETED_IDS_NEVER_COME_BACK = "deleted topic IDs never come back"
IDS_CANONICAL = "topic IDs are canonical"
IDS_NOT_RESERVED = "topic IDs are never reserved"
CLOSED_VERSIONS_END_AFTER_START = "closed versions end after they start"
ONE_CURRENT_ROW = "exactly one current row per live incarnation"
VERSIONS_DO_NOT_OVERLAP = "versions of an incarnation do not overlap"
CHANGE_TYPES_KNOWN = "change types are known"

SNAPSHOTS_UNIQUE = "one snapshot per cluster and instant"
NO_SNAPSHOT_FROM_THE_FUTURE = "no snapshot from the future"
NEWEST_SNAPSHOT_FRESH = "newest complete snapshot of each cluster is fresh"
ERROR_SHARE_BELOW_LIMIT = "error topics per snapshot below the configured share"

SNAPSHOT_IDS_CANONICAL = "observed topic IDs are canonical"
SNAPSHOT_IDS_NOT_RESERVED = "observed topic IDs are never reserved"
SNAPSHOT_IDS_NOT_SHARED = "no two names carry one topic ID in a snapshot"

GROUP_OFFSET_ROWS_UNIQUE = "one committed offset per group, partition and snapshot"
GROUP_OFFSETS_NOT_NEGATIVE = "committed and log end offsets are not negative"
GROUP_OFFSET_IDS_CANONICAL = "topic IDs of group offsets are canonical"
UNATTRIBUTED_OFFSETS_HAVE_NO_ID = "offsets of no incarnation carry no topic ID"
GROUP_INCARNATIONS_UNIQUE = "one row per group and incarnation"
GROUP_SEEN_IN_ORDER = "a group is first seen on an incarnation no later than last seen"
GROUP_INCARNATION_IDS_CANONICAL = "topic IDs of group incarnations are canonical"
NO_CARRIED_POSITIONS = "no consumer group carried its position across a re-creation"

WARNINGS = frozenset({NEWEST_SNAPSHOT_FRESH, ERROR_SHARE_BELOW_LIMIT, NO_CARRIED_POSITIONS})
"""Expectations of warning severity: reported wherever a failure is, never block a publish."""
FINDINGS = frozenset({NO_CARRIED_POSITIONS})
"""Warnings about what the history shows (a consumer's carried position), not about the health
of the captures: they stay true of the history for good, so they do not make the Airflow
``health`` task fail (freshness and the error share do)."""
WARNING = "warning"

# --- suite parameters --------------------------------------------------------------------------
NOW = "now"
MAX_AGE_SECONDS = "max_age_seconds"
MAX_ERROR_SHARE = "max_error_share"

# Columns that identify an offending row in failure output, per table.
IDENTIFYING_COLUMNS = {
    t.SNAPSHOT_RUNS: [t.CLUSTER_ID, t.CAPTURED_AT],
    t.TOPIC_SNAPSHOTS: [t.CLUSTER_ID, t.CAPTURED_AT, t.TOPIC_NAME, t.TOPIC_ID],
    t.TOPIC_INCARNATIONS: [t.CLUSTER_ID, t.TOPIC_NAME, t.TOPIC_ID, "version"],
    t.GROUP_OFFSETS: [t.CLUSTER_ID, t.CAPTURED_AT, t.GROUP_ID, t.TOPIC_NAME, t.PARTITION],
    t.GROUP_INCARNATIONS: [t.CLUSTER_ID, t.GROUP_ID, t.TOPIC_NAME, "incarnation_key"],
}


COLUMNS_READ = {t.TOPIC_SNAPSHOTS: IDENTIFYING_COLUMNS[t.TOPIC_SNAPSHOTS]}
"""The columns the gate reads of a table whose expectations name no other (every other table:
all its columns). ``topic_snapshots`` holds a row per topic per snapshot, the whole history, and
its checks name only the cluster, the instant, the name and the ID: on Spark the gate caches
what it reads, and at 10 M rows caching these four took 6-8 s against 13.5 s for all eleven
(docs/benchmarks.md). Its offending rows show the same four (:data:`IDENTIFYING_COLUMNS`)."""


def columns_read(table: str) -> list[str]:
    """The columns of ``table`` the gate validates, in the contract's order (:data:`COLUMNS_READ`)."""
    wanted = COLUMNS_READ.get(table)
    return [c for c in t.ddl_columns(t.TABLE_DDL[table]) if wanted is None or c in wanted]


def _param(name: str) -> dict:
    return {"$PARAMETER": name}


def _meta(name: str) -> dict:
    return {"name": name}


def incarnation_expectations() -> list:
    """The contract's gate list on ``topic_incarnations``."""
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    from topic_lineage.quality import custom_expectations as cx

    is_current = Column("is_current") == True  # builds a GX Condition; `is True` would not
    return [
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=[t.CLUSTER_ID, t.TOPIC_ID],
            row_condition=is_current,
            ignore_row_if="any_value_is_missing",  # topics without an ID yet are keyed by name
            meta=_meta(LIVE_IDS_UNIQUE),
            description="No two current rows share (cluster_id, topic_id): a live ID names one "
            "topic per cluster.",
        ),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=[t.CLUSTER_ID, t.TOPIC_NAME],
            row_condition=is_current,
            meta=_meta(LIVE_NAMES_UNIQUE),
            description="No two current rows share (cluster_id, topic_name): a live name is one "
            "topic per cluster.",
        ),
        cx.ExpectDeletedTopicIdsNeverToComeBack(meta=_meta(DELETED_IDS_NEVER_COME_BACK)),
        gxe.ExpectColumnValuesToMatchRegex(
            column=t.TOPIC_ID,
            regex=CANONICAL_PATTERN,
            meta=_meta(IDS_CANONICAL),
            description="topic_id is Kafka's canonical form: 22 URL-safe base64 characters "
            "(NULL only while the cluster reported no ID).",
        ),
        gxe.ExpectColumnValuesToNotBeInSet(
            column=t.TOPIC_ID,
            value_set=sorted(RESERVED_IDS),
            meta=_meta(IDS_NOT_RESERVED),
            description="topic_id is never a reserved ID (ZERO_UUID means 'no ID', ONE_UUID is "
            "__cluster_metadata).",
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="valid_to",
            column_B="valid_from",
            or_equal=False,
            ignore_row_if="either_value_is_missing",  # open versions have no valid_to
            meta=_meta(CLOSED_VERSIONS_END_AFTER_START),
            description="valid_from < valid_to wherever a version is closed.",
        ),
        cx.ExpectOneCurrentRowPerLiveIncarnation(meta=_meta(ONE_CURRENT_ROW)),
        cx.ExpectVersionsOfAnIncarnationNotToOverlap(meta=_meta(VERSIONS_DO_NOT_OVERLAP)),
        gxe.ExpectColumnValuesToBeInSet(
            column="change_type",
            value_set=list(t.CHANGE_TYPES),
            meta=_meta(CHANGE_TYPES_KNOWN),
            description="change_type is one of " + ", ".join(t.CHANGE_TYPES) + ".",
        ),
    ]


def snapshot_run_expectations() -> list:
    """Checks on ``snapshot_runs``: uniqueness, clock sanity, freshness, describe errors."""
    import great_expectations.expectations as gxe

    from topic_lineage.quality import custom_expectations as cx

    return [
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=[t.CLUSTER_ID, t.CAPTURED_AT],
            meta=_meta(SNAPSHOTS_UNIQUE),
            description="One snapshot per (cluster_id, captured_at).",
        ),
        cx.ExpectNoSnapshotFromTheFuture(now=_param(NOW), meta=_meta(NO_SNAPSHOT_FROM_THE_FUTURE)),
        cx.ExpectNewestCompleteSnapshotOfEachClusterToBeFresh(
            now=_param(NOW),
            max_age_seconds=_param(MAX_AGE_SECONDS),
            meta=_meta(NEWEST_SNAPSHOT_FRESH),
            severity=WARNING,
        ),
        cx.ExpectErrorTopicShareOfEachSnapshotToBeAtMost(
            max_share=_param(MAX_ERROR_SHARE), meta=_meta(ERROR_SHARE_BELOW_LIMIT),
            severity=WARNING,
        ),
    ]


def topic_snapshot_expectations() -> list:
    """Checks on ``topic_snapshots``: the observed IDs are canonical, never reserved, and never
    carried by two names in one snapshot."""
    import great_expectations.expectations as gxe

    from topic_lineage.quality import custom_expectations as cx

    return [
        gxe.ExpectColumnValuesToMatchRegex(
            column=t.TOPIC_ID,
            regex=CANONICAL_PATTERN,
            meta=_meta(SNAPSHOT_IDS_CANONICAL),
            description="Every observed topic_id is in Kafka's canonical form (or NULL).",
        ),
        gxe.ExpectColumnValuesToNotBeInSet(
            column=t.TOPIC_ID,
            value_set=sorted(RESERVED_IDS),
            meta=_meta(SNAPSHOT_IDS_NOT_RESERVED),
            description="No observed topic_id is a reserved ID (the store keeps NULL for 'no ID').",
        ),
        cx.ExpectObservedTopicIdsToBeUniquePerSnapshot(meta=_meta(SNAPSHOT_IDS_NOT_SHARED)),
    ]


def group_offset_expectations() -> list:
    """Checks on ``group_offsets`` (R8): one row per group, partition and snapshot; offsets are
    offsets; attribution is consistent."""
    import great_expectations.expectations as gxe

    from topic_lineage.quality import custom_expectations as cx

    return [
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=[t.CLUSTER_ID, t.CAPTURED_AT, t.GROUP_ID, t.TOPIC_NAME, t.PARTITION],
            meta=_meta(GROUP_OFFSET_ROWS_UNIQUE),
            description="One committed offset per (cluster, snapshot, group, topic, partition).",
        ),
        *[
            gxe.ExpectColumnValuesToBeBetween(
                column=column, min_value=0, meta=_meta(GROUP_OFFSETS_NOT_NEGATIVE),
                description=f"{column} is a Kafka offset: 0 or more (NULL: unknown).",
            )
            for column in (t.COMMITTED_OFFSET, t.LOG_END_OFFSET)
        ],
        gxe.ExpectColumnValuesToMatchRegex(
            column=t.TOPIC_ID,
            regex=CANONICAL_PATTERN,
            meta=_meta(GROUP_OFFSET_IDS_CANONICAL),
            description="topic_id is Kafka's canonical form (NULL: no incarnation, or none with an ID).",
        ),
        cx.ExpectUnattributedOffsetsToCarryNoTopicId(meta=_meta(UNATTRIBUTED_OFFSETS_HAVE_NO_ID)),
    ]


def group_incarnation_expectations() -> list:
    """Checks on ``group_incarnations`` (R8, R9): structure is critical; a carried position is a
    warning that names the group, the topic and the incarnation, and never blocks."""
    import great_expectations.expectations as gxe

    from topic_lineage.quality import custom_expectations as cx

    return [
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=[t.CLUSTER_ID, t.GROUP_ID, "incarnation_key"],
            meta=_meta(GROUP_INCARNATIONS_UNIQUE),
            description="One row per (cluster, group, incarnation).",
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="last_seen_at",
            column_B="first_seen_at",
            or_equal=True,
            meta=_meta(GROUP_SEEN_IN_ORDER),
            description="first_seen_at <= last_seen_at.",
        ),
        gxe.ExpectColumnValuesToMatchRegex(
            column=t.TOPIC_ID,
            regex=CANONICAL_PATTERN,
            meta=_meta(GROUP_INCARNATION_IDS_CANONICAL),
            description="topic_id is Kafka's canonical form (NULL while the incarnation has none).",
        ),
        cx.ExpectNoCarriedPositions(meta=_meta(NO_CARRIED_POSITIONS), severity=WARNING),
    ]


SUITE_BUILDERS = {
    t.SNAPSHOT_RUNS: snapshot_run_expectations,
    t.TOPIC_SNAPSHOTS: topic_snapshot_expectations,
    t.TOPIC_INCARNATIONS: incarnation_expectations,
    t.GROUP_OFFSETS: group_offset_expectations,
    t.GROUP_INCARNATIONS: group_incarnation_expectations,
}
"""Suite name (= table name) -> its expectations. Validated in this order."""


def expectation_names(table: str) -> list[str]:
    """The ``meta.name`` of every expectation of a table's suite, in definition order."""
    return [expectation.meta["name"] for expectation in SUITE_BUILDERS[table]()]


def result_format(table: str) -> dict:
    """COMPLETE results with the identifying columns of each offending row."""
    return {
        "result_format": "COMPLETE",
        "unexpected_index_column_names": IDENTIFYING_COLUMNS[table],
        "partial_unexpected_count": 20,
    }


def write_context() -> list[str]:
    """(Re)write every suite, and each table's validation definition and checkpoint on each
    engine (:data:`topic_lineage.quality.context.DATASOURCES`), into the GX context.

    Returns what was written. Used by ``python -m topic_lineage.quality.suites``.
    """
    import great_expectations as gx

    from topic_lineage.quality import context as qc

    ctx = qc.get_context()
    written = []
    for table, build in SUITE_BUILDERS.items():
        names = [(qc.checkpoint_name(table, engine), ctx.checkpoints) for engine in qc.DATASOURCES]
        names += [(qc.validation_definition_name(table, engine), ctx.validation_definitions)
                  for engine in qc.DATASOURCES]
        for name, store in (*names, (table, ctx.suites)):
            with contextlib.suppress(Exception):  # absent on first generation
                store.delete(name)
        suite = ctx.suites.add(gx.ExpectationSuite(name=table, expectations=build()))
        for engine, datasource in qc.DATASOURCES.items():  # one suite, validated on either engine
            batch = ctx.data_sources.get(datasource).get_asset(table).get_batch_definition(
                qc.BATCH_DEFINITION)
            definition = ctx.validation_definitions.add(gx.ValidationDefinition(
                name=qc.validation_definition_name(table, engine), data=batch, suite=suite))
            ctx.checkpoints.add(
                gx.Checkpoint(
                    name=qc.checkpoint_name(table, engine),
                    validation_definitions=[definition],
                    actions=[gx.checkpoint.UpdateDataDocsAction(name="update_data_docs")],
                    result_format=result_format(table),
                )
            )
        written.append(table)
    return written


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    for table in write_context():
        print(f"wrote suite, validation definitions and checkpoints (Spark, pandas) for {table}")
