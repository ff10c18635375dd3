"""How a topic incarnation is decided: pure ``DataFrame -> DataFrame`` transforms, no I/O.

Input is the snapshot store's rows (schema ``tables.SNAPSHOT_STORE_DDL``: one row per topic per
snapshot; an empty snapshot is one marker row with ``topic_name`` NULL). Output are the three
contract tables. :mod:`spark_jobs.build` does the reading and writing.

The rules (contract R1-R6) as this module applies them, per cluster, in ``captured_at`` order.
Their executable specification is :mod:`topic_lineage.reference` (a plain-Python fold); the
property tests check that this module equals it row for row.

1. **Identity.** An observation with a topic ID belongs to the incarnation of that ID. An ID-less
   observation of name N is *resolved* to an ID when one is adjacent to it among the observations
   of N with nothing in between that could have ended it: no complete snapshot that is not held,
   and not two complete snapshots (a held one and its confirmation); a held snapshot alone ends
   nothing (issue #12). It takes the last ID seen for N before it, or else the next ID seen for N
   if that is the ID's very first appearance (R4, ``id_assigned``). Otherwise it is keyed by
   ``(cluster_id, name)``. Holds are decided first (pass 1, segments broken at every complete
   snapshot: the hold counts do not depend on it), then everything else (pass 2). Two names
   carrying one ID in one snapshot: the first in name order is the ID's observation.
2. **Gaps.** After each observation of an incarnation comes a gap until its next observation (or
   forever). The gap is *closed* (the incarnation ends) at the earliest of
   - the first complete snapshot in the gap, when that snapshot is not held, or when a second
     complete snapshot in the gap confirms it (R2, R3; ``deleted_at`` = the first one);
   - the first snapshot in the gap showing the incarnation's name under another identity (R1).
   Incomplete snapshots never close a gap (R2); a describe error is an observation (present).
3. **Hold (R3).** A complete, non-authoritative snapshot S is held when the incarnations it would
   close by absence (those whose gap's first complete snapshot is S, not already displaced) number
   at least ``min_count`` and more than ``ratio`` of the live incarnations before S (those it
   would close plus those it shows again). These are per-snapshot counts that do not depend on
   other snapshots' hold decisions, so no sequential pass is needed.
4. **Versions.** Within an incarnation a new version starts when the name, the ID (first ID:
   ``id_assigned``), or an attribute changes; an observation after a closed gap is ``reappeared``
   (R6: recorded, ``deleted_at`` stays). An ID-less (name-keyed) incarnation cannot reappear: after
   a closed gap the name starts a new incarnation. A describe-error observation carries the
   previous attributes forward (NULL if none are known yet).
5. **Keys (R5).** ``incarnation_key`` is derived from the incarnation's first observation:
   sha256 of (cluster_id, topic_id) when it had an ID, else of (cluster_id, name, first_seen_at);
   the first 32 hex digits. It is the same for the same set of snapshots, whatever the order of
   ingestion; it changes only if a late snapshot becomes the incarnation's first observation.

**Cost.** The only step over every observation is one sort by (cluster, name, time) that keeps
the two ends of each *run* (the same topic, unchanged, in consecutive snapshots) and drops its
interior, which the rules above cannot tell apart from the ends (:func:`_collapse_runs`). The
rest works on the changes: a few rows per topic (its creation, changes, errors, absences from
incomplete snapshots, its end) instead of one per snapshot.

Incremental builds feed :func:`derive` the new observations plus *seed* rows: the derived state
of each identity's last observation and each name's last observation (:data:`STATE_DDL`), which
is everything the rules above look at across a gap. Old snapshots' hold decisions come in with
the runs (``held`` already set); new ones are computed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from topic_lineage import tables as t

# Internal state kept between builds: one row per identity's last observation and per name's
# last observation, with everything derived for it.
STATE_DDL = (
    "cluster_id STRING NOT NULL, cluster_alias STRING NOT NULL, captured_at TIMESTAMP NOT NULL, "
    "topic_name STRING NOT NULL, resolved_id STRING, version_topic_id STRING, "
    "partition_count INT, replication_factor INT, is_internal BOOLEAN, "
    "incarnation_key STRING NOT NULL, version INT NOT NULL, version_valid_from TIMESTAMP NOT NULL, "
    "change_type STRING NOT NULL, first_seen_at TIMESTAMP NOT NULL, deleted_at TIMESTAMP, "
    "displaced_at TIMESTAMP"
)

# Runs as derive() takes them: the contract's snapshot_runs plus `authoritative`; `held` is NULL
# for snapshots whose hold is still to be decided.
RUNS_IN_DDL = t.SNAPSHOT_RUNS_DDL.replace("held BOOLEAN NOT NULL", "held BOOLEAN") + (
    ", authoritative BOOLEAN"
)

INCARNATION_KEY = "incarnation_key"
VERSION = "version"
CHANGE_TYPE = "change_type"
VALID_FROM = "valid_from"
VALID_TO = "valid_to"
IS_CURRENT = "is_current"
FIRST_SEEN_AT = "first_seen_at"
LAST_SEEN_AT = "last_seen_at"
DELETED_AT = "deleted_at"

_UNBOUNDED = Window.unboundedPreceding
_FOLLOWING = Window.unboundedFollowing
_CURRENT = Window.currentRow


@dataclass(frozen=True)
class HoldPolicy:
    """R3 thresholds: hold a snapshot closing more than ``ratio`` of live incarnations and at
    least ``min_count`` of them."""

    ratio: float = 0.5
    min_count: int = 5

    def __post_init__(self):
        if not 0 <= self.ratio < 1:
            raise ValueError(f"hold ratio must be in [0, 1), got {self.ratio}")
        if self.min_count < 1:
            raise ValueError(f"hold minimum must be at least 1, got {self.min_count}")


@dataclass(frozen=True)
class Derived:
    """What :func:`derive` produces."""

    snapshot_runs: DataFrame
    topic_incarnations: DataFrame  # version rows of every incarnation derive() saw
    state: DataFrame  # the seed rows for the next incremental build
    cached: tuple = ()

    def unpersist(self) -> None:
        """Release the intermediate frames derive() keeps (call after writing the outputs)."""
        for frame in self.cached:
            frame.unpersist()


def empty_frame(spark, ddl: str) -> DataFrame:
    """No rows, the DDL's columns; planned in the JVM (``createDataFrame([])`` would make every
    job that reads it start Python workers)."""
    return _ddl_select(spark.range(0).select(*[
        F.lit(None).alias(name) for name in t.ddl_columns(ddl)
    ]), ddl)


def _ddl_select(df: DataFrame, ddl: str) -> DataFrame:
    """The schema contract of a transform's output: the DDL's columns, in order, cast."""
    types = [part.strip().split()[:2] for part in ddl.split(",")]
    return df.select(*[F.col(name).cast(kind).alias(name) for name, kind in types])


def with_topic_uuid(df: DataFrame) -> DataFrame:
    """``topic_uuid``: the RFC 4122 text of the canonical (URL-safe base64) ``topic_id``.

    Two projections on purpose: in one expression Spark decodes the ID once per UUID group
    (five times), which made this the most expensive step of writing ``topic_snapshots``.
    """
    tid = F.col(t.TOPIC_ID)
    decoded = df.withColumn(
        "_uuid_hex", F.lower(F.hex(F.unbase64(F.concat(F.translate(tid, "-_", "+/"), F.lit("==")))))
    )
    groups = [F.substring("_uuid_hex", start, length) for start, length in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))]
    return decoded.withColumn(t.TOPIC_UUID, F.when(tid.isNotNull(), F.concat_ws("-", *groups))).drop("_uuid_hex")


# --- snapshot-level and observation-level tables ------------------------------------------------
def snapshot_runs_input(store_rows: DataFrame) -> DataFrame:
    """One row per stored snapshot (hold undecided). The store is a set of snapshots, so the
    same snapshot read twice is still one run."""
    runs = store_rows.select(
        t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.COMPLETE, t.TOPIC_COUNT,
        t.ERROR_TOPIC_COUNT, t.SOURCE, t.AUTHORITATIVE,
    ).distinct()
    return _ddl_select(runs.withColumn(t.HELD, F.lit(None).cast("boolean")), RUNS_IN_DDL)


def topic_snapshots(store_rows: DataFrame) -> DataFrame:
    """The observations (contract table ``topic_snapshots``), without empty-snapshot markers."""
    # No distinct(): the store holds each snapshot once (one file per cluster and time) and a
    # snapshot names a topic once (topic_lineage.snapshot rejects duplicates), so these rows are
    # already a set; a distinct would shuffle every observation for nothing.
    rows = store_rows.filter(F.col(t.TOPIC_NAME).isNotNull()).select(
        t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.COMPLETE, t.TOPIC_NAME, t.TOPIC_ID,
        t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL, t.ERROR,
    )
    return _ddl_select(with_topic_uuid(rows), t.TOPIC_SNAPSHOTS_DDL)


# --- the derivation ---------------------------------------------------------------------------------
def derive(
    store_rows: DataFrame,
    runs: DataFrame,
    state: DataFrame | None = None,
    policy: HoldPolicy = HoldPolicy(),
) -> Derived:
    """Snapshot runs, incarnation versions and the next state from observations.

    ``store_rows``: new store rows (SNAPSHOT_STORE_DDL). ``runs``: EVERY run of the clusters
    concerned, old and new (RUNS_IN_DDL; ``held`` set for old ones, NULL for new ones).
    ``state``: seed rows (STATE_DDL) of the previous build for incremental clusters, or None.
    The returned incarnation rows cover every incarnation with a seed or a new observation.
    """
    if state is None:
        state = empty_frame(store_rows.sparkSession, STATE_DDL)

    # Position of every snapshot among its cluster's complete snapshots: "is there a complete
    # snapshot strictly between a and b" becomes cc_before(b) > cc_upto(a).
    # `_pos`: the snapshot's position among all of its cluster's snapshots (runs of a topic).
    # Persisted: a few rows per snapshot, read by every output (else the store is rescanned).
    w_order = Window.partitionBy(t.CLUSTER_ID).orderBy(t.CAPTURED_AT)
    ranked = runs.withColumn(
        "_cc_upto", F.sum(F.col(t.COMPLETE).cast("int")).over(w_order.rowsBetween(_UNBOUNDED, _CURRENT))
    ).withColumn("_pos", F.row_number().over(w_order)).persist()
    run_pos = ranked.select(
        t.CLUSTER_ID, t.CAPTURED_AT, "_cc_upto", "_pos",
        (F.col("_cc_upto") - F.col(t.COMPLETE).cast("int")).alias("_cc_before"),
    )
    completes = ranked.filter(F.col(t.COMPLETE)).select(
        t.CLUSTER_ID, F.col("_cc_upto").alias("_rank"), F.col(t.CAPTURED_AT).alias("_ctime")
    )

    def positioned(frame: DataFrame) -> DataFrame:
        return frame.join(F.broadcast(run_pos), on=[t.CLUSTER_ID, t.CAPTURED_AT], how="inner")

    # New observations shrink to the ends of their runs before anything else; seeds join them.
    # Persisted: both passes below read them.
    new = _collapse_runs(positioned(_new_observations(store_rows)))
    observed = new.unionByName(positioned(_seed_rows(state)), allowMissingColumns=True).persist()
    # A seed that is not its identity's last one (a name's last observation) only served the
    # name windows; versions continue from the identity's last seed.
    name_only = F.col("_is_seed") & F.coalesce(F.col("_next_is_seed"), F.lit(False))

    # Pass 1, the hold (R3): identity segments broken at every complete snapshot. The per-
    # snapshot counts do not depend on whether an ID-less observation after a held snapshot
    # joins the name's previous incarnation or starts its own: either way it is one identity
    # seen after the held snapshot, and the earlier one lacked from it.
    undecided = ranked.withColumn(t.HELD, F.lit(None).cast("boolean"))
    provisional = _gaps(_resolve_identity(_with_closing_positions(observed, undecided)), completes)
    runs_out = _hold(ranked, provisional.filter(~name_only), policy).persist()

    # Pass 2, everything else: segments broken only where something could end an incarnation.
    gapped = _gaps(_resolve_identity(_with_closing_positions(observed, runs_out)), completes).persist()
    name_only_seeds = gapped.filter(name_only)
    rows = gapped.filter(~name_only)
    held_at = runs_out.select(
        t.CLUSTER_ID, F.col(t.CAPTURED_AT).alias("_c1"), F.col(t.HELD).alias("_c1_held")
    )
    rows = rows.join(F.broadcast(held_at), on=[t.CLUSTER_ID, "_c1"], how="left")
    # The gap ends at the first complete snapshot lacking the incarnation (when not held, or
    # when a second complete snapshot confirms the hold) or when its name shows another identity.
    absence_end = F.when(
        F.col("_c1").isNotNull() & (~F.col("_c1_held") | F.col("_c2").isNotNull()), F.col("_c1")
    )
    rows = rows.withColumn("_gap_end", F.least(F.col("_displaced_at"), absence_end))

    rows = _versions(rows).persist()  # read by both the incarnations and the state
    incarnations = _incarnation_rows(rows)
    state_out = _next_state(rows, name_only_seeds)
    return Derived(
        snapshot_runs=_ddl_select(runs_out, t.SNAPSHOT_RUNS_DDL),
        topic_incarnations=incarnations,
        state=state_out,
        cached=(ranked, observed, runs_out, gapped, rows),
    )


def _with_closing_positions(rows: DataFrame, runs: DataFrame) -> DataFrame:
    """``_ncc_upto`` / ``_ncc_before``: positions of the rows' snapshots among the complete
    snapshots that close by themselves (not held). Before the holds are known (``held`` NULL)
    every complete snapshot counts."""
    w_order = Window.partitionBy(t.CLUSTER_ID).orderBy(t.CAPTURED_AT)
    closes = (F.col(t.COMPLETE) & ~F.coalesce(F.col(t.HELD), F.lit(False))).cast("int")
    positions = runs.select(t.CLUSTER_ID, t.CAPTURED_AT, closes.alias("_closes")).withColumn(
        "_ncc_upto", F.sum("_closes").over(w_order.rowsBetween(_UNBOUNDED, _CURRENT))
    ).select(t.CLUSTER_ID, t.CAPTURED_AT, "_ncc_upto", (F.col("_ncc_upto") - F.col("_closes")).alias("_ncc_before"))
    return rows.join(F.broadcast(positions), on=[t.CLUSTER_ID, t.CAPTURED_AT], how="inner")


def _new_observations(store_rows: DataFrame) -> DataFrame:
    """The store's observations (without empty-snapshot markers), as derive() reads them.

    Shared IDs (two names carrying one ID in one snapshot, a broker bug of the KAFKA-19383
    family): only the first name in name order is the ID's observation. ``topic_snapshots``
    keeps both, as observed; this choice only makes the derivation deterministic (R5), whatever
    the order or batching of ingestion, and the gate refuses to publish such snapshots."""
    first_name = Window.partitionBy(t.CLUSTER_ID, t.CAPTURED_AT, t.TOPIC_ID).orderBy(t.TOPIC_NAME)
    observed = store_rows.filter(F.col(t.TOPIC_NAME).isNotNull())
    observed = observed.withColumn("_name_rank", F.row_number().over(first_name))
    observed = observed.filter(F.col(t.TOPIC_ID).isNull() | (F.col("_name_rank") == 1))
    return observed.select(
        t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.TOPIC_NAME, t.TOPIC_ID,
        t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL, t.ERROR,
        F.lit(False).alias("_is_seed"),
    )


def _seed_rows(state: DataFrame) -> DataFrame:
    """The previous build's state as observations that carry their derived state."""
    return state.select(
        t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.TOPIC_NAME,
        # A seed enters identity resolution with its resolved ID, and is never an error: its
        # attributes are already the effective ones.
        F.col("resolved_id").alias(t.TOPIC_ID),
        t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL,
        F.lit(None).cast("string").alias(t.ERROR),
        F.lit(True).alias("_is_seed"),
        F.col("version_topic_id").alias("_seed_version_topic_id"),
        F.col(INCARNATION_KEY).alias("_seed_key"),
        F.col(VERSION).alias("_seed_version"),
        F.col("version_valid_from").alias("_seed_valid_from"),
        F.col(CHANGE_TYPE).alias("_seed_change_type"),
        F.col(FIRST_SEEN_AT).alias("_seed_first_seen_at"),
        F.col(DELETED_AT).alias("_seed_deleted_at"),
        F.col("displaced_at").alias("_seed_displaced_at"),
        # Seeds are never part of a run.
        F.lit(False).alias("_run_prev"),
        F.lit(False).alias("_run_next"),
    )


# What must stay equal along a run of observations for its interior to carry no information.
_RUN_KEY = (t.TOPIC_ID, t.CLUSTER_ALIAS, t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL)


def _closing_since_previous(w_name: Window) -> F.Column:
    """1 when the snapshots between the name's previous row and this one may have ended its
    incarnation by absence, 0 when not, NULL for its first row. Every complete snapshot there
    lacks the name; it ends the incarnation when one of them is not held (``_ncc_*``: positions
    among the *closing* complete snapshots), or when there are two (a held one and its
    confirmation, R3). A held snapshot alone establishes nothing (issue #12: an ID-less describe
    error after a held snapshot is still the same topic)."""
    closing = F.col("_ncc_before") > F.lag("_ncc_upto").over(w_name)
    confirmed = (F.col("_cc_before") - F.lag("_cc_upto").over(w_name)) >= 2
    return (closing | confirmed).cast("int")


def _collapse_runs(rows: DataFrame) -> DataFrame:
    """Keep only the ends of each *run*: observations of one name with the same ID, attributes
    and alias, no describe error, in consecutive snapshots of the cluster (no snapshot at all in
    between). The interior of a run changes nothing the rules look at: no gap, no version, the
    same identity. What depends on it is carried by two columns:

    - ``_run_next``: the name's next observation (kept or not) continues the run: no gap;
    - ``_run_prev``: this observation continues a run (so no identity segment starts here).

    A stable topic seen in 1,000 snapshots becomes two rows: the rest of the derivation works
    on the changes, not on the history (this is one sort of the observations, the only one).
    ``rows`` are new observations only: a seed is never part of a run, and the segment start
    of a name's first new observation is decided next to its seed, if any.
    """
    w_name = Window.partitionBy(t.CLUSTER_ID, t.TOPIC_NAME).orderBy(t.CAPTURED_AT)
    rows = rows.withColumn("_plain", F.col(t.ERROR).isNull())

    def same_as(shift, step: int) -> F.Column:
        same = (shift("_pos").over(w_name) == F.col("_pos") + step) & F.col("_plain") & shift("_plain").over(w_name)
        for column in _RUN_KEY:
            same = same & shift(column).over(w_name).eqNullSafe(F.col(column))
        return F.coalesce(same, F.lit(False))

    rows = rows.withColumn("_run_prev", same_as(F.lag, -1)).withColumn("_run_next", same_as(F.lead, 1))
    return rows.filter(~(F.col("_run_prev") & F.col("_run_next"))).drop("_plain")


def _resolve_identity(rows: DataFrame) -> DataFrame:
    """R4: give ID-less observations the adjacent ID of their name; add the identity `_ident`."""
    tid = F.col(t.TOPIC_ID)
    w_id = Window.partitionBy(t.CLUSTER_ID, t.TOPIC_ID)
    rows = rows.withColumn("_id_first_at", F.when(tid.isNotNull(), F.min(t.CAPTURED_AT).over(w_id)))

    # Segments: stretches of a name's observations that nothing could have ended in between.
    # A run continues its segment (its removed interior has no snapshot between observations).
    w_name = Window.partitionBy(t.CLUSTER_ID, t.TOPIC_NAME).orderBy(t.CAPTURED_AT)
    rows = rows.withColumn(
        "_seg_start",
        F.when(F.col("_run_prev"), F.lit(0)).otherwise(
            F.coalesce(_closing_since_previous(w_name), F.lit(1))
        ),
    )
    rows = rows.withColumn("_seg", F.sum("_seg_start").over(w_name.rowsBetween(_UNBOUNDED, _CURRENT)))

    w_seg = Window.partitionBy(t.CLUSTER_ID, t.TOPIC_NAME, "_seg").orderBy(t.CAPTURED_AT)
    before = w_seg.rowsBetween(_UNBOUNDED, _CURRENT)
    after = w_seg.rowsBetween(_CURRENT, _FOLLOWING)
    last_id = F.last(tid, ignorenulls=True).over(before)
    next_id = F.first(tid, ignorenulls=True).over(after)
    next_id_is_new = F.first(
        F.when(tid.isNotNull(), F.col("_id_first_at") == F.col(t.CAPTURED_AT)), ignorenulls=True
    ).over(after)
    rows = rows.withColumn("_resolved_id", F.coalesce(last_id, F.when(next_id_is_new, next_id)))
    rows = rows.withColumn(
        "_ident",
        F.when(F.col("_resolved_id").isNotNull(), F.concat(F.lit("id:"), F.col("_resolved_id")))
        .otherwise(F.concat(F.lit("name:"), F.col(t.TOPIC_NAME))),
    )
    # The next observation of the same name (still partitioned by name: no extra shuffle), and
    # where a run's removed interior ends (the position of its last observation).
    return (
        rows.withColumn("_next_name_at", F.lead(t.CAPTURED_AT).over(w_name))
        .withColumn("_next_name_ident", F.lead("_ident").over(w_name))
        .withColumn("_interior_end", F.when(F.col("_run_next"), F.lead("_pos").over(w_name)))
    )


def _gaps(rows: DataFrame, completes: DataFrame) -> DataFrame:
    """For each observation, the gap until the identity's next observation: its first and second
    complete snapshots (`_c1`, `_c2`) and the first snapshot showing its name under another
    identity (`_displaced_at`). Only the last of an identity's seed rows has a real gap."""
    w_key = Window.partitionBy(t.CLUSTER_ID, "_ident").orderBy(t.CAPTURED_AT)
    rows = (
        rows.withColumn("_prev_at", F.lag(t.CAPTURED_AT).over(w_key))
        .withColumn("_next_at", F.lead(t.CAPTURED_AT).over(w_key))
        .withColumn("_next_is_seed", F.lead("_is_seed").over(w_key))
        .withColumn("_is_name_last", F.col("_next_name_at").isNull())
    )
    # Within a run the next observation is in the very next snapshot: no gap.
    has_gap = ~F.col("_run_next") & (
        ~F.col("_is_seed") | F.col("_next_is_seed").isNull() | ~F.col("_next_is_seed")
    )

    def in_gap(column: str) -> F.Column:
        return F.when(
            has_gap & (F.col("_next_at").isNull() | (F.col(column) < F.col("_next_at"))), F.col(column)
        )

    first = completes.select(t.CLUSTER_ID, F.col("_rank").alias("_c1_rank"), F.col("_ctime").alias("_c1_at"))
    second = completes.select(t.CLUSTER_ID, F.col("_rank").alias("_c2_rank"), F.col("_ctime").alias("_c2_at"))
    rows = (
        rows.withColumn("_c1_rank", F.col("_cc_upto") + 1)
        .withColumn("_c2_rank", F.col("_cc_upto") + 2)
        .join(F.broadcast(first), on=[t.CLUSTER_ID, "_c1_rank"], how="left")
        .join(F.broadcast(second), on=[t.CLUSTER_ID, "_c2_rank"], how="left")
    )
    name_taken = F.col("_next_name_ident") != F.col("_ident")
    return (
        rows.withColumn("_c1", in_gap("_c1_at"))
        .withColumn("_c2", in_gap("_c2_at"))
        # A seed's earliest displacement may be an observation no longer in the input.
        .withColumn("_displaced_at", F.coalesce(
            F.when(F.col("_is_seed") & has_gap, F.col("_seed_displaced_at")),
            F.when(name_taken, in_gap("_next_name_at")),
        ))
        .drop("_c1_rank", "_c2_rank", "_c1_at", "_c2_at", "_next_name_at", "_next_name_ident")
    )


def _hold(ranked: DataFrame, rows: DataFrame, policy: HoldPolicy) -> DataFrame:
    """R3: decide `held` for runs (with their positions `_pos`) that do not have it yet, from
    per-snapshot counts."""
    would_close = (
        rows.filter(
            F.col("_c1").isNotNull()
            & (F.col("_displaced_at").isNull() | (F.col("_displaced_at") > F.col("_c1")))
        )
        .groupBy(t.CLUSTER_ID, F.col("_c1").alias(t.CAPTURED_AT))
        .agg(F.count(F.lit(1)).alias("_would_close"))
    )
    shown_again = (
        rows.filter(~F.col("_is_seed") & F.col("_prev_at").isNotNull())
        .groupBy(t.CLUSTER_ID, t.CAPTURED_AT)
        .agg(F.count(F.lit(1)).alias("_shown_again"))
    )
    # Each removed run interior shows its incarnation again in every snapshot it spans:
    # +1 from the position after the run's first kept row, -1 at its last (a prefix sum).
    continuing = rows.filter(F.col("_run_next"))
    deltas = (
        continuing.select(t.CLUSTER_ID, (F.col("_pos") + 1).alias("_pos"), F.lit(1).alias("_d"))
        .unionByName(continuing.select(t.CLUSTER_ID, F.col("_interior_end").alias("_pos"), F.lit(-1).alias("_d")))
        .groupBy(t.CLUSTER_ID, "_pos")
        .agg(F.sum("_d").alias("_d"))
    )
    in_interiors = (
        ranked.select(t.CLUSTER_ID, t.CAPTURED_AT, "_pos").join(deltas, on=[t.CLUSTER_ID, "_pos"], how="left")
        .withColumn("_in_interiors", F.sum(F.coalesce(F.col("_d"), F.lit(0))).over(
            Window.partitionBy(t.CLUSTER_ID).orderBy("_pos").rowsBetween(_UNBOUNDED, _CURRENT)
        ))
        .select(t.CLUSTER_ID, t.CAPTURED_AT, "_in_interiors")
    )
    closing = F.coalesce(F.col("_would_close"), F.lit(0))
    live_before = (
        closing + F.coalesce(F.col("_shown_again"), F.lit(0)) + F.coalesce(F.col("_in_interiors"), F.lit(0))
    )
    is_mass_deletion = (
        F.col(t.COMPLETE)
        & ~F.coalesce(F.col(t.AUTHORITATIVE), F.lit(False))
        & (closing >= policy.min_count)
        & (closing > F.lit(policy.ratio) * live_before)
    )
    return (
        ranked.join(would_close, on=[t.CLUSTER_ID, t.CAPTURED_AT], how="left")
        .join(shown_again, on=[t.CLUSTER_ID, t.CAPTURED_AT], how="left")
        .join(in_interiors, on=[t.CLUSTER_ID, t.CAPTURED_AT], how="left")
        .withColumn(t.HELD, F.coalesce(F.col(t.HELD), is_mass_deletion))
        .drop("_would_close", "_shown_again", "_in_interiors")
    )


_ATTRS = (t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL)


def _versions(rows: DataFrame) -> DataFrame:
    """Lives, effective attributes, version numbers and change types per observation."""
    w_key = Window.partitionBy(t.CLUSTER_ID, "_ident").orderBy(t.CAPTURED_AT)
    prev_gap_end = F.lag("_gap_end").over(w_key)
    # A name-keyed incarnation cannot reappear: after a closed gap the name is a new incarnation.
    new_life = F.col("_prev_at").isNull() | (F.col("_resolved_id").isNull() & prev_gap_end.isNotNull())
    rows = rows.withColumn("_life_start", new_life.cast("int"))
    rows = rows.withColumn("_life", F.sum("_life_start").over(w_key.rowsBetween(_UNBOUNDED, _CURRENT)))

    life = [t.CLUSTER_ID, "_ident", "_life"]
    w_life = Window.partitionBy(*life).orderBy(t.CAPTURED_AT)
    so_far = w_life.rowsBetween(_UNBOUNDED, _CURRENT)
    known = F.col(t.ERROR).isNull()
    for attr in _ATTRS:  # a describe error keeps the attributes known before
        rows = rows.withColumn(attr, F.last(F.when(known, F.col(attr)), ignorenulls=True).over(so_far))
    version_tid = F.when(F.col("_is_seed"), F.col("_seed_version_topic_id")).otherwise(F.col(t.TOPIC_ID))
    rows = rows.withColumn("_version_tid", F.last(version_tid, ignorenulls=True).over(so_far))

    is_first = F.lag(t.CAPTURED_AT).over(w_life).isNull()
    reappeared = ~is_first & F.lag("_gap_end").over(w_life).isNotNull()
    id_assigned = F.lag("_version_tid").over(w_life).isNull() & F.col("_version_tid").isNotNull()
    renamed = ~F.lag(t.TOPIC_NAME).over(w_life).eqNullSafe(F.col(t.TOPIC_NAME))
    attrs_same = None
    for attr in _ATTRS:
        same = F.lag(attr).over(w_life).eqNullSafe(F.col(attr))
        attrs_same = same if attrs_same is None else attrs_same & same
    change = (
        F.when(is_first, "created")
        .when(reappeared, "reappeared")
        .when(id_assigned, "id_assigned")
        .when(renamed, "renamed")
        .when(~attrs_same, "attributes_changed")
    )
    rows = rows.withColumn(
        "_change", F.when(F.col("_is_seed"), F.col("_seed_change_type")).otherwise(change)
    )
    starts_version = (~F.col("_is_seed") & F.col("_change").isNotNull()).cast("int")
    base = F.coalesce(F.max("_seed_version").over(Window.partitionBy(*life)), F.lit(0))
    rows = rows.withColumn(
        VERSION,
        F.when(F.col("_is_seed"), F.col("_seed_version")).otherwise(
            base + F.sum(starts_version).over(so_far)
        ),
    )
    w_version = Window.partitionBy(*life, VERSION).orderBy(t.CAPTURED_AT)
    start = F.coalesce(F.col("_seed_valid_from"), F.col(t.CAPTURED_AT))
    key_from_first = F.when(
        F.col(t.TOPIC_ID).isNotNull() & ~F.col("_is_seed"),
        F.concat_ws("\u001f", t.CLUSTER_ID, F.lit("id"), t.TOPIC_ID),
    ).otherwise(
        F.concat_ws("\u001f", t.CLUSTER_ID, F.lit("name"), t.TOPIC_NAME,
                    F.date_format(t.CAPTURED_AT, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"))
    )
    own_key = F.coalesce(F.col("_seed_key"), F.substring(F.sha2(key_from_first, 256), 1, 32))
    w_life_all = Window.partitionBy(*life)
    return (
        rows.withColumn("_version_from", F.first(start).over(w_version))
        .withColumn("_version_alias", F.first(t.CLUSTER_ALIAS).over(w_version))
        .withColumn("_version_change", F.first("_change").over(w_version))
        .withColumn(INCARNATION_KEY, F.first(own_key).over(w_life))
        .withColumn(FIRST_SEEN_AT, F.min(F.coalesce(F.col("_seed_first_seen_at"), F.col(t.CAPTURED_AT))).over(w_life_all))
        .withColumn(LAST_SEEN_AT, F.max(t.CAPTURED_AT).over(w_life_all))
        .withColumn(
            DELETED_AT,
            F.least(F.min("_seed_deleted_at").over(w_life_all), F.min("_gap_end").over(w_life_all)),
        )
    )


def _incarnation_rows(rows: DataFrame) -> DataFrame:
    """One row per version (contract table ``topic_incarnations``)."""
    life = [t.CLUSTER_ID, "_ident", "_life"]
    versions = rows.groupBy(*life, VERSION).agg(
        F.min_by(INCARNATION_KEY, t.CAPTURED_AT).alias(INCARNATION_KEY),
        F.min_by("_version_alias", t.CAPTURED_AT).alias(t.CLUSTER_ALIAS),
        F.min_by("_version_tid", t.CAPTURED_AT).alias(t.TOPIC_ID),
        F.min_by(t.TOPIC_NAME, t.CAPTURED_AT).alias(t.TOPIC_NAME),
        F.min_by("_version_change", t.CAPTURED_AT).alias(CHANGE_TYPE),
        *[F.min_by(attr, t.CAPTURED_AT).alias(attr) for attr in _ATTRS],
        F.min("_version_from").alias(VALID_FROM),
        F.max_by("_gap_end", t.CAPTURED_AT).alias("_closed_at"),
        F.min(FIRST_SEEN_AT).alias(FIRST_SEEN_AT),
        F.max(LAST_SEEN_AT).alias(LAST_SEEN_AT),
        F.min(DELETED_AT).alias(DELETED_AT),
    )
    w_version = Window.partitionBy(*life).orderBy(VERSION)
    versions = (
        versions.withColumn(
            VALID_TO, F.coalesce(F.col("_closed_at"), F.lead(VALID_FROM).over(w_version))
        )
        .withColumn(IS_CURRENT, F.col(VALID_TO).isNull())
    )
    return _ddl_select(with_topic_uuid(versions), t.TOPIC_INCARNATIONS_DDL)


def _next_state(rows: DataFrame, name_only_seeds: DataFrame) -> DataFrame:
    """The seed rows for the next build: each identity's and each name's last observation."""
    derived = rows.select(
        t.CLUSTER_ID,
        F.col("_version_alias").alias(t.CLUSTER_ALIAS),
        t.CAPTURED_AT,
        t.TOPIC_NAME,
        F.col("_resolved_id").alias("resolved_id"),
        F.col("_version_tid").alias("version_topic_id"),
        *_ATTRS,
        INCARNATION_KEY,
        VERSION,
        F.col("_version_from").alias("version_valid_from"),
        F.col("_version_change").alias(CHANGE_TYPE),
        FIRST_SEEN_AT,
        DELETED_AT,
        F.col("_displaced_at").alias("displaced_at"),
        "_next_at",
        "_is_name_last",
    )
    carried = name_only_seeds.select(
        t.CLUSTER_ID,
        t.CLUSTER_ALIAS,
        t.CAPTURED_AT,
        t.TOPIC_NAME,
        F.col("_resolved_id").alias("resolved_id"),
        F.col("_seed_version_topic_id").alias("version_topic_id"),
        *_ATTRS,
        F.col("_seed_key").alias(INCARNATION_KEY),
        F.col("_seed_version").alias(VERSION),
        F.col("_seed_valid_from").alias("version_valid_from"),
        F.col("_seed_change_type").alias(CHANGE_TYPE),
        F.col("_seed_first_seen_at").alias(FIRST_SEEN_AT),
        F.col("_seed_deleted_at").alias(DELETED_AT),
        F.col("_seed_displaced_at").alias("displaced_at"),
        "_is_name_last",
    )
    # An identity's last observation has no next one; a name's last was flagged in _gaps.
    return _ddl_select(derived.filter(F.col("_next_at").isNull() | F.col("_is_name_last")), STATE_DDL) \
        .unionByName(_ddl_select(carried.filter(F.col("_is_name_last")), STATE_DDL))


# --- merging an incremental result into the previous tables -----------------------------------
def merge_incarnations(previous: DataFrame, derived: DataFrame) -> DataFrame:
    """Previous version rows updated with a derivation over seeds and new observations.

    ``derived`` holds every version from each touched incarnation's seed onwards; earlier
    (closed) versions come from ``previous`` with the incarnation-level columns refreshed.
    """
    touched = derived.groupBy(INCARNATION_KEY).agg(
        F.min(VERSION).alias("_from_version"),
        F.min(FIRST_SEEN_AT).alias("_first_seen_at"),
        F.max(LAST_SEEN_AT).alias("_last_seen_at"),
        F.min(DELETED_AT).alias("_deleted_at"),
    )
    kept = (
        previous.join(touched, on=INCARNATION_KEY, how="left")
        .filter(F.col("_from_version").isNull() | (F.col(VERSION) < F.col("_from_version")))
        .withColumn(FIRST_SEEN_AT, F.coalesce(F.col("_first_seen_at"), F.col(FIRST_SEEN_AT)))
        .withColumn(LAST_SEEN_AT, F.coalesce(F.col("_last_seen_at"), F.col(LAST_SEEN_AT)))
        .withColumn(
            DELETED_AT,
            F.when(F.col("_from_version").isNull(), F.col(DELETED_AT)).otherwise(F.col("_deleted_at")),
        )
    )
    return _ddl_select(kept, t.TOPIC_INCARNATIONS_DDL).unionByName(
        _ddl_select(derived, t.TOPIC_INCARNATIONS_DDL)
    )
