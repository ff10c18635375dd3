"""Every benchmark figure, side by side in one run: a table, then one JSON document.

    .venv/bin/python -m tests.benchmarks.run_all [--quick] [--json-out FILE] [--skip capture ...]

1. capture      pipeline capture vs a bare describe_topics (tests/benchmarks/bench_capture.py)
2. incremental  one new snapshot on top of h1 < h2 < h3 rounds of history (ratio h3 vs h1)
3. full         full refresh of the largest history on local[*]: observations/s, peak memory;
                the DuckDB reference (tests/benchmarks/reference_duckdb.py) on the same files,
                Spark's time ratio to it, and a row-by-row cross-check
4. scaleout     the same full refresh with the unchanged spark_jobs/build.py against a Spark
                standalone master + one worker started from the pyspark installation
                (tests.servers.standalone: its JVMs map the class archive, as drivers do)
5. query        median latency of the cookbook queries and of the UI's JSON API
                (tests/benchmarks/bench_query.py) on the full-refresh data set

Full sizes: 10,000 topics; history 10 / 100 / 1,000 rounds (the full refresh is then 10 M
observations). ``--quick``: 300 topics, history 3 / 12, capture 100 and 300 topics; only the
largest history's full refresh goes through the quality gate (the figures never include it).
Every Spark job runs in its own process (as ``spark_jobs/build.py`` runs in production), so peak
memory is the resident set of that process tree, sampled every 0.2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PY = sys.executable
GOAL_RATIO = 1.5


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# kcmp(2) system call numbers, and its "same address space" type.
_KCMP_SYSCALL = {"x86_64": 312, "aarch64": 272}
_KCMP_VM = 1


def shares_address_space(pid: int, other: int) -> bool | None:
    """Whether process ``pid`` runs in ``other``'s memory: a child between ``vfork`` (or
    ``posix_spawn``, which is how Java starts every subprocess) and its ``exec``. Its resident set
    is then the parent's, read a second time. None where kcmp(2) cannot tell (not Linux, another
    architecture, or not permitted)."""
    import ctypes
    import platform

    number = _KCMP_SYSCALL.get(platform.machine())
    if number is None or not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    answer = libc.syscall(number, pid, other, _KCMP_VM, 0, 0)
    return None if answer < 0 else answer == 0


class PeakRss:
    """Peak resident set size (MiB) of a process and its children, sampled in a thread, and what
    each process held at that peak (``at_peak``: name, pid, resident MiB, of which file-backed or
    shared MiB), so an outlier peak says whether it was the JVM's own memory or mapped files.

    A child that still runs in its parent's memory (spawned, not yet exec'd: the JVM spawns
    ``chmod`` for each file Hadoop's local file system writes) is listed with ``"counted":
    false`` and not added: counting it added the JVM's 2.6 GiB a second time whenever a sample
    fell in that instant (a 5.3 GiB "peak" of a 2.7 GiB build, 2026-11-24)."""

    def __init__(self, pid: int):
        import psutil

        self.proc, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self.at_peak: list[dict] = []
        self.largest: dict = {}  # the largest single process seen at any sample (its row)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _row(p, parent: int | None, parent_info=None) -> tuple[dict, object]:
        """``p``'s row and memory figures; not counted when it runs in the memory of ``parent``
        (its parent's pid, None for the measured process itself). The kernel is asked before the
        figures are read: a child that ``exec``s in between then has figures of its own, where
        the other order read the parent's figures under the new program's name (a
        ``jspawnhelper`` at exactly the JVM's 1,585.4 MiB)."""
        shared = None if parent is None else shares_address_space(p.pid, parent)
        info = p.memory_info()
        row = {"name": p.name(), "pid": p.pid, "rss_mib": round(info.rss / 2**20, 1),
               "file_or_shared_mib": round(info.shared / 2**20, 1)}
        if shared is None and parent_info is not None:  # no kcmp: the parent's very figures
            shared = (info.rss, info.vms) == (parent_info.rss, parent_info.vms)
        if shared:
            row.update(counted=False, shares_memory_of=parent)
        return row, info

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
                infos: dict[int, object] = {}
                total, rows = 0, []
                for p in procs:
                    try:
                        parent = None if p is self.proc else p.ppid()
                        row, infos[p.pid] = self._row(p, parent, infos.get(parent))
                        rows.append(row)
                        total += infos[p.pid].rss if row.get("counted", True) else 0
                        if row.get("counted", True) and row["rss_mib"] > self.largest.get("rss_mib", 0):
                            self.largest = row
                    except psutil.Error:
                        pass
                if total > self.peak:
                    self.peak, self.at_peak = total, rows
            except psutil.Error:
                return
            self._stop.wait(0.2)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak / 2**20, 1)


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def run_measured(cmd: list[str], *, env: dict, cwd: Path = ROOT, merge_stderr: bool = False,
                 details: dict | None = None) -> tuple[subprocess.CompletedProcess, float, float, list[dict]]:
    """Run ``cmd`` to its end as a process of its own: the finished process (text output), its
    wall seconds, the peak resident set (MiB) of its process tree and each process's share of
    that peak (:class:`PeakRss` ``at_peak``); ``details`` gets ``largest_process``, the largest
    single process seen."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE)
    rss = PeakRss(proc.pid)
    output, errors = proc.communicate()
    peak = rss.stop()
    wall = time.perf_counter() - started
    if details is not None:
        details["largest_process"] = rss.largest
    return subprocess.CompletedProcess(cmd, proc.returncode, output, errors), wall, peak, rss.at_peak


def spark_env(home: Path, master: str) -> dict:
    env = dict(os.environ)
    env.update(
        TOPIC_LINEAGE_HOME=str(home),
        TOPIC_LINEAGE_SPARK_MASTER=master,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=PY,
        PYSPARK_SUBMIT_ARGS="--conf spark.ui.showConsoleProgress=false pyspark-shell",
        PYTHONPATH=str(ROOT),
    )
    return env


def run_build(home: Path, version: str, *, full: bool, master: str = "local[*]",
              publish: bool = True, base: str | None = None, conf: dict | None = None) -> dict:
    """``spark_jobs/build.py`` in its own process, validated and published unless ``publish`` is
    false (then incremental on ``base``); seconds as the build reports them (the build alone).
    ``conf``: driver settings (a standalone cluster's ``driver_conf()``), through
    ``PYSPARK_SUBMIT_ARGS`` as build.py takes no Spark settings."""
    cmd = [PY, str(ROOT / "spark_jobs" / "build.py"), "--version-id", version]
    cmd += ["--publish"] if publish else []
    cmd += ["--base-version", base] if base else []
    if full:
        cmd.append("--full-refresh")
    env = spark_env(home, master)
    if conf:
        env["PYSPARK_SUBMIT_ARGS"] = " ".join(
            [f"--conf {key}={value}" for key, value in conf.items()] + [env["PYSPARK_SUBMIT_ARGS"]])
    proc, wall, peak, at_peak = run_measured(cmd, env=env, merge_stderr=True)
    if proc.returncode:
        raise SystemExit(f"build {version} failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    manifest = json.loads((home / "warehouse" / "versions" / version / "manifest.json").read_text())
    return {"version": version, "mode": manifest["mode"], "build_s": manifest["seconds"],
            "process_wall_s": round(wall, 2), "peak_rss_mib": peak, "peak_rss_by_process": at_peak,
            "row_counts": manifest["row_counts"], "snapshots": manifest["snapshot_count"]}


# --- 1. capture ---------------------------------------------------------------------------------
def bench_capture(sizes: list[int], repeat: int) -> list[dict]:
    from tests.benchmarks import bench_capture as bc

    results = []
    for size in sizes:
        log(f"capture: {size} topics")
        results.append(bc.measure(size, repeat))
    return results


# --- 2. + 3. builds -------------------------------------------------------------------------------
def bench_builds(work: Path, topics: int, histories: list[int], seed: int,
                 gate_largest_only: bool = False) -> tuple[dict, dict, Path]:
    """For each history length: full build of the history, then one new snapshot incrementally.
    Returns (incremental figures, full-refresh figures of the largest history, its home).

    Every build is validated and published (its process time includes the gate), except with
    ``gate_largest_only`` (``--quick``, CI): only the largest history's full refresh goes through
    the gate (the scale-out and query benchmarks read its published version); the other builds
    skip it and each incremental one builds on its unpublished base. The build figures
    (``build_s``, from the manifest) never include the gate."""
    from tests.benchmarks.datagen import History

    history = History(topics=topics, seed=seed)
    incremental, full = [], None
    largest_home = None
    for h in histories:
        home = work / f"history-{h}"
        os.environ["TOPIC_LINEAGE_HOME"] = str(home)
        log(f"build: generating {h} rounds x {topics} topics")
        started = time.perf_counter()
        observations = history.store_rounds(0, h)
        gen_s = time.perf_counter() - started
        log(f"build: full refresh over {h} rounds ({observations} observations)")
        gated = h == histories[-1] or not gate_largest_only
        base = run_build(home, "base", full=True, publish=gated)
        base["observations"] = observations
        base["generate_and_store_s"] = round(gen_s, 1)
        if h == histories[-1]:
            full, largest_home = base, home
            # Before the new snapshot is stored: the reference must see the same store.
            full["reference"] = bench_reference(home, work)
        new = history.store_rounds(h, h + 1, only_cluster=0)
        log(f"build: incremental, one new snapshot ({new} topics) on {h} rounds")
        inc_gated = not gate_largest_only
        inc = run_build(home, "plus-one", full=False, publish=inc_gated,
                        base=None if inc_gated else "base")
        if inc["mode"] != "incremental":
            raise SystemExit(f"expected an incremental build, got {inc['mode']}")
        incremental.append({"history_rounds": h, "history_observations": observations,
                            "new_observations": new, "build_s": inc["build_s"],
                            "process_wall_s": inc["process_wall_s"]})
    first, last = incremental[0]["build_s"], incremental[-1]["build_s"]
    figures = {"runs": incremental, "ratio_largest_vs_smallest": round(last / first, 2),
               "goal": GOAL_RATIO}
    figures["meets_goal"] = figures["ratio_largest_vs_smallest"] <= GOAL_RATIO
    full["observations_per_s"] = round(full["observations"] / full["build_s"])
    return figures, full, largest_home


def bench_reference(home: Path, work: Path) -> dict:
    from tests.benchmarks import reference_duckdb as ref

    os.environ["TOPIC_LINEAGE_HOME"] = str(home)
    log("reference: DuckDB full computation")
    out = work / "reference-rows"
    result = ref.build(out)
    result["cross_check"] = ref.compare(out, home / "warehouse" / "versions" / "base")
    return result


# --- 4. scale-out -----------------------------------------------------------------------------------
def bench_scaleout(home: Path, work: Path, local_seconds: float, gate: bool = True,
                   cluster=None) -> dict:
    """A full refresh of ``home``'s store (version ``standalone``) on a standalone ``cluster``
    (:mod:`tests.servers.standalone`), its rows checked against a fresh DuckDB reference of the
    same store. By default the cluster is a master + one worker (2 cores, 2g) started for it;
    tests/test_spark_standalone.py passes its running two-worker cluster."""
    from tests.benchmarks import reference_duckdb as ref
    from tests.servers.standalone import HOST, standalone_cluster
    from topic_lineage import warehouse as wh

    if cluster is None:
        log("scale-out: standalone master + 1 worker")
        with standalone_cluster(workers=1, cores_per_worker=2, memory="2g",
                                work_dir=work / "standalone") as started:
            return bench_scaleout(home, work, local_seconds, gate, started)
    result = run_build(home, "standalone", full=True, master=cluster.master_url, publish=gate,
                       conf=cluster.driver_conf())
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)
    # The store now also holds the incremental benchmark's extra snapshot: a fresh reference.
    ref.build(work / "reference-rows-scaleout")
    check = ref.compare(work / "reference-rows-scaleout", wh.version_dir("standalone"))
    plural = lambda n, word: f"{n} {word}{'s' if n > 1 else ''}"
    return {"master": f"spark standalone, {plural(cluster.workers, 'worker')}, "
                      f"{plural(cluster.cores_per_worker, 'core')}, {cluster.memory} ({HOST})",
            "build_s": result["build_s"], "process_wall_s": result["process_wall_s"],
            "ratio_to_local": round(result["build_s"] / local_seconds, 2),
            "rows_identical_to_reference": check["identical"]}


# --- 5. queries ---------------------------------------------------------------------------------------
def bench_queries(home: Path, repeat: int) -> dict:
    log("query: cookbook queries and UI API")
    proc = subprocess.run([PY, "-m", "tests.benchmarks.bench_query", "--repeat", str(repeat)],
                          env=spark_env(home, "local[2]"), cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        raise SystemExit(f"query benchmark failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- report -------------------------------------------------------------------------------------------
def table(result: dict) -> str:
    lines = [f"{'figure':<58} {'value':>14}  goal / note", "-" * 100]

    def row(label, value, note=""):
        lines.append(f"{label:<58} {value!s:>14}  {note}")

    for c in result.get("capture", []):
        row(f"capture {c['topics']} topics: pipeline s / bare describe s",
            f"{c['capture_s']:.3f}/{c['bare_describe_s']:.3f}")
        row(f"capture {c['topics']} topics: ratio", c["ratio"],
            f"<= {GOAL_RATIO} {'met' if c['ratio'] <= GOAL_RATIO else 'MISSED'}")
        row(f"capture {c['topics']} topics: topics/s", c["capture_topics_per_s"])
    inc = result.get("incremental")
    if inc:
        for r in inc["runs"]:
            row(f"incremental: 1 new snapshot on {r['history_rounds']} rounds (s)", r["build_s"],
                f"{r['history_observations']} observations of history")
        row("incremental: ratio largest vs smallest history", inc["ratio_largest_vs_smallest"],
            f"<= {GOAL_RATIO} {'met' if inc['meets_goal'] else 'MISSED'}")
    full = result.get("full_refresh")
    if full:
        row(f"full refresh: {full['observations']} observations (s)", full["build_s"], "local[*]")
        row("full refresh: observations/s", full["observations_per_s"])
        row("full refresh: peak RSS of driver + JVM (MiB)", full["peak_rss_mib"])
    ref = result.get("reference")
    if ref:
        row("DuckDB reference: same rows (s)", ref["seconds"])
        row("Spark / DuckDB time ratio", result["spark_to_duckdb_ratio"])
        row("cross-check: rows identical", ref["cross_check"]["identical"],
            ", ".join(f"{k}={v['rows']}" for k, v in ref["cross_check"].items() if isinstance(v, dict)))
    so = result.get("scaleout")
    if so:
        row("scale-out: standalone full refresh (s)", so["build_s"], f"ratio to local {so['ratio_to_local']}")
        row("scale-out: rows identical to reference", so["rows_identical_to_reference"])
    q = result.get("query")
    if q:
        for label, ms in q["sql_ms"].items():
            row(f"query (Spark SQL) {label} (ms)", ms)
        row("query (Spark SQL) median over cookbook (ms)", q["sql_median_ms"])
        for label, ms in q["api_ms"].items():
            row(f"UI API {label} (ms)", ms)
        row("UI API median over routes (ms)", q["api_median_ms"])
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI)")
    parser.add_argument("--topics", type=int, help="live topics for the build benchmarks")
    parser.add_argument("--histories", type=int, nargs="+",
                        help="history lengths in rounds (at least two, shortest first)")
    parser.add_argument("--capture-sizes", type=int, nargs="+")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["capture", "builds", "scaleout", "query"])
    parser.add_argument("--json-out", help="also write the JSON document to this file")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    topics = args.topics or (300 if args.quick else 10_000)
    histories = args.histories or ([3, 12] if args.quick else [10, 100, 1000])
    if len(histories) < 2 or histories != sorted(set(histories)):
        parser.error("--histories must be at least two different lengths, shortest first")
    capture_sizes = args.capture_sizes or ([100, 300] if args.quick else [1000, 10_000])

    work = Path(tempfile.mkdtemp(prefix="tl-bench-"))
    result: dict = {"quick": args.quick, "topics": topics, "histories": histories, "seed": args.seed,
                    "cpus": os.cpu_count(), "started_at": utc_now(),
                    "errors": {}}

    def phase(name: str, fn) -> None:
        """Run one benchmark; a failure is reported in the JSON and the others still run."""
        try:
            fn()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 -- reported, never hidden
            log(f"{name} failed: {exc}")
            result["errors"][name] = str(exc)[-2000:]

    def builds() -> None:
        result["incremental"], result["full_refresh"], home = bench_builds(
            work, topics, histories, args.seed, gate_largest_only=args.quick)
        result["reference"] = result["full_refresh"].pop("reference")
        result["spark_to_duckdb_ratio"] = round(
            result["full_refresh"]["build_s"] / result["reference"]["seconds"], 2)
        if "scaleout" not in args.skip:
            phase("scaleout", lambda: result.__setitem__(
                "scaleout", bench_scaleout(home, work, result["full_refresh"]["build_s"],
                               gate=not args.quick)))
        if "query" not in args.skip:
            phase("query", lambda: result.__setitem__("query", bench_queries(home, 1 if args.quick else 5)))

    try:
        if "capture" not in args.skip:
            phase("capture", lambda: result.__setitem__(
                "capture", bench_capture(capture_sizes, 1 if args.quick else 3)))
        if "builds" not in args.skip:
            phase("builds", builds)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["finished_at"] = utc_now()
    print(table(result))
    document = json.dumps(result, indent=2, default=str)
    print(document)
    if args.json_out:
        Path(args.json_out).write_text(document + "\n")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
