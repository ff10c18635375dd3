"""A 30-day daily backfill of ``topic_incarnations`` with nothing new, through the scheduler.

The local deployment started as the README says (``topic-lineage airflow setup`` then
``topic-lineage airflow start --detach``, as subprocesses) in a throw-away TOPIC_LINEAGE_HOME (and
so AIRFLOW_HOME) on free ports, against a local broker with a few topics. One capture and one
publish (normal runs of each DAG, through the REST API's trigger, as the UI's *Trigger* sends it),
then the backfill exactly as the UI's Backfill dialog creates it (``POST /api/v2/backfills/
dry_run``, then ``POST /api/v2/backfills``, with the dialog's default max active runs: 1; the
dialog also caps it at the DAG's ``max_active_runs``). Prints:

- the total wall time from the POST to the backfill's ``completed_at``;
- per run: queued -> started -> ended, and the gap since the previous run ended;
- per task (REST API task instances): state, scheduled -> queued -> started -> ended, duration;
- what the scheduler spends between tasks (upstream ended -> downstream queued -> started), and
  from the last run's end to ``completed_at`` (the scheduler marks backfills complete every 30 s).

Everything is stopped and removed afterwards. Not a timed test: it prints its figures.

    .venv/bin/python tests/benchmarks/bench_backfill.py [--days 30] [--topics 5]
        [--max-active-runs 1] [--json-out FILE]

The snapshot DAG's schedule is set to once a year (``setup --snapshot-schedule``) so no
scheduled capture adds a snapshot during the backfill (every backfill run must be a no-op).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from browser_support import wait_for
from test_airflow_local_deployment import (  # the deployment test's own helpers
    BUILD_DAG,
    SNAPSHOT_DAG,
    Api,
    cli,
    dag_runs,
    private_root,
    task_instances,
    trigger_and_wait,
    ui_backfill,
)

UI_DIALOG_MAX_ACTIVE_RUNS = 1
"""What Airflow 3.3's Backfill dialog sends unless the user changes it (and at most the DAG's
``max_active_runs``): its form's default values in ``airflow/ui``."""


@dataclass
class Deployment:
    api: Api
    broker: object  # topic_lineage.local.broker.LocalBroker
    setup_start_s: float  # `airflow setup` + `start --detach`, until Airflow answers


@contextlib.contextmanager
def local_deployment(env: dict, root: Path, topics: list[str], *setup_args: str):
    """A local broker holding ``topics``, then the local deployment started as the README says
    (``topic-lineage airflow setup`` with ``setup_args``, ``start --detach``, subprocesses);
    yields a :class:`Deployment` signed in as admin. Everything is stopped and ``root`` removed
    afterwards."""
    from topic_lineage.local.broker import LocalBroker

    broker = LocalBroker().start()
    started = False
    try:
        broker.create_topics(topics)
        t0 = time.monotonic()
        cli(env, "airflow", "setup", "--bootstrap-servers", broker.bootstrap_servers, *setup_args)
        started = True
        banner = cli(env, "airflow", "start", "--detach")
        base = banner.split("UI:", 1)[1].split()[0].rstrip("/")
        password = banner.split("password", 1)[1].split()[0]
        yield Deployment(Api(base, "admin", password), broker, round(time.monotonic() - t0, 1))
    finally:
        if started:
            print(cli(env, "airflow", "stop").strip())
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def secs(later: datetime | None, earlier: datetime | None) -> float | None:
    return (later - earlier).total_seconds() if later and earlier else None


def fmt(value: float | None) -> str:
    return "    -" if value is None else f"{value:5.1f}"


def summary(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return (f"n={len(values)} mean {statistics.mean(values):.2f}s median "
            f"{statistics.median(values):.2f}s min {min(values):.2f}s max {max(values):.2f}s "
            f"sum {sum(values):.1f}s")


def backfill_range(api: Api, days: int, max_active_runs: int) -> tuple[datetime, datetime]:
    """A range of ``days`` daily runs ending two days ago (yesterday's interval may already have
    the scheduled run the DAG gets at start, which reprocess "none" would leave out)."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    end = today - timedelta(days=2)
    start = end - timedelta(days=days - 1)
    body = {
        "dag_id": BUILD_DAG, "dag_run_conf": {}, "from_date": start.isoformat().replace("+00:00", "Z"),
        "to_date": end.isoformat().replace("+00:00", "Z"), "max_active_runs": max_active_runs,
        "reprocess_behavior": "none", "run_backwards": False, "run_on_latest_version": True,
    }
    count = api.json("/api/v2/backfills/dry_run", "POST", body)["total_entries"]
    if count != days:
        raise SystemExit(f"the dry run of {start:%F}..{end:%F} gives {count} runs, not {days}")
    return start, end


def wait_quiet(api: Api, timeout_s: float) -> None:
    """Until no run of either DAG is queued or running."""
    def quiet():
        return all(r["state"] in ("success", "failed")
                   for dag in (SNAPSHOT_DAG, BUILD_DAG) for r in dag_runs(api, dag))

    wait_for(quiet, timeout_s, "every run to end", interval=3)


def report(api: Api, backfill: dict, posted: float, posted_at: datetime, completed: dict,
           observed: float) -> dict:
    created, completed_at = ts(completed["created_at"]), ts(completed["completed_at"])
    runs = sorted((r for r in dag_runs(api, BUILD_DAG) if r["run_type"] == "backfill"),
                  key=lambda r: r["start_date"] or "")
    print(f"\nbackfill {backfill['id']}: {len(runs)} runs, max_active_runs "
          f"{completed['max_active_runs']}, states {sorted({r['state'] for r in runs})}")
    print(f"  POST -> completed_at (server clock): {secs(completed_at, posted_at):.1f}s; "
          f"created_at -> completed_at: {secs(completed_at, created):.1f}s; "
          f"client wall time until seen completed: {observed - posted:.1f}s")
    last_end = max(ts(r["end_date"]) for r in runs)
    first_start = min(ts(r["start_date"]) for r in runs)
    print(f"  POST -> first run started {secs(first_start, posted_at):.1f}s; last run ended -> "
          f"completed_at {secs(completed_at, last_end):.1f}s")

    run_rows, task_rows, gaps = [], [], {"run_gap": [], "run_wait": [], "run_duration": []}
    between: dict[str, list[float]] = {}
    previous_end = None
    print("\n  run (logical date)   queued->start  start->end  gap since previous run ended")
    for run in runs:
        queued, start, end = ts(run["queued_at"]), ts(run["start_date"]), ts(run["end_date"])
        gap = secs(start, previous_end)
        previous_end = end
        row = {"logical_date": run["logical_date"], "state": run["state"],
               "wait": secs(start, queued), "duration": secs(end, start), "gap": gap}
        run_rows.append(row)
        gaps["run_wait"].append(row["wait"])
        gaps["run_duration"].append(row["duration"])
        if gap is not None:
            gaps["run_gap"].append(gap)
        print(f"  {run['logical_date'][:10]} {run['state']:8} {fmt(row['wait'])}s     "
              f"{fmt(row['duration'])}s     {fmt(gap)}s")
        tis = task_instances(api, BUILD_DAG, run["dag_run_id"])
        for t in tis.values():
            sched, q, s, e = (ts(t.get("scheduled_when")), ts(t.get("queued_when")),
                              ts(t["start_date"]), ts(t["end_date"]))
            task_rows.append({"run": run["logical_date"][:10], "task": t["task_id"],
                              "state": t["state"], "duration": t.get("duration"),
                              "scheduled_to_queued": secs(q, sched), "queued_to_start": secs(s, q),
                              "start_to_end": secs(e, s), "process": s is not None and q is not None})
        # the scheduler between tasks: an upstream's end -> the downstream's queued / started
        order = [t for t in ("plan", "build", "validate", "publish", "health") if t in tis]
        ran = [t for t in order if tis[t]["start_date"] and tis[t]["queued_when"]]
        for up, down in itertools.pairwise(ran):
            up_end = ts(tis[up]["end_date"])
            key = f"{up}.end -> {down}"
            between.setdefault(key + ".queued", []).append(secs(ts(tis[down]["queued_when"]), up_end))
            between.setdefault(key + ".start", []).append(secs(ts(tis[down]["start_date"]), up_end))
        if ran:
            between.setdefault("run.start -> first task queued", []).append(
                secs(ts(tis[ran[0]]["queued_when"]), start))
            between.setdefault("last task end -> run.end", []).append(
                secs(end, max(ts(tis[t]["end_date"]) for t in ran)))

    print("\n  per task (over all runs):")
    for task in ("plan", "build", "validate", "publish", "health"):
        rows = [r for r in task_rows if r["task"] == task]
        if not rows:
            continue
        states = sorted({r["state"] for r in rows})
        processes = sum(1 for r in rows if r["process"])
        print(f"    {task:9} states {states}, task processes started: {processes} of {len(rows)}")
        print(f"      duration          {summary([r['duration'] for r in rows])}")
        print(f"      scheduled->queued {summary([r['scheduled_to_queued'] for r in rows])}")
        print(f"      queued->started   {summary([r['queued_to_start'] for r in rows])}")
    print("\n  the scheduler between steps:")
    for key, values in between.items():
        print(f"    {key:38} {summary(values)}")
    print(f"    {'previous run end -> next run start':38} {summary(gaps['run_gap'])}")
    print(f"\n  runs: duration {summary(gaps['run_duration'])}")
    print(f"        queued->started {summary(gaps['run_wait'])}")
    processes = sum(1 for r in task_rows if r["process"])
    print(f"  task processes started in all: {processes} ({processes / max(len(runs), 1):.1f} per run)")
    return {"total_s": secs(completed_at, posted_at), "observed_s": observed - posted,
            "runs": run_rows, "tasks": task_rows, "between": between,
            "last_run_end_to_completed_s": secs(completed_at, last_end)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--max-active-runs", type=int, default=UI_DIALOG_MAX_ACTIVE_RUNS,
                        help="what the dialog's 'max active runs' field holds (its default: 1)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    from topic_lineage import noop, warehouse

    print(f"load average at start: {os.getloadavg()}", flush=True)
    root = private_root("tl-bench-backfill-")
    home = root / "tl-home"
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home)}
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)  # to read the warehouse here
    result: dict = {"load_start": os.getloadavg()}
    topics = [f"topic-{i:03d}" for i in range(args.topics)]
    with local_deployment(env, root, topics, "--snapshot-schedule", "0 0 1 1 *") as deployment:
        api = deployment.api
        print(f"setup + start: {deployment.setup_start_s:.0f}s ({api.base})", flush=True)

        t1 = time.monotonic()
        trigger_and_wait(api, SNAPSHOT_DAG, 600)
        print(f"capture (one manual snapshot run): {time.monotonic() - t1:.0f}s", flush=True)
        wait_quiet(api, 1800)  # the asset-triggered build of that capture, and the start's run
        trigger_and_wait(api, BUILD_DAG, 1800)
        wait_quiet(api, 600)
        print(f"publish (runs until quiet, then one manual build run): "
              f"{time.monotonic() - t1:.0f}s in all", flush=True)
        published = warehouse.current_version()
        assert published, "nothing was published"
        for run in dag_runs(api, BUILD_DAG):
            print(f"  before the backfill: {run['run_type']:10} {run['state']:8} "
                  f"{run['dag_run_id']}")
        decision = noop.decide(0.5, 5)
        print(f"published {published}; no-op now: {decision.noop} ({decision})", flush=True)
        assert decision.noop

        start, end = backfill_range(api, args.days, args.max_active_runs)
        print(f"\nload average before the backfill: {os.getloadavg()}", flush=True)
        result["load_before_backfill"] = os.getloadavg()
        posted_at, posted = datetime.now(UTC), time.monotonic()
        backfill, count = ui_backfill(api, BUILD_DAG, start, end,
                                      max_active_runs=args.max_active_runs)
        assert count == args.days, count
        completed = wait_for(
            lambda: (b := api.json(f"/api/v2/backfills/{backfill['id']}"))["completed_at"] and b,
            3600, "the backfill's completed_at", interval=1)
        observed = time.monotonic()
        result["load_after_backfill"] = os.getloadavg()
        result |= report(api, backfill, posted, posted_at, completed, observed)
        runs = [r for r in dag_runs(api, BUILD_DAG) if r["run_type"] == "backfill"]
        assert len(runs) == args.days and {r["state"] for r in runs} == {"success"}, runs
        assert warehouse.current_version() == published  # nothing was built or published
        assert [m["version"] for m in warehouse.list_versions()] == [published]
        print(f"\nTOTAL {args.days}-day backfill, POST -> completed_at: {result['total_s']:.1f}s "
              f"(load average before {result['load_before_backfill'][0]:.1f}, after "
              f"{result['load_after_backfill'][0]:.1f}); published version unchanged", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
