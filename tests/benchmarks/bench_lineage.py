"""The first full OpenLineage export of a history: incarnations per minute to a loopback HTTP
receiver (issue #41's goal: 100,000 incarnations in at most a minute), by each way of sending,
in one run.

    .venv/bin/python tests/benchmarks/bench_lineage.py [--incarnations 100000] [--workers 2]
        [--paths ordered,http,async_http] [--json-out FILE]

Writes a published version of ``--incarnations`` incarnations (a tenth of them deleted, so a
CREATE and a DROP each; the rest a CREATE) in the layout a build publishes, into a throw-away
``TOPIC_LINEAGE_HOME``. Then, for each path, starts the receiver (tests/lineage_receiver.py, the
HTTP transport's own endpoint ``/api/v1/lineage``) in a process of its own and sends the whole
export to it, the ledger moved aside before each:

- ``ordered``: ``emit_published()`` through ``OPENLINEAGE_URL``, the standard configuration, as
  shipped (the configured HTTP transport's settings, sent in order with an acknowledgement per
  event: topic_lineage/lineage/ordered_http.py); reading the tables, making the events, sending
  them, recording the ledger;
- ``http``: the same through the client's own ``http`` transport (``requests``), as before;
- ``async_http``: the client's ``async_http`` transport alone (``OPENLINEAGE__TRANSPORT__TYPE=
  async_http``), one process: every event made and handed to ``client.emit``, then
  ``client.close()`` waits for the transport to finish; no ledger (it cannot say what was
  delivered), so only the rate and whether each dataset's events arrived in order.

Prints one JSON document (and writes it to ``--json-out``); checks every ledger path's receiver
got every event once and in order per dataset, and that a second emission sends nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _serve(port_out, count, stop, cpu, in_order) -> None:
    import resource
    from datetime import datetime

    from lineage_receiver import Receiver

    before = resource.getrusage(resource.RUSAGE_SELF)
    with Receiver() as receiver:
        port_out.value = receiver.server.server_address[1]
        while not stop.wait(0.05):
            count.value = len(receiver.events)
        events = receiver.events
        keys = {(e["run"]["runId"]) for e in events}
        count.value = len(keys) if len(keys) == len(events) else -len(events)
        last: dict[tuple[str, str], datetime] = {}
        ordered = True
        for event in events:  # each dataset's events in time order, as they arrived
            at = datetime.fromisoformat(event["eventTime"])
            for dataset in event["inputs"] + event["outputs"]:
                key = (dataset["namespace"], dataset["name"])
                ordered = ordered and last.get(key, at) <= at
                last[key] = at
        in_order.value = ordered
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu.value = (usage.ru_utime + usage.ru_stime) - (before.ru_utime + before.ru_stime)


class Served:
    """The receiver in a process of its own, for one path."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self.port, self.count, self.stop = context.Value("i", 0), context.Value("q", 0), context.Event()
        self.cpu, self.in_order = context.Value("d", 0.0), context.Value("b", False)
        self.process = context.Process(
            target=_serve, args=(self.port, self.count, self.stop, self.cpu, self.in_order),
            daemon=True)

    def __enter__(self) -> Self:
        self.process.start()
        while not self.port.value:
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.port.value}"
        return self

    def finish(self) -> dict:
        self.stop.set()
        self.process.join(60)
        return {"receiver_got_distinct": self.count.value, "receiver_in_order_per_dataset":
                bool(self.in_order.value), "receiver_cpu_seconds": round(self.cpu.value, 2)}

    def __exit__(self, *exc) -> None:
        if self.process.is_alive():
            self.process.kill()


def write_history(incarnations: int) -> int:
    """A published version of ``incarnations`` incarnations; returns the number of events."""
    from published_tables import at, incarnation, publish

    from topic_lineage.topic_id import canonical

    rows = []
    deleted = 0
    for n in range(incarnations):
        gone = n % 10 == 0
        deleted += gone
        rows += incarnation(
            f"k{n:07d}", "MkU3OEVBNTcwNTJENDM2Qg",
            [{"name": f"topic-{n:07d}", "at": at(1 + n % 20), "topic_id": canonical(
                (n + 1000).to_bytes(16, "big"))}],
            cluster_alias="bench", deleted_at=at(22) if gone else None,
        )
    publish("v-bench", rows)
    return incarnations + deleted


def _cpu() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _openlineage_environment(**settings: str) -> None:
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        del os.environ[key]
    os.environ.update(settings)


def run_ledger_path(path: str, incarnations: int, workers: int) -> dict:
    """One export through ``emit_published()`` (``ordered`` or ``http``), the ledger moved
    aside first; then a second emission, which must send nothing."""
    import shutil

    from topic_lineage.lineage import ledger
    from topic_lineage.lineage.emit import emit_published

    shutil.rmtree(ledger.ledger_dir(), ignore_errors=True)
    with Served() as served:
        _openlineage_environment(OPENLINEAGE_URL=served.url)
        before = _cpu()
        started = time.monotonic()
        result = emit_published(workers=workers, ordered_http=path == "ordered")
        seconds = time.monotonic() - started
        emitter_cpu = _cpu() - before  # this process and its worker processes (joined)
        received = served.finish()
    again = emit_published(workers=workers, ordered_http=path == "ordered")
    return {
        "path": path,
        "transport": result.transport,
        "events": result.emitted,
        **received,
        "seconds": round(seconds, 2),
        "incarnations_per_minute": round(incarnations / seconds * 60),
        "events_per_second": round(result.emitted / seconds),
        "emitter_cpu_seconds": round(emitter_cpu, 2),
        "emitter_cpu_us_per_event": round(emitter_cpu / max(result.emitted, 1) * 1e6),
        "second_emission_events": again.emitted if again.transport else None,
    }


def run_async_http(incarnations: int) -> dict:
    """The client's ``async_http`` transport alone (see the module): its rate, its order."""
    import shutil

    from openlineage.client import OpenLineageClient

    from topic_lineage.lineage import ledger
    from topic_lineage.lineage.emit import pending_changes
    from topic_lineage.lineage.events import job_namespace, to_event

    shutil.rmtree(ledger.ledger_dir(), ignore_errors=True)
    pending, _ = pending_changes("v-bench")
    with Served() as served:
        _openlineage_environment(OPENLINEAGE_URL=served.url, OPENLINEAGE__TRANSPORT__TYPE="async_http")
        client = OpenLineageClient()
        namespace = job_namespace()
        before = _cpu()
        started = time.monotonic()
        for change in pending:
            client.emit(to_event(change, "v-bench", namespace))
        handed = time.monotonic() - started
        client.close()  # waits until every event was answered or failed
        seconds = time.monotonic() - started
        emitter_cpu = _cpu() - before
        stats = dict(client.transport.get_stats())
        received = served.finish()
    return {
        "path": "async_http",
        "transport": client.transport.kind,
        "events": len(pending),
        "transport_stats": stats,
        **received,
        "seconds_until_every_event_was_handed_over": round(handed, 2),
        "seconds": round(seconds, 2),
        "incarnations_per_minute": round(incarnations / seconds * 60),
        "events_per_second": round(len(pending) / seconds),
        "emitter_cpu_seconds": round(emitter_cpu, 2),
        "emitter_cpu_us_per_event": round(emitter_cpu / max(len(pending), 1) * 1e6),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--incarnations", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--paths", default="ordered,http,async_http",
                        help="comma-separated, in the order to run: ordered, http, async_http")
    parser.add_argument("--json-out", type=Path, help="also write the JSON document to this file")
    args = parser.parse_args()
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if unknown := set(paths) - {"ordered", "http", "async_http"}:
        parser.error(f"--paths: unknown {sorted(unknown)}")

    home = tempfile.mkdtemp(prefix="bench-lineage-")
    os.environ["TOPIC_LINEAGE_HOME"] = home
    os.environ["TOPIC_LINEAGE_OPENLINEAGE_KAFKA"] = json.dumps({"bench": "127.0.0.1:9092"})
    _openlineage_environment()
    started = time.monotonic()
    events = write_history(args.incarnations)
    written = time.monotonic() - started

    load_before = [round(x, 1) for x in os.getloadavg()]
    runs = []
    for path in paths:
        runs.append(run_async_http(args.incarnations) if path == "async_http"
                    else run_ledger_path(path, args.incarnations, args.workers))
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    by_path = {run["path"]: run for run in runs}
    report = {
        "incarnations": args.incarnations,
        "expected_events": events,
        "workers": args.workers,
        "runs": runs,
        "ratios_to_http": {path: round(by_path["http"]["seconds"] / run["seconds"], 2)
                           for path, run in by_path.items() if "http" in by_path},
        "tables_written_seconds": round(written, 1),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": [round(x, 1) for x in os.getloadavg()],
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    bad = [run["path"] for run in runs if run["path"] != "async_http" and not (
        run["events"] == events == run["receiver_got_distinct"]
        and run["receiver_in_order_per_dataset"] and run["second_emission_events"] == 0)]
    if bad:
        sys.exit(f"{bad}: the receiver did not get every event exactly once, in order per dataset")


if __name__ == "__main__":
    main()
