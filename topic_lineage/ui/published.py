"""The published version of the tables, held in an in-process DuckDB database for the UI.

The page must not start a JVM per request, and must stay fast on large tables. So the data
files of the published version (the Iceberg snapshots ``main`` of the tables holds, as the catalog
names them: :func:`topic_lineage.warehouse.reads.version_files`; the version
:func:`topic_lineage.warehouse.current_version` names) are loaded into DuckDB once per published
version. Every request asks which version is published (for the embedded catalog, one SQLite
row and one metadata file) and reloads only when it is a new one; every table is read at that
version's snapshot, so a request always sees one whole version, never a mix (R7). While it loads, the version
is pinned as a reader (:func:`topic_lineage.warehouse.reading`), so retention after a publish
cannot remove its files half-way; once loaded, the request no longer needs them.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import duckdb

from topic_lineage import duckdb_sql, tables
from topic_lineage.errors import TopicLineageError
from topic_lineage.ui import queries

log = logging.getLogger(__name__)


class PublishedVersionError(TopicLineageError):
    """The pointer names a version whose files are missing or unreadable."""


def current_version() -> str | None:
    """Name of the published version, or ``None`` when nothing has been published yet."""
    from topic_lineage import warehouse

    return warehouse.current_version()


@dataclass(frozen=True)
class Published:
    """One loaded version: its name and a DuckDB connection holding its tables."""

    version: str | None
    connection: duckdb.DuckDBPyConnection
    row_counts: dict[str, int]

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor for one request (DuckDB cursors are per-thread)."""
        return self.connection.cursor()


def load(version: str | None) -> Published:
    """Load every table of ``version`` (or empty tables when ``None``) into a new DuckDB db."""
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    counts = {}
    for table in tables.TABLES:  # the files the catalog names (main of each table holding it)
        # the same table definitions as `topic-lineage query` (topic_lineage/duckdb_sql.py)
        try:
            con.execute(f"CREATE TABLE {table} AS {duckdb_sql.table_select(version, table)}")
        except duckdb.Error as exc:
            raise PublishedVersionError(
                f"cannot read table {table} of published version {version!r}: {exc}"
            ) from exc
        counts[table] = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    for name, select in queries.DERIVED_TABLES.items():
        con.execute(f"CREATE TABLE {name} AS {select}")
    log.info("loaded published version %s: %s", version, counts)
    return Published(version=version, connection=con, row_counts=counts)


class PublishedTables:
    """The currently published version, reloaded when the pointer changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: Published | None = None
        self._home: Path | None = None

    def get(self) -> Published:
        version = current_version()
        home = tables.home()
        loaded = self._loaded
        if loaded is not None and loaded.version == version and self._home == home:
            return loaded
        from topic_lineage import warehouse
        from topic_lineage.faults import fault_point

        with self._lock, warehouse.reading() as version:
            loaded = self._loaded
            if loaded is None or loaded.version != version or self._home != home:
                fault_point("read")  # fault suite: pinned, files not yet read
                loaded = load(version)
                self._loaded, self._home = loaded, home
            return loaded
