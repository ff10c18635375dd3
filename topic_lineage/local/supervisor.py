"""The local Airflow deployment behind ``topic-lineage airflow ...`` and ``topic-lineage demo``:
its home, state and secrets, setup (PostgreSQL, migrations, connections, Variable, pools) and the
supervisor that starts and stops PostgreSQL, the api-server, the scheduler, the dag-processor and
the triggerer.

``setup`` creates an Airflow home under ``$TOPIC_LINEAGE_HOME/airflow`` (a private PostgreSQL
server, LocalExecutor, the repository's ``dags/`` and ``plugins/``, a login with a generated
admin password), migrates its database and creates the connections (``kafka_default``,
``spark_default``), the cluster Variable and the pools. ``start`` runs PostgreSQL and the
components; ``stop`` ends them all; :func:`airflow_env` is the environment for running
``airflow`` commands against this home.

Secrets (the database password, the JWT and Fernet keys, the admin password, the Kafka
connection's SASL/SSL settings) never go on a command line: Airflow's event log records
command lines. They are kept in 0600 files under the Airflow home and reach Airflow through
the environment or standard input.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from topic_lineage import airflow as at
from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.fsutil import pid_alive, write_durably
from topic_lineage.local import postgres as pg
from topic_lineage.local.db_check import LOCAL_SETTINGS

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
"""The Airflow components ``start`` runs. The triggerer runs deferred tasks (none of ours defer);
without it Airflow's home page shows its health badge red on a healthy install, and a user's own
deferrable operator would wait forever."""
STATE_FILE = "topic-lineage-airflow.json"
PASSWORDS_FILE = "passwords.json"
SECRETS_DIR = "secrets"
DEFAULT_PORT = 8080
ADMIN_USER = "admin"
SCHEDULER_HEALTH_PORT_OFFSET = 1


class AirflowSetupError(TopicLineageError):
    """The local Airflow could not be set up or started; the message says what to do."""


# --- where things are ------------------------------------------------------------------------
def airflow_home() -> Path:
    """``$TOPIC_LINEAGE_HOME/airflow``; with the home on object storage, under the local
    working copy's directory (``$TOPIC_LINEAGE_WORK_DIR``, or the one under ``~/.cache``): the
    deployment's own files (its PostgreSQL, logs, secrets) are this machine's, not the
    bucket's."""
    return t.home() / "airflow"


def home_setting() -> str:
    """The ``TOPIC_LINEAGE_HOME`` of every process of the deployment: a URL as configured (the
    tasks work on the store, each in a working copy of its own), else the local directory."""
    from topic_lineage import storage

    return storage.home().location


def _checkout_folder(name: str, marker: str) -> Path:
    """A folder of the source checkout: the local deployment runs from one (the wheel has no
    ``dags/`` or ``plugins/``; an Airflow of your own needs neither)."""
    folder = Path(__file__).resolve().parents[2] / name
    if not (folder / marker).exists():
        raise AirflowSetupError(
            f"no {marker} in {folder}: 'topic-lineage airflow' runs the repository's local "
            "deployment, from a source checkout (bash scripts/install.sh). With the package "
            "installed into an Airflow of your own, use a two-line DAG file instead "
            "(docs/airflow.md, 'In your own Airflow')"
        )
    return folder


def dags_folder() -> Path:
    return _checkout_folder("dags", "topic_lineage.py")


def plugins_folder() -> Path:
    """The repository's ``plugins/``: the *Topic lineage* page in the Airflow UI."""
    return _checkout_folder("plugins", "topic_lineage_plugin.py")


def postgres_dir() -> Path:
    return airflow_home() / "postgres"


def passwords_path() -> Path:
    """The admin's password (JSON ``{"admin": "..."}``, mode 0600), read by Airflow at login."""
    return airflow_home() / PASSWORDS_FILE


def admin_password() -> str | None:
    path = passwords_path()
    return json.loads(path.read_text()).get(ADMIN_USER) if path.exists() else None


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (created 0600, never wider)."""
    write_durably(path, text, mode=0o600)


def _state_path() -> Path:
    return airflow_home() / STATE_FILE


def load_state() -> dict:
    path = _state_path()
    if not path.exists():
        raise AirflowSetupError(
            f"no local Airflow under {airflow_home()}; run 'topic-lineage airflow setup' first"
        )
    return json.loads(path.read_text())


def _save_state(state: dict) -> None:
    path = _state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, json.dumps(state, indent=2))  # holds the deployment's secrets
    # Files the `airflow` CLI reads through AIRFLOW__..._CMD (see cmd_env), one secret each.
    _write_private(airflow_home() / SECRETS_DIR / "sql_alchemy_conn", _database_url(state))
    _write_private(airflow_home() / SECRETS_DIR / "fernet_key", state["fernet_key"])
    write_local_settings()


def local_settings_path() -> Path:
    """``$AIRFLOW_HOME/config/airflow_local_settings.py``, imported by every Airflow process of
    the deployment (Airflow puts ``$AIRFLOW_HOME/config`` on ``sys.path``)."""
    return airflow_home() / "config" / "airflow_local_settings.py"


def write_local_settings() -> Path:
    """The local settings that make an ``airflow`` command say, in one line, to run
    ``topic-lineage airflow start`` when the deployment's PostgreSQL is stopped
    (:mod:`topic_lineage.local.db_check`)."""
    path = local_settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != LOCAL_SETTINGS:
        write_durably(path, LOCAL_SETTINGS)
    return path


def _database_url(state: dict) -> str:
    return pg.url(state["postgres_port"], state["postgres_password"])


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise AirflowSetupError("no free TCP port on 127.0.0.1")


SECRET_OPTIONS = {
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "sql_alchemy_conn",
    "AIRFLOW__CORE__FERNET_KEY": "fernet_key",
    "AIRFLOW__API__SECRET_KEY": None,
    "AIRFLOW__API_AUTH__JWT_SECRET": None,
}
"""Options holding secrets: `env` prints the file-reading ``_CMD`` form, or nothing."""


def airflow_env(state: dict) -> dict[str, str]:
    """The environment every Airflow process of the local deployment runs with."""
    home = airflow_home()
    bin_dir = str(Path(sys.executable).parent)
    port = state["port"]
    env = {
        "AIRFLOW_HOME": str(home),
        "TOPIC_LINEAGE_HOME": home_setting(),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_folder()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _database_url(state),
        "AIRFLOW__CORE__FERNET_KEY": state["fernet_key"],
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(state.get("parallelism", 4)),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__SECRET_KEY": state["secret_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": state["jwt_secret"],
        "AIRFLOW__API__EXPOSE_CONFIG": "False",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
    }
    if state.get("auth", True):
        # One admin user; its password is generated by `setup` into a 0600 file.
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"{ADMIN_USER}:admin"
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(passwords_path())
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "False"
    else:
        # `setup --no-auth`, for throw-away demos: every local process is an Airflow admin.
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "True"
    if state.get("snapshot_schedule"):
        env["AIRFLOW__TOPIC_LINEAGE__SNAPSHOT_SCHEDULE"] = state["snapshot_schedule"]
    if state.get("build_schedule"):
        env["AIRFLOW__TOPIC_LINEAGE__BUILD_SCHEDULE"] = state["build_schedule"]
    if state.get("object_store_conn_id"):
        env["AIRFLOW__TOPIC_LINEAGE__OBJECT_STORE_CONN_ID"] = state["object_store_conn_id"]
    return env


def _full_env(state: dict) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(airflow_env(state))
    return env


def _airflow(state: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    binary = Path(sys.executable).parent / "airflow"
    out = subprocess.run(
        [str(binary), *args], env=_full_env(state), capture_output=True, text=True, timeout=timeout,
        check=False,
    )
    if out.returncode != 0:
        raise AirflowSetupError(
            f"'airflow {' '.join(args)}' failed (exit {out.returncode}): "
            f"{(out.stderr or out.stdout).strip().splitlines()[-1:]}"
        )
    return out


# Runs in a subprocess with the deployment's environment (Airflow reads its home at import).
_CONFIGURE = r"""
import json, sys
from airflow.models import Connection, Pool, Variable
from airflow.utils.session import create_session
spec = json.loads(sys.stdin.read())
with create_session() as session:
    for conn in spec["connections"]:
        session.query(Connection).filter(Connection.conn_id == conn["conn_id"]).delete()
        session.add(Connection(**conn))
    session.commit()
    for name, description in spec["pools"].items():
        Pool.create_or_update_pool(
            name, slots=1, description=description, include_deferred=False, session=session
        )
for key, value in spec["variables"].items():
    if value is None:
        Variable.delete(key)
    else:
        Variable.set(key, value)
print("configured")
"""


def _new_state() -> dict:
    from cryptography.fernet import Fernet

    return {
        "jwt_secret": secrets.token_urlsafe(64),  # 64 random bytes (HS512 wants >= 64)
        "secret_key": secrets.token_urlsafe(32),
        "fernet_key": Fernet.generate_key().decode(),  # connection extras encrypted in the DB
        "postgres_password": secrets.token_urlsafe(24),
        "postgres_port": _free_port(0),
    }


def _start_database(state: dict) -> bool:
    """Start the deployment's PostgreSQL unless it runs (initialised on first use).

    Returns True when it was started here. A port taken since is replaced by a free one.
    """
    data_dir = postgres_dir()
    if not pg.initialised(data_dir):
        pg.init(data_dir, state["postgres_password"])
    started = False
    if not pg.running(data_dir):
        if not _port_free(state["postgres_port"]):
            state["postgres_port"] = _free_port(0)
            _save_state(state)
        pg.start(data_dir, state["postgres_port"])
        started = True
    pg.ensure_database(state["postgres_port"], state["postgres_password"])
    return started


@contextmanager
def database(state: dict):
    """The deployment's PostgreSQL running for the block (stopped after if started here)."""
    started = _start_database(state)
    try:
        yield
    finally:
        if started:
            pg.stop(postgres_dir())


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def setup(
    *, bootstrap_servers: str, clusters: str | None, spark_master: str, port: int,
    snapshot_schedule: str | None, build_schedule: str | None, archive_dir: str | None,
    kafka_extra: dict | None = None, auth: bool = True, object_store_conn_id: str | None = None,
) -> dict:
    """Create or update the local Airflow home; returns its state (ports, secrets, schedules).

    Idempotent: secrets, the database and the admin password are created once and kept.
    """
    if clusters is not None:
        at.parse_clusters(clusters)  # refuse a bad list before touching anything
    home = airflow_home()
    home.mkdir(parents=True, exist_ok=True)
    try:
        state = load_state()
    except AirflowSetupError:
        state = _new_state()
    state.update(
        port=port, auth=auth,
        snapshot_schedule=snapshot_schedule or state.get("snapshot_schedule"),
        build_schedule=build_schedule or state.get("build_schedule"),
        object_store_conn_id=object_store_conn_id or state.get("object_store_conn_id"),
    )
    if auth and admin_password() is None:
        _write_private(passwords_path(), json.dumps({ADMIN_USER: secrets.token_urlsafe(18)}))
    from topic_lineage.local import spark_server

    spark_server.ensure_token()  # the Spark Connect server's token (0600), kept like the password
    _save_state(state)
    with database(state):
        _configure(state, bootstrap_servers=bootstrap_servers, clusters=clusters,
                   spark_master=spark_master, archive_dir=archive_dir, kafka_extra=kafka_extra)
    return state


def _configure(state: dict, *, bootstrap_servers: str, clusters: str | None, spark_master: str,
               archive_dir: str | None, kafka_extra: dict | None) -> None:
    _airflow(state, "db", "migrate")
    extra = {"bootstrap.servers": bootstrap_servers, **(kafka_extra or {})}
    spec = {
        "connections": [
            {"conn_id": at.DEFAULT_KAFKA_CONN_ID, "conn_type": "kafka", "extra": json.dumps(extra),
             "description": "Kafka cluster 'default' of topic-lineage (extra = librdkafka config)"},
            {"conn_id": at.SPARK_CONN_ID, "conn_type": "spark", "host": spark_master,
             "description": "Spark master for the topic-lineage build"},
        ],
        "pools": {
            at.PUBLISH_POOL: "one slot: topic-lineage publishes one version at a time",
            at.BUILD_POOL: "one slot: topic-lineage builds one version at a time",
        },
        "variables": {at.CLUSTERS_VARIABLE: clusters, at.ARCHIVE_VARIABLE: archive_dir},
    }
    # The spec holds the connection's secrets: it goes through stdin, never on a command line.
    out = subprocess.run(
        [sys.executable, "-c", _CONFIGURE], input=json.dumps(spec), env=_full_env(state),
        capture_output=True, check=False, text=True, timeout=300,
    )
    if out.returncode != 0:
        from topic_lineage.kafka_config import redact_text

        raise AirflowSetupError(
            f"could not configure Airflow: {redact_text(out.stderr.strip()[-500:], extra)}"
        )


# --- processes -------------------------------------------------------------------------------
def _pids_path() -> Path:
    return airflow_home() / "topic-lineage-airflow.pids"


def start(state: dict, *, wait_s: float = 180) -> dict[str, int]:
    """Start the components (each in its own process group); wait for the API to answer."""
    if _running_pids():
        raise AirflowSetupError(
            f"Airflow of {airflow_home()} is already running; 'topic-lineage airflow stop' first"
        )
    logs = airflow_home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    write_local_settings()  # a home set up before it existed gets it too
    _api_port(state)
    _start_database(state)  # left running for the components; stop() ends it
    env = _full_env(state)
    binary = str(Path(sys.executable).parent / "airflow")
    pids = {name: _start_component(binary, name, env, logs) for name in COMPONENTS}
    _pids_path().write_text(json.dumps(pids))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        url = f"http://127.0.0.1:{state['port']}/api/v2/monitor/health"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200 and _answers_for(state["port"], pids["api-server"]):
                    return pids
                if response.status == 200:  # another's API took the port after _api_port's check
                    pids = _start_elsewhere(state, pids, binary, logs)
                    continue
        except OSError:
            pass
        for name, pid in pids.items():
            if not pid_alive(pid):
                stop()
                raise AirflowSetupError(f"Airflow {name} exited at start; see {logs / name}.out")
        time.sleep(2)
    stop()
    raise AirflowSetupError(f"Airflow API did not answer on {url} within {wait_s:g}s; see {logs}")


def _start_component(binary: str, name: str, env: dict, logs: Path) -> int:
    """Start one component in a process group of its own (its pid is the group's id)."""
    with open(logs / f"{name}.out", "ab") as out:
        return subprocess.Popen(
            [binary, name], env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        ).pid


def _answers_for(port: int, group: int) -> bool:
    """Whether only process group ``group`` listens on ``port`` (our api-server and its
    workers). Two deployments started at once can both find the port free (``_api_port``); the
    first api-server to bind it then answers the other's health check too, and the other's
    users sign in to the wrong Airflow. True where /proc cannot tell (not Linux)."""
    groups = listening_groups(port)
    return groups is None or groups == {group}


def listening_groups(port: int) -> set[int] | None:
    """The process groups of the processes listening on TCP ``port`` (from /proc/net/tcp and
    tcp6 and each process's open files), with ``-1`` for a listening socket of no process this
    user can see (another user's); None without /proc/net/tcp."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as rows:
                next(rows, None)
                for row in rows:
                    fields = row.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                        sockets.add(f"socket:[{fields[9]}]")
        except FileNotFoundError:
            if table == "/proc/net/tcp":
                return None
    groups, seen = set(), set()
    for process in os.scandir("/proc") if sockets else ():
        if not process.name.isdigit():
            continue
        try:
            held = {link for fd in os.scandir(f"{process.path}/fd") if (link := os.readlink(fd.path)) in sockets}
            if held:
                groups.add(os.getpgid(int(process.name)))
                seen |= held
        except OSError:  # gone, or another user's
            continue
    return groups | ({-1} if sockets - seen else set())


def _start_elsewhere(state: dict, pids: dict[str, int], binary: str, logs: Path) -> dict[str, int]:
    """Our api-server lost its port to another process: stop the components (each carries the
    API's address), take a free port (saved and said) and start them again; their new pids."""
    _end_groups(pids.values(), 30)
    busy, state["port"] = state["port"], _free_port(0)
    _save_state(state)
    print(f"port {busy} was taken by another process as Airflow's API started; it serves on port "
          f"{state['port']}", flush=True)
    env = _full_env(state)
    pids = {name: _start_component(binary, name, env, logs) for name in COMPONENTS}
    _pids_path().write_text(json.dumps(pids))
    return pids


def _api_port(state: dict) -> int:
    """The port the api-server will serve on: the one set up, or a free one when it was taken
    since (another deployment's API would answer the health check while this api-server failed
    to bind: two deployments set up at once both chose 8080). A new port is saved and said."""
    if not _port_free(state["port"]):
        busy, state["port"] = state["port"], _free_port(0)
        _save_state(state)
        print(f"port {busy} is busy; Airflow's API serves on port {state['port']}", flush=True)
    return state["port"]


def _running_pids() -> dict[str, int]:
    path = _pids_path()
    if not path.exists():
        return {}
    return {name: pid for name, pid in json.loads(path.read_text()).items() if pid_alive(pid)}


def stop(timeout_s: float = 30) -> list[str]:
    """Terminate the components' process groups (then kill what is left), then PostgreSQL."""
    stopped = _stop_components(timeout_s)
    if pg.stop(postgres_dir()):
        stopped.append("postgres")
    return stopped


def _end_groups(groups, timeout_s: float) -> None:
    """Terminate the process groups ``groups`` (each a component's pid), wait up to
    ``timeout_s`` for them to end, then kill what is left."""
    groups = list(groups)
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(pid_alive(group) for group in groups) and time.monotonic() < deadline:
        time.sleep(0.5)
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


def _stop_components(timeout_s: float) -> list[str]:
    pids = _running_pids()
    _end_groups(pids.values(), timeout_s)
    _pids_path().unlink(missing_ok=True)
    from topic_lineage.local import spark_server  # long-lived Spark for queries (issue #16)

    if spark_server.stop():
        pids["spark-connect"] = 0
    return sorted(pids)


def banner(state: dict) -> str:
    port = state["port"]
    if state.get("auth", True):
        login = (f"  Sign in:   user {ADMIN_USER}, password {admin_password()}\n"
                 f"             (kept in {passwords_path()}, readable by you only)\n")
    else:
        login = "  Sign in:   not needed (set up with --no-auth: every local process is admin)\n"
    return f"""Airflow is running (home {airflow_home()}, PostgreSQL on 127.0.0.1:{state['postgres_port']}).
  UI:        http://127.0.0.1:{port}/  -> "Topic lineage" in the navigation
{login}  DAGs:      {at.SNAPSHOT_DAG_ID} (every snapshot interval, one task per cluster)
             {at.INCARNATIONS_DAG_ID} (on every snapshot, daily, or by hand: build -> validate -> publish)
  Run now:   UI > {at.INCARNATIONS_DAG_ID} > Trigger, or
             eval "$(topic-lineage airflow env)"; airflow dags trigger {at.SNAPSHOT_DAG_ID}
  Backfill:  UI > {at.INCARNATIONS_DAG_ID} > Trigger > Backfill (pick a date range), or
             eval "$(topic-lineage airflow env)"; airflow backfill create --dag-id {at.INCARNATIONS_DAG_ID} \\
                 --from-date 2026-11-01 --to-date 2026-11-07
  Results:   topic-lineage query "SELECT * FROM topic_incarnations"
  Logs:      {airflow_home() / 'logs'}
  Stop:      topic-lineage airflow stop"""
