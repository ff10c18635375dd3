"""Durable file replacement, shared by the snapshot store and the warehouse pointer."""

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
