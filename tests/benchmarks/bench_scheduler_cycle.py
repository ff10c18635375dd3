"""One pipeline cycle through the Airflow scheduler on the benchmark's history (issue #16 goal 1).

    .venv/bin/python tests/benchmarks/bench_scheduler_cycle.py [--topics 10000 --clusters 3
        --rounds 1000] [--broker-topics 3400] [--cycles 3] [--json-out FILE]

The user's path, end to end:

1. the generated history (tests/benchmarks/datagen.py) is stored in a fresh TOPIC_LINEAGE_HOME;
2. the local deployment starts as the README says (``topic-lineage airflow setup``, ``start
   --detach``; LocalExecutor, PostgreSQL 18, the Spark Connect server with
   ``TOPIC_LINEAGE_CONNECT=on``) against a local broker holding ``--broker-topics`` topics, a
   fourth cluster; the snapshot schedule is once a year, so only the triggers below capture;
3. the first publish: whatever the start's scheduled run builds, then one triggered
   ``topic_incarnations`` run if nothing was published (a full build of the whole history);
4. a first capture of the broker (the UI's *Trigger* of ``kafka_topic_snapshot``), whose asset
   event runs ``topic_incarnations`` (all the broker's topics are new: the server warms up);
5. ``--cycles`` measured *capture cycles*: the broker changes (0.2 % of its topics deleted, as
   many created), then the *Trigger* of ``kafka_topic_snapshot``; the cycle ends when the asset-
   triggered ``topic_incarnations`` run has published. The broker's cluster has a short history
   (a few captures);
6. ``--cycles`` *generated-cluster cycles*, the CLI benchmark's cycle (bench_cycle.py) through
   the scheduler: the next round of the first generated cluster (the long history: ``--rounds``
   snapshots) is stored as a capture stores it, then the *Trigger* of ``topic_incarnations``.

Each figure is trigger -> published (the version manifest's ``published`` time), with the
scheduler's gaps and each task's duration from the REST API.

The generated clusters' snapshots are months old, so the gate's freshness check is off
(``TOPIC_LINEAGE_MAX_AGE=off``, as in bench_cycle.py). Everything is stopped and removed
afterwards. Not a timed test: it prints its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS.parent))

from bench_backfill import local_deployment, secs, ts, wait_quiet
from browser_support import wait_for
from test_airflow_local_deployment import (  # the deployment test's own helpers
    BUILD_DAG,
    SNAPSHOT_DAG,
    Api,
    dag_runs,
    private_root,
    task_instances,
    trigger,
    trigger_and_wait,
)

TASKS = ("plan", "build", "validate", "publish", "health")


def run_of(api: Api, dag_id: str, run_id: str) -> dict:
    return next(r for r in dag_runs(api, dag_id) if r["dag_run_id"] == run_id)


def ended(api: Api, dag_id: str, run_id: str) -> dict | None:
    run = run_of(api, dag_id, run_id)
    return run if run["state"] in ("success", "failed") else None


def published_at(version: str) -> datetime:
    from topic_lineage import warehouse

    history = warehouse.read_manifest(version)["history"]
    return datetime.fromisoformat(next(h["at"] for h in history if h["status"] == "published"))


def capture_cycle(api: Api, broker, serial: int, churn: int) -> dict:
    """Change the broker, trigger a capture, wait for the asset-triggered build to publish."""
    names = sorted(n for n in broker.topic_names() if not n.startswith("_"))
    broker.delete_topics(names[:churn])
    broker.create_topics([f"new-{serial:03d}-{i:04d}" for i in range(churn)])
    builds_before = {r["dag_run_id"] for r in dag_runs(api, BUILD_DAG)}
    with cycle_clock(api) as clock:
        snap_id = trigger(api, SNAPSHOT_DAG)["dag_run_id"]
        snap = wait_for(lambda: ended(api, SNAPSHOT_DAG, snap_id), 600, "the capture run",
                        interval=0.5)
        build = wait_for(lambda: next((r for r in dag_runs(api, BUILD_DAG)
                                       if r["dag_run_id"] not in builds_before), None),
                         120, "the asset-triggered build run", interval=0.5)
        clock["build_run_id"] = build["dag_run_id"]
    assert snap["state"] == "success", snap
    row = clock["row"]
    snap_tis = task_instances(api, SNAPSHOT_DAG, snap_id)
    row["capture_run_s"] = secs(ts(snap["end_date"]), ts(snap["start_date"]))
    row["capture_tasks"] = {t: ti.get("duration") for t, ti in snap_tis.items()}
    row["capture_end_to_build_run_start_s"] = secs(ts(row["build_run"]["start_date"]),
                                                   ts(snap["end_date"]))
    return row


def generated_cycle(api: Api, history, round_no: int) -> dict:
    """Store round ``round_no`` of the first generated cluster (as a capture stores it: the
    cluster with the long history), then the UI's Trigger of ``topic_incarnations``."""
    from tests.benchmarks.bench_cycle import store_one_snapshot

    store_s = store_one_snapshot(history, round_no)
    with cycle_clock(api) as clock:
        clock["build_run_id"] = trigger(api, BUILD_DAG)["dag_run_id"]
    clock["row"]["store_s"] = store_s
    return clock["row"]


@contextlib.contextmanager
def cycle_clock(api: Api):
    """Times a cycle from the block's start (the trigger) to the publish of the build run the
    block names in ``clock["build_run_id"]``; the figures land in ``clock["row"]``."""
    from topic_lineage import warehouse

    before = warehouse.current_version()
    clock = {"load_before": os.getloadavg()[0]}
    posted_at = datetime.now(UTC)
    yield clock
    run_id = clock["build_run_id"]
    build = wait_for(lambda: ended(api, BUILD_DAG, run_id), 1800, "the build run", interval=0.5)
    assert build["state"] == "success", build
    version = warehouse.current_version()
    assert version and version != before, f"nothing new was published ({before} -> {version})"
    manifest = warehouse.read_manifest(version)
    times = {h["status"]: datetime.fromisoformat(h["at"]) for h in manifest["history"]}
    tis = task_instances(api, BUILD_DAG, run_id)
    row = {
        "load_before": clock["load_before"], "version": version, "mode": manifest["mode"],
        "new_snapshots": manifest["new_snapshots"], "build_run": build,
        "trigger_to_published_s": secs(times["published"], posted_at),
        "trigger_to_build_run_end_s": secs(ts(build["end_date"]), posted_at),
        "build_run_start_to_published_s": secs(times["published"], ts(build["start_date"])),
        "tasks": {}, "between": {},
        "manifest": {"build_s": secs(times.get("built"), times.get("building")),
                     "validate_s": secs(times.get("validated"), times.get("built")),
                     "publish_s": secs(times.get("published"), times.get("validated"))},
        "spark_settings": manifest.get("spark_settings"),
        "topic_snapshots_read": (manifest.get("gate") or {}).get("topic_snapshots_read"),
    }
    previous_end, previous = ts(build["start_date"]), "run.start"
    for task in TASKS:
        ti = tis.get(task)
        if not ti or not ti["start_date"]:
            continue
        row["tasks"][task] = {"state": ti["state"], "duration_s": ti.get("duration")}
        row["between"][f"{previous} -> {task}.start"] = secs(ts(ti["start_date"]), previous_end)
        previous_end, previous = ts(ti["end_date"]), f"{task}.end"
    clock["row"] = row


def print_cycle(label: str, c: dict) -> None:
    print(f"\n{label} ({c['mode']}, {c['new_snapshots']} new snapshot(s); load average "
          f"{c['load_before']:.1f}): trigger -> published {c['trigger_to_published_s']:.2f} s, "
          f"-> build run end {c['trigger_to_build_run_end_s']:.2f} s")
    if "capture_run_s" in c:
        print(f"  capture run {c['capture_run_s']:.2f} s (tasks "
              + ", ".join(f"{t} {d:.2f}" for t, d in c["capture_tasks"].items() if d is not None)
              + f"); capture end -> build run start {c['capture_end_to_build_run_start_s']:.2f} s")
    else:
        print(f"  store the snapshot {c['store_s']:.2f} s (before the trigger)")
    for gap, value in c["between"].items():
        print(f"  {gap:34} {value:6.2f} s")
    for task, t in c["tasks"].items():
        print(f"  task {task:9} {t['state']:8} {t['duration_s'] or 0:6.2f} s")
    m = c["manifest"]
    print(f"  in the build and validate tasks (manifest): build {m['build_s']:.2f} s, validate "
          f"{m['validate_s']:.2f} s, publish {m['publish_s']:.2f} s; settings "
          f"{c['spark_settings']}; gate read {c['topic_snapshots_read']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--broker-topics", type=int, default=3400)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    from tests.benchmarks.datagen import History
    from topic_lineage import warehouse
    from topic_lineage.local import spark_server
    from topic_lineage.local.broker import free_port

    root = private_root("tl-bench-scheduler-")
    home = root / "tl-home"
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)  # the history is stored and read here
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home), "TOPIC_LINEAGE_CONNECT": "on",
           spark_server.PORT_ENV: str(free_port()), "TOPIC_LINEAGE_MAX_AGE": "off"}
    env.pop(spark_server.REMOTE_ENV, None)
    os.environ[spark_server.PORT_ENV] = env[spark_server.PORT_ENV]
    result: dict = {"topics": args.topics, "clusters": args.clusters, "rounds": args.rounds,
                    "broker_topics": args.broker_topics, "load_start": os.getloadavg()}
    t0 = time.monotonic()
    history = History(args.topics, args.clusters)
    result["observations"] = history.store_rounds(0, args.rounds)
    print(f"stored {result['observations']:,} observations in {time.monotonic() - t0:.0f} s",
          flush=True)

    topics = [f"topic-{i:05d}" for i in range(args.broker_topics - 1)]
    with local_deployment(env, root, topics, "--snapshot-schedule", "0 0 1 1 *") as deployment:
        api, broker = deployment.api, deployment.broker
        t0 = time.monotonic()
        wait_for(lambda: spark_server.remote_url(), 300, "the Spark Connect server", interval=1)
        result["setup_start_s"] = round(deployment.setup_start_s + time.monotonic() - t0, 1)
        print(f"setup + start (server answering): {result['setup_start_s']} s ({api.base})",
              flush=True)

        t0 = time.monotonic()
        wait_quiet(api, 3600)  # the start's scheduled run, if any, builds the whole history
        if not warehouse.current_version():
            trigger_and_wait(api, BUILD_DAG, 3600)
        result["first_publish_s"] = round(time.monotonic() - t0, 1)
        first = warehouse.read_manifest(warehouse.current_version())
        print(f"first publish (full build of the history through the scheduler): "
              f"{result['first_publish_s']} s, mode {first['mode']}", flush=True)

        churn = max(1, args.broker_topics // 500)
        result["capture_cycles"] = []
        for n in range(args.cycles + 1):  # cycle 0: the broker's first capture (all new)
            cycle = capture_cycle(api, broker, n, churn)
            result["capture_cycles"].append(cycle)
            print_cycle(f"capture cycle {n}", cycle)
        result["generated_cycles"] = []
        for n in range(args.cycles):
            cycle = generated_cycle(api, history, args.rounds + n)
            result["generated_cycles"].append(cycle)
            print_cycle(f"generated-cluster cycle {n + 1}", cycle)
        result["load_end"] = os.getloadavg()
        for kind in ("capture_cycles", "generated_cycles"):
            measured = result[kind][1:] if kind == "capture_cycles" else result[kind]
            print(f"\n{kind}: trigger -> published "
                  + ", ".join(f"{c['trigger_to_published_s']:.2f}" for c in measured) + " s")
        print(f"({result['observations']:,} observations stored before; load average at start "
              f"{result['load_start'][0]:.1f}, at end {result['load_end'][0]:.1f})", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
