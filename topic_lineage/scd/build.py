"""The build's I/O edge: plan the derivation, run it as a Spark job, write a new version.

:func:`build_version` is called by :func:`topic_lineage.pipeline.run_build` (the CLI), by the
Airflow ``build`` task on a Spark Connect server, and by ``spark_jobs/build.py``, the thin
``spark-submit`` entry (the Airflow ``build`` task otherwise).

The driver plans and the executors derive: one Spark task per Kafka cluster walks that cluster's
snapshots (:mod:`topic_lineage.scd.walk_job`) and writes its part of the version. Incremental
by default, against the published version (the *base*):

- a cluster without new snapshots keeps the base's files (hard links; with the home on object
  storage, references to the base's objects: nothing is uploaded again): no task;
- a cluster whose new snapshots are all newer than its newest in the base continues the base's
  saved walk with only them (when this code saved it: ``build_code``);
- a *late* snapshot (not newer than the newest its cluster had in the base) makes that cluster
  be walked again from its first snapshot; so does a base without the cluster's walk;
- a snapshot file missing from the store (quarantined), other hold thresholds, or no usable base
  make it a full refresh. ``topic_snapshots`` files of the base are shared the same way.

Either way the rows equal those of ``--full-refresh`` (R5); tests assert it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from topic_lineage import noop, storage
from topic_lineage import tables as t
from topic_lineage import warehouse as wh
from topic_lineage.faults import fault_point
from topic_lineage.scd import walk_job
from topic_lineage.scd.hold import HoldPolicy
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

    seen = store.fingerprint_listing()  # first: a change after it changes it again
    # the Spark tasks read the files where they are: nothing is fetched here
    return {path: size for path, (size, _) in store.snapshot_listing().items()}, seen


def _file_key(relative: str) -> tuple[str, str]:
    """(cluster_id, compact captured_at) of a store path (layout of topic_lineage.store)."""
    parts = Path(relative).parts
    return t.cluster_from_partition(parts[0]), Path(parts[-1]).stem


@dataclass
class _Kept:
    """The files a new version keeps of its base: hard links in the working copy and, with the
    home on object storage, references (``wh.REFERENCES``: where the base's file is stored), so
    that no kept file is uploaded again. Base files are immutable, so sharing them is safe."""

    version: str
    base: str | None
    base_references: dict[str, str]
    references: dict[str, str] = field(default_factory=dict)
    recorded: int = 0

    def file(self, source: Path, target: Path) -> None:
        """Keep the base's file ``source`` as the version's ``target``."""
        stored = self.stored(source)
        if storage.home().keep(stored, target):  # a reference, not a link: the manifest names it
            name = target.relative_to(wh.version_dir(self.version)).as_posix()
            self.references[name] = stored.relative_to(t.versions_dir()).as_posix()

    def record(self) -> None:
        """Name the references made since the last call in the version's manifest (before its
        files are pushed: ``wh.push_version`` uploads none of them)."""
        if len(self.references) > self.recorded:
            wh.record_references(self.version, self.references)
            self.recorded = len(self.references)

    def files(self, source: Path, target: Path) -> None:
        """Keep every Parquet file of the base's directory ``source`` in ``target``."""
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(source.glob("*.parquet")):
            self.file(path, target / path.name)

    def stored(self, path: Path) -> Path:
        """Where the base's file ``path`` is stored (in the working copy's terms)."""
        return wh.stored_path(self.base, path, self.base_references)

    def stored_in_version(self, path: Path) -> Path:
        """Where the new version's file ``path`` is stored: the base's, when the version keeps it
        by reference (how its Iceberg snapshot names it)."""
        return wh.stored_path(self.version, path, self.references)


def _usable_base(base: str | None, policy: HoldPolicy) -> tuple[dict | None, str]:
    """The base's manifest when an incremental build can start from it, else None and why."""
    if base is None:
        return None, "nothing published yet"
    try:
        manifest = wh.read_manifest(base)
    except wh.WarehouseError as exc:
        return None, str(exc)
    if manifest.get("hold_policy") != {"ratio": policy.ratio, "min_count": policy.min_count}:
        return None, "hold thresholds differ from the base version's"
    if not all(wh.version_path(base, x).is_dir() for x in t.TABLES):
        return None, "base version lacks a table"
    gone = _gone_files(base, manifest)
    if gone:
        return None, f"{gone} file(s) of base version {base} are gone (removed by maintenance?)"
    return manifest, ""


def _gone_files(base: str, manifest: dict) -> int:
    """How many of the files the base's snapshots were staged with (our own, which an
    incremental build keeps) are no longer on the local disk: another engine's removal of
    orphan files may take them once the base's snapshots are expired. On object storage the
    working copy fetches what it keeps, and a missing object fails the build clearly."""
    from topic_lineage.warehouse import iceberg

    recorded = manifest.get(iceberg.FILES_KEY) or {}
    return sum(1 for files in recorded.values() for f in files
               if f.startswith("/") and not Path(f).exists())


# --- the build ---------------------------------------------------------------------------------
DERIVATION = "derivation"
"""Manifest key: how the version's incarnations were derived (:data:`WALK_TASKS`)."""
WALK_TASKS = "walk"
"""The derivation: a walk per cluster, each in a Spark task (topic_lineage.scd.walk_job)."""


def build_version(
    spark,
    version_id: str | None = None,
    full_refresh: bool = False,
    *,
    policy: HoldPolicy | None = None,
    base_version: str | None = None,
) -> VersionInfo:
    """Build a new, unpublished version of the tables; return what was built.

    ``base_version`` defaults to the published version. Holds the build lock throughout, and
    pins the base as a reader (retention cannot remove it while it is read).
    """
    with wh.build_lock():
        wh.adopt_legacy()  # a home published before its tables were Iceberg tables
    with wh.build_lock(), wh.reading(base_version) as base:
        return _build(spark, version_id or wh.new_version_id(), full_refresh, policy or hold_policy(),
                      base)


def _build(session, version: str, full_refresh: bool, policy: HoldPolicy, base: str | None) -> VersionInfo:
    """``session``: a SparkSession, or a :class:`~topic_lineage.local.spark_server.StartingSession`
    whose JVM may still be starting (the build plans meanwhile)."""
    started = time.monotonic()
    out = wh.version_dir(version)
    if out.exists():
        raise wh.WarehouseError(f"version {version!r} already exists at {out}; pick another id")

    files, listing = _stored_files()
    manifest, why_full = (None, "--full-refresh") if full_refresh else _usable_base(base, policy)
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
        derived_clusters = None
        input_bytes = sum(files.values())
        log.info("full build of %s: %s", version, why_full)
    else:
        newest = manifest.get("cluster_newest", {})
        late = {c for c, stamp in map(_file_key, new_files) if c in newest and stamp <= newest[c]}
        recomputed = sorted(late)
        derived_clusters = {_file_key(r)[0] for r in new_files}
        input_bytes = sum(files[r] for r in files if _file_key(r)[0] in derived_clusters)
        log.info("incremental build of %s on %s: %d new file(s), late clusters: %s",
                 version, base, len(new_files), recomputed or "none")
    # The driver plans (before Spark is needed: the JVM may still be starting); the executors
    # walk, one task per cluster with something to derive.
    kept = _Kept(version, None if manifest is None else base, (manifest or {}).get(wh.REFERENCES) or {})
    tasks, walked_again = _plan_walks(version, files, new_files, manifest, derived_clusters, policy,
                                      kept, out, group_files)
    kept.record()
    recomputed = sorted({*recomputed, *walked_again}) if manifest is not None else recomputed
    spark = session() if callable(session) else session
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    # Little input: settings for Spark's fixed costs, not for data (topic_lineage.spark.sized_for).
    early = _Beside(lambda: {t.TOPIC_SNAPSHOTS: _topic_snapshots_files(version, out, kept)})
    with sized_for(spark, input_bytes) as small_input:
        job_started = time.monotonic()
        summaries = walk_job.run(spark, tasks, beside_walks=early)
        job_seconds = round(time.monotonic() - job_started, 3)
        wh.fetch_version(version)  # on object storage: the parts the tasks wrote there
        fault_point("write")  # fault suite: tables half written (topic_lineage/faults.py)
        for table in t.TABLES:
            if not any((out / table).glob("*.parquet")):  # no cluster (with groups) at all: empty
                _write_empty(out / table, t.TABLE_DDL[table])

        counts = {table: _row_count(out / table) for table in t.TABLES}
        newest = _newest_per_cluster(out / t.SNAPSHOT_RUNS)
    from topic_lineage.snapshot import compact_timestamp
    from topic_lineage.warehouse import iceberg

    # write-audit-publish: every table's files become one snapshot on the version's audit
    # branch; main does not move until the version is published
    staging = time.monotonic()
    wh.push_version(version)  # with the home on object storage: the files the snapshots name
    staged = iceberg.stage(version, {table: out / table for table in t.TABLES},
                           kept.stored_in_version, prepared=(prepared := early.result()))
    stage_seconds = round(time.monotonic() - staging, 3)
    mode = "full" if manifest is None else "incremental"
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
        derivation=WALK_TASKS, walk_job_seconds=job_seconds,
        **staged, iceberg_stage_seconds=stage_seconds,
        iceberg_read_beside_walks=sorted(prepared),  # tables whose files were read during the walk pass
        # where each cluster's walk ran: its task's executor, worker process and time
        walk_tasks={s["cluster_id"]: {k: v for k, v in s.items() if k not in ("cluster_id", "error_path", "error")}
                    for s in summaries},
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


class _Beside:
    """``work()`` run once by the walk job in a thread of the driver while its walk pass runs
    (the driver only waits then: one core is free on ``local[2]``, and on ``local[1]`` the
    machine's other); :meth:`result` is what it returned (``{}`` when it never ran), or raises
    what it raised."""

    def __init__(self, work):
        self.work, self.value, self.error = work, {}, None

    def __call__(self) -> None:
        try:
            self.value = self.work()
        except Exception as exc:  # noqa: BLE001 - raised by result(), in the build's thread
            self.error = exc

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value


def _topic_snapshots_files(version: str, out: Path, kept: _Kept):
    """``topic_snapshots``' files of the version as Iceberg data files (their footers read for
    statistics: 0.6 s of 10 M observations' 40 files, the larger part of staging): every one
    was written by the walk job's first pass, so this runs beside its second
    (:func:`topic_lineage.scd.walk_job.run`), and :func:`iceberg.stage` only commits them."""
    from topic_lineage.warehouse import iceberg

    wh.fetch_version(version, t.TOPIC_SNAPSHOTS)  # on object storage: the files the tasks wrote
    return iceberg.files_of(version, t.TOPIC_SNAPSHOTS, out / t.TOPIC_SNAPSHOTS, kept.stored_in_version)


def _plan_walks(version: str, files: dict[str, int], new_files: list[str], manifest: dict | None,
                clusters: set[str] | None, policy: HoldPolicy, kept: _Kept, out: Path,
                group_files: dict[str, int]) -> tuple[list[walk_job.ClusterTask], set[str]]:
    """The walk job's tasks, and the clusters walked again from their first snapshot because
    the base has no part of theirs. Links what the version keeps of the base: every
    ``topic_snapshots`` file, and the files of each cluster with nothing new.

    ``clusters``: those with new snapshots (None: a full build, every cluster). A cluster whose
    new snapshots are all newer than its newest in the base continues the base's saved walk
    with only them, when the base saved one with this code (``build_code``); the task walks the
    whole history when the saved walk cannot be loaded. The store is read by the tasks one
    snapshot file at a time, so a task's memory is its walk's state, not the store.

    A walked cluster's task derives its group rows again from every stored group file of the
    cluster (``group_files``): they read its final incarnations (R8). A kept cluster keeps the
    base's group rows too; it is walked again when the base has none of its own for it (a base
    whose group tables were written whole, by an earlier build).
    """
    by_cluster: dict[str, list[str]] = {}
    for relative in sorted(files, key=_file_key):
        by_cluster.setdefault(_file_key(relative)[0], []).append(relative)
    new = set(new_files)
    newest = (manifest or {}).get("cluster_newest", {})
    same_code = manifest is not None and manifest.get("build_code") == noop.code_digest()
    base, base_dir = kept.base, None if kept.base is None else wh.version_dir(kept.base)
    states = out / wh.WALK_STATE
    states.mkdir()
    for table in t.TABLES:
        (out / table).mkdir()
    grouped: dict[str, list[str]] = {}
    for relative in sorted(group_files, key=_file_key):
        grouped.setdefault(_file_key(relative)[0], []).append(_file_key(relative)[1])
    group_root = t.group_snapshots_dir()
    if base_dir is not None:
        kept.files(base_dir / t.TOPIC_SNAPSHOTS, out / t.TOPIC_SNAPSHOTS)
    root = t.snapshots_dir()
    tasks, walked_again = [], set()
    for cluster_id, relatives in sorted(by_cluster.items()):
        base_state = None if base_dir is None else walk_job.state_file(base_dir / wh.WALK_STATE, cluster_id)
        base_parts = [] if base_dir is None else [
            base_dir / table / walk_job.part_name(cluster_id, base)
            for table in (t.SNAPSHOT_RUNS, t.TOPIC_INCARNATIONS)]
        if cluster_id in grouped:  # and its group rows, when it has group files
            base_parts += [] if base_dir is None else [
                base_dir / table / walk_job.part_name(cluster_id, base) for table in t.GROUP_TABLES]
        has_base_parts = bool(base_parts) and base_state.exists() and all(p.exists() for p in base_parts)
        if clusters is not None and cluster_id not in clusters:
            if has_base_parts:  # nothing new: the base's part of this cluster is this version's
                for part in base_parts:
                    kept.file(part, out / part.parent.name / walk_job.part_name(cluster_id, version))
                kept.file(base_state, walk_job.state_file(states, cluster_id))
                continue
            walked_again.add(cluster_id)
        continues = (same_code and has_base_parts and cluster_id in newest
                     and all(_file_key(r)[1] > newest[cluster_id] for r in relatives if r in new))
        # new to this version: the files after the base's newest, and the late ones
        new_after = newest.get(cluster_id, "") if manifest is not None else ""
        paths = tuple(_task_name(root / r) for r in relatives)
        tasks.append(walk_job.ClusterTask(
            cluster_id=cluster_id,
            span=walk_job.Span.of(_task_name(root / t.cluster_partition(cluster_id)),
                                  [_file_key(r)[1] for r in relatives]),
            new_after=new_after,
            late=tuple(_file_key(r)[1] for r in relatives if r in new and _file_key(r)[1] <= new_after),
            paths=paths,
            base_state=_task_name(kept.stored(base_state)) if continues else None,
            continue_after=sum(1 for r in relatives if r not in new) if continues else 0,
            version=version, out=_task_name(out),
            state_out=_task_name(walk_job.state_file(states, cluster_id)),
            policy=policy,
            input_bytes=sum(files[r] for r in relatives if not continues or r in new),
            observation_rows=walk_job.OBSERVATION_ROWS,
            home=storage.home().url,
            groups=(walk_job.Span.of(_task_name(group_root / t.cluster_partition(cluster_id)), grouped[cluster_id])
                    if cluster_id in grouped else None),
        ))
    return tasks, walked_again


def _task_name(path: Path) -> str:
    """How a Spark task (a walk task, or Spark's own reader and writer) names a file of the
    home: its path, or with the home on object storage its object's URL. Tasks read the store
    and write the version through the object store, so executors need no disk in common with
    the driver or each other (Spark's own readers and writers through S3A: topic_lineage.spark)."""
    return storage.home().engine_name(path)


# --- consumer lineage (contract R8-R10) -----------------------------------------------------
def _stored_group_files(files: dict[str, int]) -> dict[str, int]:
    """Relative path -> size of the stored consumer-group file of each stored snapshot that has
    one (a group file without its snapshot file is debris of a crashed store: never read)."""
    from topic_lineage import store

    return store.group_listing(files)


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
