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

# what the install put together (a deployment, not a rule): the whole suite
pytestmark = pytest.mark.slow


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


# --- what the wheel holds -----------------------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "tests" / "servers"


def build_wheel(out_dir: Path) -> Path:
    """``uv build``: the source distribution, then the wheel from it (in a clean directory, so
    nothing left in the checkout's ``build/`` can slip into the wheel)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "uv", "build", "--out-dir", str(out_dir), str(REPO)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"uv build: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    (wheel,) = out_dir.glob("topic_lineage-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> set[str]:
    import zipfile

    with zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("dist"))) as wheel:
        return set(wheel.namelist())


def test_the_wheel_holds_no_test_server(wheel_files):
    """The servers only the tests start (tests/servers/: the S3 server and the SeaweedFS build,
    the fault proxy, Iceberg's REST catalog server, the standalone cluster) are not shipped:
    neither the tests' package nor a module of the same name anywhere in the wheel."""
    servers = {p.name for p in SERVERS.glob("*.py") if p.name != "__init__.py"}
    assert {"s3_server.py", "s3_faults.py", "rest_catalog.py", "seaweedfs_dist.py"} <= servers
    assert not [name for name in wheel_files if name.startswith("tests/")]
    shipped = sorted(name for name in wheel_files if name.rpartition("/")[2] in servers)
    assert not shipped, f"test servers in the wheel: {shipped}"


def test_the_wheel_holds_what_the_demo_and_airflow_start_run(wheel_files):
    """Every module of the package that ``topic-lineage demo`` and ``topic-lineage airflow
    start`` reach through their imports (lazy ones too; tests/test_import_graph.py reads them) is
    in the wheel, with the local deployment's package data, and ``topic_lineage/local/`` is
    shipped whole: what is left there is the product."""
    from test_import_graph import import_graph, modules

    graph, paths = import_graph(), modules()
    reached, todo = set(), ["topic_lineage.cli", "topic_lineage.commands.demo_cmds",
                            "topic_lineage.commands.airflow_cmds"]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph[name])
    local = {name for name in reached if name.startswith("topic_lineage.local.")}
    assert {"topic_lineage.local.broker", "topic_lineage.local.kafka_dist",
            "topic_lineage.local.postgres", "topic_lineage.local.spark_server",
            "topic_lineage.local.supervisor"} <= local
    missing = sorted(name for name in reached
                     if str(paths[name].relative_to(REPO)) not in wheel_files)
    assert not missing, f"not in the wheel: {missing}"
    checkout = {str(p.relative_to(REPO)) for p in (REPO / "topic_lineage" / "local").iterdir()
                if p.suffix == ".py" or p.name.endswith(".pom.xml")}
    shipped = {name for name in wheel_files if name.startswith("topic_lineage/local/")}
    assert shipped == checkout
    assert "topic_lineage/local/spark_s3a.pom.xml" in shipped  # s3a_jars reads it
