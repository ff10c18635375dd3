"""The derivation as a Spark job: one task per Kafka cluster walks that cluster's snapshots.

The driver plans (:func:`topic_lineage.scd.build._plan_walks`: which files each cluster walks,
and whether it continues the base version's saved walk) and collects one summary row per
cluster; it does no per-observation work. Each task runs :func:`walk_cluster` in a Python
worker on an executor: it reads the cluster's snapshot files in time order, walks them
(:class:`topic_lineage.scd.walk.ClusterWalk`, the rules R1-R6), and writes the cluster's part of
the version itself, with pyarrow:

- ``topic_snapshots``: the observations of the snapshots new to this version;
- ``_walk_state``: the cluster's walk, which the next incremental build continues;
- ``snapshot_runs`` and ``topic_incarnations``: one file each, every row of the cluster;
- ``group_offsets`` and ``group_incarnations`` (a cluster with stored group files): one file
  each, every row of the cluster, from its final incarnations (:mod:`topic_lineage.scd.groups`).

Why tasks write their own files: a cluster's rows come out of one walk, and Spark would add a
job per table (and a shuffle) to write what one task already holds. Every file is written
whole (:class:`topic_lineage.storage.Home`, built in the task from the home's location),
named by cluster and version, so a retried or speculative task rewrites the same file: the
outputs are the same whichever attempt wins. Executors read the store and write the version
through the home, as the driver does: with the home on object storage they need no disk in
common with the driver or each other.

Why one task per cluster: R1-R6 are a fold per cluster in time order; clusters are independent.
A job of ``n`` partitions of one task index each (an RDD's ``parallelize(range(n), n)``; under
Spark Connect ``spark.range(0, n, 1, n)``) gives each cluster a partition of its own (a hash
partitioning by cluster would put several on one task), largest cluster first, so ``local[N]``
or a standalone cluster's executors walk N clusters at once. A big cluster is split into ranges
of its snapshots, diffed by tasks of their own, then walked (:func:`run`). Speed and memory are
in docs/benchmarks.md.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.scd import groups, walk
from topic_lineage.scd.hold import HoldPolicy

SUMMARY_DDL = (
    "cluster_id STRING, part STRING, snapshots BIGINT, first_file STRING, walked BIGINT, continued BOOLEAN, "
    "started_at DOUBLE, seconds DOUBLE, "
    "host STRING, pid INT, executor STRING, peak_rss_mib DOUBLE, error_path STRING, error STRING"
)
"""What each task reports: its cluster, the snapshot files it walked (how many, the first: the
rest follow it in time order) and their observations, whether it continued a saved walk, when
it started (the epoch's seconds) and for how long, where it ran and its worker's peak resident
set; or the stored file it could not read (a clear error for the driver to raise, not a task
failure Spark would retry)."""

_READ_AHEAD = 8
"""Snapshot files read ahead of the walk (in threads: pyarrow decodes without the GIL)."""
OBSERVATION_ROWS = 250_000
"""Observations per ``topic_snapshots`` file a task writes (planned by the driver: a task's).
A file's rows are held until written: 1,000,000 made a task of 1.2 M observations peak at 760 MiB
and take 2.7 s, 250,000 at 311 MiB and 1.3 s (2026-11-28, a range of the 10 M benchmark)."""


@dataclass(frozen=True)
class Span:
    """A run of one cluster's snapshot files named by their first and last time: the task lists
    them itself, so the plan the driver sends is the same size whatever the history's length.
    ``count`` and ``digest`` (of their times) make a store that changed since the driver listed
    it a clear error, not a different set of snapshots than the version records."""

    directory: str  # the cluster's partition of the store, as engines name it
    first: str  # compact times (topic_lineage.snapshot.compact_timestamp), inclusive
    last: str
    count: int
    digest: str

    @classmethod
    def of(cls, directory: str, stamps) -> Span:
        return cls(directory, stamps[0], stamps[-1], len(stamps), _digest(stamps))

    def files(self, home, within: set[str] | None = None) -> list[str]:
        """The span's files in time order, as engines name them (a listing of the home); with
        ``within``, only those whose time is in it (a group file counts with its snapshot's)."""
        found = sorted((Path(name).stem, name) for name in home.listing(home.name_of(self.directory))
                       if name.endswith(".parquet") and self.first <= Path(name).stem <= self.last
                       and (within is None or Path(name).stem in within))
        stamps = [stamp for stamp, _ in found]
        if len(stamps) != self.count or _digest(stamps) != self.digest:
            raise StoreChangedError(
                f"the snapshot store changed while the build ran: {self.directory} holds {len(stamps)} "
                f"file(s) from {self.first} to {self.last}, the build planned {self.count}; run the "
                "build again")
        return [f"{self.directory.rstrip('/')}/{name}" for _, name in found]


class WalkTaskError(TopicLineageError):
    """What a walk task could not do, reported in its summary for the driver to raise."""


class StoreChangedError(WalkTaskError):
    """A task found other snapshot files than the driver planned it (the store changed)."""


def _digest(stamps) -> str:
    return hashlib.sha256("\n".join(stamps).encode()).hexdigest()[:16]


def stamp_of(name: str) -> str:
    """The compact time of a snapshot file (its name: topic_lineage.store)."""
    return Path(name).stem


@dataclass(frozen=True)
class ClusterTask:
    """What one task derives: one cluster's snapshot files, in time order."""

    cluster_id: str
    span: Span  # every snapshot file of the cluster to read
    new_after: str  # files of a later time hold observations new to this version...
    late: tuple[str, ...]  # ...and these (late snapshots, new to it)
    base_state: str | None  # the base version's saved walk to continue, if this code wrote it
    continue_after: int  # with base_state: the span's first continue_after files are walked in it
    version: str
    out: str  # the version's directory
    state_out: str  # where this version saves the cluster's walk
    policy: HoldPolicy
    input_bytes: int
    observation_rows: int = OBSERVATION_ROWS
    home: str = ""  # the home's location (path or URL) the names above are under
    # a range of a split cluster (split_task): the span is its range only; it diffs them and
    # writes its steps to steps_out, and a walk task (WalkTask) walks every range's steps
    part: int = 0
    parts: int = 1
    previous: str | None = None  # the file before the range, which its first step diffs with
    steps_out: str | None = None
    paths: tuple[str, ...] = ()  # the driver's: the span's files (to split it); not sent to tasks
    groups: Span | None = None  # every stored group file of the cluster (its group rows are derived again)

    def is_new(self, name: str) -> bool:
        stamp = stamp_of(name)
        return stamp > self.new_after or stamp in self.late


@dataclass(frozen=True)
class WalkTask:
    """The second pass of a split cluster: walk its ranges' steps in order, write its part."""

    cluster_id: str
    steps: tuple[str, ...]  # each range's steps file, in time order
    base_state: str | None
    version: str
    out: str
    state_out: str
    policy: HoldPolicy
    home: str
    snapshots: int
    first_file: str | None
    groups: Span | None = None
    snapshot_dir: str = ""  # the cluster's partition of the store (its group files' snapshots)
    early: bool = False  # runs beside its cluster's last ranges: waits for each steps file


def part_name(cluster_id: str, version: str, suffix: str = "") -> str:
    """The file name of a cluster's part of a table in a version (the same for every attempt)."""
    digest = hashlib.sha256(cluster_id.encode()).hexdigest()[:16]
    return f"part-walk-{digest}-{version}{suffix}.zstd.parquet"


def state_file(directory: Path, cluster_id: str) -> Path:
    return directory / f"{t.cluster_partition(cluster_id)}.walk"


RANGE_BYTES_ENV = "TOPIC_LINEAGE_WALK_RANGE_BYTES"
RANGE_FILES_ENV = "TOPIC_LINEAGE_WALK_RANGE_FILES"
RANGE_BYTES = 32 * 2**20
"""A cluster with more snapshot bytes to walk than this is split into ranges of about this size
(``$TOPIC_LINEAGE_WALK_RANGE_BYTES``; ``$TOPIC_LINEAGE_WALK_RANGE_FILES`` splits by that many
files instead, as the property tests do at 2)."""


def split_task(task: ClusterTask, extra: int = 0, short_last: bool = False) -> list[ClusterTask]:
    """The task itself when its cluster is walked whole, else one task per range of its files to
    walk (those after ``continue_after``), each given the file before it. Either way without
    the driver's ``paths``: what a task is sent does not grow with the history. ``extra``: that
    many more ranges than the size gives; ``short_last``: the last range about half the size of
    the others (a split by size only; :func:`split_tasks`)."""
    files = task.paths[task.continue_after:]
    by_files = os.environ.get(RANGE_FILES_ENV)
    if by_files:
        size = max(1, int(by_files))
    else:
        limit = int(os.environ.get(RANGE_BYTES_ENV) or RANGE_BYTES)
        ranges = -(-task.input_bytes // max(1, limit))
        ranges += extra if ranges > 1 else 0
        if ranges < 2:
            size = len(files)
        elif short_last:
            size = -(-2 * len(files) // (2 * ranges - 1))  # ranges - 1 shares and a half share
        else:
            size = -(-len(files) // ranges)
    if len(files) <= size:
        return [replace(task, paths=())]
    starts = range(0, len(files), size)
    previous = task.paths[task.continue_after - 1] if task.continue_after else None
    tasks = []
    for part, start in enumerate(starts):
        mine = files[start:start + size]
        tasks.append(replace(
            task, span=Span.of(task.span.directory, [stamp_of(f) for f in mine]), continue_after=0,
            part=part, parts=len(starts), previous=files[start - 1] if start else previous,
            steps_out=f"{task.out}/{STEPS_DIR}/{part_name(task.cluster_id, task.version, f'-{part:05d}')}.steps",
            input_bytes=task.input_bytes * len(mine) // max(1, len(files)), paths=(), groups=None,
        ))
    return tasks


STEPS_DIR = "_walk_steps"
"""In a version being built: the split clusters' steps, between the two passes (removed after)."""


# --- the driver's side -----------------------------------------------------------------------------
def run(spark, tasks: list[ClusterTask], *, beside_walks=None) -> list[dict]:
    """Derive every cluster; one summary per cluster (``SUMMARY_DDL``; a split cluster's has its
    ranges' under ``ranges``). A stored snapshot file a task could not read is raised here as the
    store's error naming it.

    One job: a task per cluster walked whole, and per range of a split cluster (it diffs its
    snapshots: :class:`~topic_lineage.scd.walk.Differ`). Then, for the split clusters, a second
    job: a task per cluster walks its ranges' steps in time order, which costs Python work only
    for what changed between snapshots. Every ``topic_snapshots`` file is written by the first
    job; ``beside_walks()`` (what the driver can do with them meanwhile) runs in a thread of the
    driver while the second one runs, and is waited for before this returns or raises.

    The largest split cluster's walk does not wait for the first job to end when the session
    has two task slots or more (a classic session; ``$TOPIC_LINEAGE_EARLY_WALK=0`` turns it off):
    it is a job of its own, submitted right after the first, so Spark's FIFO scheduler starts it
    only once every range task has started and a slot is free. It walks the steps already
    written and waits for the rest, so the walk pass runs beside the last ranges instead of
    after them. That cluster gets one range more when the first job's tasks would otherwise
    fill its last wave of slots (no slot would be free for the walk until its end), and a short
    last range (:func:`split_tasks`). A failed first job cancels it. One waiting task at most:
    whatever fails, a retried range task finds a slot the walk does not hold."""
    if not tasks:
        return []
    parts, early = split_tasks(tasks, _task_slots(spark))
    plan = launch_order(parts)
    walks = [WalkTask(
        cluster_id=task.cluster_id, steps=tuple(p.steps_out for p in parts[task.cluster_id]),
        base_state=task.base_state if task.continue_after else None,
        version=task.version, out=task.out, state_out=task.state_out, policy=task.policy, home=task.home,
        snapshots=len(task.paths) - task.continue_after, first_file=next(iter(task.paths[task.continue_after:]), None),
        groups=task.groups, snapshot_dir=task.span.directory, early=task.cluster_id == early,
    ) for task in tasks if len(parts[task.cluster_id]) > 1]
    started = time.monotonic()
    if early is None:
        summaries, early_walk = _run_job(spark, plan), None
    else:
        summaries, early_walk = _with_early_walk(spark, plan, [w for w in walks if w.early])
    first_job = round(time.monotonic() - started, 3)
    if not walks:
        return summaries
    ranges = {}
    for summary in summaries:
        if summary["part"] is not None:
            ranges.setdefault(summary["cluster_id"], []).append(summary)
    started = time.monotonic()
    beside = threading.Thread(target=beside_walks, name="beside-walks", daemon=True) if beside_walks else None
    if beside is not None:
        beside.start()
    try:
        later = [w for w in walks if not w.early]
        walked = _run_job(spark, later) if later else []
        if early_walk is not None:
            walked = early_walk.summaries() + walked
    finally:
        if early_walk is not None:
            early_walk.cancel()  # nothing once it ended
        if beside is not None:
            beside.join()
    second_job = round(time.monotonic() - started, 3)
    for summary in walked:
        summary["jobs_seconds"] = [first_job, second_job]  # the diffs (and whole clusters), the walks
        summary["ranges"] = sorted(ranges.pop(summary["cluster_id"]), key=lambda r: int(r["part"]))
        summary["walked"] = sum(r["walked"] for r in summary["ranges"])  # the ranges' observations
    from topic_lineage import storage

    home = storage.home()
    home.remove_tree(f"{home.name_of(walks[0].out)}/{STEPS_DIR}")  # empty: each walk removed its own
    return [s for s in summaries if s["part"] is None] + walked


EARLY_WALK_ENV = "TOPIC_LINEAGE_EARLY_WALK"
"""``0``: no walk beside the first job (:func:`run`), and the ranges the size gives."""


def _task_slots(spark) -> int:
    """How many tasks the session runs at once (1 where it cannot say: Spark Connect)."""
    context = _classic_context(spark)
    return max(1, context.defaultParallelism) if context is not None else 1


def split_tasks(tasks: list[ClusterTask], slots: int) -> tuple[dict[str, list[ClusterTask]], str | None]:
    """Each cluster's tasks (:func:`split_task`) on a session of ``slots`` task slots, and the
    split cluster whose walk runs beside the first job (:func:`run`): the largest, when there are
    two slots or more. It gets one range more when the first job's tasks would fill every slot
    of their last wave: then a slot is free for its walk while the last ranges run. And its last
    range, launched last (:func:`launch_order`), is about half the size of the others: the walk
    has the steps of every other range to walk while it runs, and only its steps left after it
    (10 M observations in one cluster on ``local[2]``, five runs alternated: 6.90-7.01 s against
    7.17-7.43 s with nine ranges of one size; docs/benchmarks.md, round 28)."""
    parts = {task.cluster_id: split_task(task) for task in tasks}
    split = [ranges for ranges in parts.values() if len(ranges) > 1]
    if slots < 2 or not split or os.environ.get(EARLY_WALK_ENV, "1") == "0":
        return parts, None
    early = max(split, key=lambda ranges: (sum(r.input_bytes for r in ranges), ranges[0].cluster_id))[0].cluster_id
    extra = 1 if sum(map(len, parts.values())) % slots == 0 else 0
    ranges = split_task(next(task for task in tasks if task.cluster_id == early), extra=extra, short_last=True)
    if len(ranges) > 1:
        parts[early] = ranges
    return parts, early


def launch_order(parts: dict[str, list[ClusterTask]]) -> list[ClusterTask]:
    """The first job's tasks in the order Spark launches them: the largest first (so a split
    cluster's short last range goes last; :func:`split_tasks`)."""
    return sorted((part for ranges in parts.values() for part in ranges),
                  key=lambda task: (-task.input_bytes, task.cluster_id))


class _Job:
    """A job run from a driver thread of its own under a job group of its own (so the driver
    can tell when Spark has it, and cancel it)."""

    def __init__(self, spark, plan: list, what: str):
        import uuid

        from pyspark.util import InheritableThread

        self.spark, self.plan = spark, plan
        self.group = f"topic-lineage-{what}-{uuid.uuid4().hex[:12]}"
        self._result: list[dict] | None = None
        self._error: BaseException | None = None
        self._thread = InheritableThread(self._run, name=self.group, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        context = _classic_context(self.spark)
        context.setJobGroup(self.group, self.group, interruptOnCancel=True)
        try:
            self._result = _run_job(self.spark, self.plan)
        except BaseException as exc:  # noqa: BLE001 - raised where summaries() is called
            self._error = exc

    def submitted(self) -> bool:
        """Whether Spark has the job (or the thread ended before it did)."""
        tracker = _classic_context(self.spark).statusTracker()
        return bool(tracker.getJobIdsForGroup(self.group)) or not self._thread.is_alive()

    def summaries(self) -> list[dict]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result

    def cancel(self) -> None:
        if self._thread.is_alive():
            _classic_context(self.spark).cancelJobGroup(self.group)
        self._thread.join()


def _with_early_walk(spark, plan: list, early: list[WalkTask]) -> tuple[list[dict], _Job]:
    """The first job's summaries, its split cluster's walk (``early``) running as a job of its
    own, submitted once Spark has the first (:func:`run`); on any failure of the first job the
    walk is cancelled before it is raised."""
    first = _Job(spark, plan, "walk-ranges")
    while not first.submitted():
        time.sleep(0.002)
    walk_ = _Job(spark, early, "early-walk")
    try:
        return first.summaries(), walk_
    except BaseException:
        walk_.cancel()
        raise


def _run_job(spark, plan: list) -> list[dict]:
    """Run one task per element of ``plan``; their summaries."""
    from topic_lineage.store import CorruptSnapshotFileError

    summaries = _collect(spark, plan)
    reported = sorted((s["cluster_id"], s["part"]) for s in summaries)
    planned = sorted((task.cluster_id, _part(task)) for task in plan)
    if reported != planned:
        raise RuntimeError(f"the walk job reported {reported}, planned {planned}")
    for summary in summaries:
        if summary["error_path"] is not None:
            raise CorruptSnapshotFileError(_working_copy_path(summary["error_path"]), summary["error"])
        if summary["error"] is not None:
            raise WalkTaskError(summary["error"])
    return summaries


def _collect(spark, plan: list) -> list[dict]:
    """The summaries of a job of one task per element of ``plan`` (partition ``i`` runs
    ``plan[i]``). On a classic session an RDD job: Spark's scheduler, no query to plan, so no
    SQL or Arrow machinery to warm up in a fresh JVM (a first ``mapInArrow`` job took 4.6 s here,
    a first RDD job 1.6 s, the Python workers' start included). Spark Connect has no RDDs: there,
    the same tasks as a ``mapInArrow`` job."""
    context = _classic_context(spark)
    if context is not None:
        return context.parallelize(range(len(plan)), len(plan)).mapPartitions(partial(_run_tasks, plan)).collect()
    job = spark.range(0, len(plan), 1, len(plan)).mapInArrow(partial(_arrow_tasks, plan), SUMMARY_DDL)
    return job.toArrow().to_pylist()


def _classic_context(spark):
    """The SparkContext of a classic session; None for a Spark Connect one."""
    from pyspark.sql import SparkSession

    return spark.sparkContext if isinstance(spark, SparkSession) else None


def _part(task) -> str | None:
    """The range a task diffs (its summary's ``part``); None for a cluster's whole walk."""
    return str(task.part) if isinstance(task, ClusterTask) and task.parts > 1 else None


def _working_copy_path(name: str) -> Path:
    """The path a user acts on (``topic-lineage quarantine PATH``) of a file a task named: with
    the home on object storage, its place in the working copy."""
    from topic_lineage import storage

    return storage.home().from_engine_name(name)


def _run_tasks(plan: list, indexes):
    """The tasks ``plan[i]`` for each ``i`` of ``indexes``, in a Python worker: their summaries
    (the fields of ``SUMMARY_DDL``)."""
    fields = t.ddl_columns(SUMMARY_DDL)
    for index in indexes:
        task = plan[index]
        with _no_cycle_collection():
            if isinstance(task, WalkTask):
                summary = walk_steps(task)
            elif task.parts > 1:
                summary = diff_range(task)
            else:
                summary = walk_cluster(task)
        yield {name: summary.get(name) for name in fields}


@contextmanager
def _no_cycle_collection():
    """Python's cycle collector paused for the block (a task), as it was afterwards. A walk
    builds its incarnations as objects that live to the task's end, and every few hundred of
    them started a collection that scanned them all again: 0.20-0.31 s of the 10 M benchmark's
    walk pass of 0.87-1.02 s, which runs after every range (issue #53). Its objects form no
    cycles the task leaves behind (about a hundred unreachable objects at its end), so its peak
    memory is the same (172 MiB against 171 MiB)."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _arrow_tasks(plan: list, batches):
    """:func:`_run_tasks` as ``mapInArrow``'s function: each input row is a task's index."""
    import pyarrow as pa

    schema = t.arrow_schema_of(SUMMARY_DDL)
    for batch in batches:
        for summary in _run_tasks(plan, batch.column(0).to_pylist()):
            yield pa.RecordBatch.from_arrays(
                [t.arrow_array([summary[f.name]], f.type) for f in schema], schema=schema)


# --- the task's side -------------------------------------------------------------------------------
def _summary(task, snapshots: int, first_file: str | None, continued: bool) -> dict:
    import socket

    return {"cluster_id": task.cluster_id, "part": _part(task), "started_at": round(time.time(), 3),
            "snapshots": snapshots, "first_file": first_file, "walked": 0, "continued": continued,
            "host": socket.gethostname(), "pid": os.getpid(), "executor": executor_of_this_worker()[1],
            "error_path": None, "error": None}


def _finish(summary: dict, started: float) -> dict:
    import resource

    summary["seconds"] = round(time.monotonic() - started, 3)
    summary["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return summary


@contextmanager
def _reported(summary: dict):
    """A task's failure it can name, as its summary's error (for the driver to raise), not as a
    task failure Spark would retry: a stored file it cannot read, or a WalkTaskError."""
    from topic_lineage.store import CorruptSnapshotFileError

    try:
        yield
    except CorruptSnapshotFileError as exc:
        summary.update(error_path=str(exc.path), error=exc.reason)
    except WalkTaskError as exc:
        summary.update(error=str(exc))


def _each_snapshot(home, task: ClusterTask, files: list[str], cores: int, summary: dict, take) -> None:
    """``take(path, head, topics)`` of each snapshot file in order, its new observations written
    to the version's ``topic_snapshots`` and counted in the summary."""
    out = home.name_of(task.out)
    with _ObservationWriter(home, f"{out}/{t.TOPIC_SNAPSHOTS}", task, cores) as observations:
        for path, rows, is_new in _read_ahead(home, files, [task.is_new(f) for f in files], cores):
            if is_new:
                observations.add(rows)
            head, topics = _snapshot_of(task.cluster_id, path, rows)
            take(path, head, topics)
            summary["walked"] += topics.num_rows


def walk_cluster(task: ClusterTask) -> dict:
    """Walk one cluster and write its part of the version (in a task: see the module docstring)."""
    from topic_lineage import storage

    started = time.monotonic()
    with storage.for_task(task.home) as home:
        walk_ = None
        if task.base_state is not None:
            walk_ = walk.ClusterWalk.loads(_read(home, task.base_state), task.cluster_id, task.policy)
        first = task.continue_after if walk_ is not None else 0
        if walk_ is None:
            walk_ = walk.ClusterWalk(task.cluster_id, task.policy)
        summary = _summary(task, 0, None, first > 0)
        with _reported(summary):
            files = task.span.files(home)[first:]
            summary.update(snapshots=len(files), first_file=next(iter(files), None))
            _each_snapshot(home, task, files, _task_cpus(), summary,
                           lambda path, head, topics: _walk(walk_, path, lambda: walk_.snapshot(head, topics)))
        if summary["error"] is None:
            _write_walk(home, task, walk_, task.span.directory, summary)
        return _finish(summary, started)


def _write_walk(home, task, walk_: walk.ClusterWalk, snapshot_dir: str, summary: dict) -> None:
    """A cluster's walked part of the version: its saved walk, runs and incarnations, and when
    it has stored group files its group rows (contract R8-R10), which read the final incarnations."""
    out = home.name_of(task.out)
    home.write_bytes(home.name_of(task.state_out), walk_.dumps())
    runs, incarnations = walk_.tables()
    part = part_name(task.cluster_id, task.version)
    home.write_parquet(f"{out}/{t.SNAPSHOT_RUNS}/{part}", runs)
    home.write_parquet(f"{out}/{t.TOPIC_INCARNATIONS}/{part}", _with_topic_uuid(incarnations))
    if task.groups is None:
        return
    with _reported(summary):
        lineage = groups.ClusterGroups(task.cluster_id, incarnations)
        offsets = [lineage.offsets(rows, shown) for rows, shown in _GroupFiles(home, task.groups, snapshot_dir)]
        home.write_parquet(f"{out}/{t.GROUP_OFFSETS}/{part}", _concat(offsets, t.GROUP_OFFSETS_DDL))
        home.write_parquet(f"{out}/{t.GROUP_INCARNATIONS}/{part}", lineage.incarnations())


def _concat(tables: list, ddl: str):
    """One table of ``tables`` (the DDL's, empty, when there are none)."""
    import pyarrow as pa

    return pa.concat_tables(tables) if tables else t.arrow_schema_of(ddl).empty_table()


class _GroupFiles:
    """A cluster's stored group files (those whose snapshot is stored too: a group file is
    written first, so one without its snapshot is debris of a store that stopped), each with
    what its snapshot shows: topic name -> topic ID (R8's first attribution), read from the
    snapshot file's two columns when the group file is (the walk's own reading would hold every
    snapshot's names at once)."""

    def __init__(self, home, span: Span | None, snapshot_dir: str):
        self.home, self.snapshot_dir = home, snapshot_dir.rstrip("/")
        self.group_dir = "" if span is None else span.directory.rstrip("/")
        self.files: list[str] = []
        if span is not None:
            stored = {stamp_of(name) for name in home.listing(home.name_of(snapshot_dir))
                      if name.endswith(".parquet")}
            self.files = span.files(home, within=stored)

    def __iter__(self):
        """``(rows, shown)`` of each group file in time order, read one at a time: its rows
        (``GROUP_STORE_DDL``) and what its snapshot shows under the names they name."""
        for name in self.files:
            rows = _read_group_file(self.home, name)
            path = f"{self.snapshot_dir}/{name.removeprefix(self.group_dir + '/')}"  # the same layout
            topics = _read_snapshot_file(self.home, path, threads=False, columns=[t.TOPIC_NAME, t.TOPIC_ID])
            yield rows, _ids_shown(topics)


def _ids_shown(topics) -> dict[str, str]:
    """Topic name -> the topic ID a snapshot's rows show under it (names without an ID left out)."""
    import pyarrow.compute as pc

    names, ids = topics.column(t.TOPIC_NAME), topics.column(t.TOPIC_ID)
    valid = pc.and_(pc.is_valid(names), pc.is_valid(ids))
    return dict(zip(names.filter(valid).to_pylist(), ids.filter(valid).to_pylist(), strict=True))


def _read_group_file(home, path: str):
    """A stored group file's rows (``GROUP_STORE_DDL``); a damaged one is a clear error naming it."""
    return _read_stored(home, path, t.arrow_schema_of(t.GROUP_STORE_DDL), threads=False)


def diff_range(task: ClusterTask) -> dict:
    """The first pass over a range of a split cluster: its snapshots as steps of the walk
    (:class:`~topic_lineage.scd.walk.Differ`, given the snapshot before the range), written to
    ``steps_out``; its new observations written to ``topic_snapshots`` as a whole cluster's
    task writes them. Reads the range's files and the one before; walks nothing."""
    from topic_lineage import storage
    from topic_lineage.store import CorruptSnapshotFileError

    started = time.monotonic()
    with storage.for_task(task.home) as home:
        cores = _task_cpus()
        summary = _summary(task, 0, None, False)
        steps = []
        with _reported(summary):
            files = task.span.files(home)
            summary.update(snapshots=len(files), first_file=next(iter(files), None))
            previous, newest = None, None
            if task.previous is not None:
                rows = _read_snapshot_file(home, task.previous, threads=cores > 1)
                head, previous = _snapshot_of(task.cluster_id, task.previous, rows)
                newest = head[t.CAPTURED_AT]
            differ = walk.Differ(previous)

            def take(path, head, topics) -> None:
                nonlocal newest
                if newest is not None and head[t.CAPTURED_AT] <= newest:  # what the walk would say
                    error = walk.order_error(task.cluster_id, head[t.CAPTURED_AT], newest)
                    raise CorruptSnapshotFileError(path, f"{error} (its file name gives another time)")
                newest = head[t.CAPTURED_AT]
                steps.append(differ.step(head, topics))

            _each_snapshot(home, task, files, cores, summary, take)
        if summary["error"] is None:
            home.write_bytes(home.name_of(task.steps_out), encode_steps(steps))
        return _finish(summary, started)


def walk_steps(task: WalkTask) -> dict:
    """The second pass of a split cluster: walk its ranges' steps in time order (continuing the
    base's saved walk when given), write its part of the version, remove the steps."""
    from topic_lineage import storage

    started = time.monotonic()
    with storage.for_task(task.home) as home:
        walk_ = None
        if task.base_state is not None:
            walk_ = walk.ClusterWalk.loads(_read(home, task.base_state), task.cluster_id, task.policy)
        summary = _summary(task, task.snapshots, task.first_file, task.base_state is not None)
        if task.base_state is not None and walk_ is None:
            summary["error"] = (f"cluster {task.cluster_id}: the base version's saved walk {task.base_state} "
                                "cannot be read; run topic-lineage build --full-refresh")
            return _finish(summary, started)
        walk_ = walk_ or walk.ClusterWalk(task.cluster_id, task.policy)
        with _reported(summary):
            for name in task.steps:
                data = _when_written(home, name) if task.early else _read(home, name)
                for step in decode_steps(data):
                    _walk(walk_, name, lambda: walk_.step(step))  # noqa: B023 - called here
        if summary["error"] is None:
            _write_walk(home, task, walk_, task.snapshot_dir, summary)
            home.remove([home.name_of(name) for name in task.steps])
        return _finish(summary, started)


def encode_steps(steps: list) -> bytes:
    """Steps as one file: their heads (pickled) and their topics (one Arrow IPC stream)."""
    import pickle

    import pyarrow as pa

    heads, parts = [], []
    for step in steps:
        whole = step.whole is not None and not step.full
        heads.append((step.head, step.full, step.topics.num_rows, step.dropped,
                      step.whole.num_rows if whole else None))
        parts.append(step.topics)
        if whole:
            parts.append(step.whole)
    rows = pa.concat_tables(parts) if parts else _topic_schema().empty_table()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return pickle.dumps((heads, sink.getvalue().to_pybytes()), protocol=pickle.HIGHEST_PROTOCOL)


def decode_steps(data: bytes):
    """The steps :func:`encode_steps` wrote, in order."""
    import pickle

    import pyarrow as pa

    heads, stream = pickle.loads(data)
    rows = pa.ipc.open_stream(stream).read_all()
    at = 0
    for head, full, count, dropped, whole in heads:
        topics = rows.slice(at, count)
        at += count
        every = None
        if whole is not None:
            every = rows.slice(at, whole)
            at += whole
        yield walk.Step(head, topics, full=full, dropped=dropped, whole=every)


def _topic_schema():
    import pyarrow as pa

    store = t.arrow_store_schema()
    return pa.schema([store.field(c) for c in walk.TOPIC_COLUMNS])


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


STEPS_WAIT_S = 3600.0
"""How long an early walk (:func:`run`) waits for one range's steps: the ranges it waits for
are running when it starts, and a failed first job cancels it, so this only bounds a task
whose driver is gone."""


def _when_written(home, name: str) -> bytes:
    """The whole of a steps file a range task is writing (every file is written whole: it is
    there or not), once it is there."""
    deadline, pause = time.monotonic() + STEPS_WAIT_S, 0.002
    while (data := home.read_bytes(home.name_of(name))) is None:
        if time.monotonic() > deadline:
            raise WalkTaskError(f"the walk waited {STEPS_WAIT_S:.0f} s for {name}, which its range task did not write")
        time.sleep(pause)
        pause = min(0.05, pause * 1.5)
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


def _read_snapshot_file(home, path: str, threads: bool, columns: list[str] | None = None):
    """A stored snapshot file's rows (the store's schema, or its ``columns``), read whole from
    the home (a snapshot file is small); a damaged file is a clear error."""
    import pyarrow as pa

    schema = t.arrow_store_schema()
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    return _read_stored(home, path, schema, threads)


def _read_stored(home, path: str, schema, threads: bool):
    """A stored file's rows as ``schema``; a damaged file is a clear error naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from topic_lineage.store import CorruptSnapshotFileError

    try:
        source = pa.BufferReader(_read(home, path))
        # ParquetFile, not read_table: read_table goes through pyarrow.dataset, which imports
        # pandas (seconds of a task's time in a fresh Python worker)
        return pq.ParquetFile(source).read(columns=schema.names, use_threads=threads).cast(schema)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptSnapshotFileError(path, (str(exc).splitlines() or [type(exc).__name__])[0]) from None


def _snapshot_of(cluster_id: str, path, rows):
    """``(head, topics)`` of the snapshot a store file holds (one, its topics in name order:
    topic_lineage.store), as the walk takes it; a file of another shape is a clear error."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from topic_lineage.store import CorruptSnapshotFileError

    if rows.num_rows == 0:
        raise CorruptSnapshotFileError(path, "no rows")
    instants = rows.column(t.CAPTURED_AT)
    if rows.column(t.CLUSTER_ID).unique().to_pylist() != [cluster_id] \
            or pc.count_distinct(instants).as_py() != 1:
        raise CorruptSnapshotFileError(path, "holds rows of more than one snapshot, or of another cluster")
    # column by column: to_pylist of a timestamp with a time zone imports pandas
    head = {c: rows.column(c)[0].as_py() for c in walk.SNAPSHOT_COLUMNS if c != t.CAPTURED_AT}
    head[t.CAPTURED_AT] = instants.cast(pa.int64())[0].as_py()
    topics = rows.select(list(walk.TOPIC_COLUMNS)).filter(pc.is_valid(rows.column(t.TOPIC_NAME)))
    names = topics.column(t.TOPIC_NAME)
    if len(names) > 1 and not pc.all(pc.less(names.slice(0, len(names) - 1), names.slice(1))).as_py():
        topics = topics.sort_by(t.TOPIC_NAME)
    return head, topics


def _walk(walk_: walk.ClusterWalk, path, take) -> None:
    """``take()`` the next snapshot; one out of time order (a file whose name gives another
    time than its rows) is the file's clear error."""
    from topic_lineage.store import CorruptSnapshotFileError

    try:
        take()
    except ValueError as exc:
        raise CorruptSnapshotFileError(path, f"{exc} (its file name gives another time)") from None


class _ObservationWriter:
    """Writes a cluster's new observations to ``topic_snapshots`` with pyarrow, the task's
    ``observation_rows`` per file, in a thread (observations are copied, not derived)."""

    def __init__(self, home, path: str, task: ClusterTask, cores: int):
        self.home, self.path, self.cluster_id, self.version = home, path, task.cluster_id, task.version
        self.per_file = task.observation_rows
        self.range = f"-r{task.part:05d}" if task.parts > 1 else ""
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
        name = part_name(self.cluster_id, self.version, f"{self.range}-{self.written:05d}")
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
