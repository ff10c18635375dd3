"""Where topic-lineage keeps its data: one interface, :class:`Home`, and its two implementations.

``$TOPIC_LINEAGE_HOME`` is a local directory (the default, ``~/.topic-lineage``:
:class:`~topic_lineage.storage.local.LocalHome`) or a prefix on object storage
(``s3://``, ``gs://``, ``abfs://``: :class:`~topic_lineage.storage.object_store.ObjectStoreHome`,
:mod:`topic_lineage.location` parses the URL). Every module that keeps data (the snapshot store
and its claims, versions and manifests, the ledger, namespaces, the quality directory,
retention, the sweep, the no-op check, the walk tasks on the executors) goes through a
:class:`Home`; none asks which kind it has.

A home is named by home-relative names (``/``-separated: ``snapshots/cluster=a/...``), or by
the paths of :attr:`Home.root`, the directory where this process reads and writes files. For a
local home that directory *is* the home; for an object store it is a private cache of it (a
working copy: anything in it can be fetched again, nothing another process needs is kept only
there). Engines that take a directory or a file name (Spark, pyarrow, DuckDB, pyiceberg, Great
Expectations) are given :meth:`Home.engine_name` or :meth:`Home.url_of`.

The operations, each promised by both implementations (``tests/test_storage_contract.py``):

- whole objects: :meth:`~Home.read_bytes`, :meth:`~Home.write_bytes` (replace, whole or not at
  all), :meth:`~Home.create` (only if absent: of two writers of one name exactly one wins),
  :meth:`~Home.exists`, :meth:`~Home.listing`, :meth:`~Home.remove`, :meth:`~Home.remove_tree`;
- files of :attr:`~Home.root`: :meth:`~Home.fetch` (the file, from the store when it is not
  here yet), :meth:`~Home.push` and :meth:`~Home.push_dir` (what was written here, to the home),
  :meth:`~Home.pull_tree` /
  :meth:`~Home.push_tree` (a directory whose files are rewritten, kept in step);
- :meth:`~Home.changed` / :meth:`~Home.change_token`: what tells a reader, cheaply, that
  something under a prefix changed (the no-op build's question);
- :func:`at`: the same interface for another location (a walk task's, named by URL);
  :func:`for_task`: that, for one Spark task, with a working copy that ends with the task.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from topic_lineage import location
from topic_lineage.location import LocationError
from topic_lineage.storage.base import Home, Name
from topic_lineage.storage.local import LocalHome
from topic_lineage.storage.object_store import ObjectStoreHome

_homes: dict[tuple, Home] = {}


def configured() -> Home:
    """The home ``$TOPIC_LINEAGE_HOME`` names (``~/.topic-lineage`` when unset), nothing
    created (a DAG file's parse names URLs under it and touches nothing)."""
    text = os.environ.get(location.HOME_ENV) or str(location.DEFAULT_HOME)
    key = (text, os.environ.get(location.WORK_DIR_ENV), os.environ.get("XDG_CACHE_HOME"),
           os.environ.get("HOME"))
    found = _homes.get(key)
    if found is None:
        found = _homes[key] = at(text)
    return found


def home() -> Home:
    """:func:`configured`, its :attr:`~Home.root` created on first use."""
    found = configured()
    found.root.mkdir(parents=True, exist_ok=True)
    return found


def read_url(url: str) -> bytes:
    """The whole of one file named by path or URL (an Iceberg metadata file the catalog names),
    read where it is. A store's failure is one :class:`~topic_lineage.location.LocationError`
    saying what to check (a refused secret names the variables that hold it)."""
    found = location.parse(url, setting="the file's location")
    if isinstance(found, location.ObjectStore):
        try:
            return location.read_object(found.filesystem(), found.key())
        except (OSError, ValueError) as exc:
            raise location.LocationError(location.describe_failure(found, exc)) from None
    return Path(found).read_bytes()


def at(where: str, *, setting: str = location.HOME_ENV, work_dir: Path | None = None) -> Home:
    """The home at ``where`` (a path or a URL), for a process that is given one by name (a walk
    task on an executor: no ``$TOPIC_LINEAGE_HOME`` of its own); a location it cannot use is
    one :class:`LocationError` naming ``setting``. ``work_dir``: an object store's working copy
    (default: :func:`location.work_dir`)."""
    found = location.parse(where, setting=setting)
    if isinstance(found, location.ObjectStore):
        return ObjectStoreHome(found, work_dir or location.work_dir(found))
    return LocalHome(found)


@contextmanager
def for_task(where: str) -> Iterator[Home]:
    """The home at ``where`` for the duration of one Spark task (a walk task on an executor).

    On object storage its working copy is a new directory in ``TMPDIR``, removed when the task
    ends, whatever ``$TOPIC_LINEAGE_WORK_DIR`` says: a task reads and writes through the store,
    and nothing on an executor's machine would ever clean a lasting copy up (before, each
    build left its walks' saved states and a split cluster's steps in the executors'
    ``~/.cache``). A local home is the home itself."""
    with tempfile.TemporaryDirectory(prefix="topic-lineage-task-", ignore_cleanup_errors=True) as directory:
        yield at(where, work_dir=Path(directory))


__all__ = ["Home", "LocalHome", "LocationError", "Name", "ObjectStoreHome", "at", "configured", "for_task", "home",
           "read_url"]
