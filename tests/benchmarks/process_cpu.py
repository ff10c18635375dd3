"""Where a command's CPU goes, by kind of process: Spark JVMs, pytest workers, Airflow, Kafka, ...
(issue #52: what the suite's work is made of, beside the per-file and per-fixture report).

    .venv/bin/python -m tests.benchmarks.process_cpu [--json-out F] -- bash scripts/test.sh

Runs the command and, every half second while it runs, reads every process of the machine
through psutil (its command line when first seen, its user and system CPU time when last seen).
At the end it prints each kind's CPU-seconds, the number of processes and the share of all, and
the machine's busy CPU-seconds over the same time. A process that ran before the command counts
with what it used meanwhile. A process that lives less than half a second is missed; a process
is counted under the command line it had when first seen (a ``bash`` that ``exec``s ``java``, as
``spark-submit`` does, counts as what it ran: the kinds look at the whole command line).
Exits with the command's status.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Self

# (kind, test on the command line), the first that matches wins
KINDS = (
    ("Spark 4.1 peer JVMs (Iceberg readers)", lambda c: ".venv-iceberg" in c and _spark(c)),
    ("Spark JVMs (drivers, standalone daemons)", lambda c: _spark(c)),
    ("Kafka broker JVMs", lambda c: _exe(c).endswith("java") and "kafka" in c),
    ("other JVMs", lambda c: _exe(c).endswith("java")),
    ("PySpark Python workers", lambda c: "pyspark.daemon" in c or "pyspark.worker" in c),
    # an xdist worker names itself after the test it runs ("[pytest-xdist running] tests/..."); a
    # command line that merely holds a path under pytest's temporary directory is not one
    ("pytest workers (in-process tests)", lambda c: c.startswith("[pytest-xdist") or " -m pytest" in c
     or _exe(c).endswith(("/pytest", "py.test"))),
    ("Airflow processes", lambda c: "airflow" in c),
    ("topic-lineage build processes (Python side)",
     lambda c: "topic-lineage build" in c or "spark_jobs/build.py" in c),
    ("dbt", lambda c: "dbt" in c),
    ("other Python processes (commands, helpers)", lambda c: "python" in _exe(c)),
    ("PostgreSQL", lambda c: "postgres" in c),
    ("Chromium", lambda c: "chrom" in c),
    ("SeaweedFS, Azurite, fake-gcs-server", lambda c: "weed" in _exe(c) or "fake-gcs" in c
     or _exe(c).endswith("node")),
    ("kernel threads", lambda c: c == ""),
)


def _exe(cmdline: str) -> str:
    return cmdline.split(" ", 1)[0]


def _spark(cmdline: str) -> bool:
    return "spark-class" in cmdline or "spark-submit" in cmdline or (
        _exe(cmdline).endswith("java") and "spark" in cmdline and "kafka" not in cmdline)


def kind_of(cmdline: str) -> str:
    return next((kind for kind, test in KINDS if test(cmdline)), "other")


def busy_seconds() -> float:
    """The machine's busy CPU time so far (all but idle and I/O wait), in CPU-seconds."""
    import psutil

    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "guest", 0.0) \
        - getattr(times, "guest_nice", 0.0)


class Sampler:
    """Every process seen, by (pid, start time): [command line, CPU-seconds when last seen]."""

    def __init__(self, interval_s: float = 0.5):
        self.interval_s = interval_s
        self.seen: dict[tuple[int, float], list] = {}
        self.before: dict[tuple[int, float], float] = {}  # what ran before the start had used
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-cpu", daemon=True)

    def _read(self) -> None:
        import psutil

        for p in psutil.process_iter(["cmdline", "cpu_times", "create_time"]):
            times, started = p.info["cpu_times"], p.info["create_time"]
            if times is None or started is None:  # ended meanwhile, or not ours to read
                continue
            entry = self.seen.get((p.pid, started))
            if entry is None or not entry[0]:
                entry = self.seen[(p.pid, started)] = [" ".join(p.info["cmdline"] or ()), 0.0]
            entry[1] = times.user + times.system

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Self:
        self._read()  # what already runs counts from now on, not from its own start
        self.before = {key: entry[1] for key, entry in self.seen.items()}
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._read()

    def by_kind(self) -> dict[str, dict]:
        seconds, processes = Counter(), Counter()
        for key, (cmdline, cpu) in self.seen.items():
            cpu -= self.before.get(key, 0.0)
            if key in self.before and not cpu:
                continue  # ran before and idled throughout
            kind = kind_of(cmdline)
            seconds[kind] += cpu
            processes[kind] += 1
        return {kind: {"cpu_s": round(cpu, 1), "processes": processes[kind]}
                for kind, cpu in seconds.most_common()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    began, busy = time.monotonic(), busy_seconds()
    with Sampler() as sampler:
        status = subprocess.call(command)
    wall, busy = time.monotonic() - began, busy_seconds() - busy
    kinds = sampler.by_kind()
    total = sum(k["cpu_s"] for k in kinds.values()) or 1.0
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n{wall:.1f} s of wall time, {busy:.0f} CPU-seconds busy on the machine, load average "
          f"{load}; by kind of process:")
    for kind, figures in kinds.items():
        print(f"  {figures['cpu_s']:8.1f} CPU-s {figures['processes']:5d} processes "
              f"{100 * figures['cpu_s'] / total:4.0f}%  {kind}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": command, "wall_s": round(wall, 1),
                                             "busy_cpu_s": round(busy), "status": status,
                                             "load_average": [round(x, 2) for x in os.getloadavg()],
                                             "kinds": kinds}, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
