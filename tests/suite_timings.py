"""Where the suite's time goes (issue #52): per test file and per fixture, in every run.

Each test's set-up, call and tear-down time is added to its file; each fixture's set-up time to
its name (with its scope: a session fixture is a server start, a module fixture a Spark session
or a module's data, ...). xdist workers hand their figures to the controller, which prints the
files and fixtures that took longest and writes them all to ``test-output/suite-timings.json``
(``$TOPIC_LINEAGE_TIMINGS``, a path, changes where; ``off`` writes nothing). The times are wall
times on the worker that ran them: with two workers the suite's wall time is about half their
sum.

Each file also gets ``cpu``: the CPU-seconds its worker's process tree used while the file ran
(the worker, the commands, servers and Spark JVMs it started, from ``/proc``: :class:`TreeCpu`),
what the suite's time is made of on a machine it keeps busy. A server a session fixture started
counts with the files that ran while it lived; a process that left the tree alive counts as long
as it lives, if the tree held it when last looked at (every second); one that lived and left
between two looks is missed.

Each file also gets the worker that ran it and when (``from_s`` and ``to_s``, seconds from the
start of the run): which files ran beside which, and when a worker ran out of files while the
other still ran its last.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

_FILES: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
_FIXTURES: dict[str, dict] = {}
_STARTED = time.monotonic()
_CPU: dict[str, float] = defaultdict(float)  # this process's files: their process tree's CPU-seconds
_RUNNING: list = []  # [file, the tree's CPU-seconds when it started] of the file running here
_RUNS_TESTS: list[bool] = [True]  # False in xdist's controller (it hears of tests its workers run)
_SPANS: dict[str, list] = {}  # file -> [worker, wall clock when it started, when it ended]
_BEGAN = time.time()  # the wall clock spans are reckoned from (the controller's)


def pytest_configure(config):
    _RUNS_TESTS[0] = hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def _processes() -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, start time) -> (parent pid, CPU ticks: its own and its reaped children's) of every
    process of the machine, from ``/proc`` (empty where there is none)."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        # fields from the state on: ppid 1, utime stime cutime cstime 11-14, starttime 19
        found[int(entry.name), int(fields[19])] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    return found


class TreeCpu:
    """CPU-seconds (user and system) used by process ``root`` and every process under it: its
    own and its reaped children's, each live descendant's with its reaped children's, and those
    of processes that left the tree alive (a JVM whose parent ended without waiting for it:
    reparented, its time would reach no one under ``root``) as last seen. A process is seen
    leaving when :meth:`seconds` runs while it lives on, so a thread calls it every
    ``interval_s``."""

    def __init__(self, root: int | None = None, interval_s: float = 1.0):
        import threading

        self.root = os.getpid() if root is None else root
        self.inside: set = set()  # the tree's processes at the last look
        self.left: dict = {}  # processes that left it: their ticks as last seen
        self.lock = threading.Lock()
        self.base = 0.0
        self.base = self.seconds()
        if interval_s > 0:
            threading.Thread(target=self._watch, args=(interval_s,), name="tree-cpu", daemon=True).start()

    def _watch(self, interval_s: float) -> None:
        while True:
            time.sleep(interval_s)
            self.seconds()

    def seconds(self) -> float:
        """The tree's CPU-seconds since this was made."""
        with self.lock:
            found = _processes()
            children = defaultdict(list)
            for key, (parent, _) in found.items():
                children[parent].append(key)
            roots = [key for key in found if key[0] == self.root]
            inside, pending = set(), list(roots)
            while pending:
                key = pending.pop()
                inside.add(key)
                pending.extend(children.get(key[0], ()))
            for key in self.inside - inside:
                if key in found:  # alive outside the tree: it left
                    self.left[key] = found[key][1]
            for key in self.left:
                if key in found:
                    self.left[key] = found[key][1]
            self.inside = inside
            ticks = sum(found[key][1] for key in inside) + sum(self.left.values())
            return ticks / os.sysconf("SC_CLK_TCK") - self.base


_TREE: list[TreeCpu] = []


def _tree_seconds() -> float:
    if not _TREE:
        _TREE.append(TreeCpu())
    return _TREE[0].seconds()


def _file_ended() -> None:
    if _RUNNING:
        name, started = _RUNNING.pop()
        _CPU[name] += _tree_seconds() - started
        _SPANS[name][2] = time.time()


def pytest_runtest_logstart(nodeid, location):
    name = nodeid.split("::", 1)[0]
    if not _RUNS_TESTS[0] or _RUNNING and _RUNNING[0][0] == name:
        return
    _file_ended()
    _RUNNING.append([name, _tree_seconds()])
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _SPANS[name] = [worker, time.time(), time.time()]


def pytest_runtest_logreport(report):
    figures = _FILES[report.nodeid.split("::", 1)[0]]
    figures[report.when] += report.duration
    if report.when == "call":
        figures["tests"] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    started = time.monotonic()
    yield
    figure = _FIXTURES.setdefault(fixturedef.argname, {"scope": fixturedef.scope, "setups": 0, "seconds": 0.0})
    figure["setups"] += 1
    figure["seconds"] += time.monotonic() - started


def pytest_sessionfinish(session):
    _file_ended()  # (the session's fixtures have stopped: the last file's test tore them down)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand its fixtures' figures to the controller
        workeroutput["timing_fixtures"] = json.dumps(_FIXTURES)  # (its test reports reach it anyway)
        workeroutput["timing_cpu"] = json.dumps(_CPU)
        workeroutput["timing_spans"] = json.dumps(_SPANS)


def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {})
    for name, figure in json.loads(output.get("timing_fixtures", "{}")).items():
        mine = _FIXTURES.setdefault(name, {"scope": figure["scope"], "setups": 0, "seconds": 0.0})
        mine["setups"] += figure["setups"]
        mine["seconds"] += figure["seconds"]
    for name, seconds in json.loads(output.get("timing_cpu", "{}")).items():
        _CPU[name] += seconds
    _SPANS.update(json.loads(output.get("timing_spans", "{}")))


def _report() -> dict:
    files = {name: {**{k: round(v, 1) for k, v in f.items()},
                    "seconds": round(f["setup"] + f["call"] + f["teardown"], 1),
                    **({"cpu": round(_CPU[name], 1)} if name in _CPU else {}),
                    **({"worker": _SPANS[name][0], "from_s": round(_SPANS[name][1] - _BEGAN, 1),
                        "to_s": round(_SPANS[name][2] - _BEGAN, 1)} if name in _SPANS else {})}
             for name, f in _FILES.items()}
    return {
        "wall_s": round(time.monotonic() - _STARTED, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "files": dict(sorted(files.items(), key=lambda item: -item[1]["seconds"])),
        "fixtures": dict(sorted(({k: {**v, "seconds": round(v["seconds"], 1)} for k, v in _FIXTURES.items()}).items(),
                                key=lambda item: -item[1]["seconds"])),
    }


def pytest_terminal_summary(terminalreporter, config):
    if getattr(config, "workeroutput", None) is not None or not _FILES:
        return
    report = _report()
    target = os.environ.get("TOPIC_LINEAGE_TIMINGS", "test-output/suite-timings.json")
    terminalreporter.section("where the suite's time goes (test-output/suite-timings.json)")
    total = sum(f["seconds"] for f in report["files"].values())
    terminalreporter.write_line(f"{total:.0f} s in tests over the workers, {report['wall_s']:.0f} s "
                                f"of wall time, load average {report['load_average']}")
    for name, figures in list(report["files"].items())[:15]:
        terminalreporter.write_line(f"{figures['seconds']:8.1f} s  {name} ({int(figures.get('tests', 0))} tests; "
                                    f"set-up {figures.get('setup', 0):.0f} s; {figures.get('cpu', 0):.0f} CPU-s)")
    if _CPU:
        terminalreporter.write_line(f"{sum(_CPU.values()):.0f} CPU-seconds in the workers' process trees; "
                                    "the files that used most:")
        for name, seconds in sorted(_CPU.items(), key=lambda item: -item[1])[:10]:
            terminalreporter.write_line(f"{seconds:8.1f} CPU-s  {name} ({report['files'][name]['seconds']:.0f} s)")
    ends = {}
    for figures in report["files"].values():
        if "worker" in figures:
            ends[figures["worker"]] = max(ends.get(figures["worker"], 0.0), figures["to_s"])
    if len(ends) > 1:  # a worker that ends early leaves a core to the other one's last files
        terminalreporter.write_line("each worker's last file ended at: " + ", ".join(
            f"{worker} {seconds:.0f} s" for worker, seconds in sorted(ends.items())))
    terminalreporter.write_line("fixtures by set-up time:")
    for name, figure in list(report["fixtures"].items())[:12]:
        terminalreporter.write_line(f"{figure['seconds']:8.1f} s  {name} ({figure['scope']}, "
                                    f"{figure['setups']} set-up(s))")
    if target != "off":
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps(report, indent=1))
