"""How a topic incarnation is decided: pure ``DataFrame -> DataFrame`` transforms, no I/O.

Input is the snapshot store's rows (schema ``tables.SNAPSHOT_STORE_DDL``: one row per topic per
snapshot; an empty snapshot is one marker row with ``topic_name`` NULL). Output are the three
contract tables. :mod:`topic_lineage.scd.build` does the reading and writing.

The rules (contract R1-R6) as this module applies them, per cluster, in ``captured_at`` order.
Their executable specification is :mod:`topic_lineage.scd.reference` (a plain-Python fold); the
property tests check that this module equals it row for row.

1. **Identity.** An observation with a topic ID belongs to the incarnation of that ID. An ID-less
   observation of name N is *resolved* to an ID when one is adjacent to it among the observations
   of N with nothing in between that could have ended it: no complete snapshot that is not held,
   and not two complete snapshots (a held one and its confirmation); a held snapshot alone ends
   nothing (issue #12). It takes the last ID seen for N before it, or else the next ID seen for N
   if that is the ID's very first appearance (R4, ``id_assigned``). Otherwise it is keyed by
   ``(cluster_id, name)``. Holds are decided first (pass 1, segments broken at every complete
   snapshot: the hold counts do not depend on it), then everything else (pass 2; when no
   snapshot is held, pass 2 would break the segments where pass 1 did, and reuses its rows). Two names
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
the runs (``held`` already set); new ones are computed. Seeds enter as observations
(:func:`_seed_observations`); a seed that is only a name's last observation is marked in one
stage (:func:`_mark_name_only_seeds`) and goes to the next state unchanged; the identity's last
seed is where its versions, key and ``deleted_at`` continue from (the ``_seed_*`` columns).

**Reading it.** :func:`derive` is a chain of stages, one per rule, listed with their rules above
it; each is a ``DataFrame -> DataFrame`` function whose docstring names the rule it applies and
whose final ``select`` is its schema contract (the column tuples ``_OBSERVED``,
``_IDENTIFIED``, ``_GAPPED``, ``_CLOSED``, ``_VERSIONED``). The stages keep the order of the
window partitionings (name, ID, identity, life), so that no stage adds a shuffle or a sort.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from topic_lineage import tables as t
from topic_lineage.scd.hold import HoldPolicy

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

_UNBOUNDED = Window.unboundedPreceding
_FOLLOWING = Window.unboundedFollowing
_CURRENT = Window.currentRow


@dataclass(frozen=True)
class Derived:
    """What :func:`derive` produces."""

    snapshot_runs: DataFrame
    topic_incarnations: DataFrame  # version rows of every incarnation derive() saw
    state: DataFrame  # the seed rows for the next incremental build
    kept: tuple = ()  # the intermediate frames (local checkpoints) unpersist() releases

    def unpersist(self) -> None:
        """Release the intermediate frames derive() keeps (call after writing the outputs).

        They are local checkpoints: a classic session frees their blocks now. On Spark Connect
        the server frees them when this process drops the frames (and the JVM collects them)."""
        for frame in self.kept:
            release_checkpoint(frame)


def release_checkpoint(frame: DataFrame) -> None:
    """Free the blocks of a frame made by ``localCheckpoint`` (``unpersist()`` does not: the
    frame is a plan over the checkpointed RDD, not a cached query). Classic sessions only."""
    jdf = getattr(frame, "_jdf", None)  # a Spark Connect frame has none
    if jdf is None:
        return
    plan = jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)


def empty_frame(spark, ddl: str) -> DataFrame:
    """No rows, the DDL's columns; planned in the JVM (``createDataFrame([])`` would make every
    job that reads it start Python workers)."""
    return select_ddl(spark.range(0).select(*[
        F.lit(None).alias(name) for name in t.ddl_columns(ddl)
    ]), ddl)


def select_ddl(df: DataFrame, ddl: str) -> DataFrame:
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
    return select_ddl(runs.withColumn(t.HELD, F.lit(None).cast("boolean")), RUNS_IN_DDL)


def topic_snapshots(store_rows: DataFrame) -> DataFrame:
    """The observations (contract table ``topic_snapshots``), without empty-snapshot markers."""
    # No distinct(): the store holds each snapshot once (one file per cluster and time) and a
    # snapshot names a topic once (topic_lineage.snapshot rejects duplicates), so these rows are
    # already a set; a distinct would shuffle every observation for nothing.
    rows = store_rows.filter(F.col(t.TOPIC_NAME).isNotNull()).select(
        t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.COMPLETE, t.TOPIC_NAME, t.TOPIC_ID,
        t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL, t.ERROR,
    )
    return select_ddl(with_topic_uuid(rows), t.TOPIC_SNAPSHOTS_DDL)


# --- the derivation ---------------------------------------------------------------------------------
# Stages, in order (each a DataFrame -> DataFrame function ending with a select, its schema
# contract; the columns each hands on are the tuples below):
#
#   _snapshot_positions      runs: position among the cluster's snapshots and complete ones
#   _new_observations        shared IDs: one observation per ID and snapshot (R5)
#   _collapse_runs           the ends of each run of an unchanged topic (cost only)
#   _seed_observations       incremental builds: the previous build's state as observations
#   _with_closing_positions  positions among the complete snapshots that close by themselves (R2, R3)
#   _with_id_first_seen      when each ID was first seen (R4)
#   _identity_segments       stretches of a name that nothing could have ended (R2, R3, issue #12)
#   _resolve_identity        identity of each observation (R1, R4)
#   _name_successors         the name's next observation (R1 displacement) and run interiors
#   _mark_name_only_seeds    incremental builds: seeds that only served the name windows
#   _gaps                    evidence of absence and displacement after each observation (R2, R1)
#   _hold                    the mass-deletion hold of each new complete snapshot (R3)
#   _close_gaps              when each gap closes the incarnation (R2, R3, R1)
#   _lives                   lives of an identity: a name-keyed one cannot reappear (R6, R4)
#   _effective_attributes    a describe error keeps the attributes known before (R2)
#   _versions                version numbers and change types (R6, R4)
#   _version_starts          valid_from, alias and change type of each version
#   _keys                    incarnation_key (R5)
#   _incarnation_span        first_seen_at, last_seen_at, deleted_at (R3: earliest closing wins)
#   _incarnation_rows / _next_state   the outputs

_ATTRS = (t.PARTITION_COUNT, t.REPLICATION_FACTOR, t.IS_INTERNAL)

# An observation as the rules read it.
_OBSERVATION = (
    t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.TOPIC_NAME, t.TOPIC_ID, *_ATTRS, t.ERROR,
)
# What a seed carries from the previous build (NULL on new observations): the derived state of
# an identity's or a name's last observation (STATE_DDL), read where each rule continues from it.
_SEED_STATE = (
    "_seed_version_topic_id", "_seed_key", "_seed_version", "_seed_valid_from",
    "_seed_change_type", "_seed_first_seen_at", "_seed_deleted_at", "_seed_displaced_at",
)
# Where an observation's snapshot lies in its cluster (from _snapshot_positions):
# `_snapshot_pos` among all snapshots, `_completes_upto` / `_completes_before` the number of
# complete snapshots up to and including it / strictly before it. "Is there a complete snapshot
# strictly between a and b" becomes `_completes_before(b) > _completes_upto(a)`.
_POSITIONS = ("_snapshot_pos", "_completes_upto", "_completes_before")
# Run flags (from _collapse_runs): the name's previous / next observation is the same, unchanged
# topic in the adjacent snapshot.
_RUN_FLAGS = ("_same_run_as_prev", "_same_run_as_next")
# What both passes start from: collapsed new observations and seeds.
_OBSERVED = (*_OBSERVATION, "_is_seed", *_SEED_STATE, *_POSITIONS, *_RUN_FLAGS)
# After identity resolution: the ID an observation resolves to, and its identity.
_RESOLVED = (
    *_OBSERVATION, "_is_seed", *_SEED_STATE, "_snapshot_pos", "_completes_upto",
    "_same_run_as_next", "_resolved_id",
)
_IDENTIFIED = (*_RESOLVED, "_identity")
# What _gaps finds in the gap after each observation (R2: complete snapshots; R1: displacement).
_GAP_EVIDENCE = ("_first_complete_after", "_second_complete_after", "_displaced_at")
# After _gaps: what the hold counts and the closing read; an observation with its identity's
# neighbours, then the evidence.
_WITH_NEIGHBOURS = (
    *_OBSERVATION, "_is_seed", *_SEED_STATE, "_snapshot_pos", "_same_run_as_next",
    "_run_interior_end_pos", "_resolved_id", "_identity", "_is_name_only_seed",
    "_identity_prev_seen_at", "_identity_next_seen_at", "_is_last_of_name",
)
_GAPPED = (*_WITH_NEIGHBOURS, *_GAP_EVIDENCE)
# After _close_gaps: what the versions read (the gaps' evidence reduced to when each closes).
_CLOSING = (
    *_OBSERVATION, "_is_seed", *_SEED_STATE, "_resolved_id", "_identity",
    "_identity_prev_seen_at", "_identity_next_seen_at", "_is_last_of_name", "_displaced_at",
)
_CLOSED = (*_CLOSING, "_gap_closed_at")
# One life of an identity: an incarnation (an ID-less identity can have several, _lives).
_LIFE = (t.CLUSTER_ID, "_identity", "_life")
# After _versions: each observation's life, the ID known so far and its version number.
_NUMBERED = (*_CLOSED, "_life", "_version_topic_id", t.VERSION)
# After _version_starts: what each version takes from its first observation.
_STARTED = (*_NUMBERED, "_version_from", "_version_alias", "_version_change")
# After _keys: and the incarnation's key.
_KEYED = (*_STARTED, t.INCARNATION_KEY)
# The span of each life (_incarnation_span).
_SPAN = (t.FIRST_SEEN_AT, t.LAST_SEEN_AT, t.DELETED_AT)
# What _incarnation_rows and _next_state read.
_VERSIONED = (*_KEYED, *_SPAN)


def derive(
    store_rows: DataFrame,
    runs: DataFrame,
    state: DataFrame | None = None,
    policy: HoldPolicy | None = None,
) -> Derived:
    """Snapshot runs, incarnation versions and the next state from observations.

    ``store_rows``: new store rows (SNAPSHOT_STORE_DDL). ``runs``: EVERY run of the clusters
    concerned, old and new (RUNS_IN_DDL; ``held`` set for old ones, NULL for new ones).
    ``state``: seed rows (STATE_DDL) of the previous build for incremental clusters, or None.
    The returned incarnation rows cover every incarnation with a seed or a new observation.

    The intermediate frames are materialized with ``localCheckpoint`` (eager), which also cuts
    their plans: each later stage is planned on the materialized rows, not on the whole
    derivation again. Planning is what a small build pays for (an incremental build over the
    10 M-observation benchmark history, warm session: 19-20 s with ``persist``, 7-8 s with
    this), and a large one gains too (issue #24: a full refresh of 10 M observations,
    115-117 s with ``persist``, 95-97 s with this, peak 2.5 -> 2.3 GiB; 100 M: 701 s -> 606 s,
    the same peak). Each is computed once, when made, and kept in executor memory (spilled to
    disk) until :meth:`Derived.unpersist`. The price: a checkpoint has no lineage, so an
    executor lost mid-build fails the build (nothing is published; a retry builds again)
    instead of recomputing its part.
    """
    policy = policy or HoldPolicy()
    if state is None:
        state = empty_frame(store_rows.sparkSession, STATE_DDL)

    def keep(frame: DataFrame) -> DataFrame:
        return frame.localCheckpoint(eager=True)

    # Kept: a few rows per snapshot, read by every output (else the store is rescanned).
    ranked = keep(_snapshot_positions(runs))
    positions = ranked.select(t.CLUSTER_ID, t.CAPTURED_AT, *_POSITIONS)
    completes = ranked.filter(F.col(t.COMPLETE)).select(
        t.CLUSTER_ID,
        F.col("_completes_upto").alias("_complete_rank"),
        F.col(t.CAPTURED_AT).alias("_complete_at"),
    )

    def positioned(frame: DataFrame) -> DataFrame:
        # Inner: every observation's snapshot is among the runs (runs come from the same store).
        return frame.join(F.broadcast(positions), on=[t.CLUSTER_ID, t.CAPTURED_AT], how="inner")

    # New observations shrink to the ends of their runs before anything else; seeds join them.
    # Kept: both passes below read them.
    new = _collapse_runs(positioned(_new_observations(store_rows)))
    seeds = positioned(_seed_observations(state))
    observed = keep(new.unionByName(seeds, allowMissingColumns=True).select(*_OBSERVED))

    def identified_gaps(decided_runs: DataFrame) -> DataFrame:
        rows = _with_closing_positions(observed, decided_runs)
        rows = _resolve_identity(_identity_segments(_with_id_first_seen(rows)))
        return _gaps(_mark_name_only_seeds(_name_successors(rows)), completes)

    # Pass 1, the hold (R3): identity segments broken at every complete snapshot (holds not yet
    # known). The per-snapshot counts do not depend on whether an ID-less observation after a
    # held snapshot joins the name's previous incarnation or starts its own: either way it is
    # one identity seen after the held snapshot, and the earlier one lacked from it.
    undecided = ranked.withColumn(t.HELD, F.lit(None).cast("boolean"))
    provisional = keep(identified_gaps(undecided))
    runs_out = keep(_hold(ranked, provisional.filter(~F.col("_is_name_only_seed")), policy))

    # Pass 2, everything else: segments broken only where something could end an incarnation.
    # Without any held snapshot that is pass 1 again (an undecided hold counts as not held), so
    # pass 1's rows are reused (issue #24: a small build's derivation 10.3-11.0 s -> 8.1-9.7 s
    # where nothing is held; a cluster that ever had a held snapshot keeps paying for pass 2).
    if runs_out.filter(F.col(t.HELD)).isEmpty():
        gapped = provisional
    else:
        gapped = keep(identified_gaps(runs_out))
    # A seed that is not its identity's last one (a name's last observation) only served the
    # name windows; versions continue from the identity's last seed. It goes to the next state
    # as it came.
    name_only_seeds = gapped.filter(F.col("_is_name_only_seed"))
    rows = _close_gaps(gapped.filter(~F.col("_is_name_only_seed")), runs_out)
    rows = _effective_attributes(_lives(rows))
    rows = _incarnation_span(_keys(_version_starts(_versions(rows))))
    rows = keep(rows)  # read by both the incarnations and the state
    return Derived(
        snapshot_runs=select_ddl(runs_out, t.SNAPSHOT_RUNS_DDL),
        topic_incarnations=_incarnation_rows(rows),
        state=_next_state(rows, name_only_seeds),
        kept=(ranked, observed, provisional, runs_out, gapped, rows),
    )


def _snapshot_positions(runs: DataFrame) -> DataFrame:
    """Runs (RUNS_IN_DDL) with their positions in the cluster: ``_completes_upto`` (complete
    snapshots up to and including this one; the rank of a complete one among them),
    ``_completes_before`` and ``_snapshot_pos`` (its rank among all snapshots)."""
    w_time = Window.partitionBy(t.CLUSTER_ID).orderBy(t.CAPTURED_AT)
    complete = F.col(t.COMPLETE).cast("int")
    return (
        runs.withColumn("_completes_upto", F.sum(complete).over(w_time.rowsBetween(_UNBOUNDED, _CURRENT)))
        .withColumn("_snapshot_pos", F.row_number().over(w_time))
        .select(
            *t.ddl_columns(RUNS_IN_DDL),
            "_snapshot_pos",
            "_completes_upto",
            (F.col("_completes_upto") - complete).alias("_completes_before"),
        )
    )


def _new_observations(store_rows: DataFrame) -> DataFrame:
    """The store's observations (without empty-snapshot markers), as derive() reads them.

    Shared IDs (two names carrying one ID in one snapshot, a broker bug of the KAFKA-19383
    family): only the first name in name order is the ID's observation. ``topic_snapshots``
    keeps both, as observed; this choice only makes the derivation deterministic (R5), whatever
    the order or batching of ingestion, and the gate refuses to publish such snapshots."""
    first_name = Window.partitionBy(t.CLUSTER_ID, t.CAPTURED_AT, t.TOPIC_ID).orderBy(t.TOPIC_NAME)
    observed = store_rows.filter(F.col(t.TOPIC_NAME).isNotNull())
    observed = observed.withColumn("_rank_among_id_names", F.row_number().over(first_name))
    observed = observed.filter(F.col(t.TOPIC_ID).isNull() | (F.col("_rank_among_id_names") == 1))
    return observed.select(*_OBSERVATION, F.lit(False).alias("_is_seed"))


def _seed_observations(state: DataFrame) -> DataFrame:
    """Incremental builds: the previous build's state (STATE_DDL) as observations that carry
    their derived state (``_SEED_STATE``)."""
    return state.select(
        t.CLUSTER_ID, t.CLUSTER_ALIAS, t.CAPTURED_AT, t.TOPIC_NAME,
        # A seed enters identity resolution with its resolved ID, and is never an error: its
        # attributes are already the effective ones.
        F.col("resolved_id").alias(t.TOPIC_ID),
        *_ATTRS,
        F.lit(None).cast("string").alias(t.ERROR),
        F.lit(True).alias("_is_seed"),
        F.col("version_topic_id").alias("_seed_version_topic_id"),
        F.col(t.INCARNATION_KEY).alias("_seed_key"),
        F.col(t.VERSION).alias("_seed_version"),
        F.col("version_valid_from").alias("_seed_valid_from"),
        F.col(t.CHANGE_TYPE).alias("_seed_change_type"),
        F.col(t.FIRST_SEEN_AT).alias("_seed_first_seen_at"),
        F.col(t.DELETED_AT).alias("_seed_deleted_at"),
        F.col("displaced_at").alias("_seed_displaced_at"),
        # Seeds are never part of a run: the segment start of a name's first new observation
        # is decided next to its seed.
        F.lit(False).alias("_same_run_as_prev"),
        F.lit(False).alias("_same_run_as_next"),
    )


# What must stay equal along a run of observations for its interior to carry no information.
_RUN_KEY = (t.TOPIC_ID, t.CLUSTER_ALIAS, *_ATTRS)


def _collapse_runs(rows: DataFrame) -> DataFrame:
    """Keep only the ends of each *run*: observations of one name with the same ID, attributes
    and alias, no describe error, in consecutive snapshots of the cluster (no snapshot at all in
    between). The interior of a run changes nothing the rules look at: no gap, no version, the
    same identity. What depends on it is carried by two columns:

    - ``_same_run_as_next``: the name's next observation (kept or not) continues the run: no gap;
    - ``_same_run_as_prev``: this observation continues a run (no identity segment starts here).

    A stable topic seen in 1,000 snapshots becomes two rows: the rest of the derivation works
    on the changes, not on the history (this is one sort of the observations, the only one).
    ``rows`` are new, positioned observations only (a seed is never part of a run).
    """
    w_name = Window.partitionBy(t.CLUSTER_ID, t.TOPIC_NAME).orderBy(t.CAPTURED_AT)
    rows = rows.withColumn("_is_plain", F.col(t.ERROR).isNull())

    def same_as(shift, step: int) -> F.Column:
        same = (
            (shift("_snapshot_pos").over(w_name) == F.col("_snapshot_pos") + step)
            & F.col("_is_plain") & shift("_is_plain").over(w_name)
        )
        for column in _RUN_KEY:
            same = same & shift(column).over(w_name).eqNullSafe(F.col(column))
        return F.coalesce(same, F.lit(False))

    rows = rows.withColumn("_same_run_as_prev", same_as(F.lag, -1)).withColumn(
        "_same_run_as_next", same_as(F.lead, 1)
    )
    is_interior = F.col("_same_run_as_prev") & F.col("_same_run_as_next")
    return rows.filter(~is_interior).select(*_OBSERVATION, "_is_seed", *_POSITIONS, *_RUN_FLAGS)


def _with_closing_positions(rows: DataFrame, runs: DataFrame) -> DataFrame:
    """R2, R3: ``_closing_completes_upto`` / ``_closing_completes_before``, the positions of the
    rows' snapshots among the complete snapshots that close by themselves (not held). Before the
    holds are known (``held`` NULL) every complete snapshot counts."""
    w_time = Window.partitionBy(t.CLUSTER_ID).orderBy(t.CAPTURED_AT)
    closes_alone = (F.col(t.COMPLETE) & ~F.coalesce(F.col(t.HELD), F.lit(False))).cast("int")
    positions = (
        runs.select(t.CLUSTER_ID, t.CAPTURED_AT, closes_alone.alias("_closes_alone"))
        .withColumn(
            "_closing_completes_upto", F.sum("_closes_alone").over(w_time.rowsBetween(_UNBOUNDED, _CURRENT))
        )
        .select(
            t.CLUSTER_ID, t.CAPTURED_AT, "_closing_completes_upto",
            (F.col("_closing_completes_upto") - F.col("_closes_alone")).alias("_closing_completes_before"),
        )
    )
    # Inner: the runs hold every snapshot of the rows.
    return rows.join(F.broadcast(positions), on=[t.CLUSTER_ID, t.CAPTURED_AT], how="inner").select(
        *_OBSERVED, "_closing_completes_upto", "_closing_completes_before"
    )


def _with_id_first_seen(rows: DataFrame) -> DataFrame:
    """R4: ``_id_first_seen_at``, when an observation's ID was first seen (NULL without an ID):
    an ID-less observation takes the next ID of its name only if it is the ID's first."""
    w_id = Window.partitionBy(t.CLUSTER_ID, t.TOPIC_ID)
    has_id = F.col(t.TOPIC_ID).isNotNull()
    return rows.select(
        *_OBSERVED, "_closing_completes_upto", "_closing_completes_before",
        F.when(has_id, F.min(t.CAPTURED_AT).over(w_id)).alias("_id_first_seen_at"),
    )


def _closing_since_previous(w_name: Window) -> F.Column:
    """1 when the snapshots between the name's previous row and this one may have ended its
    incarnation by absence, 0 when not, NULL for its first row. Every complete snapshot there
    lacks the name; it ends the incarnation when one of them is not held, or when there are two
    (a held one and its confirmation, R3). A held snapshot alone establishes nothing (issue #12:
    an ID-less describe error after a held snapshot is still the same topic)."""
    closing_complete_between = F.col("_closing_completes_before") > F.lag("_closing_completes_upto").over(w_name)
    two_completes_between = (F.col("_completes_before") - F.lag("_completes_upto").over(w_name)) >= 2
    return (closing_complete_between | two_completes_between).cast("int")


def _identity_segments(rows: DataFrame) -> DataFrame:
    """R2, R3 for ID-less observations: ``_identity_segment`` numbers the stretches of a name's
    observations that nothing could have ended in between (an ID-less observation can only take
    an ID from its own segment). A run continues its segment (its removed interior has no
    snapshot between observations)."""
    w_name = Window.partitionBy(t.CLUSTER_ID, t.TOPIC_NAME).orderBy(t.CAPTURED_AT)
    starts_segment = F.when(F.col("_same_run_as_prev"), F.lit(0)).otherwise(
        F.coalesce(_closing_since_previous(w_name), F.lit(1))
    )
    rows = rows.withColumn("_starts_segment", starts_segment)
    return rows.select(
        *_OBSERVATION, "_is_seed", *_SEED_STATE, "_snapshot_pos", "_completes_upto",
        "_same_run_as_next", "_id_first_seen_at",
        F.sum("_starts_segment").over(w_name.rowsBetween(_UNBOUNDED, _CURRENT)).alias("_identity_segment"),
    )


def _resolve_identity(rows: DataFrame) -> DataFrame:
    """R1, R4: ``_resolved_id``, an ID-less observation's adjacent ID within its segment (the last
    one before it, else the next one if that is the ID's first appearance: ``id_assigned``), and
    ``_identity``: ``id:<ID>``, or ``name:<name>`` for one that stays ID-less."""
    tid = F.col(t.TOPIC_ID)
    w_segment = Window.partitionBy(t.CLUSTER_ID, t.TOPIC_NAME, "_identity_segment").orderBy(t.CAPTURED_AT)
    before = w_segment.rowsBetween(_UNBOUNDED, _CURRENT)
    after = w_segment.rowsBetween(_CURRENT, _FOLLOWING)
    last_id = F.last(tid, ignorenulls=True).over(before)
    next_id = F.first(tid, ignorenulls=True).over(after)
    next_id_is_new = F.first(
        F.when(tid.isNotNull(), F.col("_id_first_seen_at") == F.col(t.CAPTURED_AT)), ignorenulls=True
    ).over(after)
    rows = rows.withColumn("_resolved_id", F.coalesce(last_id, F.when(next_id_is_new, next_id)))
    identity = (
        F.when(F.col("_resolved_id").isNotNull(), F.concat(F.lit("id:"), F.col("_resolved_id")))
        .otherwise(F.concat(F.lit("name:"), F.col(t.TOPIC_NAME)))
    )
    return rows.select(*_RESOLVED, identity.alias("_identity"))


def _name_successors(rows: DataFrame) -> DataFrame:
    """R1: the name's next observation (``_name_next_seen_at``, ``_name_next_identity``), and
    where a run's removed interior ends (``_run_interior_end_pos``, the position of the run's
    last observation). Still partitioned by name: no extra shuffle."""
    w_name = Window.partitionBy(t.CLUSTER_ID, t.TOPIC_NAME).orderBy(t.CAPTURED_AT)
    return rows.select(
        *_IDENTIFIED,
        F.lead(t.CAPTURED_AT).over(w_name).alias("_name_next_seen_at"),
        F.lead("_identity").over(w_name).alias("_name_next_identity"),
        F.when(F.col("_same_run_as_next"), F.lead("_snapshot_pos").over(w_name)).alias("_run_interior_end_pos"),
    )


def _mark_name_only_seeds(rows: DataFrame) -> DataFrame:
    """Incremental builds: ``_is_name_only_seed``, a seed followed by another seed of its
    identity. It is a name's last observation, not its identity's: it served the name windows
    above, has no gap of its own, and no version row (versions continue from the identity's
    last seed)."""
    w_identity = Window.partitionBy(t.CLUSTER_ID, "_identity").orderBy(t.CAPTURED_AT)
    next_is_seed = F.lead("_is_seed").over(w_identity)
    return rows.select(
        *_IDENTIFIED, "_name_next_seen_at", "_name_next_identity", "_run_interior_end_pos",
        (F.col("_is_seed") & F.coalesce(next_is_seed, F.lit(False))).alias("_is_name_only_seed"),
    )


def _gaps(rows: DataFrame, completes: DataFrame) -> DataFrame:
    """R2, R1: for each observation, the gap until its identity's next observation: the first
    and second complete snapshots in it (``_first_complete_after``, ``_second_complete_after``)
    and the first snapshot showing its name under another identity (``_displaced_at``)."""
    w_identity = Window.partitionBy(t.CLUSTER_ID, "_identity").orderBy(t.CAPTURED_AT)
    rows = (
        rows.withColumn("_identity_prev_seen_at", F.lag(t.CAPTURED_AT).over(w_identity))
        .withColumn("_identity_next_seen_at", F.lead(t.CAPTURED_AT).over(w_identity))
        .withColumn("_is_last_of_name", F.col("_name_next_seen_at").isNull())
        # Within a run the next observation is in the very next snapshot: no gap.
        .withColumn("_has_gap", ~F.col("_same_run_as_next") & ~F.col("_is_name_only_seed"))
    )

    def in_gap(column: str) -> F.Column:
        before_next = F.col("_identity_next_seen_at").isNull() | (F.col(column) < F.col("_identity_next_seen_at"))
        return F.when(F.col("_has_gap") & before_next, F.col(column))

    # The k-th complete snapshot after an observation has rank _completes_upto + k.
    first = completes.select(
        t.CLUSTER_ID, F.col("_complete_rank").alias("_first_rank"), F.col("_complete_at").alias("_first_at")
    )
    second = completes.select(
        t.CLUSTER_ID, F.col("_complete_rank").alias("_second_rank"), F.col("_complete_at").alias("_second_at")
    )
    rows = (
        rows.withColumn("_first_rank", F.col("_completes_upto") + 1)
        .withColumn("_second_rank", F.col("_completes_upto") + 2)
        # Left: no complete snapshot of that rank (yet) means none in the gap.
        .join(F.broadcast(first), on=[t.CLUSTER_ID, "_first_rank"], how="left")
        .join(F.broadcast(second), on=[t.CLUSTER_ID, "_second_rank"], how="left")
    )
    name_taken = F.col("_name_next_identity") != F.col("_identity")
    displaced_at = F.coalesce(
        # A seed's earliest displacement may be an observation no longer in the input.
        F.when(F.col("_is_seed") & F.col("_has_gap"), F.col("_seed_displaced_at")),
        F.when(name_taken, in_gap("_name_next_seen_at")),
    )
    return rows.select(
        *_WITH_NEIGHBOURS,
        in_gap("_first_at").alias("_first_complete_after"),
        in_gap("_second_at").alias("_second_complete_after"),
        displaced_at.alias("_displaced_at"),
    )


def _hold(ranked: DataFrame, rows: DataFrame, policy: HoldPolicy) -> DataFrame:
    """R3: decide ``held`` for the runs that do not have it yet (RUNS_IN_DDL with positions in,
    RUNS_IN_DDL out), from per-snapshot counts over ``rows`` (_GAPPED, without name-only seeds):
    a complete, non-authoritative snapshot is held when the incarnations it would close by
    absence number at least ``min_count`` and more than ``ratio`` of those live before it."""
    closes_by_absence = F.col("_first_complete_after").isNotNull() & (
        F.col("_displaced_at").isNull() | (F.col("_displaced_at") > F.col("_first_complete_after"))
    )
    would_close = (
        rows.filter(closes_by_absence)
        .groupBy(t.CLUSTER_ID, F.col("_first_complete_after").alias(t.CAPTURED_AT))
        .agg(F.count(F.lit(1)).alias("_would_close"))
    )
    # A new observation of an identity seen before: live before this snapshot, shown again.
    is_shown_again = ~F.col("_is_seed") & F.col("_identity_prev_seen_at").isNotNull()
    shown_again = (
        rows.filter(is_shown_again)
        .groupBy(t.CLUSTER_ID, t.CAPTURED_AT)
        .agg(F.count(F.lit(1)).alias("_shown_again"))
    )
    # Each removed run interior shows its incarnation again in every snapshot it spans:
    # +1 from the position after the run's first kept row, -1 at its last (a prefix sum).
    continuing = rows.filter(F.col("_same_run_as_next"))
    deltas = (
        continuing.select(t.CLUSTER_ID, (F.col("_snapshot_pos") + 1).alias("_snapshot_pos"), F.lit(1).alias("_delta"))
        .unionByName(continuing.select(
            t.CLUSTER_ID, F.col("_run_interior_end_pos").alias("_snapshot_pos"), F.lit(-1).alias("_delta")
        ))
        .groupBy(t.CLUSTER_ID, "_snapshot_pos")
        .agg(F.sum("_delta").alias("_delta"))
    )
    in_run_interiors = (
        # Left: most snapshots start or end no run interior.
        ranked.select(t.CLUSTER_ID, t.CAPTURED_AT, "_snapshot_pos")
        .join(deltas, on=[t.CLUSTER_ID, "_snapshot_pos"], how="left")
        .withColumn("_in_run_interiors", F.sum(F.coalesce(F.col("_delta"), F.lit(0))).over(
            Window.partitionBy(t.CLUSTER_ID).orderBy("_snapshot_pos").rowsBetween(_UNBOUNDED, _CURRENT)
        ))
        .select(t.CLUSTER_ID, t.CAPTURED_AT, "_in_run_interiors")
    )
    closing = F.coalesce(F.col("_would_close"), F.lit(0))
    live_before = (
        closing + F.coalesce(F.col("_shown_again"), F.lit(0)) + F.coalesce(F.col("_in_run_interiors"), F.lit(0))
    )
    is_mass_deletion = (
        F.col(t.COMPLETE)
        & ~F.coalesce(F.col(t.AUTHORITATIVE), F.lit(False))
        & (closing >= policy.min_count)
        & (closing > F.lit(policy.ratio) * live_before)
    )
    # Left: a snapshot that closes nothing, shows nothing again or is in no run interior has no
    # row in that count.
    return (
        ranked.join(would_close, on=[t.CLUSTER_ID, t.CAPTURED_AT], how="left")
        .join(shown_again, on=[t.CLUSTER_ID, t.CAPTURED_AT], how="left")
        .join(in_run_interiors, on=[t.CLUSTER_ID, t.CAPTURED_AT], how="left")
        .withColumn(t.HELD, F.coalesce(F.col(t.HELD), is_mass_deletion))
        .select(*t.ddl_columns(RUNS_IN_DDL))
    )


def _close_gaps(rows: DataFrame, runs: DataFrame) -> DataFrame:
    """R2, R3, R1: ``_gap_closed_at``, when the gap after an observation ends its incarnation
    (NULL: it does not). The earliest of: the first complete snapshot lacking it, when that one
    is not held or a second complete snapshot confirms the hold (``deleted_at`` is then the held
    one's time); the first snapshot showing its name under another identity."""
    held = runs.select(
        t.CLUSTER_ID,
        F.col(t.CAPTURED_AT).alias("_first_complete_after"),
        F.col(t.HELD).alias("_first_complete_held"),
    )
    # Left: most observations have no complete snapshot in their gap.
    rows = rows.join(F.broadcast(held), on=[t.CLUSTER_ID, "_first_complete_after"], how="left")
    closes_by_absence = F.col("_first_complete_after").isNotNull() & (
        ~F.col("_first_complete_held") | F.col("_second_complete_after").isNotNull()
    )
    absence_closed_at = F.when(closes_by_absence, F.col("_first_complete_after"))
    return rows.select(
        *_CLOSING,
        F.least(F.col("_displaced_at"), absence_closed_at).alias("_gap_closed_at")
    )


def _lives(rows: DataFrame) -> DataFrame:
    """R6, R4: ``_life`` numbers the lives of an identity. An ID's incarnation continues after a
    closed gap (it *reappears*); a name-keyed one cannot reappear: after a closed gap the name
    starts a new incarnation."""
    w_identity = Window.partitionBy(t.CLUSTER_ID, "_identity").orderBy(t.CAPTURED_AT)
    previous_gap_closed = F.lag("_gap_closed_at").over(w_identity).isNotNull()
    starts_life = F.col("_identity_prev_seen_at").isNull() | (
        F.col("_resolved_id").isNull() & previous_gap_closed
    )
    rows = rows.withColumn("_starts_life", starts_life.cast("int"))
    return rows.select(
        *_CLOSED, F.sum("_starts_life").over(w_identity.rowsBetween(_UNBOUNDED, _CURRENT)).alias("_life")
    )


def _effective_attributes(rows: DataFrame) -> DataFrame:
    """R2: a describe-error observation carries the attributes known before it in its life
    (NULL if none are known yet); ``_version_topic_id``, the ID known so far (a seed: its
    version's)."""
    w_life = Window.partitionBy(*_LIFE).orderBy(t.CAPTURED_AT)
    so_far = w_life.rowsBetween(_UNBOUNDED, _CURRENT)
    known = F.col(t.ERROR).isNull()
    rows = rows.select(
        *[c for c in (*_CLOSED, "_life") if c not in _ATTRS],
        *[F.last(F.when(known, F.col(attr)), ignorenulls=True).over(so_far).alias(attr) for attr in _ATTRS],
    )
    own_topic_id = F.when(F.col("_is_seed"), F.col("_seed_version_topic_id")).otherwise(F.col(t.TOPIC_ID))
    return rows.select(
        *_CLOSED, "_life", F.last(own_topic_id, ignorenulls=True).over(so_far).alias("_version_topic_id")
    )


def _versions(rows: DataFrame) -> DataFrame:
    """R6, R4: ``_change`` (NULL: no new version) and ``version``. Within a life a new version
    starts when the ID first appears (``id_assigned``), the name changes (``renamed``) or an
    attribute changes (``attributes_changed``); an observation after a closed gap is
    ``reappeared``. A seed keeps its version; the new ones continue from it."""
    w_life = Window.partitionBy(*_LIFE).orderBy(t.CAPTURED_AT)
    so_far = w_life.rowsBetween(_UNBOUNDED, _CURRENT)
    is_first = F.lag(t.CAPTURED_AT).over(w_life).isNull()
    reappeared = ~is_first & F.lag("_gap_closed_at").over(w_life).isNotNull()
    id_assigned = F.lag("_version_topic_id").over(w_life).isNull() & F.col("_version_topic_id").isNotNull()
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
    seed_version = F.coalesce(F.max("_seed_version").over(Window.partitionBy(*_LIFE)), F.lit(0))
    version = F.when(F.col("_is_seed"), F.col("_seed_version")).otherwise(
        seed_version + F.sum(starts_version).over(so_far)
    )
    return rows.select(*_CLOSED, "_life", "_version_topic_id", "_change", version.alias(t.VERSION))


def _version_starts(rows: DataFrame) -> DataFrame:
    """What a version takes from its first observation: ``_version_from`` (valid_from; a seed's
    version started before it), ``_version_alias`` and ``_version_change``."""
    w_version = Window.partitionBy(*_LIFE, t.VERSION).orderBy(t.CAPTURED_AT)
    start = F.coalesce(F.col("_seed_valid_from"), F.col(t.CAPTURED_AT))
    return rows.select(
        *_NUMBERED,
        F.first(start).over(w_version).alias("_version_from"),
        F.first(t.CLUSTER_ALIAS).over(w_version).alias("_version_alias"),
        F.first("_change").over(w_version).alias("_version_change"),
    )


def _keys(rows: DataFrame) -> DataFrame:
    """R5: ``incarnation_key``, from the life's first observation only, so the same for the
    same set of snapshots whatever the order of ingestion: the first 32 hex digits of sha256 of
    (cluster_id, topic_id) when it had an ID, else of (cluster_id, name, first_seen_at). A seed
    carries the key its life already has."""
    w_life = Window.partitionBy(*_LIFE).orderBy(t.CAPTURED_AT)
    key_text = F.when(
        F.col(t.TOPIC_ID).isNotNull() & ~F.col("_is_seed"),
        F.concat_ws("\u001f", t.CLUSTER_ID, F.lit("id"), t.TOPIC_ID),
    ).otherwise(
        F.concat_ws("\u001f", t.CLUSTER_ID, F.lit("name"), t.TOPIC_NAME,
                    F.date_format(t.CAPTURED_AT, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"))
    )
    own_key = F.coalesce(F.col("_seed_key"), F.substring(F.sha2(key_text, 256), 1, 32))
    return rows.select(*_STARTED, F.first(own_key).over(w_life).alias(t.INCARNATION_KEY))


def _incarnation_span(rows: DataFrame) -> DataFrame:
    """``first_seen_at``, ``last_seen_at`` and ``deleted_at`` of each life. ``deleted_at``: when
    several gaps or rules close it, the earliest time wins (R3; a seed brings its own)."""
    w_life_all = Window.partitionBy(*_LIFE)
    first_seen = F.coalesce(F.col("_seed_first_seen_at"), F.col(t.CAPTURED_AT))
    return rows.select(
        *_KEYED,
        F.min(first_seen).over(w_life_all).alias(t.FIRST_SEEN_AT),
        F.max(t.CAPTURED_AT).over(w_life_all).alias(t.LAST_SEEN_AT),
        F.least(F.min("_seed_deleted_at").over(w_life_all), F.min("_gap_closed_at").over(w_life_all))
        .alias(t.DELETED_AT),
    )


def _incarnation_rows(rows: DataFrame) -> DataFrame:
    """One row per version (contract table ``topic_incarnations``)."""
    versions = rows.groupBy(*_LIFE, t.VERSION).agg(
        F.min_by(t.INCARNATION_KEY, t.CAPTURED_AT).alias(t.INCARNATION_KEY),
        F.min_by("_version_alias", t.CAPTURED_AT).alias(t.CLUSTER_ALIAS),
        F.min_by("_version_topic_id", t.CAPTURED_AT).alias(t.TOPIC_ID),
        F.min_by(t.TOPIC_NAME, t.CAPTURED_AT).alias(t.TOPIC_NAME),
        F.min_by("_version_change", t.CAPTURED_AT).alias(t.CHANGE_TYPE),
        *[F.min_by(attr, t.CAPTURED_AT).alias(attr) for attr in _ATTRS],
        F.min("_version_from").alias(t.VALID_FROM),
        # The version's last observation's gap ends it when closed; else the next version does.
        F.max_by("_gap_closed_at", t.CAPTURED_AT).alias("_version_closed_at"),
        F.min(t.FIRST_SEEN_AT).alias(t.FIRST_SEEN_AT),
        F.max(t.LAST_SEEN_AT).alias(t.LAST_SEEN_AT),
        F.min(t.DELETED_AT).alias(t.DELETED_AT),
    )
    w_version = Window.partitionBy(*_LIFE).orderBy(t.VERSION)
    versions = (
        versions.withColumn(
            t.VALID_TO, F.coalesce(F.col("_version_closed_at"), F.lead(t.VALID_FROM).over(w_version))
        )
        .withColumn(t.IS_CURRENT, F.col(t.VALID_TO).isNull())
    )
    return select_ddl(with_topic_uuid(versions), t.TOPIC_INCARNATIONS_DDL)


def _next_state(rows: DataFrame, name_only_seeds: DataFrame) -> DataFrame:
    """The seed rows for the next build (STATE_DDL): each identity's and each name's last
    observation. A name-only seed is carried over as it came."""
    derived = rows.select(
        t.CLUSTER_ID,
        F.col("_version_alias").alias(t.CLUSTER_ALIAS),
        t.CAPTURED_AT,
        t.TOPIC_NAME,
        F.col("_resolved_id").alias("resolved_id"),
        F.col("_version_topic_id").alias("version_topic_id"),
        *_ATTRS,
        t.INCARNATION_KEY,
        t.VERSION,
        F.col("_version_from").alias("version_valid_from"),
        F.col("_version_change").alias(t.CHANGE_TYPE),
        t.FIRST_SEEN_AT,
        t.DELETED_AT,
        F.col("_displaced_at").alias("displaced_at"),
        "_identity_next_seen_at",
        "_is_last_of_name",
    )
    carried = name_only_seeds.select(
        t.CLUSTER_ID,
        t.CLUSTER_ALIAS,
        t.CAPTURED_AT,
        t.TOPIC_NAME,
        F.col("_resolved_id").alias("resolved_id"),
        F.col("_seed_version_topic_id").alias("version_topic_id"),
        *_ATTRS,
        F.col("_seed_key").alias(t.INCARNATION_KEY),
        F.col("_seed_version").alias(t.VERSION),
        F.col("_seed_valid_from").alias("version_valid_from"),
        F.col("_seed_change_type").alias(t.CHANGE_TYPE),
        F.col("_seed_first_seen_at").alias(t.FIRST_SEEN_AT),
        F.col("_seed_deleted_at").alias(t.DELETED_AT),
        F.col("_seed_displaced_at").alias("displaced_at"),
        "_is_last_of_name",
    )
    is_identity_last = F.col("_identity_next_seen_at").isNull()
    return select_ddl(derived.filter(is_identity_last | F.col("_is_last_of_name")), STATE_DDL) \
        .unionByName(select_ddl(carried.filter(F.col("_is_last_of_name")), STATE_DDL))


# --- merging an incremental result into the previous tables -----------------------------------
def merge_incarnations(previous: DataFrame, derived: DataFrame) -> DataFrame:
    """Previous version rows updated with a derivation over seeds and new observations.

    ``derived`` holds every version from each touched incarnation's seed onwards; earlier
    (closed) versions come from ``previous`` with the incarnation-level columns refreshed.
    """
    touched = derived.groupBy(t.INCARNATION_KEY).agg(
        F.min(t.VERSION).alias("_from_version"),
        F.min(t.FIRST_SEEN_AT).alias("_first_seen_at"),
        F.max(t.LAST_SEEN_AT).alias("_last_seen_at"),
        F.min(t.DELETED_AT).alias("_deleted_at"),
    )
    kept = (
        previous.join(touched, on=t.INCARNATION_KEY, how="left")
        .filter(F.col("_from_version").isNull() | (F.col(t.VERSION) < F.col("_from_version")))
        .withColumn(t.FIRST_SEEN_AT, F.coalesce(F.col("_first_seen_at"), F.col(t.FIRST_SEEN_AT)))
        .withColumn(t.LAST_SEEN_AT, F.coalesce(F.col("_last_seen_at"), F.col(t.LAST_SEEN_AT)))
        .withColumn(
            t.DELETED_AT,
            F.when(F.col("_from_version").isNull(), F.col(t.DELETED_AT)).otherwise(F.col("_deleted_at")),
        )
    )
    return select_ddl(kept, t.TOPIC_INCARNATIONS_DDL).unionByName(
        select_ddl(derived, t.TOPIC_INCARNATIONS_DDL)
    )
