"""The validate -> publish -> health tasks: the quality gate and its log lines, publish, health."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from topic_lineage.airflow.config import log


def version_written(version: str) -> bool:
    """Whether anything of ``version`` was written: its directory, or with the home on object
    storage any object under its prefix (this task's working copy holds nothing of it yet)."""
    from topic_lineage import storage, warehouse

    return bool(storage.home().listing(warehouse.version_dir(version), hidden=True))


def capture_warnings(version: str) -> tuple[list[str], list[str]]:
    """The gate's warnings on ``version`` about its captures (what makes ``health`` fail), and
    its findings about the history (a carried consumer position: logged, never failed on)."""
    from topic_lineage import warehouse
    from topic_lineage.quality.suites import FINDINGS

    gate = warehouse.read_manifest(version).get("gate") or {}
    warnings = gate.get("warnings") or []
    findings = [w for w in warnings if w.split(": ", 1)[-1] in FINDINGS]
    return [w for w in warnings if w not in findings], findings


QUIET_LOGGERS = ("great_expectations", "py4j", "tzlocal")
"""Loggers held at WARNING during the gate: GX logs hundreds of lines per validation, and its
Data Docs index asks ``tzlocal`` for the local zone, which logs its search (six lines) the first
time in a process."""


def airflow_base_url() -> str:
    """Where users reach the Airflow api-server: ``[api] base_url``, else ``http://<[api] host>:
    <[api] port>`` (``localhost`` for a wildcard host). The task log links the UI from it."""
    from airflow.sdk import conf

    base = (conf.get("api", "base_url", fallback="") or "").strip()
    if base:
        return base.rstrip("/")
    host = (conf.get("api", "host", fallback="") or "").strip()
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "localhost"
    return f"http://{host}:{conf.get('api', 'port', fallback='8080')}"


@contextlib.contextmanager
def _quiet_loggers(names: tuple[str, ...] = QUIET_LOGGERS) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def _child_stderr_to_stdout() -> Iterator[None]:
    """Processes started inside (Spark's JVM) write their stderr to this task's stdout.

    Airflow logs a task's stderr at ERROR level; the JVM's start-up lines ("Using Spark's
    default log4j profile", the native-hadoop warning) are not errors. The build task's JVM
    output is logged at INFO the same way (through spark-submit's hook).
    """
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = os.dup(2)
        os.dup2(1, 2)
    except OSError:  # no real descriptors (an unusual runner): leave them alone
        yield
        return
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def gate_log_lines(result: Any, base_url: str) -> list[str]:
    """The validate task's log: the verdict, one line per expectation, http links to the pages.

    Links point at the UI (``<base_url>/topic-lineage/data-docs/...``), never at server paths.
    """
    from topic_lineage.quality import context as qc
    from topic_lineage.ui import data_docs_url

    met = sum(1 for o in result.outcomes if o.success)
    verdict = "PASSED" if result.success else "FAILED"
    total = len(result.outcomes)
    lines = [f"quality gate {verdict} for version {result.version}: {met} of {total} expectation(s) met"]
    for outcome in result.outcomes:
        severity = getattr(outcome, "severity", None) or "critical"
        mark = "passed" if outcome.success else ("warning" if severity == "warning" else "FAILED")
        count = "" if outcome.success or outcome.unexpected_count is None else (
            f" ({outcome.unexpected_count} row(s))")
        lines.append(f"  {mark:7} {outcome.table}: {outcome.name}{count}")
    report = qc.quality_link(qc.overview_page()) or "index.html"
    lines.append(f"gate report: {data_docs_url(base_url, report)}")
    for table, link in sorted((result.detail_pages or {}).items()):
        relative = qc.quality_link(link)
        if relative:
            lines.append(f"Data Docs of {table}: {data_docs_url(base_url, relative)}")
    return lines


def validate_version(version: str) -> dict[str, Any]:
    """Run the Great Expectations gate on a written version; raise if a critical expectation
    fails (R7). Warnings (freshness, describe-error share) do not fail this task: they are in
    its return value and log, and the ``health`` task fails on them."""
    from airflow.sdk.exceptions import AirflowFailException

    from topic_lineage.local.spark_server import LazySession
    from topic_lineage.quality import context as qc
    from topic_lineage.quality.gate import validate_version as gate
    from topic_lineage.ui import data_docs_url

    # the deployment's Spark Connect server when it runs, else a local Spark; neither for a
    # small version, which the gate validates in this process
    with _quiet_loggers(), LazySession("topic-lineage-validate", opening=_child_stderr_to_stdout) as spark:
        result = gate(spark, version)  # records the verdict in the version's manifest
    base_url = airflow_base_url()
    for line in gate_log_lines(result, base_url):
        log.info("%s", line)
    report = data_docs_url(base_url, qc.quality_link(qc.overview_page()) or "index.html")
    if not result.success:
        raise AirflowFailException(
            f"version {version} failed the quality gate and stays unpublished: "
            f"{result.summary()}. Gate report: {report}"
        )
    for warning in result.warnings:
        log.warning("quality gate warning on version %s: %s", version, warning)
    return {"version": version, "gate_report": report, "warnings": result.warnings}


def publish_version(version: str) -> dict[str, Any]:
    """Publish a validated version through :func:`topic_lineage.warehouse.publish` (its one
    lock and decision); skip when the published version was built over more or the same
    snapshots."""
    from airflow.sdk.exceptions import AirflowSkipException

    from topic_lineage import warehouse

    outcome = warehouse.publish(version, automatic=True)
    if not outcome.published:
        raise AirflowSkipException(str(outcome))
    return {"version": version, "previous": outcome.previous}


def check_health(version: str) -> dict[str, Any]:
    """Fail (without retries) when the quality gate warned about ``version``.

    Warnings never block publishing, so ``validate`` and ``publish`` succeed; this task makes
    the run visibly unhealthy instead (a failed task, a failed run, the usual alerting). A no-op
    run (nothing new since the published version: ``version`` was never written) reports the
    published version's verdict, which still describes the tables readers see.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from topic_lineage import warehouse

    if not version_written(version):
        published = warehouse.current_version()
        if published is None:
            return {"version": version, "warnings": []}
        log.info("version %s was not built (no-op run); health of the published version %s",
                 version, published)
        version = published
    unhealthy, findings = capture_warnings(version)
    for finding in findings:  # history, not capture health: reported, never a failed run
        log.warning("version %s: the quality gate reports %s (see Data Docs and the group_"
                    "incarnations table)", version, finding)
    if unhealthy:
        raise AirflowFailException(
            f"version {version} passed the quality gate with {len(unhealthy)} warning(s) about "
            "its captures: " + "; ".join(unhealthy)
            + " (stale captures or many describe errors; see Data Docs). The tables were "
            "validated and published as usual."
        )
    return {"version": version, "warnings": [], "findings": findings}


def emit_lineage(version: str) -> dict[str, Any]:
    """OpenLineage events of what the published version adds (docs/lineage.md), after publish.

    Skipped when no OpenLineage transport is configured. A transport failure fails this task
    (retried later; the next run sends what is missing too); the published tables are never
    touched. ``version`` is this run's (often the published one); what is emitted is always
    the published version's.
    """
    from airflow.sdk.exceptions import AirflowException, AirflowSkipException

    from topic_lineage.lineage.emit import EmissionError, emit_published, summary

    try:
        result = emit_published()
    except EmissionError as exc:
        raise AirflowException(str(exc)) from None
    log.info("run version %s: %s", version, result)
    if result.transport is None:
        raise AirflowSkipException(str(result))
    return summary(result)
