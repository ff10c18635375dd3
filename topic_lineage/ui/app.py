"""The topic lineage web app: one HTML page and the JSON API behind it.

Routes (relative to where the app is mounted; in Airflow: ``/topic-lineage``):

    GET /                          the page (plain HTML/CSS/JS, no build step)
    GET /static/{file}             its script and style sheet
    GET /api/status                published version, row counts, gate result
    GET /api/clusters              clusters with live/deleted counts and newest snapshot
    GET /api/search?q=&cluster_id= topics by name, part of a name, or ID (any accepted form)
    GET /api/timeline?name=&cluster_id=   every incarnation that ever carried the name
    GET /api/ids/{topic_id}        the incarnation(s) with this ID (any accepted form)
    GET /api/overview?cluster_id=&days=&top=   a cluster's recent deletions and re-creations
    GET /api/gate                  the published version's gate result (+ a newer failed build)
    GET /data-docs/{path}          the gate report and its Great Expectations Data Docs,
                                   script-free (topic_lineage.ui.data_docs)
    GET /api/openapi.json          this API's OpenAPI description

Authentication is not optional: ``create_app`` requires a FastAPI dependency that rejects
unauthenticated requests (in Airflow, the plugin passes Airflow's own JWT check), and it
guards every route, static files and Data Docs included.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from importlib import resources
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from topic_lineage.errors import TopicLineageError
from topic_lineage.topic_id import TopicIdError, rfc4122
from topic_lineage.ui import data_docs as docs
from topic_lineage.ui import gate, queries
from topic_lineage.ui.published import PublishedTables, current_version

STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
MAX_DAYS = 3650
PAGE_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'self'"
)
"""The page runs only its own script (static/app.js), talks only to its own API."""


def _static_text(name: str) -> str:
    return resources.files("topic_lineage.ui").joinpath("static", name).read_text(encoding="utf-8")


def _cursor(request: Request):
    """A DuckDB cursor on the currently published version, for one request."""
    return request.app.state.published.get().cursor()


Cursor = Annotated[Any, Depends(_cursor)]


def create_app(
    auth: Callable[..., Any],
    *,
    login_url: str | Callable[[], str | None] | None = None,
    published: PublishedTables | None = None,
) -> FastAPI:
    """The app, with ``auth`` (a FastAPI dependency) guarding every route.

    ``auth`` must raise ``HTTPException`` (401/403) for a request without a valid user.
    ``login_url`` (text, or a function returning it), when given, is linked from the page shown
    to a browser that is not signed in.
    """
    if auth is None:
        raise ValueError("create_app needs an authentication dependency; the page is never public")
    store = published or PublishedTables()
    app = FastAPI(
        title="Topic lineage",
        description="Kafka topic incarnations from the published topic-lineage tables.",
        dependencies=[Depends(auth)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # FastAPI would serve it without the app's dependencies
    )
    app.state.published = store

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # A browser that is not signed in gets a page pointing at the Airflow login, not JSON.
        wants_html = "text/html" in request.headers.get("accept", "")
        if exc.status_code in (401, 403) and wants_html and "/api/" not in request.url.path:
            url = login_url() if callable(login_url) else login_url
            link = f'<p><a href="{html.escape(url)}">Sign in to Airflow</a></p>' if url else ""
            body = (
                "<!doctype html><title>Topic lineage: sign in</title>"
                f"<h1>Sign in required</h1><p>{html.escape(str(exc.detail))}</p>{link}"
            )
            return HTMLResponse(body, status_code=exc.status_code, headers=exc.headers)
        return JSONResponse(
            {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(TopicLineageError)
    async def _user_error(request: Request, exc: TopicLineageError) -> Response:
        status = 400 if isinstance(exc, TopicIdError) else 503
        return JSONResponse({"detail": str(exc)}, status_code=status)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page(request: Request) -> HTMLResponse:
        base = request.scope.get("root_path", "").rstrip("/") + "/"
        text = _static_text("index.html").replace("{{BASE}}", html.escape(base, quote=True))
        return HTMLResponse(text, headers={"Cache-Control": "no-store",
                                           "Content-Security-Policy": PAGE_POLICY})

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in STATIC_FILES:
            raise HTTPException(404, f"no static file {name!r}")
        return Response(_static_text(name), media_type=STATIC_FILES[name])

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        """The API's OpenAPI description (behind the same authentication as the API)."""
        return app.openapi()

    @app.get("/api/status")
    def status() -> dict[str, Any]:
        """The published version, its row counts, and the latest gate result."""
        loaded = store.get()
        return {
            "published_version": loaded.version,
            "row_counts": loaded.row_counts,
            "gate": gate.latest_result(loaded.version),
            "forced": gate.forced_publishes(loaded.version),
        }

    @app.get("/api/clusters")
    def clusters(cur: Cursor) -> dict[str, Any]:
        """Every cluster with its live and deleted incarnation counts and newest snapshot."""
        return {"clusters": queries.clusters(cur)}

    @app.get("/api/search")
    def search(
        cur: Cursor,
        q: Annotated[str, Query(min_length=1, max_length=300, description="name, part, or ID")],
        cluster_id: Annotated[str | None, Query(max_length=300)] = None,
    ) -> dict[str, Any]:
        """Topics whose name contains ``q``, or whose ID is ``q`` in any accepted form."""
        if not q.strip():
            raise HTTPException(422, "q must not be blank")
        return queries.search(cur, q, cluster_id=cluster_id or None)

    @app.get("/api/timeline")
    def timeline(
        cur: Cursor,
        name: Annotated[str, Query(min_length=1, max_length=300)],
        cluster_id: Annotated[str | None, Query(max_length=300)] = None,
    ) -> dict[str, Any]:
        """Every incarnation that ever carried ``name`` (per cluster), with versions."""
        found = queries.timeline(cur, name, cluster_id=cluster_id or None)
        if not found:
            where = f" in cluster {cluster_id!r}" if cluster_id else ""
            raise HTTPException(404, f"no topic named {name!r}{where} in the published tables")
        return {"topic_name": name, "clusters": found}

    @app.get("/api/ids/{topic_id:path}")
    def by_id(cur: Cursor, topic_id: str) -> dict[str, Any]:
        """The incarnations with this ID; ``topic_id`` may be in any accepted form."""
        canonical_id = queries.parse_topic_id(topic_id)
        found = queries.incarnations_by_id(cur, canonical_id)
        if not found:
            raise HTTPException(404, f"no incarnation with topic ID {canonical_id}")
        return {
            "topic_id": canonical_id,
            "topic_uuid": rfc4122(canonical_id),
            "incarnations": found,
        }

    @app.get("/api/overview")
    def overview(
        cur: Cursor,
        cluster_id: Annotated[str, Query(min_length=1, max_length=300)],
        days: Annotated[int, Query(ge=1, le=MAX_DAYS)] = 30,
        top: Annotated[int, Query(ge=1, le=100)] = 10,
    ) -> dict[str, Any]:
        """Live topics, deletions and re-creations of a cluster over its last ``days`` days."""
        result = queries.overview(cur, cluster_id, days=days, top=top)
        if result is None:
            raise HTTPException(404, f"no cluster {cluster_id!r} in the published tables")
        return result

    @app.get("/api/gate")
    def gate_result() -> dict[str, Any]:
        """The gate result of the published version, and a newer failed build if any."""
        return gate.latest_result(current_version())

    @app.get("/data-docs/{path:path}", include_in_schema=False)
    def data_docs(path: str) -> Response:
        """The gate report and GX Data Docs, script-free (see ``topic_lineage.ui.data_docs``)."""
        try:
            file = docs.resolve(path)
        except docs.DataDocsPathError as exc:
            raise HTTPException(exc.status, str(exc)) from None
        headers = {"Content-Security-Policy": docs.CONTENT_SECURITY_POLICY,
                   "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
        media_type = docs.media_type(file)
        if file.suffix.lower() == ".html":
            return Response(docs.page_text(file), media_type=media_type, headers=headers)
        return FileResponse(file, media_type=media_type, headers=headers)

    return app
