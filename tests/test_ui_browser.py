"""The topic lineage page in a real Airflow api-server, driven by headless Chromium.

Starts ``airflow api-server`` (temporary AIRFLOW_HOME, SQLite migrated with ``airflow db
migrate``, the repo's ``plugins/`` folder, SimpleAuthManager with a real user and password),
signs in through Airflow's own login form in Debian's Chromium (DevTools protocol over a
WebSocket), searches a re-created topic and checks both incarnations are drawn. Screenshots go
to ``test-output/``. Every process is started in its own process group and killed at the end.
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
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from published_tables import publish
from test_ui_api import ORDERS_NEW, ORDERS_OLD, PROD_EU, id_forms, scenario

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "test-output"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
AIRFLOW = Path(sys.executable).with_name("airflow")


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


def record_gate_runs(version: str, failed_newer: str) -> None:
    """Gate runs recorded through the gate's own writer: ``version`` passed (it is published),
    then the newer build ``failed_newer`` failed (so it was not published)."""
    from datetime import UTC, datetime

    from topic_lineage.quality import context as quality_context
    from topic_lineage.quality import overview as quality_overview
    from topic_lineage.quality.gate import GateResult, Outcome

    docs = quality_context.data_docs_index()
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text("<html><body>Great Expectations Data Docs</body></html>")
    outcomes = [Outcome("topic_incarnations", "live IDs unique per cluster", "", True, 0, [])]
    quality_overview.record(GateResult(
        version=version, success=True, failures=[], docs_index=docs, outcomes=outcomes,
        validated_at=datetime(2026, 11, 10, 0, 5, tzinfo=UTC),
    ))
    failed = [Outcome("topic_incarnations", "deleted topic IDs never come back", "", False, 1, [])]
    quality_overview.record(GateResult(
        version=failed_newer, success=False, failures=[], docs_index=docs, outcomes=failed,
        validated_at=datetime(2026, 11, 11, 0, 5, tzinfo=UTC),
    ))


@pytest.fixture(scope="module")
def airflow_server(tmp_path_factory):
    """The local Airflow as users start it (``topic-lineage airflow setup/start``: PostgreSQL,
    the repository's plugins, a login with a generated admin password) on a published version."""
    import tempfile

    from topic_lineage.local import supervisor as ac

    # Outside pytest's base temp, which every pytest session resets to 0700: as root, the
    # helper's PostgreSQL runs as another user that must reach its data directory.
    root = Path(tempfile.mkdtemp(prefix="tl-airflow-ui-"))
    tl_home = root / "tl-home"
    saved = os.environ.get("TOPIC_LINEAGE_HOME")
    os.environ["TOPIC_LINEAGE_HOME"] = str(tl_home)  # publish(), record() and the helper
    try:
        rows, runs = scenario()
        publish("v0001", rows, runs)
        record_gate_runs("v0001", failed_newer="v0002")
        # Yearly schedules: no run before 2027, so nothing replaces the published v0001.
        state = ac.setup(
            bootstrap_servers="127.0.0.1:9", clusters=None, spark_master="local[1]",
            port=free_port(), snapshot_schedule="0 0 1 1 *", build_schedule="0 0 1 1 *",
            archive_dir=None,
        )
        try:
            ac.start(state, wait_s=300)
            yield {"base": f"http://127.0.0.1:{state['port']}", "user": ac.ADMIN_USER,
                   "password": ac.admin_password(), "log": ac.airflow_home() / "logs",
                   "tl_home": tl_home}
        finally:
            ac.stop()
            shutil.rmtree(root, ignore_errors=True)
    finally:
        if saved is None:
            os.environ.pop("TOPIC_LINEAGE_HOME", None)
        else:
            os.environ["TOPIC_LINEAGE_HOME"] = saved


def api_token(server: dict) -> str:
    """A JWT from Airflow's own token endpoint (the generated admin password)."""
    request = urllib.request.Request(
        server["base"] + "/auth/token",
        data=json.dumps({"username": server["user"], "password": server["password"]}).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.load(response)["access_token"]


def test_data_docs_paths_in_the_api_server_are_4xx_never_500(airflow_server):
    """Through Airflow's own server (uvicorn): NUL bytes, 5,000-character paths, traversal."""
    base = airflow_server["base"]
    auth = {"Authorization": "Bearer " + api_token(airflow_server)}
    docs = base + "/topic-lineage/data-docs/"
    assert http_status(docs + "index.html", auth) == 200
    assert http_status(docs + "%00", auth) == 400
    assert http_status(docs + "a" * 5000, auth) == 400
    assert http_status(docs + "data_docs/" + "a" * 900 + ".html", auth) == 404
    assert http_status(docs + "..%2F..%2F..%2Fetc%2Fpasswd", auth) == 404
    assert http_status(docs + "gate_runs.jsonl", auth) == 404


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


@pytest.fixture
def browser(tmp_path):
    with headless_chromium(tmp_path) as page:
        yield page


def test_unauthenticated_requests_are_refused(airflow_server):
    base = airflow_server["base"]
    assert http_status(base + "/topic-lineage/api/status") == 401
    assert http_status(base + "/topic-lineage/", {"Accept": "text/html"}) == 401
    assert http_status(base + "/topic-lineage/api/timeline?name=orders",
                       {"Authorization": "Bearer forged.token.value"}) == 403


def login(browser: Browser, server: dict) -> None:
    base = server["base"]
    browser.goto(f"{base}/auth/login?next=/topic-lineage/")
    wait_for(lambda: browser.js("!!document.querySelector('input[name=password]')"), 60,
             "Airflow's login form")
    browser.type_into("input[name=username]", server["user"])
    browser.type_into("input[name=password]", server["password"])
    wait_for(lambda: browser.js("!document.querySelector('button[type=submit]').disabled"), 20,
             "the sign-in button to be enabled")
    browser.js("document.querySelector('button[type=submit]').click()")
    wait_for(lambda: "_token" in (browser.js("document.cookie") or "")
             or browser.js("location.pathname").startswith("/topic-lineage"), 60, "sign-in")


def test_recreated_topic_timeline_in_airflow(airflow_server, browser):
    """Sign in, search `orders`: both prod-eu incarnations (deleted and live) are drawn."""
    base = airflow_server["base"]
    OUTPUT.mkdir(exist_ok=True)
    login(browser, airflow_server)
    browser.goto(f"{base}/topic-lineage/")
    wait_for(lambda: "Published version v0001" in browser.js("document.getElementById('status').textContent"),
             60, "the published-version line")
    browser.type_into("#q", "orders")
    browser.js("document.getElementById('search-button').click()")
    block = f'.cluster-block[data-cluster="{PROD_EU}"]'
    wait_for(lambda: browser.js(f"document.querySelectorAll('{block} .incarnation').length") == 2,
             30, "two incarnations of orders in prod-eu")
    text = browser.js(f"document.querySelector('{block}').innerText")
    assert ORDERS_OLD in text and ORDERS_NEW in text
    assert "deleted" in text and "live" in text and "re-creation" in text
    assert browser.js(f"document.querySelectorAll('{block} svg.timeline rect.bar').length") == 2
    assert browser.js(f"document.querySelectorAll('{block} svg .bar.deleted').length") == 1
    assert browser.js(f"document.querySelectorAll('{block} svg .bar.live').length") == 1
    # the badge is the published version's gate run; the newer failed build is shown apart
    wait_for(lambda: browser.js("document.getElementById('gate-badge').textContent")
             == "quality gate passed", 30, "the gate badge")
    assert "version v0001" in browser.js("document.getElementById('gate').innerText")
    newer = browser.js("document.getElementById('gate-newer-failed').innerText")
    assert "newer build FAILED the gate" in newer and "v0002" in newer
    assert "deleted topic IDs never come back" in newer
    links = browser.js("[...document.querySelectorAll('#gate a')].map(a => [a.textContent, a.href])")
    assert ["gate report", f"{base}/topic-lineage/data-docs/index.html"] in links
    assert ["Data Docs", f"{base}/topic-lineage/data-docs/data_docs/index.html"] in links
    assert "file:" not in browser.js("document.getElementById('gate').innerHTML")
    assert str(airflow_server["tl_home"]) not in browser.js("document.body.innerText")
    # the axis of this multi-day timeline reads dates
    ticks = browser.js(f"[...document.querySelectorAll('{block} svg.timeline text.tick')]"
                       ".map(t => t.textContent)")
    assert len(ticks) == 6 and all(len(t) == 10 and t.startswith("2026-") for t in ticks), ticks
    browser.screenshot(OUTPUT / "ui-orders-timeline.png")
    report = browser.js(f"fetch({json.dumps(base + '/topic-lineage/data-docs/index.html')})"
                        ".then(r => r.text())")
    assert "Latest run: version v0002" in report and "file:" not in report
    assert "Great Expectations Data Docs" in browser.js(
        f"fetch({json.dumps(base + '/topic-lineage/data-docs/data_docs/index.html')})"
        ".then(r => r.text())")

    # a timeline spanning hours: ticks carry the time, and no two read the same
    short = browser.js("""(() => {
        const svg = drawTimeline({ span: { start: "2026-11-05T06:00:00Z", end: "2026-11-05T12:00:00Z" },
          incarnations: [{ ordinal: 1, topic_id: null, incarnation_key: "k", first_seen_at: "2026-11-05T06:00:00Z",
            last_seen_at: "2026-11-05T12:00:00Z", deleted_at: null, is_live: true, versions: [] }] });
        return [...svg.querySelectorAll("text.tick")].map(t => t.textContent); })()""")
    assert len(short) == 6 and len(set(short)) == 6, short
    assert short[1] == "11-05 07:07", short  # 6 h span + 2 % padding each side, 5 intervals

    # The same topic found by its old ID in standard base64 (librdkafka's form).
    browser.js("document.getElementById('q').value = ''")
    browser.type_into("#q", id_forms(ORDERS_OLD)["standard_base64_padded"])
    browser.js("document.getElementById('search-button').click()")
    wait_for(lambda: "searched ID " + ORDERS_OLD in browser.js(
        "document.getElementById('search-message').textContent"), 30, "the ID search")
    wait_for(lambda: browser.js(f"document.querySelectorAll('{block} .incarnation').length") == 2,
             30, "the timeline found by ID")

    # A reappeared ID (R6) is drawn in the warning colour, with a warning line.
    browser.js("document.getElementById('q').value = ''")
    browser.type_into("#q", "ghost")
    browser.js("document.getElementById('search-button').click()")
    wait_for(lambda: browser.js(f"document.querySelectorAll('{block} svg .bar.reappeared').length")
             == 1, 30, "the reappeared incarnation")
    assert "reappeared" in browser.js(f"document.querySelector('{block} .warning-text').textContent")
    colour = browser.js(f"getComputedStyle(document.querySelector('{block} svg .bar.reappeared')).fill")
    assert colour == "rgb(217, 72, 15)"  # --warn
    browser.screenshot(OUTPUT / "ui-reappeared-warning.png")


def test_topic_lineage_is_in_the_airflow_navigation(airflow_server, browser):
    base = airflow_server["base"]
    OUTPUT.mkdir(exist_ok=True)
    login(browser, airflow_server)
    browser.goto(f"{base}/plugin/topic-lineage")
    wait_for(lambda: browser.js("document.body.innerText.includes('Topic lineage')"), 60,
             "the Topic lineage entry in the Airflow UI")
    # The page is embedded in the Airflow UI (iframe on the same origin).
    wait_for(lambda: browser.js(
        "(() => { const f = document.querySelector('iframe'); return !!(f && f.contentDocument &&"
        " f.contentDocument.getElementById('search-form')); })()"), 60, "the embedded page")
    time.sleep(1)
    browser.screenshot(OUTPUT / "ui-in-airflow.png")
