"""What `topic-lineage build` publishes, read by Iceberg implementations other than ours (issue #44).

The user's path: snapshots (with consumer groups, so every table has rows) imported and built with
the CLI, twice; then every table of the published snapshot read by Iceberg's Java implementation
in Spark 4.1 (one Spark start for both catalogs) and by DuckDB's iceberg extension (both in ``.venv-iceberg/``, tests/iceberg_peers.py),
equal row for row to pyiceberg's read, and the first version's snapshot too. Once through the
embedded SQL catalog, once through a real Iceberg REST catalog server (Iceberg's own,
tests/servers/rest_catalog.py), configured the standard pyiceberg way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import iceberg_peers as peers
import pytest
from scd_support import tid

from tests.group_support import interchange_snapshot
from topic_lineage import tables as t

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLI = Path(sys.executable).with_name("topic-lineage")
CLUSTER = "SWNlYmVyZ1BlZXJzVGVzdA"


@pytest.fixture(scope="module")
def side_venv():
    peers.require()


def snapshot(day: int, topics: dict[str, str], offsets: dict[str, tuple[int, int]]) -> dict:
    return interchange_snapshot(CLUSTER, "peers", day, topics, offsets)


def cli(home: Path, *args: str, env: dict | None = None) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    full.update({"TOPIC_LINEAGE_HOME": str(home), "TOPIC_LINEAGE_SPARK_MASTER": "local[2]",
                 "TOPIC_LINEAGE_MAX_AGE": "off", "PYICEBERG_HOME": str(home), **(env or {})})
    done = subprocess.run([str(CLI), *args], env=full, capture_output=True, text=True,
                          timeout=900, check=False)
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


def pyiceberg_rows(catalog, table: str, snapshot_id: int | None = None) -> list[dict]:
    tbl = catalog.load_table((t.DATABASE, table))
    return peers.normal_rows(tbl.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


def assert_read_alike(catalog, versions: list[dict], spark_answer: dict, duckdb_answer: dict) -> None:
    """Reads in order: every table at main, then topic_incarnations at the first version."""
    old = versions[0]["iceberg_snapshots"][t.TOPIC_INCARNATIONS]
    expected = [pyiceberg_rows(catalog, table) for table in t.TABLES]
    expected.append(pyiceberg_rows(catalog, t.TOPIC_INCARNATIONS, old))
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
def through_rest(side_venv, tmp_path_factory):
    """A home whose catalog is a real Iceberg REST catalog server, configured by
    PYICEBERG_CATALOG__LAKE__* variables and named by TOPIC_LINEAGE_ICEBERG_CATALOG, with two
    versions built: (server, the CLI's environment, home, versions); the server runs until the
    module's reads are done."""
    from tests.servers.rest_catalog import RestCatalogServer

    tmp = tmp_path_factory.mktemp("through-rest")
    with RestCatalogServer(tmp / "rest-warehouse") as server:
        env = {"TOPIC_LINEAGE_ICEBERG_CATALOG": "lake",
               **{f"PYICEBERG_CATALOG__LAKE__{k.upper()}": v
                  for k, v in server.catalog_properties.items()}}
        home = tmp / "home"
        yield server, env, home, build_two_versions(home, tmp, env)


def at_first_version(versions: list[dict]) -> dict:
    old = versions[0]["iceberg_snapshots"][t.TOPIC_INCARNATIONS]
    return {"namespace": t.DATABASE, "table": t.TOPIC_INCARNATIONS, "snapshot_id": old}


@pytest.fixture(scope="module")
def spark_answers(embedded, through_rest):
    """Spark-Iceberg's reads of both homes' tables (every table at main, topic_incarnations at
    the first version), in one Spark start: {catalog name: answer}."""
    _, versions, props = embedded
    server, _, _, rest_versions = through_rest
    answers = peers.spark_reads([
        {"catalog_name": "default", "catalog": props, "reads": [*reads(), at_first_version(versions)]},
        {"catalog_name": "lake", "catalog": server.catalog_properties,
         "reads": [*reads(), at_first_version(rest_versions)]},
    ])
    return dict(zip(("default", "lake"), answers, strict=True))


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
