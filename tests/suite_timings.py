"""Where the suite's time goes (issue #52): per test file and per fixture, in every run.

Each test's set-up, call and tear-down time is added to its file; each fixture's set-up time to
its name (with its scope: a session fixture is a server start, a module fixture a Spark session
or a module's data, ...). xdist workers hand their figures to the controller, which prints the
files and fixtures that took longest and writes them all to ``test-output/suite-timings.json``
(``$TOPIC_LINEAGE_TIMINGS``, a path, changes where; ``off`` writes nothing). The times are wall
times on the worker that ran them: with two workers the suite's wall time is about half their
sum.
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
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand its fixtures' figures to the controller
        workeroutput["timing_fixtures"] = json.dumps(_FIXTURES)  # (its test reports reach it anyway)


def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {})
    for name, figure in json.loads(output.get("timing_fixtures", "{}")).items():
        mine = _FIXTURES.setdefault(name, {"scope": figure["scope"], "setups": 0, "seconds": 0.0})
        mine["setups"] += figure["setups"]
        mine["seconds"] += figure["seconds"]


def _report() -> dict:
    files = {name: {**{k: round(v, 1) for k, v in f.items()},
                    "seconds": round(f["setup"] + f["call"] + f["teardown"], 1)}
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
                                    f"set-up {figures.get('setup', 0):.0f} s)")
    terminalreporter.write_line("fixtures by set-up time:")
    for name, figure in list(report["fixtures"].items())[:12]:
        terminalreporter.write_line(f"{figure['seconds']:8.1f} s  {name} ({figure['scope']}, "
                                    f"{figure['setups']} set-up(s))")
    if target != "off":
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps(report, indent=1))
