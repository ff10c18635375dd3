"""A fault-injecting reverse proxy in front of an S3 server, for the tests: throttling, slow
answers, and a count of the requests a client made.

:class:`S3FaultProxy` listens on a free port of 127.0.0.1 and forwards every request to the
server as the client sent it: the same method, target, headers (the ``Host`` header too, so the
SigV4 signature, which covers it, still verifies: the server checks it against the ``Host`` it
receives) and body bytes. Clients point at :attr:`S3FaultProxy.endpoint` instead of the server.
On demand it

- answers the next N requests (or the next N a predicate picks) itself with a real S3 error,
  by default ``503 SlowDown`` with S3's XML body (:meth:`S3FaultProxy.fail_next`): what a
  client's retry policy must absorb;
- delays the next N by some seconds, before or after the server handled them
  (:meth:`S3FaultProxy.delay_next`): a client timeout, and a timeout on a request that did
  take effect;
- counts every request by method and by S3 operation (:data:`OPERATIONS`), until
  :meth:`S3FaultProxy.reset_counts`.

    with S3Server() as server, S3FaultProxy(server.endpoint) as proxy:
        fs = pyarrow.fs.S3FileSystem(**server.pyarrow_options(proxy.endpoint))
        proxy.fail_next(2, operation="PUT")
        ...
        proxy.counts()  # {"PUT": 3, "HEAD": 1, ...}
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

# What :func:`operation` names a request. Object-level: GET (GetObject), HEAD (HeadObject), PUT
# (PutObject, UploadPart, CopyObject), DELETE (DeleteObject), POST (multipart create/complete, a
# DeleteObjects batch). LIST: a GET of a bucket with a listing query (list-type, prefix,
# delimiter, continuation-token, marker) or none. Bucket-level others: BUCKET_GET (location,
# versioning, ...), BUCKET_HEAD (HeadBucket), BUCKET_PUT (CreateBucket), BUCKET_DELETE,
# BUCKET_POST; SERVICE (a request on "/", ListBuckets).
OPERATIONS = ("GET", "HEAD", "PUT", "DELETE", "POST", "LIST", "BUCKET_GET", "BUCKET_HEAD",
              "BUCKET_PUT", "BUCKET_DELETE", "BUCKET_POST", "SERVICE")
_LISTING = ("list-type", "prefix", "delimiter", "continuation-token", "marker", "start-after",
            "max-keys", "encoding-type")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-connection"}


@dataclass(frozen=True)
class ProxiedRequest:
    """A request as the proxy saw it (path-style: ``/bucket/key``)."""

    method: str
    target: str  # path and query, as sent
    headers: tuple[tuple[str, str], ...]
    path: str = field(init=False)
    query: dict[str, list[str]] = field(init=False)
    operation: str = field(init=False)

    def __post_init__(self):
        parts = urlsplit(self.target)
        object.__setattr__(self, "path", parts.path)
        object.__setattr__(self, "query", parse_qs(parts.query, keep_blank_values=True))
        object.__setattr__(self, "operation", operation(self.method, parts.path, self.query))

    @property
    def bucket(self) -> str | None:
        return self.path.lstrip("/").split("/", 1)[0] or None

    @property
    def key(self) -> str | None:
        rest = self.path.lstrip("/").split("/", 1)
        return rest[1] if len(rest) == 2 and rest[1] else None

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


def operation(method: str, path: str, query: dict[str, list[str]]) -> str:
    """The S3 operation class of a path-style request (:data:`OPERATIONS`)."""
    method = method.upper()
    segments = path.lstrip("/").split("/", 1)
    if not segments[0]:
        return "SERVICE"
    if len(segments) == 2 and segments[1]:
        return method
    if method == "GET" and (not query or any(name in query for name in _LISTING)):
        return "LIST"
    return f"BUCKET_{method}"


Predicate = Callable[[ProxiedRequest], bool]


def _picker(match: Predicate | None, method: str | None, operation: str | None,
            key_contains: str | None) -> Predicate:
    def picks(request: ProxiedRequest) -> bool:
        return ((method is None or request.method == method.upper())
                and (operation is None or request.operation == operation)
                and (key_contains is None or key_contains in (request.key or ""))
                and (match is None or match(request)))
    return picks


@dataclass
class _Entry:
    request: ProxiedRequest
    status: int | None = None
    injected: str = ""


@dataclass
class _Fault:
    remaining: int
    picks: Predicate
    status: int = 503
    code: str = "SlowDown"
    message: str = "Please reduce your request rate."
    delay_s: float = 0.0
    after_upstream: bool = False


def error_body(code: str, message: str, resource: str, request_id: str) -> bytes:
    """S3's XML error document."""
    from xml.sax.saxutils import escape

    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{escape(code)}</Code>'
            f"<Message>{escape(message)}</Message><Resource>{escape(resource)}</Resource>"
            f"<RequestId>{request_id}</RequestId></Error>").encode()


class S3FaultProxy:
    """A threaded HTTP reverse proxy on ``127.0.0.1:<free port>`` in front of ``upstream``
    (``http://host:port``). A context manager; thread-safe."""

    def __init__(self, upstream: str, *, timeout_s: float = 120.0):
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"the S3 fault proxy forwards to http://host:port, not {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._requests: list[_Entry] = []  # in the order received
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the S3 fault proxy is not running")
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        if self._server is not None:
            return self
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy",
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # --- faults ------------------------------------------------------------------------------
    def fail_next(self, n: int = 1, *, status: int = 503, code: str = "SlowDown",
                  message: str = "Please reduce your request rate.", match: Predicate | None = None,
                  method: str | None = None, operation: str | None = None,
                  key_contains: str | None = None) -> None:
        """Answer the next ``n`` requests that ``match`` / ``method`` / ``operation`` /
        ``key_contains`` pick (all of them by default) with an S3 error, without forwarding them."""
        with self._lock:
            self._faults.append(_Fault(n, _picker(match, method, operation, key_contains),
                                       status=status, code=code, message=message))

    def delay_next(self, n: int = 1, seconds: float = 5.0, *, after_upstream: bool = False,
                   match: Predicate | None = None, method: str | None = None,
                   operation: str | None = None, key_contains: str | None = None) -> None:
        """Hold the next ``n`` picked requests ``seconds`` before forwarding them, or, with
        ``after_upstream``, after the server answered (it did the work; the answer comes late).
        Either way the request reaches the server, even when the client gave up meanwhile."""
        with self._lock:
            self._faults.append(_Fault(n, _picker(match, method, operation, key_contains),
                                       delay_s=seconds, after_upstream=after_upstream))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def pending_faults(self) -> int:
        """How many injections are still to come."""
        with self._lock:
            return sum(f.remaining for f in self._faults)

    def _take_fault(self, request: ProxiedRequest) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.picks(request):
                    fault.remaining -= 1
                    return fault
            self._faults = [f for f in self._faults if f.remaining > 0]
        return None

    # --- counts ------------------------------------------------------------------------------
    def _receive(self, request: ProxiedRequest) -> _Entry:
        entry = _Entry(request)
        with self._lock:
            self._requests.append(entry)
        return entry

    def counts(self) -> dict[str, int]:
        """Requests received since the last reset (answered or not yet), by S3 operation
        (:data:`OPERATIONS`)."""
        with self._lock:
            return dict(Counter(e.request.operation for e in self._requests))

    def counts_by_method(self) -> dict[str, int]:
        with self._lock:
            return dict(Counter(e.request.method for e in self._requests))

    def total(self) -> int:
        with self._lock:
            return len(self._requests)

    def requests(self) -> list[tuple[ProxiedRequest, int | None, str]]:
        """Every request since the last reset, in the order received: (request, the status
        answered or None while it is pending, "" or the fault injected: "error" / "delay")."""
        with self._lock:
            return [(e.request, e.status, e.injected) for e in self._requests]

    def reset_counts(self) -> None:
        with self._lock:
            self._requests.clear()

    def summary(self) -> str:
        """One line: the total and the counts by operation, e.g. for a benchmark's output."""
        counts = self.counts()
        parts = ", ".join(f"{op} {counts[op]}" for op in OPERATIONS if counts.get(op))
        return f"{self.total()} S3 requests ({parts or 'none'})"


class _Handler(BaseHTTPRequestHandler):
    """One client connection (HTTP/1.1 keep-alive), with its own connection to the server."""

    owner: S3FaultProxy
    protocol_version = "HTTP/1.1"
    _upstream: http.client.HTTPConnection | None = None

    def log_message(self, format, *args):
        log.debug("s3 fault proxy: " + format, *args)

    def _read_body(self) -> bytes:
        """The body exactly as sent: Content-Length bytes, or the raw chunked framing."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            raw = bytearray()
            while True:
                line = self.rfile.readline(65537)
                raw += line
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers up to the empty line
                        trailer = self.rfile.readline(65537)
                        raw += trailer
                        if trailer in (b"\r\n", b"\n", b""):
                            return bytes(raw)
                raw += self.rfile.read(size + 2)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self) -> None:
        request = ProxiedRequest(self.command, self.path, tuple(self.headers.items()))
        entry = self.owner._receive(request)
        body = self._read_body()
        fault = self.owner._take_fault(request)
        if fault is not None and fault.delay_s == 0:
            entry.status, entry.injected = fault.status, "error"
            self._answer_error(request, fault)
            return
        if fault is not None:
            entry.injected = "delay"
            if not fault.after_upstream:
                time.sleep(fault.delay_s)
        try:
            status, reason, headers, payload = self._forward(body)
        except (OSError, http.client.HTTPException) as exc:
            self._upstream = None
            entry.status = 502
            self._send(502, "Bad Gateway", [("Content-Type", "text/plain")],
                       f"S3 fault proxy: the server did not answer: {exc}".encode())
            return
        if fault is not None and fault.after_upstream:
            time.sleep(fault.delay_s)
        entry.status = status
        self._send(status, reason, headers, payload)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = _dispatch

    def _connection(self) -> http.client.HTTPConnection:
        if self._upstream is None:
            host, port = self.owner.upstream
            self._upstream = http.client.HTTPConnection(host, port, timeout=self.owner.timeout_s)
        return self._upstream

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        for attempt in (1, 2):  # a kept-alive upstream connection the server closed: once more
            connection = self._connection()
            try:
                connection.putrequest(self.command, self.path, skip_host=True,
                                      skip_accept_encoding=True)
                for name, value in self.headers.items():  # Host included, as the client sent it
                    if name.lower() in _HOP_BY_HOP and name.lower() != "transfer-encoding":
                        continue
                    connection.putheader(name, value)
                connection.endheaders(body or None)
                response = connection.getresponse()
                payload = response.read()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                connection.close()
                self._upstream = None
                if attempt == 2:
                    raise
                continue
            headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
            if response.will_close:
                connection.close()
                self._upstream = None
            return response.status, response.reason, headers, payload
        raise AssertionError("unreachable")

    def _answer_error(self, request: ProxiedRequest, fault: _Fault) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        body = error_body(fault.code, fault.message, request.path, request_id)
        headers = [("Content-Type", "application/xml"), ("x-amz-request-id", request_id)]
        if fault.status == 503:
            headers.append(("Retry-After", "0"))
        self._send(fault.status, http.client.responses.get(fault.status, "Error"), headers, body)

    def _send(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
        lines = [f"HTTP/1.1 {status} {reason}"]
        lines += [f"{name}: {value}" for name, value in headers if name.lower() != "content-length"]
        if self.command == "HEAD":  # a HEAD answer names the length of the body it leaves out
            length = next((v for k, v in headers if k.lower() == "content-length"), None)
            if length is not None:
                lines.append(f"Content-Length: {length}")
            body = b""
        else:
            lines.append(f"Content-Length: {len(body)}")
        if self.close_connection or (self.headers.get("Connection") or "").lower() == "close":
            lines.append("Connection: close")
            self.close_connection = True
        try:
            self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            self.wfile.flush()
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its timeout): nothing to say

    def finish(self):
        super().finish()
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None


__all__ = ["OPERATIONS", "ProxiedRequest", "S3FaultProxy", "error_body", "operation"]
