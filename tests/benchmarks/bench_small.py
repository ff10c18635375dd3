"""Small-build benchmark (issue #24, goals 1 and 2): what a small store's build costs next to
Spark's own fixed cost, end to end as the user waits for it.

    .venv/bin/python -m tests.benchmarks.bench_small [--topics 300] [--rounds 15]
                                                     [--before REV] [--no-connect]
                                                     [--repeat N]

A seeded store (tests/benchmarks/datagen.py; 300 topics over 3 clusters x 15 rounds is about
4,400 observations, the size of a small estate's first weeks) is built with the CLI, each
command a process of its own, as users run it:

- **bare**: a Python process that starts a local Spark session (``topic_lineage.spark``), runs
  one job and stops: the baseline, measured three times between the builds (median). Twice:
  with the installation's archive of Spark's classes (topic_lineage.local.jvm_archive), as
  every driver of ours starts, and without it (``TOPIC_LINEAGE_JVM_ARCHIVE=off``), a Spark
  session as Spark ships: each build's ratio is given to both;
- **full**: ``topic-lineage build --full-refresh --master local[*]`` (build + gate + publish);
- **incremental**: one more round stored, then ``topic-lineage build --master local[*]``;
- **connect** (unless ``--no-connect``): the deployment's Spark Connect server (and its warm
  process, topic_lineage.local.warm) started and warmed by one incremental build, then one more
  round stored and built: end to end, store included (goal: at most 3 s); then one more with
  ``TOPIC_LINEAGE_WARM=off`` (the build in a process of its own), for comparison.

The builds run twice for this checkout: with the archive and without it (``now, no archive``),
so that what the archive gives and what the rest of the code gives are told apart.

``--before REV`` builds the same store with the code of another revision too (a ``git
worktree`` of REV, put first on ``PYTHONPATH``), in the same run, so that before and after are
measured side by side. Every build also writes a Spark event log; the number of Spark jobs it
ran is printed beside its time. ``--repeat N`` runs each kind of build N times per code,
alternating between the codes, and reports the median (one build moves by a second from run
to run on 2 cores). Prints a table and the JSON of all figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PY = sys.executable
# the console script's entry point (topic_lineage.cli.run; main before it existed)
CLI = "import sys; from topic_lineage import cli; sys.exit(getattr(cli, 'run', cli.main)())"
BARE = ("from topic_lineage.spark import get_spark; s = get_spark('bare'); "
        "s.range(10).count(); s.stop()")
GOALS = {"full": 1.5, "incremental": 1.2}
CONNECT_GOAL_S = 3.0
ARCHIVE_ENV = "TOPIC_LINEAGE_JVM_ARCHIVE"  # topic_lineage.local.jvm_archive (not imported: --before)


def event_log_lines(event_dir: Path) -> Iterator[str]:
    """Every line (one JSON event each) of the (zstd-compressed, Spark 4 rolling) Spark event
    logs written under ``event_dir`` (``spark.eventLog.dir``)."""
    import io

    import zstandard

    for path in sorted(event_dir.glob("*/events_*")):
        with path.open("rb") as raw:
            opened = (io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(raw))
                      if path.suffix == ".zstd" else io.TextIOWrapper(raw))
            yield from opened


def event_log_submit_args(event_dir: Path) -> str:
    """``PYSPARK_SUBMIT_ARGS`` that make the next Spark application log its events under
    ``event_dir`` (Spark's default, zstd-compressed): what :func:`event_log_lines` reads."""
    return f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{event_dir} pyspark-shell"


def driver_java_options(event_dir: Path) -> str:
    """``spark.driver.extraJavaOptions`` of the application logged under ``event_dir``."""
    import json

    for line in event_log_lines(event_dir):
        event = json.loads(line)
        if event["Event"] == "SparkListenerEnvironmentUpdate":
            return dict(event["Spark Properties"])["spark.driver.extraJavaOptions"]
    raise AssertionError(f"no environment event in {event_dir}")


def spark_jobs(event_dir: Path) -> int:
    """Spark jobs recorded in the event logs of a directory."""
    return sum('"Event":"SparkListenerJobStart"' in line for line in event_log_lines(event_dir))


class Variant:
    """One code revision: the checkout whose ``topic_lineage`` the processes import."""

    def __init__(self, name: str, checkout: Path, work: Path, slug: str, **extra_env: str):
        self.name, self.checkout, self.extra_env = name, checkout, extra_env
        self.home = work / f"home-{slug}"
        self.events = work / f"events-{slug}"

    def env(self, events: Path | None = None) -> dict:
        env = dict(os.environ, TOPIC_LINEAGE_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1",
                   PYTHONPATH=str(self.checkout), TOPIC_LINEAGE_MAX_AGE="off", **self.extra_env)
        env.pop("TOPIC_LINEAGE_SPARK_REMOTE", None)
        if events is not None:
            events.mkdir(parents=True, exist_ok=True)
            env["PYSPARK_SUBMIT_ARGS"] = event_log_submit_args(events)
        return env

    def run(self, label: str, code: str, *args: str, events: bool = True) -> dict:
        event_dir = self.events / label if events else None
        started = time.perf_counter()
        out = subprocess.run([PY, "-c", code, *args], env=self.env(event_dir), cwd=self.checkout,
                             capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        if out.returncode:
            raise SystemExit(f"{self.name} {label} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")
        return {"wall_s": round(wall, 2), "jobs": spark_jobs(event_dir) if event_dir else None,
                **self.iceberg_costs()}

    def iceberg_costs(self) -> dict:
        """What the newest version's Iceberg commits cost (staging on its branch, moving main),
        as its manifest records them (absent before the tables were Iceberg tables)."""
        manifests = [json.loads(p.read_text())
                     for p in (self.home / "warehouse" / "versions").glob("*/manifest.json")]
        if not manifests:
            return {}
        newest = max(manifests, key=lambda m: m.get("created_at", ""))
        return {"iceberg_stage_s": newest.get("iceberg_stage_seconds"),
                "iceberg_publish_s": newest.get("iceberg_publish_seconds")}


def store(home: Path, history, start: int, stop: int) -> float:
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)
    started = time.perf_counter()
    history.store_rounds(start, stop)
    return time.perf_counter() - started


def main(argv=None) -> int:
    from tests.benchmarks.datagen import History

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--before", metavar="REV", help="also build with the code of this revision")
    parser.add_argument("--no-connect", action="store_true", help="skip the Spark Connect cycle")
    parser.add_argument("--repeat", type=int, default=1,
                        help="builds of each kind per code, alternating (figures are medians)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="tl-bench-small-"))
    variants = [Variant("now, no archive", ROOT, work, "now-plain", **{ARCHIVE_ENV: "off"}),
                Variant("now", ROOT, work, "now")]
    if args.before:
        checkout = work / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(checkout),
                        args.before], check=True)
        variants.insert(0, Variant(f"before ({args.before})", checkout, work, "before"))
    history = History(topics=args.topics, clusters=3, seed=42)
    result: dict = {"topics": args.topics, "rounds": args.rounds, "load_before": os.getloadavg()}
    try:
        for variant in variants:
            store(variant.home, history, 0, args.rounds)
        result["observations"] = _observations(variants[-1].home)
        plain, now = variants[-2], variants[-1]
        bare, bare_plain = [], []

        def bares(label: str) -> None:
            bare.append(now.run(f"bare-{label}", BARE, events=False)["wall_s"])
            bare_plain.append(plain.run(f"bare-{label}", BARE, events=False)["wall_s"])

        runs: dict = {variant.name: {kind: [] for kind in GOALS} for variant in variants}
        bares("1")
        for turn in range(args.repeat):
            for variant in variants:
                runs[variant.name]["full"].append(variant.run(
                    f"full-{turn}", CLI, "build", "--full-refresh", "--master", "local[*]"))
        bares("2")
        for turn in range(args.repeat):
            for variant in variants:  # each incremental build gets one new round to build
                store(variant.home, history, args.rounds + turn, args.rounds + turn + 1)
                runs[variant.name]["incremental"].append(variant.run(
                    f"incremental-{turn}", CLI, "build", "--master", "local[*]"))
        bares("3")
        for variant in variants:
            result[variant.name] = {kind: _median_run(runs[variant.name][kind]) for kind in GOALS}
        next_round = args.rounds + args.repeat
        result["bare_s"], result["bare_no_archive_s"] = bare, bare_plain
        baseline, baseline_plain = statistics.median(bare), statistics.median(bare_plain)
        for variant in variants:
            for kind, goal in GOALS.items():
                run = result[variant.name][kind]
                run["ratio_to_bare"] = round(run["wall_s"] / baseline, 2)
                run["ratio_to_bare_no_archive"] = round(run["wall_s"] / baseline_plain, 2)
                run["goal"], run["meets_goal"] = goal, run["ratio_to_bare"] <= goal
                run["meets_goal_against_spark_as_shipped"] = run["ratio_to_bare_no_archive"] <= goal
        if not args.no_connect:
            result["connect"] = _connect_cycle(variants[-1], history, next_round)
    finally:
        for variant in variants:
            if variant.checkout != ROOT:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(variant.checkout)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    result["load_after"] = os.getloadavg()
    _print(result, variants)
    return 0


def _median_run(runs: list[dict]) -> dict:
    """One kind of build of one code: the median wall time, every wall time, the jobs."""
    return {"wall_s": round(statistics.median(r["wall_s"] for r in runs), 2),
            "walls_s": [r["wall_s"] for r in runs], "jobs": runs[-1]["jobs"],
            "iceberg_stage_s": [r.get("iceberg_stage_s") for r in runs],
            "iceberg_publish_s": [r.get("iceberg_publish_s") for r in runs]}


def _observations(home: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in (home / "snapshots").rglob("*.parquet"))


def _connect_cycle(variant: Variant, history, next_round: int) -> dict:
    """The warm Spark Connect server: one incremental build to warm it, then one cycle timed."""
    from topic_lineage.local import spark_server
    from topic_lineage.local.broker import free_port

    os.environ["TOPIC_LINEAGE_HOME"] = str(variant.home)
    os.environ[spark_server.PORT_ENV] = str(free_port())
    started = time.perf_counter()
    spark_server.start()
    server_start = time.perf_counter() - started
    try:
        env_port = {spark_server.PORT_ENV: os.environ[spark_server.PORT_ENV]}

        def build(label: str, **extra: str) -> float:
            began = time.perf_counter()
            out = subprocess.run([PY, "-c", CLI, "build"], env={**variant.env(), **env_port, **extra},
                                 cwd=variant.checkout, capture_output=True, text=True, check=False)
            if out.returncode:
                raise SystemExit(f"connect {label} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")
            return time.perf_counter() - began

        store(variant.home, history, next_round, next_round + 1)
        warm_up = build("warm-up")
        store_s = store(variant.home, history, next_round + 1, next_round + 2)
        build_s = build("cycle")
        # the same cycle with the build in a process of its own (no warm process)
        own_store_s = store(variant.home, history, next_round + 2, next_round + 3)
        own_build_s = build("cycle, own process", TOPIC_LINEAGE_WARM="off")
    finally:
        spark_server.stop()
    end_to_end = store_s + build_s
    return {"server_start_s": round(server_start, 2), "warm_up_build_s": round(warm_up, 2),
            "store_s": round(store_s, 2), "build_s": round(build_s, 2),
            "end_to_end_s": round(end_to_end, 2), "goal_s": CONNECT_GOAL_S,
            "own_process_end_to_end_s": round(own_store_s + own_build_s, 2),
            "meets_goal": end_to_end <= CONNECT_GOAL_S}


def _print(result: dict, variants: list[Variant]) -> None:
    baseline = statistics.median(result["bare_s"])
    baseline_plain = statistics.median(result["bare_no_archive_s"])
    print(f"small-build benchmark: {result['topics']} topics x {result['rounds']} rounds, 3 clusters "
          f"({result['observations']:,} observations); load average before "
          f"{result['load_before'][0]:.1f}, after {result['load_after'][0]:.1f}")
    print(f"bare Spark session (start + one job + stop) with the class archive, median of "
          f"{result['bare_s']}: {baseline:.1f} s; without it (as Spark ships), median of "
          f"{result['bare_no_archive_s']}: {baseline_plain:.1f} s")
    print(f"{'code':<28} {'build':<12} {'wall s':>7} {'x bare':>7} {'x plain':>7} {'goal':>5} "
          f"{'jobs':>5}  goal against bare / plain")
    for variant in variants:
        for kind in GOALS:
            run = result[variant.name][kind]
            verdicts = ["met" if run[key] else "NOT met"
                        for key in ("meets_goal", "meets_goal_against_spark_as_shipped")]
            print(f"{variant.name:<28} {kind:<12} {run['wall_s']:>7.1f} {run['ratio_to_bare']:>7.2f} "
                  f"{run['ratio_to_bare_no_archive']:>7.2f} {run['goal']:>5} {run['jobs']:>5}  "
                  f"{' / '.join(verdicts)}; Iceberg: stage {run['iceberg_stage_s']} s, "
                  f"publish {run['iceberg_publish_s']} s")
    if "connect" in result:
        c = result["connect"]
        print(f"warm Spark Connect server, one cycle (store + build), end to end: {c['end_to_end_s']:.1f} s "
              f"(store {c['store_s']:.1f} s, build {c['build_s']:.1f} s; goal {c['goal_s']} s: "
              f"{'met' if c['meets_goal'] else 'NOT met'}); server start {c['server_start_s']:.1f} s, "
              f"warm-up build {c['warm_up_build_s']:.1f} s; the same cycle with the build in a "
              f"process of its own (TOPIC_LINEAGE_WARM=off): {c['own_process_end_to_end_s']:.1f} s")
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main())
