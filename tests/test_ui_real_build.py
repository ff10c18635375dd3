"""The page reads what the real Spark build publishes (not only the hand-written fixtures).

Three snapshots (orders created, deleted, re-created with a new ID) go through the snapshot
store and `spark_jobs.build`, are published, and the UI's API must show the two incarnations.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from gate_support import pass_gate
from test_ui_api import AUTH, ORDERS_NEW, ORDERS_OLD, bearer_check

from topic_lineage import store
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
    from spark_jobs.build import build_version
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
