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


@pytest.mark.parametrize("exact_rows", [10**9, 0], ids=["except-all", "fingerprints"])
def test_the_benchmarks_comparison_counts_each_rows_difference_either_way(tmp_path, exact_rows):
    """``bench_scaleout.compare`` (the split and scale-out benchmarks' row check): a changed row
    and a duplicated one are counted on the side that has them, by ``EXCEPT ALL`` and by bucket
    fingerprints alike (the path of tables over ``EXACT_ROWS``, forced here); equal tables
    written in another order and other files are identical."""
    import shutil

    import duckdb
    import pyarrow.parquet as pq

    from tests.benchmarks.bench_scaleout import bucket_sql, compare

    def runs(count: int, *, changed: int | None = None, duplicated: int | None = None,
             changed_to: int = -1) -> list[dict]:
        rows = [{"cluster_id": f"c{i % 3}", "cluster_alias": "a", "captured_at": 1_700_000_000_000_000 + i,
                 "complete": True, "topic_count": i, "error_topic_count": 0, "source": "s", "held": False}
                for i in range(count)]
        if changed is not None:
            rows[changed] = dict(rows[changed], topic_count=changed_to)
        if duplicated is not None:
            rows.append(dict(rows[duplicated]))
        return rows

    def write(version: str, rows: list[dict], files: int) -> None:
        table_dir = tmp_path / version / "snapshot_runs"
        table_dir.mkdir(parents=True)
        for k in range(files):
            part = rows[k::files]
            pq.write_table(t.arrow_table({c: [r[c] for r in part] for c in part[0]}, t.TABLE_DDL["snapshot_runs"]),
                           table_dir / f"part-{k}.parquet")

    write("base", runs(500), files=1)
    write("same", list(reversed(runs(500))), files=3)
    # row 7 changed to a value whose row falls in the same bucket: only the bucket's sum of
    # hashes, not its row count, tells the change
    write("candidates", [dict(runs(8)[7], topic_count=-v) for v in range(1, 3000)], files=1)
    columns = ", ".join(t.ddl_columns(t.TABLE_DDL["snapshot_runs"]))
    con = duckdb.connect()
    bucket = bucket_sql(columns)
    [(same_bucket,)] = con.execute(
        f"SELECT min(-topic_count) FROM read_parquet('{tmp_path}/candidates/*/*.parquet') WHERE {bucket} = "
        f"(SELECT {bucket} FROM read_parquet('{tmp_path}/base/*/*.parquet') WHERE topic_count = 7)").fetchall()
    shutil.rmtree(tmp_path / "candidates")
    write("other", runs(500, changed=7, duplicated=42, changed_to=-same_bucket), files=2)
    result = compare(tmp_path, ["base", "same", "other"], exact_rows=exact_rows)
    entry = result["snapshot_runs"]
    assert result["identical"] is False and set(result) == {"snapshot_runs", "identical"}
    assert entry["rows"] == {"base": 500, "same": 500, "other": 501}
    assert entry["only_base_not_same"] == entry["only_same_not_base"] == 0
    assert entry["only_base_not_other"] == 1  # the row before its change
    assert entry["only_other_not_base"] == 2  # the changed row and the duplicate
    assert entry["method"] == ("EXCEPT ALL" if exact_rows else "bucket fingerprints, then EXCEPT ALL")
    if not exact_rows:
        assert entry["buckets_differing_base_same"] == 0 and entry["buckets_differing_base_other"] in (1, 2)
