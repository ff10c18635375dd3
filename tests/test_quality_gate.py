"""Write-audit-publish with the quality gate, `topic-lineage validate`, and the Data Docs pages.

- `validate` judges the published (or a named) version, prints the verdict and the Data Docs
  path, and exits 0 (passed) / 1 (failed) / 2 (could not validate).
- The Data Docs overview is rendered in headless Chromium (Debian's package) and must show the
  suite's results; a screenshot is saved under test-output/ for a person to look at.
- The real build (`topic-lineage build`: the command's entry point) refuses to publish a
  history in which a deleted topic ID reappears, and the previously published tables stay as
  they were (R6, R7).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from published_tables import at, incarnation, publish, snapshot_run

from tests import cli_in_process
from topic_lineage import cli
from topic_lineage import tables as t
from topic_lineage.quality import context as qc
from topic_lineage.quality.suites import DELETED_IDS_NEVER_COME_BACK

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "test-output"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
ORDERS_ID = "b8tRS7h4TJ2Vt43Dp85v2A"
PAYMENTS_ID = "D5xNQ2CuVo-53xG1_JrJag"


def without_fake_checksums(version_dir: Path) -> None:
    """published_tables writes a junk ``.crc`` next to each part; Hadoop's local file system
    verifies ``.crc`` files it finds, so Spark (unlike DuckDB/pyarrow) cannot read past it."""
    for crc in version_dir.rglob(".*.crc"):
        crc.unlink()


def healthy_version(version: str, *, point: bool = True) -> None:
    without_fake_checksums(publish(
        version,
        incarnation("k-orders", CLUSTER, [{"name": "orders", "at": at(1), "topic_id": ORDERS_ID}]),
        runs=[snapshot_run(CLUSTER, at(1), topic_count=1)],
        point=point,
    ))


def comeback_version(version: str) -> None:
    """orders was deleted on day 2 and its ID seen again on day 3 (recorded as `reappeared`)."""
    rows = incarnation(
        "k-orders", CLUSTER,
        [{"name": "orders", "at": at(1), "topic_id": ORDERS_ID},
         {"name": "orders", "at": at(3), "topic_id": ORDERS_ID, "change_type": "reappeared"}],
    )
    rows[0]["valid_to"] = at(2)
    without_fake_checksums(publish(
        version, rows, runs=[snapshot_run(CLUSTER, at(d), topic_count=1) for d in (1, 2, 3)],
        point=False,
    ))


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def chromium(*args: str, timeout: int = 120) -> str:
    """Run headless Chromium in its own process group; kill the group when done."""
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--virtual-time-budget=3000", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out


@pytest.mark.spark
def test_validate_command_verdicts_and_data_docs(spark, tl_home, capsys):
    """`validate` passes the published version, fails a version with a comeback and names the
    expectation and rows, and the overview page shows both runs in a browser."""
    repo_context = tree_digest(qc.context_dir())
    healthy_version("v-good")
    assert cli.main(["validate", "--max-age", "off"]) == 0
    out = capsys.readouterr().out
    assert "quality gate PASSED for version v-good" in out
    assert f"Data Docs: {tl_home / 'quality' / 'index.html'}" in out

    comeback_version("v-bad")
    assert cli.main(["validate", "--version", "v-bad", "--max-age", "off"]) == 1
    out = capsys.readouterr().out
    assert "quality gate FAILED for version v-bad" in out
    assert f"x topic_incarnations: {DELETED_IDS_NEVER_COME_BACK}" in out
    assert f"cluster_id={CLUSTER}, topic_name=orders, topic_id={ORDERS_ID}, version=2" in out
    # generated output stays out of the repository's GX context
    assert tree_digest(qc.context_dir()) == repo_context

    # --- the stored results of the failed run: one per table. A table whose first pass (verdicts
    # only) met every expectation keeps that result; the failed table was validated again for
    # its offending rows, and that result replaced the first one.
    stored = [path for path in (tl_home / "quality" / "validations").rglob("*.json")
              if "v-bad" in path.parts]
    suites_stored = sorted(path.relative_to(tl_home / "quality" / "validations").parts[0]
                           for path in stored)
    assert suites_stored == sorted(set(suites_stored)) and t.TOPIC_INCARNATIONS in suites_stored
    assert t.SNAPSHOT_RUNS in suites_stored
    results = {path.relative_to(tl_home / "quality" / "validations").parts[0]:
               json.loads(path.read_text())["results"] for path in stored}
    comeback = [r for r in results[t.TOPIC_INCARNATIONS]
                if r["expectation_config"]["meta"].get("name") == DELETED_IDS_NEVER_COME_BACK]
    assert [r["success"] for r in comeback] == [False]
    assert comeback[0]["result"]["details"]["unexpected_rows"]  # the offending rows, stored
    assert all(r["success"] and not r["result"] for r in results[t.SNAPSHOT_RUNS])  # verdicts only

    # --- the overview page, as a browser renders it ---------------------------------------
    # one Chromium run each page: its DOM once rendered, and a screenshot of it
    page = qc.overview_page()
    OUTPUT.mkdir(exist_ok=True)
    shot = OUTPUT / "quality-overview.png"
    shot.unlink(missing_ok=True)
    dom = chromium("--dump-dom", "--window-size=1280,1400", f"--screenshot={shot}", page.as_uri())
    assert "Latest run: version v-bad" in dom
    assert DELETED_IDS_NEVER_COME_BACK in dom and "FAILED" in dom and "passed" in dom
    assert "v-good" in dom  # the history lists the earlier, passing run
    assert ORDERS_ID in dom  # offending rows are shown
    assert shot.exists() and shot.stat().st_size > 10_000

    # --- the GX detail page of the failing table --------------------------------------------
    record = [json.loads(line) for line in qc.gate_log().read_text().splitlines()][-1]
    # recorded relative to the quality directory (it may be read on another machine)
    detail = (t.quality_dir() / record["detail_pages"][t.TOPIC_INCARNATIONS]).as_uri()
    detail_shot = OUTPUT / "quality-gx-validation.png"
    detail_shot.unlink(missing_ok=True)
    detail_dom = chromium("--dump-dom", "--window-size=1280,2000", f"--screenshot={detail_shot}", detail)
    assert "topic_incarnations" in detail_dom
    assert "Deleted topic IDs never come back" in detail_dom
    assert "Failed" in detail_dom  # GX's own status line of the validation
    assert detail_shot.exists() and detail_shot.stat().st_size > 10_000


@pytest.mark.spark
def test_stale_live_cluster_is_one_warning_line_and_exit_0(spark, tl_home, capsys):
    """Freshness is a warning: `validate` on a version whose only live capture is weeks old
    passes (exit 0) and prints exactly one warning line naming the expectation and cluster."""
    from topic_lineage.quality.suites import NEWEST_SNAPSHOT_FRESH

    healthy_version("v-stale")  # one live snapshot, 2026-11-01
    assert cli.main(["validate", "--max-age", "24h"]) == 0
    out = capsys.readouterr().out
    assert "quality gate PASSED for version v-stale" in out and "1 warning(s)" in out
    (line,) = [row for row in out.splitlines() if "! warning:" in row]
    assert f"snapshot_runs: {NEWEST_SNAPSHOT_FRESH}" in line and CLUSTER in line
    assert "FAILED" not in out


def test_validate_without_a_published_version_says_what_to_do(tl_home, capsys):
    """Nothing published and no --version: exit 2 with a one-line error naming the fix."""
    assert cli.main(["validate"]) == 2
    err = capsys.readouterr().err
    assert "nothing is published yet" in err and "topic-lineage build" in err


def test_bad_threshold_is_a_user_error(tl_home, capsys):
    """A malformed --max-age is refused before anything runs."""
    healthy_version("v-good")
    assert cli.main(["validate", "--max-age", "yesterday"]) == 2
    assert "invalid maximum age 'yesterday'" in capsys.readouterr().err


# --- write-audit-publish through the real build -------------------------------------------------
def snapshot_line(day: int, topics: list[tuple[str, str]]) -> str:
    return json.dumps({
        "cluster_id": CLUSTER, "cluster_alias": "prod-eu",
        "captured_at": f"2026-11-0{day}T00:00:00Z", "complete": True,
        "topics": [{"name": name, "topic_id": topic_id, "partition_count": 3,
                    "replication_factor": 3, "is_internal": False, "error": None}
                   for name, topic_id in topics],
    })


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    """``topic-lineage ARGS`` on ``home``, in this process (tests/cli_in_process.py: the
    console script's own exit is tests/test_cli.py's)."""
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home), "TOPIC_LINEAGE_SPARK_MASTER": "local[2]",
           "TOPIC_LINEAGE_SHUFFLE_PARTITIONS": "2"}  # default max age: imported history is not judged
    return cli_in_process.run(env, *args)


def published_version(home: Path) -> str | None:
    """The version main of the home's Iceberg tables holds, as `topic-lineage versions` says."""
    done = run_cli("versions", "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    return next((v["version"] for v in json.loads(done.stdout) if v["current"]), None)


def read_table(home: Path, version: str, table: str) -> list[dict]:
    import pyarrow.dataset as ds

    data = ds.dataset(home / "warehouse" / "versions" / version / table, format="parquet",
                      exclude_invalid_files=True).to_table()
    return sorted(data.to_pylist(), key=lambda r: json.dumps(r, default=str, sort_keys=True))


@pytest.mark.spark
@pytest.mark.slow
def test_build_refuses_to_publish_a_deleted_id_that_comes_back(tmp_path):
    """R6 + R7: the comeback is recorded as `reappeared`, the build exits non-zero naming
    "deleted topic IDs never come back", and the published tables are unchanged."""
    home = tmp_path / "home"
    both = [("orders", ORDERS_ID), ("payments", PAYMENTS_ID)]
    history = tmp_path / "history.jsonl"
    history.write_text(snapshot_line(1, both) + "\n" + snapshot_line(2, both[1:]) + "\n")
    assert run_cli("import", str(history), home=home).returncode == 0
    first = run_cli("build", "--version-id", "v1-clean", home=home)
    assert first.returncode == 0, first.stderr
    assert "Data Docs:" in first.stdout
    published = read_table(home, "v1-clean", t.TOPIC_INCARNATIONS)

    comeback = tmp_path / "comeback.jsonl"
    comeback.write_text(snapshot_line(3, both) + "\n")  # orders' deleted ID is back
    assert run_cli("import", str(comeback), home=home).returncode == 0
    second = run_cli("build", "--version-id", "v2-comeback", home=home)

    assert second.returncode == 1  # the gate failed: 1, as `validate` on the same version
    assert DELETED_IDS_NEVER_COME_BACK in second.stderr
    assert ORDERS_ID in second.stderr  # the offending row is named
    assert published_version(home) == "v1-clean"
    assert read_table(home, "v1-clean", t.TOPIC_INCARNATIONS) == published
    rejected = read_table(home, "v2-comeback", t.TOPIC_INCARNATIONS)  # kept for inspection
    assert any(r["change_type"] == "reappeared" and r["topic_id"] == ORDERS_ID for r in rejected)
    manifest = json.loads((home / "warehouse" / "versions" / "v2-comeback" / "manifest.json").read_text())
    assert manifest["status"] == "rejected"


def test_the_gate_keeps_the_newest_runs_and_their_results(tl_home, monkeypatch):
    """A deployment validates every cycle: the gate log, the GX results and the Data Docs pages
    of runs older than the newest $TOPIC_LINEAGE_QUALITY_KEEP_RUNS go (each gate's Data Docs
    build lists every stored result), those of kept runs stay, and the page shows what is kept."""
    from datetime import UTC, datetime

    from topic_lineage.errors import TopicLineageError
    from topic_lineage.quality import overview
    from topic_lineage.quality.gate import GateResult, Outcome

    def stored(version: str) -> list[Path]:
        """A GX result and its Data Docs page as the gate stores them (suite/run/time/batch)."""
        paths = [tl_home / "quality" / "validations" / t.TOPIC_INCARNATIONS / version / "20261101T000000Z" / "b.json",
                 qc.data_docs_dir() / "validations" / t.TOPIC_INCARNATIONS / version / "20261101T000000Z" / "b.html"]
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
        return paths

    def gate_run(version: str) -> None:
        overview.record(GateResult(
            version=version, success=True, failures=[], docs_index=qc.overview_page(),
            outcomes=[Outcome(t.TOPIC_INCARNATIONS, "live IDs unique", "", True, 0, [])],
            validated_at=datetime(2026, 11, 10, tzinfo=UTC),
        ))

    monkeypatch.setenv(overview.KEEP_RUNS_ENV, "2")
    files = {version: stored(version) for version in ("v-1", "v-2", "v-3")}
    gate_run("v-1")
    gate_run("v-2")
    assert all(path.exists() for version in files for path in files[version])  # 2 runs: none go
    gate_run("v-3")
    assert [r["version"] for r in overview.read_records()] == ["v-2", "v-3"]
    assert not any(path.exists() for path in files["v-1"])
    assert all(path.exists() for version in ("v-2", "v-3") for path in files[version])
    page = qc.overview_page().read_text()
    assert "v-3" in page and "v-2" in page and "v-1" not in page

    monkeypatch.setenv(overview.KEEP_RUNS_ENV, "none")
    with pytest.raises(TopicLineageError, match="TOPIC_LINEAGE_QUALITY_KEEP_RUNS"):
        gate_run("v-4")
    assert [r["version"] for r in overview.read_records()] == ["v-2", "v-3"]  # nothing written


def test_an_expectation_whose_metric_raises_is_reported_as_not_evaluated():
    """GX keeps a metric's exception under the metric's id, not in the result's own
    exception_info: the gate still says the expectation could not be evaluated, and why."""
    import great_expectations as gx
    import pandas as pd

    from topic_lineage.quality import gate

    context = gx.get_context(mode="ephemeral")
    batch = (context.data_sources.add_pandas("frames").add_dataframe_asset("rows")
             .add_batch_definition_whole_dataframe("all")
             .get_batch(batch_parameters={"dataframe": pd.DataFrame({"topic_id": ["a"]})}))
    suite = gx.ExpectationSuite("raises", expectations=[
        gx.expectations.ExpectColumnValuesToNotBeNull(column="topic_id"),
        gx.expectations.ExpectColumnValuesToNotBeNull(column="no_such_column"),
    ])
    outcomes = gate._outcomes("topic_snapshots", batch.validate(suite), sample_rows=5)
    [passed] = [o for o in outcomes if o.success]  # GX's order of results is its own
    [raised] = [o for o in outcomes if not o.success]
    assert "could not be evaluated" not in passed.description
    assert not raised.success and raised.unexpected_count is None and raised.rows == []
    assert "could not be evaluated:" in raised.description
    assert "no_such_column" in raised.description, raised.description
