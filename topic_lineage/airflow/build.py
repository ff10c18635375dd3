"""The build side of the incarnations DAG: plan the version, decide a no-op, prepare and build it.

The build runs on the deployment's Spark Connect server when one answers, else through
spark-submit of ``spark_jobs/build.py`` (:mod:`topic_lineage.airflow.operators`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from topic_lineage.airflow.config import OrchestrationError, log
from topic_lineage.airflow.publish import capture_warnings, version_written


def build_application() -> str:
    """Absolute path of the PySpark build job submitted by the ``build`` task."""
    import importlib.util

    spec = importlib.util.find_spec("spark_jobs")
    if spec is None or not spec.submodule_search_locations:
        raise OrchestrationError("the spark_jobs package is not installed next to topic_lineage")
    return str(Path(next(iter(spec.submodule_search_locations))) / "build.py")


def plan_version(run_id: str, run_type: str) -> str:
    """The version name of this run's build: sorts by planning time, says what kind of run."""
    from topic_lineage import warehouse

    kind = re.sub(r"[^a-z]+", "-", str(getattr(run_type, "value", run_type)).lower()).strip("-")
    version = f"{warehouse.new_version_id()}-{kind or 'run'}"
    log.info("run %s builds version %s", run_id, version)
    return version


NOOP_FOLLOW_ON_WARNINGS = ["health"]


def noop_run(version: str) -> list[str] | None:
    """The ``plan`` task's decision: ``None`` when this run must build ``version``; for a no-op
    run (nothing new since the published version: :mod:`topic_lineage.noop`, no Spark), the
    tasks it still runs.

    A no-op run skips ``build``, ``validate`` and ``publish`` from ``plan``, so no task process
    is started for them. ``health`` runs only when the published version's gate warned about its
    captures (it then fails, as in every run over that version); otherwise it is skipped too and
    ``plan`` is the run's only task process.
    """
    from topic_lineage import noop

    decision = noop.decide(*noop.hold_thresholds())
    if not decision.noop:
        log.info("version %s will be built: %s", version, decision)
        return None
    log.info("no-op run, %s: build, validate and publish are skipped (no Spark)", decision)
    follow = []
    if capture_warnings(decision.version)[0]:
        log.warning("the published version %s passed its gate with warnings; health reports them",
                    decision.version)
        follow += NOOP_FOLLOW_ON_WARNINGS
    if lineage_behind(decision.version):
        log.warning("the OpenLineage events of the published version %s were not all emitted "
                    "(the last emission failed); lineage sends what is missing", decision.version)
        follow += NOOP_FOLLOW_LINEAGE
    return follow


NOOP_FOLLOW_LINEAGE = ["lineage"]
BUILD_FOLLOW = ["build", "validate", "publish", "health"]
"""What a building run runs after plan when no OpenLineage transport is configured: all but
``lineage``, which would only start a task process to skip itself."""


def plan_follow(version: str) -> list[str] | None:
    """The ``plan`` task's decision: None runs every task after it; a list, only those (the
    others are skipped from plan, so no task process is started for them)."""
    from topic_lineage.lineage import emit

    follow = noop_run(version)
    if follow is None and not emit.configured():
        return list(BUILD_FOLLOW)
    return follow


def lineage_behind(published: str) -> bool:
    """Whether an OpenLineage transport is configured and the last emission did not complete
    for ``published`` (no client is imported: the plan stays cheap)."""
    from topic_lineage.lineage import emit, ledger

    return emit.configured() and ledger.completed() != published


def prepare_build(version: str) -> bool:
    """Before (re)running the build of ``version``: ``False`` when it is already built.

    A retried build task must not fail on what its killed first attempt left behind: an
    unfinished version (status ``building``, never published) is removed and built again. The
    home is asked (the retry may run on another worker, or in a working copy of its own), and
    the unfinished version's files are removed there.
    """
    from topic_lineage import storage, warehouse

    directory = warehouse.version_dir(version)
    if not version_written(version):
        return True
    try:
        status = warehouse.read_manifest(version).get("status")
    except warehouse.WarehouseError:
        status = None
    if status in (warehouse.BUILT, warehouse.VALIDATED, warehouse.PUBLISHED, warehouse.REJECTED):
        log.info("version %s is already built (status %s); not building it again", version, status)
        return False
    if version == warehouse.current_version():
        raise OrchestrationError(f"version {version} is published but has status {status!r}")
    log.warning("removing the unfinished version %s (status %s) left by an earlier attempt",
                version, status)
    storage.home().remove_tree(directory)
    return True


def build_on_connect_server(version: str) -> dict[str, Any] | None:
    """The ``build`` task's body when the deployment's Spark Connect server runs
    (:func:`topic_lineage.local.spark_server.remote_url`): build ``version`` on it from this task
    process (no spark-submit, no JVM of its own); ``None`` when no server answers (the task
    then submits ``spark_jobs/build.py`` as before). Writes only: validate and publish are the
    next tasks."""
    from topic_lineage.local import spark_server

    url = spark_server.remote_url()
    if url is None:
        return None
    from topic_lineage.scd.build import build_version, hold_policy

    log.info("building version %s on the Spark Connect server %s", version, url)
    spark = spark_server.connect(url, shared=True)
    try:
        info = build_version(spark, version, policy=hold_policy())
    finally:
        spark.stop()  # closes this client; the pipeline's session stays on the server
    log.info("%s", info)
    return {"version": info.version, "mode": info.mode, "seconds": info.seconds,
            "row_counts": info.row_counts}
