"""Live capture of consumer groups (contract R8-R10): each group's committed offsets with the
partition's log end offset, read in the same capture as the topics.

Steps, through the capture's AdminClient and bounded by one deadline:

1. list the consumer groups (``ListGroups``); a failed or cut-short listing makes
   ``groups_complete`` false and keeps whatever groups it did return;
2. describe, in batches, the groups whose state the listing did not name (Kafka 2.6+ names it
   there; a failed describe leaves the state unknown: the offsets are what matter);
3. fetch each group's committed offsets (``OffsetFetch``, one group per request: the client
   allows no more), a few at a time; a group whose offsets cannot be read is kept with the error
   name (``GROUP_AUTHORIZATION_FAILED``, or ``TIMED_OUT`` when the deadline passed first) and no
   offsets, so nothing is concluded about it (R10);
4. read the log end offset of every partition that has a committed offset (``ListOffsets``),
   *after* the committed offsets: a log end offset only grows, so a consumer's honest position
   never exceeds it, and a committed offset above it is a carried position (R9), not a race. A
   log end offset that cannot be read is left unknown (it proves nothing).

Nothing here stops the topic snapshot: the worst case is a snapshot whose group information is
incomplete, which the rules read as "nothing seen".
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from topic_lineage.faults import fault_names, fault_set
from topic_lineage.snapshot import ERROR_NAME_RE, GroupObservation, GroupOffset

log = logging.getLogger(__name__)

DEFAULT_MAX_IN_FLIGHT = 8
DESCRIBE_BATCH = 200
_POLL_S = 0.05
DENIED_ERROR = "GROUP_AUTHORIZATION_FAILED"
NOT_ANSWERED_ERROR = "TIMED_OUT"

# confluent-kafka's ConsumerGroupState names -> the names Kafka's own tools print
_STATES = {
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "PREPARING_REBALANCE": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "COMPLETING_REBALANCE": "CompletingRebalance",
    "ASSIGNING": "Assigning",
    "RECONCILING": "Reconciling",
}


def state_name(state: Any) -> str | None:
    """Kafka's name of a group state (``Stable``, ``Empty``...); None when unknown."""
    name = getattr(state, "name", None)
    return _STATES.get(str(name)) if name else None


def error_name(error: Any) -> str:
    """A Kafka error name as stored (librdkafka's local errors lose their leading ``_``)."""
    name = str(error.name()).lstrip("_") if hasattr(error, "name") else ""
    return name if ERROR_NAME_RE.match(name) else "UNKNOWN"


class GroupCapture:
    """One capture of a cluster's consumer groups through ``admin`` (a confluent-kafka
    AdminClient), until ``deadline`` (``time.monotonic()``)."""

    def __init__(self, admin, deadline: float, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 redact: Callable[[str], str] = str):
        self.admin = admin
        self.deadline = deadline
        self.max_in_flight = max(1, max_in_flight)
        self.redact = redact
        self.listed_states: dict[str, str | None] = {}

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _timeout(self) -> float:
        return max(self.remaining(), 0.1)

    def _wait(self, futures: Sequence[concurrent.futures.Future], *, any_done: bool = False) -> None:
        """Serve the client's callbacks until the futures are (``any_done``: some future is)
        done or the deadline passes."""
        if not any_done:
            self._wait_all(futures)
            return
        while self.remaining() > 0:
            done, _ = concurrent.futures.wait(futures, timeout=_POLL_S,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            self.admin.poll(0)
            if done or not futures:
                return

    def _wait_all(self, futures: Sequence[concurrent.futures.Future]) -> None:
        """Wait for every future, one at a time: ``concurrent.futures.wait`` on all of them
        installs and removes a waiter on each at every poll, which added about 0.5 s to the
        1.5 s wait for the log end offsets of 10,000 partitions (docs/benchmarks.md)."""
        pending = list(futures)
        while pending:
            if pending[-1].done():
                pending.pop()
                continue
            if self.remaining() <= 0:
                break
            concurrent.futures.wait(pending[-1:], timeout=_POLL_S)
            self.admin.poll(0)
        self.admin.poll(0)

    def run(self) -> tuple[bool, tuple[GroupObservation, ...]]:
        """``(groups_complete, groups)``: what the capture saw, never more than it saw."""
        group_ids, complete = self.list_groups()
        # Kafka 2.6+ names each group's state in the listing: describe only the others
        listed = self.listed_states
        states = {**listed, **self.describe([g for g in group_ids if listed.get(g) is None])}
        offsets, errors = self.committed_offsets(group_ids)
        ends = self.log_end_offsets({(t, p) for seen in offsets.values() for t, p, _ in seen})
        groups = tuple(
            GroupObservation(
                group_id,
                states.get(group_id),
                errors.get(group_id),
                tuple(GroupOffset(t, p, committed, ends.get((t, p)))
                      for t, p, committed in sorted(offsets.get(group_id, ()))),
            )
            for group_id in group_ids
        )
        log.info(
            "captured %d consumer group(s), %d with errors, %d committed offset(s); listing "
            "complete=%s", len(groups), len(errors), sum(len(g.offsets) for g in groups), complete,
        )
        return complete, groups

    def list_groups(self) -> tuple[list[str], bool]:
        from confluent_kafka import KafkaException

        if fault_set("fail", "groups"):  # fault point: a broker refusing ListGroups
            log.warning("fault fail@groups: the consumer group listing fails")
            return [], False
        if self.remaining() <= 0:  # the capture's deadline passed before the groups' turn
            log.warning("no time left to list consumer groups: group information is incomplete")
            return [], False
        future = self.admin.list_consumer_groups(request_timeout=self._timeout())
        self._wait([future])
        if not future.done():
            log.warning("listing consumer groups got no answer in time: group information is "
                        "incomplete")
            return [], False
        try:
            result = future.result(timeout=0)
        except KafkaException as exc:
            log.warning("listing consumer groups failed (%s): group information is incomplete",
                        self.redact(str(exc.args[0])))
            return [], False
        for error in result.errors:
            log.warning("a broker's consumer group listing failed (%s): group information is "
                        "incomplete", self.redact(str(error)))
        self.listed_states = {g.group_id: state_name(getattr(g, "state", None))
                              for g in result.valid}
        return sorted({g.group_id for g in result.valid}), not result.errors

    def describe(self, group_ids: Sequence[str]) -> dict[str, str | None]:
        from confluent_kafka import KafkaException

        states: dict[str, str | None] = {}
        for start in range(0, len(group_ids), DESCRIBE_BATCH):
            if self.remaining() <= 0:
                break
            batch = list(group_ids[start:start + DESCRIBE_BATCH])
            futures = dict(self.admin.describe_consumer_groups(batch, request_timeout=self._timeout()))
            self._wait(list(futures.values()))
            for group_id, future in futures.items():
                if not future.done():
                    continue
                try:
                    states[group_id] = state_name(future.result(timeout=0).state)
                except KafkaException as exc:
                    log.debug("describe group %s failed: %s", group_id, self.redact(str(exc.args[0])))
        return states

    def committed_offsets(
        self, group_ids: Sequence[str]
    ) -> tuple[dict[str, list[tuple[str, int, int]]], dict[str, str]]:
        """Each group's committed ``(topic, partition, offset)``, and the error of each group
        whose offsets could not be read."""
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

        denied = fault_names("deny", "offsets")
        offsets: dict[str, list[tuple[str, int, int]]] = {}
        errors: dict[str, str] = {}
        pending = list(reversed(group_ids))
        in_flight: dict[str, concurrent.futures.Future] = {}
        while pending or in_flight:
            while pending and len(in_flight) < self.max_in_flight and self.remaining() > 0:
                group_id = pending.pop()
                request = [ConsumerGroupTopicPartitions(group_id)]
                in_flight.update(self.admin.list_consumer_group_offsets(
                    request, request_timeout=self._timeout()))
            if not in_flight or self.remaining() <= 0:
                break
            self._wait(list(in_flight.values()), any_done=True)
            for group_id, future in list(in_flight.items()):
                if not future.done():
                    continue
                del in_flight[group_id]
                if group_id in denied:  # fault point: what an ACL denying the group answers
                    errors[group_id] = DENIED_ERROR
                    continue
                try:
                    answer = future.result(timeout=0)
                except KafkaException as exc:
                    errors[group_id] = error_name(exc.args[0])
                    log.warning("committed offsets of group %s could not be read: %s", group_id,
                                self.redact(str(exc.args[0])))
                    continue
                offsets[group_id] = [
                    (tp.topic, tp.partition, tp.offset)
                    for tp in answer.topic_partitions or ()
                    if tp.error is None and tp.offset >= 0  # negative: no committed offset
                ]
        for group_id in [*in_flight, *pending]:  # the deadline passed first
            errors[group_id] = NOT_ANSWERED_ERROR
        if in_flight or pending:
            log.warning("group capture cut short by the deadline: %d group(s) recorded as %s",
                        len(in_flight) + len(pending), NOT_ANSWERED_ERROR)
        return offsets, errors

    def log_end_offsets(self, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The log end offset of each partition that could be read. A partition the client's
        metadata does not know yet (a topic re-created or grown since the client last looked)
        is asked again once, after a metadata refresh."""
        if not partitions or self.remaining() <= 0:
            return {}
        ends, unknown = self._list_offsets(sorted(partitions))
        if unknown and self.remaining() > 0:
            with contextlib.suppress(Exception):  # the retry below reports what stays unknown
                self.admin.list_topics(timeout=max(min(self.remaining(), 10.0), 0.1))
            again, _ = self._list_offsets(unknown)
            ends.update(again)
        return ends

    def _list_offsets(self, partitions: Sequence[tuple[str, int]]):
        from confluent_kafka import KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}
        futures = self.admin.list_offsets(request, request_timeout=self._timeout())
        self._wait(list(futures.values()))
        ends: dict[tuple[str, int], int] = {}
        unknown: list[tuple[str, int]] = []
        for tp, future in futures.items():
            if not future.done():
                continue
            try:
                ends[(tp.topic, tp.partition)] = future.result(timeout=0).offset
            except KafkaException as exc:
                if exc.args[0].name() in ("_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC"):
                    unknown.append((tp.topic, tp.partition))
                log.debug("log end offset of %s-%d unknown: %s", tp.topic, tp.partition,
                          self.redact(str(exc.args[0])))
        return ends, unknown


def capture_groups(admin, timeout_s: float, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                   redact: Callable[[str], str] = str) -> tuple[bool, tuple[GroupObservation, ...]]:
    """``(groups_complete, groups)`` of the cluster ``admin`` talks to, within ``timeout_s``."""
    return GroupCapture(admin, time.monotonic() + timeout_s, max_in_flight=max_in_flight,
                        redact=redact).run()
