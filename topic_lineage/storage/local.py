"""A home on the local disk: its directory is the home itself (no working copy, nothing to fetch
or push). Files are replaced by a hidden temporary file renamed into place (durably), and
created only if absent by a hard link of such a file, which fails when the name is taken."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Collection, Iterable
from datetime import timedelta
from pathlib import Path

from topic_lineage.fsutil import write_durably
from topic_lineage.storage.base import Home, Name


class LocalHome(Home):
    reader_grace = timedelta(0)  # readers pin a version with a lock every process here sees
    stale_build = timedelta(0)  # a running build holds a lock every process here sees
    shared_catalog_required = False

    kind = "local disk"
    connection_types = None

    def __init__(self, root: Path):
        self.root = Path(root)
        self.url = self.root.as_uri()
        self.location = str(self.root)

    def __repr__(self) -> str:
        return f"LocalHome({str(self.root)!r})"

    def url_of(self, name: Name) -> str:
        return self.path(name).as_uri()

    def engine_name(self, name: Name) -> str:
        return str(self.path(name))

    def from_engine_name(self, text: str) -> Path:
        from urllib.parse import unquote, urlparse

        from topic_lineage import location

        if text.startswith("file:"):
            return Path(unquote(urlparse(text).path))
        if location.is_url(text):
            raise location.LocationError(f"{text} is not under {self.url}")
        return Path(text)

    def exists(self, name: Name) -> bool:
        return self.path(name).is_file()

    def listing(self, directory: Name, *, hidden: bool = False) -> dict[str, tuple[int, int]]:
        top = self.path(directory)
        found: dict[str, tuple[int, int]] = {}
        for folder, _, files in os.walk(top):
            for file in files:
                if not hidden and file.startswith((".", "_")):
                    continue
                path = Path(folder) / file
                with contextlib.suppress(FileNotFoundError):  # removed while listed
                    info = path.stat()
                    found[path.relative_to(top).as_posix()] = (info.st_size, info.st_mtime_ns)
        return found

    def write_bytes(self, name: Name, data: bytes | str) -> None:
        write_durably(self.path(name), data)

    def write_parquet(self, name: Name, table) -> None:
        import pyarrow.parquet as pq

        target = self.path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        hidden = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"  # Spark and DuckDB skip it
        try:
            pq.write_table(table, hidden, compression="zstd")
            os.replace(hidden, target)
        finally:
            hidden.unlink(missing_ok=True)

    def create(self, name: Name, data: bytes | str) -> bool:
        target = self.path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.new"
        write_durably(tmp, data)
        try:
            os.link(tmp, target)  # atomic, and refused when the name is taken
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def keep(self, stored: Name, target: Name) -> bool:
        source, path = self.path(stored), self.path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, path)  # a hard link: the same file, under the version's name
        except FileExistsError:
            pass
        except OSError:  # no hard links here
            shutil.copy2(source, path)
        return False

    def remove(self, names: Iterable[Name]) -> None:
        for name in names:
            self.path(name).unlink(missing_ok=True)

    def remove_tree(self, directory: Name, *, last: str | None = None, keep: Collection[str] = ()) -> None:
        top, prefix = self.path(directory), self.relative(directory)
        kept = {self.relative(k) for k in keep}
        names = [n for n in self.listing(directory, hidden=True) if f"{prefix}/{n}" not in kept]
        self.remove(f"{prefix}/{n}" for n in names if n != last)
        if last in names:
            self.remove([f"{prefix}/{last}"])
        for folder, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):  # the empty folders
            with contextlib.suppress(OSError):
                os.rmdir(folder)

    def fetch(self, name: Name, *, refresh: bool = False) -> Path | None:
        path = self.path(name)
        return path if path.exists() else None

    def push(self, name: Name, source: Path | None = None) -> None:
        if source is not None and Path(source) != self.path(name):
            write_durably(self.path(name), Path(source).read_bytes())

    def push_dir(self, directory: Name, *, skip: Collection[str] = (), last: str | None = None) -> None:
        return None  # written in place

    def pull_tree(self, directory: Name) -> None:
        return None  # the directory is the home's

    def push_tree(self, directory: Name) -> None:
        return None

    def tree_index(self, directory: Name) -> dict[str, str] | None:
        return None  # nothing is named: the directory is the truth

    def change_token(self, directory: Name) -> dict[str, tuple[int, int]]:
        # a file is never rewritten in place (a new one is renamed in, a removed one leaves):
        # the listing's sizes and times show every change, whoever made it
        return self.listing(directory)

    def changed(self, directory: Name) -> None:
        return None  # the listing already shows it
