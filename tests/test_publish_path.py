"""The one publish path (issue #14): only a version the gate passed is published; the escape
hatch (--force --reason) is explicit and recorded; automatic publishes never replace a newer
build; retention never removes a version a reader has pinned.

No Spark here: versions are written with pyarrow (tests/gate_support.py); the UI reader is the
real app (FastAPI TestClient) paused at the ``read`` fault point while a publish runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from gate_support import pass_gate, publish_passed, write_version
from published_tables import at, incarnation, snapshot_run

from topic_lineage import tables as t
from topic_lineage import warehouse as wh

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
OLD_ID = "b8tRS7h4TJ2Vt43Dp85v2A"
NEW_ID = "D5xNQ2CuVo-53xG1_JrJag"
SCRIPT = Path(sys.executable).with_name("topic-lineage")


def orders(topic_id: str, day: int = 1) -> list[dict]:
    return incarnation(f"k-{topic_id}", CLUSTER, [{"name": "orders", "at": at(day), "topic_id": topic_id}])


def version(name: str, topic_id: str = OLD_ID, **kwargs) -> str:
    write_version(name, orders(topic_id), [snapshot_run(CLUSTER, at(1), topic_count=1)], **kwargs)
    return name


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home)}
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


# --- only a version the gate passed -------------------------------------------------------------
def test_built_version_the_gate_never_saw_is_refused(tl_home):
    """A built (not validated) version cannot be published; the message names both ways out."""
    publish_passed(version("v1"))
    version("v2", NEW_ID)
    with pytest.raises(wh.PublishRefused, match="has not passed it") as refused:
        wh.publish("v2")
    assert "topic-lineage validate --version v2" in str(refused.value)
    assert "--force --reason" in str(refused.value)
    assert wh.current_version() == "v1" and wh.read_manifest("v2")["status"] == wh.BUILT


def test_rejected_version_is_refused_naming_the_failures(tl_home):
    version("bad")
    wh.record_verdict("bad", passed=False, warnings=[],
                      failures=["topic_incarnations: deleted topic IDs never come back"])
    with pytest.raises(wh.PublishRefused, match="deleted topic IDs never come back"):
        wh.publish("bad")
    assert wh.current_version() is None and wh.read_manifest("bad")["status"] == wh.REJECTED


def test_passed_with_warnings_is_publishable(tl_home):
    """Warnings never block: a version validated with warnings publishes."""
    version("v1")
    pass_gate("v1", warnings=["snapshot_runs: newest complete snapshot of each cluster is fresh"])
    assert wh.read_manifest("v1")["status"] == wh.VALIDATED
    assert wh.publish("v1").published and wh.current_version() == "v1"


def test_old_manifests_count_as_passed_only_when_validated():
    assert wh.gate_passed({"status": wh.VALIDATED})
    assert not wh.gate_passed({"status": wh.PUBLISHED})  # could have been built --no-validate
    assert not wh.gate_passed({"status": wh.BUILT})
    assert not wh.gate_passed({"status": wh.VALIDATED, "gate": {"passed": False}})


def test_building_or_incomplete_versions_are_refused_even_forced(tl_home):
    version("half")
    manifest = wh.read_manifest("half")
    wh.write_manifest("half", manifest | {"status": wh.BUILDING})
    with pytest.raises(wh.PublishRefused, match="not completely built"):
        wh.publish("half", force_reason="testing")
    version("lacking")
    pass_gate("lacking")
    import shutil

    shutil.rmtree(wh.version_path("lacking", t.TOPIC_SNAPSHOTS))
    with pytest.raises(wh.PublishRefused, match="lacks table topic_snapshots"):
        wh.publish("lacking")
    assert wh.current_version() is None


# --- the escape hatch ------------------------------------------------------------------------------
def test_forced_publish_is_recorded_and_shown_by_versions(tl_home):
    """`publish V --force --reason TEXT` is the one override: the manifest records who, when,
    why and the gate's verdict; `versions` shows it in both formats; a later plain publish of
    the same version is refused again (the override is per publish)."""
    publish_passed(version("v1"))
    version("v2", NEW_ID)
    wh.record_verdict("v2", passed=False, warnings=[], failures=["topic_incarnations: x"])

    refused = cli(tl_home, "publish", "v2")
    assert refused.returncode == 3, refused
    assert refused.stderr.count("\n") == 1 and "has not passed" not in refused.stderr
    assert "rejected it (topic_incarnations: x)" in refused.stderr
    assert cli(tl_home, "publish", "v2", "--force").returncode == 3  # no reason

    forced = cli(tl_home, "publish", "v2", "--force", "--reason", "incident 42: known false positive")
    assert forced.returncode == 0, forced.stderr
    assert "FORCED" in forced.stdout and wh.current_version() == "v2"
    (record,) = wh.read_manifest("v2")["forced"]
    assert record["reason"] == "incident 42: known false positive"
    assert record["status_before"] == wh.REJECTED and record["gate"]["passed"] is False
    assert record["by"] and record["at"]

    listing = cli(tl_home, "versions")
    (line,) = [row for row in listing.stdout.splitlines() if row.startswith("* v2")]
    assert "FAILED: topic_incarnations: x" in line and "FORCED by" in line and "incident 42" in line
    rows = {r["version"]: r for r in json.loads(cli(tl_home, "versions", "--format", "json").stdout)}
    assert rows["v2"]["forced"][0]["reason"].startswith("incident 42") and not rows["v2"]["gate_passed"]
    assert rows["v1"]["gate_passed"] and rows["v1"]["forced"] is None

    assert cli(tl_home, "publish", "v1").returncode == 0  # roll back to a passed version
    assert cli(tl_home, "publish", "--version", "v2").returncode == 3


def test_build_no_validate_cannot_publish(tl_home):
    """`build --no-validate` without --no-publish is refused before Spark starts."""
    result = cli(tl_home, "build", "--no-validate")
    assert result.returncode == 3, result
    assert "--no-publish" in result.stderr and "Traceback" not in result.stderr
    assert not t.versions_dir().exists()


# --- automatic publishes (build, Airflow) ----------------------------------------------------------
def test_automatic_publish_keeps_a_build_over_more_snapshots(tl_home):
    publish_passed(version("newer", snapshot_files={"a": 1, "b": 1}))
    version("older", snapshot_files={"a": 1})
    pass_gate("older")
    outcome = wh.publish("older", automatic=True)
    assert not outcome.published and "superset" in outcome.reason
    assert wh.current_version() == "newer"
    assert wh.publish("older").published  # a user naming the version may roll back


@pytest.mark.parametrize(
    ("candidate", "current", "publish", "words"),
    [
        ({"a"}, None, True, "nothing is published"),
        ({"a", "b"}, {"a"}, True, "publishing"),
        ({"a"}, {"a", "b"}, False, "superset"),
        ({"a", "b"}, {"a", "b"}, False, "identical"),
        ({"a", "c"}, {"a", "b"}, True, "publishing"),
    ],
    ids=["first", "more", "fewer", "same", "incomparable"],
)
def test_decide_publish(candidate, current, publish, words):
    decision = wh.decide_publish("v2", candidate, "v1" if current else None, current)
    assert decision.publish is publish and words in decision.reason


NEW_CODE = {"build_code": "b", "hold_policy": {"ratio": 0.5, "min_count": 5}}


@pytest.mark.parametrize(
    ("candidate", "current", "publish", "words"),
    [
        (NEW_CODE, NEW_CODE, False, "identical"),
        (NEW_CODE, {**NEW_CODE, "build_code": "a"}, True, "other build code"),
        (NEW_CODE, {**NEW_CODE, "hold_policy": {"ratio": 0.9, "min_count": 5}}, True, "thresholds"),
        (NEW_CODE, None, True, "other build code"),  # published before derivations were recorded
        (None, NEW_CODE, False, "identical"),
    ],
    ids=["same-derivation", "upgraded-code", "other-thresholds", "before-recorded", "unknown-candidate"],
)
def test_same_snapshots_publish_only_a_new_derivation(candidate, current, publish, words):
    """Over the same snapshots the tables differ only when the build code or the hold thresholds
    do (an upgrade adding the consumer-lineage tables, say): then the new build is published."""
    decision = wh.decide_publish("v2", {("a", 1)}, "v1", {("a", 1)}, candidate_derivation=candidate,
                                 current_derivation=current)
    assert decision.publish is publish and words in decision.reason
    assert decision.same is (not publish)


def test_a_snapshot_imported_again_with_other_content_is_another_input(tl_home):
    """Quarantined and imported again under the same key, a snapshot with another size makes the
    inputs incomparable: the build over it is published."""
    decision = wh.decide_publish("v2", {("a", 1), ("b", 7)}, "v1", {("a", 1), ("b", 5)})
    assert decision.publish


# --- retention and readers ---------------------------------------------------------------------------
def test_retention_skips_a_pinned_version_and_removes_it_later(tl_home, monkeypatch):
    monkeypatch.setenv(wh.KEEP_ENV, "1")
    publish_passed(version("v1"))
    with wh.reading() as pinned:
        assert pinned == "v1"
        publish_passed(version("v2", NEW_ID))
        assert wh.current_version() == "v2" and wh.version_dir("v1").is_dir()
    assert wh.apply_retention() == ["v1"] and not wh.version_dir("v1").exists()


def test_ui_request_started_on_the_previous_version_finishes_on_it(tl_home, monkeypatch):
    """KEEP_VERSIONS=1: a UI request paused (fault point ``read``) after pinning v1 while v2 is
    published and retention runs answers with v1's rows; v1 is removed by the next retention."""
    from fastapi.testclient import TestClient

    from topic_lineage.ui.app import create_app

    monkeypatch.setenv(wh.KEEP_ENV, "1")
    publish_passed(version("v1", OLD_ID))
    version("v2", NEW_ID)
    pass_gate("v2")
    client = TestClient(create_app(lambda: "publish-path"))
    answers = {}

    def request():
        answers["timeline"] = client.get("/api/timeline", params={"name": "orders"})

    monkeypatch.setenv("TOPIC_LINEAGE_FAULT", "pause@read")
    reader = threading.Thread(target=request)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not (tl_home / "fault-read.reached").exists():
            assert time.monotonic() < deadline and reader.is_alive()
            time.sleep(0.05)
        monkeypatch.delenv("TOPIC_LINEAGE_FAULT")
        assert wh.publish("v2").published  # retention runs inside, with KEEP_VERSIONS=1
        assert wh.current_version() == "v2"
        assert wh.version_dir("v1").is_dir()  # pinned by the paused request
    finally:
        (tl_home / "fault-read.release").touch()
        reader.join(60)
    response = answers["timeline"]
    assert response.status_code == 200, response.text
    assert OLD_ID in response.text and NEW_ID not in response.text
    assert wh.apply_retention() == ["v1"]
    assert NEW_ID in client.get("/api/timeline", params={"name": "orders"}).text


def test_reader_lock_is_released_when_the_read_fails(tl_home):
    publish_passed(version("v1"))
    with pytest.raises(RuntimeError), wh.reading():
        raise RuntimeError("reader crashed")
    publish_passed(version("v2", NEW_ID))
    assert wh.apply_retention(1) == ["v1"]


@pytest.mark.parametrize(
    ("sql", "refused"),
    [("SELECT * FROM topic_incarnations", False), ("WITH x AS (SELECT 1) SELECT * FROM x", False),
     ("SELECT 'INSERT' AS word", False), ("DESCRIBE topic_incarnations", False),
     ("INSERT INTO topic_incarnations SELECT 1", True), ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", True),
     ("DROP TABLE topic_incarnations", True), ("CREATE TABLE c AS SELECT 1", True),
     ("FROM t INSERT INTO u SELECT *", True)],
)
def test_read_only_check_without_a_jvm_parser(sql, refused):
    """Spark Connect sessions have no JVM parser: the word check still refuses every write."""
    class ConnectSession:
        pass

    if refused:
        with pytest.raises(wh.QueryRefused, match="queries are read-only"):
            wh.check_read_only(ConnectSession(), sql)
    else:
        wh.check_read_only(ConnectSession(), sql)
