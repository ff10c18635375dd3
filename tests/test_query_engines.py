"""`topic-lineage query` engines (topic_lineage/duckdb_sql.py, topic_lineage/commands/build_cmds.py).

DuckDB (the default, no JVM) and Spark SQL print the same bytes for every cookbook query of
docs/warehouse.md and for whole tables (every contract column type: timestamps ISO 8601 UTC,
booleans, NULL); the DuckDB engine runs one query only and cannot touch a file outside the
version's tables; bad SQL is one `query failed:` line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from gate_support import publish_passed, write_version
from published_tables import at, incarnation, snapshot_run
from scd_support import tid

from topic_lineage import duckdb_sql
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.commands.build_cmds import format_rows, printed_rows

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("topic-lineage")
EU, US = "MkU3OEVBNTcwNTJENDM2Qg", "AAAAAAAAAAAAAAAAAAAAAg"
FORMATS = ("table", "json", "csv")


def cookbook() -> dict[str, str]:
    """Every ```sql block of docs/warehouse.md, labelled by the line that introduces it."""
    page = (ROOT / "docs" / "warehouse.md").read_text()
    blocks = re.findall(r"([^\n]+)\n+```sql\n(.*?)```", page, flags=re.DOTALL)
    return {label.strip().rstrip(":")[:40]: sql.strip().rstrip(";") for label, sql in blocks}


COOKBOOK = cookbook()
WHOLE_TABLES = {table: f"SELECT * FROM topic_lineage.{table}" for table in t.TABLES}


def _publish_sample() -> str:
    """A version with something for every cookbook query: `orders` deleted in November 2026 and
    re-created (twice in one cluster), a partition change, an internal topic, a held snapshot,
    an ID-less topic (NULL IDs), timestamps with and without microseconds, consumer groups on
    deleted and current incarnations (one carried position, one unattributed offset)."""
    micro = timedelta(microseconds=123456)
    rows = (
        incarnation("k-orders-1", EU, [{"name": "orders", "at": at(1), "topic_id": tid(1)}],
                    cluster_alias="prod-eu", deleted_at=at(3))
        + incarnation("k-orders-2", EU, [{"name": "orders", "at": at(4), "topic_id": tid(2)},
                                         {"name": "orders", "at": at(5) + micro, "topic_id": tid(2),
                                          "partitions": 6}],
                      cluster_alias="prod-eu", deleted_at=at(6))
        + incarnation("k-orders-3", EU, [{"name": "orders", "at": at(7), "topic_id": tid(3)}],
                      cluster_alias="prod-eu")
        + incarnation("k-orders-us", US, [{"name": "orders", "at": at(2), "topic_id": tid(4)}],
                      cluster_alias="prod-us")
        + incarnation("k-offsets", US, [{"name": "__consumer_offsets", "at": at(1),
                                         "topic_id": tid(5), "partitions": 50, "internal": True}],
                      cluster_alias="prod-us")
        + incarnation("k-legacy", US, [{"name": "legacy", "at": at(1)}], cluster_alias="prod-us")
    )
    runs = [snapshot_run(EU, at(day), alias="prod-eu", topic_count=1) for day in range(1, 8)]
    runs += [snapshot_run(US, at(day, 12), alias="prod-us", topic_count=3) for day in (1, 2, 9)]
    runs[-1]["held"] = True
    runs.append(snapshot_run(US, at(8) + micro, alias="prod-us", topic_count=2, complete=False))
    snapshots = [
        {"cluster_id": EU, "cluster_alias": "prod-eu", "captured_at": at(1), "complete": True,
         "topic_name": "orders", "topic_id": tid(1), "topic_uuid": None, "partition_count": 3,
         "replication_factor": 3, "is_internal": False, "error": None},
        {"cluster_id": US, "cluster_alias": "prod-us", "captured_at": at(2) + micro,
         "complete": False, "topic_name": "legacy", "topic_id": None, "topic_uuid": None,
         "partition_count": None, "replication_factor": None, "is_internal": None,
         "error": "TOPIC_AUTHORIZATION_FAILED"},
    ]
    # consumer lineage: billing read the first and the current orders (its position carried onto
    # the current one), audit the second, etl the US one; one offset on a name of no incarnation
    def read(group, key, topic_id, first, last, offset, carried, cluster=EU):
        return {"cluster_id": cluster, "group_id": group, "incarnation_key": key,
                "topic_id": topic_id, "topic_name": "orders", "first_seen_at": first,
                "last_seen_at": last, "max_committed_offset": offset, "carried_offset": carried}

    group_incarnations = [
        read("billing", "k-orders-1", tid(1), at(1), at(2), 10, False),
        read("billing", "k-orders-3", tid(3), at(7), at(7), 10, True),
        read("audit", "k-orders-2", tid(2), at(4), at(5) + micro, 3, False),
        read("etl", "k-orders-us", tid(4), at(2, 12), at(9, 12), 7, False, cluster=US),
    ]

    def offset(group, when, key, topic_id, committed, log_end, name="orders", cluster=EU):
        return {"cluster_id": cluster, "captured_at": when, "group_id": group, "topic_name": name,
                "topic_id": topic_id, "incarnation_key": key, "partition": 0,
                "committed_offset": committed, "log_end_offset": log_end}

    group_offsets = [
        offset("billing", at(1), "k-orders-1", tid(1), 8, 12),
        offset("billing", at(2), "k-orders-1", tid(1), 10, 12),
        offset("billing", at(7), "k-orders-3", tid(3), 10, 2),
        offset("audit", at(4), "k-orders-2", tid(2), 1, 3),
        offset("audit", at(5) + micro, "k-orders-2", tid(2), 3, None),
        offset("etl", at(2, 12), "k-orders-us", tid(4), 7, 7, cluster=US),
        offset("etl", at(9, 12), None, None, 0, 0, name="gone", cluster=US),
    ]
    write_version("v-sample", rows, runs, snapshots, group_offsets=group_offsets,
                  group_incarnations=group_incarnations)
    publish_passed("v-sample")
    return "v-sample"


@pytest.fixture(scope="module")
def _sample_home(tmp_path_factory) -> Path:
    """A home with the sample published, once for the module: its tests only read it (and the
    refusals check that nothing in it changed)."""
    home = tmp_path_factory.mktemp("query-sample") / "tl-home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TOPIC_LINEAGE_HOME", str(home))
        _publish_sample()
    return home


@pytest.fixture
def sample_home(_sample_home, monkeypatch) -> Path:
    """The module's sample home, this test's ``TOPIC_LINEAGE_HOME``."""
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(_sample_home))
    return _sample_home


@pytest.fixture
def sample(sample_home) -> str:
    """The published sample version (in :func:`sample_home`)."""
    return "v-sample"


def _unordered(text: str, fmt: str) -> object:
    """The output with its rows as a multiset (for a query without ORDER BY)."""
    if fmt == "json":
        return sorted(json.dumps(row, sort_keys=True) for row in json.loads(text))
    lines = text.splitlines()
    head = 2 if fmt == "table" else 1
    return lines[:head], sorted(lines[head:])


@pytest.mark.spark
def test_cookbook_and_whole_tables_print_the_same_on_both_engines(sample, spark):
    """For every cookbook query (and SELECT * of each table), in every format, the DuckDB
    engine prints exactly what the Spark engine prints (as a multiset of rows where the query
    has no ORDER BY). Each query returns rows on the sample, so the comparison is not vacuous."""
    assert len(COOKBOOK) >= 10, COOKBOOK
    wh.register_tables(spark, sample)
    for label, sql in {**COOKBOOK, **WHOLE_TABLES}.items():
        names, rows = duckdb_sql.run(sample, sql)
        assert rows, (label, "the sample must give this query rows")
        wh.check_read_only(spark, sql)
        printed = printed_rows(spark.sql(sql))  # what render_rows formats, collected once
        for fmt in FORMATS:
            duck = format_rows(names, rows, fmt)
            from_spark = format_rows(*printed, fmt)
            if "ORDER BY" in sql.upper():
                assert duck == from_spark, (label, fmt, duck, from_spark)
            else:
                assert _unordered(duck, fmt) == _unordered(from_spark, fmt), (label, fmt)


def test_every_column_has_the_contract_type(sample):
    """DuckDB's types of the three tables are the contract's (tables.py), timestamps as
    instants; the short and the qualified names are the same tables."""
    for table, ddl in t.TABLE_DDL.items():
        _, rows = duckdb_sql.run(sample, f"DESCRIBE topic_lineage.{table}")
        described = [(row[0], row[1]) for row in rows]
        expected = [(name, {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}.get(kind, kind))
                    for name, kind in duckdb_sql.duckdb_columns(ddl)]
        assert described == expected
        assert duckdb_sql.run(sample, f"SELECT count(*) FROM {table}")[1] == \
            duckdb_sql.run(sample, f"SELECT count(*) FROM topic_lineage.{table}")[1]


def _cli(home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`topic-lineage query` in its own process with no Java: the DuckDB engine needs none."""
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home), "JAVA_HOME": str(home / "no-java"),
           **(env or {})}
    env.pop("TOPIC_LINEAGE_SPARK_REMOTE", None)
    return subprocess.run([str(SCRIPT), "query", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False, cwd=ROOT)


def test_cli_default_engine_is_duckdb_without_a_jvm(sample, sample_home):
    """The default engine answers without Java; timestamps ISO 8601 UTC, booleans, NULL."""
    done = _cli(sample_home, "SELECT topic_name, valid_from, valid_to, is_current, topic_id "
                         "FROM topic_incarnations WHERE incarnation_key = 'k-orders-2' "
                         "ORDER BY version", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {"topic_name": "orders", "valid_from": "2026-11-04T00:00:00Z",
         "valid_to": "2026-11-05T00:00:00.123456Z", "is_current": False, "topic_id": tid(2)},
        {"topic_name": "orders", "valid_from": "2026-11-05T00:00:00.123456Z",
         "valid_to": "2026-11-06T00:00:00Z", "is_current": False, "topic_id": tid(2)},
    ]
    table = _cli(sample_home, "SELECT topic_name, topic_id, is_internal FROM topic_incarnations "
                          "WHERE incarnation_key = 'k-legacy'")
    assert table.stdout.splitlines() == [
        "topic_name  topic_id  is_internal", "----------  --------  -----------",
        "legacy      NULL      false      ", "(1 row)"]


def test_cli_master_needs_the_spark_engine(sample_home):
    done = _cli(sample_home, "SELECT 1", "--engine", "duckdb", "--master", "local[1]")
    assert done.returncode == 2
    assert done.stderr.strip() == ("topic-lineage query: error: --master is a Spark setting: use "
                                   "it with --engine spark")


REFUSED = {
    "INSERT INTO topic_incarnations SELECT * FROM topic_incarnations": "INSERT statement",
    "WITH x AS (SELECT * FROM topic_incarnations) INSERT INTO topic_incarnations SELECT * FROM x":
        "INSERT statement",
    "COPY topic_incarnations TO '{out}'": "COPY statement",
    "COPY (SELECT 1) TO '{table_file}'": "COPY statement",
    "EXPLAIN ANALYZE COPY topic_incarnations TO '{out}'": "EXPLAIN statement",
    "CREATE TABLE copy AS SELECT * FROM topic_incarnations": "CREATE statement",
    "DROP VIEW topic_incarnations": "DROP statement",
    "DELETE FROM topic_incarnations": "DELETE statement",
    "UPDATE topic_incarnations SET version = 0": "UPDATE statement",
    "SET enable_external_access = true": "SET statement",
    "RESET lock_configuration": "SET statement",
    "ATTACH '{out}' AS other": "ATTACH statement",
    "INSTALL httpfs": "LOAD statement",
    "LOAD httpfs": "LOAD statement",
    "PRAGMA disable_checkpoint_on_shutdown": "PRAGMA statement",
    "CALL pragma_version()": "CALL statement",
    "SELECT 1; SELECT 2": "2 statements",
    "SELECT * FROM read_csv('/etc/passwd')": 'Cannot access file "/etc/passwd"',
    "SELECT * FROM read_text('{manifest}')": "Cannot access file",
    "SELECT * FROM glob('/etc/*')": "Cannot access file",
    "SELECT * FROM read_parquet('{version}/**/*.parquet')": "Cannot access file",
}


@pytest.mark.parametrize("statement", list(REFUSED), ids=lambda s: s[:40])
def test_duckdb_engine_refuses_writes_and_other_files(sample, tmp_path, statement):
    """Anything but one query is refused by DuckDB's parser before it runs; a query that reaches
    for a file outside the version's tables (even the version's own manifest) is refused by the
    locked-down connection. Nothing is written, nothing published changes."""
    table_file = duckdb_sql.table_files(sample, t.TOPIC_INCARNATIONS)[0]
    out = tmp_path / "out"
    out.mkdir()
    sql = statement.format(out=out / "out.csv", table_file=table_file,
                           manifest=wh.version_dir(sample) / wh.MANIFEST,
                           version=wh.version_dir(sample))
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest()
              for p in wh.version_dir(sample).rglob("*") if p.is_file() and p.name != wh.MANIFEST}
    with pytest.raises(wh.QueryRefused, match="^query refused: ") as refused:
        duckdb_sql.run(sample, sql)
    message = str(refused.value)
    assert REFUSED[statement] in message and "\n" not in message
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in wh.version_dir(sample).rglob("*") if p.is_file() and p.name != wh.MANIFEST}
    assert after == before and not list(out.iterdir())
    assert wh.current_version() == sample


READS = [
    "SELECT count(*) FROM topic_incarnations",
    "WITH x AS (SELECT topic_name FROM topic_incarnations) SELECT * FROM x",
    "VALUES (1, 'a')",
    "SHOW TABLES",
    "DESCRIBE topic_incarnations",
    "EXPLAIN SELECT * FROM snapshot_runs",
    "EXPLAIN ANALYZE SELECT * FROM snapshot_runs",
    "SELECT count(*) FROM read_parquet('{table_file}')",  # the version's own table files
]


@pytest.mark.parametrize("statement", READS, ids=lambda s: s[:40])
def test_duckdb_engine_reads(sample, statement):
    table_file = duckdb_sql.table_files(sample, t.TOPIC_INCARNATIONS)[0]
    names, rows = duckdb_sql.run(sample, statement.format(table_file=table_file))
    assert names and rows


@pytest.mark.parametrize(("sql", "problem"), [
    ("SELEC 1", 'query failed: Parser Error: syntax error at or near "SELEC"'),
    ("SELECT nope FROM topic_incarnations", 'query failed: Binder Error: Referenced column "nope"'),
    ("SELECT * FROM no_such_table", "query failed: Catalog Error: Table with name no_such_table"),
    ("", "query refused: 0 statements"),
])
def test_cli_bad_sql_is_one_line_naming_the_problem(sample_home, sql, problem):
    done = _cli(sample_home, sql)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"topic-lineage query: error: {problem}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_cli_nothing_published(tl_home):
    done = _cli(tl_home, "SELECT 1")
    assert done.returncode == 2
    assert "nothing is published yet; run 'topic-lineage build' first" in done.stderr
