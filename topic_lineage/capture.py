"""Live capture: one snapshot of a running cluster's topic metadata through the Kafka protocol.

Steps (all through confluent-kafka's AdminClient, bounded by one deadline):

1. reach the cluster (DescribeCluster), failing fast with one clear line when no broker answers;
2. list every topic name, internal ones included (one Metadata request; also gives the cluster
   ID, the brokers and the controller);
3. describe the listed topics in batches, a few batches in flight at a time, for topic IDs,
   partition counts, replication factors and the internal flag;
4. describe *by name* every topic held as live for the cluster (:mod:`topic_lineage.stored_live`)
   that the listing lacks: with authorization on, Kafka's listing silently leaves out topics the
   principal may not DESCRIBE, so the listing alone is never taken as the whole cluster
   (contract, "Sources of completeness"). :func:`decide_topics` decides what such a topic is.

What can go wrong, and what is kept:

- a topic whose describe fails is recorded with the Kafka error name (``TOPIC_AUTHORIZATION_FAILED``,
  ``UNKNOWN_TOPIC_OR_PART`` for a topic deleted between listing and describing), never dropped;
- a request-level failure after the listing (a batch timed out, a connection broke, the deadline
  passed) records the affected topics with the client error name (``TIMED_OUT``, ``TRANSPORT``:
  librdkafka's local error names without their leading underscore) and marks the snapshot
  ``complete = False``;
- a topic missing from the listing that its by-name describe finds (``UNKNOWN_TOPIC_OR_PART``,
  the broker's answer) is gone and left out; any other error keeps it present with that error
  (``TOPIC_AUTHORIZATION_FAILED``: hidden by an ACL); a client-side failure (``TIMED_OUT``,
  ``TRANSPORT``) also makes the snapshot incomplete, as does not being able to read which topics
  are live;
- when nothing useful could be read (no broker answered, the listing failed) no snapshot is
  produced: :class:`ClusterUnavailableError` says why, within about ``timeout_s`` seconds.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from topic_lineage import topic_id as tid
from topic_lineage.errors import TopicLineageError
from topic_lineage.faults import fault_names
from topic_lineage.kafka_config import KafkaConfigError, client_error_text, redact, redact_text
from topic_lineage.snapshot import ERROR_NAME_RE, Snapshot, TopicObservation

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_BATCH_SIZE = 500
DEFAULT_MAX_IN_FLIGHT = 4
# How long "all brokers are down" may last before the capture gives up (within the deadline).
ALL_BROKERS_DOWN_GRACE_S = 3.0
_POLL_S = 0.05
# The broker's answer to a describe of a topic that does not exist: the only proof that a topic
# missing from the listing is gone. (librdkafka's local ``_UNKNOWN_TOPIC`` is the client's own
# view and proves nothing.)
GONE_ERROR = "UNKNOWN_TOPIC_OR_PART"
# What a topic that could not be described by name at all is recorded with.
NOT_ANSWERED_ERROR = "TIMED_OUT"


class CaptureError(TopicLineageError, RuntimeError):
    """A capture could not produce a snapshot; nothing was stored."""


class ClusterUnavailableError(CaptureError):
    """No broker answered, or the topics could not be listed: nothing useful was read."""


class _BrokersDown(Exception):
    """Internal: the client reported a fatal error or lost every broker for too long."""


class _ClientLog:
    """librdkafka's log lines and error callbacks, kept away from raw stderr.

    Log lines go to the ``topic_lineage.capture.librdkafka`` logger at DEBUG (they can name
    hosts, never secrets, but are redacted anyway); the last transport failure is remembered so
    that an unreachable cluster is reported with its real cause.
    """

    def __init__(self, redact: Callable[[str], str]):
        self._redact = redact
        self._log = logging.getLogger(__name__ + ".librdkafka")
        self.last_failure: str | None = None
        self.all_brokers_down_since: float | None = None
        self.fatal: str | None = None

    def log(self, level, fmt, *args):  # confluent-kafka's logger protocol
        text = self._redact(fmt % args if args else str(fmt))
        self._log.debug("%s", text)

    def error_cb(self, error) -> None:
        text = self._redact(f"{error.name()}: {error.str()}")
        self._log.debug("client error %s", text)
        name = error.name()
        if name == "_ALL_BROKERS_DOWN":
            if self.all_brokers_down_since is None:
                self.all_brokers_down_since = time.monotonic()
        elif name == "_AUTHENTICATION" or error.fatal():
            self.fatal = text
            self.last_failure = text
        else:
            self.last_failure = text


def _error_name(error) -> str:
    """A Kafka error name as stored in snapshots (local errors lose their leading ``_``)."""
    name = str(error.name()).lstrip("_") if hasattr(error, "name") else ""
    return name if ERROR_NAME_RE.match(name) else "UNKNOWN"


def _is_local(error) -> bool:
    """librdkafka's own (client-side) errors have negative codes; broker errors positive."""
    return error.code() < 0


class _Capture:
    """One capture run: an AdminClient, a deadline and the client's callbacks."""

    def __init__(self, alias: str, config: Mapping[str, Any], timeout_s: float):
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        self.alias = alias
        self.user_config = dict(config)
        self.bootstrap = str(self.user_config.get("bootstrap.servers", ""))
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s
        self.client_log = _ClientLog(self.redact)
        client_config = {"client.id": "topic-lineage", **self.user_config}
        client_config["logger"] = self.client_log
        client_config["error_cb"] = self.client_log.error_cb
        log.info("capturing %s with client config %s", alias, redact(client_config))
        try:
            self.admin = AdminClient(client_config)
        except KafkaException as exc:
            raise KafkaConfigError(
                f"the Kafka client rejected the config: {self.error_text(exc)}"
            ) from None

    def redact(self, text: str) -> str:
        """``text`` with every secret value of the client config redacted (every message of the
        run that may quote the client or the config goes through here)."""
        return redact_text(text, self.user_config)

    def error_text(self, exc: BaseException) -> str:
        """A client error as one redacted line."""
        return client_error_text(exc, self.user_config)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def unavailable(self, reason: str) -> ClusterUnavailableError:
        reason = self.redact(reason)
        return ClusterUnavailableError(
            f"cannot capture cluster {self.alias!r} at {self.bootstrap}: {reason}; check "
            "--bootstrap-servers, the --config settings and that the brokers are up; "
            "nothing was stored"
        )

    def wait(self, futures: Sequence[concurrent.futures.Future], *, any_done: bool) -> None:
        """Serve the client's callbacks until some/all futures are done or the deadline passes.

        Raises :class:`_BrokersDown` (with the reason) when the client reports a fatal error
        or all brokers stay down longer than the grace period.
        """
        mode = concurrent.futures.FIRST_COMPLETED if any_done else concurrent.futures.ALL_COMPLETED
        while True:
            done, pending = concurrent.futures.wait(futures, timeout=_POLL_S, return_when=mode)
            self.admin.poll(0)
            if not pending or (any_done and done):
                return
            if self.client_log.fatal:
                raise _BrokersDown(self.client_log.fatal)
            down_since = self.client_log.all_brokers_down_since
            if down_since is not None and time.monotonic() - down_since > min(
                ALL_BROKERS_DOWN_GRACE_S, self.timeout_s
            ):
                raise _BrokersDown(
                    f"no broker answers ({self.client_log.last_failure or 'all brokers are down'})"
                )
            if self.remaining() <= 0:
                return

    def reach(self) -> str | None:
        """Wait for the cluster to answer; the cluster ID from DescribeCluster if supported."""
        from confluent_kafka import KafkaException

        future = self.admin.describe_cluster(request_timeout=max(self.remaining(), 0.1))
        try:
            self.wait([future], any_done=False)
        except _BrokersDown as exc:
            raise self.unavailable(str(exc)) from None
        no_answer = f"no answer within {self.timeout_s:g}s" + (
            f" (last error: {self.client_log.last_failure})" if self.client_log.last_failure else ""
        )
        if not future.done():
            raise self.unavailable(no_answer)
        try:
            description = future.result(timeout=0)
        except KafkaException as exc:
            error = exc.args[0]
            if error.name() == "_TIMED_OUT":
                raise self.unavailable(no_answer) from None
            if _is_local(error) and error.name() != "_UNSUPPORTED_FEATURE":
                raise self.unavailable(self.error_text(exc)) from None
            # The broker answered but refused or lacks DescribeCluster: the listing will do.
            log.info("DescribeCluster unavailable (%s); using metadata", error.name())
            return None
        self.client_log.all_brokers_down_since = None
        controller = description.controller
        log.info(
            "cluster %s: %d broker(s) %s, controller %s",
            description.cluster_id,
            len(description.nodes),
            ", ".join(f"{n.id}@{n.host}:{n.port}" for n in description.nodes),
            f"{controller.id}@{controller.host}:{controller.port}" if controller else "unknown",
        )
        return description.cluster_id

    def list_topics(self):
        from confluent_kafka import KafkaException

        try:
            metadata = self.admin.list_topics(timeout=max(self.remaining(), 0.1))
        except KafkaException as exc:
            raise self.unavailable(
                f"listing topics failed ({self.error_text(exc)})"
            ) from None
        hidden = fault_names("hide", "list") & metadata.topics.keys()
        if hidden:  # fault point: what an ACL does to the listing (topic_lineage/faults.py)
            log.warning("fault hide@list: leaving %d topic(s) out of the listing", len(hidden))
            for name in hidden:
                del metadata.topics[name]
        log.info(
            "listed %d topic(s); brokers %s, controller %s",
            len(metadata.topics),
            sorted(metadata.brokers),
            metadata.controller_id,
        )
        return metadata

    def describe(
        self, names: Sequence[str], batch_size: int, max_in_flight: int
    ) -> tuple[dict[str, TopicObservation], bool]:
        """Describe ``names`` in batches, at most ``max_in_flight`` requests at a time.

        Returns one observation per name (failures recorded, never dropped) and whether every
        describe request got an answer (``complete``).
        """
        from confluent_kafka import KafkaException, TopicCollection

        denied = fault_names("deny", "describe")
        pending = deque(names[i:i + batch_size] for i in range(0, len(names), batch_size))
        in_flight: list[dict[str, concurrent.futures.Future]] = []
        results: dict[str, TopicObservation] = {}
        complete = True
        gave_up = "TIMED_OUT"

        def fail(batch: Sequence[str], error_name: str) -> None:
            for name in batch:
                results[name] = TopicObservation(name, None, None, None, None, error_name)

        while pending or in_flight:
            while pending and len(in_flight) < max_in_flight and self.remaining() > 0:
                batch = pending.popleft()
                try:
                    # A copy: confluent-kafka completes the futures of the dict it returned.
                    futures = dict(self.admin.describe_topics(
                        TopicCollection(list(batch)), request_timeout=max(self.remaining(), 0.1)
                    ))
                    for name in denied & futures.keys():
                        futures[name] = _denied(futures[name])
                    in_flight.append(futures)
                except KafkaException as exc:
                    log.warning("describe request failed: %s", self.error_text(exc))
                    fail(batch, _error_name(exc.args[0]))
                    complete = False
            if not in_flight:
                break
            try:
                self.wait([f for batch in in_flight for f in batch.values()], any_done=True)
            except _BrokersDown as exc:
                # Listed but not (all) described: keep what was read, mark it incomplete.
                log.warning("describe phase cut short: %s", exc)
                gave_up = "TRANSPORT"
                break
            still = []
            for batch in in_flight:
                if all(f.done() for f in batch.values()):
                    complete &= self._collect(batch, results)
                else:
                    still.append(batch)
            in_flight = still
            if self.remaining() <= 0:
                break
        if in_flight or pending:  # the deadline passed or the brokers went away with work left
            complete = False
            for batch in in_flight:
                self._collect({n: f for n, f in batch.items() if f.done()}, results)
            left = [n for batch in in_flight for n in batch if n not in results]
            left += [n for batch in pending for n in batch]
            log.warning("capture cut short; %d topic(s) recorded as %s", len(left), gave_up)
            fail(left, gave_up)
        return results, complete

    def _collect(
        self, batch: dict[str, concurrent.futures.Future], results: dict[str, TopicObservation]
    ) -> bool:
        """Record one finished batch; False when a request-level (client-side) error hit it."""
        from confluent_kafka import KafkaException

        answered = True
        for name, future in batch.items():
            try:
                description = future.result(timeout=0)
            except KafkaException as exc:
                error = exc.args[0]
                answered &= not _is_local(error)
                results[name] = TopicObservation(name, None, None, None, None, _error_name(error))
                log.debug("describe %s failed: %s", name, self.error_text(exc))
                continue
            results[name] = observation_from_description(name, description)
        if answered and batch:  # a broker answered: any earlier "all brokers down" is over
            self.client_log.all_brokers_down_since = None
        return answered


def _denied(answer: concurrent.futures.Future) -> concurrent.futures.Future:
    """Fault point ``deny@describe``: the broker's answer for one topic, replaced by the error a
    broker with an ACL denying DESCRIBE gives (a client-side failure is passed on unchanged)."""
    from confluent_kafka import KafkaError, KafkaException

    denied: concurrent.futures.Future = concurrent.futures.Future()

    def relay(done: concurrent.futures.Future) -> None:
        if done.cancelled():
            denied.cancel()
            return
        failure = done.exception()
        if isinstance(failure, KafkaException) and _is_local(failure.args[0]):
            denied.set_exception(failure)
        else:
            denied.set_exception(
                KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
            )

    answer.add_done_callback(relay)
    return denied


def decide_topics(
    listed: Mapping[str, TopicObservation],
    known_live: Iterable[str],
    by_name: Mapping[str, TopicObservation],
    *,
    answered: bool,
) -> tuple[tuple[TopicObservation, ...], bool]:
    """The topics of a snapshot and whether it is complete (pure; the heart of R2 for captures).

    ``listed``: the observation of every topic the all-topics listing returned. ``known_live``:
    the topics held as live for the cluster. ``by_name``: the by-name describe of those of them
    the listing lacks. ``answered``: every describe request (listed and by name) got an answer
    from a broker. A topic missing from the listing is

    - gone (left out) only when the broker answered ``UNKNOWN_TOPIC_OR_PART`` for it;
    - present with its attributes when the describe found it (the listing hid it);
    - present with the error otherwise (``TOPIC_AUTHORIZATION_FAILED``: an ACL hides it; any
      other broker or client error: its describe failed), so it is never taken as deleted;
    - present with ``TIMED_OUT`` and the snapshot incomplete when it has no answer at all.

    The snapshot is complete only when every request was answered and every hidden topic has an
    answer.
    """
    topics = dict(listed)
    complete = answered
    for name in set(known_live) - listed.keys():
        seen = by_name.get(name)
        if seen is None:
            seen = TopicObservation(name, None, None, None, None, NOT_ANSWERED_ERROR)
            complete = False
        if seen.error != GONE_ERROR:
            topics[name] = seen
    return tuple(topics[name] for name in sorted(topics)), complete


def observation_from_description(name: str, description) -> TopicObservation:
    """A :class:`TopicObservation` from a confluent-kafka ``TopicDescription``."""
    partitions = sorted(description.partitions, key=lambda p: p.id)
    # Kafka's own tools report the first partition's replica count as the replication factor.
    replication = len(partitions[0].replicas) if partitions else 0
    return TopicObservation(
        name=name,
        topic_id=tid.canonical_or_none(description.topic_id),
        partition_count=len(partitions),
        replication_factor=replication,
        is_internal=bool(description.is_internal),
        error=None,
    )


def capture_snapshot(
    cluster_alias: str,
    config: Mapping[str, Any],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    captured_at: datetime | None = None,
    on_listed: Callable[[list[str]], None] | None = None,
    known_live: Callable[[str], Iterable[str]] | None = None,
    groups: bool = True,
) -> Snapshot:
    """Read one snapshot of the cluster that ``config`` (librdkafka settings) points at.

    ``captured_at`` defaults to the moment the topics were listed (UTC). ``on_listed`` is
    called with the listed names before they are described (tests use it to delete a topic in
    between). ``known_live(cluster_id)`` gives the topics held as live for the cluster, each
    described by name when the listing lacks it; the default reads the store and the published
    version (:func:`topic_lineage.stored_live.stored_live_names`). ``groups`` (default on)
    also records the consumer groups' committed offsets with their log end offsets
    (:mod:`topic_lineage.group_capture`, contract R8-R10) in what is left of ``timeout_s``;
    ``groups=False`` leaves the snapshot saying nothing about groups. Raises
    :class:`ClusterUnavailableError` when nothing useful could be read.
    """
    if not cluster_alias or not cluster_alias.strip():
        raise CaptureError("a cluster alias is required (--cluster ALIAS)")
    if not str(config.get("bootstrap.servers", "")).strip():
        raise CaptureError(
            "no bootstrap servers: pass --bootstrap-servers HOST:PORT or set bootstrap.servers "
            "in the --config file"
        )
    if timeout_s <= 0 or batch_size < 1 or max_in_flight < 1:
        raise CaptureError("timeout, batch size and max in flight must be positive")
    if captured_at is not None and captured_at.tzinfo is None:
        raise CaptureError("captured_at must be timezone-aware (UTC)")

    started = time.monotonic()
    run = _Capture(cluster_alias, config, timeout_s)
    described_cluster_id = run.reach()
    listed_at = datetime.now(UTC)
    metadata = run.list_topics()
    cluster_id = metadata.cluster_id or described_cluster_id
    if not cluster_id:
        raise CaptureError(
            f"cluster {cluster_alias!r} at {run.bootstrap} reported no cluster ID (brokers older "
            "than Kafka 0.10.1?); topic-lineage needs one; nothing was stored"
        )
    names = sorted(metadata.topics)
    if on_listed is not None:
        on_listed(list(names))
    results, complete = run.describe(names, batch_size, max_in_flight)
    live, live_known = _known_live(known_live, cluster_id)
    hidden = sorted(live - results.keys())
    by_name: dict[str, TopicObservation] = {}
    if hidden:
        by_name, by_name_answered = run.describe(hidden, batch_size, max_in_flight)
        complete &= by_name_answered
        _log_hidden(cluster_alias, by_name)
    topics, complete = decide_topics(results, live, by_name, answered=complete and live_known)
    groups_complete, group_observations = None, ()
    if groups:
        from topic_lineage.group_capture import capture_groups

        # within the same deadline: --timeout bounds the whole capture; what is left unread
        # when it passes leaves the group information incomplete (R10), never the topics
        groups_complete, group_observations = capture_groups(
            run.admin, run.remaining(), redact=run.redact,
        )
    snapshot = Snapshot(
        cluster_id=cluster_id,
        cluster_alias=cluster_alias,
        captured_at=(captured_at or listed_at).astimezone(UTC),
        complete=complete,
        topics=topics,
        groups_complete=groups_complete,
        groups=group_observations,
    )
    log.info(
        "captured %s (%s): %d topic(s), %d with errors, complete=%s in %.2fs",
        cluster_id, cluster_alias, len(topics), snapshot.error_topic_count, complete,
        time.monotonic() - started,
    )
    from topic_lineage.lineage.namespaces import remember

    remember(cluster_id, cluster_alias, run.bootstrap)  # OpenLineage names its topics by it
    return snapshot


def _known_live(
    known_live: Callable[[str], Iterable[str]] | None, cluster_id: str
) -> tuple[frozenset[str], bool]:
    """The topics held as live for the cluster, and whether they could be read at all.

    Not knowing them makes the snapshot incomplete: the listing may then hide topics that
    nothing would check, and an incomplete snapshot establishes no deletion (R2).
    """
    from topic_lineage.stored_live import StoredLiveError, stored_live_names

    try:
        return frozenset((known_live or stored_live_names)(cluster_id)), True
    except StoredLiveError as exc:
        log.warning(
            "cannot tell which topics of cluster %s are live (%s): the snapshot is stored as "
            "incomplete, so it establishes no deletion", cluster_id, exc,
        )
        return frozenset(), False


def _log_hidden(cluster_alias: str, by_name: Mapping[str, TopicObservation]) -> None:
    """Say that the listing lacked topics held as live, and what describing them found (loudly
    when some are kept: the listing is hiding topics, e.g. an ACL)."""
    outcomes: dict[str, int] = {}
    for seen in by_name.values():
        outcome = "found" if seen.error is None else seen.error
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    summary = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
    kept = sum(1 for seen in by_name.values() if seen.error != GONE_ERROR)
    # Topics deleted since the last capture are all confirmed gone: that is news, not a warning.
    log.log(
        logging.WARNING if kept else logging.INFO,
        "cluster %s: %d topic(s) held as live were missing from the topic listing (topics the "
        "principal may not DESCRIBE are left out of it); described by name: %s; %d kept present, "
        "%d confirmed gone (%s). Examples: %s",
        cluster_alias, len(by_name), summary, kept, len(by_name) - kept, GONE_ERROR,
        ", ".join(sorted(by_name)[:5]),
    )


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_TIMEOUT_S",
    "GONE_ERROR",
    "CaptureError",
    "ClusterUnavailableError",
    "capture_snapshot",
    "decide_topics",
    "observation_from_description",
]
