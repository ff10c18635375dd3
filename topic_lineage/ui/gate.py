"""The latest quality-gate result and where its Data Docs are, for the page's gate badge.

The gate (``topic_lineage.quality``) appends one JSON line per run to ``gate_runs.jsonl``,
renders its own overview page, and has Great Expectations build Data Docs, all under
``tables.quality_dir()``. This module only reads them (through the gate's own path helpers)
and degrades to "no result yet" when the gate never ran: the page must work without it.
Paths are returned relative to the quality directory, which the app serves under
``data-docs/``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from topic_lineage import tables
from topic_lineage.quality import context as quality_context
from topic_lineage.quality import overview as quality_overview

log = logging.getLogger(__name__)


def _relative(path: Path) -> str | None:
    """``path`` relative to the quality directory when it is an existing file inside it."""
    root = tables.quality_dir().resolve()
    try:
        resolved = path.resolve()
    except OSError:
        return None
    if resolved.is_file() and resolved.is_relative_to(root):
        return resolved.relative_to(root).as_posix()
    return None


def _detail_page(link: str) -> str | None:
    """A gate detail link (``file://`` URI or path) as a path under the quality directory."""
    parsed = urlparse(link)
    if parsed.scheme not in ("", "file"):
        return None
    return _relative(Path(unquote(parsed.path)))


def latest_result() -> dict[str, Any]:
    """The newest gate run, summarised; ``available`` is false when there is none."""
    summary: dict[str, Any] = {
        "available": False,
        "success": None,
        "version": None,
        "validated_at": None,
        "expectations": 0,
        "failed_expectations": [],
        "report": _relative(quality_context.overview_page()),
        "data_docs": _relative(quality_context.data_docs_index()),
        "detail_pages": {},
    }
    try:
        records = quality_overview.read_records()
    except OSError as exc:
        log.warning("cannot read the gate log %s: %s", quality_context.gate_log(), exc)
        return summary
    if not records:
        return summary
    latest = records[-1]
    outcomes = latest.get("outcomes") or []
    details = {}
    for table, link in (latest.get("detail_pages") or {}).items():
        relative = _detail_page(str(link))
        if relative:
            details[table] = relative
    summary.update(
        available=True,
        success=bool(latest.get("success")),
        version=latest.get("version"),
        validated_at=latest.get("validated_at"),
        expectations=len(outcomes),
        failed_expectations=[
            f"{o.get('table')}: {o.get('name')}" for o in outcomes if not o.get("success")
        ],
        detail_pages=details,
    )
    return summary
