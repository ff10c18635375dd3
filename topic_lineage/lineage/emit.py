"""Emit what the published version adds to what was emitted, in order, once.

The client and its transport come from the standard OpenLineage configuration, as
``openlineage-python`` reads it: ``OPENLINEAGE_URL`` (HTTP), ``OPENLINEAGE_CONFIG`` or an
``openlineage.yml`` (any transport: HTTP, Kafka, file, console, composite, ...),
``OPENLINEAGE__TRANSPORT__*`` variables. Inside an Airflow task with the OpenLineage provider
installed and enabled, the provider's client (its ``[openlineage] transport``). Nothing
configured (or ``OPENLINEAGE_DISABLED=true``): nothing is emitted, nothing is recorded, no error
(the client alone would fall back to printing every event on the console).

The wire: an ``http`` or ``async_http`` transport's settings are sent with by
:class:`~topic_lineage.lineage.ordered_http.OrderedHttpTransport`, which returns when the
receiver acknowledged the event (the ``http`` transport's ``requests`` cost most of the time per
event; the ``async_http`` transport acknowledges nothing). Any other transport sends as the
client makes it; one that acknowledges nothing (an ``async_http`` that cannot be replaced) is
refused before anything is sent.

Order: the pending changes are sorted by event time (:func:`topic_lineage.lineage.changes.order`)
and sent in batches; within a batch, each dataset's changes go through one worker process (and,
with the ordered HTTP sender, one of its :data:`CONNECTIONS` connections), in order, and a
worker (a connection) stops at its first failure; a batch is recorded (:mod:`~topic_lineage.lineage.
ledger`) before the next starts, and a failure ends the emission with an error naming the
transport. So one dataset's events never arrive out of order, and the next emission sends what
is missing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.lineage import ledger
from topic_lineage.lineage.changes import Change, group_changes, order, topic_changes
from topic_lineage.lineage.namespaces import Namespaces

log = logging.getLogger("topic_lineage.lineage")

BATCH = 2000
"""Changes per recorded batch (what a failure can make the next emission send again)."""
WORKERS_ENV = "TOPIC_LINEAGE_OPENLINEAGE_WORKERS"
DEFAULT_WORKERS = 2


class EmissionError(TopicLineageError):
    """A transport failed; what it accepted before is recorded, the rest is sent next time."""

    exit_code = 4


@dataclass
class Emission:
    """What one emission did."""

    version: str | None
    transport: str | None = None
    pending: int = 0
    emitted: int = 0
    already: int = 0
    seconds: float = 0.0
    reason: str = ""
    kinds: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        if self.transport is None:
            return f"no OpenLineage events emitted: {self.reason}"
        return (f"emitted {self.emitted} OpenLineage event(s) for version {self.version} through "
                f"the {self.transport} transport in {self.seconds:.1f} s "
                f"({', '.join(f'{k} {n}' for k, n in sorted(self.kinds.items())) or 'nothing new'}; "
                f"{self.already} emitted before)")


# --- configuration -----------------------------------------------------------------------------
def disabled() -> bool:
    return os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true"


def configured() -> bool:
    """Whether any OpenLineage transport is configured (cheap: no client is imported)."""
    if disabled():
        return False
    if os.environ.get("OPENLINEAGE_URL") or os.environ.get("OPENLINEAGE_CONFIG"):
        return True
    if any(k.startswith("OPENLINEAGE__TRANSPORT") for k in os.environ):
        return True
    if Path("openlineage.yml").is_file() or (Path.home() / ".openlineage" / "openlineage.yml").is_file():
        return True
    try:
        return _provider_client() is not None
    except TopicLineageError:  # configured, but broken: the emission reports it
        return True


def _config_source() -> str:
    for name in ("OPENLINEAGE_CONFIG", "OPENLINEAGE_URL"):
        if os.environ.get(name):
            return f"{name}={os.environ[name]}"
    if any(k.startswith("OPENLINEAGE__TRANSPORT") for k in os.environ):
        return "OPENLINEAGE__TRANSPORT__* variables"
    return "openlineage.yml"


def _provider_client():
    """The Airflow OpenLineage provider's client (its ``[openlineage]`` transport), when this
    runs in an Airflow task and the provider is installed and enabled; else None. Outside
    Airflow (the CLI) Airflow is not imported for it."""
    import sys

    if "airflow.sdk" not in sys.modules:
        return None
    try:
        from airflow.providers.openlineage import conf as provider_conf
        from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
    except ImportError:
        return None
    try:
        if provider_conf.is_disabled():
            return None
        return get_openlineage_listener().adapter.get_or_create_openlineage_client()
    except Exception as exc:  # noqa: BLE001 - a broken provider setup is reported, not hidden
        raise TopicLineageError(
            f"the Airflow OpenLineage provider's transport ([openlineage] transport) could not "
            f"be created: {exc}") from None


def make_client():
    """An ``OpenLineageClient`` from the standard configuration (or the provider's), or None
    when nothing is configured. A misconfigured transport raises, naming it."""
    if disabled():
        return None
    provider = _provider_client()
    if provider is not None:
        return provider
    if not configured():
        return None
    from openlineage.client import OpenLineageClient

    try:
        client = OpenLineageClient()
    except Exception as exc:  # noqa: BLE001 - any config error is the user's to fix
        raise EmissionError(
            f"the OpenLineage transport configured by {_config_source()} could not be created: "
            f"{exc}; nothing was emitted") from None
    return client


def describe(client) -> str:
    """The transport's kind and where it sends (for messages)."""
    transport = client.transport
    kind = getattr(transport, "kind", type(transport).__name__)
    url = getattr(transport, "url", None)
    if url:
        endpoint = getattr(transport, "endpoint", "")
        return f"{kind} ({url.rstrip('/')}/{endpoint.lstrip('/')})"
    return str(kind)


# --- what to emit -----------------------------------------------------------------------------
def _rows(version: str, table: str) -> list[dict]:
    """The rows of one table of ``version``, from the files the catalog names for it."""
    import pyarrow.dataset as ds

    from topic_lineage.duckdb_sql import table_files

    files = [str(f) for f in table_files(version, table)]
    if not files:
        return []
    return ds.dataset(files, format="parquet").to_table().to_pylist()


def changes_of(version: str, namespaces: Callable[[str, str], str] | None = None) -> list[Change]:
    """Every change the tables of ``version`` describe (topic changes and group reads)."""
    namespaces = namespaces or Namespaces()
    incarnations = _rows(version, t.TOPIC_INCARNATIONS)
    found = topic_changes(incarnations, namespaces)
    found += group_changes(_rows(version, t.GROUP_INCARNATIONS), incarnations, namespaces)
    return found


def pending_changes(version: str, since: str | None = None) -> tuple[list[Change], int]:
    """The changes of ``version`` not recorded as emitted (and, with ``since``, not in that
    version's tables either), in emission order; and how many were emitted before."""
    namespaces = Namespaces()
    everything = changes_of(version, namespaces)
    done = ledger.emitted_keys()
    if since is not None:
        done = done | {c.key for c in changes_of(since, namespaces)}
    pending = [c for c in everything if c.key not in done]
    pending.sort(key=order)
    return pending, len(everything) - len(pending)


# --- emitting ---------------------------------------------------------------------------------
def emit_published(*, since: str | None = None, dry_run: bool = False, out: TextIO | None = None,
                   batch: int = BATCH, workers: int | None = None,
                   ordered_http: bool = True) -> Emission:
    """Emit the published version's changes that were not emitted yet (see the module).
    ``ordered_http=False`` sends through the client's own ``http`` transport (the benchmark's
    comparison)."""
    from topic_lineage import warehouse
    from topic_lineage.lineage.events import job_namespace, to_event

    if since is not None and not warehouse.version_dir(since).is_dir():
        raise TopicLineageError(f"--since: version {since!r} does not exist (retention keeps the "
                                "newest few); list versions with 'topic-lineage versions'")
    with warehouse.reading() as version:
        if version is None:
            return Emission(None, reason="nothing is published yet")
        if dry_run:
            import sys

            from openlineage.client.serde import Serde

            out = out or sys.stdout

            pending, already = pending_changes(version, since)
            namespace = job_namespace()
            for change in pending:
                out.write(Serde.to_json(to_event(change, version, namespace)) + "\n")
            return Emission(version, transport="dry-run", pending=len(pending),
                            emitted=len(pending), already=already, kinds=_kinds(pending))
        if not configured():
            return Emission(version, reason="no OpenLineage transport is configured "
                            "(OPENLINEAGE_URL, OPENLINEAGE_CONFIG, openlineage.yml)")
        with ledger.exclusive() as acquired:
            if not acquired:
                return Emission(version, reason="another OpenLineage emission is running (lock "
                                f"{ledger.lock_path()}); it sends these changes")
            first = make_client()
            if first is None:
                return Emission(version, reason="OpenLineage is disabled")
            pending, already = pending_changes(version, since)
            return _send(first, pending, already, version, batch,
                         workers or int(os.environ.get(WORKERS_ENV, DEFAULT_WORKERS)),
                         ordered_http)


def _kinds(changes: list[Change]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for change in changes:
        kinds[change.kind] = kinds.get(change.kind, 0) + 1
    return kinds


PROCESS_MIN = 1000
"""Fewer pending changes than this are sent from this process; more by ``workers`` processes
(the client's work per event is Python: threads would share one core). The workers are spawned,
not forked: the emitting process may run other threads (an Airflow task's, the CLI's background
imports), and a child forked while one of them holds a lock (logging's, an import's) waits for it
forever. Each worker builds its client from the environment (:func:`_run_lane`)."""

_worker: dict[str, Any] = {}


def _worker_init(version: str, namespace: str, ordered: bool = True) -> None:
    _worker.clear()
    _worker.update(version=version, namespace=namespace, client=None, ordered=ordered)


def _worker_process_init(version: str, namespace: str, ordered: bool) -> None:
    """A worker process of the pool (this emission's own): as :func:`_worker_init`, and the
    attrs validators of the client's event classes off, a third of the CPU of making an event
    (measured): they check what :func:`~topic_lineage.lineage.events.to_event` always writes
    (the producer and schema URLs, the event time, the run ID), which
    tests/test_lineage_emit.py validates against the OpenLineage JSON Schemas."""
    import attr

    attr.validators.set_disabled(True)
    _worker_init(version, namespace, ordered)


def _wire(client, *, ours: bool, ordered: bool):
    """The client to send with: its ``http``/``async_http`` transport replaced by the ordered
    sender (:mod:`~topic_lineage.lineage.ordered_http`) unless ``ordered`` is False; a transport
    that would acknowledge nothing is refused, naming it."""
    from topic_lineage.lineage.ordered_http import unacknowledged, with_ordered_http

    if ordered:
        client = with_ordered_http(client, close_replaced=ours)
    if (kind := unacknowledged(client)) is not None:
        raise EmissionError(
            f"the OpenLineage {kind} transport returns before its receiver acknowledged an event "
            "and does not say which one failed, so what was delivered could not be recorded; "
            "topic-lineage sends with its settings itself unless a proxy variable, a netrc file "
            "or a CA bundle variable (https) applies, which only the client's 'requests' honours: "
            "configure the 'http' transport instead; nothing was emitted")
    _skip_environment_lookups(client)
    return client


CONNECTIONS = 4
"""Kept-alive connections per process when the ordered HTTP sender sends: each carries its own
datasets' events one after another, so waiting for one answer overlaps the others' work."""


def _run_lane(lane: list[Change]) -> tuple[list[str], tuple[Change, str] | None]:
    """Send one lane's changes in order through this process's client; stop at a failure.
    With the ordered HTTP sender the lane is split by dataset over :data:`CONNECTIONS`
    connections, each in a thread of its own, each stopping at its first failure."""
    from topic_lineage.lineage.ordered_http import OrderedHttpTransport

    if _worker.get("client") is None:
        _worker["client"] = _wire(make_client(), ours=True, ordered=_worker["ordered"])
    client = _worker["client"]
    if not isinstance(client.transport, OrderedHttpTransport) or CONNECTIONS <= 1 or len(lane) < 2:
        return _run_sublane(client, lane)
    import copy
    from concurrent.futures import ThreadPoolExecutor

    sublanes = _lanes(lane, CONNECTIONS)
    clients = _worker.setdefault("clients", [client])
    while len(clients) < len(sublanes):
        clients.append(copy.copy(client))
        clients[-1].transport = client.transport.another()
    with ThreadPoolExecutor(len(sublanes)) as pool:
        results = list(pool.map(_run_sublane, clients, sublanes))
    failures = [failure for _, failure in results if failure is not None]
    return [key for keys, _ in results for key in keys], (failures[0] if failures else None)


def _run_sublane(client, lane: list[Change]) -> tuple[list[str], tuple[Change, str] | None]:
    from topic_lineage.lineage.events import to_event

    sent = []
    for change in lane:
        try:
            client.emit(to_event(change, _worker["version"], _worker["namespace"]))
        except Exception as exc:  # noqa: BLE001 - any transport error stops this lane
            return sent, (change, f"{type(exc).__name__}: {exc}")
        sent.append(change.key)
    return sent, None


_PROXY_ENVIRONMENT = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "netrc")
_CA_ENVIRONMENT = ("requests_ca_bundle", "curl_ca_bundle")


def _skip_environment_lookups(client) -> None:
    """An HTTP transport's ``requests`` session reads the proxy, CA bundle and netrc settings
    from the environment on every request (a sixth of the client's time per event, measured).
    When they cannot apply (no proxy variable, no netrc file, and a CA bundle variable only for
    a plain ``http://`` URL, which uses no certificates), reading them finds nothing: skip it.
    Anything that applies leaves the session as it is."""
    transport = getattr(client, "transport", None)
    session = getattr(transport, "session", None)
    if session is None or not hasattr(session, "trust_env"):
        return
    names = {k.lower() for k in os.environ}
    if names & set(_PROXY_ENVIRONMENT):
        return
    if names & set(_CA_ENVIRONMENT) and not str(getattr(transport, "url", "")).startswith("http://"):
        return
    if (Path.home() / ".netrc").exists() or (Path.home() / "_netrc").exists():
        return
    session.trust_env = False


def _lanes(chunk: list[Change], workers: int) -> list[list[Change]]:
    """One dataset, one lane: its changes stay in order; datasets spread over the lanes."""
    lanes: list[list[Change]] = [[] for _ in range(workers)]
    lane_of: dict[tuple[str, str], int] = {}
    for change in chunk:
        lanes[lane_of.setdefault(change.dataset, len(lane_of) % workers)].append(change)
    return [lane for lane in lanes if lane]


def _send(first, pending: list[Change], already: int, version: str, batch: int,
          workers: int, ordered: bool = True) -> Emission:
    import contextlib
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from topic_lineage.lineage.events import job_namespace

    transport = describe(first)
    namespace = job_namespace()
    started = time.monotonic()
    provider = _provider_client() is not None
    # the provider's client is one object of this process: it sends everything itself
    if provider or workers <= 1 or len(pending) < PROCESS_MIN:
        workers = 1
    first = _wire(first, ours=not provider, ordered=ordered)  # refuses before sending anything
    emitted = 0
    with contextlib.ExitStack() as stack:
        if workers == 1:
            _worker_init(version, namespace, ordered)
            _worker["client"] = first
            run_lanes = lambda lanes: [_run_lane(lane) for lane in lanes]
        else:
            pool = stack.enter_context(ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_process_init, initargs=(version, namespace, ordered)))
            run_lanes = lambda lanes: list(pool.map(_run_lane, lanes))
        for start in range(0, len(pending), batch):
            results = run_lanes(_lanes(pending[start:start + batch], workers))
            sent = [key for keys, _ in results for key in keys]
            ledger.record(sent, version, transport)
            emitted += len(sent)
            failures = [failure for _, failure in results if failure is not None]
            if failures:
                change, error = failures[0]
                raise EmissionError(
                    f"the OpenLineage {transport} transport failed on the {change.kind} event of "
                    f"{change.namespace}/{change.name} ({change.key}, at {change.at}): {error}. "
                    f"{emitted} of {len(pending)} pending event(s) were sent and recorded; the "
                    "published tables are unchanged, and the next emission ('topic-lineage "
                    f"lineage emit', the DAG's lineage task) sends the other {len(pending) - emitted}")
    _worker.clear()
    ledger.complete(version)
    result = Emission(version, transport=transport, pending=len(pending), emitted=emitted,
                      already=already, seconds=time.monotonic() - started, kinds=_kinds(pending))
    log.info("%s", result)
    return result


def summary(emission: Emission) -> dict[str, Any]:
    """JSON-friendly (the Airflow task's return value)."""
    return json.loads(json.dumps(emission.__dict__, default=str))
