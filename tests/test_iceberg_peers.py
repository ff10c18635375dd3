"""Others can read what pyiceberg publishes: independent implementations of Iceberg read a table
published the way topic-lineage publishes (Parquet files written by pyarrow, added with
``add_files`` on a branch, main moved to it with ``set_current_snapshot``, the version in the
snapshot summary) and get pyiceberg's rows exactly, row for row, for main and for an older
snapshot:

- Iceberg's Java implementation, in Spark 4.1 with ``iceberg-spark-runtime`` (through Iceberg's
  JdbcCatalog over pyiceberg's SQL catalog, and through a REST catalog);
- DuckDB 1.5.5's iceberg extension (``iceberg_scan`` of the metadata file, and an attached REST
  catalog);
- a real Iceberg REST catalog server (Iceberg's own, ``tests.servers.rest_catalog``) that
  pyiceberg publishes through.

Then the same on what ``topic-lineage build`` itself publishes (issue #44): snapshots with
consumer groups imported and built with the CLI's commands (in the test's process:
tests/cli_in_process.py), twice; every table of the published snapshot,
and the first version's, read by both peers equal row for row to pyiceberg's read, once through
the embedded SQL catalog and once through the same REST catalog server, configured the standard
pyiceberg way (``PYICEBERG_CATALOG__LAKE__*``). One REST server and one Spark start serve the
module (a start of each costs seconds).

The readers live in ``.venv-iceberg/`` (scripts/install_iceberg_peers.sh; scripts/test.sh
installs it outside --fast). A missing one fails these tests; they are skipped only when it is
missing and ``TOPIC_LINEAGE_NO_ICEBERG_PEERS=1`` says it is deliberately not installed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scd_support import tid

from tests import cli_in_process
from tests import iceberg_peers as peers
from tests.group_support import interchange_snapshot
from tests.iceberg_peer_reader import local_path
from topic_lineage import tables as t

NAMESPACE = "topic_lineage"
TABLE = "peer_check"
BRANCH = "publish"
VERSION_PROPERTY = "topic-lineage.version"
CATALOG_NAME = "peers"  # pyiceberg's SQL catalog keys its rows by it; Spark's catalog takes it

UTC = dt.UTC

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def side_venv():
    """The readers' venv: a failure when it is missing, unless TOPIC_LINEAGE_NO_ICEBERG_PEERS=1."""
    peers.require()


def iceberg_schema():
    """The column types of our tables: string, bool, int32, int64, timestamptz and timestamp
    (microseconds), required and optional."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BooleanType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestampType,
        TimestamptzType,
    )

    return Schema(
        NestedField(1, "topic_name", StringType(), required=True),
        NestedField(2, "topic_id", StringType(), required=False),
        NestedField(3, "is_internal", BooleanType(), required=True),
        NestedField(4, "partition_count", IntegerType(), required=False),
        NestedField(5, "log_end_offset", LongType(), required=False),
        NestedField(6, "valid_from", TimestamptzType(), required=True),
        NestedField(7, "valid_to", TimestamptzType(), required=False),
        NestedField(8, "captured_local", TimestampType(), required=False),
    )


ARROW_SCHEMA = pa.schema([
    pa.field("topic_name", pa.string(), nullable=False),
    pa.field("topic_id", pa.string()),
    pa.field("is_internal", pa.bool_(), nullable=False),
    pa.field("partition_count", pa.int32()),
    pa.field("log_end_offset", pa.int64()),
    pa.field("valid_from", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("valid_to", pa.timestamp("us", tz="UTC")),
    pa.field("captured_local", pa.timestamp("us")),
])


def rows_v1() -> list[dict]:
    t0 = dt.datetime(2026, 11, 1, 0, 0, 0, 1, tzinfo=UTC)
    return [
        {"topic_name": "orders", "topic_id": "b8tRS7h4TJ2Vt43Dp85v2A", "is_internal": False,
         "partition_count": 3, "log_end_offset": 2**62 + 7, "valid_from": t0,
         "valid_to": dt.datetime(2026, 11, 2, 23, 59, 59, 999999, tzinfo=UTC),
         "captured_local": dt.datetime(2026, 11, 1, 1, 0, 0, 123456)},
        {"topic_name": "orders", "topic_id": "306J_pu4Tiybgh3rvq-3HQ", "is_internal": False,
         "partition_count": 3, "log_end_offset": 0,
         "valid_from": dt.datetime(2026, 11, 3, tzinfo=UTC), "valid_to": None,
         "captured_local": None},
        {"topic_name": "__consumer_offsets", "topic_id": None, "is_internal": True,
         "partition_count": -(2**31), "log_end_offset": None,
         "valid_from": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "valid_to": None,
         "captured_local": dt.datetime(1970, 1, 1)},
        {"topic_name": "zürich-ünïcødé ✓", "topic_id": "", "is_internal": False,
         "partition_count": None, "log_end_offset": -1,
         "valid_from": dt.datetime(2099, 12, 31, 12, 0, tzinfo=UTC),
         "valid_to": dt.datetime(2100, 1, 1, tzinfo=UTC),
         "captured_local": dt.datetime(2099, 12, 31, 23, 59, 59, 999999)},
    ]


def rows_v2() -> list[dict]:
    rows = [dict(r) for r in rows_v1()[1:]]
    rows[0]["log_end_offset"] = 42
    rows.append({"topic_name": "shipments", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
                 "is_internal": False, "partition_count": 1, "log_end_offset": 5,
                 "valid_from": dt.datetime(2026, 11, 4, 8, 30, tzinfo=UTC), "valid_to": None,
                 "captured_local": dt.datetime(2026, 11, 4, 9, 30)})
    return rows


def write_data_file(table, rows: list[dict], *, field_ids: bool) -> str:
    """A Parquet file written by pyarrow under the table's data folder; its file:// URI. Without
    ``field_ids`` the file has none and readers map its columns by name (the table's
    ``schema.name-mapping.default``, which add_files sets); with them (pyiceberg's
    ``schema_to_pyarrow``) they are the table's."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    location = table.location()
    assert location.startswith("file://"), location
    data_dir = Path(location[len("file://"):]) / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"{uuid.uuid4()}.parquet"
    schema = schema_to_pyarrow(table.schema()) if field_ids else ARROW_SCHEMA
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    assert (b"PARQUET:field_id" in (pq.read_schema(path).field(0).metadata or {})) == field_ids
    return path.as_uri()


def publish_history(catalog) -> dict:
    """Two published versions the way topic-lineage publishes: the table's first snapshot (an
    empty append on main), a branch from it, each version's files added on the branch (the second
    replacing the first) with the version in the summary, main moved to the branch after each.
    The first version's file has no field IDs, the second's has the table's.
    Returns the snapshot ids and the table."""
    from pyiceberg.expressions import AlwaysTrue

    catalog.create_namespace_if_not_exists(NAMESPACE)
    table = catalog.create_table(f"{NAMESPACE}.{TABLE}", schema=iceberg_schema(),
                                 properties={"format-version": "2"})
    table.append(pa.Table.from_pylist([], schema=ARROW_SCHEMA))
    empty = table.current_snapshot()
    assert empty is not None, "the empty append left main without a snapshot"
    table.manage_snapshots().create_branch(empty.snapshot_id, BRANCH).commit()

    table.add_files([write_data_file(table, rows_v1(), field_ids=False)], branch=BRANCH,
                    snapshot_properties={VERSION_PROPERTY: "1"})
    v1 = table.refresh().metadata.refs[BRANCH].snapshot_id
    assert table.current_snapshot().snapshot_id == empty.snapshot_id, "add_files moved main"
    table.manage_snapshots().set_current_snapshot(ref_name=BRANCH).commit()

    new_file = write_data_file(table, rows_v2(), field_ids=True)
    with table.transaction() as tx:
        tx.delete(AlwaysTrue(), branch=BRANCH, snapshot_properties={VERSION_PROPERTY: "2"})
        tx.add_files([new_file], branch=BRANCH, snapshot_properties={VERSION_PROPERTY: "2"})
    table.refresh()
    v2 = table.metadata.refs[BRANCH].snapshot_id
    assert table.current_snapshot().snapshot_id == v1, "the branch's commit moved main"
    table.manage_snapshots().set_current_snapshot(ref_name=BRANCH).commit()
    table.refresh()
    assert table.current_snapshot().snapshot_id == v2
    return {"table": table, "empty": empty.snapshot_id, "v1": v1, "v2": v2}


def pyiceberg_rows(table, snapshot_id: int) -> list[dict]:
    return peers.normal_rows(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


def expected(rows: list[dict]) -> list[dict]:
    return peers.normal_rows(rows)


def assert_same(label: str, got: list[dict], want: list[dict]) -> None:
    assert peers.same_rows(got, want), (
        f"{label} differs from pyiceberg:\n got  {sorted(map(str, got))}\n want {sorted(map(str, want))}"
    )


def check_spark_answer(answer: dict, history: dict) -> None:
    """Spark's reads: [main, v1, the empty first snapshot], and the snapshots it sees."""
    table = history["table"]
    main, old, empty = (r["rows"] for r in answer["reads"])
    assert_same("Spark-Iceberg, main", main, pyiceberg_rows(table, history["v2"]))
    assert_same("Spark-Iceberg, the older snapshot", old, pyiceberg_rows(table, history["v1"]))
    assert empty == []
    assert dict(answer["reads"][0]["columns"]) == {
        "topic_name": "string", "topic_id": "string", "is_internal": "boolean",
        "partition_count": "int", "log_end_offset": "bigint", "valid_from": "timestamp",
        "valid_to": "timestamp", "captured_local": "timestamp_ntz",
    }
    versions = {s["snapshot_id"]: s["summary"].get(VERSION_PROPERTY) for s in answer["snapshots"]}
    assert versions[history["v1"]] == "1" and versions[history["v2"]] == "2"
    assert answer["refs"] == {"main": history["v2"], BRANCH: history["v2"]}


def check_duckdb_answer(answer: dict, history: dict) -> None:
    """DuckDB's reads: [main, v1]."""
    table = history["table"]
    main, old = (r["rows"] for r in answer["reads"])
    assert_same("DuckDB-iceberg, main", main, pyiceberg_rows(table, history["v2"]))
    assert_same("DuckDB-iceberg, the older snapshot", old, pyiceberg_rows(table, history["v1"]))
    types = dict(answer["reads"][0]["columns"])
    assert types["valid_from"] == "TIMESTAMP WITH TIME ZONE", types
    assert types["captured_local"] == "TIMESTAMP", types


def spark_reads(history: dict) -> list[dict]:
    at = {"namespace": NAMESPACE, "table": TABLE}
    return [dict(at), dict(at, snapshot_id=history["v1"]), dict(at, snapshot_id=history["empty"])]


@pytest.fixture(scope="module")
def sql_published(tmp_path_factory):
    """The history published through pyiceberg's SQL catalog on SQLite, local warehouse."""
    from pyiceberg.catalog.sql import SqlCatalog

    root = tmp_path_factory.mktemp("iceberg-sql")
    catalog = SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{root / 'catalog.db'}",
                         warehouse=(root / "warehouse").as_uri())
    (root / "warehouse").mkdir()
    history = publish_history(catalog)
    return catalog, history


def test_the_lock_pins_readers_that_fit_together():
    """requirements-iceberg.lock: Spark 4.1 (Iceberg's runtime jar is built for it), DuckDB and its
    extension wheels of one version (an extension loads only into its own DuckDB)."""
    pins = dict(
        line.split("==", 1) for line in (peers.ROOT / "requirements-iceberg.lock").read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    )
    assert pins["pyspark"].startswith("4.1.")
    assert {pins[f"duckdb-extension-{e}"] for e in ("iceberg", "avro", "httpfs")} == {pins["duckdb"]}
    pom = (peers.ROOT / "scripts" / "iceberg_peers" / "spark.pom.xml").read_text()
    assert "<artifactId>iceberg-spark-runtime-4.1_2.13</artifactId>" in pom


def test_pyiceberg_reads_what_it_published(sql_published):
    """The reference side: pyiceberg's own rows are the rows written, per snapshot."""
    _, history = sql_published
    table = history["table"]
    assert peers.same_rows(pyiceberg_rows(table, history["v2"]), expected(rows_v2()))
    assert peers.same_rows(pyiceberg_rows(table, history["v1"]), expected(rows_v1()))
    assert pyiceberg_rows(table, history["empty"]) == []
    summary = table.snapshot_by_id(history["v2"]).summary
    assert summary[VERSION_PROPERTY] == "2"
    assert table.properties.get("schema.name-mapping.default"), "add_files sets the name mapping"


@pytest.fixture(scope="module")
def rest_published(side_venv, tmp_path_factory):
    """The history published by pyiceberg through Iceberg's own REST catalog server (over a
    local warehouse); the server runs until the module's reads are done."""
    from pyiceberg.catalog import load_catalog

    from tests.servers.rest_catalog import RestCatalogServer

    with RestCatalogServer(tmp_path_factory.mktemp("iceberg-rest") / "warehouse") as server:
        print(f"REST catalog server started in {server.start_seconds:.1f} s at {server.uri}")
        catalog = load_catalog("rest", **server.catalog_properties)
        yield server, publish_history(catalog)


@pytest.fixture(scope="module")
def spark_answers(side_venv, sql_published, rest_published, embedded, through_rest):
    """Spark-Iceberg's reads, in one Spark start: both histories published by pyiceberg (through
    its SQL catalog and through the REST server), and every table of both homes ``topic-lineage
    build`` published (at main, and topic_incarnations at the first version): {catalog name: answer}."""
    catalog, history = sql_published
    server, rest_history = rest_published
    _, versions, props = embedded
    _, _, _, rest_versions = through_rest
    sql_props = {"type": "sql", "uri": catalog.properties["uri"],
                 "warehouse": catalog.properties["warehouse"]}
    of = {"namespace": NAMESPACE, "table": TABLE}
    names = (CATALOG_NAME, "rest", "default", "lake")
    answers = peers.spark_reads([
        {"catalog_name": CATALOG_NAME, "catalog": sql_props, "reads": spark_reads(history),
         "snapshots_of": of},
        {"catalog_name": "rest", "catalog": server.catalog_properties,
         "reads": spark_reads(rest_history), "snapshots_of": of},
        {"catalog_name": "default", "catalog": props, "reads": [*reads(), at_first_version(versions)]},
        {"catalog_name": "lake", "catalog": server.catalog_properties,
         "reads": [*reads(), at_first_version(rest_versions)]},
    ])
    return dict(zip(names, answers, strict=True))


@pytest.mark.slow
def test_spark_iceberg_reads_pyiceberg_sql_catalog(spark_answers, sql_published):
    """Iceberg's JdbcCatalog in Spark 4.1 finds the tables in pyiceberg's SQLite catalog and reads
    main and an older snapshot exactly as pyiceberg does."""
    _, history = sql_published
    answer = spark_answers[CATALOG_NAME]
    assert answer["engine"].startswith("spark 4.1"), answer["engine"]
    check_spark_answer(answer, history)


@pytest.mark.slow  # another engine reads our tables (a deployment, not a rule): the whole suite
def test_duckdb_iceberg_reads_the_metadata_file(side_venv, sql_published):
    """DuckDB's iceberg extension scans the current metadata file: main and an older snapshot."""
    _, history = sql_published
    location = history["table"].metadata_location
    answer = peers.duckdb_read([{"metadata_location": location},
                                {"metadata_location": location, "snapshot_id": history["v1"]}])
    assert answer["engine"] == "duckdb 1.5.5", answer["engine"]
    check_duckdb_answer(answer, history)


# --- what `topic-lineage build` publishes (issue #44) ------------------------------------------
# The user's path: snapshots (with consumer groups, so every table has rows) imported and built with
# the CLI's commands, twice; then every table of the published snapshot read by both peers (Spark
# 4.1 in the module's one Spark start), equal row for row to pyiceberg's read, and the first
# version's snapshot too. Once through the embedded SQL catalog, once through the module's REST
# catalog server, configured the standard pyiceberg way.
CLUSTER = "SWNlYmVyZ1BlZXJzVGVzdA"


def snapshot(day: int, topics: dict[str, str], offsets: dict[str, tuple[int, int]]) -> dict:
    return interchange_snapshot(CLUSTER, "peers", day, topics, offsets)


def cli(home: Path, *args: str, env: dict | None = None) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    full.update({"TOPIC_LINEAGE_HOME": str(home), "TOPIC_LINEAGE_SPARK_MASTER": "local[2]",
                 "TOPIC_LINEAGE_MAX_AGE": "off", "PYICEBERG_HOME": str(home), **(env or {})})
    done = cli_in_process.run(full, *args)  # what peers read is the subject, not the process
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def build_two_versions(home: Path, tmp_path: Path, env: dict | None = None) -> list[dict]:
    """Import and build day 1, then days 2-3 (orders re-created, billing's position carried):
    returns the two versions' manifests."""
    first = [snapshot(1, {"orders": tid(1), "payments": tid(2)}, {"orders": (4, 10)})]
    later = [snapshot(2, {"payments": tid(2)}, {}),
             snapshot(3, {"orders": tid(3), "payments": tid(2)}, {"orders": (7, 2)})]  # past the new log's end: carried (R9)
    for name, records in (("first", first), ("later", later)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        cli(home, "import", str(path), env=env)
        cli(home, "build", env=env)
    versions = json.loads(cli(home, "versions", "--format", "json", env=env))
    assert [v["status"] for v in versions] == ["published", "published"]
    assert versions[-1]["current"]
    return versions


def catalog_rows(catalog, table: str, snapshot_id: int | None = None) -> list[dict]:
    tbl = catalog.load_table((t.DATABASE, table))
    return peers.normal_rows(tbl.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


def assert_read_alike(catalog, versions: list[dict], spark_answer: dict, duckdb_answer: dict) -> None:
    """Reads in order: every table at main, then topic_incarnations at the first version."""
    old = versions[0]["iceberg_snapshots"][t.TOPIC_INCARNATIONS]
    expected = [catalog_rows(catalog, table) for table in t.TABLES]
    expected.append(catalog_rows(catalog, t.TOPIC_INCARNATIONS, old))
    assert all(expected), "every table has rows"
    assert len(expected[t.TABLES.index(t.TOPIC_INCARNATIONS)]) == 3  # orders twice, payments
    assert any(row["carried_offset"] for row in expected[t.TABLES.index(t.GROUP_INCARNATIONS)])
    for engine, answer in (("Spark-Iceberg", spark_answer), ("DuckDB-iceberg", duckdb_answer)):
        for label, read, want in zip([*t.TABLES, "topic_incarnations (first version)"],
                                     answer["reads"], expected, strict=True):
            assert peers.same_rows(read["rows"], want), f"{engine}, {label}:\n{read['rows']}\n{want}"


def reads() -> list[dict]:
    return [{"namespace": t.DATABASE, "table": table} for table in t.TABLES]


@pytest.fixture(scope="module")
def embedded(side_venv, tmp_path_factory):
    """A home on the embedded SQL catalog with two versions built: (home, versions, the
    catalog's pyiceberg properties)."""
    tmp = tmp_path_factory.mktemp("embedded")
    home = tmp / "home"
    versions = build_two_versions(home, tmp)
    props = {"type": "sql", "uri": f"sqlite:///{home / 'warehouse' / 'catalog.db'}",
             "warehouse": (home / "warehouse" / "iceberg").as_uri()}
    return home, versions, props


@pytest.fixture(scope="module")
def through_rest(side_venv, rest_published, tmp_path_factory):
    """A home whose catalog is a real Iceberg REST catalog server (the module's one, which
    ``rest_published`` also publishes through), configured by PYICEBERG_CATALOG__LAKE__*
    variables and named by TOPIC_LINEAGE_ICEBERG_CATALOG, with two versions built: (server, the
    CLI's environment, home, versions)."""
    server, _ = rest_published
    tmp = tmp_path_factory.mktemp("through-rest")
    env = {"TOPIC_LINEAGE_ICEBERG_CATALOG": "lake",
           **{f"PYICEBERG_CATALOG__LAKE__{k.upper()}": v for k, v in server.catalog_properties.items()}}
    home = tmp / "home"
    return server, env, home, build_two_versions(home, tmp, env)


def at_first_version(versions: list[dict]) -> dict:
    old = versions[0]["iceberg_snapshots"][t.TOPIC_INCARNATIONS]
    return {"namespace": t.DATABASE, "table": t.TOPIC_INCARNATIONS, "snapshot_id": old}


@pytest.mark.spark
@pytest.mark.slow
def test_the_embedded_catalogs_tables_read_alike_in_spark_and_duckdb(embedded, spark_answers):
    from pyiceberg.catalog.sql import SqlCatalog

    _, versions, props = embedded
    catalog = SqlCatalog("default", **props)
    old = versions[0]["iceberg_snapshots"][t.TOPIC_INCARNATIONS]

    def metadata(table):
        return catalog.load_table((t.DATABASE, table)).metadata_location

    duck = peers.duckdb_read([{"metadata_location": metadata(x)} for x in t.TABLES]
                             + [{"metadata_location": metadata(t.TOPIC_INCARNATIONS), "snapshot_id": old}])
    assert_read_alike(catalog, versions, spark_answers["default"], duck)


@pytest.mark.spark
@pytest.mark.slow
def test_built_published_and_read_through_a_rest_catalog_server(through_rest, spark_answers):
    """The catalog configured by PYICEBERG_CATALOG__LAKE__* variables and named by
    TOPIC_LINEAGE_ICEBERG_CATALOG: build, publish (one multi-table commit: the server offers
    transactions), query and both peers through the server."""
    from pyiceberg.catalog import load_catalog

    server, env, home, versions = through_rest
    assert not (home / "warehouse" / "catalog.db").exists()  # the embedded one is not used
    out = cli(home, "query", "--format", "json",
              "SELECT topic_name, topic_id FROM topic_incarnations WHERE is_current", env=env)
    assert sorted((r["topic_name"], r["topic_id"]) for r in json.loads(out)) == [
        ("orders", tid(3)), ("payments", tid(2))]
    catalog = load_catalog("lake", **server.catalog_properties)
    for table in t.TABLES:  # main of every table: the second version
        head = catalog.load_table((t.DATABASE, table)).metadata.snapshot_by_name("main")
        assert head.summary.additional_properties["topic-lineage.version"] == versions[-1]["version"]
    duck = peers.duckdb_read([*reads(), at_first_version(versions)],
                             rest={"uri": server.uri, "warehouse": server.warehouse})
    assert_read_alike(catalog, versions, spark_answers["lake"], duck)


@pytest.mark.slow
def test_published_through_a_rest_catalog_server_reads_the_same(spark_answers, rest_published):
    """pyiceberg publishes through Iceberg's own REST catalog server (over a local warehouse);
    Spark-Iceberg and DuckDB-iceberg read main and an older snapshot through the same server
    (DuckDB also by the metadata file) exactly as pyiceberg does. Stopped, the server leaves
    nothing of its process group."""
    server, history = rest_published
    location = history["table"].metadata_location
    # the server's HadoopFileIO writes file:/..., not file:///...
    assert local_path(location).startswith(str(server.warehouse_dir) + "/"), location

    check_spark_answer(spark_answers["rest"], history)

    at = {"namespace": NAMESPACE, "table": TABLE}
    rest = {"uri": server.uri, "warehouse": server.warehouse}
    check_duckdb_answer(peers.duckdb_read([at, dict(at, snapshot_id=history["v1"])], rest=rest),
                        history)
    check_duckdb_answer(peers.duckdb_read([{"metadata_location": location},
                                           {"metadata_location": location,
                                            "snapshot_id": history["v1"]}]), history)
    server.stop()  # (the fixture's stop is then a no-op)
    assert not server.running
    with pytest.raises(ProcessLookupError):  # nothing of the server's process group is left
        os.killpg(server.pid, 0)


def test_rest_catalog_server_without_its_jars_says_how_to_install(tmp_path, monkeypatch):
    """No server jars: one error naming the install script, and nothing started."""
    from tests.servers.rest_catalog import JARS_ENV, RestCatalogError, RestCatalogServer

    monkeypatch.setenv(JARS_ENV, str(tmp_path / "no-jars"))
    server = RestCatalogServer(tmp_path / "warehouse")
    with pytest.raises(RestCatalogError, match="scripts/install_iceberg_peers.sh"):
        server.start()
    assert server.pid is None and not server.running
