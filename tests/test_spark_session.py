"""The SparkSession factory: the driver heap and the environment a process's JVM starts with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
PROBE = (
    "from topic_lineage.spark import get_spark\n"
    "s = get_spark('probe', master='local[1]')\n"
    "print(s.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory())\n"
    "s.stop()\n"
)


def test_driver_heap_comes_from_the_environment_whoever_starts_the_jvm():
    """A JVM keeps the heap it started with, so the first get_spark() of a process (a command or
    an in-process Airflow task, not only the build) must size it: 3g asked, about 3 GiB given."""
    env = dict(os.environ, TOPIC_LINEAGE_DRIVER_MEMORY="3g")
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    max_heap = int(done.stdout.strip().splitlines()[-1])
    assert 2.5 * 2**30 < max_heap <= 3 * 2**30


