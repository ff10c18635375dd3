"""Kept files by reference with the home on object storage (issue #45, "hard links to file
references"), on a real S3 server (SeaweedFS on loopback) with the catalog on PostgreSQL, each
step a process on a worker of its own (an empty working copy).

On a local disk a new version shares the files it keeps of its base by hard links. On object
storage it references them instead (``file_references`` in its manifest): an incremental build
uploads only what it derived, the Iceberg snapshot of the version names the base's objects, the
gate knows those files are the base's without the base in its working copy, and retention keeps
the objects a kept version references after their own version goes, until none does (then the
sweep takes them). A version another worker is still building survives a publish here that
removes every version it may (keep 1, no grace), and finishes. Every table of a version that
reads through references to two earlier ones equals a full build of the same snapshots on the
local disk.

The user's own engines read such a version from the bucket (issue #45; tests/iceberg_peers.py,
in ``.venv-iceberg/``): every table of the published version (whose Iceberg snapshot names the
base's objects for the files it keeps) and the base version's ``topic_incarnations`` snapshot,
read by DuckDB 1.5.5 (httpfs and iceberg: ``iceberg_scan`` of the metadata file the catalog names,
an S3 secret for the endpoint) and by Spark 4.1 with Iceberg's runtime (its JdbcCatalog on the
same PostgreSQL database, S3FileIO on the endpoint), equal row for row to ``topic-lineage
query``'s rows. The readers get the credentials in their environment only: the AWS SDK's
variables, and the database's password in a password file (``PGPASSFILE``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import iceberg_peers as peers
import pytest

from tests.object_store_support import (
    HISTORY,
    Worker,
    local_tables,
    query_all,
    run_queries,
    shared_env,
    store_steps,
    wait_for,
)
from topic_lineage import tables as t

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]

VERSIONS = "home/warehouse/versions"

@pytest.fixture
def shared(s3_bucket, iceberg_postgres, tmp_path):
    return shared_env(s3_bucket.env(), s3_bucket.url("home"), iceberg_postgres(tmp_path.name))


def _keys(bucket, version: str) -> set[str]:
    """A version's own objects, by their names in the version (``<table>/<file>``)."""
    prefix = f"{VERSIONS}/{version}/"
    return {k.removeprefix(prefix) for k in bucket.keys(prefix) if not k.endswith("/")}


def _manifest(bucket, version: str) -> dict:
    with bucket.filesystem().open_input_stream(f"{bucket.name}/{VERSIONS}/{version}/manifest.json") as f:
        return json.loads(f.read())


def test_kept_files_are_referenced_not_uploaded_and_outlive_their_version_while_referenced(
        shared, s3_bucket, tmp_path, tmp_path_factory):
    store_steps(Worker(shared, tmp_path / "capture-1").env, HISTORY[0])
    Worker(shared, tmp_path / "build-1").run("build", "--version-id", "v1")
    v1 = _keys(s3_bucket, "v1")

    # only the first cluster has new snapshots: the second one's parts, its saved walk and
    # every topic_snapshots file of v1 are kept
    store_steps(Worker(shared, tmp_path / "capture-2").env, HISTORY[1])
    built = Worker(shared, tmp_path / "build-2").run("build", "--version-id", "v2")
    assert "incremental" in built.stdout + built.stderr, built.stdout + built.stderr
    manifest = _manifest(s3_bucket, "v2")
    kept = manifest["file_references"]
    assert {name for name in v1 if name.startswith("topic_snapshots/")} \
        <= {name for name in kept if name.startswith("topic_snapshots/")}
    kept_tables = {name.split("/")[0] for name in kept}
    assert {"topic_snapshots", "snapshot_runs", "topic_incarnations", "_walk_state"} <= kept_tables, kept
    assert all(stored.startswith("v1/") and stored.removeprefix("v1/") in v1 for stored in kept.values()), kept
    # nothing kept was uploaded again: the version's own objects are what it derived
    own = _keys(s3_bucket, "v2")
    assert not own & set(kept), own & set(kept)
    assert any(name.startswith("topic_incarnations/") for name in own), own
    # its Iceberg snapshot names the base's objects for the kept files
    files = [f for table_files in manifest["iceberg_files"].values() for f in table_files]
    data = {name for name in kept if not name.startswith("_walk_state/")}
    assert {f.split("/versions/", 1)[1] for f in files} >= {kept[name] for name in data}, files
    # the gate, in a working copy without v1, took the kept snapshot files as v1's
    assert "are those of version v1" in built.stdout + built.stderr, built.stdout + built.stderr
    assert json.loads(Worker(shared, tmp_path / "query-2").run(
        "query", "--format", "json", "SELECT count(*) AS n FROM topic_incarnations").stdout)[0]["n"] > 40
    _read_alike_by_peers(shared, s3_bucket, Worker(shared, tmp_path / "peers"), base="v1")

    # v1 and v2 go (keep 1, no grace); what v3 references of them stays, and reads. Meanwhile
    # another worker builds va (a full refresh, paused while writing): only its running build's
    # age protects it, and it survives v3's publish here, then finishes
    store_steps(Worker(shared, tmp_path / "capture-3").env, HISTORY[2])
    there = Worker(shared, tmp_path / "machine-a")
    building = there.start("build", "--full-refresh", "--version-id", "va", TOPIC_LINEAGE_FAULT="pause@write")
    retaining = {**shared, "TOPIC_LINEAGE_KEEP_VERSIONS": "1", "TOPIC_LINEAGE_READER_GRACE": "0"}
    try:
        wait_for(there.reached("write"), building)
        writing = _keys(s3_bucket, "va")
        assert writing
        Worker(retaining, tmp_path / "build-3").run("build", "--version-id", "v3")
        assert writing <= _keys(s3_bucket, "va")
    finally:
        there.release("write")
    assert building.wait(timeout=600) == 0, there.output()[-2000:]
    listed = {m["version"]: m["status"] for m in json.loads(
        Worker(shared, tmp_path / "look").run("versions", "--format", "json").stdout)}
    # va saw the snapshots v3 saw: its tables are the same, so v3 stays published (R5)
    assert listed["v3"] == "published" and listed["va"] == "validated", listed
    v3 = _manifest(s3_bucket, "v3")["file_references"]
    assert {stored.split("/")[0] for stored in v3.values()} == {"v1", "v2"}, v3
    left = {f"v1/{n}" for n in _keys(s3_bucket, "v1")} | {f"v2/{n}" for n in _keys(s3_bucket, "v2")}
    assert left == set(v3.values()), left ^ set(v3.values())  # exactly what v3 references: no manifest
    # v3 reads through references to v1 and to v2: its tables are those of a local full build
    # of the same snapshots (the session's one, ``local_tables``: a version's rows come from
    # its files, wherever they are stored)
    assert query_all(Worker(shared, tmp_path / "query-3")) == local_tables(tmp_path_factory, HISTORY)
    verified = Worker(shared, tmp_path / "verify-3").run("verify")
    assert "version files without a manifest: 0" in verified.stdout, verified.stdout

    # once no version references them, the sweep after the next publish takes them (a full
    # refresh references nothing; it has a snapshot more, else it would not replace v3)
    store_steps(Worker(shared, tmp_path / "capture-4").env, (7, 8, "all"))
    Worker(retaining, tmp_path / "build-4").run("build", "--full-refresh", "--version-id", "v4")
    assert not _keys(s3_bucket, "v1") | _keys(s3_bucket, "v2") | _keys(s3_bucket, "v3")
    print(f"v2 kept {len(kept)} file(s) by reference and uploaded {len(own)} object(s); "
          f"v3 referenced {len(v3)}")


# --- the user's own engines ---------------------------------------------------------------------
CATALOG = "shared"  # object_store_support.shared_env's catalog name


def _read_alike_by_peers(shared: dict, bucket, worker: Worker, *, base: str) -> None:
    """DuckDB and Spark read every table of the published version, and ``base``'s
    ``topic_incarnations`` snapshot, from the bucket: the rows ``topic-lineage query`` gives on
    ``worker``. (Not when the peers' venv is deliberately not installed: ``peers.require``.)"""
    missing = peers.missing()
    if missing and os.environ.get(peers.SKIP_ENV) == "1":
        print(f"\n{peers.SKIP_ENV}=1: the Iceberg peers' reads left out ({missing})")
        return
    assert missing is None, missing
    labels = [*t.TABLES, f"{t.TOPIC_INCARNATIONS} of {base}"]
    queries = [["--format", "json", f"SELECT * FROM {table}"] for table in t.TABLES]
    queries.append(["--format", "json", "--version", base, f"SELECT * FROM {t.TOPIC_INCARNATIONS}"])
    ours = [_our_rows(text) for text in run_queries(worker.env, worker.root, queries)]
    assert all(ours), {label: len(rows) for label, rows in zip(labels, ours, strict=True)}
    snapshot = _manifest(bucket, base)["iceberg_snapshots"][t.TOPIC_INCARNATIONS]
    uri = shared[f"PYICEBERG_CATALOG__{CATALOG.upper()}__URI"]
    credentials = {k: bucket.env()[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}

    # DuckDB: iceberg_scan of each metadata file the catalog names, over httpfs
    metadata = _metadata_locations(uri)
    assert sorted(metadata) == sorted(t.TABLES)
    assert all(where.startswith(bucket.url("home/warehouse/iceberg/")) for where in metadata.values()), metadata
    reads = [{"metadata_location": metadata[table]} for table in t.TABLES]
    reads.append({"metadata_location": metadata[t.TOPIC_INCARNATIONS], "snapshot_id": snapshot})
    duckdb = peers.duckdb_read(reads, s3={"endpoint": bucket.endpoint}, env=credentials)
    assert duckdb["engine"] == "duckdb 1.5.5", duckdb["engine"]

    # Spark: Iceberg's JdbcCatalog on the PostgreSQL database and its S3FileIO on the endpoint
    props = {"type": "sql", "uri": uri, "warehouse": bucket.url("home/warehouse/iceberg"),
             "s3.endpoint": bucket.endpoint, "s3.path-style-access": "true"}
    reads = [{"namespace": t.DATABASE, "table": table} for table in t.TABLES]
    reads.append({"namespace": t.DATABASE, "table": t.TOPIC_INCARNATIONS, "snapshot_id": snapshot})
    pgpass = _password_file(uri, worker.root / "pgpass")
    spark = peers.spark_read(CATALOG, props, reads, env={**credentials, "PGPASSFILE": str(pgpass)})
    assert spark["engine"].startswith("spark 4.1"), spark["engine"]

    for engine, answer in (("DuckDB-iceberg", duckdb), ("Spark-Iceberg", spark)):
        for label, want, read in zip(labels, ours, answer["reads"], strict=True):
            assert peers.same_rows(read["rows"], want), (
                f"{engine}, {label}:\n got  {sorted(map(str, read['rows']))}\n want {sorted(map(str, want))}")


def _our_rows(printed: str) -> list[dict]:
    """What ``topic-lineage query --format json`` printed, normalised like the peers' rows: an
    instant (ISO 8601 with ``Z``) as ISO text with ``+00:00`` and microseconds."""
    def value(cell):
        if isinstance(cell, str) and cell.endswith("Z"):
            try:
                parsed = dt.datetime.fromisoformat(cell)
            except ValueError:
                return cell
            return parsed.astimezone(dt.UTC).isoformat(timespec="microseconds")
        return cell

    return [{k: value(v) for k, v in row.items()} for row in json.loads(printed)]


def _metadata_locations(sqlalchemy_uri: str) -> dict[str, str]:
    """Each table's current metadata file, from the SQL catalog's database (docs/warehouse.md's
    query)."""
    import psycopg2

    conn = psycopg2.connect(sqlalchemy_uri.replace("postgresql+psycopg2://", "postgresql://"))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name, metadata_location FROM iceberg_tables "
                        "WHERE catalog_name = %s AND table_namespace = %s", (CATALOG, t.DATABASE))
            return dict(cur.fetchall())
    finally:
        conn.close()


def _password_file(uri: str, path: Path) -> Path:
    """A PostgreSQL password file (``host:port:database:user:password``, mode 0600) for the
    catalog's URI: how the JDBC driver gets the password without a command line seeing it."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(uri)
    line = ":".join([parts.hostname, str(parts.port), parts.path.lstrip("/"),
                     unquote(parts.username), unquote(parts.password)])
    path.touch(mode=0o600)
    path.write_text(line + "\n")
    return path
