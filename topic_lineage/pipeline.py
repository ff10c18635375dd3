"""build -> validate -> publish (write-audit-publish, contract R7).

:func:`run_build` is the one sequence the CLI and tests use; :func:`audit_and_publish` is its
second half (gate, then :func:`topic_lineage.warehouse.publish`), also used by
``spark_jobs/build.py --publish``. Airflow runs the same steps as separate tasks (the build job,
:func:`topic_lineage.airflow.publish.validate_version`, :func:`topic_lineage.warehouse.publish`).

Only the quality gate makes a version publishable: it records its verdict in the version's
manifest, and :func:`topic_lineage.warehouse.publish` refuses a version without a passing one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topic_lineage import warehouse as wh
from topic_lineage.errors import TopicLineageError
from topic_lineage.faults import fault_point


class ValidationFailed(TopicLineageError):
    """A built version failed the quality gate (a critical expectation): it stays unpublished
    (status ``rejected``). Exit status 1, as ``topic-lineage validate`` on a failing version."""

    exit_code = 1

    def __init__(self, message: str, result: Any = None):
        super().__init__(message)
        self.result = result


@dataclass
class BuildResult:
    version: str
    info: Any  # topic_lineage.scd.build.VersionInfo
    gate: Any  # topic_lineage.quality.gate.GateResult, or None when not validated
    outcome: wh.PublishOutcome | None  # None when not asked to publish

    @property
    def validated(self) -> bool:
        return self.gate is not None and self.gate.success

    @property
    def published(self) -> bool:
        return self.outcome is not None and self.outcome.published

    @property
    def previous(self) -> str | None:
        return self.outcome.previous if self.outcome is not None else None

    @property
    def warnings(self) -> list[str]:
        return self.gate.warnings if self.gate is not None else []

    def __str__(self) -> str:
        lines = [str(self.info)]
        if self.gate is not None:
            lines.append(self.gate.report())
        if self.outcome is not None:
            lines.append(str(self.outcome))
        else:
            state = "validated" if self.validated else "built (not validated)"
            lines.append(f"version {self.version} {state}, not published")
        return "\n".join(lines)


def audit_and_publish(
    spark, version: str, *, publish: bool = True, gate_options: dict | None = None
) -> tuple[Any, wh.PublishOutcome | None]:
    """Validate a written version with the quality gate, then (``publish``) publish it.

    A critical failure marks the version ``rejected``, leaves the published version as it was,
    and raises :class:`ValidationFailed` with the gate's report. Warnings never block. The
    publish is automatic (:func:`topic_lineage.warehouse.decide_publish`): a version over fewer
    or the same snapshots than the published one leaves it published.
    """
    from topic_lineage.quality.gate import validate_version

    fault_point("validate")  # fault suite: written, not yet validated (topic_lineage/faults.py)
    result = validate_version(spark, version, **(gate_options or {}))
    if not result.success:
        raise ValidationFailed(
            f"version {version} failed the quality gate and was not published; the published "
            f"version is still {wh.current_version()}:\n{result.report()}",
            result,
        )
    outcome = wh.publish(version, automatic=True) if publish else None
    return result, outcome


def run_build(
    spark,
    *,
    version_id: str | None = None,
    full_refresh: bool = False,
    publish: bool = True,
    validate: bool = True,
    gate_options: dict | None = None,
    policy=None,
) -> BuildResult:
    """Build a new version, validate it with the quality gate, then publish it.

    ``validate=False`` only builds: it cannot be combined with ``publish`` (only a version the
    gate passed is published). ``gate_options``: keyword arguments of
    :func:`topic_lineage.quality.gate.validate_version` (``max_age``, ``max_error_share``).
    """
    from topic_lineage.scd.build import build_version

    if publish and not validate:
        raise wh.PublishRefused(
            "a build that skips the quality gate cannot publish; build with --no-publish, then "
            "'topic-lineage validate --version V' and 'topic-lineage publish V'"
        )
    info = build_version(spark, version_id, full_refresh, policy=policy)
    if not validate:
        fault_point("validate")
        return BuildResult(info.version, info, None, None)
    gate, outcome = audit_and_publish(spark, info.version, publish=publish, gate_options=gate_options)
    return BuildResult(info.version, info, gate, outcome)


IMPORT_SWITCH_INTERVAL_S = 0.0001

def import_in_background(*, gate: bool) -> None:
    """Import, in a thread while Spark starts and the build runs, what the build needs after its
    walk: pyiceberg's table and file IO (staging the version's Iceberg tables: 0.3-0.5 s on the
    build's path otherwise); then with ``gate`` Great Expectations, so that the gate finds its
    modules loaded: the import takes 4-6 s, a fifth of a small build's wall time on 2 cores
    (issues #16, #24). Only imports (:func:`topic_lineage.quality.gx_import.import_gx`, without
    the modules GX loads for what the gate never runs): the gate opens its context itself. Not
    pyiceberg's SQL catalog: it imports sqlalchemy, which GX's import hides
    (:data:`topic_lineage.quality.gx_import.HIDING`).

    The modules the build imports too (pandas, pyarrow, pyspark.sql) are imported here first,
    in the calling thread, so the two threads never import the same module at the same time;
    what is left to the thread is pyiceberg's, Great Expectations' and ours.

    While the thread imports, the interpreter switches threads every 0.1 ms instead of 5 ms:
    the build's thread makes thousands of short calls into the JVM (py4j, a socket round trip
    each) and waited up to a switch interval for the GIL after each, behind the import's pure
    Python (issue #24: an incremental build of a small store 11.7 s -> 11.0 s on 2 cores)."""
    import sys
    import threading

    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import pyspark.sql.functions  # noqa: F401

    from topic_lineage.quality import gx_import

    def load() -> None:
        import logging

        try:
            import pyiceberg.catalog
            import pyiceberg.io.pyarrow
            import pyiceberg.table  # noqa: F401

            if gate:
                gx_import.import_gx()
        except Exception:  # the build and the gate import them again and report the error
            logging.getLogger(__name__).debug("background import failed", exc_info=True)
        finally:
            sys.setswitchinterval(switch)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(IMPORT_SWITCH_INTERVAL_S)

    threading.Thread(target=load, name="import-in-background", daemon=True).start()

