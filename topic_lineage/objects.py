"""The seam between an object-store home and this process's working copy of it.

With ``TOPIC_LINEAGE_HOME=s3://bucket/prefix`` (:mod:`topic_lineage.location`), the store is
the truth: every process (an Airflow task on its own worker, a Spark executor, a CLI call) keeps
a local working copy of what it reads and writes (:func:`topic_lineage.tables.home`) and meets
the others only on the store and the Iceberg catalog. Files keep the home's layout: a file at
``<work dir>/<relative>`` is the object ``<home URL>/<relative>``.

What is written is whole and immutable under a unique name (a snapshot file, a version's data
part): :func:`push` uploads it in one piece, so a reader sees all of it or nothing, and
:func:`push_new` creates it only when no object has that name (S3's ``If-None-Match: *``), so of
two writers of one name exactly one wins. :func:`fetch` copies an object to the working copy
once (an immutable object never changes). The few small files that change (a version's
manifest) have one writer at a time (the task that owns the version's next step) and are
replaced whole with :func:`push`. The one thing that must be atomic across writers, which
version is published, is the catalog's compare-and-swap (:mod:`topic_lineage.warehouse.iceberg`).

With a local home, none of this runs: every function here is a no-op or answers from the disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from topic_lineage import location
from topic_lineage.fsutil import write_durably
from topic_lineage.location import LocationError, ObjectStore

TRANSFER_THREADS = 16
"""Objects fetched or pushed at once (each a request of its own: latency, not bandwidth, bounds
a store of many small snapshot files)."""


def store() -> ObjectStore | None:
    """The object store of ``$TOPIC_LINEAGE_HOME``; None for a local home."""
    return location.home_store()


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


def _home() -> Path:
    from topic_lineage import tables as t

    return t.home()


def _local(relative: str) -> Path:
    return _home() / relative


def relative_name(path: Path) -> str:
    """The home-relative name (``/``-separated) of a file of the working copy: its object's key
    under the home."""
    return Path(path).relative_to(_home()).as_posix()


def listing(relative_dir: str, *, hidden: bool = False) -> dict[str, tuple[int, int]]:
    """Every object under ``relative_dir`` as ``path under it -> (size, modified ns)``;
    hidden names (``.``/``_`` first) are left out unless ``hidden``. One LIST request per
    1,000 objects."""
    where = store()
    if where is None:
        return {}
    import pyarrow.fs as pafs

    with _translated(where, f"listing {where.url_of(relative_dir)}"):
        infos = location.retried(lambda: where.filesystem().get_file_info(
            pafs.FileSelector(where.key(relative_dir), recursive=True, allow_not_found=True)))
    found, head = {}, relative_dir.strip("/") + "/"
    for info in infos:
        if info.type != pafs.FileType.File or (not hidden and info.base_name.startswith((".", "_"))):
            continue
        found[where.relative(info.path).removeprefix(head)] = (info.size, info.mtime_ns or 0)
    return found


def exists(relative: str) -> bool:
    where = store()
    if where is None:
        return _local(relative).exists()
    import pyarrow.fs as pafs

    with _translated(where, f"looking up {where.url_of(relative)}"):
        return where.filesystem().get_file_info(where.key(relative)).type == pafs.FileType.File


def fetch(relative: str, *, refresh: bool = False) -> Path | None:
    """The working copy's path of ``relative``, copied from the store when it is not there yet
    (``refresh``: copied again, for the few files that change); None when the store has no such
    object. With a local home, the file's path when it exists."""
    target = _local(relative)
    where = store()
    if where is None:
        return target if target.exists() else None
    if target.exists() and not refresh:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.fetch"
    try:
        with _translated(where, f"reading {where.url_of(relative)}"):
            try:
                location.retried(lambda: _download(where, relative, tmp))
            except FileNotFoundError:
                return None
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return target


def _download(where: ObjectStore, relative: str, tmp: Path) -> None:
    """One object into ``tmp`` (from the start: a retry after a cut-off read begins afresh)."""
    with where.filesystem().open_input_stream(where.key(relative)) as source, open(tmp, "wb") as sink:
        while chunk := source.read(8 << 20):
            sink.write(chunk)


def fetch_all(relatives: Iterable[str]) -> list[Path]:
    """:func:`fetch` of many objects at once (in threads); those the store lacks are left out."""
    relatives = list(relatives)
    if store() is None:
        return [p for p in map(_local, relatives) if p.exists()]
    missing = [r for r in relatives if not _local(r).exists()]
    if missing:
        with ThreadPoolExecutor(min(TRANSFER_THREADS, len(missing))) as pool:
            list(pool.map(fetch, missing))
    return [p for p in map(_local, relatives) if p.exists()]


def push(relative: str, source: Path | None = None) -> None:
    """Upload the working copy's ``relative`` (or ``source``) as one object, replacing any of
    that name. Whole or nothing: a multipart upload is completed only after its last part."""
    where = store()
    if where is None:
        return
    source = Path(source) if source is not None else _local(relative)
    with _translated(where, f"writing {where.url_of(relative)}"):
        location.retried(lambda: _upload(where, relative, source))


def _upload(where: ObjectStore, relative: str, source: Path) -> None:
    with open(source, "rb") as data, where.filesystem().open_output_stream(
            where.key(relative), metadata={"Content-Type": "application/octet-stream"}) as sink:
        while chunk := data.read(8 << 20):
            sink.write(chunk)


def push_all(relatives: Iterable[str]) -> None:
    """:func:`push` of many files at once (in threads)."""
    relatives = list(relatives)
    if store() is None or not relatives:
        return
    with ThreadPoolExecutor(min(TRANSFER_THREADS, len(relatives))) as pool:
        list(pool.map(push, relatives))


def push_new(relative: str, source: Path | None = None) -> bool:
    """Create the object ``relative`` from the working copy's file (or ``source``) only if no
    object has that name; False when one had. On S3 a conditional write (``If-None-Match: *``):
    of two processes creating one name, exactly one wins, whatever their timing. Elsewhere (GCS,
    Azure through pyarrow) a look-up, then the write."""
    where = store()
    if where is None:
        return True
    source = Path(source) if source is not None else _local(relative)
    if where.kind != "S3":
        if exists(relative):
            return False
        push(relative, source)
        return True
    client = _s3_client()
    with _translated(where, f"writing {where.url_of(relative)}"):
        from botocore.exceptions import ClientError

        try:
            with open(source, "rb") as data:
                client.put_object(Bucket=where.bucket, Key=where.key(relative).split("/", 1)[1],
                                  Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                return False
            raise
    return True


def url(path: Path) -> str:
    """The URL of a file of the working copy: its object's with the home on object storage,
    its ``file:`` URL otherwise (what an Iceberg table's data files are named by)."""
    where = store()
    if where is None:
        return Path(path).as_uri()
    return where.url_of(relative_name(path))


def local_copies(names: Iterable[str]) -> list[str]:
    """Local paths for files named by URL or path: an object of the home's store is fetched to
    the working copy (once); a ``file:`` URL becomes its path; anything else stays as it is."""
    from urllib.parse import unquote, urlparse

    where = store()
    found, wanted = [], []
    for name in names:
        parsed = urlparse(name)
        if parsed.scheme in ("", "file"):
            found.append(unquote(parsed.path) if parsed.scheme else name)
        elif where is not None and name.startswith(where.url + "/"):
            relative = where.relative(name)
            wanted.append(relative)
            found.append(str(_local(relative)))
        else:
            found.append(name)
    fetch_all(wanted)
    return found


TREE_INDEX = ".tree-index.json"
"""In a directory kept in step with the store by :func:`pull_tree` and :func:`push_tree`: an
object naming each of its files with a digest of its content (the store's listing cannot tell a
file rewritten within the same second at the same size)."""
TREE_STATE = ".tree-state.json"
"""The working copy's record of such a directory: each file's digest and its size and time here
when it last agreed with the store."""


def pull_tree(relative_dir: str) -> None:
    """Bring the working copy's ``relative_dir`` in step with the store, for the few
    directories whose files are rewritten or removed (the quality gate's log, results and
    pages): files new or changed on the store since they last agreed are fetched, and files the
    store has lost since (another process removed them) are removed. A file written here and
    not pushed yet stays. One request when nothing changed. With a local home, nothing."""
    if store() is None:
        return
    index = tree_index(relative_dir) or {}
    state = _tree_state(relative_dir)
    root = _local(relative_dir)
    stale = [name for name, digest in index.items()
             if state.get(name, {}).get("digest") != digest or not (root / name).is_file()]
    with ThreadPoolExecutor(min(TRANSFER_THREADS, max(len(stale), 1))) as pool:
        list(pool.map(lambda name: fetch(f"{relative_dir}/{name}", refresh=True), stale))
    for name in set(state) - set(index):  # removed from the store since they agreed
        if state[name].get("local") == _stat(root / name):  # and not changed here meanwhile
            (root / name).unlink(missing_ok=True)
            del state[name]
    for name in stale:
        state[name] = {"digest": index[name], "local": _stat(root / name)}
    _save_tree_state(relative_dir, state)


def push_tree(relative_dir: str) -> None:
    """Push what changed in the working copy's ``relative_dir`` since it last agreed with the
    store (:func:`pull_tree`): new and rewritten files are uploaded whole, removed ones are
    removed from the store, then the directory's index names them. One writer at a time (of
    two writers of one directory, the last write of a file wins). With a local home, nothing."""
    if store() is None:
        return
    root = _local(relative_dir)
    state = _tree_state(relative_dir)
    here = {p.relative_to(root).as_posix(): _stat(p) for p in root.rglob("*")
            if p.is_file() and _synced_name(p.relative_to(root))} if root.is_dir() else {}
    changed = [name for name, seen in here.items() if state.get(name, {}).get("local") != seen]
    gone = [name for name in state if name not in here]
    if not changed and not gone:
        return
    index = tree_index(relative_dir) or {}  # as the store has it now: other writers' files stay
    # a file written again with the same content (Data Docs rewrite their styles and fonts on
    # every build of the site) is already there: the index names its digest
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
    push_all(f"{relative_dir}/{name}" for name in upload)
    remove(f"{relative_dir}/{name}" for name in gone)
    _save_tree_state(relative_dir, state)
    write_durably(root / TREE_INDEX, json.dumps(index, sort_keys=True))
    push(f"{relative_dir}/{TREE_INDEX}")


def _synced_name(relative: Path) -> bool:
    """Whether a file takes part in :func:`push_tree`: not hidden (as :func:`listing`), not a
    lock file (a process's own)."""
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


def tree_index(relative_dir: str) -> dict[str, str] | None:
    """The store's index of a directory kept in step (:data:`TREE_INDEX`): name -> digest of
    each file; None when there is none, or none of ours (then the files are pushed again and
    named anew, and nothing counts as unnamed)."""
    found = fetch(f"{relative_dir}/{TREE_INDEX}", refresh=True)
    try:
        return json.loads(found.read_text()) if found is not None else None
    except ValueError:
        return None


def _tree_state(relative_dir: str) -> dict:
    try:
        return json.loads((_local(relative_dir) / TREE_STATE).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _save_tree_state(relative_dir: str, state: dict) -> None:
    write_durably(_local(relative_dir) / TREE_STATE, json.dumps(state))


def remove_tree(relative_dir: str, *, last: str | None = None, keep: Collection[str] = ()) -> None:
    """Delete every object under ``relative_dir`` (hidden ones too) but those named in ``keep``
    (home-relative names); ``last`` (a name under it), after all the others: a removal cut short
    leaves it, and so the sign that there is more."""
    where = store()
    if where is None:
        return
    import pyarrow.fs as pafs

    with _translated(where, f"removing {where.url_of(relative_dir)}"):
        infos = where.filesystem().get_file_info(
            pafs.FileSelector(where.key(relative_dir), recursive=True, allow_not_found=True))
    found = [name for i in infos if i.type == pafs.FileType.File
             and (name := where.relative(i.path)) not in keep]
    final = f"{relative_dir.strip('/')}/{last}" if last else None
    remove(r for r in found if r != final)
    if final in found:
        remove([final])


def remove(relatives: Iterable[str]) -> None:
    """Delete objects (missing ones are no error); with a local home, nothing."""
    where = store()
    if where is None:
        return
    fs = where.filesystem()
    for relative in relatives:
        with _translated(where, f"removing {where.url_of(relative)}"), contextlib.suppress(FileNotFoundError):
            fs.delete_file(where.key(relative))


_clients: dict = {}


def _s3_client():
    """A botocore S3 client configured as :func:`topic_lineage.location` configures pyarrow's:
    the environment's endpoint, region and credential chain, path-style addressing on a custom
    endpoint, the standard retry mode (throttling and 5xx retried with backoff)."""
    key = (os.getpid(), os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"),
           os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
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
