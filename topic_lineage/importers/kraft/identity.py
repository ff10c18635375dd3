"""Cluster identity of a metadata log: the ``cluster.id`` of Kafka's ``meta.properties``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from topic_lineage.importers.kraft.model import MetadataLogError


def read_meta_properties(path: Path) -> str:
    """``cluster.id`` of a Kafka ``meta.properties`` file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MetadataLogError(f"cannot read: {exc.strerror or exc}", location=str(path)) from None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id" and value.strip():
            return value.strip()
    raise MetadataLogError("no cluster.id line", location=str(path))


def find_meta_properties(paths: Iterable[Path]) -> Path | None:
    """The ``meta.properties`` of the log directory holding the given files, if there is one."""
    for path in paths:
        path = Path(path).resolve()
        for parent in list(path.parents)[:3] if path.is_file() else [path, *list(path.parents)[:2]]:
            candidate = parent / "meta.properties"
            if candidate.is_file():
                return candidate
    return None

