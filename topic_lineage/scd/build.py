"""The build's I/O edge: read the snapshot store, run the transforms, write a new version.

:func:`build_version` is called by :func:`topic_lineage.pipeline.run_build` (the CLI), by the
Airflow ``build`` task on a Spark Connect server, and by ``spark_jobs/build.py``, the thin
``spark-submit`` entry (the Airflow ``build`` task otherwise).

Incremental by default, against the published version (the *base*):

- snapshot files not in the base are the new input; the base's ``_state`` (each identity's and
  name's last observation) seeds the derivation, so the work is proportional to the live
  incarnations plus the new snapshots, not to the history;
- a *late* snapshot (not newer than the newest its cluster had in the base) makes that whole
  cluster be recomputed from the store; other clusters stay incremental;
- a snapshot file missing from the store (quarantined), other hold thresholds, or no usable base
  make it a full refresh. ``topic_snapshots`` files of the base are shared by hard links.

Either way the rows equal those of ``--full-refresh`` (R5); tests assert it.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import functions as F

from topic_lineage import noop
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.faults import fault_point
from topic_lineage.fsutil import files_bytes
from topic_lineage.scd import groups, walk
from topic_lineage.scd import incarnations as inc
from topic_lineage.spark import sized_for

log = logging.getLogger("topic_lineage.build")

hold_policy = noop.hold_policy  # the R3 thresholds of a build (callers import it from here)
HOLD_RATIO_ENV = noop.HOLD_RATIO_ENV
HOLD_MIN_ENV = noop.HOLD_MIN_ENV


@dataclass
class VersionInfo:
    version: str
    mode: str  # "full" or "incremental"
    base_version: str | None
    snapshot_count: int
    new_snapshots: int
    recomputed_clusters: list[str] = field(default_factory=list)
    row_counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def __str__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.row_counts.items())
        return (
            f"version {self.version}: {self.mode} build over {self.snapshot_count} snapshot(s) "
            f"({self.new_snapshots} new) in {self.seconds:.1f}s; {counts}"
        )


# --- the store as files ------------------------------------------------------------------------
def _stored_files() -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """Relative path -> size of every stored snapshot file, and the listing it came from (for
    the no-op fingerprint, topic_lineage.noop)."""
    from topic_lineage import store

    listing = store.snapshot_listing()
    return {path: size for path, (size, _) in listing.items()}, listing


def _file_key(relative: str) -> tuple[str, str]:
    """(cluster_id, compact captured_at) of a store path (layout of topic_lineage.store)."""
    parts = Path(relative).parts
    return t.cluster_from_partition(parts[0]), Path(parts[-1]).stem


def _read_store(spark, relatives: list[str]):
    root = t.snapshots_dir()
    if not relatives:
        return inc.empty_frame(spark, t.SNAPSHOT_STORE_DDL)
    return (
        spark.read.schema(t.SNAPSHOT_STORE_DDL)
        .option("recursiveFileLookup", "true")  # cluster=/date= are not columns
        .parquet(*[str(root / r) for r in relatives])
    )


def _read_arrow(paths, schema):
    """Parquet files as one Arrow table of ``schema`` (read on the driver: the walk's inputs,
    small by definition)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not paths:
        return schema.empty_table()
    return pa.concat_tables([pq.read_table(p, columns=schema.names).cast(schema) for p in paths])


def _frame_of(spark, table, ddl: str):
    """A DataFrame of an Arrow table the walk made, with the DDL's columns and types."""
    return inc.select_ddl(spark.createDataFrame(table), ddl)


def _read_table(spark, version: str, table: str, ddl: str):
    return spark.read.schema(ddl).parquet(str(wh.version_path(version, table)))


def _write_walked_incarnations(spark, table, out: Path) -> None:
    """``topic_incarnations`` of the walk's Arrow table, in one file. ``topic_uuid`` is added
    with pyarrow (:func:`~topic_lineage.topic_id.rfc4122_array`, as the walk's ``topic_snapshots``
    gets it): in Spark (:func:`~topic_lineage.scd.incarnations.with_topic_uuid`) its expression
    took a small build 0.5 s to build over Py4J and made the write twice as long (issue #24)."""
    from topic_lineage.topic_id import rfc4122_array

    table = table.append_column(t.TOPIC_UUID, rfc4122_array(table.column(t.TOPIC_ID)))
    _write(_frame_of(spark, table, t.TOPIC_INCARNATIONS_DDL), out / t.TOPIC_INCARNATIONS, files=1)


def _write(df, path: Path, files: int | None = None) -> None:
    if files is not None:
        df = df.coalesce(files)
    # "error" is "errorifexists" by its other name, the only one Spark Connect accepts
    df.write.mode("error").option("compression", "zstd").parquet(str(path))


def _link_files(source: Path, target: Path) -> int:
    """Share a base table's immutable files with a new version (hard links, copy as fallback)."""
    target.mkdir(parents=True, exist_ok=True)
    linked = 0
    for path in sorted(source.glob("*.parquet")):
        _link_file(path, target / path.name)
        linked += 1
    return linked


def _usable_base(base: str | None, policy: inc.HoldPolicy, *, needs_state: bool = True
                 ) -> tuple[dict | None, str]:
    """The base's manifest when an incremental build can start from it, else None and why.
    ``needs_state``: the set-based derivation continues from the base's ``_state``; the walk
    continues the base's saved walks where it can (:func:`_walk_version`) and needs no
    ``_state``."""
    if base is None:
        return None, "nothing published yet"
    try:
        manifest = wh.read_manifest(base)
    except wh.WarehouseError as exc:
        return None, str(exc)
    if manifest.get("hold_policy") != {"ratio": policy.ratio, "min_count": policy.min_count}:
        return None, "hold thresholds differ from the base version's"
    if needs_state and not wh.version_path(base, wh.STATE_TABLE).is_dir() \
            and manifest.get(DERIVATION) == walk.WALK:
        return None, "the base was derived by the walk, which keeps no set-based incremental state"
    if not all(wh.version_path(base, x).is_dir()
               for x in (*t.TABLES, *((wh.STATE_TABLE,) if needs_state else ()))):
        return None, "base version lacks a table"
    return manifest, ""


# --- the build ---------------------------------------------------------------------------------
DERIVATION = "derivation"
"""Manifest key: how the version's incarnations were derived, ``walk.WALK`` or ``walk.SET_BASED``."""


def build_version(
    spark,
    version_id: str | None = None,
    full_refresh: bool = False,
    *,
    policy: inc.HoldPolicy | None = None,
    base_version: str | None = None,
) -> VersionInfo:
    """Build a new, unpublished version of the tables; return what was built.

    ``base_version`` defaults to the published version. Holds the build lock throughout, and
    pins the base as a reader (retention cannot remove it while it is read).
    """
    with wh.build_lock(), wh.reading(base_version) as base:
        return _build(spark, version_id or wh.new_version_id(), full_refresh, policy or hold_policy(),
                      base)


def _build(session, version: str, full_refresh: bool, policy: inc.HoldPolicy, base: str | None) -> VersionInfo:
    """``session``: a SparkSession, or a :class:`~topic_lineage.local.spark_server.StartingSession`
    whose JVM may still be starting (the walk's inputs are read and walked meanwhile)."""
    started = time.monotonic()
    out = wh.version_dir(version)
    if out.exists():
        raise wh.WarehouseError(f"version {version!r} already exists at {out}; pick another id")

    files, listing = _stored_files()
    # A store up to the walk's limit is derived by the walk (topic_lineage.scd.walk), one
    # snapshot file at a time; a larger one by the set-based Spark derivation, incrementally
    # from the base's state.
    by_walk = walk.walks(sum(files.values()))
    manifest, why_full = (None, "--full-refresh") if full_refresh else _usable_base(
        base, policy, needs_state=not by_walk)
    group_files = _stored_group_files(files)
    if manifest is not None:
        included = manifest.get("snapshot_files", {})
        removed = [r for r, size in included.items() if files.get(r) != size]
        removed_groups = [r for r, size in manifest.get("group_files", {}).items()
                          if group_files.get(r) != size]
        if removed:
            manifest, why_full = None, f"{len(removed)} snapshot file(s) left the store"
        elif removed_groups:
            manifest, why_full = None, f"{len(removed_groups)} consumer-group file(s) changed"
    new_files = sorted(set(files) - set(manifest["snapshot_files"])) if manifest else sorted(files)

    out.mkdir(parents=True)
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    wh.write_manifest(version, {
        "version": version, "status": wh.BUILDING, "created_at": now,
        "base_version": manifest and base, "history": [{"status": wh.BUILDING, "at": now}],
    })

    if manifest is None:
        recomputed = sorted({_file_key(r)[0] for r in files})
        input_bytes = sum(files.values())
    else:
        newest = manifest.get("cluster_newest", {})
        late = {c for c, stamp in map(_file_key, new_files) if c in newest and stamp <= newest[c]}
        touched = {_file_key(r)[0] for r in new_files}
        incremental = touched - late
        recomputed = sorted(late)
        read_files = [r for r in new_files if _file_key(r)[0] in incremental] + [
            r for r in sorted(files) if _file_key(r)[0] in late
        ]
        input_bytes = sum(files[r] for r in {*read_files, *new_files}) + files_bytes(
            *(wh.version_path(base, x) for x in (t.SNAPSHOT_RUNS, t.TOPIC_INCARNATIONS, wh.STATE_TABLE))
        )
    derived_clusters = None if manifest is None or not by_walk else incremental | late
    if by_walk:  # before Spark is needed: the JVM may still be starting
        log.info("%s build of %s by the walk%s", "full" if manifest is None else "incremental",
                 version, f": {why_full}" if manifest is None
                 else f" of {len(derived_clusters)} cluster(s) with new or late snapshots")
        walked = _walk_version(files, new_files, manifest, derived_clusters, policy, base, out)
    spark = session() if callable(session) else session
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    # Little input: settings for Spark's fixed costs, not for data (topic_lineage.spark.sized_for).
    # One table is written in a thread of its own while the rest of the build runs: on a small
    # build Spark's time goes to planning each job on the driver more than to running it, so
    # two jobs overlap well (issue #24). The set-based derivation writes ``topic_snapshots``
    # so, which does not depend on the derivation; the walk (which wrote the observations
    # already) writes ``topic_incarnations`` so, beside ``snapshot_runs``. Leaving the block
    # waits for that write, also when the build fails.
    with sized_for(spark, input_bytes) as small_input, \
            ThreadPoolExecutor(1, thread_name_prefix="build-write-aside") as background:
        if by_walk:
            aside = background.submit(_write_walked_incarnations, spark, walked[1], out)
            runs = _frame_of(spark, walked[0], t.SNAPSHOT_RUNS_DDL)
            incarnations, state, derived = None, None, None
            mode = "full" if manifest is None else "incremental"
        elif manifest is None:
            log.info("full build of %s: %s", version, why_full)
            store_rows = _read_store(spark, sorted(files))
            aside = background.submit(_write, inc.topic_snapshots(store_rows), out / t.TOPIC_SNAPSHOTS)
            derived = inc.derive(store_rows, inc.snapshot_runs_input(store_rows), None, policy)
            runs, incarnations, state = derived.snapshot_runs, derived.topic_incarnations, derived.state
            mode = "full"
        else:
            log.info("incremental build of %s on %s: %d new file(s), late clusters: %s",
                     version, base, len(new_files), recomputed or "none")
            aside = background.submit(_add_observations, spark, base, out, new_files)
            store_rows = _read_store(spark, read_files)
            base_runs = _read_table(spark, base, t.SNAPSHOT_RUNS, t.SNAPSHOT_RUNS_DDL)
            base_state = _read_table(spark, base, wh.STATE_TABLE, inc.STATE_DDL)
            base_inc = _read_table(spark, base, t.TOPIC_INCARNATIONS, t.TOPIC_INCARNATIONS_DDL)
            cluster = F.col(t.CLUSTER_ID)
            in_incremental = cluster.isin(sorted(incremental)) if incremental else F.lit(False)
            in_late = cluster.isin(sorted(late)) if late else F.lit(False)
            # Runs: the base's runs of incremental clusters keep their hold decision; new runs and
            # every run of a recomputed cluster get one now.
            new_runs = inc.snapshot_runs_input(store_rows)
            old_runs = base_runs.filter(in_incremental).withColumn(t.AUTHORITATIVE, F.lit(None).cast("boolean"))
            all_runs = old_runs.select(*t.ddl_columns(inc.RUNS_IN_DDL)).unionByName(new_runs)
            derived = inc.derive(store_rows, all_runs, base_state.filter(in_incremental), policy)
            runs = base_runs.filter(~(in_incremental | in_late)).unionByName(derived.snapshot_runs)
            incarnations = inc.merge_incarnations(base_inc.filter(~in_late), derived.topic_incarnations)
            state = base_state.filter(~(in_incremental | in_late)).unionByName(derived.state)
            mode = "incremental"

        try:
            _write(runs, out / t.SNAPSHOT_RUNS, files=1)
            fault_point("write")  # fault suite: tables half written (topic_lineage/faults.py)
            if incarnations is not None:  # the walk's is written aside
                _write(incarnations, out / t.TOPIC_INCARNATIONS, files=_files_for(incarnations, mode))
            if state is not None:  # the walk saves its own (_walk_state)
                _write(state, out / wh.STATE_TABLE, files=_files_for(state, mode))
        finally:
            if derived is not None:
                derived.unpersist()
        aside.result()  # the write aside: its error is the build's
        _write_group_tables(
            spark, out, group_files,
            recompute=None if manifest is None else incremental | late,
            base=None if manifest is None else base,
        )

        counts = {table: _row_count(out / table) for table in t.TABLES}
        newest = _newest_per_cluster(out / t.SNAPSHOT_RUNS)
    from topic_lineage.snapshot import compact_timestamp

    info = VersionInfo(
        version=version, mode=mode, base_version=manifest and base, snapshot_count=len(files),
        new_snapshots=len(new_files), recomputed_clusters=recomputed, row_counts=counts,
        seconds=round(time.monotonic() - started, 3),
    )
    wh.set_status(
        version, wh.BUILT,
        mode=mode, snapshot_files=files, snapshot_count=len(files), new_snapshots=len(new_files),
        recomputed_clusters=recomputed, row_counts=counts, seconds=info.seconds,
        input_bytes=input_bytes, spark_settings=small_input or "session",
        derivation=walk.WALK if by_walk else walk.SET_BASED,
        hold_policy={"ratio": policy.ratio, "min_count": policy.min_count},
        group_files=group_files,
        cluster_newest={c: compact_timestamp(ts) for c, ts in newest.items()},
        # What the build read, for no-op runs (topic_lineage/noop.py).
        store_fingerprint=noop.fingerprint(listing, policy.ratio, policy.min_count),
        # with hold_policy, what decides the rows besides the snapshots (warehouse.decide_publish)
        build_code=noop.code_digest(),
    )
    log.info("%s", info)
    return info


# --- consumer lineage (contract R8-R10) -----------------------------------------------------
def _stored_group_files(files: dict[str, int]) -> dict[str, int]:
    """Relative path -> size of the stored consumer-group file of each stored snapshot that has
    one (a group file without its snapshot file is debris of a crashed store: never read)."""
    root = t.group_snapshots_dir()
    found = {}
    for relative in files:
        path = root / relative
        if path.is_file():
            found[relative] = path.stat().st_size
    return found


def _write_group_tables(spark, out: Path, group_files: dict[str, int], *,
                        recompute: set[str] | None, base: str | None) -> None:
    """Write ``group_offsets`` and ``group_incarnations`` of the version in ``out``.

    Attribution (R8) reads the version's *final* ``topic_incarnations`` (already written), so a
    cluster whose incarnations were derived again here gets its group rows derived again from
    all its stored group files; ``recompute=None`` (a full build) means every cluster. The rows
    of the other clusters are the base version's, unchanged (their incarnations are). Either
    way the rows are those of a full refresh (R5); tests assert it.
    """
    clusters = None if recompute is None else set(recompute)
    read = [r for r in sorted(group_files) if clusters is None or _file_key(r)[0] in clusters]
    if base is not None and not read:
        # nothing to derive again: the base's group rows are this version's
        for table in t.GROUP_TABLES:
            _link_files(wh.version_path(base, table), out / table)
        return
    if not group_files:
        # no stored group observation at all: both tables empty, without a Spark job
        for table in t.GROUP_TABLES:
            _write_empty(out / table, t.TABLE_DDL[table])
        return

    root = t.group_snapshots_dir()
    cluster = F.col(t.CLUSTER_ID)
    in_scope = F.lit(True) if clusters is None else cluster.isin(sorted(clusters))
    group_rows = (
        spark.read.schema(t.GROUP_STORE_DDL).parquet(*[str(root / r) for r in read])
        if read else inc.empty_frame(spark, t.GROUP_STORE_DDL)
    )
    snapshots = _read_table_files(spark, out / t.TOPIC_SNAPSHOTS, t.TOPIC_SNAPSHOTS_DDL).where(in_scope)
    incarnations = _read_table_files(spark, out / t.TOPIC_INCARNATIONS,
                                     t.TOPIC_INCARNATIONS_DDL).where(in_scope)
    offsets = groups.group_offsets(group_rows, snapshots, incarnations)
    if base is not None:
        kept = _read_table(spark, base, t.GROUP_OFFSETS, t.GROUP_OFFSETS_DDL).where(~in_scope)
        offsets = kept.unionByName(offsets)
    _write(offsets, out / t.GROUP_OFFSETS)
    # group_incarnations from the offsets just written (not derived a second time)
    written = _read_table_files(spark, out / t.GROUP_OFFSETS, t.GROUP_OFFSETS_DDL).where(in_scope)
    per_incarnation = groups.group_incarnations(written, incarnations)
    if base is not None:
        kept = _read_table(spark, base, t.GROUP_INCARNATIONS, t.GROUP_INCARNATIONS_DDL).where(~in_scope)
        per_incarnation = kept.unionByName(per_incarnation)
    _write(per_incarnation, out / t.GROUP_INCARNATIONS)


def _read_table_files(spark, path: Path, ddl: str):
    return spark.read.schema(ddl).parquet(str(path))


def _write_empty(path: Path, ddl: str) -> None:
    """A table with no rows: one Parquet file with the DDL's schema, as Spark would read it."""
    import pyarrow.parquet as pq

    path.mkdir(parents=True, exist_ok=True)  # the walk's observation writer makes its own
    schema = t.arrow_schema_of(ddl)
    pq.write_table(schema.empty_table(), path / "part-00000-empty.zstd.parquet", compression="zstd")


def _row_count(path: Path) -> int:
    """Rows of a written table, from its Parquet footers (no Spark job)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(path.glob("*.parquet")))


def _newest_per_cluster(path: Path) -> dict[str, datetime]:
    """Cluster ID -> its newest ``captured_at`` (UTC) in a written ``snapshot_runs`` (a few rows
    per snapshot, read with pyarrow: no Spark job)."""
    import pyarrow.parquet as pq

    runs = pq.read_table(sorted(path.glob("*.parquet")), columns=[t.CLUSTER_ID, t.CAPTURED_AT])
    newest = runs.group_by(t.CLUSTER_ID).aggregate([(t.CAPTURED_AT, "max")])
    return dict(zip(newest.column(t.CLUSTER_ID).to_pylist(),
                    newest.column(f"{t.CAPTURED_AT}_max").to_pylist(), strict=True))


def _add_observations(spark, base: str, out: Path, new_files: list[str], new_rows=None) -> None:
    """An incremental version's ``topic_snapshots``: the base's files (hard links) and one or a
    few new files with the new snapshots' observations (``new_rows``: their store rows as a
    DataFrame already, else read from the store)."""
    import shutil

    _link_files(wh.version_path(base, t.TOPIC_SNAPSHOTS), out / t.TOPIC_SNAPSHOTS)
    if not new_files:
        return
    new_obs = inc.topic_snapshots(_read_store(spark, new_files) if new_rows is None else new_rows)
    _write(new_obs, out / ".new_topic_snapshots", files=1 if len(new_files) < 50 else None)
    for part in (out / ".new_topic_snapshots").glob("*.parquet"):
        os.replace(part, out / t.TOPIC_SNAPSHOTS / part.name)
    shutil.rmtree(out / ".new_topic_snapshots")


# --- the walk's build ------------------------------------------------------------------------------
_READ_AHEAD = 8
"""Snapshot files read ahead of the walk (in threads: pyarrow decodes without the GIL)."""
_OBSERVATION_ROWS = 1_000_000
"""Observations per ``topic_snapshots`` file a walk's build writes."""


def _walk_version(files: dict[str, int], new_files: list[str], manifest: dict | None,
                  clusters: set[str] | None, policy: inc.HoldPolicy, base: str | None, out: Path):
    """``(snapshot_runs, topic_incarnations)`` (Arrow) of a build by the walk; writes the
    version's ``topic_snapshots`` and its walks' states (``_walk_state``) on the way. No Spark:
    this runs while the JVM starts.

    ``clusters``: those with new or late snapshots (None: a full build, every cluster); the other
    clusters' rows and states are the base's. A cluster whose new snapshots are all newer than
    its newest in the base continues the base's saved walk with only them (when the base saved
    one with this code: ``build_code``); any other derived cluster is walked from its first
    snapshot. The store is read one snapshot file at a time, so memory is the walks' state,
    not the store (issue #24, goal 3).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    by_cluster: dict[str, list[str]] = {}
    for relative in sorted(files, key=_file_key):
        by_cluster.setdefault(_file_key(relative)[0], []).append(relative)
    new = set(new_files)
    newest = (manifest or {}).get("cluster_newest", {})
    same_code = manifest is not None and manifest.get("build_code") == noop.code_digest()
    states = out / wh.WALK_STATE
    states.mkdir()
    walks = []
    with _ObservationWriter(out / t.TOPIC_SNAPSHOTS) as observations:
        if manifest is not None:
            _link_files(wh.version_path(base, t.TOPIC_SNAPSHOTS), out / t.TOPIC_SNAPSHOTS)
        for cluster_id, relatives in sorted(by_cluster.items()):
            state_file = _walk_state_file(states, cluster_id)
            base_state = None if base is None else _walk_state_file(wh.version_dir(base) / wh.WALK_STATE, cluster_id)
            if clusters is not None and cluster_id not in clusters:
                if base_state.exists():
                    _link_file(base_state, state_file)
                continue
            walk_ = None
            if same_code and cluster_id in newest and base_state.exists() and all(
                    _file_key(r)[1] > newest[cluster_id] for r in relatives if r in new):
                walk_ = walk.ClusterWalk.loads(base_state.read_bytes(), cluster_id, policy)
            if walk_ is None:
                walk_ = walk.ClusterWalk(cluster_id, policy)
            else:  # the base's walk goes on with the new snapshots
                relatives = [r for r in relatives if r in new]
            for relative, rows in _read_ahead(relatives):
                if relative in new:
                    observations.add(rows)
                _walk_file(walk_, relative, rows)
            state_file.write_bytes(walk_.dumps())
            walks.append(walk_)
    runs, incarnations = walk.concat(walks)
    if clusters is not None:
        def kept(table: str, columns):
            rows = _read_version_arrow(base, table)
            other = pc.invert(pc.is_in(rows.column(t.CLUSTER_ID), value_set=pa.array(sorted(clusters), pa.string())))
            return rows.filter(other).select(list(columns))

        runs = pa.concat_tables([kept(t.SNAPSHOT_RUNS, walk.RUN_COLUMNS), runs])
        incarnations = pa.concat_tables([kept(t.TOPIC_INCARNATIONS, walk.INCARNATION_COLUMNS), incarnations])
    return runs, incarnations


def _walk_state_file(directory: Path, cluster_id: str) -> Path:
    return directory / f"{t.cluster_partition(cluster_id)}.walk"


def _link_file(source: Path, target: Path) -> None:
    """A hard link (a copy where the file system has none)."""
    try:
        os.link(source, target)
    except OSError:
        import shutil

        shutil.copy2(source, target)


def _read_ahead(relatives: list[str]):
    """``(relative, rows)`` of each snapshot file in order, read :data:`_READ_AHEAD` ahead."""
    from collections import deque

    root = t.snapshots_dir()
    with ThreadPoolExecutor(2, thread_name_prefix="build-read") as pool:
        pending = deque()
        for relative in relatives:
            pending.append((relative, pool.submit(_read_snapshot_file, root / relative)))
            if len(pending) > _READ_AHEAD:
                relative_, rows = pending.popleft()
                yield relative_, rows.result()
        while pending:
            relative_, rows = pending.popleft()
            yield relative_, rows.result()


def _read_snapshot_file(path: Path):
    """A stored snapshot file's rows (the store's schema); a damaged file is a clear error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from topic_lineage.store import CorruptSnapshotFileError

    schema = t.arrow_store_schema()
    try:
        return pq.read_table(path, columns=schema.names).cast(schema)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptSnapshotFileError(path, (str(exc).splitlines() or [type(exc).__name__])[0]) from None


def _walk_file(walk_: walk.ClusterWalk, relative: str, rows) -> None:
    """Walk the snapshot a store file holds (one, its topics in name order: topic_lineage.store)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from topic_lineage.store import CorruptSnapshotFileError

    path = t.snapshots_dir() / relative
    if rows.num_rows == 0:
        raise CorruptSnapshotFileError(path, "no rows")
    instants = rows.column(t.CAPTURED_AT)
    if rows.column(t.CLUSTER_ID).unique().to_pylist() != [walk_.cluster_id] \
            or pc.count_distinct(instants).as_py() != 1:
        raise CorruptSnapshotFileError(path, "holds rows of more than one snapshot, or of another cluster")
    head = rows.slice(0, 1).select(list(walk.SNAPSHOT_COLUMNS)).to_pylist()[0]
    head[t.CAPTURED_AT] = instants.cast(pa.int64())[0].as_py()
    topics = rows.select(list(walk.TOPIC_COLUMNS)).filter(pc.is_valid(rows.column(t.TOPIC_NAME)))
    names = topics.column(t.TOPIC_NAME)
    if len(names) > 1 and not pc.all(pc.less(names.slice(0, len(names) - 1), names.slice(1))).as_py():
        topics = topics.sort_by(t.TOPIC_NAME)
    try:
        walk_.snapshot(head, topics)
    except ValueError as exc:
        raise CorruptSnapshotFileError(path, f"{exc} (its file name gives another time)") from None


class _ObservationWriter:
    """Writes ``topic_snapshots`` from store rows with pyarrow, :data:`_OBSERVATION_ROWS` per
    file, in a thread (a build's observations are copied, not derived: Spark would only add a
    job per table; issue #24)."""

    def __init__(self, path: Path):
        self.path, self.pending, self.rows, self.files = path, [], 0, []
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="build-topic-snapshots")

    def __enter__(self):
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    def add(self, store_rows) -> None:
        self.pending.append(store_rows)
        self.rows += store_rows.num_rows
        if self.rows >= _OBSERVATION_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        writing = [f for f in self.files if not f.done()]
        if len(writing) > 1:  # at most two files in the writing: memory stays bounded
            writing[0].result()
        self.files.append(self.pool.submit(self._write, self.pending))
        self.pending, self.rows = [], 0

    def _write(self, parts: list) -> None:
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from topic_lineage.topic_id import rfc4122_array

        rows = pa.concat_tables(parts)
        rows = rows.filter(pc.is_valid(rows.column(t.TOPIC_NAME)))  # not empty snapshots' markers
        schema = t.arrow_schema_of(t.TOPIC_SNAPSHOTS_DDL)
        columns = {t.TOPIC_UUID: rfc4122_array(rows.column(t.TOPIC_ID))}
        table = pa.Table.from_arrays(
            [columns[f.name] if f.name in columns else rows.column(f.name) for f in schema], schema=schema)
        pq.write_table(table, self.path / f"part-walk-{uuid.uuid4().hex}.zstd.parquet", compression="zstd")

    def __exit__(self, kind, error, trace):
        try:
            if error is None:
                self._flush()
            for written in self.files:
                written.result()
        finally:
            self.pool.shutdown()
        if error is None and not any(self.path.glob("*.parquet")):
            _write_empty(self.path, t.TOPIC_SNAPSHOTS_DDL)
        return False


def _read_version_arrow(version: str, table: str):
    """A table of a built version, with the DDL's schema."""
    return _read_arrow(sorted(wh.version_path(version, table).glob("*.parquet")),
                       t.arrow_schema_of(t.TABLE_DDL[table]))


def _files_for(df, mode: str) -> int | None:
    return 1 if mode == "incremental" else None
