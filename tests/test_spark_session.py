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


JVM_ENVIRON_PROBE = (
    "from topic_lineage.spark import get_spark\n"
    "s = get_spark('probe', master='local[1]')\n"
    "pid = s.sparkContext._jvm.java.lang.ProcessHandle.current().pid()\n"
    "print([v.decode() for v in open(f'/proc/{pid}/environ', 'rb').read().split(b'\\0')\n"
    "       if v.startswith(b'MALLOC_ARENA_MAX=')])\n"
    "s.stop()\n"
)


@pytest.mark.parametrize(("asked", "expected"), [(None, "2"), ("4", "4")])
def test_the_jvm_gets_two_malloc_arenas_unless_the_user_says_otherwise(asked, expected):
    """glibc's default of 8 arenas per core took a 100 M-observation build with a 2 GiB heap to a
    4.9 GiB resident set; the JVM get_spark() launches has MALLOC_ARENA_MAX, the user's if set."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if asked:
        env["MALLOC_ARENA_MAX"] = asked
    done = subprocess.run([sys.executable, "-c", JVM_ENVIRON_PROBE], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == repr([f"MALLOC_ARENA_MAX={expected}"])
