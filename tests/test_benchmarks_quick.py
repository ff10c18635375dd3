"""The benchmark command at ``--quick`` sizes, so the benchmark code cannot rot: it must produce
every figure, and the Spark build must give exactly the rows of the DuckDB reference. The capture
is measured at one size (100 topics, one broker): what it captures is proved by test_capture.py.
The scale-out phase is skipped (``--skip scaleout``): it would start a standalone cluster of its
own; tests/test_spark_standalone.py runs the phase (``run_all.bench_scaleout``) on the cluster it
starts anyway and checks its figures and its rows against the DuckDB reference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_quick_benchmark_reports_every_figure_and_identical_rows(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.run_all", "--quick", "--capture-sizes", "100",
         "--skip", "scaleout", "--json-out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=3500, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())

    assert [c["topics"] for c in result["capture"]] == [100]
    for c in result["capture"]:
        assert c["capture_s"] > 0 and c["bare_describe_s"] > 0 and c["ratio"] > 0
        assert c["capture_topics_per_s"] > 0

    runs = result["incremental"]["runs"]
    assert [r["history_rounds"] for r in runs] == [3, 12]
    assert all(r["build_s"] > 0 and r["new_observations"] > 0 for r in runs)
    assert result["incremental"]["ratio_largest_vs_smallest"] > 0

    full = result["full_refresh"]
    assert full["mode"] == "full" and full["observations"] > 3000
    assert full["observations_per_s"] > 0 and full["peak_rss_mib"] > 100  # a JVM was measured

    check = result["reference"]["cross_check"]
    assert check["identical"], check
    for table in ("snapshot_runs", "topic_snapshots", "topic_incarnations"):
        assert check[table]["rows"] > 0
        assert check[table]["only_reference"] == check[table]["only_spark"] == 0
    assert check["snapshot_runs"]["rows"] == 12 * 3  # 12 rounds of 3 clusters
    assert check["topic_snapshots"]["rows"] == full["observations"]
    assert result["spark_to_duckdb_ratio"] > 0

    assert "scaleout" not in result  # tests/test_spark_standalone.py runs it

    query = result["query"]
    assert query["sql_ms"] and all(ms > 0 for ms in query["sql_ms"].values())
    assert query["api_ms"] and all(ms > 0 for ms in query["api_ms"].values())
    assert query["sql_median_ms"] > 0 and query["api_median_ms"] > 0
    assert "figure" in done.stdout  # the table is printed before the JSON
