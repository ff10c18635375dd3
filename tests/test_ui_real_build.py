"""The page reads what the real Spark build publishes (not only the hand-written fixtures).

Three snapshots (orders created, deleted, re-created with a new ID) go through the snapshot
store and `topic_lineage.scd.build`, are published, and the UI's API must show the two incarnations.
The real quality gate then writes its report and Great Expectations Data Docs, which the app
serves over http (uvicorn) to Debian's headless Chromium with the network cut off (every host
but 127.0.0.1 unresolvable, a proxy that goes nowhere): the pages must show their content
(expectations and verdicts), run no script and load nothing from another origin.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import urllib.request

import pytest
from browser_support import CHROMIUM, OUTPUT, chromium, free_port, wait_for
from fastapi.testclient import TestClient
from gate_support import pass_gate
from test_ui_api import AUTH, ORDERS_NEW, ORDERS_OLD, TOKEN, bearer_check

from topic_lineage import store, tables
from topic_lineage import warehouse as wh

pytestmark = pytest.mark.spark

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


def snapshot(day: int, topics: list[dict]) -> dict:
    return {"cluster_id": CLUSTER, "cluster_alias": "prod-eu",
            "captured_at": f"2026-11-0{day}T00:00:00Z", "complete": True, "topics": topics}


def orders(topic_id: str, partitions: int) -> dict:
    return {"name": "orders", "topic_id": topic_id, "partition_count": partitions,
            "replication_factor": 3, "is_internal": False, "error": None}


def test_timeline_of_a_spark_built_version(spark, tl_home, tmp_path):
    from topic_lineage.scd.build import build_version
    from topic_lineage.ui.app import create_app

    lines = [
        snapshot(1, [orders(ORDERS_OLD, 3)]),
        snapshot(2, [orders(ORDERS_OLD, 6)]),
        snapshot(3, []),
        snapshot(4, [orders(ORDERS_NEW, 12)]),
    ]
    source = tmp_path / "snapshots.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store.import_jsonl(source)
    build_version(spark, "v-ui", full_refresh=True)
    pass_gate("v-ui")  # the gate is not the subject here (tests/gate_support.py)
    wh.publish("v-ui")

    with TestClient(create_app(bearer_check)) as client:
        body = client.get("/api/timeline", params={"name": "orders"}, headers=AUTH).json()
        (cluster,) = body["clusters"]
        old, new = cluster["incarnations"]
        assert (old["topic_id"], old["is_live"]) == (ORDERS_OLD, False)
        assert old["first_seen_at"] == "2026-11-01T00:00:00Z"
        assert old["deleted_at"] == "2026-11-03T00:00:00Z"
        assert [p["partition_count"] for p in old["partition_history"]] == [3, 6]
        assert (new["topic_id"], new["is_live"], new["is_recreation"]) == (ORDERS_NEW, True, True)
        assert cluster["span"]["end"] == "2026-11-04T00:00:00Z"

        overview = client.get("/api/overview", params={"cluster_id": CLUSTER, "days": 30},
                              headers=AUTH).json()
        assert (overview["live_topics"], overview["deletions"], overview["recreations"]) == (1, 1, 1)
        status = client.get("/api/status", headers=AUTH).json()
        assert status["published_version"] == "v-ui"
        assert status["row_counts"]["snapshot_runs"] == 4


@contextlib.contextmanager
def serving(app):
    """The app over real http (uvicorn in a thread) on a free port of 127.0.0.1."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "uvicorn")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def offline_chromium(tmp_path):
    """Headless Chromium that can reach 127.0.0.1 and nothing else."""
    port = free_port()
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=127.0.0.1",
            f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
            f"--user-data-dir={tmp_path / 'chromium'}", "about:blank"]
    with chromium(args, port, tmp_path) as page:
        yield page


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which(CHROMIUM) and not os.path.exists(CHROMIUM),
                    reason="Debian's chromium is not installed (scripts/test.sh installs it)")
def test_real_data_docs_render_offline_in_chromium(spark, tl_home, tmp_path):
    from topic_lineage.quality import context as qc
    from topic_lineage.quality.gate import validate_version
    from topic_lineage.scd.build import build_version
    from topic_lineage.ui.app import create_app

    source = tmp_path / "snapshots.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in [
        snapshot(1, [orders(ORDERS_OLD, 3)]), snapshot(3, []), snapshot(4, [orders(ORDERS_NEW, 12)]),
    ]))
    store.import_jsonl(source)
    build_version(spark, "v-docs", full_refresh=True)
    result = validate_version(spark, "v-docs", max_age=None)
    assert result.success
    wh.publish("v-docs")
    # what GX wrote links its CDN scripts: the app must not pass them on
    gx_file = next((qc.data_docs_dir() / "validations" / "topic_incarnations").rglob("*.html"))
    assert "https://code.jquery.com" in gx_file.read_text()

    OUTPUT.mkdir(exist_ok=True)
    with serving(create_app(bearer_check)) as base, offline_chromium(tmp_path) as browser:
        browser.call("Network.enable", session=True)
        browser.call("Network.setExtraHTTPHeaders", session=True,
                     headers={"Authorization": f"Bearer {TOKEN}"})
        gate = json.loads(urllib.request.urlopen(urllib.request.Request(
            base + "/api/gate", headers=AUTH), timeout=10).read())
        assert gate["version"] == "v-docs" and gate["success"] is True

        def loaded_from_elsewhere():
            names = browser.js("performance.getEntriesByType('resource').map(e => e.name)")
            return [n for n in names if not n.startswith(base + "/")]

        # the gate report: verdict, every expectation, http links to GX's pages
        browser.goto(f"{base}/data-docs/{gate['report']}")
        text = browser.js("document.body.innerText")
        assert "Latest run: version v-docs" in text and "PASSED" in text
        assert "deleted topic IDs never come back" in text
        links = browser.js("[...document.querySelectorAll('a')].map(a => a.href)")
        assert links and all(link.startswith(base + "/data-docs/") for link in links), links

        # GX's site index, rebuilt without scripts: one validation per table of this run
        browser.goto(f"{base}/data-docs/{gate['data_docs']}")
        text = browser.js("document.body.innerText")
        assert text.count("v-docs") == len(tables.TABLES)
        assert "topic_incarnations" in text and "passed" in text
        browser.screenshot(OUTPUT / "ui-data-docs-index-offline.png")

        # GX's validation page of topic_incarnations: content visible, no script, nothing remote
        browser.goto(f"{base}/data-docs/{gate['detail_pages']['topic_incarnations']}")
        wait_for(lambda: "Deleted topic IDs never come back" in browser.js("document.body.innerText"),
                 20, "the validation page's expectations")
        text = browser.js("document.body.innerText")
        assert "Exactly one current row per live incarnation" in text
        assert "v-docs" in text
        # verdict marks: Font Awesome is not loaded, the project's GX stylesheet writes them
        marks = browser.js("[...document.querySelectorAll('.fa-check-circle')]"
                           ".map(e => getComputedStyle(e, '::before').content)")
        assert len(marks) >= 9 and all("passed" in mark for mark in marks), marks
        assert browser.js("document.scripts.length") == 0
        assert loaded_from_elsewhere() == []
        browser.screenshot(OUTPUT / "ui-data-docs-validation-offline.png")

        # an expectation suite page
        browser.goto(f"{base}/data-docs/data_docs/expectations/topic_incarnations.html")
        time.sleep(0.5)
        assert "topic_incarnations" in browser.js("document.body.innerText")
        assert browser.js("document.scripts.length") == 0
