"""Median response time of the topic lineage API on 100,000 incarnation rows.

    .venv/bin/python tests/benchmarks/bench_ui.py [--rows 100000] [--repeat 50]

Writes a published version with ``--rows`` rows of ``topic_incarnations`` (3 clusters, topics
re-created and re-partitioned, 4 Parquet part files) into a temporary TOPIC_LINEAGE_HOME,
then times each API route through the app in-process (FastAPI test client, so the numbers are
the app's own work: auth dependency, DuckDB query, JSON). The first request, which loads the
version into DuckDB, is reported separately.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build_rows(target: int, seed: int = 7) -> tuple[list[dict], list[dict], dict]:
    from published_tables import at, incarnation, snapshot_run

    from topic_lineage.topic_id import canonical

    rng = random.Random(seed)
    clusters = [("Q2x1c3Rlci1vbmUtMDAwMQ", "prod-eu"), ("Q2x1c3Rlci10d28tMDAwMg", "prod-us"),
                ("Q2x1c3Rlci10aHJlZS0wMw", "staging")]
    rows: list[dict] = []
    probe = {}
    n = 0
    while len(rows) < target:
        cluster_id, alias = clusters[n % len(clusters)]
        name = f"team{n % 97}.service{n // 97}.events"
        lives = 1 + (n % 4 == 0) + (n % 20 == 0)  # a quarter re-created, some twice
        day = 1 + rng.randrange(3)
        for life in range(lives):
            versions = [{"name": name, "at": at(day, rng.randrange(24)),
                         "topic_id": canonical(uuid.UUID(int=rng.getrandbits(128), version=4)),
                         "partitions": 3}]
            for _ in range(rng.randrange(3)):  # attribute changes
                day += 1
                versions.append({"name": name, "at": at(day, rng.randrange(24)),
                                 "topic_id": versions[0]["topic_id"],
                                 "partitions": versions[-1]["partitions"] * 2})
            last = life == lives - 1
            deleted = None if last else at(day + 1)
            rows += incarnation(f"{cluster_id}:{name}:{life}", cluster_id, versions,
                                cluster_alias=alias, deleted_at=deleted,
                                last_seen_at=at(28) if last else at(day))
            day += 2
        if lives > 1 and "recreated" not in probe:
            probe["recreated"] = (cluster_id, name, versions[0]["topic_id"])
        n += 1
    runs = [snapshot_run(cid, at(d), alias=alias) for cid, alias in clusters for d in range(1, 29)]
    probe["clusters"] = [c for c, _ in clusters]
    return rows[:target], runs, probe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="tl-bench-ui-")
    os.environ["TOPIC_LINEAGE_HOME"] = home
    from fastapi.testclient import TestClient
    from published_tables import publish

    from topic_lineage.topic_id import rfc4122
    from topic_lineage.ui.app import create_app

    rows, runs, probe = build_rows(args.rows)
    publish("bench", rows, runs, files=4)
    cluster_id, name, topic_id = probe["recreated"]
    print(f"{len(rows)} incarnation rows published in {home}")

    client = TestClient(create_app(lambda: "bench-user"))
    started = time.perf_counter()
    first = client.get("/api/status")
    assert first.status_code == 200, first.text
    print(f"first request (loads the version into DuckDB): {1000 * (time.perf_counter() - started):.1f} ms")

    routes = {
        "search by name": ("/api/search", {"q": name}),
        "search by part of a name": ("/api/search", {"q": "service12"}),
        "search by ID (RFC 4122)": ("/api/search", {"q": rfc4122(topic_id)}),
        "ID lookup": (f"/api/ids/{topic_id}", {}),
        "timeline (all clusters)": ("/api/timeline", {"name": name}),
        "cluster overview (30 days)": ("/api/overview", {"cluster_id": cluster_id, "days": 30}),
        "cluster list": ("/api/clusters", {}),
        "page": ("/", {}),
    }
    medians = {}
    for label, (path, params) in routes.items():
        timings = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            response = client.get(path, params=params)
            timings.append(1000 * (time.perf_counter() - t0))
            assert response.status_code == 200, (label, response.text[:300])
        medians[label] = statistics.median(timings)
        print(f"{label:28s} median {medians[label]:7.2f} ms   p95 "
              f"{sorted(timings)[int(0.95 * len(timings)) - 1]:7.2f} ms")
    print(f"median over all routes: {statistics.median(medians.values()):.2f} ms")
    shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
