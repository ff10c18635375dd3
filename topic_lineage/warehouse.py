"""Versions of the published tables, and the one pointer readers follow (write-audit-publish, R7).

Every build writes a new directory ``versions/<version>/`` holding one sub-directory of Parquet
files per table (every contract column is inside the files; nothing lives only in directory
names), an internal ``_state/`` table used by the next incremental build, and ``manifest.json``
saying what the version is (status, snapshots it includes, mode, row counts). Nothing in a version
directory is modified after it is built, except its manifest's status.

``CURRENT`` names the published version and is replaced atomically and durably
(:func:`topic_lineage.fsutil.replacing`), so a reader sees the previous or the new version, never a mix. A killed build
leaves only an unpublished directory behind (status ``building``); retention removes it later.

Only a version the quality gate passed is published (:func:`publish`, the one function that
changes ``CURRENT``; ``--force --reason`` overrides the gate and is recorded in the manifest).

Spark SQL access (:func:`register_tables`) uses an in-memory catalog with read-only views over
the published version's files: no metastore database, so any number of readers can run while a
build writes the next version. :func:`write_init_sql` writes the same statements for
``spark-sql -i``. Readers pin the version they read (:func:`reading`); retention skips pinned
versions.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.faults import fault_point
from topic_lineage.fsutil import file_lock, replacing, write_durably

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
STATE_TABLE = "_state"
KEEP_ENV = "TOPIC_LINEAGE_KEEP_VERSIONS"
DEFAULT_KEEP = 5

BUILDING, BUILT, VALIDATED, PUBLISHED, REJECTED = (
    "building", "built", "validated", "published", "rejected",
)


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
    write_durably(version_dir(version) / MANIFEST,
                  json.dumps(manifest, indent=2, sort_keys=True, default=str))


def set_status(version: str, status: str, **extra: Any) -> dict:
    manifest = read_manifest(version)
    manifest["status"] = status
    manifest.setdefault("history", []).append(
        {"status": status, "at": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
    )
    manifest.update(extra)
    write_manifest(version, manifest)
    return manifest


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
def _lock_path(name: str) -> Path:
    return t.locks_dir() / f"{name}.lock"


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Held for the whole of a build: a second build at the same time fails at once."""
    with file_lock(_lock_path("build"), blocking=False) as acquired:
        if not acquired:
            raise BuildLockedError(
                f"another build is running (lock {t.locks_dir() / 'build.lock'}); wait for it to "
                "finish and run the build again"
            )
        yield


def _build_running() -> bool:
    with file_lock(_lock_path("build"), blocking=False) as acquired:
        return not acquired


# --- the gate's verdict ----------------------------------------------------------------------
def gate_passed(manifest: dict) -> bool:
    """Whether the quality gate passed this version (its last verdict had no critical failure).

    Manifests written before verdicts were recorded count as passed only with status
    ``validated`` (the status the gate alone gave).
    """
    gate = manifest.get("gate")
    if gate is None:
        return manifest.get("status") == VALIDATED
    return gate.get("passed") is True


def record_verdict(
    version: str, *, passed: bool, warnings: list[str], failures: list[str], report: str = "",
    details: dict | None = None,
) -> dict:
    """Store the quality gate's verdict in the version's manifest (called by the gate only).

    A built version becomes ``validated`` (no critical failure; warnings allowed) or
    ``rejected``; a published version keeps its status, and a version still being built is
    left alone. The verdict (``gate``: passed, warnings, failures, at) is what :func:`publish`
    checks; ``details`` are stored with it (the gate's suite fingerprint and what it read).
    """
    if not (version_dir(version) / MANIFEST).exists():
        log.info("version %s has no manifest: its verdict is not recorded", version)
        return {}  # tables written by hand (tests, tools): never publishable anyway
    with file_lock(_lock_path("publish")):
        manifest = read_manifest(version)
        status = manifest.get("status")
        verdict = {"passed": bool(passed), "warnings": list(warnings), "failures": list(failures),
                   "at": _now(), **(details or {})}
        if status in (BUILT, VALIDATED, REJECTED):
            if passed:
                manifest = set_status(version, VALIDATED, gate=verdict)
                manifest.pop("rejected_reason", None)
                write_manifest(version, manifest)
            else:
                manifest = set_status(version, REJECTED, gate=verdict,
                                      rejected_reason=report or "; ".join(failures))
        elif status == PUBLISHED:
            manifest["gate"] = verdict
            write_manifest(version, manifest)
        return manifest


# --- publishing ------------------------------------------------------------------------------
class PublishRefused(WarehouseError):
    """A version may not be published (the gate has not passed it, or it is incomplete);
    nothing changed. Exit status 3 wherever it happens."""

    exit_code = 3


@dataclass(frozen=True)
class PublishDecision:
    publish: bool
    reason: str


@dataclass(frozen=True)
class PublishOutcome:
    """What :func:`publish` did: ``published`` False means the pointer was left as it was."""

    version: str
    published: bool
    previous: str | None
    reason: str
    forced: bool = False

    def __str__(self) -> str:
        if not self.published:
            return f"not published {self.version}: {self.reason}"
        return (f"published {self.version}" + (" (FORCED past the quality gate)" if self.forced else "")
                + f" (previous: {self.previous})")


def version_inputs(version: str | None) -> set[str] | None:
    """The snapshot files a built version was derived from (from its manifest)."""
    if version is None:
        return None
    try:
        files = read_manifest(version).get("snapshot_files")
    except WarehouseError:
        return None
    return set(files) if files is not None else None


def decide_publish(
    candidate: str, candidate_inputs: set[str] | None, current: str | None,
    current_inputs: set[str] | None,
) -> PublishDecision:
    """Whether an automatic publish (build, Airflow) replaces ``current`` with ``candidate``.

    The tables are a pure function of the set of snapshots (R5), so builds over the same set are
    interchangeable and a build over a superset supersedes. Refusing the strict-subset case
    keeps a slow run (a backfill) from replacing a newer build, in whatever order runs finish.
    """
    if current is None:
        return PublishDecision(True, "nothing is published yet")
    if current == candidate:
        return PublishDecision(False, f"version {candidate} is already published")
    if candidate_inputs is None or current_inputs is None:
        return PublishDecision(True, f"no recorded inputs to compare with {current}; publishing")
    if candidate_inputs < current_inputs:
        return PublishDecision(
            False,
            f"published version {current} was built over {len(current_inputs)} snapshot(s), a "
            f"superset of this version's {len(candidate_inputs)}; keeping it",
        )
    if candidate_inputs == current_inputs:
        return PublishDecision(
            False,
            f"published version {current} was built over the same {len(current_inputs)} "
            "snapshot(s); its tables are identical (R5), keeping it",
        )
    return PublishDecision(True, f"built over {len(candidate_inputs)} snapshot(s); publishing")


def _refusal(version: str, manifest: dict) -> str | None:
    """Why ``version`` may not be published without --force (None: it may)."""
    status = manifest.get("status")
    if gate_passed(manifest):
        return None
    gate = manifest.get("gate") or {}
    if status == REJECTED or gate.get("passed") is False:
        failed = "; ".join(gate.get("failures") or []) or manifest.get("rejected_reason") or "see Data Docs"
        why = f"the quality gate rejected it ({failed})"
    else:
        why = f"the quality gate has not passed it (status {status!r})"
    return (
        f"version {version!r} cannot be published: {why}. Validate it with 'topic-lineage validate "
        f"--version {version}', or publish it anyway with 'topic-lineage publish {version} --force "
        "--reason TEXT' (recorded in its manifest)"
    )


def publish(
    version: str,
    *,
    automatic: bool = False,
    force_reason: str | None = None,
    forced_by: str | None = None,
    keep: int | None = None,
) -> PublishOutcome:
    """The one way to change the published version (``CURRENT``); everything that publishes
    calls this: ``topic-lineage build`` and ``publish``, ``spark_jobs/build.py --publish``, the
    Airflow ``publish`` task.

    Under the publish lock, it checks and performs:

    - the version is completely built (status not ``building``, every table present);
    - the quality gate passed it (:func:`gate_passed`), unless ``force_reason`` is given: then it
      is published anyway and the override (reason, who, when, the gate's verdict) is appended to
      its manifest's ``forced`` list;
    - ``automatic`` (builds and Airflow, not a user naming a version): :func:`decide_publish`
      may keep the published version (it was built over more or the same snapshots); the
      outcome then says so and nothing changes.

    Then the pointer is replaced atomically, ``init.sql`` rewritten, and retention applied
    (``keep``, default ``$TOPIC_LINEAGE_KEEP_VERSIONS`` or 5; never the current version, a
    running build's, or one a reader has pinned).
    """
    if force_reason is not None and not force_reason.strip():
        raise PublishRefused("--force needs a --reason saying why the gate is overridden")
    with file_lock(_lock_path("publish")):
        manifest = read_manifest(version)
        status = manifest.get("status")
        if status == BUILDING:
            raise PublishRefused(
                f"version {version!r} is not completely built (status 'building'); build again"
            )
        for table in t.TABLES:
            if not version_path(version, table).is_dir():
                raise PublishRefused(f"version {version!r} lacks table {table}; build it again")
        refusal = _refusal(version, manifest)
        if refusal is not None and force_reason is None:
            raise PublishRefused(refusal)
        previous = current_version()
        reason = "passed the quality gate"
        if automatic:
            decision = decide_publish(version, version_inputs(version), previous,
                                      version_inputs(previous))
            if not decision.publish:
                log.info("not publishing %s: %s", version, decision.reason)
                return PublishOutcome(version, False, previous, decision.reason)
            reason = decision.reason
        forced = None
        if refusal is not None:
            forced = {"reason": force_reason.strip(), "by": forced_by or _user(), "at": _now(),
                      "status_before": status, "gate": manifest.get("gate")}
            reason = f"FORCED past the quality gate: {force_reason.strip()}"
            log.warning("publishing %s past the quality gate (%s): %s", version, refusal, force_reason)
        with replacing(t.current_pointer()) as tmp:
            tmp.write_text(version + "\n")
            fault_point("publish")  # fault suite: pointer written, not renamed (topic_lineage/faults.py)
        if forced is not None:
            set_status(version, PUBLISHED, forced=[*manifest.get("forced", []), forced])
        elif status != PUBLISHED:
            set_status(version, PUBLISHED)
        write_init_sql(version)
        apply_retention(keep)
    log.info("published version %s (previous: %s): %s", version, previous, reason)
    return PublishOutcome(version, True, previous, reason, forced=forced is not None)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers): the uid says who
        return f"uid {os.getuid()}"


# --- readers and retention -------------------------------------------------------------------
def _reader_lock(version: str) -> Path:
    return t.locks_dir() / "readers" / f"{version}.lock"


@contextlib.contextmanager
def reading(version: str | None = None) -> Iterator[str | None]:
    """Pin a version for the duration of a read; yield its name (None: nothing is published).

    Without ``version``, the published one. The pin is a shared lock on
    ``locks/readers/<version>.lock``; retention skips a version while any reader holds it, so a
    query or UI request that started on a version finishes on it even if a publish moves the
    pointer on meanwhile (the next retention removes it).
    """
    while True:
        name = version or current_version()
        if name is None:
            yield None
            return
        version_dir(name)  # validates the name
        with file_lock(_reader_lock(name), shared=True):
            # Missing yet still named: not retention (it never removes the current version
            # or a named one being read); the caller reports it.
            if version_dir(name).is_dir() or version is not None or current_version() == name:
                yield name
                return
        # retention removed the version between reading the pointer and pinning it: the
        # pointer names a newer one now


def _remove_unless_read(name: str) -> bool:
    path = _reader_lock(name)
    with file_lock(path, blocking=False) as acquired:
        if not acquired:
            return False
        shutil.rmtree(version_dir(name), ignore_errors=True)
        path.unlink(missing_ok=True)
    return True


def apply_retention(keep: int | None = None) -> list[str]:
    """Remove all but the newest ``keep`` versions (never the current one, never a running
    build's, never one a reader has pinned with :func:`reading`); return the removed names."""
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
    removed, in_use = [], []
    for name in removable[: max(excess, 0)]:
        (removed if _remove_unless_read(name) else in_use).append(name)
    if removed:
        log.info("retention removed version(s) %s", ", ".join(removed))
    if in_use:
        log.info("retention kept version(s) %s: a reader is using them", ", ".join(in_use))
    return removed

# --- Spark SQL access (read-only) ------------------------------------------------------------
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
    """``SELECT`` of one table's contract columns straight from the version's Parquet files."""
    columns = []
    for part in t.TABLE_DDL[table].split(","):
        name, kind = part.split()[:2]
        columns.append(f"CAST(`{name}` AS {kind}) AS `{name}`")
    path = version_path(version, table)
    if not path.is_dir():
        # a version built before the table existed (the consumer-lineage tables): no rows
        empty = [f"CAST(NULL AS {part.split()[1]}) AS `{part.split()[0]}`"
                 for part in t.TABLE_DDL[table].split(",")]
        return f"SELECT {', '.join(empty)} WHERE false"
    location = str(path).replace("`", "``")
    return f"SELECT {', '.join(columns)} FROM parquet.`{location}`"


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
    if not version_path(version, t.TOPIC_INCARNATIONS).is_dir():
        raise WarehouseError(f"version {version!r} has no tables under {version_dir(version)}")
    for statement in _table_statements(version):
        spark.sql(statement)
    return version


def write_init_sql(version: str) -> Path:
    """``warehouse/init.sql``: the statements for ``spark-sql -i`` over ``version`` (read-only
    views over the version's files)."""
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
    write_durably(path, body)
    return path
