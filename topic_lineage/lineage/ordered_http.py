"""The configured HTTP transport's settings, sent in order with an acknowledgement per event.

The client's ``http`` transport posts each event through ``requests`` (most of the client's
time per event, measured: docs/benchmarks.md); its ``async_http`` transport queues the event
and returns before any receiver answered, sends up to ``max_concurrent_requests`` at once in no
particular order, and after a failure only counts it and logs it (``get_stats()``), without
saying which event failed. Neither fits an emission that records what was delivered and keeps
each dataset's events in order (docs/lineage.md, *Once, in order*).

:class:`OrderedHttpTransport` takes the place of either, with its configuration: URL, endpoint,
timeout, ``verify`` (and the ``http`` transport's ``sslContext``), ``auth``, ``custom_headers``,
``compression`` and ``retry`` (``total``, ``backoff_factor``, ``status_forcelist``), read from
the client the standard configuration made; the request's headers and body come from the
transport's own ``_prepare_request``. ``emit`` returns when the receiver acknowledged the event
(a 2xx answer) and raises otherwise, naming the answer; one kept-alive HTTP/1.1 connection per
process carries the requests one after another, so the events a process sends arrive in the
order it sends them, each written in one ``sendall`` and its answer read without
``http.client`` (:class:`_Connection`), and serialized as ``Serde.to_json`` does in a quarter of
its time (:func:`to_json`). Where ``requests`` would apply the environment (a proxy variable, a netrc file, a CA
bundle variable for an ``https`` URL) or the transport was given a session or an adapter of its
own, :func:`with_ordered_http` leaves the client's transport as it is.
"""

from __future__ import annotations

import datetime
import enum
import http.client
import json
import logging
import os
import socket
import ssl
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import attr
from openlineage.client.transport.transport import Transport

log = logging.getLogger("topic_lineage.lineage")

KINDS = ("http", "async_http")
"""The client's transports whose settings this sends with."""
_PROXY_ENVIRONMENT = ("http_proxy", "https_proxy", "all_proxy")
_CA_ENVIRONMENT = ("requests_ca_bundle", "curl_ca_bundle")


class DeliveryError(RuntimeError):
    """The receiver did not acknowledge an event (after the configured retries)."""


_FIELDS: dict[type, tuple[str, ...]] = {}


def _plain(value: Any) -> Any:
    """``Serde.to_dict`` of the client (``attr.asdict``, then nulls and enums removed), in one
    pass: the same document in about a quarter of the time (tests/test_lineage_emit.py compares
    them on every kind of event)."""
    cls = value.__class__
    if cls is str or cls is int or cls is bool or cls is float or value is None:
        return value
    names = _FIELDS.get(cls)
    if names is None and attr.has(cls):
        names = _FIELDS[cls] = tuple(a.name for a in attr.fields(cls))
    if names is not None:
        out = {}
        for name in names:
            item = _plain(getattr(value, name))
            if item is not None:
                out[name] = item
        return out
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            item = _plain(item)
            if item is not None:
                out[_plain(key)] = item
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [item for item in (_plain(v) for v in value if v is not None)
                if item is not None and item != {}]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if cls.__name__ == "int64":
        return int(value)
    return value


def to_json(event) -> str:
    """``Serde.to_json(event)``, the same text (see :func:`_plain`)."""
    return json.dumps(_plain(event), sort_keys=True,
                      default=lambda o: f"<<non-serializable: {type(o).__qualname__}>>")


class ProtocolError(OSError):
    """The receiver's answer is not HTTP/1.x as this reads it."""


class _Connection:
    """One kept-alive HTTP/1.1 connection: a request written in one ``sendall`` with
    ``TCP_NODELAY`` (as ``urllib3`` sets it), the answer read back: status line, headers, a body
    of ``Content-Length``, chunked, or up to the close. ``http.client`` spends five times the CPU
    on the same exchange (its headers go through ``email.parser``)."""

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext | None):
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.exchanges = 0

    def exchange(self, request: bytes) -> tuple[int, str, bool]:
        """Send ``request``; the answer's status, reason, and whether the connection stays."""
        self.exchanges += 1
        self.sock.sendall(request)
        while True:
            version, status, reason = self._status_line()
            headers = self._headers()
            if status >= 200 or status == 101:
                break  # 100 Continue and other 1xx: the answer follows
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked()
        elif "content-length" in headers:
            self._exactly(int(headers["content-length"]))
        elif status not in (204, 304):
            self.reader.read()  # the body runs to the close
            keep = False
        return status, reason, keep

    def _line(self) -> bytes:
        line = self.reader.readline(65537)
        if not line:
            raise http.client.RemoteDisconnected("the receiver closed the connection without an answer")
        if len(line) > 65536:
            raise ProtocolError("an answer's line is longer than 64 KiB")
        return line

    def _status_line(self) -> tuple[str, int, str]:
        parts = self._line().decode("latin-1").rstrip("\r\n").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {' '.join(parts)[:80]!r}")
        return parts[0], int(parts[1]), parts[2] if len(parts) > 2 else ""

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for _ in range(200):
            line = self._line()
            if line in (b"\r\n", b"\n"):
                return headers
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        raise ProtocolError("an answer with more than 200 headers")

    def _exactly(self, size: int) -> None:
        if size and len(self.reader.read(size)) != size:
            raise ProtocolError(f"the answer ended before its {size} bytes")

    def _chunked(self) -> None:
        while True:
            size = int(self._line().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self._line() not in (b"\r\n", b"\n"):  # trailers
                    pass
                return
            self._exactly(size + 2)  # the chunk and its CRLF

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def _environment_applies(url: str) -> str | None:
    """What of the environment ``requests`` would apply to ``url`` (None: nothing)."""
    names = {k.lower() for k, v in os.environ.items() if v}
    if names & set(_PROXY_ENVIRONMENT):
        return "a proxy variable"
    if names & set(_CA_ENVIRONMENT) and url.startswith("https://"):
        return "a CA bundle variable"
    if (Path.home() / ".netrc").exists() or (Path.home() / "_netrc").exists():
        return "a netrc file"
    return None


def replacement(transport) -> OrderedHttpTransport | None:
    """An :class:`OrderedHttpTransport` with ``transport``'s settings, or None when it is not an
    ``http``/``async_http`` transport or needs what only ``requests`` does (see the module)."""
    kind = getattr(transport, "kind", None)
    config = getattr(transport, "config", None)
    if kind not in KINDS or config is None:
        return None
    url = str(config.url).strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or "@" in parts.netloc:  # credentials in the URL
        return None
    if getattr(config, "session", None) is not None or getattr(config, "adapter", None) is not None:
        return None
    if (why := _environment_applies(url)) is not None:
        log.debug("OpenLineage: %s applies to %s; the client's own %s transport sends", why, url, kind)
        return None
    return OrderedHttpTransport(transport)


def with_ordered_http(client, *, close_replaced: bool = True):
    """``client``, or a copy of it whose ``http`` or ``async_http`` transport (also inside a
    ``composite`` one) is an :class:`OrderedHttpTransport` with its settings. ``client`` itself
    is left as it is (the Airflow provider's client goes on serving the provider); with
    ``close_replaced``, a replaced ``async_http`` transport is closed (it sent nothing)."""
    import copy

    transport = getattr(client, "transport", None)
    replaced: list = []
    if getattr(transport, "kind", None) == "composite":
        children = []
        for child in transport.transports:
            ordered = replacement(child)
            children.append(ordered or child)
            if ordered is not None:
                replaced.append(child)
        if replaced:
            transport = copy.copy(transport)
            transport.__dict__["transports"] = children  # the copy's cached property
    elif (ordered := replacement(transport)) is not None:
        replaced.append(transport)
        transport = ordered
    if not replaced:
        return client
    if close_replaced:
        for old in replaced:
            if old.kind == "async_http":
                old.close(timeout=5)
    client = copy.copy(client)
    client.transport = transport
    return client


def unacknowledged(client) -> str | None:
    """The kind of a transport of ``client`` that returns before its receiver acknowledged an
    event (``async_http`` that could not be replaced), or None."""
    transport = getattr(client, "transport", None)
    transports = transport.transports if getattr(transport, "kind", None) == "composite" else [transport]
    for child in transports:
        if getattr(child, "kind", None) == "async_http" and not isinstance(child, OrderedHttpTransport):
            return "async_http"
    return None


class OrderedHttpTransport(Transport):
    """Sends each event as the configured ``http``/``async_http`` transport would, and returns
    only when the receiver acknowledged it (see the module)."""

    def __init__(self, replaced) -> None:
        config = replaced.config
        self.replaced = replaced
        self.kind = replaced.kind  # messages name the transport the user configured
        self.name = getattr(replaced, "name", None)
        self.priority = getattr(replaced, "priority", 0)
        self.url = str(config.url).strip()
        self.endpoint = config.endpoint
        self.target = urljoin(self.url, self.endpoint)
        self.timeout = float(config.timeout)
        retry: dict[str, Any] = dict(config.retry or {})
        self.retries = int(retry.get("total") or 0)
        self.backoff = float(retry.get("backoff_factor") or 0)
        self.retry_statuses = frozenset(retry.get("status_forcelist") or ())
        parts = urlsplit(self.target)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port or (443 if self._https else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._head = (f"POST {path} HTTP/1.1\r\nHost: {parts.netloc.rpartition('@')[2]}\r\n"
                      "Accept-Encoding: identity\r\n").encode("latin-1")
        self._ssl = self._ssl_context(replaced) if self._https else None
        self._connection: _Connection | None = None
        self._pid = os.getpid()

    def another(self) -> OrderedHttpTransport:
        """The same settings, a connection of its own (for another thread)."""
        return OrderedHttpTransport(self.replaced)

    @staticmethod
    def _ssl_context(replaced) -> ssl.SSLContext:
        """As ``requests`` verifies: the ``certifi`` bundle, or ``sslContext``'s CA file,
        or nothing with ``verify: false``; the client certificate of ``sslContext``."""
        import certifi

        verify = getattr(replaced, "verify", replaced.config.verify)
        if verify is False:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context(
                cafile=verify if isinstance(verify, str) else certifi.where())
        cert = getattr(replaced, "cert", None)
        if cert:
            certfile, keyfile = (cert, None) if isinstance(cert, str) else cert
            context.load_cert_chain(certfile, keyfile)
        return context

    def _connect(self) -> _Connection:
        if self._connection is None or self._pid != os.getpid():  # a forked worker: its own
            self._pid = os.getpid()
            self._connection = _Connection(self._host, self._port, self.timeout, self._ssl)
        return self._connection

    def _drop_connection(self) -> None:
        if self._connection is not None and self._pid == os.getpid():
            self._connection.close()
        self._connection = None

    def emit(self, event) -> None:
        body, headers = self.replaced._prepare_request(to_json(event))
        if isinstance(body, str):
            body = body.encode("utf-8")
        request = b"".join((self._head, *(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers.items()),
                            b"Content-Length: %d\r\n\r\n" % len(body), body))
        attempt = 0
        while True:
            try:
                status, reason = self._post(request)
            except OSError as exc:  # socket errors, timeouts, what the receiver closed or garbled
                self._drop_connection()
                failure = f"{type(exc).__name__}: {exc}"
                status = None
            else:
                if 200 <= status < 300:
                    return
                failure = f"answered HTTP {status} {reason}".rstrip()
                if 300 <= status < 400:
                    failure += " (a redirect: set the transport's url to where it points)"
            if attempt >= self.retries or (status is not None and status not in self.retry_statuses):
                tries = f" (after {attempt} retr{'y' if attempt == 1 else 'ies'})" if attempt else ""
                raise DeliveryError(f"{self.target} {failure}{tries}")
            attempt += 1
            if attempt > 1:  # as urllib3's Retry: the first retry at once, then backoff
                time.sleep(min(self.backoff * 2 ** (attempt - 1), 120))

    def _post(self, request: bytes) -> tuple[int, str]:
        connection = self._connect()
        reused = connection.exchanges > 0
        try:
            status, reason, keep = connection.exchange(request)
        except (ConnectionResetError, BrokenPipeError):  # http.client.RemoteDisconnected too
            if not reused:
                raise
            # the receiver closed the kept-alive connection while it was idle: a new one
            self._drop_connection()
            status, reason, keep = self._connect().exchange(request)
        if not keep:
            self._drop_connection()
        return status, reason

    def close(self, timeout: float = -1) -> bool:
        self._drop_connection()
        return True

    def __str__(self) -> str:
        return f"<OrderedHttpTransport {self.kind} {self.target}>"
