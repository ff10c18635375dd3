"""Serving the gate report and Great Expectations Data Docs over http, offline.

Great Expectations 1.24 writes Data Docs pages that load jQuery, Bootstrap, bootstrap-table,
Font Awesome and vega from public CDNs (unpinned, mostly without integrity hashes). No
installed package ships those files, and third-party scripts must not run on the Airflow
origin. The validation and suite pages carry their content as plain HTML (the scripts only add
filters, sorting and collapsing), so they are served **without any script**: every ``<script>``
and every stylesheet or image from another origin is dropped when the page is served (GX's own
styles are inlined in the page, its fonts and images come from the site's ``static/``, copied
from the installed GX package). GX's site index draws its run list with bootstrap-table from an
inline script, so in its place the app serves a plain HTML index built from the site's files.
Served pages carry a Content-Security-Policy that allows no script at all and nothing from
another origin.

Only the gate report (``index.html``) and the site (``data_docs/...``) under
``tables.quality_dir()`` are served; paths with NUL bytes, over-long paths, ``..`` or hidden
segments, symlinks and anything else outside are refused with 400/404, never a server error.
"""

from __future__ import annotations

import html
import json
import mimetypes
import re
from pathlib import Path, PurePosixPath

from topic_lineage import tables
from topic_lineage.location import LocationError
from topic_lineage.quality import context as quality_context
from topic_lineage.quality import overview as quality_overview

MAX_PATH = 1024
"""Longest path (characters) looked up; longer is a 400 (file systems allow 4096 at most)."""
INDEX_ROWS = 500
"""Validation pages listed on the index, newest first."""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
)
"""For served Data Docs and the gate report: no script runs, nothing loads from elsewhere."""

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css",
    ".png": "image/png",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".otf": "font/otf",
    ".ttf": "font/ttf",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
}

_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.IGNORECASE | re.DOTALL)
_REMOTE = r"""(?:https?:)?//"""
_REMOTE_LINK = re.compile(rf"""<link\b[^>]*\bhref\s*=\s*["']?{_REMOTE}[^>]*>""", re.IGNORECASE)
_REMOTE_IMG = re.compile(rf"""<img\b[^>]*\bsrc\s*=\s*["']?{_REMOTE}[^>]*>""", re.IGNORECASE)
# Controls that only work with GX's scripts (filters, collapse toggles; collapsed content shows).
_OFFLINE_STYLE = (
    "<style>div.mb-2:has([data-toggle=buttons]), [data-toggle=buttons], [data-toggle=collapse]"
    " { display: none; }</style>"
)
_HANDLER = re.compile(r"""\son[a-z]+\s*=\s*("[^"]*"|'[^']*')""", re.IGNORECASE)


class DataDocsPathError(Exception):
    """A requested path that is not a servable page; ``status`` is 400 or 404 (503: the store
    holding the pages cannot be read now)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def resolve(path: str) -> Path:
    """The file to serve for ``path`` (relative to the quality directory), or DataDocsPathError.

    Served: ``index.html`` (the gate report) and files under ``data_docs/`` with a known type.
    """
    shown = path if len(path) <= 80 else path[:77] + "..."
    if "\x00" in path or len(path) > MAX_PATH:
        raise DataDocsPathError(400, f"invalid Data Docs path {shown!r}")
    parts = PurePosixPath(path or "index.html").parts
    if (
        not parts
        or path.startswith("/")
        or "\\" in path
        or any(p in (".", "..") or p.startswith(".") for p in parts)
        or not (parts == ("index.html",) or (parts[0] == "data_docs" and len(parts) > 1))
        or PurePosixPath(parts[-1]).suffix.lower() not in MEDIA_TYPES
    ):
        raise DataDocsPathError(404, f"no Data Docs file {shown!r}")
    try:
        # with the home on object storage: the pages the gate stored, wherever it ran
        quality_context.pull_results(unless_newer_than_s=quality_context.UI_PULL_EVERY_S)
        root = tables.quality_dir().resolve()
        current = root
        for part in parts:  # no symlink anywhere below the quality directory
            current = current / part
            if current.is_symlink():
                raise DataDocsPathError(404, f"no Data Docs file {shown!r}")
        if not current.is_file() or not current.resolve().is_relative_to(root):
            raise DataDocsPathError(404, f"no Data Docs file {shown!r}")
    except (OSError, ValueError) as exc:  # name too long for the file system, and the like
        raise DataDocsPathError(404, f"no Data Docs file {shown!r}") from exc
    except LocationError as exc:  # the store cannot be read now
        raise DataDocsPathError(503, f"the Data Docs cannot be read from the store: {exc}") from None
    return current


def media_type(path: Path) -> str:
    return MEDIA_TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0] or "text/plain"


def offline_page(text: str) -> str:
    """A GX page without scripts, inline event handlers, or stylesheets/images from elsewhere."""
    text = _SCRIPT.sub("", text)
    text = _REMOTE_LINK.sub("", text)
    text = _REMOTE_IMG.sub("", text)
    text = _HANDLER.sub("", text)
    return text.replace("</head>", _OFFLINE_STYLE + "</head>", 1)


def is_site_index(file: Path) -> bool:
    return file == quality_context.data_docs_index().resolve() or (
        file.name == "index.html" and file.parent == quality_context.data_docs_dir().resolve()
    )


def page_text(file: Path) -> str:
    """What the app sends for an HTML file: the site index rebuilt, GX pages made offline."""
    if is_site_index(file):
        return site_index()
    if file == quality_context.overview_page().resolve():
        # topic-lineage's own script-free report, rendered from the gate log now: a report file
        # written by an older version may still hold file:// links
        return quality_overview.page_html()
    return offline_page(file.read_text(encoding="utf-8", errors="replace"))


# --- the site index ----------------------------------------------------------------------------
def _validation_rows(site: Path) -> list[dict]:
    """Every validation page of the site with its suite, run, time and verdict."""
    results = tables.quality_dir() / "validations"
    rows = []
    pages = site / "validations"
    for page in pages.rglob("*.html") if pages.is_dir() else []:
        relative = page.relative_to(pages)
        if page.is_symlink() or len(relative.parts) < 4:
            continue
        suite, run_name, run_time = relative.parts[0], relative.parts[1], relative.parts[2]
        row = {"link": "validations/" + relative.as_posix(), "suite": suite, "run_name": run_name,
               "run_time": run_time, "success": None, "evaluated": None, "met": None}
        try:
            result = json.loads((results / relative.with_suffix(".json")).read_text("utf-8"))
            stats = result.get("statistics") or {}
            row.update(success=result.get("success"), evaluated=stats.get("evaluated_expectations"),
                       met=stats.get("successful_expectations"))
        except (OSError, ValueError):
            pass  # the page is still listed; its verdict is on the page itself
        rows.append(row)
    rows.sort(key=lambda r: (r["run_time"], r["suite"]), reverse=True)
    return rows


def _run_time(text: str) -> str:
    """``20261123T044728.359550Z`` -> ``2026-11-23 04:47:28 UTC`` (other text unchanged)."""
    match = re.fullmatch(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)(?:\.\d+)?Z", text)
    if not match:
        return text
    y, mo, d, h, mi, s = match.groups()
    return f"{y}-{mo}-{d} {h}:{mi}:{s} UTC"


def site_index() -> str:
    """A script-free index of the Data Docs site: validations (newest first) and suites."""
    site = quality_context.data_docs_dir()
    rows = _validation_rows(site)
    out = [
        "<h1>Great Expectations Data Docs</h1>",
        '<p class="muted"><a href="../index.html">quality gate report</a></p>',
        "<h2>Validation results (newest first)</h2>",
    ]
    if not rows:
        out.append("<p>No validation results yet.</p>")
    else:
        out.append("<table><tr><th>status</th><th>run time</th><th>version (run name)</th>"
                   "<th>table (suite)</th><th>expectations met</th></tr>")
        for row in rows[:INDEX_ROWS]:
            verdict = {True: ("passed", "&#10004; passed"), False: ("failed", "&#10008; FAILED")}.get(
                row["success"], ("", "see page"))
            met = "" if row["evaluated"] is None else f"{row['met']} of {row['evaluated']}"
            out.append(
                f'<tr><td class="{verdict[0]}"><b>{verdict[1]}</b></td>'
                f"<td>{html.escape(_run_time(row['run_time']))}</td>"
                f"<td>{html.escape(row['run_name'])}</td>"
                f'<td><a href="{html.escape(row["link"])}">{html.escape(row["suite"])}</a></td>'
                f"<td>{met}</td></tr>"
            )
        out.append("</table>")
        if len(rows) > INDEX_ROWS:
            out.append(f'<p class="muted">{len(rows) - INDEX_ROWS} older validation(s) not listed.</p>')
    suites = sorted((site / "expectations").glob("*.html")) if (site / "expectations").is_dir() else []
    out.append("<h2>Expectation suites</h2>")
    out.append("<ul>" + "".join(
        f'<li><a href="expectations/{html.escape(s.name)}">{html.escape(s.stem)}</a></li>'
        for s in suites if not s.is_symlink()
    ) + "</ul>" if suites else "<p>No expectation suites rendered yet.</p>")
    style = (
        "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:1.5em 2em;"
        "color:#1d2733}table{border-collapse:collapse}th,td{border:1px solid #c9d1da;"
        "padding:4px 8px;text-align:left}th{background:#eef2f6}.passed{color:#1a7f37}"
        ".failed{color:#cf222e}.muted{color:#57606a}"
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>Great Expectations Data Docs</title><style>{style}</style></head><body>\n"
        + "\n".join(out) + "\n</body></html>\n"
    )
