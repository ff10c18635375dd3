"""Small explicit inputs and expected rows for the SCD tests (tests/test_scd_*.py)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from topic_lineage import tables as t
from topic_lineage.snapshot import Snapshot, TopicObservation
from topic_lineage.topic_id import canonical, rfc4122

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
ALIAS = "prod-eu"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def at(hours: float) -> datetime:
    """T0 + hours."""
    return T0 + timedelta(hours=hours)


def tid(n: int) -> str:
    """A distinct, valid canonical topic ID for small integers."""
    return canonical(bytes([0x10 + n % 200]) + bytes(14) + bytes([n % 256 or 1]))


def topic(name, topic_id=None, partitions=3, rf=3, internal=False, error=None) -> TopicObservation:
    if error is not None:
        return TopicObservation(name, topic_id, None, None, None, error)
    return TopicObservation(name, topic_id, partitions, rf, internal, None)


def snap(hours, *topics, complete=True, cluster=CLUSTER, alias=ALIAS, authoritative=False) -> Snapshot:
    return Snapshot(cluster, alias, at(hours), complete, tuple(topics), authoritative=authoritative)


def store_frame(spark, snapshots, source="import:jsonl"):
    """Store-shaped rows (tables.SNAPSHOT_STORE_DDL) of snapshots, as topic_lineage.store writes them."""
    import pyarrow as pa

    from topic_lineage.store import _to_arrow

    if not snapshots:
        return spark.createDataFrame([], t.SNAPSHOT_STORE_DDL)
    table = pa.concat_tables([_to_arrow(s, source) for s in snapshots])
    return spark.createDataFrame(table.to_pandas(), schema=t.SNAPSHOT_STORE_DDL)


@dataclass(frozen=True)
class Built:
    """The tables of one full-refresh build, as DataFrames over the version's files."""

    version: str
    snapshot_runs: object
    topic_incarnations: object
    topic_snapshots: object
    group_offsets: object
    group_incarnations: object


_SCRATCH: list[str] = []  # this process's directory of scratch homes (removed at its exit)


def _scratch_home() -> str:
    """A new empty home for :func:`derive`, inside one directory per process that is removed
    when the process ends: the frames :func:`derive` returns read its files lazily, so a home
    cannot go with the call, and a property test derives hundreds of them."""
    import atexit
    import shutil
    import tempfile

    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="scd-derive-"))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return tempfile.mkdtemp(dir=_SCRATCH[0])


def derive(spark, snapshots, policy=None) -> Built:
    """The tables derived from scratch from snapshots by the production derivation: stored in a
    scratch store of their own and built (``--full-refresh``: the walk, one Spark task per
    cluster), exactly what a user's build does."""
    import pytest

    from topic_lineage import store
    from topic_lineage import warehouse as wh
    from topic_lineage.scd.build import build_version
    from topic_lineage.scd.hold import HoldPolicy

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(t.HOME_ENV, _scratch_home())
        store.save_all(list({(s.cluster_id, s.captured_at): s for s in snapshots}.values()),
                       "import:jsonl")
        version = build_version(spark, full_refresh=True, policy=policy or HoldPolicy()).version

        def read(table):
            return spark.read.schema(t.TABLE_DDL[table]).parquet(str(wh.version_path(version, table)))

        return Built(version, read(t.SNAPSHOT_RUNS), read(t.TOPIC_INCARNATIONS), read(t.TOPIC_SNAPSHOTS),
                     read(t.GROUP_OFFSETS), read(t.GROUP_INCARNATIONS))


def key_for_id(topic_id: str, cluster: str = CLUSTER) -> str:
    return hashlib.sha256(f"{cluster}\x1fid\x1f{topic_id}".encode()).hexdigest()[:32]


def key_for_name(name: str, first_seen: datetime, cluster: str = CLUSTER) -> str:
    stamp = first_seen.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return hashlib.sha256(f"{cluster}\x1fname\x1f{name}\x1f{stamp}".encode()).hexdigest()[:32]


def version(
    key, name, topic_id, n, change, valid_from, valid_to, *, first_seen, last_seen,
    deleted=None, partitions=3, rf=3, internal=False, cluster=CLUSTER, alias=ALIAS,
) -> dict:
    """One expected topic_incarnations row."""
    return {
        "incarnation_key": key, "cluster_id": cluster, "cluster_alias": alias,
        "topic_id": topic_id, "topic_uuid": rfc4122(topic_id) if topic_id else None,
        "topic_name": name, "version": n, "change_type": change,
        "partition_count": partitions, "replication_factor": rf, "is_internal": internal,
        "valid_from": valid_from, "valid_to": valid_to, "is_current": valid_to is None,
        "first_seen_at": first_seen, "last_seen_at": last_seen, "deleted_at": deleted,
    }


def expected_frame(spark, rows, ddl=t.TOPIC_INCARNATIONS_DDL):
    import pandas as pd

    columns = t.ddl_columns(ddl)
    return spark.createDataFrame(pd.DataFrame(rows, columns=columns) if rows else [], schema=ddl) \
        if rows else spark.createDataFrame([], ddl)


# --- comparing the Spark build with the plain-Python reference (topic_lineage.scd.reference) ------
_COMPARED = [c for c in t.ddl_columns(t.TOPIC_INCARNATIONS_DDL) if c not in ("incarnation_key", "topic_uuid")]
_RUN_COLUMNS = ["cluster_id", "cluster_alias", "captured_at", "complete", "topic_count",
                "error_topic_count", "held"]


def _utc(value):
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # Spark collects naive UTC (conftest: session time zone UTC)
    return value


def incarnation_groups(rows) -> list:
    """Incarnation rows as a sorted list of incarnations, each the tuple of its versions: the
    ``incarnation_key`` compared as a grouping, not by value."""
    groups: dict = {}
    for row in rows:
        row = row if isinstance(row, dict) else row.asDict()
        groups.setdefault(row["incarnation_key"], []).append(
            tuple(_utc(row[c]) for c in _COMPARED)
        )
    return sorted((tuple(sorted(versions, key=repr)) for versions in groups.values()), key=repr)


def run_rows(rows) -> list:
    out = []
    for row in rows:
        row = row if isinstance(row, dict) else row.asDict()
        out.append(tuple(_utc(row[c]) for c in _RUN_COLUMNS))
    return sorted(out, key=repr)


def reference_tables(snapshots, policy=None):
    """(runs, incarnation groups) of topic_lineage.scd.reference for snapshots."""
    from topic_lineage.scd import reference

    kwargs = {} if policy is None else {"ratio": policy.ratio, "min_count": policy.min_count}
    runs, incarnations = reference.derive(snapshots, **kwargs)
    return run_rows(runs), incarnation_groups(incarnations)


# --- many examples, one derivation ------------------------------------------------------------
# The tests of tests/test_scd_rules.py and tests/test_scd_examples.py derive together, one build
# per hold policy, each example on clusters of its own (clusters are walked independently, one
# Spark task each), and each test then checks its own example's rows.
@dataclass(frozen=True)
class Example:
    """One registered input: snapshots and the hold policy to derive them with."""

    index: int
    snapshots: tuple
    policy: object  # topic_lineage.scd.hold.HoldPolicy


@dataclass(frozen=True)
class Table:
    """One derived table's rows for one example (cluster IDs and keys mapped back) with the
    derived frame's schema; see :func:`assert_table_equal`."""

    schema: object  # pyspark.sql.types.StructType
    rows: tuple

    def collect(self) -> list:
        return list(self.rows)

    def select(self, *columns: str) -> Table:
        from pyspark.sql import Row
        from pyspark.sql.types import StructType

        return Table(StructType([self.schema[c] for c in columns]),
                     tuple(Row(**{c: row[c] for c in columns}) for row in self.rows))


@dataclass(frozen=True)
class Tables:
    """What :func:`derive` gives for one example, collected."""

    snapshot_runs: Table
    topic_incarnations: Table


def assert_table_equal(actual: Table, expected) -> None:
    """What ``assertDataFrameEqual(actual_frame, expected_frame)`` checks: column names and types
    (nullability ignored, its default), then the rows in any order. ``expected``: a DataFrame or
    a Table."""
    from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

    __tracebackhide__ = True
    assertSchemaEqual(actual.schema, expected.schema)
    assertDataFrameEqual(actual.collect(), expected.collect())


class Examples:
    """A test module's inputs, registered at import (:meth:`add`) and derived on first use, as
    few builds as possible: one per hold policy.

    Each snapshot's cluster ID becomes ``<cluster>-ex<index>`` for the derivation, so examples
    (and the clusters within one) stay apart; the rows come back with the original cluster ID,
    and an ``incarnation_key`` equal to :func:`key_for_id` / :func:`key_for_name` of the
    derivation's cluster and a row's ID / name and first sighting becomes the same key of the
    original cluster. Any other key is left as it came, so a wrong key still fails."""

    def __init__(self):
        self._examples: list[Example] = []
        self._tables: dict[int, Tables] = {}

    def add(self, snapshots, policy=None) -> Example:
        from topic_lineage.scd.hold import HoldPolicy

        example = Example(len(self._examples), tuple(snapshots), policy or HoldPolicy())
        self._examples.append(example)
        return example

    def on(self, spark) -> _Derived:
        """The examples' tables, each derived (with its batch) when first asked for."""
        return _Derived(self, spark)

    def _batch_key(self, example: Example):
        return example.policy

    def tables(self, spark, example: Example) -> Tables:
        if example.index not in self._tables:
            key = self._batch_key(example)
            self._derive(spark, [e for e in self._examples
                                 if e.index not in self._tables and self._batch_key(e) == key])
        return self._tables[example.index]

    def _derive(self, spark, batch: list[Example]) -> None:
        from dataclasses import replace

        from pyspark.sql import Row

        origin: dict[str, tuple[int, str]] = {}  # derivation's cluster -> (example, cluster)
        snapshots = []
        for example in batch:
            for s in example.snapshots:
                cluster = f"{s.cluster_id}-ex{example.index}"
                origin[cluster] = (example.index, s.cluster_id)
                snapshots.append(replace(s, cluster_id=cluster))
        derived = derive(spark, snapshots, batch[0].policy)
        runs = derived.snapshot_runs.collect()
        incarnations = derived.topic_incarnations.collect()
        runs_schema, incarnations_schema = derived.snapshot_runs.schema, derived.topic_incarnations.schema

        def back(row, **changes) -> Row:
            return Row(**{**row.asDict(), t.CLUSTER_ID: origin[row[t.CLUSTER_ID]][1], **changes})

        keys: dict[str, str] = {}  # a key of the derivation's cluster -> the original one
        for row in incarnations:
            cluster, original = row[t.CLUSTER_ID], origin[row[t.CLUSTER_ID]][1]
            if row[t.TOPIC_ID] is not None:
                keys[key_for_id(row[t.TOPIC_ID], cluster)] = key_for_id(row[t.TOPIC_ID], original)
            name, first_seen = row[t.TOPIC_NAME], row[t.FIRST_SEEN_AT]
            keys[key_for_name(name, first_seen, cluster)] = key_for_name(name, first_seen, original)
        by_example: dict[int, tuple[list, list]] = {e.index: ([], []) for e in batch}
        for row in runs:
            by_example[origin[row[t.CLUSTER_ID]][0]][0].append(back(row))
        for row in incarnations:
            key = row[t.INCARNATION_KEY]
            by_example[origin[row[t.CLUSTER_ID]][0]][1].append(
                back(row, **{t.INCARNATION_KEY: keys.get(key, key)}))
        for index, (example_runs, example_incarnations) in by_example.items():
            self._tables[index] = Tables(Table(runs_schema, tuple(example_runs)),
                                         Table(incarnations_schema, tuple(example_incarnations)))


@dataclass(frozen=True)
class _Derived:
    examples: Examples
    spark: object

    def __getitem__(self, example: Example) -> Tables:
        return self.examples.tables(self.spark, example)
