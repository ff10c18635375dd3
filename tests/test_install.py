"""The installed stack is one consistent set of versions.

The Spark provider depends on ``pyspark-client``, which installs into the same ``pyspark``
package as ``pyspark``. Two different versions leave a silently mixed install (Python files of
one release, jars of another); these tests fail when that happens.
"""

from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path

import pytest


def test_pyspark_python_version_matches_both_distributions():
    import pyspark

    assert pyspark.__version__ == md.version("pyspark")
    assert md.version("pyspark-client") == md.version("pyspark"), (
        "pyspark and pyspark-client differ: the install mixes two Spark releases"
    )


def test_pyspark_jars_are_the_same_release_as_its_python_code():
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    core = [p.name for p in jars.glob("spark-core_*.jar")]
    assert len(core) == 1, f"expected exactly one spark-core jar, found {core}"
    version = re.search(r"spark-core_[\d.]+-(.+)\.jar", core[0]).group(1)
    assert version == pyspark.__version__


@pytest.mark.parametrize(
    "dist, prefix",
    [("apache-airflow", "3.3."), ("great-expectations", "1."), ("confluent-kafka", "2."),
     ("openlineage-python", "1.")],
    ids=["airflow-3.3", "gx-1", "confluent-kafka-2", "openlineage-python-1"],
)
def test_stack_major_versions(dist, prefix):
    assert md.version(dist).startswith(prefix)


def test_pandas_is_below_3_for_pyspark():
    assert int(md.version("pandas").split(".")[0]) < 3


def test_dbt_lock_pins_dbt_1_10_apart_from_the_main_lock():
    """The peer benchmark's dbt venv (scripts/install_dbt.sh): 1.10, since 1.11 downloads a
    parser from outside the package registry; its own venv, since it needs pathspec<0.13."""
    root = Path(__file__).resolve().parent.parent
    pins = dict(
        line.split("==", 1) for line in (root / "requirements-dbt.lock").read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    )
    assert pins["dbt-core"].startswith("1.10.") and pins["dbt-duckdb"].startswith("1.10.")
    assert tuple(int(x) for x in pins["pathspec"].split(".")[:2]) < (0, 13)
    assert all("==" in line for line in (root / "requirements-dbt.lock").read_text().splitlines()
               if line.strip() and not line.lstrip().startswith("#"))
