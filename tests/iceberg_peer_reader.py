"""The reading half of tests/iceberg_peers.py, run by ``.venv-iceberg/bin/python`` (never by the
project's venv: it imports pyspark 4.1 and duckdb 1.5.5, not ours).

    .venv-iceberg/bin/python tests/iceberg_peer_reader.py spark|duckdb < request.json > answer.json

The request is JSON (see ``spark`` and ``duckdb`` below); the answer is JSON on stdout:
``{"reads": [{"columns": [[name, type], ...], "rows": [{...}, ...]}, ...], "snapshots": [...]}``
with every value normalised by :func:`normal` (the same rules as ``tests/iceberg_peers.py``
applies to pyiceberg's rows), so the two sides compare as plain JSON.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sys
from pathlib import Path

UTC = dt.UTC


def normal(value, tz_aware_naive=False):
    """A JSON value for one cell: timestamps as ISO text with microseconds (``+00:00`` for an
    instant, none for a local timestamp), dates as ISO, decimals as text, bytes as hex.
    ``tz_aware_naive``: the value is an instant that the engine handed over as a naive datetime
    in UTC (Spark's ``TimestampType`` with the session and the process in UTC)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None and tz_aware_naive:
            value = value.replace(tzinfo=UTC)
        if value.tzinfo is not None:
            return value.astimezone(UTC).isoformat(timespec="microseconds")
        return value.isoformat(timespec="microseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return value


def local_path(location: str) -> str:
    """The local path of a ``file:`` location: ``file:///x`` (pyiceberg) and ``file:/x`` (what
    Iceberg's Java HadoopFileIO writes, e.g. the REST server's metadata locations) alike."""
    if location.startswith("file://"):
        return location[len("file://"):]
    if location.startswith("file:"):
        return location[len("file:"):]
    return location


# --- Spark with Iceberg's Spark runtime -------------------------------------------------------

def _jdbc_url(uri: str) -> tuple[str, str | None]:
    """Iceberg's JdbcCatalog's ``jdbc:`` URL and user for pyiceberg's SQL catalog URI
    (SQLAlchemy's): ``sqlite:////abs`` or ``postgresql[+driver]://user[:password]@host:port/db``.
    The password stays out: the PostgreSQL driver reads it from the password file (``PGPASSFILE``,
    else ``~/.pgpass``), as psql does, never from Spark's configuration (which spark-submit puts
    on its command line)."""
    from urllib.parse import unquote, urlsplit

    if uri.startswith("sqlite:///"):
        return "jdbc:sqlite:" + uri[len("sqlite:///"):], None  # sqlite:////abs -> /abs
    parts = urlsplit(uri)
    if parts.scheme.split("+")[0] not in ("postgresql", "postgres"):
        raise SystemExit(f"only pyiceberg SQL catalogs on SQLite or PostgreSQL are read here, not {parts.scheme}")
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return f"jdbc:postgresql://{host}{parts.path}", unquote(parts.username) if parts.username else None


def _spark_catalog_conf(name: str, props: dict) -> dict[str, str]:
    """Spark's catalog ``name`` over the pyiceberg catalog whose properties are ``props``; with
    the warehouse on S3, Iceberg's S3FileIO (``s3.*`` properties as pyiceberg's, credentials and
    region from the AWS SDK's usual chain: the environment)."""
    prefix = f"spark.sql.catalog.{name}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog"}
    kind = props.get("type", "rest" if str(props.get("uri", "")).startswith("http") else "sql")
    if kind == "rest":
        conf[f"{prefix}.type"] = "rest"
        conf[f"{prefix}.uri"] = props["uri"]
    elif kind == "sql":
        # pyiceberg's SQL catalog tables (iceberg_tables, iceberg_namespace_properties) are
        # Iceberg's JdbcCatalog schema V0; the JDBC catalog finds its rows by catalog name, so
        # the Spark catalog is named like the pyiceberg catalog.
        url, user = _jdbc_url(props["uri"])
        conf[f"{prefix}.catalog-impl"] = "org.apache.iceberg.jdbc.JdbcCatalog"
        conf[f"{prefix}.uri"] = url
        if user:
            conf[f"{prefix}.jdbc.user"] = user
        conf[f"{prefix}.jdbc.schema-version"] = "V0"
    else:
        raise SystemExit(f"catalog type {kind!r} is not read here (sql on SQLite or PostgreSQL, or rest)")
    if props.get("warehouse"):
        conf[f"{prefix}.warehouse"] = props["warehouse"]
    if str(props.get("warehouse", "")).startswith("s3://") or "s3.endpoint" in props:
        conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
    for key, value in props.items():
        if key.startswith("s3.") and key not in ("s3.access-key-id", "s3.secret-access-key",
                                                 "s3.session-token"):
            conf[f"{prefix}.{key}"] = str(value)
    conf[f"{prefix}.cache-enabled"] = "false"  # each read sees the catalog as it is now
    return conf


def spark(request: dict) -> dict:
    """``{"jars": [...], "catalog_name": str, "catalog": {pyiceberg props}, "reads":
    [{"namespace", "table", "snapshot_id"?, "ref"?}], "snapshots_of": {"namespace", "table"}?}``,
    or ``{"jars": [...], "catalogs": [such requests, their catalog names distinct]}``: one Spark
    session reads through every catalog (``{"answers": [one answer per catalog]}``)."""
    from pyspark.sql import SparkSession

    requests = request.get("catalogs", [request])
    names = [r["catalog_name"] for r in requests]
    if len(set(names)) != len(names):
        raise SystemExit(f"one Spark session takes each catalog name once, not {names}")
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("topic-lineage-iceberg-peer")
        .config("spark.jars", ",".join(request["jars"]))
        .config("spark.sql.extensions",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "1g")
        # a few small tables in a JVM that lives seconds: C1 only and the serial collector
        # (issue #52, 2 cores: a read of the peer tests took 23-27 CPU-seconds with C2 and G1)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    )
    for one in requests:
        for key, value in _spark_catalog_conf(one["catalog_name"], one["catalog"]).items():
            builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        answers = [_spark_answer(session, one) for one in requests]
    finally:
        session.stop()
    return {"answers": answers} if "catalogs" in request else answers[0]


def _spark_answer(session, request: dict) -> dict:
    """One catalog's reads (and ``snapshots_of``) in ``session``."""
    from pyspark.sql import types as T

    name = request["catalog_name"]
    answer = {"engine": f"spark {session.version}", "reads": []}
    for read in request["reads"]:
        ident = f"`{name}`.`{read['namespace']}`.`{read['table']}`"
        # Iceberg 1.12 takes Spark's own time travel (no more `snapshot-id` read option)
        if read.get("snapshot_id") is not None:
            ident_at = f"{ident} VERSION AS OF {int(read['snapshot_id'])}"
        elif read.get("ref"):
            ident_at = f"{ident} VERSION AS OF '{read['ref']}'"
        else:
            ident_at = ident
        frame = session.sql(f"SELECT * FROM {ident_at}")
        instants = {f.name for f in frame.schema.fields if isinstance(f.dataType, T.TimestampType)}
        rows = [
            {k: normal(v, tz_aware_naive=k in instants) for k, v in row.asDict().items()}
            for row in frame.collect()
        ]
        columns = [[f.name, f.dataType.simpleString()] for f in frame.schema.fields]
        answer["reads"].append({"table": ident, "columns": columns, "rows": rows})
    if request.get("snapshots_of"):
        of = request["snapshots_of"]
        frame = session.sql(
            f"SELECT snapshot_id, parent_id, operation, summary "
            f"FROM `{name}`.`{of['namespace']}`.`{of['table']}`.snapshots ORDER BY committed_at"
        )
        answer["snapshots"] = [
            {"snapshot_id": r.snapshot_id, "parent_id": r.parent_id,
             "operation": r.operation, "summary": dict(r.summary or {})}
            for r in frame.collect()
        ]
        refs = session.sql(
            f"SELECT name, type, snapshot_id FROM `{name}`.`{of['namespace']}`.`{of['table']}`.refs"
        )
        answer["refs"] = {r.name: r.snapshot_id for r in refs.collect()}
    return answer


# --- DuckDB with its iceberg extension --------------------------------------------------------

def _load_extensions(con) -> None:
    """Loads the avro, httpfs and iceberg extensions from the wheels' files by path: DuckDB
    neither installs nor downloads anything (autoinstall off, so a missing one fails here)."""
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    import importlib

    for ext in ("avro", "httpfs", "iceberg"):
        module = importlib.import_module(f"duckdb_extension_{ext}")
        found = sorted(Path(module.__file__).parent.glob(f"extensions/*/{ext}.duckdb_extension"))
        if not found:
            raise SystemExit(f"duckdb_extension_{ext} ships no {ext}.duckdb_extension")
        con.execute(f"LOAD '{found[-1]}'")


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _s3_secret(con, s3: dict) -> None:
    """DuckDB's S3 secret (httpfs) for ``{"endpoint": "http://host:port", "region"}``: the
    credentials from this process's environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_SESSION_TOKEN``), never from the request; path-style URLs (an S3-compatible server)."""
    import os
    from urllib.parse import urlsplit

    endpoint = urlsplit(s3["endpoint"])
    options = {
        "KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "SECRET": os.environ["AWS_SECRET_ACCESS_KEY"],
        "REGION": s3.get("region") or os.environ.get("AWS_REGION", "us-east-1"),
        "ENDPOINT": endpoint.netloc,
        "URL_STYLE": "path",
    }
    if os.environ.get("AWS_SESSION_TOKEN"):
        options["SESSION_TOKEN"] = os.environ["AWS_SESSION_TOKEN"]
    settings = ", ".join(f"{k} {_sql_text(v)}" for k, v in options.items())
    use_ssl = "true" if endpoint.scheme == "https" else "false"
    con.execute(f"CREATE SECRET peer_s3 (TYPE s3, {settings}, USE_SSL {use_ssl})")


def duckdb(request: dict) -> dict:
    """``{"reads": [{"metadata_location"?: str, "snapshot_id"?: int}]}`` through
    ``iceberg_scan``, or ``{"rest": {"uri", "warehouse"}, "reads": [{"namespace", "table",
    "snapshot_id"?}]}`` through an attached REST catalog; with ``"s3": {"endpoint", "region"?}``
    the files are read from that S3 endpoint (:func:`_s3_secret`)."""
    import duckdb as ddb

    con = ddb.connect()
    _load_extensions(con)
    con.execute("SET TimeZone = 'UTC'")
    if request.get("s3"):
        _s3_secret(con, request["s3"])
    answer = {"engine": f"duckdb {ddb.__version__}", "reads": []}
    rest = request.get("rest")
    if rest:
        con.execute(  # ATTACH takes no parameters
            f"ATTACH {_sql_text(rest.get('warehouse', ''))} AS peer "
            f"(TYPE iceberg, ENDPOINT {_sql_text(rest['uri'])}, AUTHORIZATION_TYPE 'none')"
        )
    for read in request["reads"]:
        if rest:
            source = f'peer."{read["namespace"]}"."{read["table"]}"'
            if read.get("snapshot_id") is not None:
                source += f" AT (VERSION => {int(read['snapshot_id'])})"
            query, params = f"SELECT * FROM {source}", []
        else:
            location = local_path(read["metadata_location"])
            if read.get("snapshot_id") is not None:
                query = "SELECT * FROM iceberg_scan(?, snapshot_from_id = ?)"
                params = [location, int(read["snapshot_id"])]
            else:
                query, params = "SELECT * FROM iceberg_scan(?)", [location]
        result = con.execute(query, params)
        names = [d[0] for d in result.description]
        types = [str(d[1]) for d in result.description]
        rows = [{k: normal(v) for k, v in zip(names, row)} for row in result.fetchall()]
        answer["reads"].append({"columns": [list(c) for c in zip(names, types)], "rows": rows})
    return answer


if __name__ == "__main__":
    engine = sys.argv[1]
    request = json.load(sys.stdin)
    result = {"spark": spark, "duckdb": duckdb}[engine](request)
    json.dump(result, sys.stdout)
