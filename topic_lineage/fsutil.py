"""Plain file helpers: the one way topic-lineage replaces a file (atomically and durably), the
one way it takes a file lock, process liveness, sizes on disk."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path


def replace_durably(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` over ``target`` atomically, then fsync the directory so the rename
    survives a crash (the caller has already fsynced ``tmp``'s contents)."""
    os.replace(tmp, target)
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def replacing(target: Path, *, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path beside ``target`` for the caller to write; when the block ends
    without an error, fsync it and rename it over ``target`` (:func:`replace_durably`), so a
    reader sees the old file or the new one, never a part. On an error the temporary file is
    removed and ``target`` is untouched.

    The temporary name starts with a dot: Spark and DuckDB never list it. It is created with
    ``mode`` (``0o600`` for a secret: never wider, not even for a moment).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        replace_durably(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_durably(target: Path, data: str | bytes, *, mode: int = 0o644) -> None:
    """Replace ``target`` with ``data`` atomically and durably (see :func:`replacing`)."""
    with replacing(target, mode=mode) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)


@contextlib.contextmanager
def file_lock(path: Path, *, shared: bool = False, blocking: bool = True) -> Iterator[bool]:
    """Hold an advisory ``flock`` on ``path`` (created when missing) for the block.

    Yields True while held. With ``blocking=False`` it yields False at once when another
    process holds a conflicting lock (the block then runs without it; the caller decides).
    The lock is released when the block ends, and by the kernel if the process dies.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
        try:
            fcntl.flock(handle, flags)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (another user's counts; a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def files_bytes(*paths) -> int:
    """Total size of the files under ``paths`` (directories or files; missing ones count 0)."""
    total = 0
    for path in map(Path, paths):
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return total


def size_setting(env: str, default_mib: float, zero_means: str) -> int:
    """Bytes from a size setting given in MiB in the environment variable ``env`` (unset:
    ``default_mib``); a negative or unreadable value is one clear error naming the variable
    (``zero_means``: what 0 does, for that message)."""
    import os

    text = os.environ.get(env)
    try:
        megabytes = default_mib if text is None else float(text)
    except ValueError:
        megabytes = -1.0
    if megabytes < 0:
        from topic_lineage.errors import TopicLineageError

        raise TopicLineageError(
            f"invalid ${env} {text!r}: give a size in MiB (e.g. {default_mib:g}), 0 to {zero_means}"
        )
    return int(megabytes * 1024 * 1024)


def installation_dir(env: str, *, default_name: str = "") -> Path:
    """The directory ``$env`` names, else ``var/topic-lineage`` (and ``default_name`` in it) in the
    Python installation, the virtualenv: where this installation keeps what the install fetched
    or made for it (Kafka's and S3A's jars, the JVM archive) and Data Docs' compiled templates."""
    setting = os.environ.get(env, "").strip()
    if setting:
        return Path(setting).expanduser().resolve()
    base = Path(sys.prefix) / "var" / "topic-lineage"
    return base / default_name if default_name else base
