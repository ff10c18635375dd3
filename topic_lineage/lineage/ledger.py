"""What was emitted: the keys of the changes a transport accepted, beside the versions.

``warehouse/openlineage/emitted/<n>.json`` holds one batch each: the keys a transport accepted,
the published version they came from, when. Each file is written atomically and durably
(:func:`topic_lineage.fsutil.write_durably`) after its batch was sent, so a failure (a killed
process, a refusing receiver) loses at most the batch in flight, which the next emission sends
again (same events, same run IDs). Nothing here touches the published tables.
``warehouse/openlineage/completed.json`` names the last version whose emission completed (the
DAG's plan reads it: a no-op run still runs ``lineage`` when it is behind).
``warehouse/openlineage/emitted.lock`` keeps two emissions (the DAG's task, the CLI) from
sending the same change twice.

With the home on object storage (:mod:`topic_lineage.storage`) the batches are objects, each
created only if its number is free (a conditional write: of two emissions taking one number,
the second takes the next), read by every emission whatever worker it runs on. The lock is
then only this machine's: two emissions on different workers at the same moment may both send
a change, with the same event and run ID, which lineage tools take as one.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.fsutil import file_lock
from topic_lineage.warehouse.versions import now_text


def ledger_dir() -> Path:
    return t.warehouse_dir() / "openlineage"


def _batches_dir() -> Path:
    return ledger_dir() / "emitted"


def lock_path() -> Path:
    return ledger_dir() / "emitted.lock"


@contextlib.contextmanager
def exclusive() -> Iterator[bool]:
    """Held while an emission sends; yields False (and holds nothing) when another holds it."""
    ledger_dir().mkdir(parents=True, exist_ok=True)
    with file_lock(lock_path(), blocking=False) as acquired:
        yield acquired


def _fetch_batches() -> None:
    """With the home on object storage: every batch into the working copy (each once)."""
    home = storage.home()
    home.fetch_all(_batches_dir() / name for name in home.listing(_batches_dir()))


def emitted_keys() -> set[str]:
    keys: set[str] = set()
    _fetch_batches()
    directory = _batches_dir()
    if not directory.is_dir():
        return keys
    for path in directory.glob("*.json"):
        try:
            keys.update(json.loads(path.read_text())["keys"])
        except (OSError, ValueError, KeyError) as exc:
            raise TopicLineageError(
                f"the OpenLineage ledger file {path} is unreadable ({exc}); move it aside to "
                "send its events again") from None
    return keys


def record(keys: Iterable[str], version: str, transport: str) -> None:
    """Record one batch the transport accepted (atomically, durably)."""
    keys = list(keys)
    if not keys:
        return
    directory = _batches_dir()
    directory.mkdir(parents=True, exist_ok=True)
    _fetch_batches()
    numbers = [int(m.group(1)) for p in directory.glob("*.json")
               if (m := re.fullmatch(r"(\d+)\.json", p.name))]
    number = max(numbers, default=0) + 1
    body = json.dumps({"version": version, "transport": transport, "at": now_text(), "keys": keys})
    while True:
        path = directory / f"{number:08d}.json"
        if storage.home().create(path, body):
            return
        storage.home().fetch(path, refresh=True)  # another emission's batch took the number
        number += 1


def completed() -> str | None:
    """The last version whose every change was emitted (None: none, or unreadable)."""
    try:
        return json.loads(storage.home().read_text(ledger_dir() / "completed.json") or "")["version"]
    except (OSError, ValueError, KeyError):
        return None


def complete(version: str) -> None:
    if completed() != version:
        storage.home().write_bytes(ledger_dir() / "completed.json",
                                   json.dumps({"version": version, "at": now_text()}))
