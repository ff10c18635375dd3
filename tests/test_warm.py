"""The deployment's warm process (topic_lineage.local.warm): `build` and `validate` run in a fork
of a process that has loaded their modules, as the caller's command in every respect (arguments,
environment, working directory, streams, exit status, Ctrl-C), and the command runs in its own
process whenever the warm process cannot take it.

The warm process is started as the Connect server starts it (warm.start, its state in the
server's state file); tests/test_spark_server.py runs builds through it beside a real server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topic_lineage.local import warm, warm_server

# the local deployment's warm process (a deployment, not a rule: the commands it runs are the
# CLI's own, tested as such in the fast tier): the whole suite
pytestmark = pytest.mark.slow

SCRIPT = Path(sys.executable).with_name("topic-lineage")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A home with a warm process serving it (as spark_server.start leaves it)."""
    home = tmp_path_factory.mktemp("warm") / "home"
    (home / "logs").mkdir(parents=True)
    state = warm.start(home / "logs")
    assert state is not None
    (home / warm.STATE_FILE).write_text(json.dumps({"warm": state}))
    try:
        assert warm.wait(state, time.monotonic() + 120), (home / "logs" / "warm.out").read_text()
        yield home, state
    finally:
        warm.stop(state)


def cli(home: Path, *args: str, warm_on: bool = True, cwd: Path | None = None, **env):
    environment = {k: v for k, v in os.environ.items() if k != warm.SERVED_ENV}
    environment.update(TOPIC_LINEAGE_HOME=str(home), **env)
    if not warm_on:
        environment[warm.WARM_ENV] = "off"
    return subprocess.run([str(SCRIPT), *args], env=environment, capture_output=True, text=True,
                          timeout=300, check=False, cwd=cwd)


def served_lines(home: Path) -> list[str]:
    return [line for line in (home / "logs" / "warm.out").read_text().splitlines()
            if line.startswith("child ")]


def same_both_ways(home: Path, *args: str, **env) -> subprocess.CompletedProcess:
    """Run a command through the warm process and in its own process; assert the warm process
    ran it and that both gave the same exit status and output."""
    before = len(served_lines(home))
    warm_run = cli(home, *args, **env)
    lines = served_lines(home)
    assert len(lines) == before + 1 and lines[-1].endswith("topic-lineage " + " ".join(args)), lines
    own = cli(home, *args, warm_on=False, **env)
    assert len(served_lines(home)) == before + 1  # TOPIC_LINEAGE_WARM=off: not handed on
    assert (warm_run.returncode, warm_run.stdout, warm_run.stderr) == \
        (own.returncode, own.stdout, own.stderr)
    return warm_run


def test_usage_error_and_help_are_the_commands_own(served):
    home, _ = served
    refused = same_both_ways(home, "build", "--no-validate")
    assert refused.returncode == 3 and "--no-validate builds a version" in refused.stderr
    helped = same_both_ways(home, "validate", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: topic-lineage validate")
    bad = same_both_ways(home, "build", "--hold-min", "many")  # argparse's own error
    assert bad.returncode == 2 and "invalid int value" in bad.stderr


def test_the_callers_environment_and_working_directory_apply(served, tmp_path):
    home, _ = served
    wrong = same_both_ways(home, "build", TOPIC_LINEAGE_HOLD_RATIO="7")
    assert wrong.returncode == 2 and "hold ratio must be in [0, 1), got 7.0" in wrong.stderr
    # a relative home resolves against the caller's working directory, in the child too
    (tmp_path / "rel").mkdir()
    os.symlink(home, tmp_path / "rel" / "home")
    before = len(served_lines(home))
    relative = cli(Path("rel/home"), "validate", "--version", "nope", cwd=tmp_path)
    assert len(served_lines(home)) == before + 1
    missing = home.resolve() / "warehouse" / "versions" / "nope" / "snapshot_runs"
    assert relative.returncode == 2 and f"no table snapshot_runs at {missing};" in relative.stderr, \
        relative.stderr


def test_other_commands_and_children_are_not_handed_on(served):
    home, _ = served
    before = len(served_lines(home))
    assert cli(home, "versions").returncode == 0
    assert cli(home, "build", "--no-validate", **{warm.SERVED_ENV: "1"}).returncode == 3
    assert len(served_lines(home)) == before


def test_changed_code_is_declined(served):
    """A warm process whose package files changed since it loaded them declines (the caller
    then runs the command itself): the request of a real caller, the stamp of other code."""
    import topic_lineage

    caller, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    request = {"argv": ["build"], "env": {}, "cwd": "/", "umask": 0o22, "python": sys.executable,
               "package": os.path.dirname(topic_lineage.__file__)}
    socket.send_fds(caller, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    stale = [*warm_server._code_stamp()[:-1], ("changed.py", 1, 1)]
    warm_server._serve_one(server, None, stale, request["package"], threads=1)
    assert json.loads(caller.makefile().readline()) == {
        "declined": "the code changed since the warm process started"}
    caller.close()
    server.close()


def test_ctrl_c_reaches_the_command(served, tmp_path):
    """SIGINT to the caller (what Ctrl-C sends) interrupts the command in the warm process's
    child: here while its local JVM starts."""
    home, _ = served
    before = len(served_lines(home))
    environment = {**os.environ, "TOPIC_LINEAGE_HOME": str(home)}
    environment.pop(warm.SERVED_ENV, None)
    proc = subprocess.Popen([str(SCRIPT), "build", "--full-refresh", "--no-publish",
                             "--no-validate", "--master", "local[1]"], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(served_lines(home)) == before:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    child = int(served_lines(home)[-1].split()[1].rstrip(":"))
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "topic-lineage build: interrupted" in err
    deadline = time.monotonic() + 30
    while _alive(child):  # the child ended (and its JVM with it)
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    from topic_lineage.fsutil import pid_alive

    return pid_alive(pid)
