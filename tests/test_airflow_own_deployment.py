"""topic-lineage in an Airflow of one's own, set up exactly as docs/airflow.md's "In your own
Airflow" says, the way a team that already runs Airflow adds it.

The wheel is built from this checkout and installed into a *new* virtual environment beside the
pinned Airflow (not editable; nothing of the repository on the path). The DAGs folder holds only
the two-line DAG file, the plugins folder is empty, the database is a PostgreSQL server of its
own ("your database"), and the connections come from ``AIRFLOW_CONN_*`` in the environment. The
installed package is made read-only before Airflow starts. Then, against the test broker:

- both DAGs are parsed without import errors and the plugin comes from the entry point;
- ``kafka_topic_snapshot`` triggered through the REST API succeeds, the asset-triggered
  ``topic_incarnations`` builds, validates and publishes, and the published table has the
  broker's topics with their topic IDs;
- headless Chromium signs in, opens *Topic lineage* from the navigation and finds a topic with
  its ID on the page;
- nothing was written into the installed package.

The wheel's size and the install's wall time are printed (``-s``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_support import headless_chromium, wait_for
from conftest import OFFSETS_TOPIC
from test_airflow_local_deployment import (
    Api,
    dag_runs,
    open_topic_lineage,
    private_root,
    request,
    trigger_and_wait,
)
from test_install import build_wheel

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "test-output"
LOCK = REPO / "requirements.lock"
SNAPSHOT_DAG, BUILD_DAG = "kafka_topic_snapshot", "topic_incarnations"
TOPICS = ["orders", "payments"]
USER = "admin"

# The two-line DAG file of docs/airflow.md, "In your own Airflow" (tests/test_dag_factory.py)
DAG_FILE = (REPO / "dags" / "topic_lineage.py").read_text()


def locked_version(name: str) -> str:
    return re.search(rf"^{re.escape(name)}==(\S+)$", LOCK.read_text(), flags=re.MULTILINE).group(1)


def run(args: list, *, env: dict | None = None, cwd: Path | None = None,
        timeout: float = 600) -> str:
    out = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=timeout, check=False)
    assert out.returncode == 0, f"{args[:4]}: {out.stdout[-2000:]}{out.stderr[-3000:]}"
    return out.stdout


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` but Python's bytecode cache, by relative path: its content's
    hash (as root, Python writes ``__pycache__`` whatever the mode bits say)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def broker_topic_ids(broker, names: list[str]) -> dict[str, str]:
    """The topic IDs the broker reports, in the tables' canonical form."""
    from confluent_kafka import TopicCollection

    from topic_lineage import topic_id

    futures = broker.admin().describe_topics(TopicCollection(names))
    return {name: topic_id.canonical(f.result(timeout=30).topic_id) for name, f in futures.items()}


def set_writable(root: Path, writable: bool) -> None:
    """The directories of ``root`` read-only (or writable again): no file can be created,
    replaced or removed there. Files are left alone: uv hard-links them from its cache."""
    for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        mode = directory.stat().st_mode
        directory.chmod(mode | 0o200 if writable else mode & ~0o222)


def user_environment(venv: Path) -> dict[str, str]:
    """A shell of the user's: nothing of this test's Airflow, Spark, package or venv settings,
    and the new venv's ``bin`` first on PATH."""
    mine = {str(Path(sys.executable).parent)}
    path = [str(venv / "bin"), *(p for p in os.environ.get("PATH", "").split(":") if p not in mine)]
    dropped = ("AIRFLOW", "PYTHON", "TOPIC_LINEAGE", "PYSPARK", "SPARK", "VIRTUAL_ENV", "PYTEST")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["PATH"] = ":".join(path)
    return env


@contextlib.contextmanager
def components(airflow: Path, env: dict, root: Path):
    """api-server, scheduler and dag-processor, each in a process group of its own (its log
    ``<root>/<component>.log``); at the end every group is sent SIGTERM at once, then each is
    waited for (SIGKILL after 20 s)."""
    procs = []
    try:
        for component in ("api-server", "scheduler", "dag-processor"):
            with open(root / f"{component}.log", "wb") as log:
                procs.append(subprocess.Popen([str(airflow), component], env=env, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def own_airflow(broker_session):
    """The new venv, the database and the three Airflow components, as the docs set them up."""
    from cryptography.fernet import Fernet

    from topic_lineage.local import postgres as pg
    from topic_lineage.local.broker import free_port

    root = private_root("tl-own-airflow-")
    venv, dags, plugins = root / "venv", root / "dags", root / "plugins"
    for folder in (dags, plugins):
        folder.mkdir()
    (dags / "topic_lineage_dags.py").write_text(DAG_FILE)
    package = None
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        # --- the package, as a user installs it ------------------------------------------------
        wheel = build_wheel(root / "dist")
        run([sys.executable, "-m", "venv", "--without-pip", venv])
        started = time.monotonic()
        run([sys.executable, "-m", "uv", "pip", "install", "--python", venv / "bin" / "python",
             "--offline", "--constraint", LOCK, f"apache-airflow=={locked_version('apache-airflow')}",
             "psycopg2-binary", "asyncpg", wheel])
        install_s = time.monotonic() - started
        print(f"\nwheel {wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB; "
              f"new venv install: {install_s:.1f}s")
        user_env = user_environment(venv)
        located = json.loads(run([venv / "bin" / "python", "-c", (
            "import json, sys, topic_lineage, spark_jobs;"
            "print(json.dumps([topic_lineage.__file__, spark_jobs.__file__, sys.path]))")],
            env=user_env, cwd=root))
        package = Path(located[0]).parent
        stack.callback(set_writable, package, True)  # so that the root can be removed
        set_writable(package, False)
        before = tree_digest(package)

        # --- "your database" -------------------------------------------------------------------
        password = secrets.token_urlsafe(18)
        pg.init(root / "postgres", password)
        port = free_port()
        pg.start(root / "postgres", port)
        stack.callback(pg.stop, root / "postgres")
        pg.ensure_database(port, password)

        # --- the deployment's environment: every component reads the same ------------------------
        api_port, admin_password = free_port(), secrets.token_urlsafe(12)
        (root / "passwords.json").write_text(json.dumps({USER: admin_password}))
        home = root / "tl-home"
        env = {
            **user_env,
            "AIRFLOW_HOME": str(root / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg.url(port, password),
            "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(root / "passwords.json"),
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            # what docs/airflow.md adds for topic-lineage
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({
                "conn_type": "kafka",
                "extra": {"bootstrap.servers": broker_session.bootstrap_servers}}),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
            "TOPIC_LINEAGE_HOME": str(home),
            "PYSPARK_PYTHON": str(venv / "bin" / "python"),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        airflow = venv / "bin" / "airflow"
        started = time.monotonic()
        run([airflow, "db", "migrate"], env=env, cwd=root)
        run([airflow, "pools", "set", "topic_lineage_publish", "1",
             "topic-lineage publishes one version at a time"], env=env, cwd=root)
        run([airflow, "pools", "set", "topic_lineage_build", "1",
             "topic-lineage builds one version at a time"], env=env, cwd=root)
        stack.enter_context(components(airflow, env, root))
        base = f"http://127.0.0.1:{api_port}"
        wait_for(lambda: request(base + "/api/v2/monitor/health")[0] == 200, 300,
                 "Airflow's API", interval=2)
        print(f"database migrated, pools set, Airflow answering: {time.monotonic() - started:.0f}s")
        yield {"root": root, "venv": venv, "package": package, "located": located,
               "before": before, "home": home, "base": base, "password": admin_password,
               "broker": broker_session}


@pytest.fixture(scope="module")
def api(own_airflow):
    return Api(own_airflow["base"], USER, own_airflow["password"])


def test_the_package_comes_from_the_wheel_in_the_new_venv(own_airflow, api):
    """Not the checkout: the installed package, its plugin by entry point, its DAGs parsed from
    the two-line file without an import error."""
    topic_lineage_file, spark_jobs_file, path = own_airflow["located"]
    site = own_airflow["venv"] / "lib" / "python3.11" / "site-packages"
    assert Path(topic_lineage_file).is_relative_to(site), topic_lineage_file
    assert Path(spark_jobs_file).is_relative_to(site), spark_jobs_file
    assert not any(str(REPO) in entry for entry in path), path
    assert (own_airflow["package"] / "quality" / "gx" / "great_expectations.yml").is_file()
    assert not any(Path(own_airflow["root"], "plugins").iterdir())
    wait_for(lambda: {d["dag_id"] for d in api.json("/api/v2/dags")["dags"]}
             == {SNAPSHOT_DAG, BUILD_DAG}, 180, "both DAGs parsed", interval=1)
    assert api.json("/api/v2/importErrors")["total_entries"] == 0
    plugins = {p["name"]: p for p in api.json("/api/v2/plugins")["plugins"]}
    assert re.match(r"topic[-_]lineage==", plugins["topic_lineage"]["source"]), plugins


def test_both_dags_run_end_to_end_against_the_broker(own_airflow, api):
    """A snapshot triggered through the REST API; the asset-triggered build publishes the
    broker's topics with their IDs."""
    from topic_lineage import warehouse

    broker = own_airflow["broker"]
    broker.delete_all_topics()
    broker.create_topics(TOPICS)
    # and Kafka's own __consumer_offsets, on the session broker from its start
    expected = set(broker_topic_ids(broker, [*TOPICS, OFFSETS_TOPIC]).items())
    started = time.monotonic()
    for dag_id in (SNAPSHOT_DAG, BUILD_DAG):  # the UI's pause toggle
        api.json(f"/api/v2/dags/{dag_id}", "PATCH", {"is_paused": False})
    trigger_and_wait(api, SNAPSHOT_DAG, 300)

    def published() -> bool:
        runs = dag_runs(api, BUILD_DAG)
        return runs and all(r["state"] in ("success", "failed") for r in runs) and any(
            r["run_type"] == "asset_triggered" for r in runs)

    wait_for(published, 600, "the asset-triggered topic_incarnations run", interval=1)
    print(f"snapshot + asset-triggered build: {time.monotonic() - started:.0f}s")
    runs = dag_runs(api, BUILD_DAG)
    assert {r["state"] for r in runs} == {"success"}, runs

    saved = os.environ.get("TOPIC_LINEAGE_HOME")
    os.environ["TOPIC_LINEAGE_HOME"] = str(own_airflow["home"])
    try:
        import pyarrow.dataset as ds

        version = warehouse.current_version()
        rows = ds.dataset(str(warehouse.version_path(version, "topic_incarnations")),
                          format="parquet").to_table().to_pylist()
    finally:
        if saved is None:
            os.environ.pop("TOPIC_LINEAGE_HOME", None)
        else:
            os.environ["TOPIC_LINEAGE_HOME"] = saved
    live = {(r["topic_name"], r["topic_id"]) for r in rows
            if r["is_current"] and r["deleted_at"] is None}
    assert live == expected


@pytest.fixture
def browser(tmp_path):
    with headless_chromium(tmp_path) as page:
        yield page


def test_the_topic_lineage_page_shows_the_published_topics(own_airflow, browser):
    open_topic_lineage(browser, own_airflow["base"], USER, own_airflow["password"])
    page = "document.querySelector('iframe').contentDocument"
    wait_for(lambda: "Published version" in browser.js(
        f"{page}.getElementById('status').textContent"), 60, "the published-version line")
    browser.js(f"{page}.getElementById('q').value = 'orders'")
    browser.js(f"{page}.getElementById('search-button').click()")
    wait_for(lambda: browser.js(f"{page}.querySelectorAll('.incarnation').length") == 1, 60,
             "the incarnation of orders")
    orders_id = broker_topic_ids(own_airflow["broker"], ["orders"])["orders"]
    assert orders_id in browser.js(f"{page}.querySelector('.cluster-block').innerText")
    OUTPUT.mkdir(exist_ok=True)
    browser.screenshot(OUTPUT / "airflow-own-topic-lineage.png")


def test_nothing_was_written_into_the_installed_package(own_airflow, api):
    """After both DAGs ran (GX context read, Data Docs built) the package is as installed."""
    assert dag_runs(api, BUILD_DAG), "no topic_incarnations run (the end-to-end test runs first)"
    assert tree_digest(own_airflow["package"]) == own_airflow["before"]
    assert (own_airflow["home"] / "quality" / "data_docs" / "index.html").is_file()
