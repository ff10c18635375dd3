"""A recording HTTP proxy on loopback that can rewrite a request before passing it on: the tests
use it to make an emulator answer listings in pages of a set size (what the real store does by
itself), so that a client's following of continuation tokens is exercised with a thousand
objects, not tens of thousands.

fake-gcs-server answers a listing without ``maxResults`` with every object at once (GCS: at most
1,000 a page); Azurite pages at 5,000, as Azure does. pyarrow's clients send no page size, so
neither emulator alone makes pyarrow fetch a second page of 1,005 keys.

:func:`gcs_pages` adds ``maxResults``; :func:`azure_pages` adds ``maxresults`` and signs the
request again (the Shared Key signature covers the query). Only what a listing needs is passed
through: a request with a body (an upload) is refused with 501.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import parse_qsl, urlencode, urlsplit

from tests.servers.emulator_process import HOST

Rewrite = Callable[[str, str, dict[str, str]], tuple[str, dict[str, str]]]
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}


class PagingProxy:
    """Passes GET and HEAD requests to ``upstream`` (``host:port``) after ``rewrite(method,
    target, headers)``; :attr:`requests` records each ``(method, target)`` as passed on."""

    def __init__(self, upstream: str, rewrite: Rewrite):
        self.upstream, self.rewrite = upstream, rewrite
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _pass(self) -> None:
                if int(self.headers.get("Content-Length") or 0) or self.headers.get(
                        "Transfer-Encoding"):
                    self.send_error(501, "the paging proxy passes no request bodies")
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                target, headers = proxy.rewrite(self.command, self.path, headers)
                proxy.requests.append((self.command, target))
                upstream = http.client.HTTPConnection(proxy.upstream, timeout=30)
                try:
                    upstream.request(self.command, target, headers=headers)
                    answer = upstream.getresponse()
                    body = answer.read()
                    self.send_response(answer.status, answer.reason)
                    for name, value in answer.getheaders():
                        if name.lower() not in _HOP:
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(body)
                finally:
                    upstream.close()

            do_GET = do_HEAD = _pass

            def do_PUT(self) -> None:
                self.send_error(501, "the paging proxy passes GET and HEAD only")

            do_POST = do_DELETE = do_PUT

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self.authority = f"{HOST}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def listings(self) -> list[str]:
        """The listing requests passed on (their targets)."""
        return [target for method, target in self.requests
                if method == "GET" and ("/o?" in target or "comp=list" in target)]


def _with_param(target: str, name: str, value: str) -> str:
    parts = urlsplit(target)
    params = parse_qsl(parts.query, keep_blank_values=True)
    if any(key.lower() == name.lower() for key, _ in params):
        return target
    return f"{parts.path}?{urlencode(params + [(name, value)])}"


def gcs_pages(size: int) -> Rewrite:
    """Listings of objects (``GET /storage/v1/b/<bucket>/o``) in pages of ``size``."""
    def rewrite(method: str, target: str, headers: dict[str, str]):
        path = urlsplit(target).path
        if method == "GET" and path.startswith("/storage/v1/b/") and path.endswith("/o"):
            target = _with_param(target, "maxResults", str(size))
        return target, headers
    return rewrite


def azure_pages(size: int, account: str, account_key: str) -> Rewrite:
    """Listings of blobs (``GET /<account>/<container>?restype=container&comp=list``) in pages
    of ``size``, signed again with the account key."""
    import base64

    from topic_lineage.storage.conditional_writes import shared_key_authorization

    secret = base64.b64decode(account_key)

    def rewrite(method: str, target: str, headers: dict[str, str]):
        query = dict(parse_qsl(urlsplit(target).query))
        if method == "GET" and query.get("comp") == "list" and query.get("restype") == "container":
            target = _with_param(target, "maxresults", str(size))
            signed = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            signed["Authorization"] = shared_key_authorization(
                account, secret, method, f"http://{HOST}{target}", signed)
            headers = signed
        return target, headers
    return rewrite
