"""``topic-lineage ARGS`` run in the test's own process: the command's entry point
(:func:`topic_lineage.cli.main`: its arguments, its output, its exit code) with the environment
it would have had, without a process of its own.

For tests whose subject is not the process (what another engine's maintenance or a peer reader
does to what we published): a build here plans on the test worker's JVM, which is running
already, instead of starting one (5-8 CPU-seconds each on 2 cores, issue #52). The tests that
prove what separate processes do (a step per worker, a killed step, the console script's quick
exit, the warm process) still start them: tests/object_store_support.py, tests/test_cli.py,
tests/test_warm.py and the Airflow tests.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess


@contextlib.contextmanager
def environment(env: dict[str, str]):
    """``os.environ`` exactly ``env`` inside, as it was afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """What ``topic-lineage ARGS`` run with ``env`` prints and exits with (a usage error's exit
    code 2 too, as argparse gives it)."""
    from topic_lineage.cli import main

    out, err = io.StringIO(), io.StringIO()
    with environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors and --help
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["topic-lineage", *args], code, out.getvalue(), err.getvalue())
