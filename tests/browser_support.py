"""Headless Chromium driven over the DevTools protocol, for the browser tests.

Debian's Chromium (a WebSocket to its DevTools endpoint, no driver), started in its own process
group and killed at the end; :func:`wait_for` polls a page (or anything) until a condition
holds. The topic lineage page in a real Airflow api-server, driven by this browser, is tested
on the README's local deployment (tests/test_airflow_local_deployment.py, which shares that
deployment with its other tests); tests/test_airflow_own_deployment.py, test_ui_groups.py and
test_ui_real_build.py drive it too. Screenshots go to ``test-output/``.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "test-output"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last failure
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def http_status(url: str, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@contextlib.contextmanager
def process_group(args, env, log_path: Path):
    """A child in its own process group, killed (whole group) on exit."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


class Browser:
    """The few DevTools-protocol calls the test needs, on one page."""

    def __init__(self, ws_url: str):
        from websockets.sync.client import connect

        self._ws = connect(ws_url, max_size=64 * 2**20, open_timeout=20)
        self._ids = itertools.count(1)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True,
                  width=1400, height=1000, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, session: bool = False, **params):
        message = {"id": next(self._ids), "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        self._ws.send(json.dumps(message))
        while True:
            reply = json.loads(self._ws.recv(timeout=60))
            if reply.get("id") == message["id"]:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)
        time.sleep(0.3)
        wait_for(lambda: self.js("document.readyState") == "complete", 60, f"load of {url}")

    def type_into(self, selector: str, text: str) -> None:
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", session=True, text=text)

    def screenshot(self, path: Path) -> None:
        height = self.js("Math.ceil(document.documentElement.scrollHeight)") or 1000
        shot = self.call("Page.captureScreenshot", session=True, format="png",
                         captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": 1400, "height": min(height, 4000), "scale": 1})
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        with contextlib.suppress(Exception):
            self._ws.close()


@contextlib.contextmanager
def chromium(args: list[str], port: int, tmp_path: Path):
    """Headless Chromium started with ``args`` (its DevTools on ``port``), as a :class:`Browser`;
    killed with its process group at the end."""
    with process_group(args, os.environ.copy(), tmp_path / "chromium.log"):
        def endpoint():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/version", timeout=5) as r:
                return json.load(r)["webSocketDebuggerUrl"]

        page = Browser(wait_for(endpoint, 60, "Chromium's DevTools endpoint"))
        try:
            yield page
        finally:
            page.close()


@contextlib.contextmanager
def headless_chromium(tmp_path: Path):
    """A fresh headless Chromium that reaches for nothing outside the machine (no sync, updates
    or background networking), as a :class:`Browser` on a blank page."""
    port = free_port()
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-quic", "--no-first-run", "--no-default-browser-check",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", f"--remote-debugging-port={port}",
            "--remote-debugging-address=127.0.0.1", f"--user-data-dir={tmp_path / 'chromium'}",
            "about:blank"]
    with chromium(args, port, tmp_path) as page:
        yield page
