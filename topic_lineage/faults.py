"""Named fault points for the fault suite (tests/test_faults.py): kill or pause a build at a stage.

Set ``TOPIC_LINEAGE_FAULT=<action>@<stage>`` in a build's environment:

- ``kill@<stage>``: the process kills itself with SIGKILL when it reaches the stage (what a crash,
  an OOM kill or ``kill -9`` does: no cleanup, no exception handlers);
- ``pause@<stage>``: it creates ``$TOPIC_LINEAGE_HOME/fault-<stage>.reached`` and waits until
  ``fault-<stage>.release`` exists there (at most 10 minutes), so a test can act in between.

Stages: ``write`` (tables half written: snapshot_runs done, topic_incarnations not yet),
``validate`` (all written, before the quality gate), ``publish`` (the new pointer is written to a
temporary file, not yet renamed over ``CURRENT``), ``read`` (a reader, ``topic-lineage query`` or
the UI loading a version, has pinned its version and not yet read the files). Without the
variable this does nothing.
"""

from __future__ import annotations

import os
import signal
import time

FAULT_ENV = "TOPIC_LINEAGE_FAULT"
STAGES = ("write", "validate", "publish", "read")


def fault_point(stage: str) -> None:
    wanted = os.environ.get(FAULT_ENV, "")
    if not wanted:
        return
    action, _, at = wanted.partition("@")
    if at != stage:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "pause":
        from topic_lineage import tables as t

        home = t.home()
        (home / f"fault-{stage}.reached").touch()
        deadline = time.monotonic() + 600
        while not (home / f"fault-{stage}.release").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
