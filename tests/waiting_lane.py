"""The waiting lane: one more pytest-xdist worker, for the test files that mostly wait.

The suite is CPU-bound on two cores, but a few files spend most of their time waiting: on
SeaweedFS's start (about 13 s, its filer joining its master), on a killed server's retries and
on timeouts they provoke. On one of the two workers, such a file left a core idle while it
waited (issue #52: ``tests/test_object_store_faults.py`` used 46 CPU-seconds in 110 s). With
``TOPIC_LINEAGE_WAITING_LANE=1`` (``scripts/test.sh`` sets it for the whole suite) the last
worker is a lane of its own: it takes only the files of :data:`FILES`, while the others take
everything else, as ``--dist loadfile`` would (a file stays on one worker, in collection order).

Nothing waits on the lane: when it has no file left it ends, and when the other workers have
none left they take the lane's (a run of a few files, or a lane worker that crashed).
"""

from __future__ import annotations

import os

from xdist.scheduler import LoadFileScheduling

ENV = "TOPIC_LINEAGE_WAITING_LANE"

# Each with its wall time and CPU-seconds (its own processes) in a fresh clone's whole suite
# (issue #52, 2026-12-05, 688e6af, two workers).
FILES = (
    "test_object_store_faults.py",  # 110.2 s, 46.3 CPU-s: a killed server's retries, 4 server starts
    "test_s3_server.py",  # 31.1 s, 6.8 CPU-s: SeaweedFS starts, retries with backoff
    "test_storage_contract.py",  # 23.7 s, 6.8 CPU-s: the S3, GCS and Azure servers' answers
    "test_airflow_db_check.py",  # 4.9 s, under 1 CPU-s: connection timeouts
)


def wanted(config) -> bool:
    """Whether this run has a waiting lane: asked for, with workers besides it."""
    workers = getattr(config.option, "numprocesses", None)
    return os.environ.get(ENV) == "1" and isinstance(workers, int) and workers >= 2


def on_lane(scope: str) -> bool:
    """Whether a work unit (a test file's node ID) belongs on the waiting lane."""
    return scope.rsplit("/", 1)[-1] in FILES


class WaitingLaneScheduling(LoadFileScheduling):
    """``--dist loadfile`` with the last worker (``gw<N-1>``) kept for the files of :data:`FILES`."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        self.lane_id = f"gw{self.numnodes - 1}"

    def _next_unit(self, node) -> str | None:
        """The first unit in the queue this node takes: the lane's on the lane, else any other
        (the lane's too once nothing else is left)."""
        if node.gateway.id == self.lane_id:
            return next((scope for scope in self.workqueue if on_lane(scope)), None)
        mine = next((scope for scope in self.workqueue if not on_lane(scope)), None)
        return mine if mine is not None else next(iter(self.workqueue), None)

    def _assign_work_unit(self, node) -> None:
        scope = self._next_unit(node)
        if scope is None:
            return
        self.workqueue.move_to_end(scope, last=False)  # xdist's own assigns the queue's first
        super()._assign_work_unit(node)

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        if self._next_unit(node) is None:  # nothing left that this node takes
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 2:
            return
        self._assign_work_unit(node)
