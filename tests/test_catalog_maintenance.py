"""Another engine maintains the published tables in the user's catalog (issue #51, item 3).

The user's path on the default local home (embedded SQL catalog): snapshots imported and built with
the CLI's commands, twice (run in the test's process: tests/cli_in_process.py). Then pyiceberg plays
another engine's maintenance of every table, as Spark's ``rewrite_data_files`` /
``expire_snapshots`` / ``remove_orphan_files`` (or S3 Tables, Glue) do: ``main``'s rows rewritten
into new data files twice (two ``replace`` snapshots that are not ours), every snapshot older than
now expired (branch heads are spared), every file nothing references any more deleted. Then the
query, the UI's tables, the gate, the OpenLineage export, a no-op build: each equal to what the same
home answered before its maintenance; a new snapshot built and published: equal to a reference home
that saw no maintenance (every batch stored, built once). And a foreign commit that changes rows (a
deleted row) is reported by the query, the build and the publish in one line naming its snapshot;
nothing overwrites it or reads past it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from scd_support import tid

from tests import cli_in_process
from tests.group_support import interchange_snapshot
from topic_lineage import tables as t

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLUSTER = "TWFpbnRlbmFuY2VUZXN0MQ"
FOREIGN = {"engine": "another-engine", "job": "rewrite_data_files"}


def snapshot(day: int, topics: dict[str, str], offsets: dict[str, tuple[int, int]]) -> dict:
    return interchange_snapshot(CLUSTER, "maint", day, topics, offsets)


BATCHES = {
    "first": [snapshot(1, {"orders": tid(1), "payments": tid(2)}, {"orders": (4, 10)})],
    "later": [snapshot(2, {"payments": tid(2)}, {}),
              snapshot(3, {"orders": tid(3), "payments": tid(2)}, {"orders": (7, 2)})],
    "newer": [snapshot(4, {"orders": tid(3), "payments": tid(2), "refunds": tid(4)}, {"orders": (9, 12)})],
}


def env_of(home: Path) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    full.update({"TOPIC_LINEAGE_HOME": str(home), "TOPIC_LINEAGE_SPARK_MASTER": "local[2]",
                 "TOPIC_LINEAGE_MAX_AGE": "off", "PYICEBERG_HOME": str(home)})
    return full


def run(home: Path, *args: str) -> subprocess.CompletedProcess:
    """``topic-lineage ARGS`` on ``home``, in this process (tests/cli_in_process.py): what the
    commands do with a maintained catalog is the subject here, not their processes."""
    began = time.monotonic()
    done = cli_in_process.run(env_of(home), *args)
    print(f"{home.name}: topic-lineage {' '.join(args)[:60]}: exit {done.returncode}, "
          f"{time.monotonic() - began:.2f} s")
    return done


def cli(home: Path, *args: str) -> str:
    done = run(home, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def ingest(home: Path, tmp_path: Path, batch: str) -> None:
    path = tmp_path / f"{batch}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in BATCHES[batch]))
    cli(home, "import", str(path))


def catalog(home: Path):
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("default", uri=f"sqlite:///{home / 'warehouse' / 'catalog.db'}",
                      warehouse=(home / "warehouse" / "iceberg").as_uri())


# --- another engine ------------------------------------------------------------------------------
def rewrite_data_files(tbl) -> int | None:
    """What a compaction does: ``main``'s rows, read and written again into one new data file
    in the table's own data folder, committed as one ``replace`` snapshot (the operation Iceberg's
    ``rewrite_data_files`` writes) whose summary is not ours. None for an empty table."""
    import pyarrow.parquet as pq
    from pyiceberg.table import _parquet_files_to_data_files
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    head = tbl.metadata.snapshot_by_name("main")
    old = [entry.data_file for manifest in head.manifests(tbl.io)  # empty files too (a scan skips them)
           for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True)]
    rows = tbl.scan().to_arrow()
    if not rows.num_rows:
        return None
    rows = rows.replace_schema_metadata(None)
    path = f"{tbl.location()}/data/compacted-{uuid.uuid4().hex}.parquet"
    local = path.removeprefix("file://")
    Path(local).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows.cast(rows.schema.remove_metadata()), local)
    new = list(_parquet_files_to_data_files(tbl.metadata, [path], tbl.io))
    class Rewrite(_OverwriteFiles):
        """pyiceberg 0.12 computes totals for append, overwrite and delete only: computed as an
        overwrite, committed as what it is, a ``replace``."""

        def _summary(self, snapshot_properties=None):
            from pyiceberg.table.snapshots import Summary

            summary = super()._summary(snapshot_properties or {})
            return Summary(Operation.REPLACE, **summary.additional_properties)

    with tbl.transaction() as txn:
        rewrite = Rewrite(operation=Operation.OVERWRITE, transaction=txn, io=tbl.io,
                          snapshot_properties=FOREIGN)
        for data_file in old:
            rewrite.delete_data_file(data_file)
        for data_file in new:
            rewrite.append_data_file(data_file)
        rewrite.commit()
    return tbl.metadata.snapshot_by_name("main").snapshot_id


def expire_snapshots(tbl) -> int:
    """Expire every snapshot older than now (the heads of ``main`` and of every branch and tag
    are spared, as Spark's ``expire_snapshots`` spares them)."""
    before = len(tbl.metadata.snapshots)
    tbl.maintenance.expire_snapshots().older_than(datetime.now(UTC) + timedelta(seconds=1)).commit()
    return before - len(tbl.metadata.snapshots)


def referenced_files(tbl) -> set[str]:
    keep = {tbl.metadata_location, *(entry.metadata_file for entry in tbl.metadata.metadata_log)}
    for snapshot in tbl.metadata.snapshots:
        keep.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(tbl.io):
            keep.add(manifest.manifest_path)
            keep.update(entry.data_file.file_path for entry in
                        manifest.fetch_manifest_entry(tbl.io, discard_deleted=True))
    return {k.removeprefix("file://") for k in keep}


def remove_orphan_files(home: Path, tbl, table: str) -> int:
    """Delete every file under the table's location that nothing references any more, and every
    data file of the table under ``versions/`` that no snapshot references (an orphan removal
    pointed at the whole warehouse)."""
    keep = referenced_files(tbl)
    candidates = [p for p in Path(tbl.location().removeprefix("file://")).rglob("*") if p.is_file()]
    candidates += list((home / "warehouse" / "versions").glob(f"*/{table}/*.parquet"))
    gone = [p for p in candidates if str(p) not in keep]
    for path in gone:
        path.unlink()
    return len(gone)


def maintain(home: Path) -> dict:
    """Another engine's maintenance of every published table; what it did, per table."""
    cat = catalog(home)
    done = {}
    for table in t.TABLES:
        tbl = cat.load_table((t.DATABASE, table))
        first, second = rewrite_data_files(tbl), rewrite_data_files(tbl)
        done[table] = {"rewrites": [first, second], "expired": expire_snapshots(tbl),
                       "orphans": remove_orphan_files(home, tbl, table)}
    return done


# --- what users read -----------------------------------------------------------------------------
QUERIES = {table: f"SELECT * FROM {table} ORDER BY ALL" for table in t.TABLES}


def answers(home: Path) -> dict:
    """Every table through ``topic-lineage query``, the OpenLineage events a dry run would send,
    and the UI's tables."""
    commands = [["query", "--format", "json", sql] for sql in QUERIES.values()]
    *tables, emitted = [cli(home, *args) for args in [*commands, ["lineage", "emit", "--dry-run"]]]
    found = {table: json.loads(text) for table, text in zip(QUERIES, tables, strict=True)}
    events = [json.loads(line) for line in emitted.splitlines() if line.startswith("{")]
    found["lineage"] = sorted(json.dumps(_without_times(e), sort_keys=True) for e in events)
    found["ui"] = ui_tables(home)
    return found


def build_newer(maintained: Path, tmp: Path, reference: dict) -> dict:
    """The ``newer`` snapshots stored and built in the maintained home; its answers, asserted
    equal to the reference home's (every batch built there, never maintained)."""
    ingest(maintained, tmp, "newer")
    cli(maintained, "build")
    got = answers(maintained)
    for key, want in reference.items():
        assert got[key] == want, key
    return got


def _without_times(event):
    if isinstance(event, dict):
        return {k: _without_times(v) for k, v in event.items() if k not in ("eventTime", "runId", "producer", "tableVersion")}
    if isinstance(event, list):
        return [_without_times(v) for v in event]
    return event


def ui_tables(home: Path) -> dict:
    """The UI's loaded tables (topic_lineage/ui/published.py) and one search, with the home's
    environment."""
    from topic_lineage.ui import queries
    from topic_lineage.ui.published import PublishedTables

    with cli_in_process.environment(env_of(home)):
        published = PublishedTables().get()
        found = {"counts": published.row_counts, "search": queries.search(published.cursor(), "orders")}
    return json.loads(json.dumps(found, default=str, sort_keys=True))


def gate(home: Path) -> str:
    out = cli(home, "validate")
    return "passed" if "passed" in out.lower() else out


@pytest.fixture(scope="module")
def _published_twice(tmp_path_factory):
    """A home with two published builds (``first``, then ``later``), and a copy of it as it was
    then (the local home's tables name their files by absolute path, so it is restored where it
    was built)."""
    tmp = tmp_path_factory.mktemp("published-twice")
    home = tmp / "maintained"
    for batch in ("first", "later"):
        ingest(home, tmp, batch)
        cli(home, "build")
    shutil.copytree(home, tmp / "as-published", symlinks=True)
    return home, tmp / "as-published", answers(home)


@pytest.fixture
def published_twice(_published_twice) -> Path:
    """The home with two published builds, as they left it, to be maintained; what it answered
    before its maintenance (:func:`before_maintenance`) is its own reference. Built once for the
    module: each test gets it back as it was (a copy of the directory, like a restored backup)."""
    home, as_published, _ = _published_twice
    shutil.rmtree(home)
    shutil.copytree(as_published, home, symlinks=True)
    return home


@pytest.fixture
def before_maintenance(_published_twice) -> dict:
    """What the home with two published builds answers (:func:`answers`), read once for the
    module: the copy each test gets is the same files at the same place."""
    return _published_twice[2]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A home that sees no maintenance: every batch stored, then built once; its answers are
    what a maintained home must answer after its ``newer`` build."""
    tmp = tmp_path_factory.mktemp("maintenance")
    home = tmp / "reference"
    for batch in BATCHES:
        ingest(home, tmp, batch)
    cli(home, "build")
    return home, answers(home)


def test_another_engines_maintenance_changes_nothing_readers_see_nor_the_next_publish(
        reference, published_twice, before_maintenance, tmp_path):
    maintained = published_twice
    want = before_maintenance
    assert want[t.TOPIC_INCARNATIONS] and want["lineage"]
    done = maintain(maintained)
    print("maintenance:", json.dumps(done))
    assert all(d["rewrites"][0] for d in done.values()), "every table has rows to rewrite"
    assert all(d["orphans"] for d in done.values())

    got = answers(maintained)
    for key in want:
        assert got[key] == want[key], key
    assert gate(maintained) == "passed"

    began = time.monotonic()
    noop = cli(maintained, "build")
    print(f"no-op build after maintenance: {time.monotonic() - began:.2f} s")
    assert "nothing new to build" in noop

    # Spark's views and init.sql read main's files too: the compacted ones
    sql = "SELECT * FROM topic_incarnations ORDER BY incarnation_key, version"
    in_spark = json.loads(cli(maintained, "query", "--engine", "spark", "--format", "json", sql))
    assert in_spark == json.loads(cli(maintained, "query", "--format", "json", sql))
    assert sorted(map(json.dumps, in_spark)) == sorted(map(json.dumps, want[t.TOPIC_INCARNATIONS]))
    read = re.findall(r"FROM parquet\.`([^`]*)`", (maintained / "warehouse" / "init.sql").read_text())
    assert read and all(Path(p).is_file() for p in read) and all("/compacted-" in p for p in read), read

    got = build_newer(maintained, tmp_path, reference[1])
    assert {r["topic_name"] for r in got[t.TOPIC_INCARNATIONS]} >= {"refunds"}


def test_a_foreign_commit_that_changes_rows_is_reported_naming_its_snapshot(reference):
    """A foreign delete on ``main``: query, build and publish each exit non-zero with one line
    naming the snapshot; ``main`` stays at the foreign snapshot (never silently overwritten)."""
    from pyiceberg.expressions import EqualTo

    home = reference[0]
    tbl = catalog(home).load_table((t.DATABASE, t.TOPIC_INCARNATIONS))
    sql = "SELECT count(*) AS n FROM topic_incarnations"
    before = json.loads(cli(home, "query", "--format", "json", sql))
    tbl.delete(delete_filter=EqualTo(t.TOPIC_NAME, "payments"), snapshot_properties=FOREIGN)
    foreign = tbl.metadata.snapshot_by_name("main").snapshot_id

    for args in (("query", sql), ("build",),
                 ("validate",), ("lineage", "emit", "--dry-run")):
        done = run(home, *args)
        assert done.returncode != 0, (args, done.stdout)
        lines = [line for line in done.stderr.splitlines() if str(foreign) in line]
        assert len(lines) == 1, (args, done.stderr)
        print(lines[0])
    versions = json.loads(cli(home, "versions", "--format", "json"))
    done = run(home, "publish", versions[-1]["version"])
    assert done.returncode != 0 and str(foreign) in done.stderr, done.stderr
    tbl = catalog(home).load_table((t.DATABASE, t.TOPIC_INCARNATIONS))
    assert tbl.metadata.snapshot_by_name("main").snapshot_id == foreign

    # the one way past it: a user's publish --force, recorded; main then holds ours again
    cli(home, "publish", versions[-1]["version"], "--force", "--reason", "undo their delete")
    assert json.loads(cli(home, "query", "--format", "json", sql)) == before


def test_maintenance_that_also_removes_our_branches_and_files_leaves_the_next_build_right(
        reference, published_twice, before_maintenance, tmp_path):
    """Harsher: the audit branches removed too, so expiry takes our own snapshots and the
    orphan removal our versions' data files. ``main``'s history back to our snapshot is gone:
    the table property names the version; the next build cannot keep the base's files and is a
    full refresh; every answer equals the reference's."""
    maintained = published_twice
    want = before_maintenance
    cat = catalog(maintained)
    for table in t.TABLES:
        tbl = cat.load_table((t.DATABASE, table))
        rewrite_data_files(tbl)
        for branch in [name for name in tbl.metadata.refs if name != "main"]:
            tbl.manage_snapshots().remove_branch(branch).commit()
        expire_snapshots(tbl)
        remove_orphan_files(maintained, tbl, table)
    assert not list((maintained / "warehouse" / "versions").glob(f"*/{t.TOPIC_INCARNATIONS}/*.parquet"))

    got = answers(maintained)
    for key in want:
        assert got[key] == want[key], key
    assert "nothing new to build" in cli(maintained, "build")

    build_newer(maintained, tmp_path, reference[1])
    built = json.loads(cli(maintained, "versions", "--format", "json"))[-1]
    assert built["current"] and built["mode"] != "incremental", built
