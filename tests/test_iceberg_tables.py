"""The published tables are Iceberg tables; write-audit-publish by branch (contract R7).

A build stages every table as one snapshot on ``audit-<version>`` (summary property
``topic-lineage.version``) without moving ``main``; the gate reads those snapshots; publishing moves
``main`` of each table, ``topic_incarnations`` last. Read back with pyiceberg here; other Iceberg
implementations read the same tables in test_iceberg_peers.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gate_support import pass_gate
from scd_support import snap, tid, topic

from topic_lineage import pipeline, store
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.warehouse import iceberg

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).with_name("topic-lineage")
X, Y, Z = tid(1), tid(2), tid(3)


def main_versions() -> dict[str, str | None]:
    """Table -> the version its ``main`` snapshot holds (read straight from the catalog)."""
    found = {}
    for table in t.TABLES:
        head = iceberg.load_table(table).metadata.snapshot_by_name("main")
        found[table] = head.summary.additional_properties.get(iceberg.VERSION_PROPERTY)
    return found


def iceberg_rows(table: str, snapshot_id: int | None = None) -> list[tuple]:
    """The rows pyiceberg reads from ``main`` (or a snapshot), sorted."""
    tbl = iceberg.load_table(table)
    data = tbl.scan(snapshot_id=snapshot_id).to_arrow()
    return sorted(tuple(row.values()) for row in data.to_pylist())


def duckdb_rows(version: str, table: str) -> list[tuple]:
    from topic_lineage.duckdb_sql import connect

    with connect(version) as con:
        return sorted(con.execute(f"SELECT * FROM {table}").fetchall())


def test_a_build_stages_on_a_branch_and_publishing_moves_main(spark, tl_home):
    """Built and validated: every table has the version on its audit branch and main still
    at the previous version; published: main of every table holds it, each snapshot named by
    its summary property, and what Iceberg readers see is what our reader sees."""
    store.save_all([snap(0, topic("orders", X)), snap(1, topic("orders", Y))], "import:jsonl")
    first = pipeline.run_build(spark, version_id="first")
    assert first.published
    assert main_versions() == dict.fromkeys(t.TABLES, "first")

    store.save(snap(2, topic("orders", Y), topic("payments", Z)))
    second = pipeline.run_build(spark, version_id="second", publish=False)
    assert wh.read_manifest("second")["status"] == wh.VALIDATED
    staged = wh.read_manifest("second")[iceberg.SNAPSHOTS_KEY]
    for table in t.TABLES:
        tbl = iceberg.load_table(table)
        assert tbl.metadata.refs[iceberg.audit_branch("second")].snapshot_id == staged[table]
        summary = tbl.metadata.snapshot_by_id(staged[table]).summary.additional_properties
        assert summary[iceberg.VERSION_PROPERTY] == "second"
    assert main_versions() == dict.fromkeys(t.TABLES, "first")  # audited, not published
    assert wh.current_version() == "first"

    outcome = wh.publish(second.version)
    assert outcome.published and outcome.previous == "first"
    assert main_versions() == dict.fromkeys(t.TABLES, "second")
    for table in t.TABLES:
        assert iceberg_rows(table) == duckdb_rows("second", table), table
    names = {row[5] for row in iceberg_rows(t.TOPIC_INCARNATIONS)}
    assert names == {"orders", "payments"}
    # time travel: the first version's snapshot still reads as it was published
    old = wh.read_manifest("first")[iceberg.SNAPSHOTS_KEY][t.TOPIC_INCARNATIONS]
    assert iceberg_rows(t.TOPIC_INCARNATIONS, old) == duckdb_rows("first", t.TOPIC_INCARNATIONS)


def test_a_failed_gate_leaves_main_untouched(spark, tl_home):
    """R7: the rejected version is on its branch for inspection; main never shows its rows."""
    store.save_all([snap(0, topic("orders", X)), snap(1, topic("payments", Y))], "import:jsonl")
    pipeline.run_build(spark, version_id="good")
    store.save(snap(2, topic("orders", X), topic("payments", Y)))  # a deleted ID comes back (R6)
    with pytest.raises(pipeline.ValidationFailed):
        pipeline.run_build(spark, version_id="bad")
    assert main_versions() == dict.fromkeys(t.TABLES, "good")
    assert all(row[7] != "reappeared" for row in iceberg_rows(t.TOPIC_INCARNATIONS))
    tbl = iceberg.load_table(t.TOPIC_INCARNATIONS)
    bad = tbl.metadata.refs[iceberg.audit_branch("bad")].snapshot_id
    assert any(row[7] == "reappeared" for row in iceberg_rows(t.TOPIC_INCARNATIONS, bad))


def test_rolling_back_moves_main_to_an_earlier_published_snapshot(spark, tl_home):
    """``topic-lineage publish V`` of an earlier version moves main back to that version's own
    snapshot (no copy, no new snapshot), and queries follow."""
    store.save(snap(0, topic("orders", X)))
    pipeline.run_build(spark, version_id="one")
    store.save(snap(1, topic("orders", X), topic("payments", Y)))
    pipeline.run_build(spark, version_id="two")
    snapshots_before = {x: len(iceberg.load_table(x).metadata.snapshots) for x in t.TABLES}

    wh.publish("one")
    assert main_versions() == dict.fromkeys(t.TABLES, "one")
    assert wh.current_version() == "one"
    one = wh.read_manifest("one")[iceberg.SNAPSHOTS_KEY]
    for table in t.TABLES:
        tbl = iceberg.load_table(table)
        assert tbl.metadata.snapshot_by_name("main").snapshot_id == one[table]
        assert len(tbl.metadata.snapshots) == snapshots_before[table]
    assert {row[5] for row in iceberg_rows(t.TOPIC_INCARNATIONS)} == {"orders"}


def test_a_process_that_keeps_its_catalog_follows_the_file_a_restored_backup_puts_in_place(spark, tl_home):
    """The embedded catalog's file replaced while this process holds the catalog (a home
    restored from a backup: a new file under the same name): what it reads and where it writes
    is the new file, not the old one it had open (which read as before the restore, and
    refused writes as a read-only database)."""
    store.save(snap(0, topic("orders", X)))
    pipeline.run_build(spark, version_id="one")
    database = t.warehouse_dir() / iceberg.EMBEDDED_DB
    backup = database.with_name("backup.db")
    backup.write_bytes(database.read_bytes())
    store.save(snap(1, topic("orders", X), topic("payments", Y)))
    pipeline.run_build(spark, version_id="two")
    assert main_versions() == dict.fromkeys(t.TABLES, "two")

    restored = database.with_name("restored.db")
    restored.write_bytes(backup.read_bytes())
    restored.replace(database)
    assert main_versions() == dict.fromkeys(t.TABLES, "one")
    store.save(snap(2, topic("orders", X), topic("payments", Y), topic("refunds", Z)))
    built = pipeline.run_build(spark, version_id="three")
    assert built.published, built
    assert main_versions() == dict.fromkeys(t.TABLES, "three")
    assert wh.current_version() == "three"


def test_retention_expires_old_versions_snapshots_and_branches(spark, tl_home, monkeypatch):
    """Beyond TOPIC_LINEAGE_KEEP_VERSIONS a version goes from the catalog too: its branch and
    its snapshots, and the metadata files only they used; main's is never touched."""
    monkeypatch.setenv(wh.KEEP_ENV, "2")
    for n in range(4):
        store.save(snap(n, topic("orders", X), topic(f"t{n}", tid(10 + n))))
        pipeline.run_build(spark, version_id=f"v{n}", validate=False, publish=False)
        pass_gate(f"v{n}")
        wh.publish(f"v{n}")
    kept = {m["version"] for m in wh.list_versions()}
    assert kept == {"v2", "v3"}
    for table in t.TABLES:
        tbl = iceberg.load_table(table)
        versions = {s.summary.additional_properties.get(iceberg.VERSION_PROPERTY)
                    for s in tbl.metadata.snapshots} - {None}
        assert versions == {"v2", "v3"}, table
        assert not {iceberg.audit_branch(f"v{n}") for n in (0, 1)} & set(tbl.metadata.refs)
    assert main_versions() == dict.fromkeys(t.TABLES, "v3")
    listed = [p for p in (t.warehouse_dir() / "iceberg").rglob("*.avro")]
    referenced = set()
    for table in t.TABLES:
        tbl = iceberg.load_table(table)
        for s in tbl.metadata.snapshots:
            referenced.add(iceberg._local(s.manifest_list))
            referenced.update(iceberg._local(m.manifest_path) for m in s.manifests(tbl.io))
    assert {str(p) for p in listed} == referenced  # no manifest of an expired snapshot is left


def test_a_half_published_version_reads_whole_and_the_next_publish_completes(spark, tl_home):
    """A publish killed after moving some tables' main but not topic_incarnations': our readers
    still read every table at the previous version (the lead table names it); publishing again
    moves the rest."""
    store.save(snap(0, topic("orders", X)))
    pipeline.run_build(spark, version_id="old")
    store.save(snap(1, topic("orders", X), topic("payments", Y)))
    pipeline.run_build(spark, version_id="new", publish=False)
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(tl_home), "TOPIC_LINEAGE_FAULT": "kill@publish"}
    killed = subprocess.run([str(CLI), "publish", "--version", "new"], env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert killed.returncode < 0, killed.stderr[-2000:]
    heads = main_versions()
    assert heads[t.TOPIC_INCARNATIONS] == "old"
    assert {heads[x] for x in t.TABLES if x != t.TOPIC_INCARNATIONS} == {"new"}
    assert wh.current_version() == "old"
    assert iceberg._pyiceberg_published_version() == "old"  # the SQL fast path reads as pyiceberg
    assert duckdb_rows("old", t.SNAPSHOT_RUNS) == duckdb_rows(wh.current_version(), t.SNAPSHOT_RUNS)
    assert len(duckdb_rows(wh.current_version(), t.SNAPSHOT_RUNS)) == 1  # not the new version's two

    assert wh.publish("new").published
    assert main_versions() == dict.fromkeys(t.TABLES, "new")
    assert wh.current_version() == iceberg._pyiceberg_published_version() == "new"


def test_someone_elses_commit_between_load_and_publish_fails_clearly(spark, tl_home, monkeypatch):
    """A table changed by someone else while we publish: the compare-and-swap on main refuses
    our move, the command says so in one line, and the tables read as before; the next publish
    completes."""
    import threading

    store.save(snap(0, topic("orders", X)))
    pipeline.run_build(spark, version_id="old")
    store.save(snap(1, topic("orders", X), topic("payments", Y)))
    pipeline.run_build(spark, version_id="new", publish=False)

    monkeypatch.setenv("TOPIC_LINEAGE_FAULT", "pause@publish")
    errors = []

    def publishing():
        try:
            wh.publish("new")
        except wh.WarehouseError as exc:  # iceberg.CatalogError is one
            errors.append(exc)

    publisher = threading.Thread(target=publishing)
    publisher.start()
    try:
        import time

        deadline = time.monotonic() + 120
        while not (tl_home / "fault-publish.reached").exists():
            assert time.monotonic() < deadline and publisher.is_alive()
            time.sleep(0.05)
        # someone else appends an (empty) snapshot to main of topic_incarnations meanwhile,
        # through a catalog object of their own
        other = iceberg._load_catalog(*iceberg.catalog_properties()[:2])
        theirs = other.load_table((iceberg.NAMESPACE, t.TOPIC_INCARNATIONS))
        with theirs.transaction() as txn, txn.update_snapshot().fast_append():
            pass
    finally:
        (tl_home / "fault-publish.release").touch()
        publisher.join(120)
    monkeypatch.delenv("TOPIC_LINEAGE_FAULT")
    assert len(errors) == 1 and "changed meanwhile" in str(errors[0]), errors
    assert "\n" not in str(errors[0])
    assert wh.current_version() == "old"  # their snapshot sits on ours: ours is still read

    assert wh.publish("new").published
    assert wh.current_version() == "new"


def test_a_home_published_before_iceberg_moves_over_nothing_lost(spark, tl_home):
    """A home as the Parquet-only code left it (versions, CURRENT, no catalog) is read as it
    was; the next build moves the published version into the Iceberg tables with its files as
    they are, removes CURRENT, and publishes its own on top."""
    store.save_all([snap(0, topic("orders", X)), snap(1, topic("orders", Y))], "import:jsonl")
    pipeline.run_build(spark, version_id="legacy")
    rows = duckdb_rows("legacy", t.TOPIC_INCARNATIONS)
    # what the Parquet-only code left: no catalog, no staged snapshots, a CURRENT file
    (t.warehouse_dir() / iceberg.EMBEDDED_DB).unlink()
    import shutil

    shutil.rmtree(t.warehouse_dir() / "iceberg")
    iceberg._catalogs.clear()  # as a new process would: no connection to the removed catalog
    manifest = wh.read_manifest("legacy")
    del manifest[iceberg.SNAPSHOTS_KEY], manifest[iceberg.FILES_KEY]
    wh.write_manifest("legacy", manifest)
    t.current_pointer().write_text("legacy\n")
    files = {p: p.read_bytes() for p in wh.version_dir("legacy").rglob("*.parquet")}

    assert wh.current_version() == "legacy"
    assert duckdb_rows("legacy", t.TOPIC_INCARNATIONS) == rows

    store.save(snap(2, topic("orders", Y), topic("payments", Z)))
    built = pipeline.run_build(spark, version_id="after")
    assert not t.current_pointer().exists()
    legacy = iceberg.version_snapshots("legacy")
    assert iceberg_rows(t.TOPIC_INCARNATIONS, legacy[t.TOPIC_INCARNATIONS]) == rows
    assert wh.read_manifest("after")["mode"] == "incremental"  # continued from the legacy version
    assert built.published and main_versions() == dict.fromkeys(t.TABLES, "after")
    assert {p: p.read_bytes() for p in files} == files  # nothing rewritten


def _cli(home: Path, *args, env: dict | None = None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    full.update({"TOPIC_LINEAGE_HOME": str(home), "TOPIC_LINEAGE_SPARK_MASTER": "local[1]",
                 "PYICEBERG_HOME": str(home), **(env or {})})
    return subprocess.run([str(CLI), *args], env=full, capture_output=True, text=True, timeout=600,
                          check=False)


def test_a_catalog_that_cannot_be_used_is_one_clear_line_and_changes_nothing(tl_home, tmp_path):
    """An unreachable REST catalog, and a catalog name nobody configured: exit non-zero, one
    line naming the catalog, no traceback; the store and the warehouse are as they were."""
    snapshots = tmp_path / "s.jsonl"
    snapshots.write_text(json.dumps({
        "cluster_id": "MkU3OEVBNTcwNTJENDM2Qg", "cluster_alias": "c", "captured_at": "2026-11-01T00:00:00Z",
        "complete": True, "topics": [{"name": "orders", "topic_id": X, "partition_count": 1,
                                      "replication_factor": 1, "is_internal": False, "error": None}]}) + "\n")
    assert _cli(tl_home, "import", str(snapshots)).returncode == 0
    before = sorted(p.relative_to(tl_home) for p in tl_home.rglob("*") if "locks" not in p.parts)

    unreachable = _cli(tl_home, "build", env={
        "TOPIC_LINEAGE_ICEBERG_CATALOG": "prod", "PYICEBERG_CATALOG__PROD__TYPE": "rest",
        "PYICEBERG_CATALOG__PROD__URI": "http://127.0.0.1:9"})
    assert unreachable.returncode != 0
    last = unreachable.stderr.strip().splitlines()[-1]
    assert "Iceberg catalog 'prod'" in last and "127.0.0.1:9" in last, unreachable.stderr[-2000:]
    assert "Traceback" not in unreachable.stderr

    unknown = _cli(tl_home, "query", "SELECT 1", env={"TOPIC_LINEAGE_ICEBERG_CATALOG": "nowhere"})
    assert unknown.returncode != 0
    assert "'nowhere' names an Iceberg catalog that is not configured" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    after = sorted(p.relative_to(tl_home) for p in tl_home.rglob("*") if "locks" not in p.parts)
    assert [p for p in after if p not in before and "versions" not in p.parts] == [], after
    assert wh.current_version() is None
