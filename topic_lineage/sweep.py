"""Objects on an object-store home that nothing references: what a killed step leaves behind.

Every write to the store is a whole object under a unique name, and a step that is killed
half-way leaves only objects that nothing refers to (issue #45). What each step can leave:

- a build killed while walking or staging: its version, status ``building`` (retention removes
  it once it is stale, :mod:`topic_lineage.warehouse.retention`), and from staging the
  Iceberg manifest files and manifest list of a commit that never reached the catalog;
- a commit that lost a race to another writer (two builds staging at once): the same;
- retention killed while removing a version: the version's files without its manifest (the
  manifest goes last, so usually the whole version is still there and retention takes it
  again), and Iceberg snapshots whose branch was removed but which were not expired yet;
- a store (capture, import) killed between its claim and its file: the claim (a hidden
  ``.<file>.claim`` object) and perhaps the snapshot's consumer-group file, without the file;
- a quality gate killed between uploading its results and pages and replacing the quality
  directory's index (:meth:`topic_lineage.storage.Home.push_tree`): files the index does not name,
  which no reader fetches;
- the lineage export leaves nothing: each batch is recorded by one conditional write after the
  receiver accepted it.

:func:`find` lists them by kind; :func:`clean` removes them. Neither touches an object younger
than the reader grace (``$TOPIC_LINEAGE_READER_GRACE``: a step elsewhere may be writing it and
about to reference it), nor anything a version's manifest or a table's metadata reaches: an
Iceberg file counts as unreferenced only when the table's current metadata, its metadata log
and every snapshot's manifest list (and manifests) have been read and none names it. With a
local home there is nothing to sweep (files are renamed into place; retention's file locks
cover the rest).
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.warehouse import retention

log = logging.getLogger("topic_lineage.sweep")

VERSIONS_WITHOUT_MANIFEST = "version files without a manifest"
ORPHAN_CLAIMS = "snapshot claims without a snapshot"
ORPHAN_GROUP_FILES = "consumer-group files without a snapshot"
ICEBERG_FILES = "Iceberg files no table metadata reaches"
ICEBERG_SNAPSHOTS = "Iceberg snapshots no branch reaches"
QUALITY_FILES = "quality files the quality index does not name"
KINDS = (VERSIONS_WITHOUT_MANIFEST, ORPHAN_CLAIMS, ORPHAN_GROUP_FILES, QUALITY_FILES, ICEBERG_SNAPSHOTS,
         ICEBERG_FILES)
WAREHOUSE_KINDS = (VERSIONS_WITHOUT_MANIFEST, ICEBERG_SNAPSHOTS, ICEBERG_FILES)

_MANIFEST_FILE = re.compile(r"^(?P<commit>[0-9a-f-]{36})-m\d+\.avro$")
_MANIFEST_LIST = re.compile(r"^snap-\d+-\d+-(?P<commit>[0-9a-f-]{36})\.avro$")


@dataclass
class Found:
    """Unreferenced objects by kind (home-relative name -> size), those left alone because
    they are younger than the grace (kind -> count), and Iceberg snapshots no branch reaches
    (table -> IDs)."""

    objects: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    young: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    snapshots: dict[str, list[int]] = field(default_factory=dict)
    kinds: tuple[str, ...] = KINDS

    @property
    def total_count(self) -> int:
        return sum(len(found) for found in self.objects.values()) + sum(map(len, self.snapshots.values()))

    def lines(self) -> list[str]:
        """One line per kind: count and bytes, and how many were left for being too young."""
        out = []
        for kind in self.kinds:
            if kind == ICEBERG_SNAPSHOTS:
                count, size = sum(map(len, self.snapshots.values())), 0
            else:
                count, size = len(self.objects.get(kind, {})), sum(self.objects.get(kind, {}).values())
            young = self.young.get(kind, 0)
            out.append(f"{kind}: {count} ({_bytes(size)})"
                       + (f"; {young} younger than the grace left alone" if young else ""))
        return out

    def summary(self) -> str:
        return "; ".join(line for line in self.lines() if not line.split(": ", 1)[1].startswith("0 "))


def _bytes(size: int) -> str:
    return f"{size} bytes" if size < 1024 else f"{size / 1024:.1f} KiB" if size < 1 << 20 \
        else f"{size / (1 << 20):.1f} MiB"


def find(*, warehouse_only: bool = False, now: datetime | None = None,
         ages: retention.Ages | None = None) -> Found:
    """The unreferenced files of the home older than the grace. ``warehouse_only``: the versions and the Iceberg tables, not the snapshot store
    (what retention after a publish sweeps; listing the store's claims costs a request per
    1,000 snapshots)."""
    found = Found(kinds=WAREHOUSE_KINDS if warehouse_only else KINDS)
    now = now or datetime.now(UTC)
    ages = ages or retention.Ages.from_env()
    cutoff_ns = int((now - ages.grace).timestamp() * 1e9)

    def add(kind: str, relative: str, size: int, mtime_ns: int) -> None:
        if mtime_ns and mtime_ns > cutoff_ns:
            found.young[kind] += 1
        else:
            found.objects[kind][relative] = size

    _versions_without_manifest(add)
    if not warehouse_only:
        _store_leftovers(add)
        _quality_leftovers(add)
    _iceberg_leftovers(found, add, cutoff_ns)
    return found


def _versions_without_manifest(add) -> None:
    """Files under ``warehouse/versions/<version>/`` where no ``manifest.json`` is: a build
    writes its manifest before anything else and retention removes it last. A version whose
    files are not all older than the grace is left whole, and a file that a version with a
    manifest keeps by reference stays (retention left it for that version:
    ``warehouse.REFERENCES``)."""
    from topic_lineage.warehouse import versions

    home = storage.home()
    root = home.relative(t.versions_dir())
    by_version: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    for relative, stat in home.listing(root, hidden=True).items():
        name, _, rest = relative.partition("/")
        if rest:
            by_version[name][rest] = stat
    without = {name: files for name, files in by_version.items() if versions.MANIFEST not in files}
    # the manifests are read only when there is something to sweep (a GET each)
    referenced = versions.referenced(versions.list_versions()) if without else set()
    for name, files in sorted(without.items()):
        newest = max(mtime for _, mtime in files.values())
        for rest, (size, _) in sorted(files.items()):
            if f"{name}/{rest}" not in referenced:
                add(VERSIONS_WITHOUT_MANIFEST, f"{root}/{name}/{rest}", size, newest)


def _store_leftovers(add) -> None:
    """Claims (``.<file>.claim``) and consumer-group files whose snapshot file is not stored."""
    home = storage.home()
    snapshots = home.listing("snapshots", hidden=True)
    for relative, (size, mtime) in sorted(snapshots.items()):
        folder, _, name = relative.rpartition("/")
        if name.startswith(".") and name.endswith(".claim"):
            stored = f"{folder}/{name[1:].removesuffix('.claim')}"
            if stored not in snapshots:
                add(ORPHAN_CLAIMS, f"snapshots/{relative}", size, mtime)
    for relative, (size, mtime) in sorted(home.listing("group_snapshots", hidden=True).items()):
        if relative.endswith(".parquet") and relative not in snapshots:
            add(ORPHAN_GROUP_FILES, f"group_snapshots/{relative}", size, mtime)


def _quality_leftovers(add) -> None:
    """Files of the quality directory that its index does not name (readers fetch only what it
    names, :meth:`topic_lineage.storage.Home.pull_tree`); nothing without an index."""
    home = storage.home()
    folder = home.relative(t.quality_dir())
    files = home.listing(folder)  # the index and a process's own files are hidden
    named = home.tree_index(folder) if files else None
    if named is None:  # no index, or not ours: nothing is proven unreferenced
        return
    for name, (size, mtime) in sorted(files.items()):
        if name not in named:
            add(QUALITY_FILES, f"{folder}/{name}", size, mtime)


def _iceberg_leftovers(found: Found, add, cutoff_ns: int) -> None:
    """Per table whose metadata is under the home: snapshots no branch reaches (older than the
    grace), and files of its ``metadata/`` folder that neither its metadata, its metadata log
    nor any snapshot's manifest list names."""
    from topic_lineage.location import LocationError
    from topic_lineage.warehouse import iceberg

    home = storage.home()
    for table in t.TABLES:
        tbl = iceberg.load_table(table)
        if tbl is None:
            continue
        try:
            folder = home.name_of(tbl.metadata.location.rstrip("/") + "/metadata")
        except LocationError:  # the catalog keeps this table's metadata outside the home
            continue
        with iceberg._calling(f"reading the metadata of {iceberg.NAMESPACE}.{table}"):
            _table_leftovers(table, tbl, folder, found, add, cutoff_ns)


def _table_leftovers(table: str, tbl, folder: str, found: Found, add, cutoff_ns: int) -> None:
    where = storage.home()
    stale = _unreached_snapshots(tbl, cutoff_ns // 1_000_000)
    if stale:
        found.snapshots[table] = stale
    files = where.listing(folder, hidden=True)
    reached = {tbl.metadata_location, *(e.metadata_file for e in tbl.metadata.metadata_log)}
    reached |= {s.manifest_list for s in tbl.metadata.snapshots}
    reached = {_name_in(folder, where, path) for path in reached}
    commits = {m["commit"] for name in reached if (m := _MANIFEST_LIST.match(name or ""))}
    # a manifest written by the commit of a reached manifest list is that list's: kept
    unreached = {name for name in set(files) - reached
                 if not ((m := _MANIFEST_FILE.match(name)) and m["commit"] in commits)}
    if any(_MANIFEST_FILE.match(name) for name in unreached):
        # any other manifest is unreferenced only if no manifest list names it: read them all
        unreached -= {_name_in(folder, where, m.manifest_path)
                      for s in tbl.metadata.snapshots for m in s.manifests(tbl.io)}
    for name in sorted(unreached):
        size, mtime = files[name]
        add(ICEBERG_FILES, f"{folder}/{name}", size, mtime)


def _name_in(folder: str, where, path: str) -> str | None:
    """A file's name relative to the table's metadata folder (None: elsewhere)."""
    try:
        relative = where.name_of(path)
    except Exception:  # noqa: BLE001 - not under the home: not ours to sweep
        return None
    return relative.removeprefix(folder + "/") if relative.startswith(folder + "/") else None


def _unreached_snapshots(tbl, cutoff_ms: int) -> list[int]:
    """Snapshots older than ``cutoff_ms`` that no branch or tag reaches (its head or an
    ancestor: ``main``'s ancestry names the published version when another writer committed
    on top of ours). pyiceberg 0.12's ``expire_snapshots().older_than()`` protects only the
    heads, so the set is made here and expired with ``by_ids``."""
    from pyiceberg.table.snapshots import ancestors_of

    reached = set()
    for ref in tbl.metadata.refs.values():
        head = tbl.metadata.snapshot_by_id(ref.snapshot_id)
        reached |= {s.snapshot_id for s in ancestors_of(head, tbl.metadata)} if head else set()
    return sorted(s.snapshot_id for s in tbl.metadata.snapshots
                  if s.snapshot_id not in reached and s.timestamp_ms < cutoff_ms)


def clean(found: Found) -> Found:
    """Remove what :func:`find` found: expire the unreached snapshots (a catalog commit per
    table; a table another writer changed meanwhile is left for the next sweep), then delete
    the objects. Returns what was removed."""
    from topic_lineage.errors import TopicLineageError
    from topic_lineage.warehouse import iceberg

    removed = Found(kinds=found.kinds, young=found.young)
    for table, ids in found.snapshots.items():
        try:
            with iceberg._calling(f"expiring unreferenced snapshots of {iceberg.NAMESPACE}.{table}"):
                iceberg.load_table(table).maintenance.expire_snapshots().by_ids(ids).commit()
        except TopicLineageError as exc:
            log.warning("%s", exc)
            continue
        removed.snapshots[table] = ids
    for kind, files in found.objects.items():
        storage.home().remove(sorted(files))
        removed.objects[kind] = dict(files)
    return removed
