"""Create an object only if no object has its name, on GCS and Azure Blob Storage: of two
writers of one name exactly one wins, whatever their timing.

pyarrow's file systems have no such call (S3's is botocore's ``put_object(...,
IfNoneMatch="*")``, in :mod:`topic_lineage.storage.object_store`), so these functions make the one request
each store's own precondition needs, over plain HTTP with the standard library:

- **GCS**: a JSON API upload with ``ifGenerationMatch=0`` ("only if there is no live version");
  the store answers 412 when the object exists. :func:`create_gcs`.
- **Azure Blob Storage** (ADLS Gen2 accounts too: the Blob endpoint serves their files):
  ``Put Blob`` with ``If-None-Match: *``; the store answers 409 ``BlobAlreadyExists`` (or 412
  ``ConditionNotMet``) when the blob exists. Signed with Shared Key (the account key) or a
  bearer token. :func:`create_azure`.

Each returns True when it created the object, False when one was already there, and raises
:class:`ConditionalWriteError` (one line: what failed and what to check) otherwise.

Azure's delete goes the same way (:func:`delete_azure`, one ``Delete Blob`` without a lease):
pyarrow's leased delete can wait seconds for a lease on the blob it just deleted.

**Retries without a false answer.** A request that fails in a way worth another try (no
connection, a timeout, 429, a 5xx) is sent again, up to :data:`ATTEMPTS` times with backoff. One
whose outcome is unknown (the store may have created the object before the answer was lost) would
make a naive retry see "already there" and report a loss that was a win; so every create carries
a random token in the object's metadata (``topic_lineage_writer``), and when a retry is refused
after such an attempt, the existing object's token says whose it is.

Both take an ``endpoint`` for an emulator or a private endpoint: GCS's
``http://127.0.0.1:PORT`` (fake-gcs-server; ``$STORAGE_EMULATOR_HOST`` when not given, as
Google's client libraries do), Azure's blob service URL with the account in its path for the
emulator, ``http://127.0.0.1:PORT/devstoreaccount1`` (Azurite), as a connection string's
``BlobEndpoint``. Tested against both emulators on loopback: ``tests/test_emulators.py``.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import http.client
import json
import os
import random
import time
import uuid
from collections.abc import Callable, Mapping
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from topic_lineage.location import LocationError

ATTEMPTS = 6
"""Requests sent at most for one create (the first and the retries of a transient failure)."""
TIMEOUT_S = 60.0
"""Seconds a request may go without an answer before it is retried."""
WRITER_KEY = "topic_lineage_writer"
"""The metadata key carrying each create's random token (a valid Azure metadata name: a C#
identifier)."""
AZURE_VERSION = "2021-12-02"
"""The Blob service REST version the requests ask for (``x-ms-version``)."""
GCS_ENDPOINT = "https://storage.googleapis.com"
GCS_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
AZURE_KEY_ENV = "AZURE_STORAGE_ACCOUNT_KEY"

TokenProvider = Callable[[], str]
"""A callable returning a current OAuth 2.0 access token (it refreshes it as it needs)."""


class ConditionalWriteError(LocationError):
    """A conditional create that neither created the object nor found one there (or an Azure
    delete that neither deleted the blob nor found it gone)."""


class _Transient(Exception):
    """A failure worth another try; ``sent`` when the store may have acted on the request."""

    def __init__(self, text: str, *, sent: bool):
        super().__init__(text)
        self.sent = sent


# --- GCS ------------------------------------------------------------------------------------


def create_gcs(bucket: str, key: str, data: bytes, *, endpoint: str | None = None,
               token_provider: TokenProvider | None = None,
               timeout_s: float = TIMEOUT_S) -> bool:
    """Create ``gs://bucket/key`` holding ``data`` only if no object has that name: True when
    this call created it, False when one was there (``ifGenerationMatch=0``, 412).

    ``token_provider`` returns an OAuth 2.0 access token for each request (e.g. from
    google-auth's Application Default Credentials); None sends none (an emulator). ``endpoint``:
    :data:`GCS_ENDPOINT` unless given or ``$STORAGE_EMULATOR_HOST`` is set.
    """
    base = (endpoint or _emulator_host() or GCS_ENDPOINT).rstrip("/")
    where = f"gs://{bucket}/{key}"
    token = uuid.uuid4().hex
    boundary = "topic-lineage-" + uuid.uuid4().hex
    metadata = json.dumps({"name": key, "metadata": {WRITER_KEY: token}}).encode()
    body = b"".join([
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
        metadata,
        f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
        bytes(data),
        f"\r\n--{boundary}--\r\n".encode(),
    ])
    query = urlencode({"uploadType": "multipart", "ifGenerationMatch": "0"})
    url = f"{base}/upload/storage/v1/b/{quote(bucket, safe='')}/o?{query}"

    def headers() -> dict[str, str]:
        out = {"Content-Type": f"multipart/related; boundary={boundary}"}
        if token_provider is not None:
            out["Authorization"] = f"Bearer {token_provider()}"
        return out

    def owner() -> str | None:
        meta_url = (f"{base}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(key, safe='')}"
                    f"?fields=metadata")
        status, _, answer = _send("GET", meta_url, headers(), b"", timeout_s, where)
        if status != 200:
            return None
        return (json.loads(answer or b"{}").get("metadata") or {}).get(WRITER_KEY)

    def attempt() -> bool:
        status, _, answer = _send("POST", url, headers(), body, timeout_s, where)
        if status == 200:
            return True
        if status == 412:
            return False
        _raise_for(status, answer, where, "GCS", "the token provider's credentials")
        raise AssertionError("unreachable")

    return _with_retries(attempt, lambda: owner() == token, where)


def _emulator_host() -> str | None:
    host = os.environ.get(GCS_EMULATOR_ENV, "").strip()
    if not host:
        return None
    return host if "://" in host else f"http://{host}"


# --- Azure ----------------------------------------------------------------------------------


def create_azure(account: str, container: str, key: str, data: bytes, *,
                 endpoint: str | None = None, account_key: str | None = None,
                 token_provider: TokenProvider | None = None,
                 timeout_s: float = TIMEOUT_S) -> bool:
    """Create the blob ``key`` in ``container`` of storage account ``account`` holding ``data``
    only if no blob has that name: True when this call created it, False when one was there
    (``Put Blob`` with ``If-None-Match: *``: 409 ``BlobAlreadyExists`` or 412).

    Signed with Shared Key: ``account_key`` (base64, as the portal shows it), else
    ``$AZURE_STORAGE_ACCOUNT_KEY``; or, with neither, a bearer token from ``token_provider``
    (Microsoft Entra ID, scope ``https://storage.azure.com/.default``). ``endpoint``: the blob
    service's URL, ``https://<account>.blob.core.windows.net`` unless given.
    """
    blob = _AzureBlob(account, container, key, endpoint, account_key, token_provider, "creating")
    token = uuid.uuid4().hex
    body = bytes(data)

    def owner() -> str | None:
        status, answer_headers, _ = _send("HEAD", blob.url, blob.signed("HEAD", {}, b""), b"",
                                          timeout_s, blob.where)
        if status != 200:
            return None
        return answer_headers.get(f"x-ms-meta-{WRITER_KEY}")

    def attempt() -> bool:
        headers = blob.signed("PUT", {"x-ms-blob-type": "BlockBlob", "If-None-Match": "*",
                                      "Content-Type": "application/octet-stream",
                                      f"x-ms-meta-{WRITER_KEY}": token}, body)
        status, answer_headers, answer = _send("PUT", blob.url, headers, body, timeout_s, blob.where)
        if status == 201:
            return True
        code = answer_headers.get("x-ms-error-code", "")
        if status in (409, 412) and code in ("BlobAlreadyExists", "ConditionNotMet"):
            return False
        _raise_for(status, answer, blob.where, "Azure", "the account key or token", code=code)
        raise AssertionError("unreachable")

    return _with_retries(attempt, lambda: owner() == token, blob.where)


def delete_azure(account: str, container: str, key: str, *,
                 endpoint: str | None = None, account_key: str | None = None,
                 token_provider: TokenProvider | None = None,
                 timeout_s: float = TIMEOUT_S) -> bool:
    """Delete the blob ``key`` (``Delete Blob``, no lease): True when this call deleted it,
    False when no blob had that name. Credentials and ``endpoint`` as :func:`create_azure`.

    pyarrow's ``AzureFileSystem.delete_file`` on a flat-namespace account takes a lease on
    the blob, keeps its parent "directory" by writing a marker, deletes, then asks for a lease
    on the deleted blob; on Azurite that last request's answer sometimes came 7 s late
    (docs/object-storage.md, "Deletes on Azure"). One request does the same work here. A retried delete that finds nothing after an attempt that may have reached the
    store counts as this call's."""
    blob = _AzureBlob(account, container, key, endpoint, account_key, token_provider, "removing")

    def attempt() -> bool:
        status, answer_headers, answer = _send("DELETE", blob.url, blob.signed("DELETE", {}, b""),
                                               b"", timeout_s, blob.where)
        if status == 202:
            return True
        code = answer_headers.get("x-ms-error-code", "")
        if status == 404 and code == "BlobNotFound":
            return False
        _raise_for(status, answer, blob.where, "Azure", "the account key or token", code=code,
                   doing="removing")
        raise AssertionError("unreachable")

    return _with_retries(attempt, lambda: True, blob.where, doing="removing")


class _AzureBlob:
    """One blob's URL and its requests' signing (Shared Key, or a bearer token)."""

    def __init__(self, account: str, container: str, key: str, endpoint: str | None,
                 account_key: str | None, token_provider: TokenProvider | None, doing: str):
        base = (endpoint or f"https://{account}.blob.core.windows.net").rstrip("/")
        key_b64 = account_key or os.environ.get(AZURE_KEY_ENV) or None
        if key_b64 is None and token_provider is None:
            raise ConditionalWriteError(
                f"{doing} {key!r} in Azure container {container!r} of account {account!r}: no "
                f"credentials (give the account key, ${AZURE_KEY_ENV}, or a token provider)")
        self.account, self.token_provider = account, token_provider
        self.secret = base64.b64decode(key_b64) if key_b64 else None
        self.where = f"{base}/{container}/{key}"
        self.url = f"{base}/{quote(container, safe='')}/{quote(key, safe='/')}"

    def signed(self, method: str, extra: Mapping[str, str], payload: bytes) -> dict[str, str]:
        headers = {"x-ms-date": email.utils.formatdate(usegmt=True),
                   "x-ms-version": AZURE_VERSION, **extra}
        if method in ("PUT", "POST") or payload:
            headers["Content-Length"] = str(len(payload))
        if self.secret is not None:
            headers["Authorization"] = shared_key_authorization(
                self.account, self.secret, method, self.url, headers)
        else:
            headers["Authorization"] = f"Bearer {self.token_provider()}"  # type: ignore[misc]
        return headers


def shared_key_authorization(account: str, secret: bytes, method: str, url: str,
                             headers: Mapping[str, str]) -> str:
    """The ``Authorization`` header of a Blob service request signed with Shared Key
    (the string-to-sign of service version 2015-02-21 and later: an empty Content-Length for
    none or zero; the ``x-ms-`` headers sorted; the account, the URL's path and its query
    parameters sorted by name)."""
    lower = {name.lower(): " ".join(str(value).split()) for name, value in headers.items()}
    length = lower.get("content-length", "")
    standard = [method.upper(), lower.get("content-encoding", ""),
                lower.get("content-language", ""), "" if length == "0" else length,
                lower.get("content-md5", ""), lower.get("content-type", ""),
                lower.get("date", ""), lower.get("if-modified-since", ""),
                lower.get("if-match", ""), lower.get("if-none-match", ""),
                lower.get("if-unmodified-since", ""), lower.get("range", "")]
    canonical_headers = "".join(f"{name}:{lower[name]}\n"
                                for name in sorted(lower) if name.startswith("x-ms-"))
    parts = urlsplit(url)
    resource = f"/{account}{parts.path or '/'}"
    params: dict[str, list[str]] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        params.setdefault(name.lower(), []).append(value)
    for name in sorted(params):
        resource += f"\n{name}:{','.join(sorted(params[name]))}"
    to_sign = "\n".join(standard) + "\n" + canonical_headers + resource
    signature = base64.b64encode(hmac.new(secret, to_sign.encode(), hashlib.sha256).digest())
    return f"SharedKey {account}:{signature.decode()}"


# --- common ---------------------------------------------------------------------------------


def _send(method: str, url: str, headers: Mapping[str, str], body: bytes, timeout_s: float,
          where: str) -> tuple[int, dict[str, str], bytes]:
    """One request: its status, headers (lower-case names) and body. A failure worth another
    try raises :class:`_Transient`, saying whether the request may have reached the store."""
    parts = urlsplit(url)
    connection_class = (http.client.HTTPSConnection if parts.scheme == "https"
                        else http.client.HTTPConnection)
    connection = connection_class(parts.netloc, timeout=timeout_s)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    sent = False
    try:
        connection.connect()
        sent = True  # from here on, the store may act on the request
        connection.request(method, target, body=body or None, headers=dict(headers))
        response = connection.getresponse()
        answer = response.read()
        status = response.status
        answer_headers = {name.lower(): value for name, value in response.getheaders()}
    except (http.client.HTTPException, OSError) as exc:  # timeouts, resets, refusals
        raise _Transient(f"{method} {where}: {type(exc).__name__}: {exc}", sent=sent) from None
    finally:
        connection.close()
    if status == 429 or status >= 500:
        # A 5xx may come after the store acted (an internal error after the commit).
        raise _Transient(f"{method} {where}: HTTP {status} {answer[:200]!r}", sent=status >= 500)
    return status, answer_headers, answer


def _with_retries(attempt: Callable[[], bool], ours: Callable[[], bool], where: str, *,
                  doing: str = "creating") -> bool:
    """``attempt()`` until it answers, retrying transient failures with backoff (0.2 s
    doubling, at most 5 s, with jitter). When an earlier attempt may have created the object
    and a later one finds it there, ``ours()`` (the object carries this call's token) decides."""
    maybe_created = False
    last = ""
    for number in range(ATTEMPTS):
        if number:
            time.sleep(min(5.0, 0.2 * 2 ** (number - 1)) * random.uniform(0.5, 1.0))
        try:
            created = attempt()
        except _Transient as exc:
            maybe_created = maybe_created or exc.sent
            last = str(exc)
            continue
        if created or not maybe_created:
            return created
        for check in range(ATTEMPTS):
            try:
                return ours()
            except _Transient as exc:
                last = str(exc)
                time.sleep(min(5.0, 0.2 * 2 ** check) * random.uniform(0.5, 1.0))
        break
    raise ConditionalWriteError(
        f"{doing} {where}: the store did not answer after {ATTEMPTS} attempts ({last[:300]})")


def _raise_for(status: int, answer: bytes, where: str, store: str, credentials: str, *,
               code: str = "", doing: str = "creating") -> None:
    text = " ".join(answer.decode("utf-8", "replace").split())[:300]
    detail = f"HTTP {status}{f' {code}' if code else ''}: {text}" if text else f"HTTP {status} {code}"
    if status in (401, 403):
        raise ConditionalWriteError(f"{doing} {where}: {store} refused the credentials "
                                    f"(check {credentials}): {detail}")
    if status == 404:
        raise ConditionalWriteError(f"{doing} {where}: no such bucket or container "
                                    f"(create it first): {detail}")
    raise ConditionalWriteError(f"{doing} {where}: {detail}")
