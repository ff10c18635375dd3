"""Consumer groups on a topic's timeline (issue #26 item 5, contract R8-R10).

Each incarnation of ``/api/timeline`` lists the groups that committed offsets on it
(``group_incarnations``): group ID, first and last seen, max committed offset and the
``carried_offset`` mark (R9: a committed offset beyond the incarnation's log end offset read in
the same snapshot, i.e. a position carried over from an earlier incarnation of the same name).

- over hand-written published Parquet (the fixtures of tests/test_ui_api.py plus group tables);
- over a real Spark build of snapshots with groups imported through the store (marker ``spark``);
- the page in headless Chromium, network cut off, over that real build (markers ``spark``,
  ``slow``): the groups under each incarnation, the carried mark, a group ID that looks like
  HTML shown as text. Screenshot: ``test-output/ui-orders-consumer-groups.png``.
"""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from published_tables import arrow_schema, at, point_at_legacy, publish
from test_ui_api import (
    ORDERS_NEW,
    ORDERS_OLD,
    PROD_EU,
    PROD_US,
    TOKEN,
    bearer_check,
    get,
    scenario,
)

from topic_lineage import tables

EVIL_GROUP = "<img src=x onerror=alert(1)>'; DROP TABLE group_incarnations; --"


def group_row(cluster_id, group_id, key, name, first, last, max_offset, carried, topic_id=None):
    return {"cluster_id": cluster_id, "group_id": group_id, "incarnation_key": key,
            "topic_id": topic_id, "topic_name": name, "first_seen_at": first, "last_seen_at": last,
            "max_committed_offset": max_offset, "carried_offset": carried}


def group_rows() -> list[dict]:
    return [
        group_row(PROD_EU, "billing", "k-orders-1", "orders", at(1), at(4), 120, False, ORDERS_OLD),
        group_row(PROD_EU, "audit", "k-orders-1", "orders", at(2), at(3), 40, False, ORDERS_OLD),
        # re-created orders: billing's position came over from the first incarnation (R9)
        group_row(PROD_EU, "billing", "k-orders-2", "orders", at(6), at(10), 130, True, ORDERS_NEW),
        group_row(PROD_EU, EVIL_GROUP, "k-orders-2", "orders", at(7), at(9), 3, False, ORDERS_NEW),
        group_row(PROD_EU, "billing", "k-payments", "payments", at(1), at(10), 7, False),
        # the same key in another cluster is another incarnation: the join is on both
        group_row(PROD_US, "stray", "k-orders-2", "orders", at(2), at(2), 1, False),
    ]


def write_group_tables(version: str, incarnation_rows: list[dict]) -> None:
    """``group_incarnations`` (and an empty ``group_offsets``) of ``version``, in the DDL's
    columns, as Parquet beside the topic tables (tests/published_tables.py writes those)."""
    for table, ddl, rows in (
        (tables.GROUP_INCARNATIONS, tables.GROUP_INCARNATIONS_DDL, incarnation_rows),
        (tables.GROUP_OFFSETS, tables.GROUP_OFFSETS_DDL, []),
    ):
        directory = tables.versions_dir() / version / table
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(ddl)),
                       directory / "part-00000.parquet")
        (directory / "_SUCCESS").write_bytes(b"")


@pytest.fixture
def client(tl_home):
    from topic_lineage.ui.app import create_app

    rows, runs = scenario()
    publish("v0001", rows, runs)
    write_group_tables("v0001", group_rows())
    with TestClient(create_app(bearer_check)) as test_client:
        yield test_client


def groups_by_incarnation(body: dict) -> dict[str, list[dict]]:
    return {inc["incarnation_key"]: inc["groups"]
            for cluster in body["clusters"] for inc in cluster["incarnations"]}


# --- over published Parquet -----------------------------------------------------------------
def test_each_incarnation_lists_its_groups_ordered_by_group_id(client):
    body = get(client, "/api/timeline", name="orders").json()
    groups = groups_by_incarnation(body)
    assert set(groups) == {"k-orders-1", "k-orders-2", "k-orders-us"}
    assert groups["k-orders-1"] == [
        {"group_id": "audit", "first_seen_at": "2026-11-02T00:00:00Z",
         "last_seen_at": "2026-11-03T00:00:00Z", "max_committed_offset": 40,
         "carried_offset": False},
        {"group_id": "billing", "first_seen_at": "2026-11-01T00:00:00Z",
         "last_seen_at": "2026-11-04T00:00:00Z", "max_committed_offset": 120,
         "carried_offset": False},
    ]
    # ordered by group ID ('<' sorts before letters); the carried position is marked
    assert [(g["group_id"], g["carried_offset"]) for g in groups["k-orders-2"]] == [
        (EVIL_GROUP, False), ("billing", True)]
    billing = groups["k-orders-2"][1]
    assert (billing["first_seen_at"], billing["last_seen_at"], billing["max_committed_offset"]) == (
        "2026-11-06T00:00:00Z", "2026-11-10T00:00:00Z", 130)
    # prod-us's orders: no group committed on it (the stray row is keyed in the other cluster)
    assert groups["k-orders-us"] == []


def test_cluster_filter_and_other_topics_keep_their_own_groups(client):
    body = get(client, "/api/timeline", name="orders", cluster_id=PROD_US).json()
    assert groups_by_incarnation(body) == {"k-orders-us": []}
    payments = groups_by_incarnation(get(client, "/api/timeline", name="payments").json())
    assert [g["group_id"] for g in payments["k-payments"]] == ["billing"]
    ghost = groups_by_incarnation(get(client, "/api/timeline", name="ghost").json())
    assert ghost == {"k-ghost": []}


def test_html_and_sql_looking_group_id_is_data(client):
    groups = groups_by_incarnation(get(client, "/api/timeline", name="orders").json())
    assert groups["k-orders-2"][0]["group_id"] == EVIL_GROUP
    # nothing was executed: the table is whole
    counts = get(client, "/api/status").json()["row_counts"]
    assert counts[tables.GROUP_INCARNATIONS] == len(group_rows())


def test_version_without_group_rows_has_empty_groups(tl_home):
    """A version whose group tables are empty or absent (built before they existed): every
    incarnation has ``groups: []``."""
    from topic_lineage.ui.app import create_app

    rows, runs = scenario()
    publish("v0001", rows, runs, point=False)
    for table in (tables.GROUP_OFFSETS, tables.GROUP_INCARNATIONS):  # no group tables at all
        shutil.rmtree(tables.versions_dir() / "v0001" / table, ignore_errors=True)
    point_at_legacy("v0001")  # only versions from before the Iceberg tables can lack them
    with TestClient(create_app(bearer_check)) as test_client:
        groups = groups_by_incarnation(get(test_client, "/api/timeline", name="orders").json())
    assert groups == {"k-orders-1": [], "k-orders-2": [], "k-orders-us": []}

    publish("v0002", rows, runs)
    write_group_tables("v0002", [])  # written, with no rows
    with TestClient(create_app(bearer_check)) as test_client:
        groups = groups_by_incarnation(get(test_client, "/api/timeline", name="orders").json())
        assert get(test_client, "/api/status").json()["published_version"] == "v0002"
    assert groups == {"k-orders-1": [], "k-orders-2": [], "k-orders-us": []}


def test_tables_without_the_group_table_loaded(tl_home, monkeypatch):
    """A DuckDB database without ``group_incarnations`` at all (the UI loads ``tables.TABLES``):
    no groups, no error."""
    from topic_lineage.ui.app import create_app

    monkeypatch.setattr(tables, "TABLES", (tables.SNAPSHOT_RUNS, tables.TOPIC_SNAPSHOTS,
                                           tables.TOPIC_INCARNATIONS))
    rows, runs = scenario()
    publish("v0001", rows, runs)
    write_group_tables("v0001", group_rows())
    with TestClient(create_app(bearer_check)) as test_client:
        response = get(test_client, "/api/timeline", name="orders")
    assert response.status_code == 200
    assert all(groups == [] for groups in groups_by_incarnation(response.json()).values())


# --- over a real Spark build ----------------------------------------------------------------
def offset(committed: int, log_end: int | None, partition: int = 0) -> dict:
    return {"topic": "orders", "partition": partition, "committed_offset": committed,
            "log_end_offset": log_end}


def snapshot(day: int, topic_id: str | None, groups: dict[str, list[dict]]) -> dict:
    topics = [] if topic_id is None else [
        {"name": "orders", "topic_id": topic_id, "partition_count": 3, "replication_factor": 3,
         "is_internal": False, "error": None}]
    return {
        "cluster_id": PROD_EU, "cluster_alias": "prod-eu",
        "captured_at": f"2026-11-0{day}T00:00:00Z", "complete": True, "topics": topics,
        "groups_complete": True,
        "groups": [{"group_id": g, "state": "Stable", "error": None, "offsets": o}
                   for g, o in groups.items()],
    }


SNAPSHOTS_WITH_GROUPS = [
    snapshot(1, ORDERS_OLD, {"billing": [offset(10, 12)], EVIL_GROUP: [offset(3, 12)]}),
    snapshot(2, ORDERS_OLD, {"billing": [offset(40, 50), offset(5, 9, partition=1)]}),
    snapshot(3, None, {}),  # orders deleted
    # re-created: billing's committed offset 40 is beyond the new log end 0, carried over (R9)
    snapshot(4, ORDERS_NEW, {"billing": [offset(40, 0)], "audit": [offset(0, 0)]}),
    snapshot(5, ORDERS_NEW, {"billing": [offset(45, 60)]}),
]


def build_and_publish_groups(spark, tmp_path, version: str, *, real_gate: bool = False):
    """The snapshots through the real path: the store's JSON Lines import, the Spark build, the
    gate (the real one with ``real_gate``, else a passing verdict: tests/gate_support.py),
    publish. Returns the real gate's result (or ``None``)."""
    from gate_support import pass_gate

    from topic_lineage import store
    from topic_lineage import warehouse as wh
    from topic_lineage.scd.build import build_version

    source = tmp_path / "snapshots.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in SNAPSHOTS_WITH_GROUPS))
    store.import_jsonl(source)
    build_version(spark, version, full_refresh=True)
    result = None
    if real_gate:
        from topic_lineage.quality.gate import validate_version

        result = validate_version(spark, version, max_age=None)
    else:
        pass_gate(version)
    wh.publish(version)
    return result


def expected_groups() -> tuple[list, list]:
    old = [(EVIL_GROUP, "2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z", 3, False),
           ("billing", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", 40, False)]
    new = [("audit", "2026-11-04T00:00:00Z", "2026-11-04T00:00:00Z", 0, False),
           ("billing", "2026-11-04T00:00:00Z", "2026-11-05T00:00:00Z", 45, True)]
    return old, new


def as_tuples(groups: list[dict]) -> list[tuple]:
    return [(g["group_id"], g["first_seen_at"], g["last_seen_at"], g["max_committed_offset"],
             g["carried_offset"]) for g in groups]


@pytest.mark.spark
def test_groups_of_a_spark_built_version(spark, tl_home, tmp_path):
    from topic_lineage.ui.app import create_app

    build_and_publish_groups(spark, tmp_path, "v-groups")
    with TestClient(create_app(bearer_check)) as client:
        body = get(client, "/api/timeline", name="orders").json()
        status = get(client, "/api/status").json()
    (cluster,) = body["clusters"]
    old, new = cluster["incarnations"]
    assert (old["topic_id"], new["topic_id"]) == (ORDERS_OLD, ORDERS_NEW)
    expected_old, expected_new = expected_groups()
    assert as_tuples(old["groups"]) == expected_old
    assert as_tuples(new["groups"]) == expected_new
    assert status["published_version"] == "v-groups"
    assert status["row_counts"][tables.GROUP_INCARNATIONS] == 4
    assert status["row_counts"][tables.GROUP_OFFSETS] == 7


# --- the page in Chromium, offline ----------------------------------------------------------
@pytest.mark.spark
@pytest.mark.slow
def test_groups_on_the_timeline_page_in_chromium(spark, tl_home, tmp_path):
    from browser_support import CHROMIUM, OUTPUT, wait_for
    from test_ui_real_build import offline_chromium, serving

    from topic_lineage.ui.app import create_app

    if not shutil.which(CHROMIUM) and not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (scripts/test.sh installs it)")
    # the real gate: a carried position is a warning, not a reason to refuse the version
    gate = build_and_publish_groups(spark, tmp_path, "v-groups", real_gate=True)
    assert gate.success, gate
    OUTPUT.mkdir(exist_ok=True)
    with serving(create_app(bearer_check)) as base, offline_chromium(tmp_path) as browser:
        browser.call("Network.enable", session=True)
        browser.call("Network.setExtraHTTPHeaders", session=True,
                     headers={"Authorization": f"Bearer {TOKEN}"})
        browser.goto(f"{base}/#name=orders")
        incarnations = f'.cluster-block[data-cluster="{PROD_EU}"] .incarnation'
        wait_for(lambda: browser.js(f"document.querySelectorAll('{incarnations}').length") == 2,
                 30, "the two incarnations of orders")
        shown = browser.js(f"""[...document.querySelectorAll('{incarnations}')].map(inc => ({{
            title: inc.querySelector('.groups-title').textContent,
            rows: [...inc.querySelectorAll('table.groups tbody tr')].map(tr =>
                [...tr.cells].map(td => td.textContent)),
            carried: [...inc.querySelectorAll('tr.carried .carried-mark')].map(b =>
                [b.closest('tr').dataset.group, b.textContent, b.title]),
            note: inc.querySelector('.groups-note') && inc.querySelector('.groups-note').textContent,
        }}))""")
        old, new = shown
        assert old["title"] == "Consumer groups (2)" and new["title"] == "Consumer groups (2)"
        assert old["rows"] == [
            [EVIL_GROUP, "2026-11-01 00:00:00 UTC", "2026-11-01 00:00:00 UTC", "3", ""],
            ["billing", "2026-11-01 00:00:00 UTC", "2026-11-02 00:00:00 UTC", "40", ""],
        ]
        assert new["rows"] == [
            ["audit", "2026-11-04 00:00:00 UTC", "2026-11-04 00:00:00 UTC", "0", ""],
            ["billing", "2026-11-04 00:00:00 UTC", "2026-11-05 00:00:00 UTC", "45",
             "carried position"],
        ]
        assert old["carried"] == []
        ((group, text, title),) = new["carried"]
        assert (group, text) == ("billing", "carried position")
        assert "log end" in title and "carried over from an earlier incarnation" in title
        # explained on the page too, not only on hover
        assert old["note"] is None
        assert new["note"].startswith("carried position: the committed offset exceeded")
        # the mark stands out: the warning colour, the row highlighted
        colour = browser.js("getComputedStyle(document.querySelector('.carried-mark'))"
                            ".backgroundColor")
        assert colour == "rgb(217, 72, 15)"  # --warn
        # the HTML-looking group ID is text: no element was made of it, no script ran
        assert browser.js("document.querySelectorAll('img').length") == 0
        assert browser.js("[...document.querySelectorAll('code.group-id')].map(c => c.textContent)"
                          ".includes(" + json.dumps(EVIL_GROUP) + ")")
        names = browser.js("performance.getEntriesByType('resource').map(e => e.name)")
        assert [n for n in names if not n.startswith(base + "/")] == []
        browser.screenshot(OUTPUT / "ui-orders-consumer-groups.png")

        # an incarnation no group committed on says so
        browser.js("""(() => { const box = document.getElementById('timeline');
            box.replaceChildren(renderIncarnation({ ordinal: 1, incarnation_key: 'k', topic_id: null,
              first_seen_at: '2026-11-01T00:00:00Z', last_seen_at: '2026-11-01T00:00:00Z',
              deleted_at: null, is_live: true, has_reappeared: false, is_recreation: false,
              partition_history: [], versions: [], groups: [] })); })()""")
        assert browser.js("document.querySelector('#timeline .groups-empty').textContent") == (
            "no consumer group committed offsets on this incarnation")
        browser.screenshot(OUTPUT / "ui-no-consumer-groups.png")
