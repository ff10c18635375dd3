"""The derivation as a Spark job: one task per Kafka cluster walks that cluster's snapshots.

The driver plans (:func:`topic_lineage.scd.build._plan_walks`: which files each cluster walks,
and whether it continues the base version's saved walk) and collects one summary row per
cluster; it does no per-observation work. Each task runs :func:`walk_cluster` in a Python
worker on an executor: it reads the cluster's snapshot files in time order, walks them
(:class:`topic_lineage.scd.walk.ClusterWalk`, the rules R1-R6), and writes the cluster's part of
the version itself, with pyarrow:

- ``topic_snapshots``: the observations of the snapshots new to this version;
- ``_walk_state``: the cluster's walk, which the next incremental build continues;
- ``snapshot_runs`` and ``topic_incarnations``: one file each, every row of the cluster.

Why tasks write their own files: a cluster's rows come out of one walk, and Spark would add a
job per table (and a shuffle) to write what one task already holds. Every file is written
whole (:class:`topic_lineage.storage.Home`, built in the task from the home's location),
named by cluster and version, so a retried or speculative task rewrites the same file: the
outputs are the same whichever attempt wins. Executors read the store and write the version
through the home, as the driver does: with the home on object storage they need no disk in
common with the driver or each other.

Why one task per cluster: R1-R6 are a fold per cluster in time order; clusters are independent.
``spark.range(0, n, 1, n)`` gives each cluster a partition of its own (a hash partitioning by
cluster would put several on one task), largest cluster first, so ``local[N]`` or a standalone
cluster's executors walk N clusters at once. One cluster's walk is one task: its speed and memory
are in docs/benchmarks.md.
"""

from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from topic_lineage import tables as t
from topic_lineage.scd import walk
from topic_lineage.scd.hold import HoldPolicy

SUMMARY_DDL = (
    "cluster_id STRING, snapshots BIGINT, first_file STRING, walked BIGINT, continued BOOLEAN, seconds DOUBLE, "
    "host STRING, pid INT, executor STRING, peak_rss_mib DOUBLE, error_path STRING, error STRING"
)
"""What each task reports: its cluster, the snapshot files it walked (how many, the first: the
rest follow it in time order) and their observations, whether it continued a saved walk, where it ran and its worker's peak resident set; or the stored file it
could not read (a clear error for the driver to raise, not a task failure Spark would retry)."""

_READ_AHEAD = 8
"""Snapshot files read ahead of the walk (in threads: pyarrow decodes without the GIL)."""
OBSERVATION_ROWS = 1_000_000
"""Observations per ``topic_snapshots`` file a task writes (planned by the driver: a task's)."""


@dataclass(frozen=True)
class ClusterTask:
    """What one task derives: one cluster's snapshot files, in time order."""

    cluster_id: str
    files: tuple[str, ...]  # every snapshot file of the cluster to walk, as engines name them
    observe: tuple[bool, ...]  # per file: its observations are new to this version
    base_state: str | None  # the base version's saved walk to continue, if this code wrote it
    continue_after: int  # with base_state: files[:continue_after] are walked in it already
    version: str
    out: str  # the version's directory
    state_out: str  # where this version saves the cluster's walk
    policy: HoldPolicy
    input_bytes: int
    observation_rows: int = OBSERVATION_ROWS
    home: str = ""  # the home's location (path or URL) the names above are under


def part_name(cluster_id: str, version: str, suffix: str = "") -> str:
    """The file name of a cluster's part of a table in a version (the same for every attempt)."""
    digest = hashlib.sha256(cluster_id.encode()).hexdigest()[:16]
    return f"part-walk-{digest}-{version}{suffix}.zstd.parquet"


def state_file(directory: Path, cluster_id: str) -> Path:
    return directory / f"{t.cluster_partition(cluster_id)}.walk"


# --- the driver's side -----------------------------------------------------------------------------
def run(spark, tasks: list[ClusterTask]) -> list[dict]:
    """Run one task per cluster; their summaries (``SUMMARY_DDL``), one per cluster. A stored
    snapshot file a task could not read is raised here as the store's error naming it."""
    from topic_lineage.store import CorruptSnapshotFileError

    if not tasks:
        return []
    plan = sorted(tasks, key=lambda task: (-task.input_bytes, task.cluster_id))  # largest first
    job = spark.range(0, len(plan), 1, len(plan)).mapInArrow(partial(_run_tasks, plan), SUMMARY_DDL)
    summaries = job.toArrow().to_pylist()
    if sorted(s["cluster_id"] for s in summaries) != sorted(task.cluster_id for task in plan):
        raise RuntimeError(f"the walk job reported clusters {sorted(s['cluster_id'] for s in summaries)}, "
                           f"planned {sorted(task.cluster_id for task in plan)}")
    for summary in summaries:
        if summary["error_path"] is not None:
            raise CorruptSnapshotFileError(_working_copy_path(summary["error_path"]), summary["error"])
    return summaries


def _working_copy_path(name: str) -> Path:
    """The path a user acts on (``topic-lineage quarantine PATH``) of a file a task named: with
    the home on object storage, its place in the working copy."""
    from topic_lineage import storage

    return storage.home().from_engine_name(name)


def _run_tasks(plan: list[ClusterTask], batches):
    """The job's function (``mapInArrow``): each input row is a task's index in ``plan``."""
    import pyarrow as pa

    schema = t.arrow_schema_of(SUMMARY_DDL)
    for batch in batches:
        for index in batch.column(0).to_pylist():
            summary = walk_cluster(plan[index])
            yield pa.RecordBatch.from_arrays(
                [t.arrow_array([summary[f.name]], f.type) for f in schema], schema=schema)


# --- the task's side -------------------------------------------------------------------------------
def walk_cluster(task: ClusterTask) -> dict:
    """Walk one cluster and write its part of the version (in a task: see the module docstring)."""
    import resource
    import socket

    from topic_lineage import storage
    from topic_lineage.store import CorruptSnapshotFileError

    started = time.monotonic()
    home = storage.at(task.home)
    out = home.name_of(task.out)
    walk_ = None
    if task.base_state is not None:
        walk_ = walk.ClusterWalk.loads(_read(home, task.base_state), task.cluster_id, task.policy)
    first = task.continue_after if walk_ is not None else 0
    if walk_ is None:
        walk_ = walk.ClusterWalk(task.cluster_id, task.policy)
    files, observe = task.files[first:], task.observe[first:]
    cores = _task_cpus()
    summary = {"cluster_id": task.cluster_id, "snapshots": len(files), "first_file": next(iter(files), None),
               "walked": 0,
               "continued": first > 0, "host": socket.gethostname(), "pid": os.getpid(),
               "executor": executor_of_this_worker()[1], "error_path": None, "error": None}
    try:
        with _ObservationWriter(home, f"{out}/{t.TOPIC_SNAPSHOTS}", task, cores) as observations:
            for path, rows, is_new in _read_ahead(home, files, observe, cores):
                if is_new:
                    observations.add(rows)
                summary["walked"] += _walk_file(walk_, path, rows)
    except CorruptSnapshotFileError as exc:
        summary.update(error_path=str(exc.path), error=exc.reason)
    else:
        home.write_bytes(home.name_of(task.state_out), walk_.dumps())
        runs, incarnations = walk_.tables()
        part = part_name(task.cluster_id, task.version)
        home.write_parquet(f"{out}/{t.SNAPSHOT_RUNS}/{part}", runs)
        home.write_parquet(f"{out}/{t.TOPIC_INCARNATIONS}/{part}", _with_topic_uuid(incarnations))
    summary["seconds"] = round(time.monotonic() - started, 3)
    summary["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return summary


def executor_of_this_worker() -> tuple[int | None, str | None]:
    """(pid, executor ID) of the JVM whose Python worker this process is: the nearest ancestor
    started with ``--executor-id`` (an executor backend), else the nearest ``java`` (the driver
    of ``local[N]``, ID ``driver``); (None, None) where there is no /proc to read. Python's
    TaskContext has no executor ID, and executors set no variable naming it."""
    pid, first_java = os.getppid(), None
    try:
        while pid > 1:
            proc = Path("/proc") / str(pid)
            args = (proc / "cmdline").read_bytes().split(b"\0")
            if b"--executor-id" in args:
                return pid, args[args.index(b"--executor-id") + 1].decode()
            if first_java is None and args and args[0].endswith(b"java"):
                first_java = pid
            pid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])  # field 4: ppid
    except (OSError, ValueError, IndexError):
        return None, None
    return (first_java, "driver") if first_java is not None else (None, None)


def _with_topic_uuid(incarnations):
    """``topic_incarnations`` as published: the walk's rows with ``topic_uuid``, in the DDL's
    column order."""
    from topic_lineage.topic_id import rfc4122_array

    uuids = rfc4122_array(incarnations.column(t.TOPIC_ID))
    schema = t.arrow_schema_of(t.TOPIC_INCARNATIONS_DDL)
    return incarnations.append_column(t.TOPIC_UUID, uuids).select(schema.names).cast(schema)


def _read(home, name: str) -> bytes:
    """The whole of a file a task was given by its engine name (a missing one is an error)."""
    data = home.read_bytes(home.name_of(name))
    if data is None:
        raise FileNotFoundError(name)
    return data


def _task_cpus() -> int:
    """The cores Spark gave this task (``spark.task.cpus``, default 1; 1 outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return max(1, context.cpus()) if context is not None else 1


def _read_ahead(home, paths, observe, cores: int):
    """``(path, rows, is_new)`` of each snapshot file in order. A task of one core (Spark's
    default) reads, walks and writes in turn: Spark runs as many tasks at once as it has cores,
    so threads of its own would only take cores from the other clusters' tasks. With more
    (``spark.task.cpus``, for one very large Kafka cluster) it reads :data:`_READ_AHEAD` files
    ahead in two threads (pyarrow decodes without the GIL)."""
    from collections import deque

    import pyarrow as pa

    pa.set_cpu_count(cores)  # pyarrow's own pool (decoding, compute kernels) too
    if cores == 1:
        for path, is_new in zip(paths, observe, strict=True):
            yield path, _read_snapshot_file(home, path, threads=False), is_new
        return
    with ThreadPoolExecutor(2, thread_name_prefix="walk-read") as pool:
        pending = deque()
        for path, is_new in zip(paths, observe, strict=True):
            pending.append((path, pool.submit(_read_snapshot_file, home, path, True), is_new))
            if len(pending) > _READ_AHEAD:
                path_, rows, new = pending.popleft()
                yield path_, rows.result(), new
        while pending:
            path_, rows, new = pending.popleft()
            yield path_, rows.result(), new


def _read_snapshot_file(home, path: str, threads: bool):
    """A stored snapshot file's rows (the store's schema), read whole from the home (a snapshot
    file is small); a damaged file is a clear error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from topic_lineage.store import CorruptSnapshotFileError

    schema = t.arrow_store_schema()
    try:
        source = pa.BufferReader(_read(home, path))
        # ParquetFile, not read_table: read_table goes through pyarrow.dataset, which imports
        # pandas (seconds of a task's time in a fresh Python worker)
        return pq.ParquetFile(source).read(columns=schema.names, use_threads=threads).cast(schema)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptSnapshotFileError(path, (str(exc).splitlines() or [type(exc).__name__])[0]) from None


def _walk_file(walk_: walk.ClusterWalk, path, rows) -> int:
    """Walk the snapshot a store file holds (one, its topics in name order: topic_lineage.store);
    returns its observations."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from topic_lineage.store import CorruptSnapshotFileError

    if rows.num_rows == 0:
        raise CorruptSnapshotFileError(path, "no rows")
    instants = rows.column(t.CAPTURED_AT)
    if rows.column(t.CLUSTER_ID).unique().to_pylist() != [walk_.cluster_id] \
            or pc.count_distinct(instants).as_py() != 1:
        raise CorruptSnapshotFileError(path, "holds rows of more than one snapshot, or of another cluster")
    # column by column: to_pylist of a timestamp with a time zone imports pandas
    head = {c: rows.column(c)[0].as_py() for c in walk.SNAPSHOT_COLUMNS if c != t.CAPTURED_AT}
    head[t.CAPTURED_AT] = instants.cast(pa.int64())[0].as_py()
    topics = rows.select(list(walk.TOPIC_COLUMNS)).filter(pc.is_valid(rows.column(t.TOPIC_NAME)))
    names = topics.column(t.TOPIC_NAME)
    if len(names) > 1 and not pc.all(pc.less(names.slice(0, len(names) - 1), names.slice(1))).as_py():
        topics = topics.sort_by(t.TOPIC_NAME)
    try:
        walk_.snapshot(head, topics)
    except ValueError as exc:
        raise CorruptSnapshotFileError(path, f"{exc} (its file name gives another time)") from None
    return topics.num_rows


class _ObservationWriter:
    """Writes a cluster's new observations to ``topic_snapshots`` with pyarrow, the task's
    ``observation_rows`` per file, in a thread (observations are copied, not derived)."""

    def __init__(self, home, path: str, task: ClusterTask, cores: int):
        self.home, self.path, self.cluster_id, self.version = home, path, task.cluster_id, task.version
        self.per_file = task.observation_rows
        self.pending, self.rows, self.written, self.writing = [], 0, 0, []
        # one core: written in turn (see _read_ahead); more: in a thread beside the walk
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="walk-topic-snapshots") if cores > 1 else None

    def __enter__(self):
        return self

    def add(self, store_rows) -> None:
        self.pending.append(store_rows)
        self.rows += store_rows.num_rows
        if self.rows >= self.per_file:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        name = part_name(self.cluster_id, self.version, f"-{self.written:05d}")
        self.written += 1
        if self.pool is None:
            self._write(self.pending, name)
        else:
            busy = [f for f in self.writing if not f.done()]
            if len(busy) > 1:  # at most two files in the writing: memory stays bounded
                busy[0].result()
            self.writing.append(self.pool.submit(self._write, self.pending, name))
        self.pending, self.rows = [], 0

    def _write(self, parts: list, name: str) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        from topic_lineage.topic_id import rfc4122_array

        rows = pa.concat_tables(parts)
        rows = rows.filter(pc.is_valid(rows.column(t.TOPIC_NAME)))  # not empty snapshots' markers
        schema = t.arrow_schema_of(t.TOPIC_SNAPSHOTS_DDL)
        columns = {t.TOPIC_UUID: rfc4122_array(rows.column(t.TOPIC_ID))}
        table = pa.Table.from_arrays(
            [columns[f.name] if f.name in columns else rows.column(f.name) for f in schema], schema=schema)
        self.home.write_parquet(f"{self.path}/{name}", table)

    def __exit__(self, kind, error, trace):
        try:
            if error is None:
                self._flush()
            for written in self.writing:  # a failed write is the task's error
                written.result()
        finally:
            if self.pool is not None:
                self.pool.shutdown()
        return False
