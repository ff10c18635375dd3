"""The published tables as Apache Iceberg tables: the catalog, write-audit-publish by branch.

Every table of :data:`topic_lineage.tables.TABLES` is an Iceberg table (format v2) in namespace
``topic_lineage`` of one catalog, configured the standard pyiceberg way (``.pyiceberg.yaml`` or
``PYICEBERG_CATALOG__<NAME>__*`` variables); ``TOPIC_LINEAGE_ICEBERG_CATALOG`` names it (default:
pyiceberg's default catalog, ``default``). When that catalog is not configured, the embedded
default needs no setup: a SQL catalog in ``$TOPIC_LINEAGE_HOME/warehouse/catalog.db``, its
metadata under ``$TOPIC_LINEAGE_HOME/warehouse/iceberg``.

A build's walk tasks write Parquet files into the version's directory; :func:`stage` adds them
as data files (by reference: nothing is rewritten) in one snapshot per table on the version's
audit branch ``audit-<version>``, each with summary property ``topic-lineage.version``, without
moving ``main``. The gate reads exactly those snapshots' files; :func:`publish_main` then moves
``main`` of each table to them, each move a compare-and-swap on ``main`` (the catalog refuses it
when ``main`` moved meanwhile). A catalog without multi-table commits publishes table by table,
``topic_incarnations`` last: it names the published version, and our readers read every table
at that version's snapshots, so they never see a mix.

Other engines may maintain the tables in the user's catalog. :func:`main_holds` says which
version's rows ``main`` holds when it is at another engine's compaction (a ``replace``) of our
snapshot, even once the history between them is expired (the table property
:data:`PUBLISHED_PROPERTY`, set by the commit that moved ``main``), and raises
:class:`ForeignCommitError` naming a foreign commit that changes rows. Readers take a ref's files
from :func:`snapshot_files` (through :mod:`topic_lineage.warehouse.reads`), kept by snapshot ID.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError, WarehouseError
from topic_lineage.faults import fault_point
from topic_lineage.location import LocationError

log = logging.getLogger("topic_lineage.warehouse")
# pyiceberg warns for every column of a file without statistics (our empty tables' files)
logging.getLogger("pyiceberg.io.pyarrow").setLevel(logging.ERROR)

NAMESPACE = t.DATABASE
VERSION_PROPERTY = "topic-lineage.version"
"""Snapshot summary property: the build version a snapshot holds."""
CATALOG_ENV = "TOPIC_LINEAGE_ICEBERG_CATALOG"
MAIN = "main"
LEAD_TABLE = t.TOPIC_INCARNATIONS
"""Published last: its ``main`` names the published version."""

EMBEDDED_DB = "catalog.db"
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    # every commit writes a metadata file: keep a bounded number of them
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
}


class CatalogError(WarehouseError):
    """The Iceberg catalog could not be reached, used or committed to; nothing published
    changed."""


def audit_branch(version: str) -> str:
    return f"audit-{version}"


def publish_order() -> tuple[str, ...]:
    """The tables in the order their ``main`` moves: the lead table last."""
    return tuple(x for x in t.TABLES if x != LEAD_TABLE) + (LEAD_TABLE,)


# --- the catalog -----------------------------------------------------------------------------
_catalogs: dict[tuple, tuple[object, tuple[int, int] | None]] = {}  # catalog, _sqlite_file
_catalogs_lock = threading.Lock()


def _pyiceberg_configured() -> bool:
    """Whether pyiceberg has any configuration here: a ``PYICEBERG_*`` variable or a
    ``.pyiceberg.yaml`` where it looks (``$PYICEBERG_HOME``, the home directory, the working
    directory). Without any, the embedded catalog is used and pyiceberg's configuration (a
    second of imports) is not read at all."""
    if any(key.upper().startswith("PYICEBERG_") for key in os.environ):
        return True
    places = (os.environ.get("PYICEBERG_HOME"), os.path.expanduser("~"), os.getcwd())
    return any(place and os.path.isfile(os.path.join(place, ".pyiceberg.yaml")) for place in places)


def catalog_name() -> str:
    if not os.environ.get(CATALOG_ENV) and not _pyiceberg_configured():
        return "default"
    from pyiceberg.utils.config import Config

    return os.environ.get(CATALOG_ENV) or Config().get_default_catalog_name()


def _embedded_properties() -> dict[str, str]:
    root = t.warehouse_dir()
    return {"type": "sql", "uri": f"sqlite:///{root / EMBEDDED_DB}",
            "warehouse": (root / "iceberg").as_uri()}


def catalog_properties() -> tuple[str, dict[str, str], bool]:
    """(name, properties, embedded) of the catalog in use, read afresh from pyiceberg's
    configuration (its files and ``PYICEBERG_*`` variables)."""
    if not os.environ.get(CATALOG_ENV) and not _pyiceberg_configured():
        _embedded_allowed()
        return "default", _embedded_properties(), True
    from pyiceberg.utils.config import Config

    name = catalog_name()
    configured = Config().get_catalog_config(name)
    if configured:
        return name, _with_store_settings({str(k): str(v) for k, v in configured.items()}), False
    if os.environ.get(CATALOG_ENV):
        raise CatalogError(
            f"{CATALOG_ENV}={name!r} names an Iceberg catalog that is not configured: set "
            f"PYICEBERG_CATALOG__{name.upper().replace('-', '_')}__URI (and its other properties) "
            "or add it to .pyiceberg.yaml, or unset the variable to use the embedded catalog")
    _embedded_allowed()
    return name, _embedded_properties(), True


def _embedded_allowed() -> None:
    """The embedded catalog is a file of the home: with the home on object storage it would be
    each process's own, so publishing there would publish nothing the others see."""
    home = storage.home()
    if home.shared_catalog_required:
        raise CatalogError(
            f"$TOPIC_LINEAGE_HOME is {home.url}: its tables need an Iceberg catalog every "
            "process shares; configure one the pyiceberg way (e.g. PYICEBERG_CATALOG__PROD__TYPE=sql "
            "and PYICEBERG_CATALOG__PROD__URI=postgresql+psycopg2://..., or a REST catalog) and "
            f"name it with {CATALOG_ENV}")


def _with_store_settings(props: dict[str, str]) -> dict[str, str]:
    """A configured catalog's properties, completed from the home: its warehouse under the
    home (``<home>/warehouse/iceberg``) when it names none, and the S3 endpoint and region the
    environment gives (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``AWS_REGION``), which
    pyiceberg's own S3 file IO does not read. What the configuration sets wins."""
    from topic_lineage import location

    return {"warehouse": storage.home().url_of("warehouse/iceberg"), **location.pyiceberg_io(), **props}


def catalog():
    """The catalog (one object per process and configuration, and for a SQLite catalog per
    database file: :func:`_sqlite_file`)."""
    name, props, _ = catalog_properties()
    key = (os.getpid(), name, tuple(sorted(props.items())))
    held = _sqlite_file(props)
    with _catalogs_lock:
        found, file = _catalogs.get(key, (None, None))
        if found is not None and file != held:
            _close(found)
            found = None
        if found is None:
            found = _load_catalog(name, props)
            _catalogs[key] = found, _sqlite_file(props)  # the load makes a missing file
        return found


def _sqlite_file(props: dict[str, str]) -> tuple[int, int] | None:
    """The identity (device, inode) of a SQLite catalog's database file; ``None`` for another
    catalog or a missing file. A process that keeps its catalog (the UI's server, a test's
    in-process commands) follows the file when it is replaced, as a home restored from a backup
    replaces it: a connection kept to the old file read the catalog as it was before the
    restore, and could not write ("attempt to write a readonly database"). The new file cannot
    take the old one's inode while a connection keeps that open."""
    uri = props.get("uri", "")
    if not uri.startswith("sqlite:///"):
        return None
    try:
        found = os.stat(uri.removeprefix("sqlite:///"))
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _close(old) -> None:
    """Close a replaced catalog's connections (a SQL catalog's engine), if it has any."""
    engine = getattr(old, "engine", None)
    if engine is not None:
        with contextlib.suppress(Exception):
            engine.dispose()


def _load_catalog(name: str, props: dict[str, str]):
    from topic_lineage.quality.gx_import import HIDING

    with HIDING:  # a SQL catalog imports sqlalchemy, which GX's import in a build's background
        # thread hides while it runs (topic_lineage.quality.gx_import)
        import pyiceberg.catalog.sql  # noqa: F401
    from pyiceberg.catalog import AVAILABLE_CATALOGS, CatalogType, infer_catalog_type

    if props.get("uri", "").startswith("sqlite:///"):  # its file's folder (and the warehouse's)
        Path(props["uri"].removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        if props.get("warehouse", "").startswith("file:"):
            Path(_local(props["warehouse"])).mkdir(parents=True, exist_ok=True)

    try:
        kind = props.get("type")
        catalog_type = CatalogType(kind.lower()) if kind else infer_catalog_type(name, props)
        if catalog_type is None:
            raise ValueError("no 'type' and no 'uri' to tell the catalog's type")
        return AVAILABLE_CATALOGS[catalog_type](name, props)
    except Exception as exc:  # noqa: BLE001 - every failure to reach it is the user's to fix
        raise CatalogError(f"Iceberg catalog {name!r} ({catalog_place(props)}) cannot be used: "
                           f"{_reason(exc)}") from None


def catalog_place(props: dict[str, str]) -> str:
    """Where the catalog is, for a message: its URI without user or password."""
    import re

    uri = props.get("uri")
    if uri:
        return re.sub(r"//[^/@]*@", "//", uri)
    return props.get("type") or "no uri"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TopicLineageError):  # ours already says what to check, in one line
        return str(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def _calling(what: str):
    """Turns the catalog's own exceptions into one clear :class:`CatalogError`."""
    @contextlib.contextmanager
    def wrap():
        try:
            yield
        except TopicLineageError:
            raise
        except Exception as exc:  # noqa: BLE001
            from pyiceberg.exceptions import CommitFailedException

            name, props, _ = catalog_properties()
            if isinstance(exc, CommitFailedException):
                raise CatalogError(
                    f"{what}: the table changed meanwhile in Iceberg catalog {name!r} (someone else "
                    f"committed to it); nothing published changed, run again ({_reason(exc)})"
                ) from None
            raise CatalogError(f"{what} in Iceberg catalog {name!r} ({catalog_place(props)}) failed: "
                               f"{_reason(exc)}; nothing published changed") from None
    return wrap()


# --- tables ----------------------------------------------------------------------------------
def iceberg_schema(table: str):
    """The Iceberg schema of a table, from its DDL (tables.TABLE_DDL). Every column is optional:
    Spark writes its Parquet columns nullable whatever the data; the contract's NOT NULL
    columns are guarded by the quality gate."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BooleanType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    kinds = {"STRING": StringType, "INT": IntegerType, "BIGINT": LongType,
             "BOOLEAN": BooleanType, "TIMESTAMP": TimestamptzType}
    fields = []
    for i, part in enumerate(t.TABLE_DDL[table].split(","), start=1):
        name, kind = part.split()[:2]
        fields.append(NestedField(field_id=i, name=name, field_type=kinds[kind](), required=False))
    return Schema(*fields)


def load_table(table: str, *, create: bool = False):
    """One of our tables (created with its namespace when ``create``); None when it does not
    exist and ``create`` is false."""
    from pyiceberg.exceptions import (
        NamespaceAlreadyExistsError,
        NoSuchNamespaceError,
        NoSuchTableError,
        TableAlreadyExistsError,
    )

    cat = catalog()
    with _calling(f"loading table {NAMESPACE}.{table}"):
        try:
            return cat.load_table((NAMESPACE, table))
        except (NoSuchTableError, NoSuchNamespaceError):
            if not create:
                return None
        try:
            cat.create_namespace(NAMESPACE)
        except NamespaceAlreadyExistsError:
            pass
        schema = iceberg_schema(table)
        try:
            tbl = cat.create_table(
                (NAMESPACE, table), schema=schema,
                properties={**TABLE_PROPERTIES,
                            "schema.name-mapping.default": schema.name_mapping.model_dump_json()})
        except TableAlreadyExistsError:  # another process made it meanwhile
            return cat.load_table((NAMESPACE, table))
        _with_main(tbl)
        return tbl


def _snapshot_version(snapshot) -> str | None:
    if snapshot is None or snapshot.summary is None:
        return None
    return snapshot.summary.additional_properties.get(VERSION_PROPERTY)


# --- write, audit, publish -------------------------------------------------------------------
def stage(version: str, table_dirs: dict[str, Path],
          stored: Callable[[Path], Path] | None = None,
          prepared: dict[str, StagedFiles] | None = None) -> dict[str, dict]:
    """Add each table's Parquet files (``table_dirs[table]/*.parquet``) as the data files of one
    new snapshot on branch ``audit-<version>``; ``main`` does not move. ``stored`` gives the
    file that holds one of them (a file the version keeps of an earlier one by reference is
    that one's: ``warehouse.stored_path``). ``prepared``: tables whose files :func:`files_of`
    has read already (a build reads ``topic_snapshots``' while its walk pass runs). Returns what
    the version's manifest records: :data:`SNAPSHOTS_KEY` (table -> the snapshot's ID) and
    :data:`FILES_KEY` (table -> its data files). A snapshot holds the whole table (it has no
    parent), so a version is exactly its files, whatever came before."""
    snapshots, paths = {}, {}
    for table in t.TABLES:
        found = (prepared or {}).get(table) or files_of(version, table, table_dirs[table], stored)
        with _calling(_staging(version, table)):
            snapshots[table] = _retried(table, found.table, partial(_stage_on_branch, version=version,
                                                                    data_files=found.data_files))
        paths[table] = [_local(f) for f in found.urls]
        remember_files(str(found.table.metadata.table_uuid), snapshots[table], paths[table])
    return {SNAPSHOTS_KEY: snapshots, FILES_KEY: paths}


@dataclass(frozen=True)
class StagedFiles:
    """A table's files as :func:`stage` commits them: their URLs and Iceberg data files."""

    table: object  # the pyiceberg Table they were read for
    urls: list[str]
    data_files: list


def files_of(version: str, table: str, directory: Path,
             stored: Callable[[Path], Path] | None = None) -> StagedFiles:
    """The Parquet files of ``table`` in ``directory`` as Iceberg data files: each file's footer
    read for its column statistics (about 15 ms a file: 0.6 s for the 40 ``topic_snapshots``
    files of 10 M observations). The table is made when the catalog lacks it."""
    from pyiceberg.table import _parquet_files_to_data_files

    tbl = load_table(table, create=True)
    urls = [storage.home().url_of(stored(p) if stored else p)
            for p in sorted(directory.glob("*.parquet")) if not p.name.startswith((".", "_"))]
    with _calling(_staging(version, table)):
        return StagedFiles(tbl, urls, list(_parquet_files_to_data_files(tbl.metadata, urls, tbl.io)))


def _staging(version: str, table: str) -> str:
    return f"staging version {version} of {NAMESPACE}.{table} on branch {audit_branch(version)}"


def _stage_on_branch(tbl, *, version: str, data_files: list) -> int:
    """One commit: the version's snapshot (exactly ``data_files``) on its audit branch."""
    branch = audit_branch(version)
    if branch in tbl.metadata.refs:  # staged before (a version published by hand again)
        tbl.manage_snapshots().remove_branch(branch).commit()
    with tbl.transaction() as txn:
        with txn.update_snapshot(snapshot_properties={VERSION_PROPERTY: version},
                                 branch=branch).fast_append() as append:
            for data_file in data_files:
                append.append_data_file(data_file)
        fault_point("stage")  # fault suite: the snapshot's manifests written, not committed
    return tbl.metadata.refs[branch].snapshot_id


COMMIT_ATTEMPTS = 6
"""Tries of a commit that only adds to a table (a version's branch, a new table's first
snapshot) when another writer committed first: each from a fresh read of the table."""


def _retried(table: str, tbl, commit):
    """``commit(tbl)``, again on the table as it is now while another writer's commit makes it
    fail (two builds staging at once, a table another process has just created). A commit that
    moves ``main`` is never retried here: publishing decides on what it read."""
    import random
    import time

    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(COMMIT_ATTEMPTS):
        try:
            _with_main(tbl)
            return commit(tbl)
        except (CommitFailedException, ValueError) as exc:
            # a SQL catalog applies our snapshot to the table as another writer left it: its
            # sequence number is then taken, which pyiceberg reports as a ValueError
            lost_race = isinstance(exc, CommitFailedException) or "sequence number" in str(exc)
            if attempt == COMMIT_ATTEMPTS - 1 or not lost_race:
                raise
            time.sleep(random.uniform(0.05, 0.2) * 2 ** attempt)
            tbl = load_table(table)
    raise AssertionError("unreachable")


def _with_main(tbl) -> None:
    """A table without a snapshot takes commits on ``main`` only: its first is an empty one
    there (no version property: nothing is published by it), then branches can be made. The
    process that created the table makes it; another that finds it missing (the creator was
    killed in between, or has not got there yet) makes it too, and whichever is second re-reads."""
    from pyiceberg.exceptions import CommitFailedException

    if tbl.metadata.snapshot_by_name(MAIN) is not None:
        return
    try:
        with tbl.transaction() as txn, txn.update_snapshot().fast_append():
            pass
    except CommitFailedException:
        tbl.refresh()


def published_version() -> str | None:
    """The version ``main`` of ``topic_incarnations`` holds the rows of (published last: it names
    the published version); None when nothing is published through Iceberg. ``main`` may be at a
    snapshot another engine's maintenance wrote over ours (:func:`main_holds`); a foreign commit
    that changes rows raises :class:`ForeignCommitError`."""
    metadata = table_metadata(LEAD_TABLE)
    return None if metadata is None else main_holds(LEAD_TABLE, metadata).version


def _pyiceberg_published_version() -> str | None:
    """:func:`published_version` read through pyiceberg (the fast path's answer is this one;
    tests compare them)."""
    import json

    lead = load_table(LEAD_TABLE)
    return None if lead is None else main_holds(LEAD_TABLE, json.loads(lead.metadata.model_dump_json())).version


def _sql_published_version(name: str, props: dict[str, str]):
    """:func:`published_version` through the SQL catalog's database (:func:`table_metadata`)."""
    del name, props
    return published_version()


# --- what main holds ---------------------------------------------------------------------------
REPLACE = "replace"
"""The snapshot operation that changes no row: "data and delete files were added and removed
without changing table data" (the Iceberg spec; what compaction, ``rewrite_data_files``, writes)."""
PUBLISHED_PROPERTY = "topic-lineage.published"
"""Table property set in the commit that moves ``main`` to one of our snapshots: the version, the
snapshot and its row count, as JSON. Table properties outlive another engine's expiry of
snapshots, so ``main`` at a compaction whose history back to our snapshot expired still names
the version whose rows it holds."""


class ForeignCommitError(CatalogError):
    """``main`` of a table is at a commit no topic-lineage build wrote that changes (or may
    change) the rows of the published version: reported, never read past nor overwritten."""

    def __init__(self, message: str, *, table: str, snapshot_id: int, version: str | None):
        super().__init__(message)
        self.table, self.snapshot_id, self.version = table, snapshot_id, version


@dataclass(frozen=True)
class MainHolds:
    """What ``main`` of a table holds: its head snapshot, and the version of ours whose rows it
    holds (None: nothing of ours), written by us (``ours``) or a compaction of it."""

    snapshot_id: int | None
    version: str | None
    ours: int | None = None


def main_holds(table: str, metadata: dict) -> MainHolds:
    """Which version's rows ``main`` of ``table`` holds, from the table's metadata (its JSON form).

    From ``main``'s head back through its parents to the first snapshot of ours (its summary
    names the version): every foreign snapshot on the way must be one that changes no row
    (:func:`changes_rows`: a ``replace``, as compaction writes, or a commit adding no file). When the history ends before one of ours (another engine
    expired it), the version is the one :data:`PUBLISHED_PROPERTY` names, provided every snapshot
    still there is a ``replace`` and ``main`` holds as many rows as our snapshot did. Any other
    foreign snapshot with data (``append``, ``overwrite``, ``delete``) raises
    :class:`ForeignCommitError` naming it."""
    snapshots = {s["snapshot-id"]: s for s in metadata.get("snapshots") or []}
    head = (metadata.get("refs", {}).get(MAIN) or {}).get("snapshot-id")
    current, changed, last = head, None, None
    while current in snapshots:
        snapshot = last = snapshots[current]
        summary = snapshot.get("summary") or {}
        version = summary.get(VERSION_PROPERTY)
        if version is not None:
            if changed is not None:
                raise _changed(table, changed, version, head)
            return MainHolds(head, version, current)
        if changed is None and changes_rows(summary):
            changed = snapshot
        current = snapshot.get("parent-snapshot-id")
    if last is None or (current is None and (last.get("summary") or {}).get("total-data-files") == "0"):
        # no main, or its whole history is there back to the table's empty start: none of it ours
        if changed is not None:
            raise _changed(table, changed, None, head)
        return MainHolds(head, None)
    published = _published_property(metadata)
    version = published.get("version")
    if changed is not None:
        raise _changed(table, changed, version, head)
    records = (snapshots[head].get("summary") or {}).get("total-records")
    if version is None or records is None or str(published.get("records")) != records:
        why = ("and no topic-lineage publish is recorded in its properties" if version is None else
               f"holding {records} rows where published version {version} holds {published.get('records')}")
        raise ForeignCommitError(
            f"{NAMESPACE}.{table}: main is at snapshot {head}, which no topic-lineage build wrote, "
            f"its history back to a published version expired, {why}; {_ways_out(version)}",
            table=table, snapshot_id=head, version=version)
    return MainHolds(head, version, published.get("snapshot-id"))


_CHANGE_COUNTS = ("added-data-files", "deleted-data-files", "added-delete-files", "removed-delete-files",
                  "added-records", "deleted-records", "added-position-deletes", "added-equality-deletes")


def changes_rows(summary: dict) -> bool:
    """Whether a snapshot no build of ours wrote may change the table's rows, by its summary: a
    ``replace`` never does (the spec's word); another operation does unless its summary counts
    no file and no row added or removed (a commit that only moved metadata; writers leave a
    count of zero out, Iceberg's Java and pyiceberg alike). A summary with neither counts nor
    totals says nothing, and is taken to change rows."""
    if summary.get("operation") == REPLACE:
        return False
    counts = [summary[key] for key in _CHANGE_COUNTS if key in summary]
    if counts:
        return any(count != "0" for count in counts)
    return not any(key.startswith("total-") for key in summary)


def _published_property(metadata: dict) -> dict:
    import json

    try:
        found = json.loads((metadata.get("properties") or {}).get(PUBLISHED_PROPERTY) or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _changed(table: str, snapshot: dict, version: str | None, head: int) -> ForeignCommitError:
    summary = snapshot.get("summary") or {}
    operation = summary.get("operation", "unknown")
    counts = ", ".join(f"{k} {summary[k]}" for k in ("added-records", "deleted-records") if k in summary)
    where = "" if snapshot["snapshot-id"] == head else f" (main is at {head}, on top of it)"
    return ForeignCommitError(
        f"{NAMESPACE}.{table}: main holds snapshot {snapshot['snapshot-id']}{where}, an {operation} "
        f"{'(' + counts + ') ' if counts else ''}that no topic-lineage build wrote and that changes "
        f"the rows{' of published version ' + version if version else ''}; {_ways_out(version)}",
        table=table, snapshot_id=snapshot["snapshot-id"], version=version)


def _ways_out(version: str | None) -> str:
    back = f"to version {version}'s snapshot " if version else ""
    return (f"topic-lineage neither reads past it nor overwrites it: roll main back {back}in the "
            "engine that wrote it, or replace it with 'topic-lineage publish VERSION --force "
            "--reason TEXT'")


def ref_snapshot(metadata: dict, ref: str | int) -> int | None:
    """The snapshot a ref (a branch or tag name) of a table names; a snapshot ID as it is when
    the table has it. None when neither."""
    if isinstance(ref, int):
        return ref if any(s["snapshot-id"] == ref for s in metadata.get("snapshots") or []) else None
    return (metadata.get("refs", {}).get(ref) or {}).get("snapshot-id")


def snapshot_of_version(metadata: dict, version: str) -> int | None:
    """The snapshot of ours holding ``version``: its audit branch's head, else a snapshot whose
    summary names it (a branch removed by someone else)."""
    found = ref_snapshot(metadata, audit_branch(version))
    if found is not None:
        return found
    for snapshot in metadata.get("snapshots") or []:
        if (snapshot.get("summary") or {}).get(VERSION_PROPERTY) == version:
            found = snapshot["snapshot-id"]
    return found


# --- a table's metadata, as the catalog has it now -------------------------------------------
_parsed: dict[tuple, tuple[str, dict]] = {}
"""(catalog, table) -> its newest metadata file read in this process, and what it holds."""


def _parse_once(key: tuple, location: str, read: Callable[[], dict]) -> dict:
    found = _parsed.get(key)
    if found is None or found[0] != location:
        found = _parsed[key] = (location, read())
    return found[1]


def table_metadata(table: str) -> dict | None:
    """The current metadata of one of our tables, in its JSON file's form (None: no such table).
    A SQL catalog on SQLite (the embedded one) or PostgreSQL is read with the database's own
    driver and the file with json: milliseconds, not pyiceberg's and SQLAlchemy's imports; other
    catalogs through pyiceberg. A metadata file never changes: the newest one read is kept."""
    import json

    name, props, _ = catalog_properties()
    if _sql_fast_path(props):
        try:
            found = _metadata_location(name, props, table)
            if found is None:
                return None
            return _parse_once((name, table), found, lambda: json.loads(_read_metadata(found)))
        except (OSError, ValueError, LocationError) as exc:
            raise CatalogError(f"Iceberg catalog {name!r} ({catalog_place(props)}) cannot be read: "
                               f"{_reason(exc)}") from None
    tbl = load_table(table)
    if tbl is None:
        return None
    return _parse_once((name, table), tbl.metadata_location, lambda: json.loads(tbl.metadata.model_dump_json()))


def _sql_fast_path(props: dict[str, str]) -> bool:
    return props.get("type", "sql") == "sql" and props.get("uri", "").startswith(
        ("sqlite:///", "postgresql://", "postgresql+psycopg2://"))


_TABLE_ROW = ("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = {p} AND "
              "table_namespace = {p} AND table_name = {p}")


def _metadata_location(name: str, props: dict[str, str], table: str) -> str | None:
    """A table's current metadata file, from the catalog's ``iceberg_tables`` row (the JDBC
    catalog's layout, which pyiceberg's SQL catalog keeps); None without one."""
    uri = props["uri"]
    key = (name, NAMESPACE, table)
    if uri.startswith("sqlite:///"):
        import sqlite3

        database = Path(uri.removeprefix("sqlite:///"))
        if not database.exists():
            return None
        try:
            with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as con:
                row = con.execute(_TABLE_ROW.format(p="?"), key).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise OSError(str(exc)) from None
        return row[0] if row else None
    from urllib.parse import parse_qsl, unquote, urlparse

    import psycopg2

    parsed = urlparse(uri)
    try:
        con = psycopg2.connect(host=parsed.hostname, port=parsed.port or 5432,
                               user=unquote(parsed.username or ""), password=unquote(parsed.password or ""),
                               dbname=parsed.path.lstrip("/"), connect_timeout=10,
                               **dict(parse_qsl(parsed.query)))
    except psycopg2.Error as exc:
        raise OSError(" ".join(str(exc).split())) from None
    try:
        with con.cursor() as cur:
            cur.execute(_TABLE_ROW.format(p="%s"), key)
            row = cur.fetchone()
    except psycopg2.errors.UndefinedTable:
        return None
    except psycopg2.Error as exc:
        raise OSError(" ".join(str(exc).split())) from None
    finally:
        con.close()
    return row[0] if row else None


def _read_metadata(where: str) -> str:
    """A metadata file's text, read where it is."""
    return storage.read_url(where).decode()


def version_snapshots(version: str) -> dict[str, int]:
    """Table -> the snapshot holding ``version`` (:func:`snapshot_of_version`); tables without
    one are left out."""
    found = {}
    for table in t.TABLES:
        metadata = table_metadata(table)
        snapshot_id = None if metadata is None else snapshot_of_version(metadata, version)
        if snapshot_id is not None:
            found[table] = snapshot_id
    return found


SNAPSHOTS_KEY = "iceberg_snapshots"
"""Manifest key: table -> the ID of the snapshot staged for the version (:func:`stage`)."""
FILES_KEY = "iceberg_files"
"""Manifest key: table -> the data files of that snapshot, as committed (a snapshot never
changes), so that readers need not read the snapshot's manifests (nor import pyiceberg)."""
_files_cache: dict[tuple, list[str]] = {}
FILES_CACHE = ".snapshot-files"
"""Under the warehouse folder: ``<table uuid>/<snapshot id>.json``, the data files of a snapshot
read once (a snapshot never changes). This process's own: never pushed to an object store."""


def snapshot_files(table: str, snapshot_id: int, metadata: dict | None = None) -> list[str]:
    """The data files of one snapshot of one table, as the catalog names them (local paths for
    ``file:`` locations). A snapshot never changes: kept per process and in :data:`FILES_CACHE`;
    the first read reads the snapshot's manifest list and manifests."""
    import json

    metadata = metadata if metadata is not None else table_metadata(table)
    if metadata is None:
        raise CatalogError(f"table {NAMESPACE}.{table} does not exist in Iceberg catalog "
                           f"{catalog_name()!r}")
    key = (metadata.get("table-uuid"), snapshot_id)
    if key not in _files_cache:
        cached = _cache_path(*key)
        try:
            _files_cache[key] = json.loads(cached.read_text())
        except (OSError, ValueError):
            files = _read_snapshot_files(table, snapshot_id, metadata)
            remember_files(key[0], snapshot_id, files)
    return list(_files_cache[key])


def _cache_path(table_uuid: str | None, snapshot_id: int) -> Path:
    return t.warehouse_dir() / FILES_CACHE / str(table_uuid) / f"{snapshot_id}.json"


def remember_files(table_uuid: str | None, snapshot_id: int, files: list[str]) -> None:
    """Record the data files of a snapshot (known to its writer, or read once)."""
    import json

    from topic_lineage.fsutil import write_durably

    _files_cache[(table_uuid, snapshot_id)] = list(files)
    with contextlib.suppress(OSError):  # a cache: a read-only home reads the manifests again
        write_durably(_cache_path(table_uuid, snapshot_id), json.dumps(sorted(files)))


def _read_snapshot_files(table: str, snapshot_id: int, metadata: dict) -> list[str]:
    """Read a snapshot's manifest list and manifests (pyiceberg's Avro readers and file IO,
    without loading the catalog)."""
    snapshot = next((s for s in metadata.get("snapshots") or [] if s["snapshot-id"] == snapshot_id), None)
    if snapshot is None:
        raise CatalogError(f"table {NAMESPACE}.{table} has no snapshot {snapshot_id} (expired?)")
    from pyiceberg.io import load_file_io
    from pyiceberg.manifest import read_manifest_list

    _, props, _ = catalog_properties()
    with _calling(f"reading snapshot {snapshot_id} of {NAMESPACE}.{table}"):
        io = load_file_io({**props, **(metadata.get("properties") or {})}, metadata.get("location"))
        return sorted(_local(entry.data_file.file_path)
                      for manifest in read_manifest_list(io.new_input(snapshot["manifest-list"]))
                      for entry in manifest.fetch_manifest_entry(io, discard_deleted=True))


def _local(uri: str) -> str:
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return uri


TRANSACTIONS = "POST /v1/{prefix}/transactions/commit"
"""The REST catalog's multi-table commit (an endpoint a server may offer)."""


def _multi_table_catalog(cat) -> bool:
    """Whether ``cat`` is a REST catalog whose server offers multi-table commits."""
    from pyiceberg.catalog.rest import Endpoint, RestCatalog

    return (isinstance(cat, RestCatalog)
            and Endpoint.from_string(TRANSACTIONS) in getattr(cat, "_supported_endpoints", ()))


def publish_main(version: str, snapshots: dict[str, int], *, replace_foreign: bool = False) -> list[str]:
    """Move ``main`` of every table to the version's snapshot, each a compare-and-swap on
    ``main``: in one commit where the catalog offers multi-table commits (a REST catalog with
    transactions), else table by table, ``topic_incarnations`` last. Each commit also sets the
    table's :data:`PUBLISHED_PROPERTY`. A ``main`` at a foreign commit that changes rows is
    refused (:class:`ForeignCommitError`) unless ``replace_foreign``. Returns the tables whose
    ``main`` moved."""
    cat = catalog()
    if _multi_table_catalog(cat):
        return _publish_in_one_commit(cat, version, snapshots, replace_foreign)
    moved, loaded = [], {}
    for table in publish_order():  # every table checked before any moves
        tbl = loaded[table] = load_table(table)
        if tbl is None or table not in snapshots:
            raise CatalogError(f"version {version} has no snapshot of {NAMESPACE}.{table}; "
                               "build it again")
        head = tbl.metadata.snapshot_by_name(MAIN)
        if head is None or head.snapshot_id != snapshots[table]:
            _check_main(table, tbl, replace_foreign)
    for table in publish_order():
        tbl, target = loaded[table], snapshots[table]
        head = tbl.metadata.snapshot_by_name(MAIN)
        if head is not None and head.snapshot_id == target:
            continue
        if table == LEAD_TABLE:
            # fault suite: every other table moved, the one that names the published version not
            # yet (topic_lineage/faults.py)
            fault_point("publish")
        with _calling(f"publishing version {version} to {NAMESPACE}.{table}"):
            from pyiceberg.table.update.snapshot import ManageSnapshots

            with tbl.transaction() as txn:  # one commit: main moves, and the table says to what
                ManageSnapshots(txn).set_current_snapshot(snapshot_id=target)
                txn.set_properties({PUBLISHED_PROPERTY: _published_record(tbl, version, target)})
        moved.append(table)
    return moved


def _check_main(table: str, tbl, replace_foreign: bool) -> None:
    """Refuse to move ``main`` off a foreign commit that changes rows (:func:`main_holds`) unless
    ``replace_foreign`` (a user's ``publish --force``); a compaction of ours is superseded."""
    import json

    try:
        main_holds(table, json.loads(tbl.metadata.model_dump_json()))
    except ForeignCommitError as exc:
        if not replace_foreign:
            raise
        log.warning("%s; replaced as asked (--force): it stays in the table's history", exc)


def _published_record(tbl, version: str, snapshot_id: int) -> str:
    import json

    snapshot = tbl.metadata.snapshot_by_id(snapshot_id)
    records = snapshot.summary.additional_properties.get("total-records") if snapshot and snapshot.summary else None
    return json.dumps({"version": version, "snapshot-id": snapshot_id, "records": records},
                      sort_keys=True)


def _publish_in_one_commit(cat, version: str, snapshots: dict[str, int], replace_foreign: bool) -> list[str]:
    """All five tables' ``main`` in one REST transaction: the catalog applies every move or none
    (each asserts ``main`` is where we read it)."""
    from pyiceberg.table import CommitTableRequest, TableIdentifier
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update import (
        AssertRefSnapshotId,
        SetPropertiesUpdate,
        SetSnapshotRefUpdate,
    )

    changes, moved = [], []
    for table in publish_order():
        tbl = load_table(table)
        if tbl is None or table not in snapshots:
            raise CatalogError(f"version {version} has no snapshot of {NAMESPACE}.{table}; "
                               "build it again")
        head = tbl.metadata.snapshot_by_name(MAIN)
        if head is not None and head.snapshot_id == snapshots[table]:
            continue
        _check_main(table, tbl, replace_foreign)
        record = _published_record(tbl, version, snapshots[table])
        changes.append(CommitTableRequest(
            identifier=TableIdentifier(namespace=(NAMESPACE,), name=table),
            requirements=(AssertRefSnapshotId(ref=MAIN, snapshot_id=head and head.snapshot_id),),
            updates=(SetSnapshotRefUpdate(ref_name=MAIN, type=SnapshotRefType.BRANCH,
                                          snapshot_id=snapshots[table]),
                     SetPropertiesUpdate(updates={PUBLISHED_PROPERTY: record}))))
        moved.append(table)
    if not changes:
        return moved
    fault_point("publish")  # fault suite: every table read, nothing moved yet
    body = '{"table-changes": [' + ", ".join(c.model_dump_json() for c in changes) + "]}"
    with _calling(f"publishing version {version} to {len(changes)} table(s) in one commit"):
        response = cat._session.post(cat.url("transactions/commit", prefixed=True),
                                     data=body.encode(), headers=cat._session.headers)
        if response.status_code == 409:
            from pyiceberg.exceptions import CommitFailedException

            raise CommitFailedException(response.text[:300])
        response.raise_for_status()
    return moved


def drop_version(version: str) -> None:
    """Remove a version from every table: its audit branch and its snapshots (never ``main``'s
    head), and the manifest files only those snapshots used."""
    for table in t.TABLES:
        tbl = load_table(table)
        if tbl is None:
            continue
        branch = audit_branch(version)
        head = tbl.metadata.snapshot_by_name(MAIN)
        mine = [s for s in tbl.metadata.snapshots if _snapshot_version(s) == version
                and (head is None or s.snapshot_id != head.snapshot_id)]
        with _calling(f"removing version {version} from {NAMESPACE}.{table}"):
            if branch in tbl.metadata.refs:
                tbl.manage_snapshots().remove_branch(branch).commit()
            if mine:
                leftovers = _metadata_files(tbl, mine)
                tbl.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in mine]).commit()
                _remove_files(tbl, leftovers)
        _prune_files_cache(tbl)


def _prune_files_cache(tbl) -> None:
    """Forget the files of snapshots the table no longer has (expired by us or another engine)."""
    folder = _cache_path(str(tbl.metadata.table_uuid), 0).parent
    kept = {f"{s.snapshot_id}.json" for s in tbl.metadata.snapshots}
    for path in folder.glob("*.json") if folder.is_dir() else []:
        if path.name not in kept:
            path.unlink(missing_ok=True)


def _metadata_files(tbl, snapshots: Iterable) -> list[str]:
    """The manifest lists and manifests of our snapshots (each version's own: a version's
    snapshot has no parent and writes its own manifest)."""
    paths = []
    for snapshot in snapshots:
        paths.append(snapshot.manifest_list)
        paths.extend(m.manifest_path for m in snapshot.manifests(tbl.io))
    return paths


def _remove_files(tbl, paths: Iterable[str]) -> None:
    """Delete files through the table's own file IO (local disk or object store); a file
    already gone is no error."""
    for path in paths:
        with contextlib.suppress(Exception):
            tbl.io.delete(path)
