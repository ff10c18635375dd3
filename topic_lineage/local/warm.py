"""A warm Python beside the deployment's Spark Connect server: ``build`` and ``validate`` in a
process that has Great Expectations, pandas, pyarrow and PySpark loaded already.

With the Connect server, a build of a small store needs no JVM of its own, and what is left of
a command's wall time is Python's: importing Great Expectations takes 4-5 s (it loads scipy,
altair and SQLAlchemy whatever the suite uses), more than the build and the gate together
(issue #24, goal 2: one cycle on the warm server in at most 3 s). So the deployment keeps one
process that has imported all of it (:mod:`topic_lineage.local.warm_server`). ``topic-lineage build`` and
``topic-lineage validate`` (:data:`COMMANDS`) hand their command line to it (:func:`run`): it
forks, and the child runs the very same command (:func:`topic_lineage.cli.main`) with the
caller's arguments, environment, working directory, umask and standard streams (passed as file
descriptors), and sends back the exit status. The caller forwards Ctrl-C (and SIGTERM, SIGHUP)
to the child. The child is the caller's command in every respect but its parent process.

When no warm process runs, when it cannot be reached, when it runs other code (the package's
files changed since it started, or another interpreter or installation asks) or another user
asks, the command runs in its own process as before: the warm process only saves time.

Started and stopped with the Connect server (:mod:`topic_lineage.local.spark_server`); its
socket lies in a directory only its user can enter (mode 0700), named in the server's state
file, and the socket itself is mode 0600. ``$TOPIC_LINEAGE_WARM=off`` keeps every command in its
own process (and starts no warm process with the server).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

STATE_FILE = "spark-connect.json"  # the Connect server's (topic_lineage.local.spark_server)
COMMANDS = ("build", "validate")
"""The commands handed to the warm process: those that run the quality gate."""
WARM_ENV = "TOPIC_LINEAGE_WARM"
SERVED_ENV = "TOPIC_LINEAGE_WARM_CHILD"
"""Set in a child of the warm process (its value: the warm process's pid)."""


def enabled() -> bool:
    return os.environ.get(WARM_ENV, "on").lower() not in ("off", "0", "false", "no")


# --- the caller's side --------------------------------------------------------------------------
def command_of(argv: list[str]) -> str | None:
    """The sub-command of a ``topic-lineage`` command line (after its global options)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def socket_path() -> str | None:
    """The socket of this home's warm process, from the Connect server's state file."""
    from topic_lineage import tables as t

    try:
        with open(t.home() / STATE_FILE, encoding="utf-8") as state:
            return (json.load(state).get("warm") or {}).get("socket")
    except (OSError, ValueError, AttributeError):
        return None


def run(argv: list[str]) -> int | None:
    """Run ``topic-lineage argv`` in this home's warm process; its exit status, or ``None`` when
    this command does not go there or no warm process takes it (the caller then runs it)."""
    if command_of(argv) not in COMMANDS or not enabled() or os.environ.get(SERVED_ENV):
        return None  # (never hand on from a child of the warm process)
    path = socket_path()
    if not path:
        return None
    import topic_lineage

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        umask = os.umask(0)
        os.umask(umask)
        request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask,
                   "python": sys.executable, "package": os.path.dirname(topic_lineage.__file__)}
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        replies = conn.makefile("r", encoding="utf-8")
        first = json.loads(replies.readline() or "{}")
    except (OSError, ValueError):
        conn.close()
        return None
    if "pid" not in first:  # declined (first["declined"] says why) or no answer
        conn.close()
        return None
    return _wait(conn, replies, int(first["pid"]))


def _wait(conn, replies, pid: int) -> int:
    """Forward signals to the child ``pid`` until it sends its exit status."""
    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    try:
        while True:
            try:
                line = replies.readline()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
                continue
        if not line:
            print(f"topic-lineage: the warm process's child {pid} ended without an exit status",
                  file=sys.stderr)
            return 1
        return int(json.loads(line)["exit"])
    finally:
        conn.close()


def start(logs) -> dict | None:
    """Start a warm process (its log: ``logs/warm.out``); ``{"pid", "socket"}``, or ``None``
    when ``$TOPIC_LINEAGE_WARM`` is off. It serves once it has loaded its modules, 5-10 s
    later; until then commands run in their own processes."""
    import subprocess
    import tempfile

    if not enabled():
        return None
    path = os.path.join(tempfile.mkdtemp(prefix="tl-warm-"), "socket")  # a directory of mode 0700
    with open(os.path.join(logs, "warm.out"), "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "topic_lineage.local.warm_server", path],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return {"pid": proc.pid, "socket": path}


def wait(state: dict | None, deadline: float) -> bool:
    """Wait until the warm process of ``state`` serves (its socket exists), at the latest
    until ``deadline`` (``time.monotonic()``); whether it serves."""
    import time

    from topic_lineage.fsutil import pid_alive

    while state:
        if os.path.exists(state["socket"]):
            return True
        if not pid_alive(int(state["pid"])) or time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return False


def stop(state: dict | None) -> None:
    """Stop a warm process :func:`start` started. Commands it is running finish."""
    import shutil

    if not state:
        return
    try:
        os.kill(int(state["pid"]), signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    shutil.rmtree(os.path.dirname(state["socket"]), ignore_errors=True)
