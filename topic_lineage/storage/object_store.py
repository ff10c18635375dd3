"""A home on object storage (S3, GCS, Azure through pyarrow's file systems): the store is the
truth, and :attr:`ObjectStoreHome.root` is this process's working copy of what it reads and
writes, a private cache (:func:`topic_lineage.location.work_dir`). Files keep the home's
layout: the working copy's ``<root>/<name>`` is the object ``<home URL>/<name>``.

What is written is whole and immutable under a unique name (a snapshot file, a version's data
part): :meth:`~ObjectStoreHome.push` uploads it in one piece, so a reader sees all of it or
nothing, and :meth:`~ObjectStoreHome.create` writes it only when no object has that name (S3's
``If-None-Match: *``), so of two writers of one name exactly one wins. :meth:`fetch` copies an
object to the working copy once (an immutable object never changes). The few small files that
change (a version's manifest) have one writer at a time (the task that owns the version's next
step) and are replaced whole. The one thing that must be atomic across writers, which version
is published, is the catalog's compare-and-swap (:mod:`topic_lineage.warehouse.iceberg`).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

from topic_lineage import location
from topic_lineage.fsutil import write_durably
from topic_lineage.location import LocationError, ObjectStore
from topic_lineage.storage.base import Home, Name

TRANSFER_THREADS = 16
"""Objects fetched or pushed at once (each a request of its own: latency, not bandwidth, bounds
a store of many small snapshot files)."""

GENERATION = "_generation"
"""Under a directory whose changes are told by a token (:meth:`ObjectStoreHome.changed`): an
object every change replaces (after the change), so that a no-op build is told by one request,
however many files are stored."""


@contextlib.contextmanager
def _translated(where: ObjectStore, what: str) -> Iterator[None]:
    """The store's errors as one :class:`LocationError` line: what was being done, and what to
    check."""
    try:
        yield
    except LocationError:
        raise
    except (OSError, ValueError) as exc:
        raise LocationError(f"{what}: {location.describe_failure(where, exc)}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("botocore"):
            raise LocationError(f"{what}: {location.describe_failure(where, exc)}") from None
        raise


TREE_INDEX = ".tree-index.json"
"""In a directory kept in step with the store by :meth:`~ObjectStoreHome.pull_tree` and
:meth:`~ObjectStoreHome.push_tree`: an object naming each of its files with a digest of its
content (the store's listing cannot tell a file rewritten within the same second at the same
size)."""
TREE_STATE = ".tree-state.json"
"""The working copy's record of such a directory: each file's digest and its size and time here
when it last agreed with the store."""


class ObjectStoreHome(Home):
    reader_grace = timedelta(hours=1)  # no lock reaches a reader on another machine
    stale_build = timedelta(hours=24)
    shared_catalog_required = True

    def __init__(self, store: ObjectStore, work_dir: Path):
        self.store = store
        self.root = Path(work_dir)
        self.url = self.location = store.url
        self.kind = store.kind
        # an Airflow aws connection gives S3 credentials; GCS and Azure take the worker's
        self.connection_types = ("aws",) if store.kind == "S3" else ()

    @contextlib.contextmanager
    def private_working_copy(self) -> Iterator[None]:
        """A new, empty working copy in ``TMPDIR``, removed at the end, unless
        ``TOPIC_LINEAGE_WORK_DIR`` is configured (a worker with a lasting cache). Nothing in it
        is needed later: what the process wrote is on the store and in the catalog."""
        if os.environ.get(location.WORK_DIR_ENV):
            yield
            return
        import shutil
        import tempfile

        directory = tempfile.mkdtemp(prefix="topic-lineage-task-")
        before = os.environ.get(location.WORK_DIR_ENV)
        os.environ[location.WORK_DIR_ENV] = directory
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(location.WORK_DIR_ENV, None)
            else:
                os.environ[location.WORK_DIR_ENV] = before
            shutil.rmtree(directory, ignore_errors=True)

    def __repr__(self) -> str:
        return f"ObjectStoreHome({self.url!r})"

    # --- names -----------------------------------------------------------------------------
    def url_of(self, name: Name) -> str:
        return self.store.url_of(self.relative(name))

    def engine_name(self, name: Name) -> str:
        return self.url_of(name)

    def from_engine_name(self, text: str) -> Path:
        return self.path(self.store.relative(text)) if location.is_url(text) else Path(text)

    def _key(self, name: Name) -> str:
        return self.store.key(self.relative(name))

    def _key_in_bucket(self, name: Name) -> str:
        """The object's key inside its bucket (container), for the stores' own requests."""
        return self._key(name).split("/", 1)[1]

    # --- whole objects ---------------------------------------------------------------------
    def exists(self, name: Name) -> bool:
        import pyarrow.fs as pafs

        with _translated(self.store, f"looking up {self.url_of(name)}"):
            return self.store.filesystem().get_file_info(self._key(name)).type == pafs.FileType.File

    def listing(self, directory: Name, *, hidden: bool = False) -> dict[str, tuple[int, int]]:
        """One LIST request per 1,000 objects."""
        import pyarrow.fs as pafs

        relative_dir = self.relative(directory)
        with _translated(self.store, f"listing {self.url_of(relative_dir)}"):
            infos = location.retried(lambda: self.store.filesystem().get_file_info(
                pafs.FileSelector(self.store.key(relative_dir), recursive=True, allow_not_found=True)))
        found, head = {}, relative_dir + "/"
        for info in infos:
            if info.type != pafs.FileType.File or (not hidden and info.base_name.startswith((".", "_"))):
                continue
            found[self.store.relative(info.path).removeprefix(head)] = (info.size, info.mtime_ns or 0)
        return found

    def read_bytes(self, name: Name) -> bytes | None:
        """Read where it is (the working copy is not touched)."""
        with _translated(self.store, f"reading {self.url_of(name)}"):
            try:
                return location.read_object(self.store.filesystem(), self._key(name))
            except FileNotFoundError:
                return None

    def write_bytes(self, name: Name, data: bytes | str) -> None:
        """The working copy holds what was written too."""
        write_durably(self.path(name), data)
        self.push(name)

    def write_parquet(self, name: Name, table) -> None:
        """One object, whole when its upload completes; the working copy is not touched."""
        import pyarrow.parquet as pq

        with _translated(self.store, f"writing {self.url_of(name)}"):
            location.retried(lambda: pq.write_table(table, self._key(name), filesystem=self.store.filesystem(),
                                                    compression="zstd"))

    def create(self, name: Name, data: bytes | str) -> bool:
        """Each store's conditional write: S3 ``If-None-Match: *``, Azure ``Put Blob`` with
        ``If-None-Match: *``, GCS ``ifGenerationMatch=0`` (:mod:`topic_lineage.storage.conditional_writes`).
        Google Cloud Storage itself needs an access token for that request, which topic-lineage
        does not mint: there (not on an emulator) it is a look-up, then the write, and two
        writers racing within one request's time can both win (docs/object-storage.md)."""
        relative, payload = self.relative(name), data.encode() if isinstance(data, str) else data
        key = self._key_in_bucket(relative)
        if self.store.kind == "Azure":
            from topic_lineage.storage import conditional_writes

            if not conditional_writes.create_azure(self.store.account, self.store.bucket, key, payload,
                                                   endpoint=location.azure_endpoint(),
                                                   account_key=location.azure_key()):
                return False
        elif self.store.kind == "GCS" and location.gcs_emulator():
            from topic_lineage.storage import conditional_writes

            if not conditional_writes.create_gcs(self.store.bucket, key, payload,
                                                 endpoint=location.gcs_emulator()):
                return False
        elif self.store.kind == "GCS":
            if self.exists(relative):
                return False
            self._upload_bytes(relative, payload)
        else:
            from botocore.exceptions import ClientError

            with _translated(self.store, f"writing {self.url_of(relative)}"):
                try:
                    _s3_client().put_object(Bucket=self.store.bucket, Key=key, Body=payload,
                                            IfNoneMatch="*")
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                        return False
                    raise
        write_durably(self.path(relative), payload)  # the working copy holds what it wrote
        return True

    def keep(self, stored: Name, target: Name) -> bool:
        source, path = self.path(stored), self.path(target)
        if source.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.link(source, path)
        return True

    def remove(self, names: Iterable[Name]) -> None:
        """Azure with an account key: one ``Delete Blob`` request per object
        (:func:`~topic_lineage.storage.conditional_writes.delete_azure`: pyarrow's leased
        delete can wait seconds on a lease); elsewhere pyarrow's ``delete_file``."""
        fs = self.store.filesystem()
        account_key = location.azure_key() if self.store.kind == "Azure" else None
        for name in names:
            with _translated(self.store, f"removing {self.url_of(name)}"), \
                    contextlib.suppress(FileNotFoundError):
                if account_key:
                    from topic_lineage.storage import conditional_writes

                    conditional_writes.delete_azure(
                        self.store.account, self.store.bucket, self._key_in_bucket(name),
                        endpoint=location.azure_endpoint(), account_key=account_key)
                else:
                    fs.delete_file(self._key(name))
            with contextlib.suppress(OSError):
                self.path(name).unlink()

    def remove_tree(self, directory: Name, *, last: str | None = None, keep: Collection[str] = ()) -> None:
        import shutil

        import pyarrow.fs as pafs

        relative_dir = self.relative(directory)
        with _translated(self.store, f"removing {self.url_of(relative_dir)}"):
            infos = self.store.filesystem().get_file_info(
                pafs.FileSelector(self.store.key(relative_dir), recursive=True, allow_not_found=True))
        found = [name for i in infos if i.type == pafs.FileType.File
                 and (name := self.store.relative(i.path)) not in keep]
        final = f"{relative_dir}/{last}" if last else None
        self.remove(r for r in found if r != final)
        if final in found:
            self.remove([final])
        if not keep:
            shutil.rmtree(self.path(relative_dir), ignore_errors=True)

    # --- the working copy ------------------------------------------------------------------
    def fetch(self, name: Name, *, refresh: bool = False) -> Path | None:
        relative = self.relative(name)
        target = self.path(relative)
        if target.exists() and not refresh:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.fetch"
        try:
            with _translated(self.store, f"reading {self.url_of(relative)}"):
                try:
                    location.retried(lambda: self._download(relative, tmp))
                except FileNotFoundError:
                    if refresh:  # gone from the store: gone from the working copy too
                        target.unlink(missing_ok=True)
                    return None
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return target

    def _download(self, relative: str, tmp: Path) -> None:
        """One object into ``tmp`` (from the start: a retry after a cut-off read begins afresh)."""
        with self.store.filesystem().open_input_stream(self._key(relative)) as source, open(tmp, "wb") as sink:
            while chunk := source.read(8 << 20):
                sink.write(chunk)

    def fetch_all(self, names: Iterable[Name]) -> list[Path]:
        """In threads."""
        relatives = [self.relative(n) for n in names]
        missing = [r for r in relatives if not self.path(r).exists()]
        if missing:
            with ThreadPoolExecutor(min(TRANSFER_THREADS, len(missing))) as pool:
                list(pool.map(self.fetch, missing))
        return [p for p in map(self.path, relatives) if p.exists()]

    def push(self, name: Name, source: Path | None = None) -> None:
        """Whole or nothing: a multipart upload is completed only after its last part."""
        relative = self.relative(name)
        source = Path(source) if source is not None else self.path(relative)
        with _translated(self.store, f"writing {self.url_of(relative)}"):
            location.retried(lambda: self._upload(relative, source))

    def _upload(self, relative: str, source: Path) -> None:
        with open(source, "rb") as data, self.store.filesystem().open_output_stream(
                self._key(relative), metadata={"Content-Type": "application/octet-stream"}) as sink:
            while chunk := data.read(8 << 20):
                sink.write(chunk)

    def _upload_bytes(self, relative: str, data: bytes) -> None:
        def upload() -> None:
            with self.store.filesystem().open_output_stream(self._key(relative)) as sink:
                sink.write(data)

        with _translated(self.store, f"writing {self.url_of(relative)}"):
            location.retried(upload)

    def push_all(self, names: Iterable[Name]) -> None:
        """In threads."""
        relatives = [self.relative(n) for n in names]
        if relatives:
            with ThreadPoolExecutor(min(TRANSFER_THREADS, len(relatives))) as pool:
                list(pool.map(self.push, relatives))

    def push_dir(self, directory: Name, *, skip: Collection[str] = (), last: str | None = None) -> None:
        """One listing (what is there already: a walk task's files), then the rest in threads."""
        folder = self.path(directory)
        there = {*self.listing(directory), *skip}
        self.push_all(p for p in folder.rglob("*") if p.is_file()
                      and not any(part.startswith(".") for part in p.relative_to(folder).parts)
                      and p.relative_to(folder).as_posix() not in there | {last})
        if last is not None:
            self.push(folder / last)

    def pull_tree(self, directory: Name) -> None:
        """One request when nothing changed."""
        relative_dir = self.relative(directory)
        index = self.tree_index(relative_dir) or {}
        state = self._tree_state(relative_dir)
        root = self.path(relative_dir)
        stale = [name for name, digest in index.items()
                 if state.get(name, {}).get("digest") != digest or not (root / name).is_file()]
        with ThreadPoolExecutor(min(TRANSFER_THREADS, max(len(stale), 1))) as pool:
            list(pool.map(lambda name: self.fetch(f"{relative_dir}/{name}", refresh=True), stale))
        for name in set(state) - set(index):  # removed from the store since they agreed
            if state[name].get("local") == _stat(root / name):  # and not changed here meanwhile
                (root / name).unlink(missing_ok=True)
                del state[name]
        for name in stale:
            state[name] = {"digest": index[name], "local": _stat(root / name)}
        self._save_tree_state(relative_dir, state)

    def push_tree(self, directory: Name) -> None:
        """One writer at a time (of two writers of one directory, the last write of a file
        wins); the directory's index names the files last."""
        relative_dir = self.relative(directory)
        root = self.path(relative_dir)
        state = self._tree_state(relative_dir)
        here = {p.relative_to(root).as_posix(): _stat(p) for p in root.rglob("*")
                if p.is_file() and _synced_name(p.relative_to(root))} if root.is_dir() else {}
        changed = [name for name, seen in here.items() if state.get(name, {}).get("local") != seen]
        gone = [name for name in state if name not in here]
        if not changed and not gone:
            return
        index = self.tree_index(relative_dir) or {}  # as the store has it now: other writers' files stay
        # a file written again with the same content (Data Docs rewrite their styles and fonts
        # on every build of the site) is already there: the index names its digest
        upload = []
        for name in changed:
            digest = _digest(root / name)
            if index.get(name) != digest:
                upload.append(name)
            state[name] = {"digest": digest, "local": here[name]}
            index[name] = digest
        for name in gone:
            index.pop(name, None)
            del state[name]
        self.push_all(f"{relative_dir}/{name}" for name in upload)
        self.remove(f"{relative_dir}/{name}" for name in gone)
        self._save_tree_state(relative_dir, state)
        self.write_bytes(f"{relative_dir}/{TREE_INDEX}", json.dumps(index, sort_keys=True))

    def tree_index(self, directory: Name) -> dict[str, str] | None:
        """None when there is none, or none of ours (then the files are pushed again and named
        anew, and nothing counts as unnamed)."""
        found = self.fetch(f"{self.relative(directory)}/{TREE_INDEX}", refresh=True)
        try:
            return json.loads(found.read_text()) if found is not None else None
        except ValueError:
            return None

    def _tree_state(self, relative_dir: str) -> dict:
        try:
            return json.loads((self.path(relative_dir) / TREE_STATE).read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _save_tree_state(self, relative_dir: str, state: dict) -> None:
        write_durably(self.path(relative_dir) / TREE_STATE, json.dumps(state))

    # --- change tokens ---------------------------------------------------------------------
    def change_token(self, directory: Name) -> dict[str, tuple[int, int]]:
        """The directory's generation object, one request however many files it has (read
        before anything else of the directory: a change after it replaces it again)."""
        token = self.read_text(f"{self.relative(directory)}/{GENERATION}")
        return {f"generation {token.strip() if token else None}": (0, 0)}

    def changed(self, directory: Name) -> None:
        self.write_bytes(f"{self.relative(directory)}/{GENERATION}", uuid.uuid4().hex)


def _synced_name(relative: Path) -> bool:
    """Whether a file takes part in :meth:`~ObjectStoreHome.push_tree`: not hidden (as
    :meth:`~ObjectStoreHome.listing`), not a lock file (a process's own)."""
    return not any(part.startswith((".", "_")) for part in relative.parts) and relative.suffix != ".lock"


def _stat(path: Path) -> list[int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return [info.st_size, info.st_mtime_ns]


def _digest(path: Path) -> str:
    import hashlib

    with open(path, "rb") as data:
        return hashlib.file_digest(data, "sha256").hexdigest()[:32]


_clients: dict = {}


def _s3_client():
    """A botocore S3 client configured as :mod:`topic_lineage.location` configures pyarrow's:
    the environment's endpoint, region and credential chain, path-style addressing on a custom
    endpoint, the standard retry mode (throttling and 5xx retried with backoff)."""
    key = (os.getpid(), location.endpoint(), location.region())
    if key not in _clients:
        import botocore.session
        from botocore.config import Config

        endpoint, region = key[1], key[2]
        config = Config(retries={"mode": "standard", "max_attempts": location.S3_ATTEMPTS},
                        connect_timeout=location.CONNECT_TIMEOUT_S,
                        read_timeout=location.request_timeout(),
                        s3={"addressing_style": "path" if endpoint else "auto"})
        _clients[key] = botocore.session.get_session().create_client(
            "s3", endpoint_url=endpoint, region_name=region or "us-east-1", config=config)
    return _clients[key]
