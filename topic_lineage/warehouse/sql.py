"""Spark SQL access to a version (read-only views over its Parquet files), the same statements
as ``init.sql`` for ``spark-sql -i``, and the check that refuses a writing statement."""

from __future__ import annotations

from pathlib import Path

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.warehouse.versions import (
    WarehouseError,
    current_version,
    init_sql_path,
    version_dir,
)


class QueryRefused(WarehouseError):
    """A statement that would write (or change the session) was given to a read-only reader."""


_WRITING_PLANS = (
    "org.apache.spark.sql.catalyst.plans.logical.Command",  # DDL, DML, SET, CACHE, ADD JAR, ...
    "org.apache.spark.sql.catalyst.plans.logical.ParsedStatement",  # INSERT INTO ...
    "org.apache.spark.sql.catalyst.plans.logical.InsertIntoDir",  # INSERT OVERWRITE DIRECTORY
)
_READING_COMMANDS = frozenset({
    "ShowTables", "ShowViews", "ShowColumns", "ShowNamespaces", "ShowFunctions",
    "ShowCreateTable", "ShowTableExtended", "DescribeRelation", "DescribeColumn",
    "DescribeNamespace", "DescribeFunction", "ExplainCommand",
})
"""Commands that only describe; every other command is refused."""


def check_read_only(spark, sql: str) -> None:
    """Refuse ``sql`` unless it only reads: parsed (never run) with Spark's own parser, and no
    node of the plan may write. Queries, ``WITH``, ``VALUES``, ``SHOW``, ``DESCRIBE`` and
    ``EXPLAIN`` pass; INSERT, CREATE, DROP, ALTER, TRUNCATE, DELETE, UPDATE, MERGE, SET, CACHE...
    raise :class:`QueryRefused`. A statement that does not parse is left to ``spark.sql`` to
    report.
    """
    if getattr(spark, "_jsparkSession", None) is None:  # Spark Connect: no JVM parser at hand
        _check_read_only_words(sql)
        return
    jvm = spark._jvm
    try:
        plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(sql)
    except Exception:  # noqa: BLE001 - spark.sql reports the parse error in its own words
        return
    if plan.getClass().getSimpleName() in _READING_COMMANDS:
        return
    kinds = [jvm.java.lang.Class.forName(name) for name in _WRITING_PLANS]
    pending = [plan]
    while pending:
        node = pending.pop()
        if any(kind.isInstance(node) for kind in kinds):
            words = sql.split()
            statement = " ".join(words[:2]).upper() if words else ""
            raise QueryRefused(
                f"query refused: {statement!s} ({node.getClass().getSimpleName()}) would write; "
                "queries are read-only (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN) and the published "
                "tables never change"
            )
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))


_READING_WORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "SHOW", "DESCRIBE", "DESC", "EXPLAIN"})


def _check_read_only_words(sql: str) -> None:
    """The conservative check where no parser is reachable: a reading first keyword, and no
    INSERT anywhere (``WITH ... INSERT``)."""
    import re

    words = re.findall(r"[A-Za-z_]+", re.sub(r"'[^']*'|`[^`]*`", " ", sql).upper())
    if not words or words[0] not in _READING_WORDS or "INSERT" in words:
        raise QueryRefused(
            f"query refused: {' '.join(sql.split()[:2]).upper()} is not a read; queries are "
            "read-only (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN) and the published tables never change"
        )


def _view_select(version: str, table: str) -> str:
    """``SELECT`` of one table's contract columns straight from the Parquet files the catalog
    names for the version (:func:`topic_lineage.warehouse.reads.version_files`)."""
    from topic_lineage.warehouse import reads

    columns = []
    for part in t.TABLE_DDL[table].split(","):
        name, kind = part.split()[:2]
        columns.append(f"CAST(`{name}` AS {kind}) AS `{name}`")
    files = reads.version_files(version, table)
    if not files:
        # a version built before the table existed (the consumer-lineage tables): no rows
        empty = [f"CAST(NULL AS {part.split()[1]}) AS `{part.split()[0]}`"
                 for part in t.TABLE_DDL[table].split(",")]
        return f"SELECT {', '.join(empty)} WHERE false"
    return " UNION ALL ".join(f"SELECT {', '.join(columns)} FROM parquet.`{str(f).replace('`', '``')}`"
                              for f in files)


def _table_statements(version: str) -> list[str]:
    statements = [f"CREATE DATABASE IF NOT EXISTS {t.DATABASE}"]
    for table in t.TABLES:
        statements.append(
            f"CREATE OR REPLACE VIEW {t.DATABASE}.{table} AS {_view_select(version, table)}"
        )
    statements.append(f"USE {t.DATABASE}")
    return statements


def register_tables(spark, version: str | None = None) -> str:
    """Register the published (or given) version's tables as read-only views ``topic_lineage.<table>``.

    Needs a session with the in-memory catalog (the default of topic_lineage.spark.get_spark).
    A view cannot be written to (``INSERT INTO`` a view fails); :func:`check_read_only` refuses
    the other writing statements before they run. Pin the version with :func:`reading` for the
    duration of the read so retention cannot remove it meanwhile.
    """
    version = version or current_version()
    if version is None:
        raise WarehouseError("nothing is published yet; run 'topic-lineage build' first")
    version_dir(version)  # validates the name
    for statement in _table_statements(version):
        spark.sql(statement)
    return version


def write_init_sql(version: str, *, only_if_changed: bool = False) -> Path:
    """``warehouse/init.sql``: the statements for ``spark-sql -i`` over ``version`` (read-only
    views over the files the catalog names for it); with ``only_if_changed``, written only when
    it would say something else."""
    path = init_sql_path()
    body = (
        f"-- topic-lineage: published version {version}. Generated at publish; run with\n"
        "--   spark-sql --conf spark.sql.catalogImplementation=in-memory "
        "--conf spark.sql.session.timeZone=UTC -i " + str(path) + "\n"
        "-- The tables are read-only views over the version's immutable Parquet files: never write\n"
        "-- to them or to the files (INSERT into a view fails). A later publish and its retention\n"
        "-- may remove this version's files; re-run this file after a publish.\n"
        + "".join(statement + ";\n" for statement in _table_statements(version))
    )
    if only_if_changed and path.is_file() and path.read_text() == body:
        return path
    storage.home().write_bytes(path, body)
    return path
