"""DuckDB SQL over one version of the published tables: no JVM, read-only.

`topic-lineage query` uses it by default (``--engine duckdb``); the UI loads its tables with the
same :func:`table_select` (topic_lineage/ui/published.py).

The tables have the contract's names and columns (tables.py): ``topic_lineage.<table>``, and the
short names since ``topic_lineage`` is the current schema; timestamps are instants
(``TIMESTAMPTZ``, session time zone UTC). :func:`connect` defines them as views over the version's
Parquet files, then locks the connection down:

- external access is off (``enable_external_access``), except the version's table files
  (``allowed_paths``): a query cannot read (``read_csv('/etc/passwd')``), write (``COPY``),
  attach or glob anything else, nor install or load an extension;
- the configuration is locked (``lock_configuration``), so no statement can undo this.

:func:`check_read_only` refuses, before anything runs, every statement DuckDB's own parser does
not classify as a query: one statement only, a ``SELECT`` (``WITH``, ``VALUES``, ``TABLE``,
``FROM ...``, ``SHOW``, ``DESCRIBE``, ``SUMMARIZE`` are ``SELECT`` to it) or an ``EXPLAIN`` of one.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from topic_lineage import tables as t
from topic_lineage import warehouse as wh

# Spark DDL type (tables.py) -> DuckDB type. Timestamps are instants (UTC), so TIMESTAMPTZ.
_DUCKDB_TYPES = {
    "STRING": "VARCHAR",
    "INT": "INTEGER",
    "BIGINT": "BIGINT",
    "BOOLEAN": "BOOLEAN",
    "TIMESTAMP": "TIMESTAMPTZ",
}

READ_ONLY_HINT = ("queries are read-only (SELECT, WITH, VALUES, SHOW, DESCRIBE, EXPLAIN) and the "
                  "published tables never change")


def duckdb_columns(ddl: str) -> list[tuple[str, str]]:
    """``(name, DuckDB type)`` for every column of a Spark DDL string from tables.py."""
    columns = []
    for part in ddl.split(","):
        name, spark_type = part.split()[:2]
        columns.append((name, _DUCKDB_TYPES[spark_type.upper()]))
    return columns


def table_files(version: str, table: str) -> list[Path]:
    """The Parquet files of one table of one version, as the Iceberg catalog names them
    (:func:`topic_lineage.warehouse.reads.version_files`: ``main`` when it holds the version, else
    the version's audit branch), on the local disk (on object storage: fetched to the working
    copy)."""
    from topic_lineage import storage
    from topic_lineage.warehouse import reads

    return [Path(f) for f in storage.home().local_copies(reads.version_files(version, table))]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def table_select(version: str | None, table: str, files: list[Path] | None = None) -> str:
    """``SELECT`` of one table's contract columns from the version's Parquet files; an empty
    table of those columns when the version (or the table) has no files."""
    columns = duckdb_columns(t.TABLE_DDL[table])
    if files is None:
        files = table_files(version, table) if version is not None else []
    if not files:
        return "SELECT " + ", ".join(f'CAST(NULL AS {kind}) AS "{name}"' for name, kind in columns) + " LIMIT 0"
    select = ", ".join(f'CAST("{name}" AS {kind}) AS "{name}"' for name, kind in columns)
    paths = ", ".join(_literal(str(f)) for f in files)
    return f"SELECT {select} FROM read_parquet([{paths}], union_by_name = true, hive_partitioning = false)"


@contextlib.contextmanager
def connect(version: str) -> Iterator:
    """An in-memory DuckDB connection holding ``version``'s tables as views, locked down (module
    docstring). Pin the version (:func:`topic_lineage.warehouse.reading`) while it is used: the
    views read the files when a query runs."""
    import duckdb

    # Spilling to disk goes to a private directory removed afterwards, never the working directory.
    with tempfile.TemporaryDirectory(prefix="topic-lineage-duckdb-") as spill:
        con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                                  "autoload_known_extensions": False})
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.execute(f"SET temp_directory = {_literal(spill)}")
            con.execute(f"CREATE SCHEMA {t.DATABASE}")
            allowed = []
            for table in t.TABLES:  # read before anything else: a version the catalog lacks stops here
                files = table_files(version, table)
                allowed += [str(f) for f in files]
                con.execute(f"CREATE VIEW {t.DATABASE}.{table} AS {table_select(version, table, files)}")
            con.execute(f"USE {t.DATABASE}")
            con.execute(f"SET allowed_paths = [{', '.join(_literal(p) for p in allowed)}]")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            yield con
        finally:
            con.close()


def _first_words(sql: str, count: int = 2) -> str:
    return " ".join(sql.split()[:count]).upper()


def check_read_only(sql: str) -> None:
    """Refuse ``sql`` unless it is exactly one query, as DuckDB's parser classifies it (module
    docstring); raise :class:`topic_lineage.warehouse.QueryRefused` before anything runs. A
    statement that does not parse raises ``duckdb.ParserException``."""
    import duckdb

    statements = duckdb.extract_statements(sql)
    if len(statements) != 1:
        raise wh.QueryRefused(
            f"query refused: {len(statements)} statements; give exactly one query; {READ_ONLY_HINT}"
        )
    kind = statements[0].type
    if kind == duckdb.StatementType.SELECT:
        return
    if kind == duckdb.StatementType.EXPLAIN and _explains_a_query(sql):
        return
    raise wh.QueryRefused(
        f"query refused: {_first_words(sql)} ({kind.name} statement) is not a query; {READ_ONLY_HINT}"
    )


def _explains_a_query(sql: str) -> bool:
    """Whether an ``EXPLAIN [ANALYZE]`` statement explains one ``SELECT`` (``EXPLAIN ANALYZE``
    runs what it explains: ``EXPLAIN ANALYZE COPY ...`` would write)."""
    import duckdb

    tokens = duckdb.tokenize(sql)  # (offset, type) of each token, by DuckDB's own tokenizer
    words = [sql[start:end].strip().upper()
             for (start, _), (end, _) in zip(tokens, [*tokens[1:], (len(sql), None)])]
    skip = 2 if len(words) > 1 and words[1] in ("ANALYZE", "ANALYSE") else 1
    if len(tokens) <= skip:
        return False
    try:
        inner = duckdb.extract_statements(sql[tokens[skip][0]:])
    except duckdb.Error:
        return False
    return len(inner) == 1 and inner[0].type == duckdb.StatementType.SELECT


def run(version: str, sql: str, on_ready=None) -> tuple[list[str], list[tuple]]:
    """Column names and rows of one read-only query over ``version`` (pinned by the caller).

    Raises :class:`topic_lineage.warehouse.QueryRefused` for anything but a query or for a file
    outside the version, and :class:`topic_lineage.warehouse.WarehouseError` (``query failed:
    ...``, one line) for SQL DuckDB cannot parse, bind or run. ``on_ready`` is called once the
    statement is checked and the tables are defined, just before the query reads the files.
    """
    import duckdb

    try:
        check_read_only(sql)
    except duckdb.Error as exc:  # does not parse
        raise wh.WarehouseError(f"query failed: {_one_line(exc)}") from None
    with connect(version) as con:
        if on_ready is not None:
            on_ready()
        try:
            cursor = con.execute(sql)
            names = [column[0] for column in cursor.description or []]
            return names, cursor.fetchall()
        except duckdb.PermissionException as exc:
            raise wh.QueryRefused(
                f"query refused: {_one_line(exc)}; queries read only the tables of version "
                f"{version} ({', '.join(t.TABLES)})"
            ) from None
        except duckdb.Error as exc:  # catalog, binder, conversion... errors: the user's to fix
            raise wh.WarehouseError(f"query failed: {_one_line(exc)}") from None


def _one_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
