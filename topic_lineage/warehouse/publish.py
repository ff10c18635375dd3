"""The quality gate's verdict in a manifest, the decision whether to publish, :func:`publish`
(the one function that moves ``main`` of the Iceberg tables) and retention."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError
from topic_lineage.warehouse import iceberg, retention
from topic_lineage.warehouse import versions as v
from topic_lineage.warehouse.locks import build_running, publish_lock, remove_unless_read
from topic_lineage.warehouse.sql import write_init_sql

log = logging.getLogger("topic_lineage.warehouse")


def gate_passed(manifest: dict) -> bool:
    """Whether the quality gate passed this version (its last verdict had no critical failure).

    Manifests written before verdicts were recorded count as passed only with status
    ``validated`` (the status the gate alone gave).
    """
    gate = manifest.get("gate")
    if gate is None:
        return manifest.get("status") == v.VALIDATED
    return gate.get("passed") is True


def record_verdict(
    version: str, *, passed: bool, warnings: list[str], failures: list[str], report: str = "",
    details: dict | None = None,
) -> dict:
    """Store the quality gate's verdict in the version's manifest (called by the gate only).

    A built version becomes ``validated`` (no critical failure; warnings allowed) or
    ``rejected``; a published version keeps its status, and a version still being built is
    left alone. The verdict (``gate``: passed, warnings, failures, at) is what :func:`publish`
    checks; ``details`` are stored with it (the gate's suite fingerprint and what it read).
    """
    if not storage.home().exists(v.version_dir(version) / v.MANIFEST):
        log.info("version %s has no manifest: its verdict is not recorded", version)
        return {}  # tables written by hand (tests, tools): never publishable anyway
    with publish_lock():
        manifest = v.read_manifest(version)
        status = manifest.get("status")
        verdict = {"passed": bool(passed), "warnings": list(warnings), "failures": list(failures),
                   "at": v.now_text(), **(details or {})}
        if status in (v.BUILT, v.VALIDATED, v.REJECTED):
            if passed:
                manifest = v.set_status(version, v.VALIDATED, gate=verdict)
                manifest.pop("rejected_reason", None)
                v.write_manifest(version, manifest)
            else:
                manifest = v.set_status(version, v.REJECTED, gate=verdict,
                                      rejected_reason=report or "; ".join(failures))
        elif status == v.PUBLISHED:
            manifest["gate"] = verdict
            v.write_manifest(version, manifest)
        return manifest


# --- publishing ------------------------------------------------------------------------------
class PublishRefused(v.WarehouseError):
    """A version may not be published (the gate has not passed it, or it is incomplete);
    nothing changed. Exit status 3 wherever it happens."""

    exit_code = 3


@dataclass(frozen=True)
class PublishDecision:
    publish: bool
    reason: str
    same: bool = False  # kept because the published version has the same snapshots and derivation


@dataclass(frozen=True)
class PublishOutcome:
    """What :func:`publish` did: ``published`` False means the pointer was left as it was."""

    version: str
    published: bool
    previous: str | None
    reason: str
    forced: bool = False

    def __str__(self) -> str:
        if not self.published:
            return f"not published {self.version}: {self.reason}"
        return (f"published {self.version}" + (" (FORCED past the quality gate)" if self.forced else "")
                + f" (previous: {self.previous})")


def version_inputs(version: str | None) -> set[tuple[str, int]] | None:
    """The snapshot files a built version was derived from, as ``(path, size)`` (from its
    manifest): a snapshot quarantined and imported again with other content is another input."""
    if version is None:
        return None
    try:
        files = v.read_manifest(version).get("snapshot_files")
    except v.WarehouseError:
        return None
    return set(files.items()) if files is not None else None


DERIVATION_KEYS = ("build_code", "hold_policy")
"""What besides its snapshots decides a version's rows, as its manifest records it: the digest
of the build code (:func:`topic_lineage.noop.code_digest`) and the R3 hold thresholds."""


def version_derivation(version: str | None) -> dict | None:
    """How a built version derived its rows (:data:`DERIVATION_KEYS`); None when its manifest
    does not record it (built before it was recorded)."""
    if version is None:
        return None
    try:
        manifest = v.read_manifest(version)
    except v.WarehouseError:
        return None
    if any(manifest.get(key) is None for key in DERIVATION_KEYS):
        return None
    return {key: manifest[key] for key in DERIVATION_KEYS}


def decide_publish(
    candidate: str, candidate_inputs: set | None, current: str | None,
    current_inputs: set | None, *, candidate_derivation: dict | None = None,
    current_derivation: dict | None = None,
) -> PublishDecision:
    """Whether an automatic publish (build, Airflow) replaces ``current`` with ``candidate``.

    The tables are a pure function of the set of snapshots (R5), so builds over the same set are
    interchangeable and a build over a superset supersedes. Refusing the strict-subset case
    keeps a slow run (a backfill) from replacing a newer build, in whatever order runs finish.
    """
    if current is None:
        return PublishDecision(True, "nothing is published yet")
    if current == candidate:
        return PublishDecision(False, f"version {candidate} is already published")
    if candidate_inputs is None or current_inputs is None:
        return PublishDecision(True, f"no recorded inputs to compare with {current}; publishing")
    if candidate_inputs < current_inputs:
        return PublishDecision(
            False,
            f"published version {current} was built over {len(current_inputs)} snapshot(s), a "
            f"superset of this version's {len(candidate_inputs)}; keeping it",
        )
    if candidate_inputs == current_inputs:
        if candidate_derivation is not None and candidate_derivation != current_derivation:
            # same snapshots, other build code or hold thresholds (an upgrade, a new table, a
            # changed threshold): the rows may differ, and the candidate is the newer derivation
            return PublishDecision(
                True,
                f"built over the same {len(current_inputs)} snapshot(s) as {current}, with other "
                "build code or hold thresholds; publishing",
            )
        return PublishDecision(
            False,
            f"published version {current} was built over the same {len(current_inputs)} "
            "snapshot(s); its tables are identical (R5), keeping it",
            same=True,
        )
    return PublishDecision(True, f"built over {len(candidate_inputs)} snapshot(s); publishing")


def _refusal(version: str, manifest: dict) -> str | None:
    """Why ``version`` may not be published without --force (None: it may)."""
    status = manifest.get("status")
    if gate_passed(manifest):
        return None
    gate = manifest.get("gate") or {}
    if status == v.REJECTED or gate.get("passed") is False:
        failed = "; ".join(gate.get("failures") or []) or manifest.get("rejected_reason") or "see Data Docs"
        why = f"the quality gate rejected it ({failed})"
    else:
        why = f"the quality gate has not passed it (status {status!r})"
    return (
        f"version {version!r} cannot be published: {why}. Validate it with 'topic-lineage validate "
        f"--version {version}', or publish it anyway with 'topic-lineage publish {version} --force "
        "--reason TEXT' (recorded in its manifest)"
    )


def staged_snapshots(version: str, manifest: dict | None = None) -> dict[str, int]:
    """Table -> the Iceberg snapshot holding ``version`` (staged by its build); a version built
    before the tables were Iceberg tables is staged now, its files added as they are."""
    manifest = manifest if manifest is not None else v.read_manifest(version)
    snapshots = manifest.get(iceberg.SNAPSHOTS_KEY) or {}
    if all(table in snapshots for table in t.TABLES):
        return snapshots
    kept = manifest.get(v.REFERENCES) or {}
    staged = iceberg.stage(version, {x: v.version_path(version, x) for x in t.TABLES},
                           lambda path: v.stored_path(version, path, kept))
    manifest = v.read_manifest(version)
    manifest.update(staged)
    v.write_manifest(version, manifest)
    return staged[iceberg.SNAPSHOTS_KEY]


def adopt_legacy() -> str | None:
    """Move a home published before the tables were Iceberg tables over: the version its
    ``CURRENT`` file names becomes ``main`` of the Iceberg tables (its files added as they are,
    nothing rewritten or removed), and ``CURRENT`` goes. Called by every build and publish;
    returns the version moved over (None: nothing to do)."""
    if v.legacy_version() is None or iceberg.published_version() is not None:
        return None
    with publish_lock():
        legacy = v.legacy_version()
        if iceberg.published_version() is not None or legacy is None:
            return None
        if not all(v.version_path(legacy, x).is_dir() for x in t.TABLES):
            log.warning("the published version %s (CURRENT) lacks a table: not moved over to "
                        "Iceberg; the next build publishes a new version", legacy)
            return None
        iceberg.publish_main(legacy, staged_snapshots(legacy))
        t.current_pointer().unlink(missing_ok=True)
    log.info("moved the published version %s over to the Iceberg tables (catalog %r)", legacy,
             iceberg.catalog_name())
    return legacy


def publish(
    version: str,
    *,
    automatic: bool = False,
    force_reason: str | None = None,
    forced_by: str | None = None,
    keep: int | None = None,
) -> PublishOutcome:
    """The one way to change the published version (``CURRENT``); everything that publishes
    calls this: ``topic-lineage build`` and ``publish``, ``spark_jobs/build.py --publish``, the
    Airflow ``publish`` task.

    Under the publish lock, it checks and performs:

    - the version is completely built (status not ``building``, every table present);
    - the quality gate passed it (:func:`gate_passed`), unless ``force_reason`` is given: then it
      is published anyway and the override (reason, who, when, the gate's verdict) is appended to
      its manifest's ``forced`` list;
    - ``automatic`` (builds and Airflow, not a user naming a version): :func:`decide_publish`
      may keep the published version (it was built over more or the same snapshots); the
      outcome then says so and nothing changes.

    Then ``main`` of every table moves to the version's staged snapshot (a compare-and-swap
    each, ``topic_incarnations`` last: :func:`topic_lineage.warehouse.iceberg.publish_main`;
    a ``main`` at another engine's commit that changes rows is refused naming it, unless
    ``force_reason``),
    ``init.sql`` is rewritten, and retention applied
    (``keep``, default ``$TOPIC_LINEAGE_KEEP_VERSIONS`` or 5; never the current version, a
    running build's, or one a reader has pinned).
    """
    if force_reason is not None and not force_reason.strip():
        raise PublishRefused("--force needs a --reason saying why the gate is overridden")
    retention.Ages.for_retention()  # a bad setting of retention's periods stops before anything moves
    adopt_legacy()
    with publish_lock():
        manifest = v.read_manifest(version)
        status = manifest.get("status")
        if status == v.BUILDING:
            raise PublishRefused(
                f"version {version!r} is not completely built (status 'building'); build again"
            )
        present = v.tables_of(version, manifest.get(v.REFERENCES) or {})
        for table in t.TABLES:
            if table not in present:
                raise PublishRefused(f"version {version!r} lacks table {table}; build it again")
        refusal = _refusal(version, manifest)
        if refusal is not None and force_reason is None:
            raise PublishRefused(refusal)
        replaced = None
        try:
            previous = v.current_version()
        except iceberg.ForeignCommitError as exc:  # rows someone else changed: only a user's --force replaces them
            if force_reason is None:
                raise
            previous, replaced = exc.version, {"table": exc.table, "snapshot": exc.snapshot_id}
        reason = "passed the quality gate"
        if automatic:
            decision = decide_publish(
                version, version_inputs(version), previous, version_inputs(previous),
                candidate_derivation=version_derivation(version),
                current_derivation=version_derivation(previous),
            )
            if not decision.publish:
                log.info("not publishing %s: %s", version, decision.reason)
                if decision.same:
                    _adopt_fingerprint(previous, manifest)
                return PublishOutcome(version, False, previous, decision.reason)
            reason = decision.reason
        forced = None
        if refusal is not None or replaced is not None:
            forced = {"reason": force_reason.strip(), "by": forced_by or _user(),
                      "at": v.now_text(), "status_before": status, "gate": manifest.get("gate")}
            if replaced is not None:  # another engine's commit that changed rows, replaced on purpose
                forced["replaced_foreign_commit"] = replaced
            reason = f"FORCED past the quality gate: {force_reason.strip()}"
            if refusal is None:
                reason = f"FORCED over snapshot {replaced['snapshot']} of {replaced['table']}: {force_reason.strip()}"
            log.warning("publishing %s by force (%s): %s", version, refusal or reason, force_reason)
        began = time.monotonic()
        iceberg.publish_main(version, staged_snapshots(version, manifest),
                             replace_foreign=force_reason is not None)
        cost = {"iceberg_publish_seconds": round(time.monotonic() - began, 3)}
        if forced is not None:
            v.set_status(version, v.PUBLISHED, forced=[*manifest.get("forced", []), forced], **cost)
        elif status != v.PUBLISHED or previous != version:  # a publish again is recorded too:
            v.set_status(version, v.PUBLISHED, **cost)  # retention dates a superseded version by it
        write_init_sql(version)
        apply_retention(keep)
    log.info("published version %s (previous: %s): %s", version, previous, reason)
    return PublishOutcome(version, True, previous, reason, forced=refusal is not None)


def refresh_init_sql() -> None:
    """Rewrite ``init.sql`` when the files the catalog names for the published version are no
    longer those it names (another engine compacted ``main``); nothing when they are."""
    with publish_lock():
        current = v.current_version()
        if current is None:
            return
        write_init_sql(current, only_if_changed=True)


def _adopt_fingerprint(published: str, candidate_manifest: dict) -> None:
    """The candidate was built from the same snapshots, code and thresholds as the published
    version, so its tables are the published ones: record the store as the candidate saw it
    (``store_fingerprint``: the files' sizes and modification times) in the published version's
    manifest. After the store's files got new modification times (a copy without ``-p``, a
    restore), the next build is then a no-op instead of building the same tables again."""
    fingerprint = candidate_manifest.get(v.STORE_FINGERPRINT)
    manifest = v.read_manifest(published)
    if fingerprint and manifest.get(v.STORE_FINGERPRINT) != fingerprint:
        manifest[v.STORE_FINGERPRINT] = fingerprint
        v.write_manifest(published, manifest)
        log.info("published version %s now records the store as version %s read it (identical "
                 "tables): the next build over it is a no-op", published, candidate_manifest.get("version"))


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers): the uid says who
        return f"uid {os.getuid()}"


def apply_retention(keep: int | None = None, *, sweep_after: bool = True) -> list[str]:
    """Remove all but the newest ``keep`` versions (default ``$TOPIC_LINEAGE_KEEP_VERSIONS`` or
    5; never the current one); return the removed names.

    Never a running build's version nor one a reader has pinned with :func:`reading` (locks
    this machine sees); a version goes only once it has been out of use long enough, by the
    times its manifest records (:mod:`topic_lineage.warehouse.retention`: the periods default
    to zero on a local disk, where those locks reach every process); then the files that
    nothing references and that are older than the reader grace go too
    (:mod:`topic_lineage.sweep`, warehouse only) unless not ``sweep_after``.
    """
    keep = keep if keep is not None else int(os.environ.get(v.KEEP_ENV, v.DEFAULT_KEEP))
    keep = max(keep, 1)
    current = v.current_version()
    versions = v.list_versions()
    due = retention.removable(versions, current, datetime.now(UTC), keep, retention.Ages.for_retention(),
                              build_running())
    removed, in_use = [], []
    for name in reversed(due):  # newest first: files it keeps of an older one are free after it
        # a file another version keeps by reference stays (a removal that fails keeps its own)
        referenced = v.referenced([m for m in versions if m["version"] not in (name, *removed)])
        try:
            gone = remove_unless_read(name, referenced)
        except v.WarehouseError as exc:  # the catalog: the version stays until the next publish
            log.warning("retention kept version %s: %s", name, exc)
            continue
        (removed if gone else in_use).append(name)
    removed, in_use = [n for n in due if n in removed], [n for n in due if n in in_use]
    if removed:
        log.info("retention removed version(s) %s", ", ".join(removed))
    if in_use:
        log.info("retention kept version(s) %s: a reader is using them", ", ".join(in_use))
    if sweep_after:
        from topic_lineage import sweep

        try:
            swept = sweep.clean(sweep.find(warehouse_only=True))
        except TopicLineageError as exc:  # what is left waits for the next publish or verify --clean
            log.warning("retention did not sweep unreferenced objects: %s", exc)
        else:
            if swept.total_count:
                log.info("retention removed unreferenced objects: %s", swept.summary())
    return removed
