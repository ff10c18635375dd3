"""The first full OpenLineage export of a history: incarnations per minute to a loopback HTTP
receiver (issue #41's goal: 100,000 incarnations in at most a minute).

    .venv/bin/python tests/benchmarks/bench_lineage.py [--incarnations 100000] [--workers 4]

Writes a published version of ``--incarnations`` incarnations (a tenth of them deleted, so a
CREATE and a DROP each; the rest a CREATE) in the layout a build publishes, into a throw-away
``TOPIC_LINEAGE_HOME``, starts the receiver (tests/lineage_receiver.py, the HTTP transport's own
endpoint ``/api/v1/lineage``) in a process of its own, and times ``emit_published()`` through
``OPENLINEAGE_URL``, the standard configuration: reading the tables, making the events, sending
them, recording the ledger. Prints one JSON document; checks the receiver got every event once.
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _serve(port_out, count, stop, cpu) -> None:
    import resource

    from lineage_receiver import Receiver

    with Receiver() as receiver:
        port_out.value = receiver.server.server_address[1]
        while not stop.wait(0.05):
            count.value = len(receiver.events)
        count.value = len(receiver.events)
        keys = {(e["run"]["runId"]) for e in receiver.events}
        count.value = len(keys) if len(keys) == len(receiver.events) else -len(receiver.events)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu.value = usage.ru_utime + usage.ru_stime


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--incarnations", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="bench-lineage-")
    os.environ["TOPIC_LINEAGE_HOME"] = home
    os.environ["TOPIC_LINEAGE_OPENLINEAGE_KAFKA"] = json.dumps({"bench": "127.0.0.1:9092"})
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        del os.environ[key]
    started = time.monotonic()
    events = write_history(args.incarnations)
    written = time.monotonic() - started

    context = multiprocessing.get_context("fork")
    port, count, stop = context.Value("i", 0), context.Value("q", 0), context.Event()
    receiver_cpu = context.Value("d", 0.0)
    server = context.Process(target=_serve, args=(port, count, stop, receiver_cpu), daemon=True)
    server.start()
    while not port.value:
        time.sleep(0.01)
    os.environ["OPENLINEAGE_URL"] = f"http://127.0.0.1:{port.value}"

    from topic_lineage.lineage.emit import emit_published

    before = _cpu()
    started = time.monotonic()
    result = emit_published(workers=args.workers)
    seconds = time.monotonic() - started
    emitter_cpu = _cpu() - before  # this process and its worker processes (joined)
    stop.set()
    server.join(30)
    again = emit_published(workers=args.workers)
    report = {
        "incarnations": args.incarnations,
        "events": result.emitted,
        "expected_events": events,
        "receiver_got_distinct": count.value,
        "workers": args.workers,
        "seconds": round(seconds, 2),
        "incarnations_per_minute": round(args.incarnations / seconds * 60),
        "events_per_second": round(result.emitted / seconds),
        "emitter_cpu_seconds": round(emitter_cpu, 2),
        "emitter_cpu_us_per_event": round(emitter_cpu / max(result.emitted, 1) * 1e6),
        "receiver_cpu_seconds": round(receiver_cpu.value, 2),
        "second_emission_events": again.emitted if again.transport else None,
        "tables_written_seconds": round(written, 1),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }
    print(json.dumps(report, indent=2))
    ok = result.emitted == events == count.value
    if not ok:
        sys.exit(f"the receiver did not get every event exactly once: {report}")


if __name__ == "__main__":
    main()
