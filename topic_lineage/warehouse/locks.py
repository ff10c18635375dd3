"""The build and publish locks, and readers pinning the version they read (retention skips a
pinned version)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Collection, Iterator
from pathlib import Path

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.fsutil import file_lock
from topic_lineage.warehouse.versions import (
    MANIFEST,
    WarehouseError,
    current_version,
    fetch_version,
    version_dir,
)


class BuildLockedError(WarehouseError):
    """Another build holds the build lock."""


def _lock_path(name: str) -> Path:
    return t.locks_dir() / f"{name}.lock"


def _build_locked() -> BuildLockedError:
    return BuildLockedError(f"another build is running (lock {_lock_path('build')}); wait for it to finish "
                            "and run the build again")


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Held for the whole of a build: a second build at the same time fails at once."""
    with file_lock(_lock_path("build"), blocking=False) as acquired:
        if not acquired:
            raise _build_locked()
        yield


def refuse_if_building() -> None:
    """Raise :class:`BuildLockedError` when a build holds the build lock now: what a build
    checks before it starts a JVM it would not use (its :func:`build_lock` still decides)."""
    if build_running():
        raise _build_locked()


def publish_lock() -> contextlib.AbstractContextManager[bool]:
    """Held while a manifest's verdict is recorded or ``main`` of the tables moves (waits its
    turn; across machines, the catalog's compare-and-swap on ``main`` decides)."""
    return file_lock(_lock_path("publish"))


def build_running() -> bool:
    """Whether a build holds the build lock now."""
    with file_lock(_lock_path("build"), blocking=False) as acquired:
        return not acquired


def _reader_lock(version: str) -> Path:
    return t.locks_dir() / "readers" / f"{version}.lock"


@contextlib.contextmanager
def reading(version: str | None = None) -> Iterator[str | None]:
    """Pin a version for the duration of a read; yield its name (None: nothing is published).

    Without ``version``, the published one. The pin is a shared lock on
    ``locks/readers/<version>.lock``; retention skips a version while any reader holds it, so a
    query or UI request that started on a version finishes on it even if a publish moves the
    pointer on meanwhile (the next retention removes it).
    """
    while True:
        name = version or current_version()
        if name is None:
            yield None
            return
        version_dir(name)  # validates the name
        fetch_version(name)  # into the working copy, where the home has one
        with file_lock(_reader_lock(name), shared=True):
            # Missing yet still named: not retention (it never removes the current version
            # or a named one being read); the caller reports it.
            if version_dir(name).is_dir() or version is not None or current_version() == name:
                yield name
                return
        # retention removed the version between reading the pointer and pinning it: the
        # pointer names a newer one now


def remove_unless_read(name: str, referenced: Collection[str] = ()) -> bool:
    """Remove version ``name`` unless a reader has pinned it (then False, nothing removed); its
    files that other versions reference (``referenced``, names under the versions folder) stay,
    until none does (then the sweep takes them, :mod:`topic_lineage.sweep`)."""
    path = _reader_lock(name)
    with file_lock(path, blocking=False) as acquired:
        if not acquired:
            return False
        from topic_lineage.warehouse import iceberg

        iceberg.drop_version(name)  # its branch and snapshots first: no table names its files
        # its manifest last: a removal cut short leaves a version retention finds again
        home = storage.home()
        root = home.relative(t.versions_dir())
        home.remove_tree(version_dir(name), last=MANIFEST, keep={f"{root}/{stored}" for stored in referenced})
        shutil.rmtree(version_dir(name), ignore_errors=True)  # what the working copy has of it
        path.unlink(missing_ok=True)
    return True
