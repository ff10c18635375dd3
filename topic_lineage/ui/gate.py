"""The quality-gate result behind the page's gate badge, and where its pages are.

The gate (``topic_lineage.quality``) appends one JSON line per run to ``gate_runs.jsonl``,
renders its own overview page, and has Great Expectations build Data Docs, all under
``tables.quality_dir()``. This module only reads them and degrades to "no result yet" when the
gate never ran: the page must work without it.

The badge shows the gate run of the **published** version (the one readers see), not simply the
newest run: a newer build that failed the gate is never published (R7) and is reported
separately (``newer_failed``). Records written before severities existed have no ``severity``
per outcome (= critical) and no ``warnings``; both kinds are read. Page links are relative to
the quality directory, which the app serves under ``data-docs/``: never ``file://`` URIs.
"""

from __future__ import annotations

import logging
from typing import Any

from topic_lineage import tables
from topic_lineage.location import LocationError
from topic_lineage.quality import context as quality_context
from topic_lineage.quality import overview as quality_overview
from topic_lineage.quality.suites import NO_CARRIED_POSITIONS

log = logging.getLogger(__name__)

WARNING = "warning"


def _page(link: Any) -> str | None:
    """A link to a page of the quality directory, relative to it, when that page exists."""
    relative = quality_context.quality_link(str(link)) if link else None
    if relative is None:
        return None
    path = tables.quality_dir() / relative
    return relative if path.is_file() else None


def _failed(outcomes: list[dict], severity_is_warning: bool) -> list[str]:
    return [
        f"{o.get('table')}: {o.get('name')}"
        for o in outcomes
        if not o.get("success") and (o.get("severity") == WARNING) == severity_is_warning
    ]


def _carried(row: dict) -> str:
    return (f"group {row.get('group_id')} carried its position onto {row.get('topic_name')} "
            f"(incarnation {row.get('incarnation_key')}, topic ID {row.get('topic_id')}, cluster "
            f"{row.get('cluster_id')}): committed offset {row.get('max_committed_offset')} beyond "
            "its log end")


FINDINGS = {NO_CARRIED_POSITIONS: _carried}
"""Warnings stated as what the gate found, from the outcome's sample rows (by expectation)."""


def findings(outcome: dict) -> list[str] | None:
    """A failed warning as its findings (which group, topic, incarnation), or None when the
    outcome has no rows to say it with (then the expectation's name stands)."""
    state = FINDINGS.get(outcome.get("name"))
    rows = outcome.get("rows") or []
    if state is None or not rows:
        return None
    found = [state(row) for row in rows]
    more = (outcome.get("unexpected_count") or len(rows)) - len(rows)
    if more > 0:
        found[-1] += f" (and {more} more: see Data Docs)"
    return found


def summarize(record: dict) -> dict[str, Any]:
    """One gate record as the page shows it (old records without severities included).
    Warnings the gate's rows can state as findings are (:func:`findings`)."""
    outcomes = record.get("outcomes") or []
    warnings = record.get("warnings")
    if not isinstance(warnings, list):
        warnings = _failed(outcomes, severity_is_warning=True)
    stated = {f"{o.get('table')}: {o.get('name')}": findings(o) for o in outcomes
              if not o.get("success") and o.get("severity") == WARNING}
    warnings = [text for w in warnings for text in (stated.get(str(w)) or [w])]
    details = {}
    for table, link in (record.get("detail_pages") or {}).items():
        page = _page(link)
        if page:
            details[table] = page
    return {
        "success": bool(record.get("success")),
        "version": record.get("version"),
        "validated_at": record.get("validated_at"),
        "expectations": len(outcomes),
        "failed_expectations": _failed(outcomes, severity_is_warning=False),
        "warnings": [str(w) for w in warnings],
        "detail_pages": details,
    }


def result_for(published_version: str | None, records: list[dict]) -> dict[str, Any]:
    """The badge: the gate run of ``published_version`` and the newest failed build after it.

    ``available`` is true when the published version has a gate record. ``newer_failed`` is
    the newest failed run recorded after it (or, with no record of the published version, the
    newest failed run), unless a later run of another version passed: that one superseded it.
    """
    summary: dict[str, Any] = {
        "available": False,
        "published_version": published_version,
        "success": None,
        "version": None,
        "validated_at": None,
        "expectations": 0,
        "failed_expectations": [],
        "warnings": [],
        "report": _page(quality_context.overview_page()),
        "data_docs": _page(quality_context.data_docs_index()),
        "detail_pages": {},
        "newer_failed": None,
    }
    published_at = None
    if published_version is not None:
        for index in range(len(records) - 1, -1, -1):
            if records[index].get("version") == published_version:
                published_at = index
                break
    if published_at is not None:
        summary.update(available=True, **summarize(records[published_at]))
    later = records[published_at + 1:] if published_at is not None else records
    if later and not later[-1].get("success") and later[-1].get("version") != published_version:
        summary["newer_failed"] = summarize(later[-1])
    return summary


def latest_result(published_version: str | None = None) -> dict[str, Any]:
    """:func:`result_for` over the gate log (an unreadable log reads as no runs)."""
    try:
        quality_context.pull_results(unless_newer_than_s=quality_context.UI_PULL_EVERY_S)
        records = quality_overview.read_records()
    except (OSError, LocationError) as exc:
        log.warning("cannot read the gate log %s: %s", quality_context.gate_log(), exc)
        records = []
    return result_for(published_version, records)


def forced_publishes(published_version: str | None) -> list[dict[str, Any]]:
    """The audit trail of ``topic-lineage publish V --force --reason TEXT`` on the published
    version (its manifest's ``forced`` list: reason, by, at, ...), oldest first; empty when it
    was published through the gate alone or has no manifest."""
    from topic_lineage import warehouse

    if published_version is None:
        return []
    try:
        return list(warehouse.read_manifest(published_version).get("forced") or [])
    except warehouse.WarehouseError as exc:
        log.info("no manifest for the published version: %s", exc)
        return []
