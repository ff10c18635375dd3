"""What makes one pipeline cycle cheap (issue #16, goal 1), and that it changes no result.

- The gate reads of ``topic_snapshots`` only the files an incremental version does not share
  with a base the gate passed with the same suite (``quality.gate.snapshot_scope``); anything
  else (no verdict, another suite, a copied file, ``--all-rows``) reads every row.
- A build or gate over little input runs with ``topic_lineage.spark.SMALL_INPUT_CONF`` (and
  over tiny input with ``INTERPRETED_CONF`` too: ``spark.sized_for``), restoring the session's
  settings afterwards.
"""

from __future__ import annotations

import shutil

import pytest
from scd_support import snap, tid, topic

from topic_lineage import cli, pipeline, store
from topic_lineage import spark as tl_spark
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.errors import TopicLineageError
from topic_lineage.quality import gate
from topic_lineage.quality.suites import SNAPSHOT_IDS_NOT_SHARED
from topic_lineage.scd.build import build_version

X, Y, Z = tid(1), tid(2), tid(3)


def _verdict(version: str) -> dict:
    return wh.read_manifest(version)["gate"]


def _published_base(spark) -> str:
    store.save_all([snap(0, topic("orders", X), topic("payments", Y)),
                    snap(1, topic("orders", X), topic("payments", Y))], "import:jsonl")
    result = pipeline.run_build(spark, gate_options={"max_age": None})
    assert result.published and result.info.mode == "full"
    assert _verdict(result.version)["topic_snapshots_read"] == "all rows"
    assert _verdict(result.version)[gate.SUITE_FINGERPRINT]
    return result.version


# --- the gate's scope ------------------------------------------------------------------------
@pytest.mark.spark
def test_an_incremental_cycle_validates_its_new_observations_only(spark, tl_home, capsys):
    base = _published_base(spark)
    store.save(snap(2, topic("orders", X), topic("payments", Y), topic("refunds", Z)))
    result = pipeline.run_build(spark, gate_options={"max_age": None})

    assert result.published and result.info.mode == "incremental"
    read = _verdict(result.version)["topic_snapshots_read"]
    assert read.startswith("validated the rows of 1 new file(s);") and base in read
    assert result.gate.scope == {t.TOPIC_SNAPSHOTS: read}
    assert f"{t.TOPIC_SNAPSHOTS}: {read}" in result.gate.report()
    # --all-rows (the CLI, as users run it) reads the whole table again
    assert cli.main(["validate", "--all-rows", "--max-age", "off"]) == 0
    assert "validated the rows of" not in capsys.readouterr().out
    assert _verdict(result.version)["topic_snapshots_read"] == "all rows"


@pytest.mark.spark
def test_a_new_shared_id_fails_the_gate_of_an_incremental_build(spark, tl_home):
    """The inherited files are skipped, the new ones are not: a snapshot in which two names
    carry one ID, new in this build, is refused (and the base stays published)."""
    base = _published_base(spark)
    store.save(snap(2, topic("orders", X), topic("payments", Y), topic("orders-copy", X)))
    with pytest.raises(pipeline.ValidationFailed, match=SNAPSHOT_IDS_NOT_SHARED) as failed:
        pipeline.run_build(spark, gate_options={"max_age": None})
    assert X in str(failed.value) and "orders-copy" in str(failed.value)
    assert wh.current_version() == base
    rejected = failed.value.result.version
    assert wh.read_manifest(rejected)["mode"] == "incremental"
    assert "1 new file(s)" in _verdict(rejected)["topic_snapshots_read"]


@pytest.mark.spark
def test_what_makes_the_gate_read_every_row(spark, tl_home):
    base = _published_base(spark)
    store.save(snap(2, topic("orders", X)))
    version = build_version(spark, "v-next").version
    ctx_fingerprint = _verdict(base)[gate.SUITE_FINGERPRINT]
    ours = wh.version_path(version, t.TOPIC_SNAPSHOTS)
    shared = sorted(p for p in ours.glob("*.parquet")
                    if (wh.version_path(base, t.TOPIC_SNAPSHOTS) / p.name).exists())
    assert shared, "the incremental build links the base's files"

    scope = gate.snapshot_scope(version, ctx_fingerprint)
    assert scope is not None and scope.base == base and scope.inherited == len(shared)
    assert [p.name for p in scope.new_files] == sorted(
        p.name for p in ours.glob("*.parquet") if p not in shared)

    # another suite passed the base: nothing inherited
    assert gate.snapshot_scope(version, "another suite") is None
    # a copy is not the file the base validated, even with the same name and bytes
    copy = shared[0].with_suffix(".tmp")
    shutil.copy2(shared[0], copy)
    copy.replace(shared[0])
    scope = gate.snapshot_scope(version, ctx_fingerprint)
    assert scope is None or shared[0] in scope.new_files
    # a base whose verdict did not pass (or has none) passes nothing on
    manifest = wh.read_manifest(base)
    manifest["gate"]["passed"] = False
    wh.write_manifest(base, manifest)
    assert gate.snapshot_scope(version, ctx_fingerprint) is None
    del manifest["gate"]
    wh.write_manifest(base, manifest)
    assert gate.snapshot_scope(version, ctx_fingerprint) is None


# --- small input: the settings -------------------------------------------------------------------
@pytest.mark.spark
def test_tiny_input_runs_interpreted_and_the_session_gets_its_settings_back(spark, monkeypatch):
    """Up to 4 MiB Spark interprets the plan (no whole-stage code generation); above it, or
    with the small-input settings off, it compiles; after the block the session is as before."""
    monkeypatch.delenv(tl_spark.SMALL_INPUT_ENV, raising=False)

    def compiled() -> bool:  # whole-stage code generation marks its operators with "*(n)"
        plan = spark.range(10).selectExpr("id + 1 AS n").filter("n > 3")
        return "*(" in plan._jdf.queryExecution().executedPlan().toString()

    before = {key: spark.conf.get(key, None) for key in tl_spark.INTERPRETED_CONF}
    assert compiled()
    with tl_spark.sized_for(spark, tl_spark.QUICK_JIT_MAX_BYTES) as settings:
        assert settings == {**tl_spark.SMALL_INPUT_CONF, **tl_spark.INTERPRETED_CONF}
        assert not compiled()
    assert compiled()
    assert {key: spark.conf.get(key, None) for key in tl_spark.INTERPRETED_CONF} == before
    with tl_spark.sized_for(spark, tl_spark.QUICK_JIT_MAX_BYTES + 1) as settings:
        assert settings == tl_spark.SMALL_INPUT_CONF and compiled()
    monkeypatch.setenv(tl_spark.SMALL_INPUT_ENV, "0")
    with tl_spark.sized_for(spark, 0) as settings:
        assert settings == {} and compiled()


@pytest.mark.spark
def test_small_input_lists_many_files_without_a_spark_job(spark, tmp_path, monkeypatch):
    """Spark lists more than 32 input paths with a job of its own (a second in a new JVM); with
    the small-input settings the driver lists them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.delenv(tl_spark.SMALL_INPUT_ENV, raising=False)
    paths = []
    for n in range(40):
        pq.write_table(pa.table({"n": [n]}), tmp_path / f"part-{n}.parquet")
        paths.append(str(tmp_path / f"part-{n}.parquet"))
    tracker = spark.sparkContext.statusTracker()

    def listing_jobs(group: str) -> int:
        spark.sparkContext.setJobGroup(group, group)
        try:
            spark.read.schema("n BIGINT").parquet(*paths)  # lists, runs no query
        finally:
            spark.sparkContext.setJobGroup("", "")
        return len(tracker.getJobIdsForGroup(group))

    with tl_spark.sized_for(spark, 1024):
        assert listing_jobs("small-listing") == 0
    assert listing_jobs("session-listing") == 1


def test_small_input_limit_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv(tl_spark.SMALL_INPUT_ENV, raising=False)
    assert tl_spark.small_input_limit() == 64 * 1024 * 1024
    monkeypatch.setenv(tl_spark.SMALL_INPUT_ENV, "0.5")
    assert tl_spark.small_input_limit() == 512 * 1024
    monkeypatch.setenv(tl_spark.SMALL_INPUT_ENV, "lots")
    with pytest.raises(TopicLineageError, match=r"TOPIC_LINEAGE_SMALL_INPUT_MB 'lots'"):
        tl_spark.small_input_limit()
