"""The *Topic lineage* plugin is registered exactly once by Airflow's own plugins manager, with
the package's ``airflow.plugins`` entry point and/or the repository's ``plugins/`` folder.

The entry point is declared in ``pyproject.toml``; the wheel built from the worktree must carry
it. The plugins manager runs in a subprocess (its results are cached per process); the entry
point is made present or absent there with a stand-in ``.dist-info`` on ``sys.path`` and by
hiding the installed distribution's own, so the test does not depend on how the package was
installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

# Airflow loads the plugin (a deployment, not a rule): the whole suite
pytestmark = [pytest.mark.airflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
ENTRY_POINT = "topic_lineage.ui.plugin:TopicLineagePlugin"

LOAD = textwrap.dedent(
    """
    import json, sys
    from importlib import metadata
    want_entry_point = sys.argv[1] == "yes"
    # Only the stand-in dist-info may carry the entry point: hide the installed distribution's
    # own (an editable install may or may not carry it), from this package and from Airflow.
    def keep(ep, dist_name):
        return ep.value != %(ep)r or (want_entry_point and dist_name == "tl-ep-standin")
    _real = metadata.entry_points
    def entry_points(**kw):
        eps = _real(**kw)
        if kw.get("group") == "airflow.plugins":
            eps = metadata.EntryPoints(ep for ep in eps if keep(ep, ep.dist.name))
        return eps
    metadata.entry_points = entry_points
    from airflow._shared import module_loading
    _real_with_dist = module_loading.entry_points_with_dist
    def entry_points_with_dist(group):
        return iter([(ep, d) for ep, d in _real_with_dist(group) if keep(ep, d.metadata["Name"])])
    module_loading.entry_points_with_dist = entry_points_with_dist
    from airflow import plugins_manager
    plugins, errors = plugins_manager._get_plugins()
    names = [p.name for p in plugins]
    sources = [str(p.source) for p in plugins if p.name == "topic_lineage"]
    print("RESULT" + json.dumps({"names": names, "errors": errors, "sources": sources}))
    """
) % {"ep": ENTRY_POINT}


def test_pyproject_declares_the_entry_point():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["airflow.plugins"] == {"topic_lineage": ENTRY_POINT}


def _load(tmp_path: Path, plugins_folder: Path, entry_point: bool) -> dict:
    standin = tmp_path / "standin"
    dist_info = standin / "tl_ep_standin-0.0.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: tl-ep-standin\nVersion: 0.0.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[airflow.plugins]\ntopic_lineage = {ENTRY_POINT}\n"
    )
    airflow_home = tmp_path / "airflow"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home}/airflow.db",
        "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "True",
        "TOPIC_LINEAGE_HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join(
            [str(REPO), str(standin), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    done = subprocess.run(
        [sys.executable, "-c", LOAD, "yes" if entry_point else "no"], env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT"):])


@pytest.mark.parametrize(
    ("folder", "entry_point", "source"),
    [
        ("repo", True, "topic_lineage.ui.plugin"),  # the local deployment, package reinstalled
        ("empty", True, "topic_lineage.ui.plugin"),  # a user's Airflow with an empty folder
        ("repo", False, "topic_lineage_plugin.py"),  # an install made before the entry point
    ],
)
def test_registered_once(tmp_path, folder, entry_point, source):
    empty = tmp_path / "plugins"
    empty.mkdir()
    plugins_folder = REPO / "plugins" if folder == "repo" else empty
    out = _load(tmp_path, plugins_folder, entry_point)
    assert out["names"].count("topic_lineage") == 1, out
    assert out["errors"] == {}, out
    assert source in out["sources"][0], out
