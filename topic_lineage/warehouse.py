"""Versions of the published tables, and the one pointer readers follow (write-audit-publish, R7).

Every build writes a new directory ``versions/<version>/`` holding one sub-directory of Parquet
files per table (every contract column is inside the files; nothing lives only in directory
names), an internal ``_state/`` table used by the next incremental build, and ``manifest.json``
saying what the version is (status, snapshots it includes, mode, row counts). Nothing in a version
directory is modified after it is built, except its manifest's status.

``CURRENT`` names the published version and is replaced atomically (temporary file, fsync,
``os.replace``), so a reader sees the previous or the new version, never a mix. A killed build
leaves only an unpublished directory behind (status ``building``); retention removes it later.

Spark SQL access (:func:`register_tables`) uses an in-memory catalog with external tables over
the published version's files: no metastore database, so any number of readers can run while a
build writes the next version. :func:`write_init_sql` writes the same statements for
``spark-sql -i``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.faults import fault_point
from topic_lineage.fsutil import replace_durably

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
STATE_TABLE = "_state"
KEEP_ENV = "TOPIC_LINEAGE_KEEP_VERSIONS"
DEFAULT_KEEP = 5

BUILDING, BUILT, VALIDATED, PUBLISHED, REJECTED = (
    "building", "built", "validated", "published", "rejected",
)
PUBLISHABLE = (BUILT, VALIDATED, PUBLISHED)


class WarehouseError(TopicLineageError):
    """A version could not be published or read; nothing published was changed."""


class BuildLockedError(WarehouseError):
    """Another build holds the build lock."""


# --- paths and manifests ---------------------------------------------------------------------
def version_dir(version: str) -> Path:
    if not version or "/" in version or version.startswith("."):
        raise WarehouseError(f"invalid version name {version!r}")
    return t.versions_dir() / version


def version_path(version: str, table: str) -> Path:
    """Directory of one table of one version (read it as ``<dir>/**/*.parquet``)."""
    return version_dir(version) / table


def init_sql_path() -> Path:
    return t.warehouse_dir() / "init.sql"


def new_version_id() -> str:
    """A version name that sorts by creation time."""
    now = datetime.now(UTC)
    return f"v{now.strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:6]}"


def _write_json_atomically(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as handle:
        json.dump(payload, handle, indent=2, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_manifest(version: str) -> dict:
    path = version_dir(version) / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise WarehouseError(
            f"version {version!r} does not exist (no {path}); list versions with "
            "'topic-lineage versions'"
        ) from None
    except json.JSONDecodeError as exc:
        raise WarehouseError(f"manifest of version {version!r} is unreadable ({exc})") from None


def write_manifest(version: str, manifest: dict) -> None:
    _write_json_atomically(version_dir(version) / MANIFEST, manifest)


def set_status(version: str, status: str, **extra: Any) -> dict:
    manifest = read_manifest(version)
    manifest["status"] = status
    manifest.setdefault("history", []).append(
        {"status": status, "at": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
    )
    manifest.update(extra)
    write_manifest(version, manifest)
    return manifest


def mark_validated(version: str) -> dict:
    return set_status(version, VALIDATED)


def mark_rejected(version: str, reason: str) -> dict:
    """Keep a version that failed validation for inspection; it can never be published."""
    return set_status(version, REJECTED, rejected_reason=reason)


def list_versions() -> list[dict]:
    """Manifests of all versions, oldest first (a directory without manifest is skipped)."""
    root = t.versions_dir()
    if not root.exists():
        return []
    manifests = []
    for path in root.iterdir():
        if path.name.startswith(".") or not (path / MANIFEST).exists():
            continue
        try:
            manifests.append(read_manifest(path.name))
        except WarehouseError:
            continue
    return sorted(manifests, key=lambda m: (m.get("created_at", ""), m.get("version", "")))


def current_version() -> str | None:
    """The published version, or None when nothing is published yet."""
    try:
        name = t.current_pointer().read_text().strip()
    except FileNotFoundError:
        return None
    return name or None


# --- locks -----------------------------------------------------------------------------------
@contextlib.contextmanager
def _flock(name: str, *, blocking: bool) -> Iterator[bool]:
    with open(t.locks_dir() / f"{name}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Held for the whole of a build: a second build at the same time fails at once."""
    with _flock("build", blocking=False) as acquired:
        if not acquired:
            raise BuildLockedError(
                f"another build is running (lock {t.locks_dir() / 'build.lock'}); wait for it to "
                "finish and run the build again"
            )
        yield


def _build_running() -> bool:
    with _flock("build", blocking=False) as acquired:
        return not acquired


# --- publishing ------------------------------------------------------------------------------
def publish(version: str, *, keep: int | None = None) -> str | None:
    """Make ``version`` the one readers see; return the previously published version.

    Only a completely built, not rejected version can be published. Old versions beyond
    ``keep`` (default ``$TOPIC_LINEAGE_KEEP_VERSIONS`` or 5) are removed, never the current one.
    """
    manifest = read_manifest(version)
    status = manifest.get("status")
    if status not in PUBLISHABLE:
        raise WarehouseError(
            f"version {version!r} has status {status!r} and cannot be published"
            + (f" ({manifest.get('rejected_reason')})" if status == REJECTED else "")
        )
    for table in t.TABLES:
        if not version_path(version, table).is_dir():
            raise WarehouseError(f"version {version!r} lacks table {table}; build it again")
    with _flock("publish", blocking=True):
        previous = current_version()
        pointer = t.current_pointer()
        tmp = pointer.parent / f".CURRENT.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as handle:
            handle.write(version + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        fault_point("publish")  # fault suite: pointer written, not renamed (topic_lineage/faults.py)
        replace_durably(tmp, pointer)
        if status != PUBLISHED:
            set_status(version, PUBLISHED)
        write_init_sql(version)
        apply_retention(keep)
    log.info("published version %s (previous: %s)", version, previous)
    return previous


def apply_retention(keep: int | None = None) -> list[str]:
    """Remove all but the newest ``keep`` versions (never the current one, never a running
    build's); return the removed names."""
    keep = keep if keep is not None else int(os.environ.get(KEEP_ENV, DEFAULT_KEEP))
    keep = max(keep, 1)
    current = current_version()
    running = _build_running()
    versions = list_versions()
    removable = [
        m["version"] for m in versions
        if m["version"] != current and not (m.get("status") == BUILDING and running)
    ]
    excess = len(versions) - keep
    removed = []
    for name in removable[: max(excess, 0)]:
        shutil.rmtree(version_dir(name), ignore_errors=True)
        removed.append(name)
    if removed:
        log.info("retention removed version(s) %s", ", ".join(removed))
    return removed


# --- Spark SQL access ------------------------------------------------------------------------
def _table_statements(version: str) -> list[str]:
    statements = [f"CREATE DATABASE IF NOT EXISTS {t.DATABASE}"]
    for table in t.TABLES:
        columns = t.TABLE_DDL[table].replace(" NOT NULL", "")
        location = str(version_path(version, table)).replace("'", "\\'")
        statements.append(f"DROP TABLE IF EXISTS {t.DATABASE}.{table}")
        statements.append(
            f"CREATE TABLE {t.DATABASE}.{table} ({columns}) USING parquet LOCATION '{location}'"
        )
    statements.append(f"USE {t.DATABASE}")
    return statements


def register_tables(spark, version: str | None = None) -> str:
    """Register the published (or given) version's tables as ``topic_lineage.<table>``.

    Needs a session with the in-memory catalog (the default of topic_lineage.spark.get_spark):
    the tables are external, over the version's immutable files.
    """
    version = version or current_version()
    if version is None:
        raise WarehouseError("nothing is published yet; run 'topic-lineage build' first")
    version_dir(version)  # validates the name
    if not version_path(version, t.TOPIC_INCARNATIONS).is_dir():
        raise WarehouseError(f"version {version!r} has no tables under {version_dir(version)}")
    for statement in _table_statements(version):
        spark.sql(statement)
    return version


def write_init_sql(version: str) -> Path:
    """``warehouse/init.sql``: the statements for ``spark-sql -i`` over ``version``."""
    path = init_sql_path()
    body = (
        f"-- topic-lineage: published version {version}. Generated at publish; run with\n"
        "--   spark-sql --conf spark.sql.catalogImplementation=in-memory "
        "--conf spark.sql.session.timeZone=UTC -i " + str(path) + "\n"
        + "".join(statement + ";\n" for statement in _table_statements(version))
    )
    tmp = path.parent / f".init.sql.{uuid.uuid4().hex}.tmp"
    tmp.write_text(body)
    os.replace(tmp, path)
    return path
