"""The overview page of the quality gate: ``$TOPIC_LINEAGE_HOME/quality/index.html``.

Great Expectations' own Data Docs index builds its run list with scripts from public CDNs, so
it shows nothing on an offline machine. This page is plain, self-contained HTML: the newest gate
run first (verdict, every expectation passed or failed, a few offending rows, a link to GX's
detailed validation page of each table), then the history of earlier runs. Its links are
relative to the quality directory, so the UI can serve it over http (``/topic-lineage/data-docs/``). Every gate run appends
one JSON line to ``gate_runs.jsonl`` and re-renders the page from it.

A record: ``version``, ``success`` (no *critical* expectation failed), ``warnings``
(``"<table>: <name>"`` of each failed warning-severity expectation), ``outcomes`` (each with its
``severity``: ``critical`` or ``warning``; records written before severities existed have none
and count as critical), thresholds, timings and GX detail pages.
"""

from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path

from topic_lineage import tables as t
from topic_lineage.fsutil import file_lock, write_durably
from topic_lineage.quality import context as qc

HISTORY_SHOWN = 50

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5em 2em;
       color: #1d2733; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 1.5em; }
.verdict { font-size: 1.3em; font-weight: bold; padding: 0.4em 0.8em; display: inline-block;
           border-radius: 4px; }
.passed { color: #1a7f37; } .failed { color: #cf222e; } .warning { color: #9a6700; }
.verdict.passed { background: #dafbe1; } .verdict.failed { background: #ffebe9; }
.verdict.warning { background: #fff8c5; }
table { border-collapse: collapse; margin: 0.4em 0 1em 0; }
th, td { border: 1px solid #c9d1da; padding: 4px 8px; vertical-align: top; text-align: left; }
th { background: #eef2f6; }
table.rows td, table.rows th { font-family: ui-monospace, monospace; font-size: 0.85em; }
.muted { color: #57606a; }
td.status { white-space: nowrap; }
td.name { min-width: 14em; font-weight: 600; }
td.meaning { min-width: 22em; max-width: 34em; }
"""


KEEP_RUNS_ENV = "TOPIC_LINEAGE_QUALITY_KEEP_RUNS"
DEFAULT_KEEP_RUNS = 200
"""Gate runs whose record and Great Expectations results are kept (two days of 15-minute
cycles); a version's own verdict stays in its manifest as long as the version does."""


def keep_runs() -> int:
    """``$TOPIC_LINEAGE_QUALITY_KEEP_RUNS`` (default :data:`DEFAULT_KEEP_RUNS`, at least 1)."""
    text = os.environ.get(KEEP_RUNS_ENV)
    if text is None:
        return DEFAULT_KEEP_RUNS
    try:
        keep = int(text)
    except ValueError:
        keep = 0
    if keep < 1:
        from topic_lineage.errors import TopicLineageError

        raise TopicLineageError(
            f"invalid ${KEEP_RUNS_ENV} {text!r}: give the number of gate runs to keep (e.g. 200)"
        )
    return keep


def record(result, keep: int | None = None) -> Path:
    """Append ``result`` (a :class:`~topic_lineage.quality.gate.GateResult`), keep the newest
    ``keep`` gate runs (default :func:`keep_runs`; :func:`prune`) and re-render; one gate at a
    time (a lock beside the log)."""
    keep = keep_runs() if keep is None else keep  # a bad setting fails before anything is written
    log = qc.gate_log()
    log.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(log.with_suffix(".lock")):
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(_as_record(result), default=_json_default) + "\n")
        prune(keep)
        page = render()
    qc.push_results()  # with the home on object storage: for the UI and gates elsewhere
    return page


def prune(keep: int) -> int:
    """Keep the newest ``keep`` gate runs: older lines of the gate log go, and so do the stored
    Great Expectations results and Data Docs pages of every version no kept run validated.
    Returns the number of result directories removed.

    Without it a deployment that validates every cycle stores results forever, and each gate
    pays for them: the Data Docs build lists every stored result (0.2 s with 65 of them, 2.7 s
    with 13,065, about a month of 15-minute cycles; issue #24), and the log is read whole."""
    records = read_records()
    if len(records) <= keep:
        return 0
    kept = records[-keep:]
    write_durably(qc.gate_log(), "".join(json.dumps(r, default=_json_default) + "\n" for r in kept))
    versions = {r.get("version") for r in kept}
    removed = 0
    # <suite>/<run name: the version>/<run time>/<batch>: the results' and the pages' layout
    for root in (t.quality_dir() / "validations", qc.data_docs_dir() / "validations"):
        for run in sorted(root.glob("*/*")):
            if run.is_dir() and run.name not in versions:
                shutil.rmtree(run, ignore_errors=True)
                removed += 1
    return removed


def _json_default(value):
    if hasattr(value, "isoformat"):
        return value.isoformat().replace("+00:00", "Z")
    return str(value)


def _as_record(result) -> dict:
    config = result.config
    return {
        "version": result.version,
        "success": result.success,
        "validated_at": result.validated_at,
        "seconds": round(result.seconds, 2),
        "max_age": None if config is None or config.max_age is None
        else f"{config.max_age.total_seconds() / 3600:g} h",
        "max_error_share": None if config is None else config.max_error_share,
        # relative to the quality directory: the link holds wherever the directory is read
        # (the UI on another machine, with the home on object storage)
        "detail_pages": {table: qc.quality_link(link) or link
                         for table, link in result.detail_pages.items()},
        "warnings": result.warnings,
        "outcomes": [o._asdict() for o in result.outcomes],
    }


def severity(outcome: dict) -> str:
    """An outcome's severity; records older than severities are all critical."""
    return outcome.get("severity") or "critical"


def warnings(record: dict) -> list[str]:
    """The record's failed warnings (derived from the outcomes for records that lack the key)."""
    if "warnings" in record:
        return list(record["warnings"])
    return [f"{o['table']}: {o['name']}" for o in record.get("outcomes", [])
            if not o["success"] and severity(o) == "warning"]


def read_records() -> list[dict]:
    log = qc.gate_log()
    if not log.exists():
        return []
    records = []
    for line in log.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a crash: skip, keep the rest
                continue
    return records


def render() -> Path:
    """Write the overview page atomically and return its path."""
    document = page_html()
    page = qc.overview_page()
    write_durably(page, document)
    return page


def page_html() -> str:
    """The overview page from the gate log (the UI serves this, so old files never show)."""
    records = read_records()
    body = ["<h1>topic-lineage quality gate</h1>"]
    if not records:
        body.append("<p>No validation has run yet.</p>")
    else:
        body.extend(_latest(records[-1]))
        body.extend(_history(records[-HISTORY_SHOWN:]))
    # Relative links (never file:// URIs or server paths): they work from the files on disk and
    # when the UI serves this page over http under /topic-lineage/data-docs/.
    gx_index = qc.quality_link(qc.data_docs_index())
    body.append(
        f'<p class="muted">Great Expectations Data Docs (suites and every validation): '
        f'<a href="{html.escape(gx_index or "data_docs/index.html")}">Data Docs index</a></p>'
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<title>topic-lineage quality gate</title>"
        f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _verdict(success: bool, warned: bool = False) -> str:
    if not success:
        return "FAILED"
    return "PASSED with warnings" if warned else "PASSED"


def _state(outcome: dict) -> tuple[str, str]:
    """(CSS class, status cell) of one outcome."""
    if outcome["success"]:
        return "passed", "&#10004; passed"
    if severity(outcome) == "warning":
        return "warning", "&#9888; WARNING"
    return "failed", "&#10008; FAILED"


def _latest(record: dict) -> list[str]:
    warned = warnings(record)
    state = "failed" if not record["success"] else ("warning" if warned else "passed")
    outcomes = record["outcomes"]
    failed = [o for o in outcomes if not o["success"]]
    age = record.get("max_age") or "off (freshness not checked)"
    out = [
        f"<h2>Latest run: version {html.escape(record['version'])}</h2>",
        (
            f'<p><span class="verdict {state}">{_verdict(record["success"], bool(warned))}</span> '
            f"&nbsp;{len(outcomes) - len(failed)} of {len(outcomes)} expectations met"
            + (f"; {len(warned)} warning(s), which never block publishing" if warned else "")
            + "</p>"
        ),
        (
            f'<p class="muted">validated at {html.escape(str(record["validated_at"]))} in '
            f'{record["seconds"]} s; maximum snapshot age: {html.escape(age)}; maximum '
            f'error-topic share: {record.get("max_error_share")}</p>'
        ),
    ]
    tables: dict[str, list[dict]] = {}
    for outcome in outcomes:
        tables.setdefault(outcome["table"], []).append(outcome)
    for table, rows in tables.items():
        link = qc.quality_link(record.get("detail_pages", {}).get(table) or "")
        details = f' &mdash; <a href="{html.escape(link)}">details</a>' if link else ""
        out.append(f"<h2>{html.escape(table)}{details}</h2>")
        out.append("<table><tr><th>status</th><th>expectation</th><th>severity</th>"
                   "<th>meaning</th><th>offending rows</th></tr>")
        for outcome in rows:
            state, mark = _state(outcome)
            out.append(
                f'<tr><td class="status {state}"><b>{mark}</b></td>'
                f'<td class="name">{html.escape(outcome["name"])}</td>'
                f"<td>{html.escape(severity(outcome))}</td>"
                f'<td class="meaning">{html.escape(outcome["description"])}</td>'
                f"<td>{_rows(outcome)}</td></tr>"
            )
        out.append("</table>")
    return out


def _rows(outcome: dict) -> str:
    if outcome["success"]:
        return ""
    rows = outcome.get("rows") or []
    count = outcome.get("unexpected_count")
    head = f"{count} row(s)" if count is not None else ""
    if not rows:
        return html.escape(head)
    columns = list(rows[0])
    table = ['<table class="rows"><tr>' + "".join(f"<th>{html.escape(c)}</th>" for c in columns) + "</tr>"]
    for row in rows:
        cells = "".join(f"<td>{html.escape(_cell(row.get(c)))}</td>" for c in columns)
        table.append(f"<tr>{cells}</tr>")
    table.append("</table>")
    return html.escape(head) + "".join(table)


def _cell(value) -> str:
    return "NULL" if value is None else str(value)


def _history(records: list[dict]) -> list[str]:
    out = [
        "<h2>History (newest first)</h2>",
        (
            "<table><tr><th>validated at</th><th>version</th><th>verdict</th>"
            "<th>failed expectations</th><th>warnings</th></tr>"
        ),
    ]
    for record in reversed(records):
        warned = warnings(record)
        state = "failed" if not record["success"] else ("warning" if warned else "passed")
        failed = ", ".join(o["name"] for o in record["outcomes"]
                           if not o["success"] and severity(o) != "warning")
        out.append(
            f"<tr><td>{html.escape(str(record['validated_at']))}</td>"
            f"<td>{html.escape(record['version'])}</td>"
            f'<td class="{state}"><b>{_verdict(record["success"], bool(warned))}</b></td>'
            f"<td>{html.escape(failed)}</td>"
            f'<td class="warning">{html.escape(", ".join(warned))}</td></tr>'
        )
    out.append("</table>")
    return out
