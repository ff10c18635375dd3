"""Which versions retention removes: by age, from the manifests.

A reader pins the version it reads with a file lock and retention skips a pinned version or a
running build's (:mod:`topic_lineage.warehouse.locks`); on a local disk that reaches every
process, so the periods below default to zero there. Nothing like that reaches across
machines, so with the home on object storage a version is removed only when it is beyond the
newest ``keep`` and has been out of use long enough (defaults below), by the times its
manifests record (UTC, written by the process that made each change):

- the published version: never;
- a version published earlier (status ``published``, no longer ``main``): once the reader
  grace has passed since the next publish after its own last one (a reader that started on it,
  on any machine, has finished by then); when no later publish is recorded, never;
- a version still ``building``: once its manifest has not changed for the stale-build period
  (a build takes far less; only a killed build's version gets that old);
- any other (``built``, ``validated``, ``rejected``, ``failed``): once the reader grace has
  passed since its last status change (the gate or a ``query --version`` may be reading it).

:func:`removable` is that rule, with no I/O; :func:`topic_lineage.warehouse.publish.apply_retention`
applies it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from topic_lineage.errors import WarehouseError

GRACE_ENV = "TOPIC_LINEAGE_READER_GRACE"
"""How long a version out of use stays for readers on other machines (default 1 h); also the
age below which the sweep leaves an unreferenced object alone (:mod:`topic_lineage.sweep`)."""
STALE_BUILD_ENV = "TOPIC_LINEAGE_STALE_BUILD"
"""How long a version's manifest may stay ``building`` unchanged before its build counts as
dead (default 24 h)."""
DEFAULT_GRACE = timedelta(hours=1)
DEFAULT_STALE_BUILD = timedelta(hours=24)

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(name: str, default: timedelta) -> timedelta:
    """The duration ``$name`` gives (``90``, ``90s``, ``15m``, ``1h``, ``2d``), or ``default``."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhd]?)", text.lower())
    if not match:
        raise WarehouseError(f"${name}={text!r}: give a duration such as 3600, 90s, 15m, 1h or 2d")
    return timedelta(seconds=float(match[1]) * _UNITS[match[2]])


@dataclass(frozen=True)
class Ages:
    """The two periods of the rule (see the module)."""

    grace: timedelta = DEFAULT_GRACE
    stale_build: timedelta = DEFAULT_STALE_BUILD

    @classmethod
    def from_env(cls) -> Ages:
        """The periods the environment sets, else the defaults above (what the sweep waits:
        a file younger than the grace may be a running step's, on any home)."""
        return cls(duration(GRACE_ENV, DEFAULT_GRACE), duration(STALE_BUILD_ENV, DEFAULT_STALE_BUILD))

    @classmethod
    def for_retention(cls) -> Ages:
        """The periods the environment sets, else the home's (a local home's readers and builds
        hold locks every process there sees: no period; an object store's do not)."""
        from topic_lineage import storage

        home = storage.home()
        return cls(duration(GRACE_ENV, home.reader_grace), duration(STALE_BUILD_ENV, home.stale_build))


def parse_time(text: str | None) -> datetime | None:
    """A time as manifests record it (ISO 8601, ``Z``); None when absent or unreadable."""
    if not text:
        return None
    try:
        found = datetime.fromisoformat(str(text))  # 3.11 reads the "Z"
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def _times(manifest: dict, status: str | None = None) -> list[datetime]:
    """The times of the manifest's history entries (of ``status`` only, when given)."""
    found = [parse_time(entry.get("at")) for entry in manifest.get("history") or []
             if status is None or entry.get("status") == status]
    return [time for time in found if time is not None]


def last_change(manifest: dict) -> datetime | None:
    """When the version's manifest last changed status (its creation when it never did)."""
    times = _times(manifest) + [t for t in [parse_time(manifest.get("created_at"))] if t]
    return max(times, default=None)


def out_of_use_since(manifest: dict, manifests: Iterable[dict]) -> datetime | None:
    """Since when a version that is not the published one may have had no new reader: for a
    version published earlier, the first publish of any version after its own last one; for
    any other, its last status change. None: unknown (then it is kept)."""
    if manifest.get("status") != "published":
        return last_change(manifest)
    own = max(_times(manifest, "published"), default=None)
    if own is None:
        return None
    later = [time for other in manifests if other.get("version") != manifest.get("version")
             for time in _times(other, "published") if time > own]
    return min(later, default=None)


def removable(manifests: list[dict], current: str | None, now: datetime, keep: int,
              ages: Ages, build_running: bool = False) -> list[str]:
    """The versions retention removes now (see the module): of ``manifests`` (oldest first),
    never ``current``, only those beyond the newest ``keep``, and only when old enough; no
    version still ``building`` while ``build_running`` (a build this machine's lock shows)."""
    keep = max(keep, 1)
    excess = len(manifests) - keep
    candidates = [m for m in manifests if m.get("version") != current][: max(excess, 0)]
    removed = []
    for manifest in candidates:
        if manifest.get("status") == "building" and build_running:
            continue
        if manifest.get("status") == "building":
            since, wait = last_change(manifest), ages.stale_build
        else:
            since, wait = out_of_use_since(manifest, manifests), ages.grace
        if since is not None and now - since >= wait:
            removed.append(manifest["version"])
    return removed
