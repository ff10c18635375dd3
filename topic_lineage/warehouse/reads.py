"""What every reader reads: a version's data files, asked of the Iceberg catalog.

The query (both engines), the UI, the gate, ``init.sql``, Spark's views and the OpenLineage
export read a table of a version through :func:`version_files`, which asks the catalog, through
:func:`data_files`, for the files of the ref that holds it: ``main`` when ``main`` holds the
version's rows (our snapshot, or another engine's compaction of it:
:func:`topic_lineage.warehouse.iceberg.main_holds`), else the version's audit branch
``audit-<version>`` (a version being audited, a rejected one, a table a publish that died has not
moved yet). Our own manifest or version folder is never the answer, except for a version built
before the tables were Iceberg tables (its folder is its only record).

So another engine's maintenance of ``main`` (compaction that keeps the rows, expiry of old
snapshots, removal of orphan files) changes nothing readers see; a foreign commit that changes
rows stops every reader of the published version with one line naming its snapshot
(:class:`~topic_lineage.warehouse.iceberg.ForeignCommitError`). A snapshot's files are read once
and kept by snapshot ID (:func:`topic_lineage.warehouse.iceberg.snapshot_files`; a snapshot never
changes), those of our own snapshots as the build recorded them at the commit.
"""

from __future__ import annotations

from topic_lineage import tables as t
from topic_lineage.warehouse import iceberg
from topic_lineage.warehouse import versions as v


def data_files(table: str, ref: str | int, metadata: dict | None = None) -> list[str]:
    """The data files of the snapshot ``ref`` names in ``table`` (a branch: ``main``,
    ``audit-<version>``; or a snapshot ID), as the catalog names them; local paths for files on
    the local disk."""
    metadata = metadata if metadata is not None else iceberg.table_metadata(table)
    if metadata is None:
        raise iceberg.CatalogError(f"table {iceberg.NAMESPACE}.{table} does not exist in Iceberg "
                                   f"catalog {iceberg.catalog_name()!r}")
    snapshot_id = iceberg.ref_snapshot(metadata, ref)
    if snapshot_id is None:
        raise iceberg.CatalogError(f"table {iceberg.NAMESPACE}.{table} has no {ref!r} in Iceberg "
                                   f"catalog {iceberg.catalog_name()!r}")
    return iceberg.snapshot_files(table, snapshot_id, metadata)


def version_ref(version: str, table: str, metadata: dict) -> str | int | None:
    """The ref that holds ``table`` of ``version``: ``main`` when it holds the version's rows,
    else its audit branch, else its snapshot's ID (a branch someone removed); None when the
    catalog has none of it. A foreign commit on ``main`` that changes rows raises
    :class:`~topic_lineage.warehouse.iceberg.ForeignCommitError` when ``main`` held ``version``
    under it (or it cannot tell)."""
    try:
        held = iceberg.main_holds(table, metadata)
    except iceberg.ForeignCommitError as exc:
        if exc.version in (version, None):
            raise
        held = None
    if held is not None and held.version == version:
        return iceberg.MAIN
    branch = iceberg.audit_branch(version)
    if iceberg.ref_snapshot(metadata, branch) is not None:
        return branch
    return iceberg.snapshot_of_version(metadata, version)


def version_files(version: str, table: str) -> list[str]:
    """The data files of ``table`` of ``version``, from the catalog (:func:`version_ref`,
    :func:`data_files`): what every reader reads. A version built before its tables were Iceberg
    tables is read from its folder; one whose snapshot the catalog no longer has is an error."""
    metadata = iceberg.table_metadata(table)
    ref = None if metadata is None else version_ref(version, table, metadata)
    if ref is not None:
        snapshot_id = iceberg.ref_snapshot(metadata, ref)
        recorded = _recorded(version, table, snapshot_id)
        if recorded is not None:
            return recorded
        return data_files(table, ref, metadata)
    manifest = _manifest(version)
    if manifest is not None and (manifest.get(iceberg.SNAPSHOTS_KEY) or {}).get(table) is not None:
        raise iceberg.CatalogError(
            f"version {version} of {iceberg.NAMESPACE}.{table}: its snapshot "
            f"{manifest[iceberg.SNAPSHOTS_KEY][table]} is no longer in Iceberg catalog "
            f"{iceberg.catalog_name()!r} (expired by another engine?) and main does not hold it; "
            "build it again")
    if manifest is None and not v.version_dir(version).is_dir():
        raise v.WarehouseError(f"version {version!r} does not exist in Iceberg catalog "
                               f"{iceberg.catalog_name()!r} nor under {v.version_dir(version)}; "
                               "list versions with 'topic-lineage versions'")
    return folder_files(version, table)


def reads_its_own_files(version: str, table: str, manifest: dict) -> bool:
    """Whether readers of ``table`` of ``version`` read the files its build wrote: the snapshot
    it staged, not another engine's compaction of it (a version the catalog has no snapshot of
    is read from its folder: its own files too)."""
    metadata = iceberg.table_metadata(table)
    ref = None if metadata is None else version_ref(version, table, metadata)
    if ref is None:
        return True
    return iceberg.ref_snapshot(metadata, ref) == (manifest.get(iceberg.SNAPSHOTS_KEY) or {}).get(table)


def _manifest(version: str) -> dict | None:
    """The version's manifest; None without one (tables written and published by hand)."""
    try:
        return v.read_manifest(version)
    except v.WarehouseError:
        return None


_staged: dict[str, tuple[dict, dict]] = {}


def _recorded(version: str, table: str, snapshot_id: int | None) -> list[str] | None:
    """The files of our own snapshot as its build recorded them at the commit (the cache of a
    snapshot's files, written by its writer): None for another snapshot."""
    if snapshot_id is None:
        return None
    if version not in _staged:  # what a staged version's manifest records never changes
        manifest = _manifest(version) or {}
        snapshots, files = manifest.get(iceberg.SNAPSHOTS_KEY) or {}, manifest.get(iceberg.FILES_KEY) or {}
        if not all(x in snapshots and x in files for x in t.TABLES):
            return None
        _staged[version] = (snapshots, files)
    snapshots, files = _staged[version]
    return files[table] if snapshots[table] == snapshot_id else None


def folder_files(version: str, table: str) -> list[str]:
    """A pre-Iceberg version's files: its table folder's Parquet files, skipping hidden and
    ``_``-prefixed paths (``_SUCCESS``, ``.crc``, ``_temporary``: never data)."""
    root = v.version_path(version, table)
    if not root.is_dir():
        return []
    return [str(path) for path in sorted(root.rglob("*.parquet"))
            if not any(part.startswith((".", "_")) for part in path.relative_to(root).parts)]


def snapshot_key(version: str) -> str:
    """What a reader of ``version`` reads, as one text: the snapshot of each table (a reader that
    registered views over them knows when a compaction moved ``main`` under the same version)."""
    parts = [version]
    for table in t.TABLES:
        metadata = iceberg.table_metadata(table)
        ref = None if metadata is None else version_ref(version, table, metadata)
        parts.append(str(None if ref is None else iceberg.ref_snapshot(metadata, ref)))
    return ":".join(parts)


__all__ = ["data_files", "folder_files", "reads_its_own_files", "snapshot_key", "version_files", "version_ref"]
