"""Versions of the published tables, and the one pointer readers follow (write-audit-publish, R7).

Every build writes a new directory ``versions/<version>/`` holding one sub-directory of Parquet
files per table (every contract column is inside the files; nothing lives only in directory
names), ``_walk_state/`` (each cluster's saved walk, which the next incremental build continues), and ``manifest.json``
saying what the version is (status, snapshots it includes, mode, row counts). Nothing in a version
directory is modified after it is built, except its manifest's status.

The tables are Iceberg tables (:mod:`~topic_lineage.warehouse.iceberg`): a build stages each
table's files as a snapshot on its version's audit branch, and publishing moves ``main`` of each
table to it, ``topic_incarnations`` last; that table's ``main`` names the published version and
readers read every table at that version's snapshots, so a reader sees the previous or the new
version, never a mix. A killed build leaves only an unpublished directory and branch behind
(status ``building``); retention removes them later.

Only a version the quality gate passed is published (:func:`publish`, the one function that
moves ``main``; ``--force --reason`` overrides the gate and is recorded in the manifest).

Spark SQL access (:func:`register_tables`) uses an in-memory catalog with read-only views over
the published version's files: no metastore database, so any number of readers can run while a
build writes the next version. :func:`write_init_sql` writes the same statements for
``spark-sql -i``. Readers pin the version they read (:func:`reading`); retention skips pinned
versions.

The package, by seam: :mod:`~topic_lineage.warehouse.versions` (paths, names, manifests, the
pointer), :mod:`~topic_lineage.warehouse.reads` (the files every reader reads, asked of the
catalog), :mod:`~topic_lineage.warehouse.locks` (build and publish locks, readers pinning),
:mod:`~topic_lineage.warehouse.publish` (verdicts, the publish decision, :func:`publish`,
retention) and :mod:`~topic_lineage.warehouse.sql` (Spark views, ``init.sql``, the read-only
check). Use it as ``from topic_lineage import warehouse as wh``; every name below is re-exported.
"""

from topic_lineage.warehouse.locks import BuildLockedError, build_lock, reading, refuse_if_building
from topic_lineage.warehouse.publish import (
    PublishDecision,
    PublishOutcome,
    PublishRefused,
    adopt_legacy,
    apply_retention,
    decide_publish,
    gate_passed,
    publish,
    record_verdict,
    refresh_init_sql,
    version_derivation,
    version_inputs,
)
from topic_lineage.warehouse.sql import (
    QueryRefused,
    check_read_only,
    register_tables,
    write_init_sql,
)
from topic_lineage.warehouse.versions import (
    BUILDING,
    BUILT,
    DEFAULT_KEEP,
    KEEP_ENV,
    MANIFEST,
    PUBLISHED,
    REFERENCES,
    REJECTED,
    VALIDATED,
    WALK_STATE,
    WarehouseError,
    current_version,
    fetch_version,
    file_names,
    init_sql_path,
    list_versions,
    new_version_id,
    push_version,
    read_manifest,
    record_references,
    set_status,
    stored_path,
    version_dir,
    version_path,
    write_manifest,
)

__all__ = [
    "BUILDING",
    "BUILT",
    "DEFAULT_KEEP",
    "KEEP_ENV",
    "MANIFEST",
    "PUBLISHED",
    "REFERENCES",
    "REJECTED",
    "VALIDATED",
    "WALK_STATE",
    "BuildLockedError",
    "PublishDecision",
    "PublishOutcome",
    "PublishRefused",
    "QueryRefused",
    "WarehouseError",
    "adopt_legacy",
    "apply_retention",
    "build_lock",
    "check_read_only",
    "current_version",
    "decide_publish",
    "fetch_version",
    "file_names",
    "gate_passed",
    "init_sql_path",
    "list_versions",
    "new_version_id",
    "publish",
    "push_version",
    "read_manifest",
    "reading",
    "record_references",
    "record_verdict",
    "refresh_init_sql",
    "refuse_if_building",
    "register_tables",
    "set_status",
    "stored_path",
    "version_derivation",
    "version_dir",
    "version_inputs",
    "version_path",
    "write_init_sql",
    "write_manifest",
]
