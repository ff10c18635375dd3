"""The scale benchmark (tests/benchmarks/bench_scale.py, issue #16 goal 5) run as documented, at
sizes CI affords, so that its code cannot rot: every figure, identical rows, a clear refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from topic_lineage import tables as t

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_scale_benchmark_at_tiny_sizes_reports_its_figures_and_identical_rows(tmp_path):
    """A whole run: stored observations = topic_snapshots rows, the JVM measured, DuckDB equal."""
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bench_scale", "--topics", "40", "--rounds", "5",
         "--clusters", "2", "--json-out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=850, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())

    stored = result["generate"]
    assert stored["observations"] > 40 and stored["store_mib"] > 0 and stored["seconds"] > 0
    full = result["full_refresh"]
    assert full["mode"] == "full" and full["snapshots"] == 5 * 2
    assert full["row_counts"]["topic_snapshots"] == stored["observations"]
    assert full["peak_rss_mib"] > 100 and full["meets_rss_goal"] is True  # a JVM, within 4 GiB
    assert full["observations_per_s"] > 0
    # where the peak was: the build's processes at that sample, the JVM among them, adding up
    by_process = full["peak_rss_by_process"]
    assert "java" in {row["name"] for row in by_process}, by_process
    counted = [row for row in by_process if row.get("counted", True)]
    assert abs(sum(row["rss_mib"] for row in counted) - full["peak_rss_mib"]) < 1, by_process
    assert all(0 <= row["file_or_shared_mib"] <= row["rss_mib"] for row in by_process), by_process
    # the DuckDB reference derives the topic tables; the generated history has no groups
    assert result["reference"]["row_counts"] == {
        table: full["row_counts"][table] for table in t.TOPIC_TABLES
    }
    assert [full["row_counts"][table] for table in t.GROUP_TABLES] == [0, 0]
    assert result["reference"]["peak_rss_mib"] > 0 and result["spark_to_duckdb_ratio"] > 0
    assert result["cross_check"]["identical"] is True
    assert not Path(result["work"]).exists()  # a temporary working directory is removed


def test_scale_benchmark_refuses_empty_sizes():
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bench_scale", "--rounds", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2
    assert "--rounds" in done.stderr and "at least 1" in done.stderr


def test_rss_sampler_leaves_out_a_child_running_in_its_parents_memory():
    """A child between spawn and exec runs in its parent's memory and shows the parent's resident
    set: the JVM spawns one for each file Hadoop writes, and counting it made a 2.7 GiB build read
    as 5.3 GiB. A thread of this process stands in for such a child (same address space); a real
    child process is counted."""
    import os
    import threading

    import psutil

    from tests.benchmarks.run_all import PeakRss, run_measured, shares_address_space

    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    child = subprocess.Popen(["sleep", "5"])
    try:
        assert shares_address_space(thread.native_id, os.getpid()) is True
        assert shares_address_space(child.pid, os.getpid()) is False
        in_my_memory = psutil.Process(thread.native_id)
        row, _ = PeakRss._row(in_my_memory, os.getpid())
        assert row["counted"] is False and row["shares_memory_of"] == os.getpid()
        row, info = PeakRss._row(psutil.Process(child.pid), os.getpid())
        assert "counted" not in row and info.rss < 50 * 2**20
    finally:
        release.set()
        child.kill()
        child.wait()
        thread.join()

    # a process holding 300 MiB whose child holds little: the peak is about the sum
    _, _, peak, at_peak = run_measured(
        [sys.executable, "-c", "import subprocess; x = b'x' * (300 * 2**20); subprocess.run(['sleep', '1'])"],
        env=dict(os.environ))
    assert 300 < peak < 400, (peak, at_peak)
