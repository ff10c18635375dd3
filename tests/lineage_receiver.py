"""A real OpenLineage HTTP receiver on loopback: the endpoint the HTTP transport posts to
(``/api/v1/lineage``), collecting every event it accepts, as Marquez's API would.

``status`` makes it answer with an error (a receiver that is up but failing); ``fail_after``
accepts that many events first. Any other path answers 404. ``headers`` holds each accepted
request's headers; a body with ``Content-Encoding: gzip`` is decompressed, as Marquez does.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

ENDPOINT = "/api/v1/lineage"


class Receiver:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.status = 201
        self.fail_after: int | None = None
        self.refused = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != ENDPOINT:
                    return self._answer(404)
                with receiver._lock:
                    accept = receiver.status < 300 and (
                        receiver.fail_after is None or len(receiver.events) < receiver.fail_after)
                    if accept:
                        receiver.events.append(json.loads(body))
                        receiver.headers.append(dict(self.headers.items()))
                    else:
                        receiver.refused += 1
                self._answer(receiver.status if receiver.status >= 300 or accept else 500)

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def by_kind(events: list[dict]) -> list[tuple[str, str, str]]:
    """``(lifecycle change or READ, dataset name, topic ID)`` of each event, in arrival order."""
    found = []
    for event in events:
        for dataset in event.get("outputs", []) + event.get("inputs", []):
            facets = dataset["facets"]
            kind = facets.get("lifecycleStateChange", {}).get("lifecycleStateChange", "READ")
            found.append((kind, dataset["name"], facets["topicLineage_incarnation"].get("topicId")))
    return found


@contextlib.contextmanager
def openlineage_environment(**settings: str) -> Iterator[None]:
    """Only ``settings`` of OpenLineage's configuration in the environment, for the block; the
    client's own additions (it aliases OPENLINEAGE_URL into OPENLINEAGE__TRANSPORT__*) undone."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE")}
    for key in saved:
        del os.environ[key]
    os.environ.update(settings)
    try:
        yield
    finally:
        for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
            del os.environ[key]
        os.environ.update(saved)
