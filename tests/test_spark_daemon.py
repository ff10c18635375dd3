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
