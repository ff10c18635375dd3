"""An ``airflow`` command against the local deployment whose PostgreSQL is stopped says, in one
line, to run ``topic-lineage airflow start`` first (no psycopg2 traceback)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topic_lineage.local import db_check

# an Airflow command against the local deployment (a deployment, not a rule): the whole suite
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
AIRFLOW = Path(sys.executable).parent / "airflow"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _url(port: int) -> str:
    return f"postgresql+psycopg2://airflow:secret@127.0.0.1:{port}/airflow"


def test_listening():
    assert not db_check.listening("127.0.0.1", _closed_port())
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert db_check.listening("127.0.0.1", server.getsockname()[1])


def test_require_local_database():
    port = _closed_port()
    cli = ["/venv/bin/airflow", "dags", "test", "kafka_topic_snapshot"]
    with pytest.raises(SystemExit) as exited:
        db_check.require_local_database(_url(port), cli)
    message = str(exited.value.code)
    assert message == (
        f"topic-lineage: the local Airflow's database (PostgreSQL on 127.0.0.1:{port}) is not "
        "running; run 'topic-lineage airflow start' first"
    )
    assert "\n" not in message
    # not the airflow CLI, a command without the database, another database: nothing checked
    db_check.require_local_database(_url(port), ["/venv/bin/topic-lineage", "airflow", "start"])
    db_check.require_local_database(_url(port), ["/venv/bin/airflow", "version"])
    db_check.require_local_database(_url(port), ["/venv/bin/airflow", "config", "get-value"])
    db_check.require_local_database("sqlite:////tmp/airflow.db", cli)
    db_check.require_local_database(
        "postgresql+psycopg2://a:b@db.example.com:5432/airflow", cli
    )
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        db_check.require_local_database(_url(server.getsockname()[1]), cli)


def test_setup_writes_the_local_settings(tmp_path, monkeypatch):
    from topic_lineage.local import supervisor

    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(tmp_path / "home"))
    path = supervisor.write_local_settings()
    assert path == tmp_path / "home" / "airflow" / "config" / "airflow_local_settings.py"
    assert path.read_text() == db_check.LOCAL_SETTINGS


@pytest.mark.airflow
def test_airflow_cli_with_the_database_stopped_says_to_start_it(tmp_path, monkeypatch):
    """A real ``airflow`` command with the deployment's local settings and its database URL
    pointing at a closed port: one line, exit status 1, no traceback."""
    from topic_lineage.local import supervisor

    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(tmp_path / "home"))
    supervisor.write_local_settings()
    port = _closed_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "AIRFLOW_HOME": str(supervisor.airflow_home()),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _url(port),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "TOPIC_LINEAGE_HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [str(AIRFLOW), "dags", "test", "kafka_topic_snapshot"], env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    assert "psycopg2" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1] == (
        f"topic-lineage: the local Airflow's database (PostgreSQL on 127.0.0.1:{port}) is not "
        "running; run 'topic-lineage airflow start' first"
    ), done.stderr[-3000:]
    # the same command works as before once something listens there (no early exit)
    version = subprocess.run(
        [str(AIRFLOW), "version"], env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert version.returncode == 0, version.stderr[-3000:]


def test_start_serves_on_a_free_port_when_the_set_up_one_was_taken_since(tmp_path, monkeypatch, capsys):
    """Two deployments set up at once both chose 8080: the second to start must not take the
    first's API for its own (its health check would pass) but serve on a free port, saved."""
    from topic_lineage.local import supervisor

    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(tmp_path / "home"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        state = {"port": port, "postgres_port": 5432, "postgres_password": "p", "fernet_key": "k"}
        supervisor._save_state(state)
        moved = supervisor._api_port(state)
        assert moved != port and supervisor.load_state()["port"] == moved
        assert f"port {port} is busy; Airflow's API serves on port {moved}" in capsys.readouterr().out
    assert supervisor._api_port(state) == moved  # free: kept


LISTENER = ("import socket, sys, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
            "print(s.getsockname()[1], flush=True); time.sleep(120)\n")
HEALTH = ("import http.server, os, sys\n"
          "port = int(os.environ['AIRFLOW__API__BASE_URL'].rsplit(':', 1)[1]) if len(sys.argv) < 2 else int(sys.argv[1])\n"
          "class Ok(http.server.BaseHTTPRequestHandler):\n"
          "    def do_GET(self):\n"
          "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
          "    def log_message(self, *args): pass\n"
          "http.server.HTTPServer(('127.0.0.1', port), Ok).serve_forever()\n")


def test_the_api_port_answers_for_a_deployment_only_when_its_own_group_listens():
    """What listens on a port, by process group (/proc): a listener in a process group of its
    own is that group's, not this process's; a port no one listens on has no group."""
    from topic_lineage.local import supervisor

    proc = subprocess.Popen([sys.executable, "-c", LISTENER, "0"], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        port = int(proc.stdout.readline())
        assert supervisor.listening_groups(port) == {proc.pid}
        assert supervisor._answers_for(port, proc.pid)
        assert not supervisor._answers_for(port, os.getpgid(0))
    finally:
        proc.kill()
        proc.wait()
    assert supervisor.listening_groups(port) == set()


def test_start_moves_every_component_when_another_api_took_the_port_after_the_check(tmp_path, monkeypatch, capsys):
    """Two deployments started at once both found 8080 free (``_api_port``), and the other's
    API bound it first: its health check answers ours too. ``start`` sees that the listener is
    not its api-server's, stops the components, serves on a free port (saved and said) and
    starts them again with it: its health check then answers from its own group. (The
    components here are stand-ins: an API that answers 200 on its configured port, and idle
    processes; the port check is skipped as when both checks ran before either bound.)"""
    from topic_lineage.local import supervisor

    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(tmp_path / "home"))
    other = subprocess.Popen([sys.executable, "-c", HEALTH, "0"], start_new_session=True)
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            taken = probe.getsockname()[1]
        other.kill()
        other.wait()
        other = subprocess.Popen([sys.executable, "-c", HEALTH, str(taken)], start_new_session=True)
        state = {"port": taken, "postgres_port": 5432, "postgres_password": "p", "fernet_key": "k",
                 "jwt_secret": "j", "secret_key": "s"}
        supervisor._save_state(state)
        started = []

        def component(binary, name, env, logs):
            code = HEALTH if name == "api-server" else "import time; time.sleep(120)"
            started.append((name, env["AIRFLOW__API__BASE_URL"]))
            return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True).pid

        monkeypatch.setattr(supervisor, "_start_component", component)
        monkeypatch.setattr(supervisor, "_api_port", lambda state: state["port"])  # the race
        monkeypatch.setattr(supervisor, "_start_database", lambda state: False)
        deadline = time.monotonic() + 10
        while supervisor.listening_groups(taken) != {other.pid}:
            assert time.monotonic() < deadline, "the other API did not start"
            time.sleep(0.05)
        pids = supervisor.start(state, wait_s=60)
        try:
            moved = supervisor.load_state()["port"]
            assert moved != taken and state["port"] == moved
            assert f"port {taken} was taken by another process as Airflow's API started; it serves on port {moved}" \
                in capsys.readouterr().out
            assert supervisor.listening_groups(moved) == {pids["api-server"]}
            assert [name for name, _ in started] == [*supervisor.COMPONENTS, *supervisor.COMPONENTS]
            assert {url for _, url in started[len(supervisor.COMPONENTS):]} == {f"http://127.0.0.1:{moved}"}
        finally:
            for pid in pids.values():
                os.killpg(pid, 9)
    finally:
        other.kill()
        other.wait()
