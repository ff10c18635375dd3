"""build -> validate -> publish (write-audit-publish, contract R7).

:func:`run_build` is the one sequence the CLI and tests use; Airflow runs the same three steps as
separate tasks (``spark_jobs/build.py``, the quality gate, :func:`topic_lineage.warehouse.publish`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from topic_lineage import warehouse as wh
from topic_lineage.errors import TopicLineageError
from topic_lineage.faults import fault_point

Validator = Callable[[Any, str], Any]
"""``validate(spark, version)`` -> a result with ``success`` (bool) and a ``str()`` naming the
failing expectations; the quality gate (topic_lineage.quality) provides it."""


class ValidationFailed(TopicLineageError):
    """A built version failed validation: it stays unpublished (status ``rejected``)."""

    exit_code = 3


@dataclass
class BuildResult:
    version: str
    info: Any  # spark_jobs.build.VersionInfo
    validated: bool
    published: bool
    previous: str | None

    def __str__(self) -> str:
        state = "published" if self.published else ("validated" if self.validated else "built")
        return f"{self.info}\nversion {self.version} {state}" + (
            f" (previous: {self.previous})" if self.published else ""
        )


def run_build(
    spark,
    *,
    version_id: str | None = None,
    full_refresh: bool = False,
    publish: bool = True,
    validate: Validator | None = None,
    policy=None,
) -> BuildResult:
    """Build a new version, validate it (when a validator is given), then publish it.

    A failed validation marks the version ``rejected``, leaves the published version as it was,
    and raises :class:`ValidationFailed` with the validator's report.
    """
    from spark_jobs.build import build_version

    info = build_version(spark, version_id, full_refresh, policy=policy)
    version = info.version
    fault_point("validate")  # fault suite: written, not yet validated (topic_lineage/faults.py)
    validated = False
    # --- quality gate: between the write and the publish ------------------------------------
    if validate is not None:
        result = validate(spark, version)
        if not getattr(result, "success", False):
            report = result.report() if hasattr(result, "report") else str(result)
            wh.mark_rejected(version, report)
            raise ValidationFailed(
                f"version {version} failed validation and was not published; the published "
                f"version is still {wh.current_version()}:\n{report}"
            )
        wh.mark_validated(version)
        validated = True
    previous = None
    if publish:
        previous = wh.publish(version)
    return BuildResult(version, info, validated, publish, previous)
