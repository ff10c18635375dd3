"""An ``airflow`` command against the local deployment whose PostgreSQL is stopped says, in one
line, to run ``topic-lineage airflow start`` first (no psycopg2 traceback)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
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
