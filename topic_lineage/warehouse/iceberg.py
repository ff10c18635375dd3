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
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError, WarehouseError
from topic_lineage.faults import fault_point

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
_catalogs: dict[tuple, object] = {}
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
    """The catalog (one object per process and configuration)."""
    name, props, _ = catalog_properties()
    key = (os.getpid(), name, tuple(sorted(props.items())))
    with _catalogs_lock:
        found = _catalogs.get(key)
        if found is None:
            found = _catalogs[key] = _load_catalog(name, props)
        return found


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


def _holds_data(snapshot) -> bool:
    return snapshot.summary is None or snapshot.summary.additional_properties.get("total-data-files") != "0"


def _snapshot_version(snapshot) -> str | None:
    if snapshot is None or snapshot.summary is None:
        return None
    return snapshot.summary.additional_properties.get(VERSION_PROPERTY)


# --- write, audit, publish -------------------------------------------------------------------
def stage(version: str, table_dirs: dict[str, Path],
          stored: Callable[[Path], Path] | None = None) -> dict[str, dict]:
    """Add each table's Parquet files (``table_dirs[table]/*.parquet``) as the data files of one
    new snapshot on branch ``audit-<version>``; ``main`` does not move. ``stored`` gives the
    file that holds one of them (a file the version keeps of an earlier one by reference is
    that one's: ``warehouse.stored_path``). Returns what the version's manifest records:
    :data:`SNAPSHOTS_KEY` (table -> the snapshot's ID) and :data:`FILES_KEY` (table -> its data
    files). A snapshot holds the whole table (it has no parent), so a version is exactly its
    files, whatever came before."""
    from pyiceberg.table import _parquet_files_to_data_files

    branch = audit_branch(version)
    snapshots, paths = {}, {}
    for table in t.TABLES:
        tbl = load_table(table, create=True)
        files = [storage.home().url_of(stored(p) if stored else p)
                 for p in sorted(table_dirs[table].glob("*.parquet")) if not p.name.startswith((".", "_"))]
        with _calling(f"staging version {version} of {NAMESPACE}.{table} on branch {branch}"):
            data_files = list(_parquet_files_to_data_files(tbl.metadata, files, tbl.io))
            snapshots[table] = _retried(table, tbl, partial(_stage_on_branch, version=version,
                                                            data_files=data_files))
        paths[table] = [_local(f) for f in files]
    return {SNAPSHOTS_KEY: snapshots, FILES_KEY: paths}


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
    """The version ``main`` of ``topic_incarnations`` holds (published last: it names the
    published version); None when nothing is published through Iceberg. When someone else
    committed to ``main`` on top of ours, the version is the newest of ours in its ancestry: our
    readers read the tables as we published them."""
    name, props, _ = catalog_properties()
    fast = _sql_published_version(name, props)
    if fast is not _NO_FAST_PATH:
        return fast
    return _pyiceberg_published_version()


def _pyiceberg_published_version() -> str | None:
    from pyiceberg.table.snapshots import ancestors_of

    lead = load_table(LEAD_TABLE)
    if lead is None:
        return None
    for snapshot in ancestors_of(lead.metadata.snapshot_by_name(MAIN), lead.metadata):
        version = _snapshot_version(snapshot)
        if version is not None:
            return version
    return None


_NO_FAST_PATH = object()


def _sql_published_version(name: str, props: dict[str, str]):
    """:func:`published_version` of a SQL catalog on SQLite (the embedded one) or PostgreSQL,
    read with the database's own driver, the metadata file with json (the answer pyiceberg
    gives; tests compare them): a no-op build or a query costs milliseconds here, not
    pyiceberg's and SQLAlchemy's imports (two seconds). ``_NO_FAST_PATH`` for other catalogs."""
    import json

    if props.get("type", "sql") != "sql" or not props.get("uri", "").startswith(
            ("sqlite:///", "postgresql://", "postgresql+psycopg2://")):
        return _NO_FAST_PATH
    try:
        found = _lead_metadata_location(name, props)
        if found is None:
            return None
        metadata = json.loads(_read_metadata(found))
    except (OSError, ValueError) as exc:
        raise CatalogError(f"Iceberg catalog {name!r} ({catalog_place(props)}) cannot be read: "
                           f"{_reason(exc)}") from None
    snapshots = {s["snapshot-id"]: s for s in metadata.get("snapshots", [])}
    current = (metadata.get("refs", {}).get(MAIN) or {}).get("snapshot-id")
    while current in snapshots:
        snapshot = snapshots[current]
        version = (snapshot.get("summary") or {}).get(VERSION_PROPERTY)
        if version is not None:
            return version
        current = snapshot.get("parent-snapshot-id")
    return None


_LEAD_ROW = ("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = {p} AND "
             "table_namespace = {p} AND table_name = {p}")


def _lead_metadata_location(name: str, props: dict[str, str]) -> str | None:
    """The lead table's current metadata file, from the catalog's ``iceberg_tables`` row (the
    JDBC catalog's layout, which pyiceberg's SQL catalog keeps); None without one."""
    uri = props["uri"]
    key = (name, NAMESPACE, LEAD_TABLE)
    if uri.startswith("sqlite:///"):
        import sqlite3

        database = Path(uri.removeprefix("sqlite:///"))
        if not database.exists():
            return None
        try:
            with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as con:
                row = con.execute(_LEAD_ROW.format(p="?"), key).fetchone()
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
            cur.execute(_LEAD_ROW.format(p="%s"), key)
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
    """Table -> the snapshot holding ``version`` (its audit branch's head, or a snapshot whose
    summary names it); tables without one are left out."""
    found = {}
    for table in t.TABLES:
        tbl = load_table(table)
        if tbl is None:
            continue
        ref = tbl.metadata.refs.get(audit_branch(version))
        if ref is not None:
            found[table] = ref.snapshot_id
            continue
        for snapshot in tbl.metadata.snapshots:
            if _snapshot_version(snapshot) == version:
                found[table] = snapshot.snapshot_id
    return found


SNAPSHOTS_KEY = "iceberg_snapshots"
"""Manifest key: table -> the ID of the snapshot staged for the version (:func:`stage`)."""
FILES_KEY = "iceberg_files"
"""Manifest key: table -> the data files of that snapshot, as committed (a snapshot never
changes), so that readers need not read the snapshot's manifests (nor import pyiceberg)."""
_files_cache: dict[tuple, list[str]] = {}


def snapshot_files(table: str, snapshot_id: int) -> list[str]:
    """Local paths of the data files of one snapshot of one table (a snapshot never changes:
    kept per process)."""
    name, props, _ = catalog_properties()
    key = (name, tuple(sorted(props.items())), table, snapshot_id)
    if key not in _files_cache:
        _files_cache[key] = _read_snapshot_files(table, snapshot_id)
    return list(_files_cache[key])


def _read_snapshot_files(table: str, snapshot_id: int) -> list[str]:
    tbl = load_table(table)
    if tbl is None:
        raise CatalogError(f"table {NAMESPACE}.{table} does not exist in Iceberg catalog "
                           f"{catalog_name()!r}")
    snapshot = tbl.metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise CatalogError(f"table {NAMESPACE}.{table} has no snapshot {snapshot_id} (expired?)")
    with _calling(f"reading snapshot {snapshot_id} of {NAMESPACE}.{table}"):
        return sorted(_local(entry.data_file.file_path)
                      for manifest in snapshot.manifests(tbl.io)
                      for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True))


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


def publish_main(version: str, snapshots: dict[str, int]) -> list[str]:
    """Move ``main`` of every table to the version's snapshot, each a compare-and-swap on
    ``main``: in one commit where the catalog offers multi-table commits (a REST catalog with
    transactions), else table by table, ``topic_incarnations`` last. Returns the tables whose
    ``main`` moved."""
    cat = catalog()
    if _multi_table_catalog(cat):
        return _publish_in_one_commit(cat, version, snapshots)
    moved = []
    for table in publish_order():
        tbl = load_table(table)
        if tbl is None or table not in snapshots:
            raise CatalogError(f"version {version} has no snapshot of {NAMESPACE}.{table}; "
                               "build it again")
        target = snapshots[table]
        head = tbl.metadata.snapshot_by_name(MAIN)
        if head is not None and head.snapshot_id == target:
            continue
        if head is not None and _snapshot_version(head) is None and _holds_data(head):
            log.warning("%s.%s: main was at snapshot %s, which no topic-lineage build wrote; it "
                        "stays in the table's history", NAMESPACE, table, head.snapshot_id)
        if table == LEAD_TABLE:
            # fault suite: every other table moved, the one that names the published version not
            # yet (topic_lineage/faults.py)
            fault_point("publish")
        with _calling(f"publishing version {version} to {NAMESPACE}.{table}"):
            tbl.manage_snapshots().set_current_snapshot(snapshot_id=target).commit()
        moved.append(table)
    return moved


def _publish_in_one_commit(cat, version: str, snapshots: dict[str, int]) -> list[str]:
    """All five tables' ``main`` in one REST transaction: the catalog applies every move or none
    (each asserts ``main`` is where we read it)."""
    from pyiceberg.table import CommitTableRequest, TableIdentifier
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update import AssertRefSnapshotId, SetSnapshotRefUpdate

    changes, moved = [], []
    for table in publish_order():
        tbl = load_table(table)
        if tbl is None or table not in snapshots:
            raise CatalogError(f"version {version} has no snapshot of {NAMESPACE}.{table}; "
                               "build it again")
        head = tbl.metadata.snapshot_by_name(MAIN)
        if head is not None and head.snapshot_id == snapshots[table]:
            continue
        changes.append(CommitTableRequest(
            identifier=TableIdentifier(namespace=(NAMESPACE,), name=table),
            requirements=(AssertRefSnapshotId(ref=MAIN, snapshot_id=head and head.snapshot_id),),
            updates=(SetSnapshotRefUpdate(ref_name=MAIN, type=SnapshotRefType.BRANCH,
                                          snapshot_id=snapshots[table]),)))
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
