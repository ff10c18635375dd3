"""One history, four sources, one answer (issue #46).

On the real broker a topic is created, deleted and created again, and a live capture follows each
step. The same history is then read from the broker's own files and tools: its KRaft metadata
log (``import --format kraft-log`` on the live metadata directory), ``kafka-topics.sh
--describe`` as Kafka's own ``TopicCommand`` prints it after each step (``import --format
kafka-topics``), and the ``partition.metadata`` files of its log directory after each step
(``scan-logdirs``). Each source's snapshots, folded by the rules' reference
(:mod:`topic_lineage.scd.reference`), give the same incarnations as the captures: the same IDs
in the same order, the deleted one deleted.

The broker is the session's (other tests' topics are on it too): the topics here have names of
their own, and only they are compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from topic_lineage import store
from topic_lineage.capture import capture_snapshot
from topic_lineage.scd import reference

pytestmark = pytest.mark.broker

SCRIPT = Path(sys.executable).with_name("topic-lineage")


def cli(home: Path, *args: str) -> str:
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home)}
    done = subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def snapshots_in(home: Path, monkeypatch) -> list:
    with monkeypatch.context() as mp:
        mp.setenv("TOPIC_LINEAGE_HOME", str(home))
        return [store.read_snapshot(path) for path in store.snapshot_files()]


def incarnations(snapshots, names) -> dict[str, list[tuple[str, bool]]]:
    """name -> [(topic ID, deleted?)] in order of valid_from, from the rules' reference fold."""
    _, rows = reference.derive(snapshots)
    versions: dict[str, list[dict]] = {}
    for row in rows:
        if row["topic_name"] in names:
            versions.setdefault(row["incarnation_key"], []).append(row)
    found: dict[str, list] = {name: [] for name in names}
    for rows_of_one in sorted(versions.values(), key=lambda v: min(r["valid_from"] for r in v)):
        last = max(rows_of_one, key=lambda r: r["version"])
        found[last["topic_name"]].append((last["topic_id"], last["deleted_at"] is not None))
    return found


def deleted_at(snapshots, topic_id):
    _, rows = reference.derive(snapshots)
    return max((r for r in rows if r["topic_id"] == topic_id), key=lambda r: r["version"])["deleted_at"]


def settled_log_dir(broker, expected: dict[str, int], gone: set[str], timeout_s: float = 60):
    """Wait until the log directory shows ``expected`` (name -> partitions) with their
    ``partition.metadata`` written (Kafka writes it shortly after creating the partition) and no
    live directory of a ``gone`` topic (renamed ``-delete`` shortly after the deletion)."""
    deadline = time.monotonic() + timeout_s
    while True:
        live = {p.name for p in broker.log_dir.iterdir() if p.is_dir()}
        ready = all((broker.log_dir / f"{name}-{n}" / "partition.metadata").is_file()
                    for name, count in expected.items() for n in range(count))
        stale = [d for d in live if d.rsplit("-", 1)[0] in gone]
        if ready and not stale:
            return
        assert time.monotonic() < deadline, (sorted(live), expected, gone)
        time.sleep(0.1)


def test_captures_kraft_log_describe_output_and_log_dirs_agree(broker, tmp_path, monkeypatch):
    run = uuid.uuid4().hex[:8]
    orders, payments = f"four-{run}.orders", f"four-{run}.payments"
    names = (orders, payments)
    live_home, describe_dir = tmp_path / "live", tmp_path / "describe"
    describe_dir.mkdir()
    scans = []

    def observe(expected: dict[str, int], gone: set[str] = frozenset()) -> None:
        with monkeypatch.context() as mp:
            mp.setenv("TOPIC_LINEAGE_HOME", str(live_home))
            store.save(capture_snapshot("four", {"bootstrap.servers": broker.bootstrap_servers}),
                       "live")
        text = broker.describe_topics_text()
        # the file name carries the capture time (as a cron job's would); one per second
        at = datetime.now(UTC)
        (describe_dir / f"describe-{at:%Y%m%dT%H%M%S}Z.txt").write_text(text)
        time.sleep(1.05 - at.microsecond / 1e6)
        settled_log_dir(broker, expected, set(gone))
        scans.append(json.loads(cli(live_home, "scan-logdirs", str(broker.log_dir),
                                    "--cluster", broker.cluster_id, "--format", "json")))

    broker.create_topics([(orders, 3), (payments, 1)])
    observe({orders: 3, payments: 1})
    broker.delete_topics([orders])
    observe({payments: 1}, {orders})
    broker.create_topics([(orders, 2)])
    observe({orders: 2, payments: 1})

    captured = snapshots_in(live_home, monkeypatch)
    assert len(captured) == 3
    ids = [{n: s.topic_ids()[n] for n in names if n in s.topic_ids()} for s in captured]
    first_orders, second_orders = ids[0][orders], ids[2][orders]
    assert first_orders != second_orders and ids[1] == {payments: ids[0][payments]}
    expected = {orders: [(first_orders, True), (second_orders, False)],
                payments: [(ids[0][payments], False)]}
    assert incarnations(captured, names) == expected

    # 1. the KRaft metadata log of the running broker
    kraft_home = tmp_path / "kraft"
    cli(kraft_home, "import", "--format", "kraft-log", "--cluster-alias", "four",
        str(broker.metadata_dir))
    from_log = snapshots_in(kraft_home, monkeypatch)
    assert {s.cluster_id for s in from_log} == {broker.cluster_id}
    assert incarnations(from_log, names) == expected
    # the log has the exact times: orders was deleted between the first and second capture
    assert captured[0].captured_at < deleted_at(from_log, first_orders) <= captured[1].captured_at
    assert deleted_at(captured, first_orders) == captured[1].captured_at

    # 2. kafka-topics.sh --describe, as TopicCommand printed it after each step
    files = sorted(describe_dir.iterdir())
    assert len(files) == 3 and all(f"Topic: {payments}\tTopicId: " in f.read_text() for f in files)
    topics_home = tmp_path / "topics"
    cli(topics_home, "import", "--format", "kafka-topics", "--complete", "--cluster-id",
        broker.cluster_id, "--cluster-alias", "four", *map(str, files))
    assert incarnations(snapshots_in(topics_home, monkeypatch), names) == expected

    # 3. partition.metadata in the log directory after each step: the live IDs, step by step
    on_disk = [{n: ids for n, ids in scan["topics"].items() if n in names} for scan in scans]
    assert on_disk == [{n: [i] for n, i in step.items()} for step in ids]
    assert all(scan["cluster_id"] == broker.cluster_id for scan in scans)
    # after the deletion the first orders' directories wait for removal, with their ID
    renamed = [s for s in scans[1]["stale"] if s["topic"] == orders]
    assert renamed and {s["topic_id"] for s in renamed} == {first_orders}
    assert all(s["path"].endswith("-delete") for s in renamed)
