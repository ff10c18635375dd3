"""What the two storage emulators' fixtures share (:mod:`tests.servers.gcs_emulator`,
:mod:`tests.servers.azurite`): where ``scripts/install_emulators.sh`` put them, at which pinned
version (read from that script, the one place it is written), and one server process in a
process group of its own, stopped with its group.

A process is started in a new session (its own process group, so stopping it ends its children
too), asked by Linux to end when the thread that started it does (PR_SET_PDEATHSIG: a killed test
run leaves no emulator behind), and stopped at interpreter exit if nobody stopped it before.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from topic_lineage.local.broker import _die_with_parent_preexec, free_port

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = ROOT / "scripts" / "install_emulators.sh"
HOST = "127.0.0.1"


class EmulatorError(RuntimeError):
    """An emulator is not installed, or did not start."""


def pinned(name: str) -> str:
    """The version ``scripts/install_emulators.sh`` pins in its line ``NAME=version``."""
    match = re.search(rf"^{re.escape(name)}=(\S+)", INSTALL_SCRIPT.read_text(), re.MULTILINE)
    if not match:
        raise EmulatorError(f"{INSTALL_SCRIPT} pins no {name}")
    return match.group(1)


def base_dir() -> Path:
    """Where the install script puts the emulators: ``var/topic-lineage`` of the virtualenv."""
    return Path(sys.prefix) / "var" / "topic-lineage"


class EmulatorProcess:
    """One running emulator: :meth:`start` runs ``argv`` and waits until ``ready()`` is true;
    :meth:`stop` ends its process group (SIGTERM, then SIGKILL after 10 s)."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *,
                 env: dict[str, str] | None = None, cwd: Path | None = None):
        self.name, self.argv, self.log_path = name, list(argv), log_path
        self.env, self.cwd = env, cwd
        self.process: subprocess.Popen | None = None

    def start(self, ready: Callable[[], bool], timeout_s: float = 60.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
        try:
            self.process = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.cwd, env=self.env, start_new_session=True,
                preexec_fn=_die_with_parent_preexec())  # noqa: PLW1509 (see broker.py)
        finally:
            log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise EmulatorError(f"{self.name} exited with {self.process.returncode} while "
                                    f"starting: {self.log_tail()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise EmulatorError(f"{self.name} was not ready after {timeout_s:.0f} s: "
                                    f"{self.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


class Emulator:
    """What both emulators share: a free loopback port, a data directory (a new temporary one,
    removed at the end, unless given), the running process, and the context manager."""

    prefix = "emulator-"

    def __init__(self, data_dir: Path | None = None):
        self.port = free_port()
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix=self.prefix))
        self._process: EmulatorProcess | None = None

    def _run(self, name: str, argv: list[str], ready: Callable[[], bool]) -> None:
        self._process = EmulatorProcess(name, argv, self.data_dir / "server.log", cwd=self.data_dir)
        self._process.start(ready)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None

    def __enter__(self):
        return self.start()  # each emulator's own: its program, then its bucket or container

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def serve(server, lines: list[str]) -> int:
    """``python -m tests.servers.<emulator>``: print ``lines`` (the variables to export), then
    keep ``server`` (started) running until Ctrl-C."""
    import time

    with server:
        for line in lines:
            print(line)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0
