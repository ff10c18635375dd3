"""The consumer-group mode of the capture benchmark (tests/benchmarks/bench_capture.py --groups,
issue #26) run as documented at a small size, so that its code cannot rot: every group with all
its committed offsets, groups_complete, and a ratio. No timing bound: the figure is the docs'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# a benchmark's code kept from rotting (the capture of groups itself: tests/test_group_capture.py): the whole suite
pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_groups_mode_reports_every_group_with_its_offsets_and_a_ratio(tmp_path):
    out = tmp_path / "groups.json"
    done = subprocess.run(
        [sys.executable, "tests/benchmarks/bench_capture.py", "--quick", "--groups", "20",
         "--group-topics", "3", "--partitions", "2", "--repeat", "1", "--json-out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    document = json.loads(out.read_text())
    assert document["benchmark"] == "capture_groups"
    assert json.loads(done.stdout[done.stdout.index("{"):]) == document  # printed as well
    [result] = document["results"]
    assert result["topics"] == 100 and result["partitions_per_topic"] == 2
    assert result["groups"] == 20 and result["groups_read_back"] == 20
    assert result["topics_per_group"] == 3 and result["offsets_per_group"] == 3 * 2
    assert result["committed_offsets"] == 20 * 3 * 2
    assert result["groups_complete"] is True
    assert result["repeat"] == 1
    assert len(result["with_groups_runs_s"]) == len(result["topics_only_runs_s"]) == 1
    assert isinstance(result["ratio"], float | int) and result["ratio"] > 0
    assert result["with_groups_s"] > 0 and result["topics_only_s"] > 0
    assert set(result["group_phases_s"]) == {"list", "describe", "committed_offsets",
                                             "log_end_offsets"}


def test_groups_mode_refuses_more_topics_per_group_than_the_broker_has():
    done = subprocess.run(
        [sys.executable, "tests/benchmarks/bench_capture.py", "--groups", "5", "--group-topics",
         "10", "--sizes", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2
    assert "--group-topics" in done.stderr
