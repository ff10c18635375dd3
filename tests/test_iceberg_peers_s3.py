"""The published tables read from S3 by the user's own engines (issue #45): the home on a real S3
server (SeaweedFS on loopback) and the SQL catalog on PostgreSQL, two versions imported and built
with the CLI; then every table of the published version, and the first version's
``topic_incarnations`` snapshot, read straight from the bucket by

- DuckDB 1.5.5 with its httpfs and iceberg extensions (``iceberg_scan`` of the metadata file the
  catalog names, an S3 secret for the endpoint, path-style URLs),
- Spark 4.1 with Iceberg's runtime (its JdbcCatalog on the same PostgreSQL database, Iceberg's
  S3FileIO on the endpoint),

equal row for row to ``topic-lineage query``'s rows. Both run in ``.venv-iceberg/``
(tests/iceberg_peers.py) with the credentials in their environment only: the AWS SDK's
variables, and the database's password in a password file (``PGPASSFILE``).

Slow: the history is built by Spark (a driver per build), so the module is out of the fast tier.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import iceberg_peers as peers
import pytest
from object_store_support import run_queries, shared_env
from test_iceberg_published import build_two_versions

from topic_lineage import tables as t

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(1500)]

CATALOG = "shared"  # object_store_support.shared_env's catalog name


@pytest.fixture(scope="module")
def side_venv():
    peers.require()


@pytest.fixture(scope="module")
def published(side_venv, s3_server, _catalog_postgres, tmp_path_factory):
    """Two versions built and published with the home on S3 and the catalog on PostgreSQL:
    ``{"env", "bucket", "versions", "uri", "metadata": {table: location}, "ours": {read: rows}}``."""
    root = tmp_path_factory.mktemp("peers-s3")
    bucket = s3_server.new_bucket("peers-s3")
    uri = _catalog_postgres.database("peers_s3")
    env = shared_env(bucket.env(), bucket.url("home"), uri)
    env.update(HOME=str(root / "user"), TOPIC_LINEAGE_WORK_DIR=str(root / "work"))
    try:
        versions = build_two_versions(root / "local", root, env)
        assert not (root / "local").exists(), "the home is on S3, nothing on the local disk"
        old = versions[0]
        queries = [["--format", "json", f"SELECT * FROM {table}"] for table in t.TABLES]
        queries.append(["--format", "json", "--version", old["version"],
                        f"SELECT * FROM {t.TOPIC_INCARNATIONS}"])
        answers = [our_rows(text) for text in run_queries(env, root, queries)]
        ours = dict(zip([*t.TABLES, "first version"], answers, strict=True))
        yield {"env": env, "bucket": bucket, "versions": versions, "uri": uri,
               "metadata": metadata_locations(uri), "ours": ours, "root": root}
    finally:
        bucket.delete()


def our_rows(printed: str) -> list[dict]:
    """What ``topic-lineage query --format json`` printed, as a user runs it, normalised like
    the peers' rows (its instants are ISO 8601 with ``Z``)."""
    return [{k: peer_value(v) for k, v in row.items()} for row in json.loads(printed)]


def peer_value(value):
    """A cell of our JSON as the peers normalise it: an instant (``...Z``) as ISO text with
    ``+00:00`` and microseconds; anything else as it is."""
    if isinstance(value, str) and value.endswith("Z"):
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
        return parsed.astimezone(dt.UTC).isoformat(timespec="microseconds")
    return value


def metadata_locations(sqlalchemy_uri: str) -> dict[str, str]:
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


def credentials(published: dict) -> dict[str, str]:
    """What the readers' environment gets: the S3 credentials and region, nothing else of ours
    (the endpoint is in their own settings)."""
    env = published["bucket"].env()
    return {k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}


def assert_equal_ours(engine: str, answer: dict, published: dict) -> None:
    """The reads, in order: every table at main, then topic_incarnations at the first version."""
    ours = published["ours"]
    assert list(ours) == [*t.TABLES, "first version"]
    assert all(ours.values()), {label: len(rows) for label, rows in ours.items()}
    assert len(ours[t.TOPIC_INCARNATIONS]) == 3 and len(ours["first version"]) == 2
    for (label, want), read in zip(ours.items(), answer["reads"], strict=True):
        assert peers.same_rows(read["rows"], want), (
            f"{engine}, {label}:\n got  {sorted(map(str, read['rows']))}\n want {sorted(map(str, want))}")


def first_version_snapshot(published: dict) -> int:
    return published["versions"][0]["iceberg_snapshots"][t.TOPIC_INCARNATIONS]


def test_duckdb_reads_every_published_table_from_s3(published):
    """DuckDB's iceberg_scan of each metadata file the catalog names, over httpfs."""
    metadata = published["metadata"]
    assert sorted(metadata) == sorted(t.TABLES)
    for location in metadata.values():
        assert location.startswith(published["bucket"].url("home/warehouse/iceberg/")), location
    reads = [{"metadata_location": metadata[table]} for table in t.TABLES]
    reads.append({"metadata_location": metadata[t.TOPIC_INCARNATIONS],
                  "snapshot_id": first_version_snapshot(published)})
    answer = peers.duckdb_read(reads, s3={"endpoint": published["bucket"].endpoint},
                               env=credentials(published))
    assert answer["engine"] == "duckdb 1.5.5", answer["engine"]
    assert_equal_ours("DuckDB-iceberg", answer, published)


def password_file(uri: str, path: Path) -> Path:
    """A PostgreSQL password file (``host:port:database:user:password``, mode 0600) for the
    catalog's URI: how the JDBC driver gets the password without a command line seeing it."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(uri)
    line = ":".join([parts.hostname, str(parts.port), parts.path.lstrip("/"),
                     unquote(parts.username), unquote(parts.password)])
    path.touch(mode=0o600)
    path.write_text(line + "\n")
    return path


def test_spark_reads_every_published_table_through_the_catalog_from_s3(published):
    """Iceberg's JdbcCatalog on the PostgreSQL database and its S3FileIO on the endpoint."""
    props = {"type": "sql", "uri": published["uri"],
             "warehouse": published["bucket"].url("home/warehouse/iceberg"),
             "s3.endpoint": published["bucket"].endpoint, "s3.path-style-access": "true"}
    env = {**credentials(published),
           "PGPASSFILE": str(password_file(published["uri"], published["root"] / "pgpass"))}
    reads = [{"namespace": t.DATABASE, "table": table} for table in t.TABLES]
    reads.append({"namespace": t.DATABASE, "table": t.TOPIC_INCARNATIONS,
                  "snapshot_id": first_version_snapshot(published)})
    answer = peers.spark_read(CATALOG, props, reads, env=env)
    assert answer["engine"].startswith("spark 4.1"), answer["engine"]
    assert_equal_ours("Spark-Iceberg", answer, published)
