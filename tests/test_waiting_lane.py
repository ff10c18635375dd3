"""The waiting lane's scheduler (tests/waiting_lane.py), driven as xdist's controller drives it:
workers join, report their collections, and report each test done; the scheduler sends files."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import waiting_lane
from tests.waiting_lane import WaitingLaneScheduling

LANE = [f"tests/{name}" for name in waiting_lane.FILES[:2]]
OTHERS = ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py", "tests/test_d.py"]


class _Worker:
    """What the scheduler uses of xdist's WorkerController."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.done = 0
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.shutting_down, f"{self.gateway.id}: tests sent after its shutdown"
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _collection(files: list[str], tests_per_file: int = 4) -> list[str]:
    return [f"{file}::test_{i}" for file in files for i in range(tests_per_file)]


def _run(collection: list[str], workers: int = 3, stuck: str | None = None):
    """Schedule ``collection`` on ``workers`` workers and complete their tests one at a time,
    round robin (none on ``stuck``): the files each worker ran, in order."""
    config = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"],
                             option=SimpleNamespace(loadscopereorder=False))
    scheduler = WaitingLaneScheduling(config)
    nodes = [_Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    while any(n.done < len(n.sent) for n in nodes if n.gateway.id != stuck):
        for node in nodes:
            if node.gateway.id != stuck and node.done < len(node.sent):
                scheduler.mark_test_complete(node, node.sent[node.done])
                node.done += 1
    ran = {}
    for node in nodes:
        for index in node.sent:
            file = collection[index].split("::")[0]
            if file not in ran.setdefault(node.gateway.id, []):
                ran[node.gateway.id].append(file)
    return scheduler, nodes, ran


def test_the_last_worker_runs_the_lanes_files_and_the_others_the_rest():
    collection = _collection([OTHERS[0], LANE[0], OTHERS[1], OTHERS[2], LANE[1], OTHERS[3]])
    scheduler, nodes, ran = _run(collection)
    assert ran["gw2"] == LANE
    assert sorted(ran["gw0"] + ran["gw1"]) == OTHERS
    assert all(n.shutting_down for n in nodes) and scheduler.tests_finished
    assert sorted(i for n in nodes for i in n.sent) == list(range(len(collection)))  # each test once


def test_without_files_for_the_lane_its_worker_ends_at_once():
    collection = _collection(OTHERS)
    scheduler, nodes, ran = _run(collection)
    assert "gw2" not in ran and nodes[2].shutting_down
    assert sorted(ran["gw0"] + ran["gw1"]) == OTHERS and scheduler.tests_finished


def test_the_others_take_the_lanes_files_once_nothing_else_is_left():
    """A lane that has not finished its first file (here: never does) leaves its later files
    to the other workers once they have nothing else: no file waits on one worker."""
    lane = [f"tests/{name}" for name in waiting_lane.FILES]
    collection = _collection([*lane, *OTHERS[:2]])
    scheduler, _, ran = _run(collection, stuck="gw2")
    assert ran["gw2"] == lane[:1]
    assert sorted(ran["gw0"] + ran["gw1"]) == sorted([*lane[1:], *OTHERS[:2]])
    assert not scheduler.workqueue


@pytest.mark.parametrize(("env", "workers", "wanted"), [
    ("1", 3, True), ("1", 2, True), ("1", 1, False), ("0", 3, False), (None, 3, False),
    ("1", None, False)])
def test_the_lane_is_there_when_asked_for_with_other_workers(monkeypatch, env, workers, wanted):
    if env is None:
        monkeypatch.delenv(waiting_lane.ENV, raising=False)
    else:
        monkeypatch.setenv(waiting_lane.ENV, env)
    config = SimpleNamespace(option=SimpleNamespace(numprocesses=workers))
    assert waiting_lane.wanted(config) is wanted
