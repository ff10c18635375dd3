"""The local Airflow exactly as the README starts it, used the way a new user would.

``topic-lineage airflow setup --bootstrap-servers ... --kafka-config client.properties`` then
``topic-lineage airflow start --detach``, as subprocesses with nothing pre-configured (the Kafka
config holds a SASL password, as a real cluster's would). One deployment for the whole module
(a deployment's start costs half a minute): the tests first use it as a new user does, then
the UI tests show the page over a published version of their own. Against that deployment:

- nothing answers without a login (a forged token neither); the generated admin password is in
  a 0600 file and works;
- two snapshots (with a delete + re-create between them) through the REST API's trigger, then
  backfills of both DAGs created with the exact request the UI's Backfill dialog sends
  (``POST /api/v2/backfills``, max active runs 5) at the same time: every run succeeds, the
  scheduler stays healthy (PostgreSQL, not SQLite), backfilled snapshot runs record nothing,
  and the published table has both incarnations of the re-created topic;
- the SASL password appears in no event log, task log, API answer, process command line or
  file under TOPIC_LINEAGE_HOME; the admin password only in its own file;
- then, both DAGs paused (the UI's toggle: nothing replaces what is published next) and the UI
  tests' version published (``test_ui_api.scenario``: ``orders`` deleted and re-created, a
  reappeared ID, two clusters) with its gate runs (it passed; a newer build failed): headless
  Chromium signs in through Airflow's login form, finds *Topic lineage* in the navigation and
  opens the embedded page (screenshots ``test-output/airflow-local-topic-lineage.png``,
  ``ui-in-airflow.png``), searches the re-created topic and checks both incarnations, the gate
  badge and the axis are drawn (``ui-orders-timeline.png``, ``ui-reappeared-warning.png``); bad
  Data Docs paths through the api-server answer 400/404, never 500.

``topic-lineage airflow stop`` ends every process, PostgreSQL included.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from browser_support import headless_chromium, http_status, wait_for
from published_tables import publish
from test_ui_api import ORDERS_NEW, ORDERS_OLD, PROD_EU, id_forms, scenario

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "test-output"
CLI = Path(sys.executable).with_name("topic-lineage")
SNAPSHOT_DAG, BUILD_DAG = "kafka_topic_snapshot", "topic_incarnations"
SASL_PASSWORD = "sasl-Secret-7f3a9c1e-do-not-leak"


def cli(env: dict, *args: str, timeout: float = 900) -> str:
    out = subprocess.run([str(CLI), *args], env=env, capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert out.returncode == 0, f"topic-lineage {' '.join(args)}: {out.stdout[-2000:]}{out.stderr[-3000:]}"
    return out.stdout


class Api:
    """Airflow's REST API as a signed-in user (the token from POST /auth/token)."""

    def __init__(self, base: str, username: str, password: str):
        self.base = base
        self.token = self.login(username, password)

    def login(self, username: str, password: str) -> str:
        status, body = request(self.base + "/auth/token", "POST",
                               {"username": username, "password": password})
        assert status == 201, (status, body)
        return json.loads(body)["access_token"]

    def call(self, path: str, method: str = "GET", body: dict | None = None) -> tuple[int, str]:
        return request(self.base + path, method, body, {"Authorization": f"Bearer {self.token}"})

    def json(self, path: str, method: str = "GET", body: dict | None = None, expect: int = 200):
        status, text = self.call(path, method, body)
        assert status == expect, f"{method} {path}: {status} {text[:2000]}"
        return json.loads(text)


def request(url: str, method: str = "GET", body: dict | None = None,
            headers: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        **({"Content-Type": "application/json"} if data else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def private_root(prefix: str):
    """A temporary directory outside pytest's base temp. As root, PostgreSQL runs as another
    user that must traverse the directories above its data; every pytest session resets
    /tmp/pytest-of-root to 0700, and a concurrent one would take the server's data away."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=prefix))


@pytest.fixture(scope="module")
def deployment(broker_session):
    """`topic-lineage airflow setup` + `start --detach`, as the README says; stopped at the end."""
    root = private_root("tl-airflow-local-")
    home = root / "tl-home"
    client_config = root / "client.properties"  # the user's own file, outside the home
    client_config.write_text(
        "security.protocol=PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=topic-lineage\n"
        f"sasl.password={SASL_PASSWORD}\n"
    )
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home)}
    saved = os.environ.get("TOPIC_LINEAGE_HOME")
    os.environ["TOPIC_LINEAGE_HOME"] = str(home)  # the test reads the store and warehouse there
    broker_session.delete_all_topics()
    started, started_at = time.monotonic(), datetime.now(UTC)
    setup_out = cli(env, "airflow", "setup", "--bootstrap-servers",
                    broker_session.bootstrap_servers, "--kafka-config", str(client_config))
    try:
        banner = cli(env, "airflow", "start", "--detach")
        print(f"setup + start: {time.monotonic() - started:.0f}s")
        base = banner.split("UI:", 1)[1].split()[0].rstrip("/")
        password = banner.split("password", 1)[1].split()[0]
        yield {"home": home, "env": env, "base": base, "password": password,
               "setup_out": setup_out, "banner": banner, "broker": broker_session,
               "started_at": started_at}
    finally:
        stopped = cli(env, "airflow", "stop")
        assert "postgres" in stopped, stopped
        from topic_lineage.local import postgres as local_postgres

        assert not local_postgres.running(home / "airflow" / "postgres")
        if saved is None:
            os.environ.pop("TOPIC_LINEAGE_HOME", None)
        else:
            os.environ["TOPIC_LINEAGE_HOME"] = saved
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def api(deployment):
    return Api(deployment["base"], "admin", deployment["password"])


def test_a_login_is_required_and_the_password_is_private(deployment):
    base, home = deployment["base"], deployment["home"]
    passwords = home / "airflow" / "passwords.json"
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600
    assert json.loads(passwords.read_text()) == {"admin": deployment["password"]}
    assert str(passwords) in deployment["banner"] and str(passwords) in deployment["setup_out"]
    state = home / "airflow" / "topic-lineage-airflow.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert len(json.loads(state.read_text())["jwt_secret"].encode()) >= 64
    for path in ("/api/v2/dags", "/api/v2/variables", "/topic-lineage/api/status"):
        assert request(base + path)[0] == 401, path
    # the page too, and a forged token is refused (403)
    assert http_status(base + "/topic-lineage/", {"Accept": "text/html"}) == 401
    assert http_status(base + "/topic-lineage/api/timeline?name=orders",
                       {"Authorization": "Bearer forged.token.value"}) == 403
    assert request(base + "/auth/token", "POST",
                   {"username": "admin", "password": "admin"})[0] == 401
    # The generated password works, and the page's API answers with its token.
    api = Api(base, "admin", deployment["password"])
    assert api.call("/topic-lineage/api/status")[0] == 200
    assert {d["dag_id"] for d in api.json("/api/v2/dags")["dags"]} == {SNAPSHOT_DAG, BUILD_DAG}
    plugins = {p["name"] for p in api.json("/api/v2/plugins")["plugins"]}
    assert "topic_lineage" in plugins


@pytest.fixture
def browser(tmp_path):
    with headless_chromium(tmp_path) as page:
        yield page


NAV_ENTRY = """[...document.querySelectorAll('a, button')].find(e =>
    (e.innerText || '').trim() === 'Topic lineage' || e.getAttribute('aria-label') === 'Topic lineage'
    || e.getAttribute('title') === 'Topic lineage')"""


def sign_in(browser, url: str, user: str, password: str) -> None:
    """Open ``url`` (a page that shows Airflow's login form), fill the form and submit it."""
    browser.goto(url)
    wait_for(lambda: browser.js("!!document.querySelector('input[name=password]')"), 90,
             "Airflow's login form")
    browser.type_into("input[name=username]", user)
    browser.type_into("input[name=password]", password)
    wait_for(lambda: browser.js("!document.querySelector('button[type=submit]').disabled"), 20,
             "the sign-in button")
    browser.js("document.querySelector('button[type=submit]').click()")


def open_topic_lineage(browser, base: str, user: str, password: str) -> None:
    """Sign in through Airflow's login form, click *Topic lineage* in the navigation and wait
    for the embedded page's status line."""
    sign_in(browser, base + "/", user, password)
    wait_for(lambda: browser.js(f"!!({NAV_ENTRY})"), 120, "'Topic lineage' in the navigation")

    def on_the_route() -> bool:
        # a click that lands before the UI's router is ready does nothing: click again
        if browser.js("location.pathname") == "/plugin/topic-lineage":
            return True
        browser.js(f"(({NAV_ENTRY}) || {{click() {{}}}}).click()")
        return False

    wait_for(on_the_route, 60, "the Topic lineage route")
    wait_for(lambda: browser.js(
        "(() => { const f = document.querySelector('iframe'); return !!(f && f.contentDocument &&"
        " f.contentDocument.getElementById('search-form')); })()"), 90, "the embedded page")
    wait_for(lambda: browser.js(
        "document.querySelector('iframe').contentDocument.getElementById('status').textContent"
        ".trim().length > 0"), 60, "the page's status line")


def test_every_component_the_home_page_reports_is_healthy(deployment):
    """The health the UI's home page shows as badges: the metadatabase, the scheduler, the
    dag-processor and the triggerer (started with the rest, so no red badge on a healthy
    install)."""
    url = deployment["base"] + "/api/v2/monitor/health"

    def unhealthy():
        health = json.loads(request(url)[1])
        bad = {name: part.get("status") for name, part in health.items()
               if name in ("metadatabase", "scheduler", "triggerer", "dag_processor")
               and part.get("status") != "healthy"}
        return None if bad else health

    health = wait_for(unhealthy, 90, "every component healthy", interval=2)
    assert health["triggerer"]["latest_triggerer_heartbeat"]


def dag_runs(api: Api, dag_id: str) -> list[dict]:
    return api.json(f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]


def task_instances(api: Api, dag_id: str, run_id: str) -> dict[str, dict]:
    """The run's task instances as the REST API shows them, by task id."""
    from urllib.parse import quote

    rows = api.json(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances")
    return {t["task_id"]: t for t in rows["task_instances"]}


def task_states(api: Api, dag_id: str, run_id: str) -> dict[str, str]:
    return {task: ti["state"] for task, ti in task_instances(api, dag_id, run_id).items()}


def trigger(api: Api, dag_id: str) -> dict:
    """The UI's Trigger (no logical date); returns the new run."""
    return api.json(f"/api/v2/dags/{dag_id}/dagRuns", "POST", {"logical_date": None, "conf": {}})


def trigger_and_wait(api: Api, dag_id: str, timeout_s: float) -> dict:
    """The UI's Trigger, then wait for the run to end."""
    run = trigger(api, dag_id)
    run_id = run["dag_run_id"]

    def finished():
        state = next(r for r in dag_runs(api, dag_id) if r["dag_run_id"] == run_id)["state"]
        return state if state in ("success", "failed") else None

    assert wait_for(finished, timeout_s, f"{dag_id} run {run_id}", interval=1) == "success"
    return run


def ui_backfill(api: Api, dag_id: str, start: datetime, end: datetime,
                max_active_runs: int = 5) -> tuple[dict, int]:
    """The Backfill dialog's two requests: the dry run it shows, then the creation (the dialog's
    own default for max active runs is 1, at most the DAG's ``max_active_runs``)."""
    body = {
        "dag_id": dag_id, "dag_run_conf": {}, "from_date": start.isoformat().replace("+00:00", "Z"),
        "to_date": end.isoformat().replace("+00:00", "Z"), "max_active_runs": max_active_runs,
        "reprocess_behavior": "none", "run_backwards": False, "run_on_latest_version": True,
    }
    dry = api.json("/api/v2/backfills/dry_run", "POST", body)
    return api.json("/api/v2/backfills", "POST", body), dry["total_entries"]


def scheduler_healthy(api: Api) -> bool:
    health = json.loads(request(api.base + "/api/v2/monitor/health")[1])
    return health["metadatabase"]["status"] == "healthy" and health["scheduler"]["status"] == "healthy"


def test_ui_backfills_of_both_dags_succeed_and_the_scheduler_stays_up(deployment, api):
    from topic_lineage import store, warehouse

    broker, home = deployment["broker"], deployment["home"]
    started, t0 = time.monotonic(), datetime.now(UTC)
    # The UI's pause toggle: both snapshots' asset events queue up and make one build when the
    # DAG is unpaused (one Spark build, not one per snapshot; it runs beside the backfills).
    api.json(f"/api/v2/dags/{BUILD_DAG}", "PATCH", {"is_paused": True})
    broker.create_topics(["orders", "payments"])
    trigger_and_wait(api, SNAPSHOT_DAG, 300)
    broker.delete_topics(["orders"])
    broker.create_topics([("orders", 2)])
    trigger_and_wait(api, SNAPSHOT_DAG, 300)
    api.json(f"/api/v2/dags/{BUILD_DAG}", "PATCH", {"is_paused": False})
    # (the schedule, every 15 minutes, may add captures of its own)
    live = [r for r in store.read_runs() if r["source"] == "live" and r["captured_at"] > t0]
    assert len(live) >= 2 and live[-1]["topic_count"] == 3, live  # + __consumer_offsets

    # Both backfills at once, each with up to 5 active runs (the dialog's "max active runs").
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    today = now.replace(hour=0, minute=0)
    snap_start = now.replace(minute=now.minute - now.minute % 15) - timedelta(hours=2)
    snapshot_backfill, snapshot_runs = ui_backfill(
        api, SNAPSHOT_DAG, snap_start, snap_start + timedelta(minutes=30))
    build_backfill, build_runs = ui_backfill(
        api, BUILD_DAG, today - timedelta(days=3), today - timedelta(days=2))
    assert 2 <= snapshot_runs <= 3 and 2 <= build_runs <= 3, (snapshot_runs, build_runs)
    assert snapshot_backfill["max_active_runs"] == build_backfill["max_active_runs"] == 5

    def backfill_done(backfill: dict, expected: int, timeout_s: float) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert scheduler_healthy(api), "the scheduler or database went down during the backfill"
            runs = [r for r in dag_runs(api, backfill["dag_id"]) if r["run_type"] == "backfill"]
            if len(runs) == expected and all(r["state"] in ("success", "failed") for r in runs):
                return runs
            time.sleep(2)
        raise AssertionError(f"backfill of {backfill['dag_id']} not done after {timeout_s}s")

    snapshot_done = backfill_done(snapshot_backfill, snapshot_runs, 600)
    build_done = backfill_done(build_backfill, build_runs, 1500)
    print(f"snapshots + both backfills: {time.monotonic() - started:.0f}s")
    assert {r["state"] for r in snapshot_done + build_done} == {"success"}, snapshot_done + build_done
    for run in snapshot_done:  # a backfill does not record today's metadata as the past's
        assert task_states(api, SNAPSHOT_DAG, run["dag_run_id"])["capture"] == "skipped"
    for run in build_done:
        tis = task_instances(api, BUILD_DAG, run["dag_run_id"])
        states = {task: ti["state"] for task, ti in tis.items()}
        assert states["plan"] == "success", states
        if states["build"] == "skipped" and tis["build"]["try_number"] == 0:
            # plan found nothing new since the published version (noop.py) and skipped the
            # rest: the gate warned about nothing, so health too, and none of them was ever
            # scheduled (no task process, no log)
            assert states["validate"] == states["publish"] == states["health"] == "skipped", states
            assert [tis[t]["try_number"] for t in ("build", "validate", "publish", "health")] == [
                0, 0, 0, 0], tis
        elif states["build"] == "skipped":
            # plan saw something new, but a run ahead of this one published it before this
            # build started (backfill runs are concurrent): the build skipped itself, so did
            # validate and publish, and health reports the published version (no warnings)
            assert states["validate"] == states["publish"] == "skipped", states
            assert states["health"] == "success", states
        else:
            assert states["build"] == states["validate"] == "success", states
            assert states["publish"] in ("success", "skipped"), states
            assert states["health"] == "success", states  # the gate warned about nothing
    # captured_at is always the real capture time: the backfills dated nothing in the past
    assert all(r["captured_at"] > deployment["started_at"] for r in store.read_runs())
    assert scheduler_healthy(api)
    # the scheduler marks a backfill completed in a later loop, after its last run ended
    wait_for(lambda: api.json(f"/api/v2/backfills/{build_backfill['id']}")["completed_at"],
             120, "the scheduler to mark the backfill completed", interval=1)

    # Wait for any asset-triggered build, then check the published table.
    wait_for(lambda: all(r["state"] in ("success", "failed") for r in dag_runs(api, BUILD_DAG)),
             900, "every topic_incarnations run to end", interval=2)
    assert all(r["state"] == "success" for r in dag_runs(api, BUILD_DAG))
    current = warehouse.current_version()
    manifest = warehouse.read_manifest(current)
    assert len(manifest["snapshot_files"]) >= 2
    import pyarrow.dataset as ds

    rows = ds.dataset(str(warehouse.version_path(current, "topic_incarnations")),
                      format="parquet").to_table().to_pylist()
    orders = [r for r in rows if r["topic_name"] == "orders"]
    assert len({r["topic_id"] for r in orders}) == 2  # deleted and re-created
    assert home.is_dir()


def test_setup_again_while_running_keeps_secrets_and_login(deployment, api):
    """`setup` is idempotent: run again (as a user would, with Airflow up), it keeps the
    password, the keys and the database, and Airflow goes on answering the same token."""
    home = deployment["home"]
    state_before = (home / "airflow" / "topic-lineage-airflow.json").read_text()
    runs_before = {r["dag_run_id"] for r in dag_runs(api, SNAPSHOT_DAG)}
    assert runs_before
    client_config = home.parent / "client.properties"
    cli(deployment["env"], "airflow", "setup", "--bootstrap-servers",
        deployment["broker"].bootstrap_servers, "--kafka-config", str(client_config))
    assert json.loads((home / "airflow" / "passwords.json").read_text()) == {
        "admin": deployment["password"]}
    assert (home / "airflow" / "topic-lineage-airflow.json").read_text() == state_before
    # Same token, same database: every run from before is still listed. The scheduler may have
    # added the next quarter-hour's run meanwhile (CI once crossed 23:30 here), nothing else.
    runs_after = {r["dag_run_id"]: r for r in dag_runs(api, SNAPSHOT_DAG)}
    assert runs_before <= runs_after.keys()
    assert all(runs_after[i]["run_type"] == "scheduled" for i in runs_after.keys() - runs_before)
    assert scheduler_healthy(api)


def files_containing(root: Path, needle: bytes) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    found.append(str(path.relative_to(root)))
            except OSError:
                continue
    return found


def test_no_secret_leaks(deployment, api):
    """After setup and real runs: the SASL password is nowhere it could be read back."""
    home, secret = deployment["home"], SASL_PASSWORD
    runs = [r for r in dag_runs(api, SNAPSHOT_DAG) if r["run_type"] == "manual"]
    assert runs, "no snapshot run to inspect (the backfill test runs first)"
    # The connection is used, and Airflow answers with the password masked.
    connection = api.json("/api/v2/connections/kafka_default")
    extra = json.loads(connection["extra"])
    assert extra["sasl.username"] == "topic-lineage" and extra["sasl.password"] != secret
    assert secret not in json.dumps(api.json("/api/v2/connections"))
    # Airflow's audit log, which records CLI command lines.
    events = api.json("/api/v2/eventLogs?limit=1000")
    assert events["total_entries"] > 0
    assert secret not in json.dumps(events)
    # Task logs, through the API and on disk.
    from urllib.parse import quote

    log = api.call(f"/api/v2/dags/{SNAPSHOT_DAG}/dagRuns/{quote(runs[0]['dag_run_id'], safe='')}"
                   "/taskInstances/capture/logs/1?map_index=0")
    assert log[0] == 200 and "topic" in log[1].lower() and secret not in log[1]
    task_logs = list((home / "airflow" / "logs").rglob("*.log"))
    assert task_logs
    # Every file under TOPIC_LINEAGE_HOME: data, logs, Airflow's PostgreSQL (extras encrypted).
    assert files_containing(home, secret.encode()) == []
    # No process's command line (Airflow records those; `ps` shows them to every user).
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert secret.encode() not in cmdline.read_bytes(), cmdline
        except OSError:
            continue
    # The admin password is stored in its one 0600 file only.
    assert files_containing(home, deployment["password"].encode()) == ["airflow/passwords.json"]
    assert deployment["password"] not in json.dumps(events)


# --- the UI over a published version of its own (the deployment's own runs are done) ----------
FINAL = ("success", "failed")


def record_gate_runs(version: str, failed_newer: str) -> None:
    """Gate runs recorded through the gate's own writer: ``version`` passed (it is published),
    then the newer build ``failed_newer`` failed (so it was not published)."""
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
def ui_version(deployment, api):
    """The UI tests' version (``test_ui_api.scenario``, published as ``v0001``, with its gate
    runs) on the running deployment, once no build can replace it: both DAGs paused (the UI's
    toggle) with no run of ``topic_incarnations`` unfinished. A run of a paused DAG is not
    scheduled on: one still running when it is paused is let finish first (unpaused again)."""
    def paused_and_done() -> bool:
        for dag_id in (SNAPSHOT_DAG, BUILD_DAG):
            api.json(f"/api/v2/dags/{dag_id}", "PATCH", {"is_paused": True})
        if all(r["state"] in FINAL for r in dag_runs(api, BUILD_DAG)):
            return True
        api.json(f"/api/v2/dags/{BUILD_DAG}", "PATCH", {"is_paused": False})
        return False

    wait_for(paused_and_done, 900, "both DAGs paused, no topic_incarnations run unfinished",
             interval=2)
    rows, runs = scenario()
    publish("v0001", rows, runs)  # into the deployment's home (the module's TOPIC_LINEAGE_HOME)
    record_gate_runs("v0001", failed_newer="v0002")
    return {"base": deployment["base"], "user": "admin", "password": deployment["password"],
            "tl_home": deployment["home"], "token": api.token}


def test_data_docs_paths_in_the_api_server_are_4xx_never_500(ui_version):
    """Through Airflow's own server (uvicorn): NUL bytes, 5,000-character paths, traversal."""
    auth = {"Authorization": "Bearer " + ui_version["token"]}
    docs = ui_version["base"] + "/topic-lineage/data-docs/"
    assert http_status(docs + "index.html", auth) == 200
    assert http_status(docs + "%00", auth) == 400
    assert http_status(docs + "a" * 5000, auth) == 400
    assert http_status(docs + "data_docs/" + "a" * 900 + ".html", auth) == 404
    assert http_status(docs + "..%2F..%2F..%2Fetc%2Fpasswd", auth) == 404
    assert http_status(docs + "gate_runs.jsonl", auth) == 404


def test_sign_in_and_open_topic_lineage_from_the_navigation(ui_version, browser):
    """Airflow's login form, then *Topic lineage* clicked in the navigation: the page embedded
    in the Airflow UI (an iframe on the same origin) shows the published version."""
    OUTPUT.mkdir(exist_ok=True)
    base = ui_version["base"]
    open_topic_lineage(browser, base, ui_version["user"], ui_version["password"])
    assert browser.js("document.body.innerText.includes('Topic lineage')")
    assert browser.js("new URL(document.querySelector('iframe').src).pathname") == "/topic-lineage/"
    wait_for(lambda: "Published version v0001" in browser.js(
        "document.querySelector('iframe').contentDocument.getElementById('status').textContent"),
        60, "the published-version line in the embedded page")
    time.sleep(1)
    browser.screenshot(OUTPUT / "airflow-local-topic-lineage.png")
    shutil.copyfile(OUTPUT / "airflow-local-topic-lineage.png", OUTPUT / "ui-in-airflow.png")


def login(browser, server: dict) -> None:
    sign_in(browser, f"{server['base']}/auth/login?next=/topic-lineage/", server["user"],
            server["password"])
    wait_for(lambda: "_token" in (browser.js("document.cookie") or "")
             or browser.js("location.pathname").startswith("/topic-lineage"), 60, "sign-in")


def test_recreated_topic_timeline_in_airflow(ui_version, browser):
    """Sign in, search `orders`: both prod-eu incarnations (deleted and live) are drawn."""
    base = ui_version["base"]
    OUTPUT.mkdir(exist_ok=True)
    login(browser, ui_version)
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
    assert str(ui_version["tl_home"]) not in browser.js("document.body.innerText")
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
