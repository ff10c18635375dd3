"""One line instead of a psycopg2 traceback: the local deployment's database is not running.

``topic-lineage airflow setup`` writes ``$AIRFLOW_HOME/config/airflow_local_settings.py``
(:data:`LOCAL_SETTINGS`); Airflow puts ``$AIRFLOW_HOME/config`` on ``sys.path`` and imports that
module while ``import airflow`` initialises its settings, before any command opens the database.
For an ``airflow`` command (``airflow dags test ...`` after ``eval "$(topic-lineage airflow
env)"``) whose database is a PostgreSQL on this machine that nothing listens on, it exits with
:data:`MESSAGE`. Other processes (the components, task processes, ``topic-lineage`` itself) and
commands that need no database are left alone.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence
from urllib.parse import urlsplit

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
NO_DATABASE_COMMANDS = frozenset({"version", "config", "cheat-sheet", "info"})
"""``airflow`` commands that do not need the database."""

MESSAGE = (
    "topic-lineage: the local Airflow's database (PostgreSQL on {host}:{port}) is not running; "
    "run 'topic-lineage airflow start' first"
)

LOCAL_SETTINGS = '''"""Written by topic-lineage airflow setup: see topic_lineage/local/db_check.py."""

from topic_lineage.local.db_check import require_local_database

__all__ = []  # nothing for airflow.settings to take over

require_local_database()
'''


def database_address(url: str) -> tuple[str, int] | None:
    """``(host, port)`` of a PostgreSQL URL on this machine, else ``None``."""
    try:
        parts = urlsplit(url)
        port = parts.port or 5432
    except ValueError:
        return None
    if not parts.scheme.startswith("postgres") or (parts.hostname or "") not in LOCAL_HOSTS:
        return None
    return parts.hostname, port


def listening(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port`` (within ``timeout``)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _is_airflow_cli(argv: Sequence[str]) -> bool:
    if not argv or os.path.basename(argv[0]) != "airflow":
        return False
    command = next((a for a in argv[1:] if not a.startswith("-")), None)
    return command is not None and command not in NO_DATABASE_COMMANDS


def require_local_database(url: str | None = None, argv: Sequence[str] | None = None) -> None:
    """Exit with :data:`MESSAGE` when this is an ``airflow`` command and the local PostgreSQL of
    its database URL (default: Airflow's ``[database] sql_alchemy_conn``) does not listen."""
    argv = sys.argv if argv is None else argv
    if not _is_airflow_cli(argv):
        return
    if url is None:
        from airflow.configuration import conf

        url = conf.get("database", "sql_alchemy_conn", fallback="") or ""
    address = database_address(url)
    if address is None or listening(*address):
        return
    raise SystemExit(MESSAGE.format(host=address[0], port=address[1]))
