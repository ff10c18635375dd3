"""The executors' Python workers import pyspark from the installed package, not from Spark's
source zip (topic_lineage/spark_daemon.py, issue #53); a Spark of its own keeps its zips."""

from __future__ import annotations

import pytest

from topic_lineage.spark_daemon import installed_package_zips

pytestmark = [pytest.mark.spark]


def _package(directory, name):
    (directory / name).mkdir(parents=True)
    (directory / name / "__init__.py").write_text("")


def test_only_the_installed_packages_own_zips_are_dropped(tmp_path):
    site = tmp_path / "site-packages"
    _package(site, "pyspark")
    _package(site, "py4j")
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    own = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    other = str(tmp_path / "spark" / "python" / "lib" / "pyspark.zip")  # $SPARK_HOME elsewhere
    assert installed_package_zips([*own, other, str(tmp_path / "work"), str(site)]) == own
    # the zips shadow nothing when their package's directory is not on the path
    assert installed_package_zips([*own, str(tmp_path / "work")]) == []
    # nor py4j's when py4j is not installed beside pyspark
    (site / "py4j" / "__init__.py").unlink()
    assert installed_package_zips([*own, str(site)]) == own[:1]


def test_a_python_task_runs_the_installed_pyspark(spark):
    import pyspark

    def where(_):
        import sys

        import pyspark

        yield pyspark.__file__, [entry for entry in sys.path if entry.endswith("pyspark.zip")]

    seen = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(where).collect()
    assert seen == [(pyspark.__file__, [])] * 2, seen


def _thp_enabled() -> str | None:
    """This process's ``THP_enabled`` (``/proc/self/status``: 0 once it asked the kernel for no
    transparent huge pages), None on a kernel without the field."""
    with open("/proc/self/status") as status:
        return next((line.split()[1] for line in status if line.startswith("THP_enabled:")), None)


def test_the_workers_arrow_memory_gets_no_huge_pages_and_the_driver_keeps_its_own(spark):
    """The workers' allocator (pyarrow's mimalloc) asks the kernel for no transparent huge pages
    (``MIMALLOC_ALLOW_THP=0``, given by our daemon); the driver's process is left as it was."""
    import pyarrow as pa

    if _thp_enabled() is None:
        pytest.skip("this kernel does not show THP_enabled in /proc/self/status")
    driver = _thp_enabled()

    def seen(_):
        import os

        import pyarrow as pa

        buffer = pa.allocate_buffer(1 << 24)  # the allocator initialised
        with open("/proc/self/status") as status:  # as _thp_enabled (a task gets no module of the tests)
            enabled = next(line.split()[1] for line in status if line.startswith("THP_enabled:"))
        yield os.environ.get("MIMALLOC_ALLOW_THP"), enabled, buffer.size

    assert spark.sparkContext.parallelize([0, 1], 2).mapPartitions(seen).collect() == [("0", "0", 1 << 24)] * 2
    pa.allocate_buffer(1 << 24)
    assert _thp_enabled() == driver
