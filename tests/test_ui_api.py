"""The topic lineage page's JSON API, through FastAPI's test client, over published Parquet.

Authentication here is a small real bearer check standing in for Airflow's (the app requires
*some* dependency); ``test_plugin_*`` at the end runs the Airflow plugin with Airflow's own JWT
check in a separate process, and tests/test_airflow_local_deployment.py runs it inside a real
api-server (driven by Chromium: tests/browser_support.py).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi import HTTPException, Request
from fastapi.testclient import TestClient
from published_tables import at, incarnation, point_at, point_at_legacy, publish, snapshot_run

from topic_lineage import tables
from topic_lineage.topic_id import canonical, rfc4122

REPO = Path(__file__).resolve().parents[1]
TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

PROD_EU = "MkU3OEVBNTcwNTJENDM2Qg"
PROD_US = "cHJvZC11cy1jbHVzdGVyMQ"

# The first `orders` ID has '-' and '_' in Kafka's form, so standard base64 differs from it.
ORDERS_OLD_UUID = "fbff7e3c-8a4e-4d2b-9f3e-7f2bfc0d5e6a"
ORDERS_OLD = canonical(ORDERS_OLD_UUID)  # -_9-PIpOTSufPn8r_A1eag
ORDERS_NEW = "b8tRS7h4TJ2Vt43Dp85v2A"
ORDERS_US = "Pn-aEFssTY6h8MLT5PWmtw"
PAYMENTS = canonical("11111111-2222-4333-8444-555555555555")
GHOST = canonical("99999999-8888-4777-8666-555555555555")
LEGACY = canonical("12345678-1234-4234-8234-123456789abc")
EVIL_NAME = "x'; DROP TABLE topic_incarnations; --"
EVIL = canonical("aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee")


def id_forms(canonical_id: str) -> dict[str, str]:
    """Every accepted text form of one topic ID."""
    raw = base64.urlsafe_b64decode(canonical_id + "==")
    standard = base64.b64encode(raw).decode()
    return {
        "kafka": canonical_id,
        "standard_base64": standard.rstrip("="),
        "standard_base64_padded": standard,
        "rfc4122": rfc4122(canonical_id),
        "rfc4122_upper": rfc4122(canonical_id).upper(),
        "hex_no_dashes": uuid.UUID(bytes=raw).hex,
    }


def scenario() -> tuple[list[dict], list[dict]]:
    """`orders` deleted and re-created in prod-eu (and live in prod-us), plus edge cases."""
    rows = []
    rows += incarnation(
        "k-orders-1", PROD_EU, cluster_alias="prod-eu", deleted_at=at(5), last_seen_at=at(4),
        versions=[
            {"name": "orders", "at": at(1), "topic_id": ORDERS_OLD, "partitions": 3},
            {"name": "orders", "at": at(3), "topic_id": ORDERS_OLD, "partitions": 6},
        ],
    )
    rows += incarnation(
        "k-orders-2", PROD_EU, cluster_alias="prod-eu", last_seen_at=at(10),
        versions=[{"name": "orders", "at": at(6), "topic_id": ORDERS_NEW, "partitions": 12}],
    )
    rows += incarnation(
        "k-payments", PROD_EU, cluster_alias="prod-eu", last_seen_at=at(10),
        versions=[{"name": "payments", "at": at(1), "topic_id": PAYMENTS}],
    )
    rows += incarnation(
        "k-ghost", PROD_EU, cluster_alias="prod-eu", deleted_at=at(4), last_seen_at=at(8),
        versions=[
            {"name": "ghost", "at": at(2), "topic_id": GHOST, "valid_to": at(4)},
            # Seen again after its deletion (R6): recorded as a live "reappeared" version.
            {"name": "ghost", "at": at(8), "topic_id": GHOST, "change_type": "reappeared",
             "valid_to": None, "is_current": True},
        ],
    )
    rows += incarnation(
        "k-legacy", PROD_EU, cluster_alias="prod-eu", last_seen_at=at(10),
        versions=[
            {"name": "legacy", "at": at(1), "topic_id": None},
            {"name": "legacy", "at": at(2), "topic_id": LEGACY, "change_type": "id_assigned"},
        ],
    )
    rows += incarnation(
        "k-evil", PROD_EU, cluster_alias="prod-eu", last_seen_at=at(10),
        versions=[{"name": EVIL_NAME, "at": at(2), "topic_id": EVIL}],
    )
    rows += incarnation(
        "k-orders-us", PROD_US, cluster_alias="prod-us", last_seen_at=at(9),
        versions=[{"name": "orders", "at": at(2), "topic_id": ORDERS_US}],
    )
    runs = [snapshot_run(PROD_EU, at(d), alias="prod-eu", topic_count=4) for d in range(1, 11)]
    runs += [snapshot_run(PROD_US, at(d), alias="prod-us", topic_count=1) for d in (2, 9)]
    return rows, runs


def bearer_check(request: Request) -> str:
    """A real (if tiny) authentication dependency: the app must call it on every route."""
    if request.headers.get("authorization") != f"Bearer {TOKEN}":
        raise HTTPException(401, "Not authenticated")
    return "tester"


def scenario_app(home: Path, monkeypatch) -> TestClient:
    """The app over ``home`` with the scenario published as ``v0001`` (not yet entered)."""
    from topic_lineage.ui.app import create_app

    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(home))
    rows, runs = scenario()
    publish("v0001", rows, runs)
    return TestClient(create_app(bearer_check, login_url="/auth/login"))


@pytest.fixture
def client(tl_home, monkeypatch):
    """The app over a home of this test's own: for the tests that change what it reads."""
    with scenario_app(tl_home, monkeypatch) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def _shared_home(tmp_path_factory):
    """One home with the scenario published, for the module's tests that only read it (a
    publish per test cost more than the test)."""
    home = tmp_path_factory.mktemp("ui-api") / "tl-home"
    with pytest.MonkeyPatch.context() as monkeypatch, \
            scenario_app(home, monkeypatch) as test_client:
        yield home, test_client


@pytest.fixture
def reader(_shared_home, monkeypatch):
    """The app over the shared published scenario (read only: nothing may change there)."""
    home, test_client = _shared_home
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(home))
    return test_client


def get(client, path, **params):
    return client.get(path, params=params, headers=AUTH)


# --- search ---------------------------------------------------------------------------------
def test_search_by_name_finds_the_topic_in_every_cluster(reader):
    """An exact name lists one result per cluster that ever had it, marked as a name match."""
    body = get(reader, "/api/search", q="orders").json()
    hits = {(r["cluster_alias"], r["topic_name"]): r for r in body["results"]}
    assert set(hits) == {("prod-eu", "orders"), ("prod-us", "orders")}
    assert hits[("prod-eu", "orders")]["incarnations"] == 2
    assert hits[("prod-us", "orders")]["incarnations"] == 1
    assert {r["matched_by"] for r in body["results"]} == {"name"}
    assert body["topic_id"] is None


def test_search_by_part_of_a_name_and_cluster_filter(reader):
    body = get(reader, "/api/search", q="ORD", cluster_id=PROD_US).json()
    assert [(r["cluster_id"], r["topic_name"], r["matched_by"]) for r in body["results"]] == [
        (PROD_US, "orders", "partial")
    ]


@pytest.mark.parametrize("form", list(id_forms(ORDERS_OLD)))
def test_search_by_every_id_form_finds_the_deleted_incarnation(reader, form):
    """Kafka's form, standard base64 (with/without padding) and RFC 4122 all find the same ID."""
    text = id_forms(ORDERS_OLD)[form]
    body = get(reader, "/api/search", q=text).json()
    assert body["topic_id"] == ORDERS_OLD
    assert [(r["cluster_id"], r["topic_name"], r["matched_by"]) for r in body["results"]] == [
        (PROD_EU, "orders", "id")
    ]


@pytest.mark.parametrize("form", list(id_forms(ORDERS_OLD)))
def test_ids_endpoint_accepts_every_id_form(reader, form):
    text = id_forms(ORDERS_OLD)[form]
    response = reader.get("/api/ids/" + quote(text, safe=""), headers=AUTH)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["topic_id"] == ORDERS_OLD
    assert body["topic_uuid"] == ORDERS_OLD_UUID
    assert [(i["cluster_id"], i["incarnation_key"], i["created_name"]) for i in body["incarnations"]] == [
        (PROD_EU, "k-orders-1", "orders")
    ]


def test_id_assigned_later_is_found_by_id_and_keeps_its_history(reader):
    """R4: a topic first seen without an ID is one incarnation with an id_assigned version."""
    body = get(reader, "/api/search", q=rfc4122(LEGACY)).json()
    assert [r["topic_name"] for r in body["results"]] == ["legacy"]
    timeline = get(reader, "/api/timeline", name="legacy").json()
    (inc,) = timeline["clusters"][0]["incarnations"]
    assert inc["topic_id"] == LEGACY
    assert [v["change_type"] for v in inc["versions"]] == ["created", "id_assigned"]
    assert inc["versions"][0]["topic_id"] is None


# --- timeline -------------------------------------------------------------------------------
def test_timeline_of_a_recreated_topic_shows_both_incarnations(reader):
    body = get(reader, "/api/timeline", name="orders", cluster_id=PROD_EU).json()
    (cluster,) = body["clusters"]
    assert cluster["cluster_alias"] == "prod-eu"
    assert cluster["recreations"] == 1
    old, new = cluster["incarnations"]
    assert (old["ordinal"], old["topic_id"], old["is_live"], old["is_recreation"]) == (1, ORDERS_OLD, False, False)
    assert old["topic_uuid"] == ORDERS_OLD_UUID
    assert old["first_seen_at"] == "2026-11-01T00:00:00Z"
    assert old["deleted_at"] == "2026-11-05T00:00:00Z"
    assert [v["change_type"] for v in old["versions"]] == ["created", "attributes_changed"]
    assert [p["partition_count"] for p in old["partition_history"]] == [3, 6]
    assert old["partition_history"][1]["at"] == "2026-11-03T00:00:00Z"
    assert (new["ordinal"], new["topic_id"], new["is_live"], new["is_recreation"]) == (2, ORDERS_NEW, True, True)
    assert new["deleted_at"] is None
    assert new["versions"][0]["is_current"] is True
    # The drawing spans first sighting to the cluster's newest snapshot.
    assert cluster["span"] == {"start": "2026-11-01T00:00:00Z", "end": "2026-11-10T00:00:00Z"}


def test_timeline_without_cluster_covers_every_cluster(reader):
    body = get(reader, "/api/timeline", name="orders").json()
    assert [(c["cluster_alias"], len(c["incarnations"])) for c in body["clusters"]] == [
        ("prod-eu", 2),
        ("prod-us", 1),
    ]


def test_reappearance_is_flagged(reader):
    """R6: a reappeared version is shown (as a warning), never hidden."""
    (cluster,) = get(reader, "/api/timeline", name="ghost").json()["clusters"]
    (inc,) = cluster["incarnations"]
    assert inc["has_reappeared"] is True
    assert inc["versions"][-1]["change_type"] == "reappeared"


# --- overview -------------------------------------------------------------------------------
def test_cluster_overview_counts_deletions_and_recreations(reader):
    body = get(reader, "/api/overview", cluster_id=PROD_EU, days=30).json()
    assert body["cluster_alias"] == "prod-eu"
    assert body["window_end"] == "2026-11-10T00:00:00Z"
    # orders (new), payments, legacy, the SQL-looking one, and ghost (current again)
    assert body["live_topics"] == 5
    assert body["deletions"] == 2  # orders (old) on 11-05, ghost on 11-04
    assert body["recreations"] == 1
    assert body["reappeared_incarnations"] == 1
    assert body["daily"] == [
        {"day": "2026-11-04", "deletions": 1, "recreations": 0},
        {"day": "2026-11-05", "deletions": 1, "recreations": 0},
        {"day": "2026-11-06", "deletions": 0, "recreations": 1},
    ]
    assert [(r["topic_name"], r["recreations"], r["is_live"]) for r in body["most_recreated"]] == [
        ("orders", 1, True)
    ]


def test_overview_window_excludes_older_events(reader):
    body = get(reader, "/api/overview", cluster_id=PROD_EU, days=4).json()
    assert body["window_start"] == "2026-11-06T00:00:00Z"
    assert (body["deletions"], body["recreations"], body["daily"]) == (0, 0, [])
    assert body["most_recreated"][0]["topic_name"] == "orders"  # all-time ranking


def test_clusters_list(reader):
    body = get(reader, "/api/clusters").json()
    summary = {c["cluster_alias"]: c for c in body["clusters"]}
    assert summary["prod-eu"]["live_topics"] == 5
    assert summary["prod-eu"]["deleted_incarnations"] == 2
    assert summary["prod-eu"]["newest_snapshot"] == "2026-11-10T00:00:00Z"
    assert summary["prod-us"]["incarnations"] == 1


def test_status_shows_a_forced_publish_of_the_published_version(client):
    """Issue #14: a publish past the gate (``publish V --force --reason``) is visible in the UI's
    status, from the version's manifest; a version published through the gate has none."""
    from topic_lineage import warehouse as wh

    assert get(client, "/api/status").json()["forced"] == []
    entry = {"reason": "gate outage, approved by on-call", "by": "alice",
             "at": "2026-11-10T00:00:00Z"}
    wh.write_manifest("v0001", {"version": "v0001", "status": "published", "forced": [entry]})
    forced = get(client, "/api/status").json()["forced"]
    assert [(f["reason"], f["by"]) for f in forced] == [(entry["reason"], "alice")]


# --- names are data -------------------------------------------------------------------------
def test_sql_looking_name_is_data(reader):
    body = get(reader, "/api/search", q=EVIL_NAME).json()
    assert [(r["topic_name"], r["matched_by"]) for r in body["results"]] == [(EVIL_NAME, "name")]
    timeline = get(reader, "/api/timeline", name=EVIL_NAME).json()
    assert timeline["clusters"][0]["incarnations"][0]["topic_id"] == EVIL
    # The table is still there and complete.
    status = get(reader, "/api/status").json()
    assert status["row_counts"]["topic_incarnations"] == len(scenario()[0])


@pytest.mark.parametrize("query", ["%", "_", "' OR '1'='1", "orders' --"])
def test_wildcards_and_quotes_match_literally(reader, query):
    """LIKE wildcards and quotes in a query are characters to find, not syntax."""
    body = get(reader, "/api/search", q=query).json()
    assert all(query in r["topic_name"] for r in body["results"]), body
    if query == "%":
        assert body["results"] == []  # no topic name contains a percent sign
    if query == "_":  # only the one name with an underscore, not every name
        assert [r["topic_name"] for r in body["results"]] == [EVIL_NAME]


# --- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/timeline", {"name": "no-such-topic"}),
        ("/api/timeline", {"name": "payments", "cluster_id": PROD_US}),
        ("/api/ids/" + canonical("00000000-0000-4000-8000-000000000001"), {}),
        ("/api/overview", {"cluster_id": "no-such-cluster"}),
    ],
    ids=["unknown-name", "name-in-other-cluster", "unknown-id", "unknown-cluster"],
)
def test_not_found(reader, path, params):
    response = get(reader, path, **params)
    assert response.status_code == 404
    assert response.json()["detail"]


@pytest.mark.parametrize("text", ["not-an-id", "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ"])
def test_invalid_or_reserved_id_is_a_400_naming_the_input(reader, text):
    response = reader.get("/api/ids/" + text, headers=AUTH)
    assert response.status_code == 400
    assert text in response.json()["detail"]


def test_search_validates_parameters(reader):
    assert get(reader, "/api/search").status_code == 422
    assert get(reader, "/api/search", q="   ").status_code == 422
    assert get(reader, "/api/overview", cluster_id=PROD_EU, days=0).status_code == 422


# --- authentication -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/static/app.js",
        "/api/status",
        "/api/clusters",
        "/api/search?q=orders",
        "/api/timeline?name=orders",
        f"/api/ids/{ORDERS_NEW}",
        f"/api/overview?cluster_id={PROD_EU}",
        "/api/gate",
        "/api/openapi.json",
        "/data-docs/index.html",
    ],
)
def test_every_route_refuses_unauthenticated_requests(reader, path):
    response = reader.get(path)
    assert response.status_code == 401
    assert "orders" not in response.text
    wrong = reader.get(path, headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 401


def test_unauthenticated_browser_gets_a_sign_in_link(reader):
    response = reader.get("/", headers={"Accept": "text/html"})
    assert response.status_code == 401
    assert 'href="/auth/login"' in response.text


def test_create_app_refuses_to_run_without_authentication():
    from topic_lineage.ui.app import create_app

    with pytest.raises(ValueError):
        create_app(None)


# --- page, versions, gate -------------------------------------------------------------------
def test_page_and_assets_are_served(reader):
    page = get(reader, "/")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<meta name="tl-base" content="/">' in page.text
    assert get(reader, "/static/app.js").headers["content-type"].startswith("text/javascript")
    assert get(reader, "/static/style.css").status_code == 200
    assert get(reader, "/static/../app.py").status_code == 404


def test_reads_only_the_published_version_and_follows_the_pointer(client):
    """R7 for readers: a new version is invisible until the pointer names it, then it is used."""
    rows, runs = scenario()
    extra = incarnation("k-new", PROD_EU, cluster_alias="prod-eu",
                        versions=[{"name": "brand-new", "at": at(10), "topic_id": canonical(uuid.uuid4())}])
    publish("v0002", rows + extra, runs, point=False)
    assert get(client, "/api/search", q="brand-new").json()["results"] == []
    assert get(client, "/api/status").json()["published_version"] == "v0001"
    point_at("v0002")
    assert [r["topic_name"] for r in get(client, "/api/search", q="brand-new").json()["results"]] == ["brand-new"]
    assert get(client, "/api/status").json()["published_version"] == "v0002"


def test_hidden_and_underscore_files_are_ignored(client):
    rows, _ = scenario()
    junk_dir = tables.versions_dir() / "v0001" / tables.TOPIC_INCARNATIONS / "_temporary"
    junk_dir.mkdir()
    (junk_dir / "part-00000.parquet").write_bytes(b"half-written")
    client.app.state.published._loaded = None  # force a reload of the same version
    assert get(client, "/api/status").json()["row_counts"]["topic_incarnations"] == len(rows)


def test_many_part_files_are_one_table(tl_home):
    from topic_lineage.ui.app import create_app

    rows, runs = scenario()
    publish("v0001", rows, runs, files=4)
    with TestClient(create_app(bearer_check)) as test_client:
        body = get(test_client, "/api/timeline", name="orders", cluster_id=PROD_EU).json()
    assert len(body["clusters"][0]["incarnations"]) == 2


def test_nothing_published_yet(tl_home):
    from topic_lineage.ui.app import create_app

    with TestClient(create_app(bearer_check)) as test_client:
        status = get(test_client, "/api/status").json()
        assert status["published_version"] is None
        assert status["gate"]["available"] is False
        assert get(test_client, "/api/clusters").json() == {"clusters": []}
        assert get(test_client, "/api/timeline", name="orders").status_code == 404


def test_pointer_to_a_missing_version_is_a_503_naming_it(tl_home):
    from topic_lineage.ui.app import create_app

    point_at_legacy("v9999")  # a home from before the Iceberg tables naming a lost version
    with TestClient(create_app(bearer_check)) as test_client:
        response = get(test_client, "/api/clusters")
    assert response.status_code == 503
    assert "v9999" in response.json()["detail"]


GX_PAGE = """<!DOCTYPE html><html><head>
<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>
<script src="https://code.jquery.com/jquery-3.7.1.min.js"></script>
<style>td { color: black; }</style></head><body>
<img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png">
<button onclick="hideSucceededValidations()">x</button>
<h1>incarnation validation</h1><script>$('#t').bootstrapTable({data: []});</script>
</body></html>"""


def gx_site() -> dict:
    """A small Data Docs site as GX lays it out (pages, result JSON, static files)."""
    from topic_lineage.quality import context as quality_context

    site = quality_context.data_docs_dir()
    run = "topic_incarnations/v0002/20261110T000500.000000Z/topic_lineage-topic_incarnations"
    page = site / "validations" / f"{run}.html"
    page.parent.mkdir(parents=True)
    page.write_text(GX_PAGE)
    result = tables.quality_dir() / "validations" / f"{run}.json"
    result.parent.mkdir(parents=True)
    result.write_text(json.dumps({"success": False, "statistics": {
        "evaluated_expectations": 2, "successful_expectations": 1}}))
    (site / "expectations").mkdir()
    (site / "expectations" / "topic_incarnations.html").write_text(GX_PAGE)
    (site / "static" / "images").mkdir(parents=True)
    (site / "static" / "images" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    quality_context.data_docs_index().write_text(GX_PAGE.replace("incarnation validation", "GX index"))
    return {"page": page, "relative": f"data_docs/validations/{run}.html"}


def record_run(version, success, *, detail_page=None, severities=True, warning_failed=False):
    """A gate run recorded through the gate's own writer (``severities=False``: an old record)."""
    from datetime import datetime

    from topic_lineage.quality import context as quality_context
    from topic_lineage.quality import overview as quality_overview
    from topic_lineage.quality.gate import Failure, GateResult, Outcome

    outcomes = [
        Outcome("topic_incarnations", "live IDs unique", "", True, 0, []),
        Outcome("topic_incarnations", "no reappeared version", "", success, 0 if success else 1, []),
    ]
    failures = [] if success else [Failure("no reappeared version", "", [], "topic_incarnations", 1)]
    quality_overview.record(GateResult(
        version=version, success=success, failures=failures,
        docs_index=quality_context.overview_page(), outcomes=outcomes,
        detail_pages={"topic_incarnations": detail_page.as_uri()} if detail_page else {},
        validated_at=datetime(2026, 11, 10, 0, 5, tzinfo=UTC),
    ))
    log = quality_context.gate_log()
    lines = log.read_text().splitlines()
    last = json.loads(lines[-1])
    if severities:  # the fields the gate writes since severities exist (interface.md)
        for outcome in last["outcomes"]:
            outcome["severity"] = "critical"
        last["warnings"] = []
        if warning_failed:
            last["outcomes"].append({"table": "snapshot_runs", "name": "fresh snapshots",
                                     "description": "", "success": False, "severity": "warning",
                                     "unexpected_count": 1, "rows": []})
            last["warnings"] = ["snapshot_runs: fresh snapshots"]
    log.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")


def test_gate_badge_shows_the_published_version_and_a_newer_failed_build(client):
    """The badge is the published version's gate run; a newer failed build is shown apart."""
    site = gx_site()
    record_run("v0001", True, detail_page=site["page"], warning_failed=True)
    record_run("v0002", False, detail_page=site["page"])  # failed: never published (R7)
    body = get(client, "/api/gate").json()
    assert body["available"] is True and body["success"] is True
    assert (body["version"], body["published_version"]) == ("v0001", "v0001")
    assert body["expectations"] == 3
    assert body["failed_expectations"] == []
    assert body["warnings"] == ["snapshot_runs: fresh snapshots"]
    assert body["validated_at"] == "2026-11-10T00:05:00Z"
    assert body["report"] == "index.html"
    assert body["data_docs"] == "data_docs/index.html"
    assert body["detail_pages"] == {"topic_incarnations": site["relative"]}
    newer = body["newer_failed"]
    assert (newer["version"], newer["success"]) == ("v0002", False)
    assert newer["failed_expectations"] == ["topic_incarnations: no reappeared version"]
    assert get(client, "/api/status").json()["gate"] == body
    assert "file://" not in json.dumps(body) and str(tables.quality_dir()) not in json.dumps(body)

    # a later passing run of another version supersedes the failed one
    record_run("v0003", True)
    assert get(client, "/api/gate").json()["newer_failed"] is None
    # the published version's newest run counts (validated again, now failing)
    record_run("v0001", False, severities=False)
    body = get(client, "/api/gate").json()
    assert body["success"] is False and body["warnings"] == []
    assert body["failed_expectations"] == ["topic_incarnations: no reappeared version"]


def test_gate_badge_with_old_records_and_nothing_published(tl_home):
    """Records without severity fields read as critical; no published version: no badge."""
    from topic_lineage.ui.gate import result_for

    old = {"version": "v1", "success": False, "outcomes": [
        {"table": "t", "name": "a", "success": False}, {"table": "t", "name": "b", "success": True}]}
    assert result_for(None, [old])["available"] is False
    assert result_for(None, [old])["newer_failed"]["failed_expectations"] == ["t: a"]
    summary = result_for("v1", [old])
    assert summary["available"] is True and summary["warnings"] == []
    assert summary["failed_expectations"] == ["t: a"] and summary["newer_failed"] is None
    assert result_for("v9", [])["available"] is False


def test_gate_report_and_data_docs_are_served_over_http_without_scripts(client):
    site = gx_site()
    record_run("v0001", False, detail_page=site["page"])
    report = get(client, "/data-docs/index.html")
    assert report.status_code == 200 and "FAILED" in report.text
    assert "file://" not in report.text and str(tables.quality_dir()) not in report.text
    assert f'href="{site["relative"]}"' in report.text  # relative: works under /data-docs/
    assert 'href="data_docs/index.html"' in report.text
    # the report file on disk holds the same relative links
    assert f'href="{site["relative"]}"' in (tables.quality_dir() / "index.html").read_text()

    page = get(client, "/data-docs/" + site["relative"])
    assert page.status_code == 200 and "incarnation validation" in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src" not in policy  # no script at all
    assert report.headers["content-security-policy"] == policy
    for gone in ("<script", "https://", "onclick", "bootstrapTable"):
        assert gone not in page.text
    assert "td { color: black; }" in page.text  # GX's inline styles stay

    index = get(client, "/data-docs/data_docs/index.html")
    assert "<script" not in index.text and "GX index" not in index.text  # rebuilt, not GX's
    assert "v0002" in index.text and "FAILED" in index.text and "1 of 2" in index.text
    assert 'href="expectations/topic_incarnations.html"' in index.text
    assert f'href="{site["relative"].removeprefix("data_docs/")}"' in index.text
    image = get(client, "/data-docs/data_docs/static/images/logo.png")
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"


@pytest.fixture(scope="module")
def _docs_home(tmp_path_factory):
    """A home with the scenario published and a Data Docs site holding a symlink to a file
    outside it, for the path tests (which only read it)."""
    root = tmp_path_factory.mktemp("ui-api-docs")
    outside = root / "secret.html"
    outside.write_text("secret")
    with pytest.MonkeyPatch.context() as monkeypatch, \
            scenario_app(root / "tl-home", monkeypatch) as test_client:
        site = gx_site()
        (site["page"].parents[4] / "linked.html").symlink_to(outside)
        yield root / "tl-home", test_client


@pytest.fixture
def docs_reader(_docs_home, monkeypatch):
    home, test_client = _docs_home
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", str(home))
    return test_client


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("%00", 400),
        ("index.html%00.png", 400),
        ("a" * 5000, 400),
        ("data_docs/" + "a" * 1000 + ".html", 404),  # longer than a file name may be
        ("..%2F..%2F..%2F..%2Fetc%2Fpasswd", 404),
        ("data_docs/..%2F..%2F..%2Fetc%2Fpasswd", 404),
        ("%2Fetc%2Fpasswd", 404),
        ("gate_runs.jsonl", 404),  # only the report and the site are served
        ("validations/x.json", 404),
        ("data_docs/.hidden.html", 404),
        ("data_docs/missing.html", 404),
        ("data_docs/linked.html", 404),  # a symlink to a file outside
        ("data_docs/static", 404),  # a directory
    ],
)
def test_data_docs_paths_are_refused_never_a_server_error(docs_reader, path, status):
    response = get(docs_reader, "/data-docs/" + path)
    assert response.status_code == status, response.text
    assert "secret" not in response.text


# --- the Airflow plugin with Airflow's own authentication -----------------------------------
PLUGIN_CHECK = textwrap.dedent(
    """
    import importlib.util, sys
    from airflow import settings
    from airflow.models.revoked_token import RevokedToken
    RevokedToken.__table__.create(settings.engine)  # the one table Airflow's token check reads
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    spec = importlib.util.spec_from_file_location("plugin", sys.argv[1])
    plugin = importlib.util.module_from_spec(spec); spec.loader.exec_module(plugin)
    (entry,) = plugin.TopicLineagePlugin.fastapi_apps
    root = FastAPI()
    root.mount(entry["url_prefix"], entry["app"])
    manager = init_auth_manager(root)
    token = manager.generate_jwt(SimpleAuthManagerUser(username="alice", role="viewer"))
    client = TestClient(root)
    out = {
        "no_token": client.get("/topic-lineage/api/status").status_code,
        "bad_token": client.get("/topic-lineage/api/status",
                                headers={"Authorization": "Bearer not.a.jwt"}).status_code,
        "page_no_token": client.get("/topic-lineage/", headers={"Accept": "text/html"}).text,
        "bearer": client.get("/topic-lineage/api/status",
                             headers={"Authorization": "Bearer " + token}).status_code,
    }
    client.cookies.set("_token", token)
    out["cookie"] = client.get("/topic-lineage/api/clusters").status_code
    out["view"] = plugin.TopicLineagePlugin.external_views[0]
    import json; print("RESULT" + json.dumps(out))
    """
)


@pytest.mark.airflow
def test_plugin_requires_an_airflow_login(tl_home, tmp_path):
    """Airflow's JWT check guards the plugin: no token 401, bad token 403, valid token 200."""
    rows, runs = scenario()
    publish("v0001", rows, runs)
    airflow_home = tmp_path / "airflow"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home}/airflow.db",
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "alice:viewer",
        "AIRFLOW__API_AUTH__JWT_SECRET": "test-secret-for-topic-lineage-ui-0123456789",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "TOPIC_LINEAGE_HOME": str(tl_home),
    }
    done = subprocess.run(
        [sys.executable, "-c", PLUGIN_CHECK, str(REPO / "topic_lineage" / "ui" / "plugin.py")],
        check=False, env=env, capture_output=True, text=True, timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT"):])
    assert out["no_token"] == 401
    assert out["bad_token"] == 403
    assert "/auth/login" in out["page_no_token"]
    assert out["bearer"] == 200
    assert out["cookie"] == 200
    assert out["view"]["name"] == "Topic lineage"
    assert out["view"]["href"] == "/topic-lineage/"


def test_a_carried_position_warning_states_the_group_topic_and_incarnation(tl_home):
    """The page's warning line states what the gate found (which group carried its position
    onto which topic and incarnation), not the expectation's name; a warning without sample
    rows keeps its name."""
    from topic_lineage.quality.suites import NO_CARRIED_POSITIONS
    from topic_lineage.ui.gate import result_for

    carried = {"table": "group_incarnations", "name": NO_CARRIED_POSITIONS, "success": False,
               "severity": "warning", "unexpected_count": 1, "rows": [
                   {"cluster_id": "c1", "group_id": "billing", "topic_name": "orders",
                    "topic_id": "AaIbNinvcfCJ-jwNWEnfDQ", "incarnation_key": "f3b6f141",
                    "max_committed_offset": 5}]}
    fresh = {"table": "snapshot_runs", "name": "fresh snapshots", "success": False,
             "severity": "warning", "unexpected_count": 1, "rows": []}
    record = {"version": "v1", "success": True, "outcomes": [carried, fresh],
              "warnings": [f"group_incarnations: {NO_CARRIED_POSITIONS}",
                           "snapshot_runs: fresh snapshots"]}
    assert result_for("v1", [record])["warnings"] == [
        ("group billing carried its position onto orders (incarnation f3b6f141, topic ID "
         "AaIbNinvcfCJ-jwNWEnfDQ, cluster c1): committed offset 5 beyond its log end"),
        "snapshot_runs: fresh snapshots",
    ]
    carried["unexpected_count"] = 3
    assert result_for("v1", [record])["warnings"][0].endswith("(and 2 more: see Data Docs)")
