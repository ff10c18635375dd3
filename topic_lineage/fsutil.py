"""Plain file helpers: durable replacement (the snapshot store, the warehouse pointer), process
liveness, sizes on disk."""

from __future__ import annotations

import os
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
