"""Versions of the published tables: where they live, their names, their manifests (status,
history) and the ``CURRENT`` pointer's reading (see :mod:`topic_lineage.warehouse`)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.errors import WarehouseError

MANIFEST = "manifest.json"
STORE_FINGERPRINT = "store_fingerprint"
"""Manifest key: the store listing a version was built from (:mod:`topic_lineage.noop`)."""
WALK_STATE = "_walk_state"
"""A version's saved walks, one file per cluster (:mod:`topic_lineage.scd.walk`)."""
REFERENCES = "file_references"
"""Manifest key, with the home on object storage: the files a version kept of its base, each
by its name in the version (``<table>/<file>``) -> the object that holds it (``<version>/<table>/
<file>`` under the versions folder), the object-store counterpart of a local home's hard links:
a kept file is referenced, never uploaded again. Readers resolve names through it
(:func:`stored_path`, :func:`file_names`); retention keeps a removed version's objects that another version
references (:func:`referenced`)."""
KEEP_ENV = "TOPIC_LINEAGE_KEEP_VERSIONS"
DEFAULT_KEEP = 5

BUILDING, BUILT, VALIDATED, PUBLISHED, REJECTED = (
    "building", "built", "validated", "published", "rejected",
)


__all__ = ["WarehouseError"]  # defined in topic_lineage.errors; named here as always



def version_dir(version: str) -> Path:
    if not version or "/" in version or version.startswith("."):
        raise WarehouseError(f"invalid version name {version!r}")
    return t.versions_dir() / version


def version_path(version: str, table: str) -> Path:
    """Directory of one table of one version (read it as ``<dir>/**/*.parquet``)."""
    return version_dir(version) / table


def init_sql_path() -> Path:
    return t.warehouse_dir() / "init.sql"


def new_version_id() -> str:
    """A version name that sorts by creation time."""
    now = datetime.now(UTC)
    return f"v{now.strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:6]}"


def read_manifest(version: str) -> dict:
    path = version_dir(version) / MANIFEST
    text = storage.home().read_text(path)  # a manifest changes (its status): the home's now
    if text is None:
        raise WarehouseError(
            f"version {version!r} does not exist (no {path}); list versions with "
            "'topic-lineage versions'"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise WarehouseError(f"manifest of version {version!r} is unreadable ({exc})") from None


def write_manifest(version: str, manifest: dict) -> None:
    """Replace a version's manifest (on the object store too: one writer at a time, the task
    that owns the version's next step; publishing is the catalog's compare-and-swap)."""
    storage.home().write_bytes(version_dir(version) / MANIFEST,
                               json.dumps(manifest, indent=2, sort_keys=True, default=str))


def fetch_version(version: str, table: str | None = None) -> Path:
    """The version's directory in the working copy, with every file of it, or of its ``table``
    only (fetched from the object store when missing: a version's files never change; a file it
    references is fetched where its object is and linked in); its directory with a local home."""
    home, folder = storage.home(), version_dir(version)
    listed = home.listing(folder / table if table else folder)
    if table:
        listed = {f"{table}/{name}": found for name, found in listed.items()}
    home.fetch_all(folder / r for r in listed if r != MANIFEST)
    if MANIFEST in listed or table:
        references = read_manifest(version).get(REFERENCES) or {}
        _link_references(version, {name: stored for name, stored in references.items()
                                   if not table or name.startswith(f"{table}/")})
    return folder


def _link_references(version: str, references: dict[str, str]) -> None:
    """Make the working copy's directory of ``version`` hold the files it references."""
    home, root = storage.home(), t.versions_dir()
    wanted = {name: root / stored for name, stored in references.items()
              if not (version_dir(version) / name).exists()}
    home.fetch_all(wanted.values())
    for name, path in wanted.items():
        if not path.exists():
            raise WarehouseError(f"version {version!r} references {home.url_of(path)}, which the "
                                 "store does not have; run 'topic-lineage verify'")
        home.keep(path, version_dir(version) / name)


def stored_path(version: str, path: Path, references: dict[str, str]) -> Path:
    """The working copy's path of the object that holds ``path``, a file of ``version``'s
    directory: the one it references (``references``: its manifest's :data:`REFERENCES`), else
    itself."""
    if not references:
        return Path(path)
    name = Path(path).relative_to(version_dir(version)).as_posix()
    return t.versions_dir() / references[name] if name in references else Path(path)


def file_names(version: str, table: str, references: dict[str, str]) -> list[str]:
    """How Spark names the files of one table of a version: each of its own (one listing: what
    Spark just wrote there too) and each it keeps by ``references`` (its manifest's
    :data:`REFERENCES`), as the home names them to engines (a path, or the object's URL)."""
    home, folder = storage.home(), version_path(version, table)
    own = [r for r in home.listing(folder) if "/" not in r and r.endswith(".parquet")]
    kept = [stored for name, stored in references.items() if name.startswith(table + "/")]
    names = sorted([home.engine_name(folder / r) for r in own]
                   + [home.engine_name(t.versions_dir() / s) for s in kept])
    return names or [home.engine_name(folder)]  # none: Spark reads the (empty) directory


def record_references(version: str, references: dict[str, str]) -> None:
    """Add to the version's manifest the files it keeps by reference (before its files are
    pushed: :func:`push_version` uploads none of them)."""
    if not references:
        return
    manifest = read_manifest(version)
    manifest[REFERENCES] = {**(manifest.get(REFERENCES) or {}), **references}
    write_manifest(version, manifest)


def referenced(manifests: list[dict]) -> set[str]:
    """The objects (under the versions folder) that the versions of ``manifests`` reference."""
    return {stored for m in manifests for stored in (m.get(REFERENCES) or {}).values()}


def tables_of(version: str, references: dict[str, str]) -> set[str]:
    """The tables a version has files of (directories of it; on object storage, one listing and
    the files it keeps by ``references``, its manifest's :data:`REFERENCES`)."""
    names = [*storage.home().listing(version_dir(version)), *references]
    return {r.split("/")[0] for r in names if "/" in r}


def push_version(version: str) -> None:
    """Upload every file of a version written in the working copy (its manifest last, as the
    sign that the rest is there)."""
    folder = version_dir(version)
    kept = json.loads((folder / MANIFEST).read_text()).get(REFERENCES) or {}  # stored elsewhere
    storage.home().push_dir(folder, skip=kept, last=MANIFEST)


def set_status(version: str, status: str, **extra: Any) -> dict:
    manifest = read_manifest(version)
    manifest["status"] = status
    manifest.setdefault("history", []).append(
        {"status": status, "at": now_text()}
    )
    manifest.update(extra)
    write_manifest(version, manifest)
    return manifest


def list_versions() -> list[dict]:
    """Manifests of all versions, oldest first (a directory without manifest is skipped)."""
    names = {r.split("/")[0] for r in storage.home().listing(t.versions_dir())
             if r.count("/") == 1 and r.endswith("/" + MANIFEST)}
    manifests = []
    for name in sorted(names):
        if name.startswith("."):
            continue
        try:
            manifests.append(read_manifest(name))
        except WarehouseError:
            continue
    return sorted(manifests, key=lambda m: (m.get("created_at", ""), m.get("version", "")))


def current_version() -> str | None:
    """The published version, or None when nothing is published yet: the version ``main`` of
    the Iceberg tables holds (:mod:`topic_lineage.warehouse.iceberg`). A home whose versions
    were published before the tables were Iceberg tables names it in its ``CURRENT`` file until
    the next build or publish moves it over (:func:`topic_lineage.warehouse.publish.adopt_legacy`)."""
    from topic_lineage.warehouse import iceberg

    return iceberg.published_version() or legacy_version()


def legacy_version() -> str | None:
    """The version a pre-Iceberg home's ``CURRENT`` file names (None: no such file)."""
    try:
        name = t.current_pointer().read_text().strip()
    except FileNotFoundError:
        return None
    return name or None


def now_text() -> str:
    """The time now as manifests record it (ISO 8601, UTC, ``Z``)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")
