"""Each expectation of the quality gate, with a passing and a failing case side by side.

Every case is a few rows in the contract schema, validated by the real GX checkpoint of its
table (the stored suites in ``expectations/``) on both engines the gate uses: Spark, and pandas
(a small version, validated in process; the row queries run with DuckDB). A failing case
asserts the exact set of expectations that fail, so a check that is too broad (or too narrow) is
caught too, and both engines must agree on every verdict and every offending row.

Validation runs cost seconds each, so the cases of one table are validated together: each case
gets its own cluster ID (all checks are per cluster), all passing cases form one table that
must pass whole, all failing cases another, and each failure is attributed to a case by the
cluster of its offending rows.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quality_rows import (
    CLUSTER,
    ENGINES,
    ID_A,
    ID_B,
    ID_C,
    NOW,
    PANDAS,
    SPARK,
    at,
    frame_on,
    group_incarnation,
    group_offset,
    incarnation,
    snapshot_run,
    topic_snapshot,
)

from topic_lineage import tables as t
from topic_lineage.quality import suites as s
from topic_lineage.quality.gate import GateConfig, validate_frames
from topic_lineage.topic_id import ONE_UUID, ZERO_UUID

pytestmark = pytest.mark.spark

OTHER_CLUSTER = "T3RoZXJDbHVzdGVyMDAwMQ"
STANDARD_BASE64_ID = "b8tRS7h4TJ2Vt43Dp85v2+"  # librdkafka's alphabet: must be normalised first
DEFAULT = GateConfig(max_age=timedelta(hours=24), max_error_share=0.5)


@pytest.fixture(params=[pytest.param(SPARK, marks=pytest.mark.slow), PANDAS])
def engine(request) -> str:
    """The engine a test validates on: every test that takes it runs on Spark and on pandas.
    The fast tier runs these on pandas only: there, every expectation's cases still run on both
    engines and are compared (test_both_engines_give_the_same_verdicts_and_offending_rows)."""
    return request.param


def failed(spark, table: str, rows: list[dict], config: GateConfig = DEFAULT,
           engine: str = ENGINES[0]) -> set[str]:
    """Names of the expectations of ``table``'s suite that fail on ``rows``."""
    result = validate_frames(
        spark, {table: frame_on(engine, spark, table, rows)}, version="test", config=config, now=NOW
    )
    assert result.evaluated == len(s.expectation_names(table))
    return set(result.failed_names)


def in_own_cluster(case: str, rows: list[dict]) -> list[dict]:
    """The rows of one case moved to clusters of their own (keys stay unique across cases)."""
    moved = []
    for row in rows:
        row = dict(row, cluster_id=f"case-{case}~{row[t.CLUSTER_ID]}")
        if row.get("incarnation_key") is not None:
            row["incarnation_key"] = f"case-{case}/{row['incarnation_key']}"
        moved.append(row)
    return moved


def failures_by_case(spark, table: str, cases: dict, engine: str) -> tuple[dict, set, list]:
    """Validate every case's passing rows together, then every case's failing rows together.

    Returns (case -> names failed by its failing rows, names failed by all passing rows, the
    outcomes of both validations).
    """
    good = [row for case, (ok, _) in cases.items() for row in in_own_cluster(case, ok)]
    bad = [row for case, (_, ko) in cases.items() for row in in_own_cluster(case, ko)]
    passing = validate_frames(spark, {table: frame_on(engine, spark, table, good)},
                              version="cases-ok", config=DEFAULT, now=NOW, sample_rows=1000)
    failing = validate_frames(spark, {table: frame_on(engine, spark, table, bad)},
                              version="cases-bad", config=DEFAULT, now=NOW, sample_rows=1000)
    assert passing.evaluated == failing.evaluated == len(s.expectation_names(table))
    by_case: dict[str, set] = {case: set() for case in cases}
    for failure in failing.failures:
        assert failure.rows, f"{failure.name} failed without offending rows"
        for row in failure.rows:
            by_case[row[t.CLUSTER_ID].removeprefix("case-").split("~")[0]].add(failure.name)
    return by_case, set(passing.failed_names), passing.outcomes + failing.outcomes


@pytest.fixture(scope="module")
def module_home(tmp_path_factory):
    """One TOPIC_LINEAGE_HOME for the batched case runs of this module."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TOPIC_LINEAGE_HOME", str(tmp_path_factory.mktemp("quality-cases")))
        yield


def closed(**overrides) -> dict:
    """A version that ended (not current)."""
    return incarnation(is_current=False, **overrides)


# --- topic_incarnations ---------------------------------------------------------------------------
INCARNATION_CASES = {
    # name: (passing rows, failing rows)
    s.LIVE_IDS_UNIQUE: (
        [  # same ID in two clusters; two ID-less topics (R4) in one cluster
            incarnation(),
            incarnation(cluster_id=OTHER_CLUSTER, incarnation_key="other/a"),
            incarnation(topic_id=None, topic_name="legacy-1", incarnation_key="n1"),
            incarnation(topic_id=None, topic_name="legacy-2", incarnation_key="n2"),
        ],
        [  # one live ID under two names (two incarnation keys)
            incarnation(incarnation_key="k1", topic_name="orders"),
            incarnation(incarnation_key="k2", topic_name="payments"),
        ],
    ),
    s.LIVE_NAMES_UNIQUE: (
        [  # re-created topic: the old incarnation is deleted, the new one is live
            closed(topic_id=ID_A, valid_to=at(24), deleted_at=at(24), last_seen_at=at(25)),
            incarnation(topic_id=ID_B, valid_from=at(24), first_seen_at=at(24)),
        ],
        [  # two live incarnations with the same name
            incarnation(topic_id=ID_A),
            incarnation(topic_id=ID_B),
        ],
    ),
    s.DELETED_IDS_NEVER_COME_BACK: (
        [closed(valid_to=at(10), deleted_at=at(10))],
        [  # the deleted ID was seen again (KAFKA-19383): recorded as `reappeared`
            closed(valid_to=at(10)),
            incarnation(version=2, change_type="reappeared", valid_from=at(5)),
        ],
    ),
    s.IDS_CANONICAL: (
        [incarnation(), incarnation(topic_id=None, topic_name="legacy", incarnation_key="n")],
        [incarnation(topic_id=STANDARD_BASE64_ID, topic_uuid="not checked here")],
    ),
    s.IDS_NOT_RESERVED: (
        [incarnation()],
        [
            incarnation(topic_id=ZERO_UUID, incarnation_key="z"),
            incarnation(topic_id=ONE_UUID, topic_name="__cluster_metadata", incarnation_key="o"),
        ],
    ),
    s.CLOSED_VERSIONS_END_AFTER_START: (
        [closed(valid_from=at(48), valid_to=at(24)), incarnation(version=2, valid_from=at(24))],
        [closed(valid_from=at(24), valid_to=at(24)), incarnation(version=2, valid_from=at(24))],
    ),
    s.ONE_CURRENT_ROW: (
        [
            closed(valid_to=at(24)),
            incarnation(version=2, valid_from=at(24)),
            closed(topic_id=ID_B, topic_name="gone", valid_to=at(5), deleted_at=at(5)),
        ],
        [
            closed(valid_to=at(24)),  # live (no deleted_at) but no current version
            closed(version=2, valid_from=at(24), valid_to=at(12)),
            # deleted, yet still marked current
            incarnation(topic_id=ID_B, topic_name="gone", deleted_at=at(5)),
        ],
    ),
    s.VERSIONS_DO_NOT_OVERLAP: (
        [closed(valid_to=at(24)), incarnation(version=2, valid_from=at(24))],
        [closed(valid_to=at(12)), incarnation(version=2, valid_from=at(24))],
    ),
    s.CHANGE_TYPES_KNOWN: (
        [closed(valid_to=at(24)),
         incarnation(version=2, valid_from=at(24), change_type="renamed", topic_name="orders-v2")],
        [incarnation(change_type="deleted")],
    ),
}


INCARNATION_CASES[s.DELETED_IDS_NEVER_COME_BACK + "#unlabelled"] = (
    [closed(valid_to=at(10), deleted_at=at(10))],
    [  # a version opening at the deletion instant, though not labelled `reappeared`
        closed(valid_to=at(10), deleted_at=at(10)),
        closed(version=2, change_type="attributes_changed", valid_from=at(10), valid_to=at(9),
               deleted_at=at(10)),
    ],
)


def expected_name(case: str) -> str:
    return case.split("#")[0]


# --- snapshot_runs --------------------------------------------------------------------------------
RUN_CASES = {
    s.SNAPSHOTS_UNIQUE: (
        [snapshot_run(captured_at=at(2)), snapshot_run(captured_at=at(1))],
        [snapshot_run(captured_at=at(1)), snapshot_run(captured_at=at(1), topic_count=11)],
    ),
    s.NO_SNAPSHOT_FROM_THE_FUTURE: (
        [snapshot_run(captured_at=NOW)],
        [snapshot_run(captured_at=at(2)), snapshot_run(captured_at=NOW + timedelta(minutes=5))],
    ),
    s.NEWEST_SNAPSHOT_FRESH: (
        [snapshot_run(captured_at=at(23))],
        [  # only an incomplete snapshot is recent; the newest complete one is 30 h old
            snapshot_run(captured_at=at(30)),
            snapshot_run(captured_at=at(1), complete=False),
        ],
    ),
    s.ERROR_SHARE_BELOW_LIMIT: (
        [snapshot_run(topic_count=10, error_topic_count=5)],
        [snapshot_run(topic_count=10, error_topic_count=6)],
    ),
}


def test_freshness_is_judged_per_cluster(spark, tl_home, engine):
    """One stale cluster fails freshness even when another cluster is fresh, and the offending
    row names the stale cluster."""
    rows = [snapshot_run(captured_at=at(1)),
            snapshot_run(cluster_id=OTHER_CLUSTER, cluster_alias="old", captured_at=at(40))]
    result = validate_frames(spark, {t.SNAPSHOT_RUNS: frame_on(engine, spark, t.SNAPSHOT_RUNS, rows)},
                             version="test", config=DEFAULT, now=NOW)
    (failure,) = result.failures
    assert failure.name == s.NEWEST_SNAPSHOT_FRESH
    assert [row[t.CLUSTER_ID] for row in failure.rows] == [OTHER_CLUSTER]


def test_freshness_age_is_configurable_and_can_be_disabled(spark, tl_home, engine):
    """The same 30-hour-old history fails at 24 h, passes at 36 h, and passes with the check off
    (replaying archived history)."""
    rows = [snapshot_run(captured_at=at(30))]
    assert failed(spark, t.SNAPSHOT_RUNS, rows, engine=engine) == {s.NEWEST_SNAPSHOT_FRESH}
    assert failed(spark, t.SNAPSHOT_RUNS, rows, GateConfig(max_age=timedelta(hours=36)), engine=engine) == set()
    assert failed(spark, t.SNAPSHOT_RUNS, rows, GateConfig(max_age=None), engine=engine) == set()


def test_error_share_is_configurable(spark, tl_home, engine):
    """6 failed describes of 10 topics fail at the default share 0.5 and pass at 0.6."""
    rows = [snapshot_run(topic_count=10, error_topic_count=6)]
    assert failed(spark, t.SNAPSHOT_RUNS, rows, GateConfig(max_error_share=0.6), engine=engine) == set()
    assert failed(spark, t.SNAPSHOT_RUNS, rows, GateConfig(max_error_share=0.5), engine=engine) == {
        s.ERROR_SHARE_BELOW_LIMIT
    }


# --- topic_snapshots ------------------------------------------------------------------------------
SNAPSHOT_CASES = {
    s.SNAPSHOT_IDS_CANONICAL: (
        [topic_snapshot(), topic_snapshot(topic_name="legacy", topic_id=None)],
        [topic_snapshot(topic_id=STANDARD_BASE64_ID)],
    ),
    s.SNAPSHOT_IDS_NOT_RESERVED: (
        [topic_snapshot()],
        [topic_snapshot(topic_id=ZERO_UUID)],
    ),
    s.SNAPSHOT_IDS_NOT_SHARED: (
        # one ID under one name at each instant; the same name again later is fine, and so is
        # another name at another instant (the query's first step suspects ID_A, its second
        # clears it)
        [topic_snapshot(), topic_snapshot(captured_at=at(2)),
         topic_snapshot(topic_name="orders-copy", captured_at=at(3)),
         topic_snapshot(topic_name="payments", topic_id=ID_B)],
        [topic_snapshot(), topic_snapshot(topic_name="orders-copy")],
    ),
}


def test_shared_id_failure_names_both_names_and_the_id(spark, tl_home, engine):
    """Contract, "Shared IDs": the gate refuses to publish, naming both names and the ID."""
    rows = [topic_snapshot(), topic_snapshot(topic_name="orders-copy")]
    result = validate_frames(spark, {t.TOPIC_SNAPSHOTS: frame_on(engine, spark, t.TOPIC_SNAPSHOTS, rows)},
                             version="v-shared", config=DEFAULT, now=NOW)
    assert not result.success
    assert result.failed_names == [s.SNAPSHOT_IDS_NOT_SHARED]
    text = result.report()
    assert f"topic_id={ID_A}" in text and "topic_name=orders, orders-copy" in text


# The shared-ID query (two steps: suspected IDs, then their snapshots) against a plain reference:
# random histories of a few names and IDs, a name at most once per snapshot (the store refuses a
# snapshot that lists a topic twice). Each history is its own cluster, so one query per engine
# checks them all.
_OBSERVATIONS = st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["orders", "payments", "orders-copy"]),
                                   st.sampled_from([ID_A, ID_B, ID_C, None])), max_size=12)


def _shared_ids(histories: list[list[tuple]]) -> tuple[list[dict], set[tuple]]:
    """The histories as ``topic_snapshots`` rows, and the reference's offending rows: per
    cluster, instant and ID, the names that carried it, where there are two or more."""
    rows, names = [], {}
    for number, history in enumerate(histories):
        seen = set()
        for hour, name, topic_id in history:
            if (hour, name) in seen:
                continue
            seen.add((hour, name))
            rows.append(topic_snapshot(cluster_id=f"history-{number}", captured_at=at(hour),
                                       topic_name=name, topic_id=topic_id))
            if topic_id is not None:
                names.setdefault((f"history-{number}", at(hour), topic_id), set()).add(name)
    shared = {(*key, ", ".join(sorted(carried)), len(carried))
              for key, carried in names.items() if len(carried) > 1}
    return rows, shared


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(histories=st.lists(_OBSERVATIONS, min_size=10, max_size=40))
def test_the_shared_id_query_finds_exactly_the_snapshots_where_two_names_carry_an_id(spark, engine, histories):
    from topic_lineage.quality import custom_expectations as cx

    rows, want = _shared_ids(histories)
    query = cx.ExpectObservedTopicIdsToBeUniquePerSnapshot.__fields__["unexpected_rows_query"].default
    batch = frame_on(engine, spark, t.TOPIC_SNAPSHOTS, rows)
    if engine == SPARK:
        batch.createOrReplaceTempView("shared_id_batch")
        found = spark.sql(query.format(batch="shared_id_batch")).collect()
    else:  # DuckDB over the pandas batch, as the in-process gate runs it
        import duckdb

        connection = duckdb.connect()
        connection.execute("SET TimeZone = 'UTC'")
        connection.register("shared_id_batch", batch)
        found = connection.execute(query.format(batch="shared_id_batch")).fetchall()

    def naive(value):  # both engines' rows: naive UTC
        return value.replace(tzinfo=None) if hasattr(value, "tzinfo") else value

    got = {tuple(naive(v) for v in row) for row in found}
    want = {tuple(naive(v) for v in row) for row in want}
    assert got == want, got ^ want


# --- group_offsets and group_incarnations (consumer lineage, R8-R10) ------------------------------
GROUP_OFFSET_CASES = {
    s.GROUP_OFFSET_ROWS_UNIQUE: (
        # the same group and partition in two snapshots, and two partitions in one
        [group_offset(), group_offset(captured_at=at(1)), group_offset(partition=1)],
        [group_offset(), group_offset(committed_offset=11)],
    ),
    s.GROUP_OFFSETS_NOT_NEGATIVE + "#committed": (
        [group_offset(committed_offset=0, log_end_offset=None)],
        [group_offset(committed_offset=-1)],
    ),
    s.GROUP_OFFSETS_NOT_NEGATIVE + "#log-end": (
        [group_offset(log_end_offset=0)],
        [group_offset(log_end_offset=-1)],
    ),
    s.GROUP_OFFSET_IDS_CANONICAL: (
        [group_offset(), group_offset(group_id="etl", topic_id=None, incarnation_key=None)],
        [group_offset(topic_id=STANDARD_BASE64_ID)],
    ),
    s.UNATTRIBUTED_OFFSETS_HAVE_NO_ID: (
        # attributed by name to an incarnation that never had an ID: a key without an ID is fine
        [group_offset(topic_id=None), group_offset(group_id="etl", topic_id=None, incarnation_key=None)],
        [group_offset(incarnation_key=None)],
    ),
}


GROUP_INCARNATION_CASES = {
    s.GROUP_INCARNATIONS_UNIQUE: (
        [group_incarnation(), group_incarnation(group_id="etl"),
         group_incarnation(incarnation_key="k-orders-2", topic_id=ID_B)],
        [group_incarnation(), group_incarnation(max_committed_offset=11)],
    ),
    s.GROUP_SEEN_IN_ORDER: (
        [group_incarnation(first_seen_at=at(2), last_seen_at=at(2))],
        [group_incarnation(first_seen_at=at(1), last_seen_at=at(2))],
    ),
    s.GROUP_INCARNATION_IDS_CANONICAL: (
        [group_incarnation(topic_id=None)],
        [group_incarnation(topic_id=STANDARD_BASE64_ID)],
    ),
    s.NO_CARRIED_POSITIONS: (
        [group_incarnation(carried_offset=False)],
        [group_incarnation(carried_offset=True, max_committed_offset=1_000_000)],
    ),
}


def test_carried_position_warns_naming_group_topic_and_incarnation_and_passes(spark, tl_home, engine):
    """R9: a carried position is a warning, never a block, and the report names the cluster,
    the group, the topic and the incarnation."""
    rows = [group_incarnation(carried_offset=True, max_committed_offset=1_000_000)]
    result = validate_frames(
        spark, {t.GROUP_INCARNATIONS: frame_on(engine, spark, t.GROUP_INCARNATIONS, rows)},
        version="v-carried", config=DEFAULT, now=NOW,
    )
    assert result.success
    assert result.failed_names == [s.NO_CARRIED_POSITIONS]
    assert [f.severity for f in result.failures] == [s.WARNING]
    text = result.report()
    for part in (f"cluster_id={CLUSTER}", "group_id=billing", "topic_name=orders",
                 f"topic_id={ID_A}", "incarnation_key=k-orders-1"):
        assert part in text


# --- every case of every table ---------------------------------------------------------------------
CASES = {
    t.TOPIC_INCARNATIONS: INCARNATION_CASES,
    t.SNAPSHOT_RUNS: RUN_CASES,
    t.TOPIC_SNAPSHOTS: SNAPSHOT_CASES,
    t.GROUP_OFFSETS: GROUP_OFFSET_CASES,
    t.GROUP_INCARNATIONS: GROUP_INCARNATION_CASES,
}


@pytest.fixture(scope="module")
def verdicts(spark, module_home):
    """``(table, engine) -> failures_by_case(...)``: each table's cases validated once per
    engine, together."""
    done: dict[tuple[str, str], tuple[dict, set, list]] = {}

    def of(table: str, engine: str) -> tuple[dict, set, list]:
        if (table, engine) not in done:
            done[table, engine] = failures_by_case(spark, table, CASES[table], engine)
        return done[table, engine]

    return of


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("table", "case"), [(table, case) for table, cases in CASES.items() for case in cases],
    ids=lambda value: value.replace(" ", "-"),
)
def test_expectation_passes_and_fails(verdicts, table, case, engine):
    """Each invariant of each suite (the gate list on topic_incarnations, snapshot_runs,
    topic_snapshots, and R8/R9 on the group tables): healthy rows pass, a violation fails
    exactly that expectation, on Spark and on pandas."""
    by_case, failed_on_passing_rows, _ = verdicts(table, engine)
    assert failed_on_passing_rows == set()
    assert by_case[case] == {expected_name(case)}


def comparable(outcomes: list) -> list:
    """Outcomes in an engine-independent order: each one's verdict, count and offending rows
    (rows sorted: neither engine promises an order)."""
    return sorted(
        (o.name, o.success, o.unexpected_count, o.severity,
         sorted(repr(sorted(row.items())) for row in o.rows))
        for o in outcomes
    )


@pytest.mark.parametrize("table", list(CASES))
def test_both_engines_give_the_same_verdicts_and_offending_rows(verdicts, table):
    """A small version validated in process (pandas, DuckDB) is judged exactly as with Spark:
    the same expectations pass and fail, with the same counts and the same offending rows,
    value for value (timestamps the same UTC instants, integers integers, NULLs None)."""
    *_, spark_outcomes = verdicts(table, "spark")
    *_, pandas_outcomes = verdicts(table, "pandas")
    assert any(not o.success for o in spark_outcomes)  # the failing cases are compared too
    assert comparable(pandas_outcomes) == comparable(spark_outcomes)


def test_every_expectation_has_a_case():
    """No expectation of any suite is left without a passing and a failing case here."""
    covered = {expected_name(case) for cases in CASES.values() for case in cases}
    every = {name for table in t.TABLES for name in s.expectation_names(table)}
    assert covered == every


def test_failure_report_names_rows_by_cluster_name_and_id(spark, tl_home, engine):
    """A failed gate prints the expectation, then offending rows with cluster, name and ID."""
    rows = [closed(valid_to=at(10)), incarnation(version=2, change_type="reappeared", valid_from=at(5))]
    result = validate_frames(spark, {t.TOPIC_INCARNATIONS: frame_on(engine, spark, t.TOPIC_INCARNATIONS, rows)},
                             version="v-bad", config=DEFAULT, now=NOW)
    text = result.report()
    assert not result.success
    assert "quality gate FAILED for version v-bad" in text
    assert "deleted topic IDs never come back" in text
    assert f"cluster_id={CLUSTER}, topic_name=orders, topic_id={ID_A}, version=2" in text
    assert f"Data Docs: {tl_home / 'quality' / 'index.html'}" in text


# --- severity: correctness blocks, health warns -----------------------------------------------------
def test_stale_live_cluster_and_error_share_warn_but_pass(spark, tl_home, engine):
    """Freshness and the describe-error share are warnings: the gate passes, each is listed once
    in ``warnings`` and the report (one line each), and the gate log records severities."""
    import json

    from topic_lineage.quality import context as qc

    rows = [snapshot_run(captured_at=at(30)),  # 30 h old, captured live
            snapshot_run(cluster_id=OTHER_CLUSTER, captured_at=at(1), topic_count=10, error_topic_count=6)]
    result = validate_frames(spark, {t.SNAPSHOT_RUNS: frame_on(engine, spark, t.SNAPSHOT_RUNS, rows)},
                             version="v-stale", config=DEFAULT, now=NOW)
    assert result.success and result.critical_failures == []
    assert sorted(result.warnings) == sorted(
        [f"{t.SNAPSHOT_RUNS}: {s.NEWEST_SNAPSHOT_FRESH}", f"{t.SNAPSHOT_RUNS}: {s.ERROR_SHARE_BELOW_LIMIT}"]
    )
    report = result.report().splitlines()
    assert report[0].startswith("quality gate PASSED for version v-stale") and "2 warning(s)" in report[0]
    assert len([line for line in report if line.startswith("  ! warning: ")]) == 2
    record = json.loads(qc.gate_log().read_text().splitlines()[-1])
    assert record["success"] is True and sorted(record["warnings"]) == sorted(result.warnings)
    severities = {o["name"]: o["severity"] for o in record["outcomes"]}
    assert severities[s.NEWEST_SNAPSHOT_FRESH] == severities[s.ERROR_SHARE_BELOW_LIMIT] == "warning"
    assert severities[s.SNAPSHOTS_UNIQUE] == "critical"
    page = qc.overview_page().read_text()
    assert "PASSED with warnings" in page and "WARNING" in page


def test_critical_failure_with_a_warning_fails(spark, tl_home, engine):
    """A critical failure fails the gate whatever the warnings; the report lists it as failed
    and the warning on its own line."""
    rows = [snapshot_run(captured_at=at(30)), snapshot_run(captured_at=at(30), topic_count=11)]
    result = validate_frames(spark, {t.SNAPSHOT_RUNS: frame_on(engine, spark, t.SNAPSHOT_RUNS, rows)},
                             version="v-dup", config=DEFAULT, now=NOW)
    assert not result.success
    assert [f.name for f in result.critical_failures] == [s.SNAPSHOTS_UNIQUE]
    assert result.warnings == [f"{t.SNAPSHOT_RUNS}: {s.NEWEST_SNAPSHOT_FRESH}"]
    assert f"  x {t.SNAPSHOT_RUNS}: {s.SNAPSHOTS_UNIQUE}" in result.report()


def test_freshness_does_not_judge_clusters_known_only_from_imports(spark, tl_home, engine):
    """A year of imported history is not stale: freshness applies to clusters captured live.
    A cluster with any live capture is judged on its newest complete snapshot."""
    imported = [snapshot_run(captured_at=at(24 * 365), source="import:kraft-log"),
                snapshot_run(captured_at=at(24 * 300), source="import:jsonl")]
    assert failed(spark, t.SNAPSHOT_RUNS, imported, engine=engine) == set()
    mixed = [*imported, snapshot_run(cluster_id=OTHER_CLUSTER, captured_at=at(30), source="import:jsonl"),
             snapshot_run(cluster_id=OTHER_CLUSTER, captured_at=at(40), source="live", complete=False)]
    result = validate_frames(spark, {t.SNAPSHOT_RUNS: frame_on(engine, spark, t.SNAPSHOT_RUNS, mixed)},
                             version="test", config=DEFAULT, now=NOW)
    (failure,) = result.failures
    assert failure.name == s.NEWEST_SNAPSHOT_FRESH and failure.severity == "warning"
    assert [row[t.CLUSTER_ID] for row in failure.rows] == [OTHER_CLUSTER]


@pytest.mark.parametrize("result_format", ["BOOLEAN_ONLY", "COMPLETE"])
def test_a_verdict_only_validation_counts_offending_rows_without_fetching_them(result_format):
    """The gate's first pass (BOOLEAN_ONLY) runs each row query once, for its count; a
    validation that reports the rows (the failing table's second pass) also fetches them.
    That the verdicts stay right is what every case above checks (they go through both)."""
    from topic_lineage.quality import custom_expectations as cx

    expectation = cx.ExpectDeletedTopicIdsNeverToComeBack()
    metrics = expectation.get_validation_dependencies(
        runtime_configuration={"result_format": result_format}
    ).get_metric_names()
    expected = {"unexpected_rows_query.row_count"}
    if result_format == "COMPLETE":
        expected.add("unexpected_rows_query.table")
    assert set(metrics) == expected
    if result_format == "BOOLEAN_ONLY":  # the count alone is the verdict
        for count, met in ((0, True), (2, False)):
            assert expectation._validate({"unexpected_rows_query.row_count": count},
                                         runtime_configuration={"result_format": result_format}
                                         ) == {"success": met}


def test_instants_are_compared_in_utc_whatever_the_zones(spark, tl_home, engine, monkeypatch):
    """"No snapshot from the future" and freshness at their exact boundaries, with ``now`` given
    in another zone (+02:00) and the Python process in another local zone: the tables' TIMESTAMP
    columns are UTC instants, and so is ``now``, on either engine (a snapshot at ``now`` is not
    from the future, one a microsecond later is; a complete snapshot exactly the maximum age old
    is fresh, one a microsecond older is not)."""
    import time
    from datetime import timezone

    elsewhere = NOW.astimezone(timezone(timedelta(hours=2)))
    tick = timedelta(microseconds=1)

    def names(rows: list[dict]) -> set[str]:
        result = validate_frames(spark, {t.SNAPSHOT_RUNS: frame_on(engine, spark, t.SNAPSHOT_RUNS, rows)},
                                 version="v-zones", config=DEFAULT, now=elsewhere)
        return set(result.failed_names)

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert names([snapshot_run(captured_at=NOW)]) == set()
        assert names([snapshot_run(captured_at=NOW + tick)]) == {s.NO_SNAPSHOT_FROM_THE_FUTURE}
        assert names([snapshot_run(captured_at=at(24))]) == set()
        assert names([snapshot_run(captured_at=at(24) - tick)]) == {s.NEWEST_SNAPSHOT_FRESH}
    finally:
        monkeypatch.undo()
        time.tzset()
