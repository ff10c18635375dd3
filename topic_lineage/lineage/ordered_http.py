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
(a 2xx answer) and raises otherwise, naming the answer; one kept-alive connection per process
carries the requests one after another, so the events a process sends arrive in the order it
sends them. Where ``requests`` would apply the environment (a proxy variable, a netrc file, a CA
bundle variable for an ``https`` URL) or the transport was given a session or an adapter of its
own, :func:`with_ordered_http` leaves the client's transport as it is.
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
import ssl
import time
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from openlineage.client.serde import Serde
from openlineage.client.transport.transport import Transport

log = logging.getLogger("topic_lineage.lineage")

KINDS = ("http", "async_http")
"""The client's transports whose settings this sends with."""
_PROXY_ENVIRONMENT = ("http_proxy", "https_proxy", "all_proxy")
_CA_ENVIRONMENT = ("requests_ca_bundle", "curl_ca_bundle")


class DeliveryError(RuntimeError):
    """The receiver did not acknowledge an event (after the configured retries)."""


class _Sending:
    """What ``urllib3`` does for ``requests`` and ``http.client`` does not: ``TCP_NODELAY``, and
    the request line, headers and body in one ``send`` (in two, the body waits for the
    acknowledgement of the headers: Nagle's algorithm against delayed ACKs)."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send_output(self, message_body=None, encode_chunked=False):
        if isinstance(message_body, bytes):
            self._buffer.extend((b"", message_body))
            message = b"\r\n".join(self._buffer)
            del self._buffer[:]
            self.send(message)
            return None
        return super()._send_output(message_body, encode_chunked)


class _HTTPConnection(_Sending, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_Sending, http.client.HTTPSConnection):
    pass


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
    if urlsplit(url).scheme not in ("http", "https"):
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
        if getattr(child, "kind", None) == "async_http":
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
        self._host, self._port = parts.hostname, parts.port
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._ssl = self._ssl_context(replaced) if self._https else None
        self._connection: http.client.HTTPConnection | None = None
        self._pid = os.getpid()

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

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None or self._pid != os.getpid():  # a forked worker: its own
            self._pid = os.getpid()
            if self._https:
                self._connection = _HTTPSConnection(
                    self._host, self._port, timeout=self.timeout, context=self._ssl)
            else:
                self._connection = _HTTPConnection(
                    self._host, self._port, timeout=self.timeout)
        return self._connection

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None

    def emit(self, event) -> None:
        body, headers = self.replaced._prepare_request(Serde.to_json(event))
        if isinstance(body, str):
            body = body.encode("utf-8")
        attempt = 0
        while True:
            try:
                status, reason = self._post(body, headers)
            except (OSError, http.client.HTTPException) as exc:
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

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        connection = self._connect()
        reused = connection.sock is not None
        try:
            connection.request("POST", self._path, body, headers)
            response = connection.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if not reused:
                raise
            # the receiver closed the kept-alive connection while it was idle: a new one
            self._drop_connection()
            connection = self._connect()
            connection.request("POST", self._path, body, headers)
            response = connection.getresponse()
        response.read()
        if response.will_close:
            self._drop_connection()
        return response.status, response.reason

    def close(self, timeout: float = -1) -> bool:
        self._drop_connection()
        return True

    def __str__(self) -> str:
        return f"<OrderedHttpTransport {self.kind} {self.target}>"
