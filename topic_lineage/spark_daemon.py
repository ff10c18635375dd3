"""The Python worker daemon of our Spark sessions: pyspark's own (``pyspark.daemon``), importing
pyspark from the installed package rather than from the source zip Spark puts first on its
Python workers' path.

Spark starts each executor's Python workers with ``$SPARK_HOME/python/lib/pyspark.zip`` (and
py4j's zip) at the head of ``PYTHONPATH``. For a pip-installed pyspark that zip is a copy of the
installed package, without compiled files: every daemon compiled pyspark's modules from source
again, 1.3-1.4 s of CPU before a session's first Python task on a 2-core Intel Xeon at 2.0 GHz
(0.3 s from the byte-compiled package), and each worker it forked compiled what the daemon had
not imported (issue #53: on the critical path of every build).

So ``get_spark`` sets ``spark.python.daemon.module`` to this module, which drops those zips from
``sys.path`` when they are the installed package's own (``<site-packages>/pyspark/python/lib/``,
that ``site-packages`` on the path too), then runs ``pyspark.daemon`` as Spark would. A Spark
of its own (``$SPARK_HOME`` elsewhere) keeps its zips: its pyspark may be another version than
the installed one. The executors import topic_lineage anyway (the walk tasks run its code).

It also turns off transparent huge pages for the workers' Arrow memory (pyarrow's allocator,
mimalloc, reads ``MIMALLOC_ALLOW_THP``; a value in the user's environment is kept). Where the
kernel gives huge pages on request (``madvise``, a common default), each worker's first task
otherwise spends its kernel time zeroing 2 MiB pages for a heap it uses sparsely. On 2 cores, a
10 M-observation build's first range task (one Spark worker, four runs each): 1.20-1.66 s, of it
0.30-0.62 s in the kernel, against 1.08-1.28 s and 0.15-0.20 s without; the seven later ones
took the same time either way (issue #53, docs/benchmarks.md). Every worker pays that cost at
once, so it does not divide over cores.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

DAEMON = "pyspark.daemon"
ARROW_MEMORY_ENV = {"MIMALLOC_ALLOW_THP": "0"}
"""What the workers this daemon forks get in their environment unless it says otherwise."""


def installed_package_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are the zips of the pyspark package installed on ``path``
    (pyspark's and py4j's, in ``<dir>/pyspark/python/lib/`` with ``<dir>`` on ``path`` and
    holding the package the zip would shadow)."""
    on_path = {str(Path(entry).resolve()) for entry in path if entry and not entry.endswith(".zip")}
    zips = []
    for entry in path:
        zipped = Path(entry)
        if zipped.suffix != ".zip" or zipped.parent.parts[-3:] != ("pyspark", "python", "lib"):
            continue
        packages = zipped.parents[3]
        package = "py4j" if zipped.name.startswith("py4j-") else "pyspark"
        if str(packages.resolve()) in on_path and (packages / package / "__init__.py").is_file():
            zips.append(entry)
    return zips


def main() -> None:
    dropped = set(installed_package_zips(sys.path))
    sys.path[:] = [entry for entry in sys.path if entry not in dropped]
    for key, value in ARROW_MEMORY_ENV.items():  # read when a forked worker loads pyarrow
        os.environ.setdefault(key, value)
    # as ``python -m pyspark.daemon pyspark.worker``: the worker module stays sys.argv[1]
    runpy.run_module(DAEMON, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
