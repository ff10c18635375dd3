"""The `validate` task's log: short, one line per expectation, and http links to the UI.

Runs the task's function (``topic_lineage.airflow.validate_version``, what the DAG's ``validate`` task
calls) on real built versions with the real gate, in a process of its own as Airflow runs a task,
with every logger at DEBUG, as a task whose logging is configured verbosely would: Great
Expectations' hundreds of debug lines must not be in it, the Data Docs link must be the UI's (``[api] base_url`` + ``/topic-lineage/...``), and no
server path or ``file://`` URI may appear. The JVM's stderr goes to the task's stdout (Airflow
logs a task's stderr as errors). What the task's log handlers print is what is checked.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from test_quality_gate import comeback_version, healthy_version

from topic_lineage.quality.suites import DELETED_IDS_NEVER_COME_BACK

# the validate task's log as Airflow keeps it (a deployment, not a rule: the verdicts are
# tests/test_quality_gate.py's): the whole suite
pytestmark = pytest.mark.slow

BASE_URL = "http://airflow.example:8080"

# The validate task's body, once Airflow and the task's module are loaded (as in a task process),
# with every logger at DEBUG and one handler on stderr, as a task whose logging is configured
# verbosely has; its last line: what it returned, and GX's logger level after
VALIDATE_TASK = """
import json, logging, sys
from topic_lineage import airflow as at
at.airflow_base_url()  # Airflow's configuration and providers, which a task process has loaded
root = logging.getLogger()
root.setLevel(logging.DEBUG)
root.handlers[:] = [logging.StreamHandler(sys.stderr)]
returned = at.validate_version(sys.argv[1])
print(json.dumps([returned, logging.getLogger("great_expectations").level], default=str))
"""


@pytest.mark.airflow
@pytest.mark.spark
def test_validate_task_log_is_short_and_links_the_ui(spark, tl_home, capfd, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from topic_lineage import airflow as at
    from topic_lineage import warehouse as wh

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", BASE_URL + "/")
    monkeypatch.setenv("TOPIC_LINEAGE_MAX_AGE", "off")
    healthy_version("v-good")
    wh.write_manifest("v-good", {"version": "v-good", "status": wh.BUILT})

    # In a process of its own, as Airflow runs a task: a pytest worker holds the JVM objects and
    # py4j connections of its earlier modules, and py4j's traceback of a send on one of them
    # closed since (seen in the fast tier, 2026-11-28 and 2026-11-29) is no line of a task's log
    task = subprocess.run([sys.executable, "-c", VALIDATE_TASK, "v-good"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert task.returncode == 0, task.stdout[-2000:] + task.stderr[-3000:]
    *printed, last = task.stdout.splitlines()
    returned, gx_level = json.loads(last)
    text = "\n".join(printed) + "\n" + task.stderr
    lines = text.splitlines()
    assert not [line for line in lines if "great_expectations" in line or "py4j" in line]
    assert len(lines) < 40, text
    assert "quality gate PASSED for version v-good" in text
    assert f"gate report: {BASE_URL}/topic-lineage/data-docs/index.html" in text
    assert (f"Data Docs of topic_incarnations: {BASE_URL}/topic-lineage/data-docs/"
            "data_docs/validations/topic_incarnations/v-good/") in text
    assert "passed  topic_incarnations:" in text
    assert "file://" not in text and str(tl_home) not in text
    assert returned["gate_report"] == f"{BASE_URL}/topic-lineage/data-docs/index.html"
    assert gx_level == logging.NOTSET  # restored

    # a failing gate, in this process: its findings and the exception the task fails with
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", logging.DEBUG)
    monkeypatch.setattr(root, "handlers", [logging.StreamHandler(sys.stderr)])
    comeback_version("v-bad")
    wh.write_manifest("v-bad", {"version": "v-bad", "status": wh.BUILT})
    capfd.readouterr()
    with pytest.raises(AirflowFailException) as failed:
        at.validate_version("v-bad")
    text = "".join(capfd.readouterr())
    assert f"FAILED  topic_incarnations: {DELETED_IDS_NEVER_COME_BACK} (1 row(s))" in text
    assert f"Gate report: {BASE_URL}/topic-lineage/data-docs/index.html" in str(failed.value)
    assert str(tl_home) not in str(failed.value)


def test_base_url_falls_back_to_the_api_server_host_and_port(monkeypatch):
    from topic_lineage import airflow as at

    monkeypatch.delenv("AIRFLOW__API__BASE_URL", raising=False)
    monkeypatch.setenv("AIRFLOW__API__HOST", "0.0.0.0")
    monkeypatch.setenv("AIRFLOW__API__PORT", "8093")
    assert at.airflow_base_url() == "http://localhost:8093"
    monkeypatch.setenv("AIRFLOW__API__HOST", "airflow.internal")
    assert at.airflow_base_url() == "http://airflow.internal:8093"


def test_started_processes_write_stderr_to_the_task_stdout(capfd):
    """What the JVM started by the task writes to stderr lands in stdout (logged as INFO)."""
    from topic_lineage.airflow.publish import _child_stderr_to_stdout

    with _child_stderr_to_stdout():
        subprocess.run(["sh", "-c", "echo jvm-start-up-line >&2"], check=True)
    subprocess.run(["sh", "-c", "echo later-error >&2"], check=True)
    out, err = capfd.readouterr()
    assert "jvm-start-up-line" in out and "jvm-start-up-line" not in err
    assert "later-error" in err  # restored afterwards
