"""Independent Iceberg readers, for checking that what pyiceberg publishes reads the same
elsewhere: Iceberg's Java implementation through Spark 4.1 (``iceberg-spark-runtime``) and
DuckDB 1.5.5's iceberg extension. Both run in ``.venv-iceberg/`` (scripts/install_iceberg_peers.sh),
one subprocess per call (``tests/iceberg_peer_reader.py``; one Spark start reads through several
catalogs with :func:`spark_reads`), so nothing of theirs meets our pyspark 4.2 and duckdb 2.0.

Every reader returns rows as JSON values normalised the same way (:func:`normal_rows` for
pyiceberg's): an instant (``timestamptz``) as ISO text in UTC with ``+00:00`` and microseconds,
a local timestamp (``timestamp``) as ISO text without offset, dates as ISO, decimals as text,
binary as hex. Compare them order-insensitively with :func:`same_rows`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-iceberg"
PYTHON = VENV / "bin" / "python"
SPARK_JARS = VENV / "jars" / "spark"
REST_JARS = VENV / "jars" / "rest-server"  # tests.servers.rest_catalog's default
READER = Path(__file__).resolve().parent / "iceberg_peer_reader.py"
SKIP_ENV = "TOPIC_LINEAGE_NO_ICEBERG_PEERS"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from iceberg_peer_reader import normal

sys.path.pop(0)


class PeerReadError(RuntimeError):
    """An independent reader failed; the message carries its stderr's tail."""


def missing() -> str | None:
    """Why the side venv cannot be used, or None when it is installed."""
    if not PYTHON.exists():
        return f"{PYTHON} is missing: run bash scripts/install_iceberg_peers.sh (scripts/test.sh does)"
    if not any(SPARK_JARS.glob("iceberg-spark-runtime-*.jar")):
        return f"no iceberg-spark-runtime jar in {SPARK_JARS}: run bash scripts/install_iceberg_peers.sh"
    if not any(REST_JARS.glob("iceberg-open-api-*-test-fixtures.jar")):
        return f"no REST catalog server jars in {REST_JARS}: run bash scripts/install_iceberg_peers.sh"
    return None


def require() -> None:
    """For a test that needs the side venv: a failure when it is missing, a skip only when
    TOPIC_LINEAGE_NO_ICEBERG_PEERS=1 says it is deliberately not installed."""
    import pytest

    reason = missing()
    if reason and os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the Iceberg peers' venv deliberately not installed ({reason})")
    assert reason is None, reason


def _env() -> dict[str, str]:
    """Our environment without what would point the side venv's Spark at ours."""
    drop = ("SPARK_", "PYSPARK_", "PYTHON", "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"TZ": "UTC", "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1"})
    return env


def _run(engine: str, request: dict, env: dict | None = None, timeout_s: float = 600) -> dict:
    reason = missing()
    if reason:
        raise PeerReadError(reason)
    done = subprocess.run(
        [str(PYTHON), str(READER), engine], check=False, input=json.dumps(request),
        capture_output=True,
        text=True, env={**_env(), **(env or {})}, timeout=timeout_s, cwd=ROOT,
    )
    if done.returncode != 0:
        raise PeerReadError(
            f"the {engine} Iceberg reader failed ({done.returncode}):\n{done.stderr[-4000:]}"
        )
    return json.loads(done.stdout)


def spark_read(catalog_name: str, catalog_props: dict, reads: list[dict],
               snapshots_of: dict | None = None, env: dict | None = None) -> dict:
    """Several reads in one Spark session (a Spark start costs seconds): ``reads`` are
    ``{"namespace", "table", "snapshot_id"?: int, "ref"?: branch}``; ``snapshots_of``
    (``{"namespace", "table"}``) adds the table's ``snapshots`` (id, parent, operation, summary)
    and ``refs`` ({name: snapshot id}) metadata tables as Spark sees them. ``env`` is added to
    the reader's environment (the AWS credentials, ``PGPASSFILE``: no secret is in the request,
    which Spark's command line would show). Returns
    ``{"engine", "reads": [{"columns", "rows"}], "snapshots"?, "refs"?}``."""
    return spark_reads([{"catalog_name": catalog_name, "catalog": catalog_props, "reads": reads,
                         "snapshots_of": snapshots_of}], env)[0]


def spark_reads(catalogs: list[dict], env: dict | None = None) -> list[dict]:
    """Reads through several catalogs in one Spark session (one Spark start for them all): each
    of ``catalogs`` is ``{"catalog_name", "catalog", "reads", "snapshots_of"?}`` (the arguments
    of :func:`spark_read`; the names distinct). Returns one answer per catalog, in order."""
    jars = sorted(str(p) for p in SPARK_JARS.glob("*.jar"))
    return _run("spark", {"jars": jars, "catalogs": catalogs}, env)["answers"]


def read_with_spark_iceberg(catalog_props: dict, namespace: str, table: str,
                            snapshot_id: int | None = None, *, catalog_name: str = "default",
                            ref: str | None = None) -> list[dict]:
    """The table's rows (at ``snapshot_id`` or branch ``ref``, else main) read by Iceberg's Java
    implementation in Spark 4.1, through the catalog of ``catalog_props`` (pyiceberg's
    properties: a SQL catalog on SQLite, read with Iceberg's JdbcCatalog, or a REST catalog).
    For a SQL catalog ``catalog_name`` must be pyiceberg's catalog name (its rows are keyed by it)."""
    answer = spark_read(catalog_name, catalog_props,
                        [{"namespace": namespace, "table": table, "snapshot_id": snapshot_id,
                          "ref": ref}])
    return answer["reads"][0]["rows"]


def duckdb_read(reads: list[dict], rest: dict | None = None, s3: dict | None = None,
                env: dict | None = None) -> dict:
    """Several reads in one DuckDB: ``{"metadata_location", "snapshot_id"?}`` each through
    ``iceberg_scan``, or with ``rest`` (``{"uri", "warehouse"}``: a REST catalog, attached)
    ``{"namespace", "table", "snapshot_id"?}``. With ``s3`` (``{"endpoint", "region"?}``) the
    files are read from that S3 endpoint with the credentials of ``env`` (``AWS_*``)."""
    return _run("duckdb", {"reads": reads, "rest": rest, "s3": s3}, env)


def read_with_duckdb_iceberg(metadata_location: str, snapshot_id: int | None = None) -> list[dict]:
    """The rows of the table whose metadata file is ``metadata_location`` (``file://`` or a
    path; the current snapshot, or ``snapshot_id``) read by DuckDB's iceberg extension."""
    return duckdb_read([{"metadata_location": metadata_location, "snapshot_id": snapshot_id}])[
        "reads"][0]["rows"]


def normal_rows(rows: list[dict]) -> list[dict]:
    """pyiceberg's (``table.scan(...).to_arrow().to_pylist()``) rows, normalised like the peers'."""
    return [{k: normal(v) for k, v in row.items()} for row in rows]


def same_rows(left: list[dict], right: list[dict]) -> bool:
    """Equal as multisets of rows (order-insensitive, duplicates count)."""
    def key(row: dict) -> str:
        return json.dumps(row, sort_keys=True)

    return Counter(map(key, left)) == Counter(map(key, right))
