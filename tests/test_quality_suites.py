"""The GX context in expectations/ holds every expectation of suites.py, and GX loads all of them.

GX silently drops an expectation whose class is not registered when a suite is loaded, so a
suite can lose its custom checks without any error. These tests load the suites the way the gate
does, in a fresh process, and compare them with the definitions in topic_lineage.quality.suites.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from topic_lineage import tables as t
from topic_lineage.quality import context as qc
from topic_lineage.quality import suites as s

LOAD_SUITES = """
import json
from topic_lineage.quality.context import get_context
ctx = get_context()
print(json.dumps({
    suite.name: [
        {"type": e.expectation_type, "name": e.meta.get("name"), "kwargs": e.configuration.kwargs,
         "description": e.description, "severity": e.severity.value}
        for e in suite.expectations
    ]
    for suite in ctx.suites.all()
}, default=str))
"""


@pytest.fixture(scope="module")
def loaded_suites(tmp_path_factory):
    """The suites as a fresh process loads them through the gate's own entry point."""
    home = tmp_path_factory.mktemp("suites-home")
    env = {**__import__("os").environ, "TOPIC_LINEAGE_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", LOAD_SUITES], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_table_has_a_stored_suite(loaded_suites):
    """One suite per published table, named after it."""
    assert set(loaded_suites) == set(t.TABLES)


@pytest.mark.parametrize("table", t.TABLES)
def test_loaded_suite_contains_every_expectation(loaded_suites, table):
    """The loaded suite has exactly the expectations of suites.py, custom ones included."""
    assert [e["name"] for e in loaded_suites[table]] == s.expectation_names(table)


def test_incarnation_suite_covers_the_contract_gate_list(loaded_suites):
    """Every item of the contract's gate list on topic_incarnations is in the loaded suite
    (freshness is judged on snapshot_runs, which knows which snapshots were complete)."""
    names = {e["name"] for e in loaded_suites[t.TOPIC_INCARNATIONS]}
    assert {
        s.LIVE_IDS_UNIQUE, s.LIVE_NAMES_UNIQUE, s.DELETED_IDS_NEVER_COME_BACK, s.IDS_CANONICAL,
        s.IDS_NOT_RESERVED, s.CLOSED_VERSIONS_END_AFTER_START, s.ONE_CURRENT_ROW,
        s.VERSIONS_DO_NOT_OVERLAP,
    } <= names
    assert s.NEWEST_SNAPSHOT_FRESH in {e["name"] for e in loaded_suites[t.SNAPSHOT_RUNS]}


def test_custom_expectations_survive_loading(loaded_suites):
    """The named custom expectations are loaded as their own types, not dropped."""
    from topic_lineage.quality.custom_expectations import CUSTOM_EXPECTATIONS

    loaded_types = {e["type"] for suite in loaded_suites.values() for e in suite}
    from great_expectations.expectations.expectation import camel_to_snake

    assert {camel_to_snake(cls.__name__) for cls in CUSTOM_EXPECTATIONS} <= loaded_types


def test_stored_suites_match_their_definitions(loaded_suites):
    """expectations/ is regenerated from suites.py: a stale JSON file fails here (rewrite it with
    `python -m topic_lineage.quality.suites`)."""
    for table, build in s.SUITE_BUILDERS.items():
        defined = [
            {"type": e.expectation_type, "severity": e.severity.value,
             "kwargs": json.loads(json.dumps(e.configuration.kwargs, default=str))}
            for e in build()
        ]
        stored = [{"type": e["type"], "severity": e["severity"], "kwargs": e["kwargs"]}
                  for e in loaded_suites[table]]
        assert stored == defined, table


def test_context_keeps_generated_output_out_of_the_repository(tl_home):
    """Validation results and Data Docs go under $TOPIC_LINEAGE_HOME/quality."""
    ctx = qc.get_context()
    site = ctx.variables.data_docs_sites["local_site"]["store_backend"]["base_directory"]
    results = ctx.variables.stores["validation_results_store"]["store_backend"]["base_directory"]
    assert str(tl_home / "quality") in site
    assert str(tl_home / "quality") in results


def test_severity_round_trips_through_the_stored_suites(loaded_suites):
    """GX's `severity` is stored in the suite JSON and loaded back: freshness and the
    describe-error share are warnings, every other expectation is critical (blocks publishing)."""
    loaded = {e["name"]: e["severity"] for suite in loaded_suites.values() for e in suite}
    assert {name for name, severity in loaded.items() if severity == "warning"} == s.WARNINGS
    assert {severity for name, severity in loaded.items() if name not in s.WARNINGS} == {"critical"}
    stored = json.loads((qc.context_dir() / "expectations" / "snapshot_runs.json").read_text())
    assert {e["meta"]["name"]: e["severity"] for e in stored["expectations"]}[s.NEWEST_SNAPSHOT_FRESH] == "warning"
