"""Named fault points for the fault suite (tests/test_faults.py) and the capture tests.

Set ``TOPIC_LINEAGE_FAULT`` in a process's environment; several faults are separated by ``;``.
Without the variable nothing here does anything.

Build stages (``<action>@<stage>``):

- ``kill@<stage>``: the process kills itself with SIGKILL when it reaches the stage (what a crash,
  an OOM kill or ``kill -9`` does: no cleanup, no exception handlers);
- ``pause@<stage>``: it creates ``$TOPIC_LINEAGE_HOME/fault-<stage>.reached`` and waits until
  ``fault-<stage>.release`` exists there (at most 10 minutes), so a test can act in between.

  Stages: ``write`` (tables half written: snapshot_runs done, topic_incarnations not yet),
  ``validate`` (all written, before the quality gate), ``publish`` (``main`` of every table but
  ``topic_incarnations``, which names the published version, moved to the new version), ``read`` (a reader, ``topic-lineage query``
  or the UI loading a version, has pinned its version and not yet read the files), ``stage``
  (an Iceberg snapshot of the version being staged: its manifest files written, its commit not
  made) and ``store`` (with the home on object storage, a snapshot being stored: its claim and
  its group file written, its file not yet). Without the variable this does nothing.

Live capture, for what an authorizing broker does and the local broker (no ACLs) cannot
(``<action>@<stage>:NAME[,NAME...]``):

- ``hide@list:NAMES``: the all-topics Metadata listing leaves these topics out, as Kafka does for
  every topic the principal may not DESCRIBE;
- ``deny@describe:NAMES``: describing these topics answers ``TOPIC_AUTHORIZATION_FAILED``. The
  broker is still asked; its answer is replaced (a client-side failure such as a timeout is kept,
  as it would be under a real ACL).

Consumer-group capture (contract R8-R10), likewise:

- ``fail@groups``: listing the consumer groups fails (as a broker that refuses it, or a listing
  cut short, does): the snapshot's ``groups_complete`` is false;
- ``deny@offsets:GROUPS``: fetching these groups' committed offsets answers
  ``GROUP_AUTHORIZATION_FAILED`` (the broker is still asked).

Topic names cannot contain ``,``, ``;`` or ``:`` (Kafka allows ``[a-zA-Z0-9._-]``).
"""

from __future__ import annotations

import os
import signal
import time

FAULT_ENV = "TOPIC_LINEAGE_FAULT"
STAGES = ("write", "validate", "publish", "read", "stage", "store")
CAPTURE_FAULTS = (("hide", "list"), ("deny", "describe"), ("fail", "groups"), ("deny", "offsets"))


def _faults() -> list[tuple[str, str, str]]:
    """``(action, stage, argument)`` of every fault in the environment variable."""
    found = []
    for entry in os.environ.get(FAULT_ENV, "").split(";"):
        action, _, rest = entry.strip().partition("@")
        stage, _, argument = rest.partition(":")
        if action and stage:
            found.append((action, stage, argument))
    return found


def fault_point(stage: str) -> None:
    for action, at, _ in _faults():
        if at != stage:
            continue
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "pause":
            from topic_lineage import tables as t

            home = t.home()
            (home / f"fault-{stage}.reached").touch()
            deadline = time.monotonic() + 600
            while not (home / f"fault-{stage}.release").exists() and time.monotonic() < deadline:
                time.sleep(0.1)


def fault_names(action: str, stage: str) -> frozenset[str]:
    """The topic names of every ``<action>@<stage>:NAMES`` fault set (empty without one)."""
    return frozenset(
        name.strip()
        for fault_action, at, argument in _faults()
        if (fault_action, at) == (action, stage)
        for name in argument.split(",")
        if name.strip()
    )


def fault_set(action: str, stage: str) -> bool:
    """Whether ``<action>@<stage>`` is set (with or without names)."""
    return any((fault_action, at) == (action, stage) for fault_action, at, _ in _faults())
