"""Where topic-lineage keeps its data: a local directory, or a prefix on object storage.

``TOPIC_LINEAGE_HOME`` is a local path (the default, ``~/.topic-lineage``) or a URL:

    s3://bucket/prefix                                   Amazon S3 and S3-compatible servers
    gs://bucket/prefix                                   Google Cloud Storage
    abfs://container@account.dfs.core.windows.net/prefix Azure Blob Storage / ADLS Gen2

Every store goes through pyarrow's file systems (one seam: :class:`ObjectStore`), configured the
standard way for each: S3 from ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (an
S3-compatible server), profiles and instance roles; GCS from Application Default Credentials;
Azure from ``AZURE_STORAGE_ACCOUNT_KEY`` or its default credential chain. Never from a command
line: Airflow 3 stores command lines in its event log.

With a URL, the store is the truth and each process works in a local working copy of what it
reads and writes (:func:`work_dir`): immutable files under unique names, fetched once and
pushed whole (:mod:`topic_lineage.storage`). S3 is tested against a real S3 server; GCS and
Azure take the same code path through their pyarrow file systems.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from topic_lineage.errors import TopicLineageError

_log = logging.getLogger("topic_lineage.location")

HOME_ENV = "TOPIC_LINEAGE_HOME"
DEFAULT_HOME = Path("~/.topic-lineage")
WORK_DIR_ENV = "TOPIC_LINEAGE_WORK_DIR"
"""Where a process keeps its working copy of an object-store home (default: under
``$XDG_CACHE_HOME`` or ``~/.cache``, one directory per home URL)."""

SCHEMES = {"s3": "S3", "s3a": "S3", "gs": "GCS", "gcs": "GCS", "abfs": "Azure", "abfss": "Azure"}
"""URL schemes of the stores topic-lineage keeps data on (both spellings each engine uses)."""

_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):(?P<rest>.*)$")
_AZURE_HOST = re.compile(r"^(?P<container>[^@/]+)@(?P<account>[^./]+)\.(?:dfs|blob)\.core\.windows\.net$")

# An S3 request that fails is retried (throttling, 5xx, timeouts) this many times in all, with
# the SDK's exponential backoff; a request that hangs gives up after REQUEST_TIMEOUT_S.
S3_ATTEMPTS = 8
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 60.0
TIMEOUT_ENV = "TOPIC_LINEAGE_OBJECT_STORE_TIMEOUT"
"""Seconds a request to the object store may go without an answer before it is retried
(default :data:`REQUEST_TIMEOUT_S`)."""


def request_timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    try:
        value = float(text) if text else REQUEST_TIMEOUT_S
    except ValueError:
        value = -1.0
    if value <= 0:
        raise LocationError(f"${TIMEOUT_ENV}={text!r}: give the seconds a request may take (e.g. 60)")
    return value


class LocationError(TopicLineageError):
    """A location topic-lineage cannot use (unknown scheme, no bucket, refused credentials)."""


@dataclass(frozen=True)
class ObjectStore:
    """A prefix on object storage: ``url`` (normalised, no trailing slash), the scheme's store,
    the bucket (or container) and the prefix inside it."""

    url: str
    scheme: str
    bucket: str
    prefix: str
    account: str = ""  # Azure: the storage account

    @property
    def kind(self) -> str:
        return SCHEMES[self.scheme]

    def url_of(self, relative: str) -> str:
        """The URL of ``relative`` (a path under the home, ``/``-separated)."""
        return f"{self.url}/{relative}" if relative else self.url

    def key(self, relative: str = "") -> str:
        """``relative``'s path in :meth:`filesystem` (``bucket/prefix/relative``)."""
        parts = [self.bucket, self.prefix, relative.strip("/")]
        return "/".join(part for part in parts if part)

    def relative(self, url_or_key: str) -> str:
        """The path under the home of a URL or key of this store (the inverse of :meth:`key`)."""
        text = url_or_key
        for head in (self.url + "/", self.key() + "/"):
            if text.startswith(head):
                return text[len(head):]
        raise LocationError(f"{url_or_key} is not under {self.url}")

    def filesystem(self):
        """The pyarrow file system of this store (one per process and store)."""
        return _filesystem(self.scheme, self.account)


def is_url(text: str) -> bool:
    """Whether ``text`` names a location by a URL scheme (``file:`` included), not a path."""
    match = _URL.match(text)
    return bool(match) and len(match["scheme"]) > 1  # "C:..." is a drive, not a scheme


def parse(text: str, *, setting: str = HOME_ENV) -> ObjectStore | Path:
    """The location ``text`` names: an :class:`ObjectStore`, or a local directory (a path or a
    ``file://`` URL). Anything else is one :class:`LocationError` naming ``setting``."""
    text = text.strip()
    if not is_url(text):
        return Path(text).expanduser().resolve()
    match = _URL.match(text)
    scheme, rest = match["scheme"].lower(), match["rest"]
    if scheme == "file":
        return Path(rest.removeprefix("//") or "/").expanduser().resolve()
    usable = ", ".join(f"{s}://" for s in ("s3", "gs", "abfs"))
    if scheme not in SCHEMES:
        raise LocationError(
            f"${setting}={text}: topic-lineage keeps its data on a local path or at {usable} "
            f"URLs (S3, Google Cloud Storage, Azure); {scheme}:// is none of them")
    if not rest.startswith("//"):
        raise LocationError(f"${setting}={text}: write the URL as {scheme}://bucket/prefix")
    host, _, prefix = rest[2:].partition("/")
    prefix = "/".join(part for part in prefix.split("/") if part)
    if not host:
        raise LocationError(f"${setting}={text}: the URL names no bucket ({scheme}://bucket/prefix)")
    if any(part in (".", "..") for part in prefix.split("/")):
        raise LocationError(f"${setting}={text}: a prefix may not contain '.' or '..'")
    if SCHEMES[scheme] == "Azure":
        azure = _AZURE_HOST.match(host)
        if not azure:
            raise LocationError(
                f"${setting}={text}: write an Azure location as "
                f"{scheme}://container@account.dfs.core.windows.net/prefix")
        bucket, account = azure["container"], azure["account"]
        url = f"{scheme}://{host}" + (f"/{prefix}" if prefix else "")
        return ObjectStore(url, scheme, bucket, prefix, account)
    if not re.fullmatch(r"[a-z0-9][a-z0-9.\-_]{1,62}", host):
        raise LocationError(f"${setting}={text}: {host!r} is not a bucket name (lower-case letters, "
                            "digits, '.', '-')")
    return ObjectStore(f"{scheme}://{host}" + (f"/{prefix}" if prefix else ""), scheme, host, prefix)


def work_dir(store: ObjectStore) -> Path:
    """This process's working copy of ``store``: ``$TOPIC_LINEAGE_WORK_DIR``, or a directory
    named after the URL under the user's cache directory. Only a cache: anything in it can be
    fetched again, and nothing another process needs is kept only there."""
    configured = os.environ.get(WORK_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    readable = re.sub(r"[^A-Za-z0-9.-]+", "-", store.url.split("://", 1)[1])[:60]
    digest = hashlib.sha256(store.url.encode()).hexdigest()[:12]
    return (cache / "topic-lineage" / f"{readable}-{digest}").resolve()


ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # the SDKs' order: the S3 one first
REGION_ENVS = ("AWS_REGION", "AWS_DEFAULT_REGION")


def endpoint(environ=None) -> str | None:
    """The S3 endpoint ``environ`` (default: this process's environment) names
    (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``: an S3-compatible server), None for AWS
    itself. Every engine's S3 settings (pyarrow, botocore, Spark's S3A, pyiceberg's FileIO)
    start here and at :func:`region`."""
    env = os.environ if environ is None else environ
    return next((env[name].strip() for name in ENDPOINT_ENVS if (env.get(name) or "").strip()), None)


def region(environ=None) -> str | None:
    """The AWS region ``environ`` names (``AWS_REGION``, ``AWS_DEFAULT_REGION``)."""
    env = os.environ if environ is None else environ
    return next((env[name].strip() for name in REGION_ENVS if (env.get(name) or "").strip()), None)


def pyiceberg_io(environ=None) -> dict[str, str]:
    """pyiceberg's FileIO properties for the environment's S3 endpoint and region, which its
    own S3 file IO does not read."""
    found = {}
    if endpoint(environ):
        found.update({"s3.endpoint": endpoint(environ), "s3.force-virtual-addressing": "false"})
    if region(environ):
        found["s3.region"] = region(environ)
    return found


GCS_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
"""Google's client libraries' variable naming a GCS emulator (``host:port`` or a URL): requests
go there over plain HTTP, without credentials."""
AZURE_KEY_ENV = "AZURE_STORAGE_ACCOUNT_KEY"
AZURE_CONNECTION_ENV = "AZURE_STORAGE_CONNECTION_STRING"
"""The Azure SDKs' connection string; its ``BlobEndpoint`` (an emulator's or a private
endpoint's URL) and ``AccountKey`` are honoured."""


def gcs_emulator(environ=None) -> str | None:
    """The GCS emulator's URL ``$STORAGE_EMULATOR_HOST`` names (None: Google Cloud Storage)."""
    text = ((os.environ if environ is None else environ).get(GCS_EMULATOR_ENV) or "").strip()
    if not text:
        return None
    return text.rstrip("/") if "://" in text else f"http://{text}"


def _azure_connection(environ=None) -> dict[str, str]:
    text = (os.environ if environ is None else environ).get(AZURE_CONNECTION_ENV) or ""
    return {k.strip(): v.strip() for k, _, v in (part.partition("=") for part in text.split(";")) if k.strip()}


def azure_endpoint(environ=None) -> str | None:
    """The blob service URL the connection string names (``BlobEndpoint``; None: Azure's own
    ``https://<account>.blob.core.windows.net``)."""
    return _azure_connection(environ).get("BlobEndpoint", "").rstrip("/") or None


def azure_key(environ=None) -> str | None:
    """The storage account key (``$AZURE_STORAGE_ACCOUNT_KEY``, else the connection string's
    ``AccountKey``); None: the default credential chain."""
    env = os.environ if environ is None else environ
    return (env.get(AZURE_KEY_ENV) or "").strip() or _azure_connection(environ).get("AccountKey") or None


def _filesystem(scheme: str, account: str):
    kind = SCHEMES[scheme]
    if kind == "GCS":
        settings = (gcs_emulator(),)
    elif kind == "Azure":
        settings = (azure_endpoint(), azure_key())
    else:
        settings = (endpoint(), region())
    return _filesystem_with(scheme, account, settings, request_timeout())


@cache
def _filesystem_with(scheme: str, account: str, settings: tuple, timeout_s: float):
    """One file system per store and settings (the environment's, read by the caller)."""
    import pyarrow.fs as pafs

    kind = SCHEMES[scheme]
    if kind == "S3":
        endpoint, region = settings
        options: dict = {
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS),
            "connect_timeout": CONNECT_TIMEOUT_S, "request_timeout": timeout_s,
            # a file smaller than an upload part goes as one PutObject when it is closed, not
            # a multipart upload (create, part, complete: three requests); either is whole or
            # nothing, and a refused write is reported as the stream is closed instead of opened
            "allow_delayed_open": True,
        }
        if endpoint:
            scheme_of, _, address = endpoint.rpartition("://")
            options.update(endpoint_override=address.rstrip("/"), scheme=scheme_of or "https")
        if region:
            options["region"] = region
        # Credentials: the AWS SDK's default chain (environment, profile, instance role), so
        # no secret passes through topic-lineage's own arguments.
        return pafs.S3FileSystem(**options)
    if kind == "GCS":
        (emulator,) = settings
        if emulator:  # no credentials there, as Google's client libraries do
            scheme_of, _, address = emulator.partition("://")
            return pafs.GcsFileSystem(anonymous=True, scheme=scheme_of, endpoint_override=address)
        return pafs.GcsFileSystem()
    blob_endpoint, key = settings
    options = {"account_key": key} if key else {}
    if blob_endpoint:  # an emulator's or a private endpoint (the account may be in its path)
        scheme_of, _, rest = blob_endpoint.partition("://")
        authority = rest.split("/", 1)[0]
        options.update(blob_storage_authority=authority, dfs_storage_authority=authority,
                       blob_storage_scheme=scheme_of, dfs_storage_scheme=scheme_of)
    return pafs.AzureFileSystem(account_name=account, **options)


_TRANSIENT = ("slowdown", "internalfailure", "internalerror", "serviceunavailable", "throttl",
              "timed out", "timeout", "failed to flush", "connection reset", "connection refused",
              "broken pipe", "requesttimetooskewed")
_QUOTED = re.compile(r"'[^'\s]*'|\"[^\"\s]*\"")


def _own_words(exc: BaseException) -> str:
    """The words of an error of the store, lower case and without ``_`` (pyarrow writes
    ``SIGNATURE_DOES_NOT_MATCH``), and without the names it quotes back (the bucket, the key):
    a bucket called ``bucket-57401`` is no HTTP 401, a key ``logs-503`` no 503. A quoted name
    is one without blanks: two apostrophes of prose (``couldn't ... key's``) quote nothing."""
    return _QUOTED.sub("''", " ".join(str(exc).split())).lower().replace("_", "")


def _status(words: str, *codes: str) -> bool:
    """Whether ``words`` give one of the HTTP status ``codes`` as a number of its own (``code:
    403``, ``status=403``, ``(403)``), not as part of a name, a port or a path (``-403``,
    ``:57401``, ``/401/``)."""
    alternatives = "|".join(codes)
    return re.search(rf"(?<![\w./-])(?:{alternatives})(?![\w.-])", words) is not None


# What the AWS SDK has already retried S3_ATTEMPTS times, with its own backoff, when pyarrow
# reports it (curl's words): a connection that could not be opened (refused, a name that does
# not resolve, no answer to the connection request within CONNECT_TIMEOUT_S: a firewall that
# drops the packets), or a request without an answer within the request timeout. That took
# about 50 s for a refused endpoint, 90 s for one that never answers, 8 x the request timeout
# for requests that go unanswered. Another round of retries of our own would multiply that by
# S3_ATTEMPTS (12 minutes for an endpoint that never answers, an hour for a server that
# accepts connections and never answers at the default timeout), and the store is no nearer.
_SDK_RETRIED = ("curlcode: 6,", "curlcode: 7,", "connection timed out after", "resolving timed out after",
                "operation timed out after", "operation too slow")


def transient(exc: BaseException) -> bool:
    """Whether an error of the store is worth another try (throttling, a 5xx, a timeout, a
    dropped connection), not a verdict (no such key, refused credentials) nor what the SDK
    retried itself (:data:`_SDK_RETRIED`: no connection, or no answer in time)."""
    if isinstance(exc, FileNotFoundError):
        return False
    text = _own_words(exc)
    if any(words in text for words in _SDK_RETRIED):
        return False
    return (any(word in text for word in _TRANSIENT) or _status(text, "500", "503")) and "accessdenied" not in text


def retried(call, attempts: int = S3_ATTEMPTS):
    """``call()``, tried again with exponential backoff (0.1 s doubling, at most 5 s; with
    jitter) while it fails with a :func:`transient` error. The SDKs retry single requests
    themselves; this covers what they give up on, a read that fails half-way through its
    body among them (pyarrow does not retry those)."""
    import random
    import time

    for attempt in range(attempts):
        try:
            return call()
        except OSError as exc:
            if attempt == attempts - 1 or not transient(exc):
                raise
            delay = min(5.0, 0.1 * 2 ** attempt) * random.uniform(0.5, 1.0)
            # with -v: what a command that waits on the store is waiting for, and since when
            _log.info("try %d of %d failed, again in %.2f s: %s", attempt + 1, attempts, delay,
                       " ".join(str(exc).split())[:300])
            time.sleep(delay)
    raise AssertionError("unreachable")


def read_object(fs, path: str) -> bytes:
    """The whole of one object (a snapshot file, a saved walk, a manifest), read again from the
    start when a transient error cuts it short."""
    def read() -> bytes:
        with fs.open_input_stream(path) as source:
            return source.read()

    return retried(read)


def describe_failure(store: ObjectStore, exc: BaseException) -> str:
    """One line for an error of the store, saying what to check."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    lowered = _own_words(exc)
    if any(word in lowered for word in ("access denied", "accessdenied", "invalidaccesskeyid",
                                         "signaturedoesnotmatch", "forbidden", "unauthorized",
                                         "credentials")) or _status(lowered, "401", "403"):
        hint = {"S3": "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the instance role)",
                "GCS": "check GOOGLE_APPLICATION_CREDENTIALS",
                "Azure": "check AZURE_STORAGE_ACCOUNT_KEY"}[store.kind]
        return f"{store.url} refused the credentials ({hint}): {text[:300]}"
    if "nosuchbucket" in lowered or "bucket does not exist" in lowered or "not found" in lowered:
        return f"{store.url}: bucket {store.bucket!r} does not exist or is not visible: {text[:300]}"
    if any(word in lowered for word in ("connect", "timed out", "timeout", "resolve")):
        where = endpoint() if store.kind == "S3" and endpoint() else store.kind
        return f"{store.url}: cannot reach {where}: {text[:300]}"
    return f"{store.url}: {text[:300]}"
