"""Consumer lineage (contract R8-R10) as Spark transforms: ``DataFrame -> DataFrame``, no I/O.

:mod:`topic_lineage.scd.group_reference` is the same rules in plain Python, one offset at a
time; read it first. Here:

1. :func:`group_offsets` attributes each observed offset (R8): by the topic ID the same
   snapshot shows under the name, else by the version named so that is valid at the snapshot's
   time, else to nothing (NULL ``incarnation_key`` and ``topic_id``).
2. :func:`group_incarnations` aggregates the attributed offsets per (cluster, group,
   incarnation): first and last snapshot, greatest committed offset, and R9's
   ``carried_offset``. Rows come only from observed offsets, so nothing is concluded from a
   group's absence (R10).

Both read the *final* ``topic_incarnations``, so they are a function of the set of snapshots
like it (R5).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from topic_lineage import tables as t

KEY = t.INCARNATION_KEY
_SHOWN_ID = "_shown_topic_id"
_BY_ID = "_key_by_id"
_OFFSET_ROW = [t.CLUSTER_ID, t.CAPTURED_AT, t.GROUP_ID, t.TOPIC_NAME, t.PARTITION]


def observed_offsets(group_rows: DataFrame) -> DataFrame:
    """The committed offsets in stored group rows (rows of groups without offsets and of
    snapshots that saw no group carry no topic and are left out)."""
    return group_rows.where(F.col(t.TOPIC_NAME).isNotNull()).select(
        *_OFFSET_ROW, t.COMMITTED_OFFSET, t.LOG_END_OFFSET
    )


def group_offsets(group_rows: DataFrame, topic_snapshots: DataFrame, incarnations: DataFrame) -> DataFrame:
    """R8: each observed offset with the incarnation it belongs to (``GROUP_OFFSETS_DDL``)."""
    offsets = observed_offsets(group_rows)
    shown = topic_snapshots.where(F.col(t.TOPIC_ID).isNotNull()).select(
        t.CLUSTER_ID, t.CAPTURED_AT, t.TOPIC_NAME, F.col(t.TOPIC_ID).alias(_SHOWN_ID)
    )
    key_of_id = (
        incarnations.where(F.col(t.TOPIC_ID).isNotNull())
        .select(t.CLUSTER_ID, F.col(t.TOPIC_ID).alias(_SHOWN_ID), F.col(KEY).alias(_BY_ID))
        .distinct()
    )
    with_id = (
        offsets.join(shown, on=[t.CLUSTER_ID, t.CAPTURED_AT, t.TOPIC_NAME], how="left")
        .join(key_of_id, on=[t.CLUSTER_ID, _SHOWN_ID], how="left")
    )
    by_id = with_id.where(F.col(_BY_ID).isNotNull()).select(
        *_OFFSET_ROW, t.COMMITTED_OFFSET, t.LOG_END_OFFSET,
        F.col(_SHOWN_ID).alias(t.TOPIC_ID), F.col(_BY_ID).alias(KEY),
    )

    # Not placed by the snapshot's own ID: the version named so that is valid at that instant.
    versions = incarnations.select(
        t.CLUSTER_ID, t.TOPIC_NAME, KEY, F.col(t.TOPIC_ID).alias("_version_topic_id"),
        t.VALID_FROM, t.VALID_TO,
    )
    unplaced = with_id.where(F.col(_BY_ID).isNull()).drop(_SHOWN_ID, _BY_ID)
    is_valid_then = (F.col(t.VALID_FROM) <= F.col(t.CAPTURED_AT)) & (
        F.col(t.VALID_TO).isNull() | (F.col(t.CAPTURED_AT) < F.col(t.VALID_TO))
    )
    candidates = unplaced.join(versions, on=[t.CLUSTER_ID, t.TOPIC_NAME], how="left").where(
        F.col(KEY).isNull() | is_valid_then
    )
    # Two versions valid at once (a broker bug the gate refuses): the one that began last wins.
    newest_first = Window.partitionBy(*_OFFSET_ROW).orderBy(
        F.col(t.VALID_FROM).desc_nulls_last(), F.col(KEY).asc_nulls_last()
    )
    by_name = (
        candidates.withColumn("_rank", F.row_number().over(newest_first))
        .where(F.col("_rank") == 1)
        .select(*_OFFSET_ROW, t.COMMITTED_OFFSET, t.LOG_END_OFFSET,
                F.col("_version_topic_id").alias(t.TOPIC_ID), KEY)
    )
    # versions that are not valid then were filtered out above, which can leave an offset with
    # no candidate row at all: those come back unattributed
    lost = unplaced.join(by_name.select(*_OFFSET_ROW), on=_OFFSET_ROW, how="left_anti").select(
        *_OFFSET_ROW, t.COMMITTED_OFFSET, t.LOG_END_OFFSET,
        F.lit(None).cast("string").alias(t.TOPIC_ID), F.lit(None).cast("string").alias(KEY),
    )
    return by_id.unionByName(by_name).unionByName(lost).select(*t.ddl_columns(t.GROUP_OFFSETS_DDL))


def group_incarnations(offsets: DataFrame, incarnations: DataFrame) -> DataFrame:
    """R9 and the per-incarnation lineage of each group (``GROUP_INCARNATIONS_DDL``)."""
    is_carried = F.col(t.LOG_END_OFFSET).isNotNull() & (
        F.col(t.COMMITTED_OFFSET) > F.col(t.LOG_END_OFFSET)
    )
    newest_version = Window.partitionBy(KEY).orderBy(F.col(t.VERSION).desc())
    incarnation_id = (
        incarnations.withColumn("_rank", F.row_number().over(newest_version))
        .where(F.col("_rank") == 1)
        .select(KEY, t.TOPIC_ID)
    )
    # the name the group last read the incarnation under (the greater when one snapshot has two)
    last_read = F.max(F.struct(F.col(t.CAPTURED_AT), F.col(t.TOPIC_NAME)))
    per_incarnation = (
        offsets.where(F.col(KEY).isNotNull())
        .groupBy(t.CLUSTER_ID, t.GROUP_ID, KEY)
        .agg(
            F.min(t.CAPTURED_AT).alias(t.FIRST_SEEN_AT),
            last_read.alias("_last"),
            F.max(t.COMMITTED_OFFSET).alias(t.MAX_COMMITTED_OFFSET),
            F.max(is_carried).alias(t.CARRIED_OFFSET),
        )
        .select(
            t.CLUSTER_ID, t.GROUP_ID, KEY,
            F.col(f"_last.{t.TOPIC_NAME}").alias(t.TOPIC_NAME),
            t.FIRST_SEEN_AT,
            F.col(f"_last.{t.CAPTURED_AT}").alias(t.LAST_SEEN_AT),
            t.MAX_COMMITTED_OFFSET, t.CARRIED_OFFSET,
        )
    )
    return per_incarnation.join(incarnation_id, on=KEY, how="left").select(
        *t.ddl_columns(t.GROUP_INCARNATIONS_DDL)
    )
