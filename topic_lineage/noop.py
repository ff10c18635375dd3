"""No-op builds: tell, without Spark, that the published version already is what a build would write.

The tables are a pure function of the set of stored snapshots (R5) and of the build's own
settings. So a build is a no-op exactly when the published version was built from

- the same set of stored snapshot files: the same relative paths, each with the same size and
  modification time (:func:`topic_lineage.store.snapshot_listing`; the store never rewrites a
  file in place, so new, quarantined and re-imported files all change it),
- the same mass-deletion hold thresholds (R3), and
- the same build code: the source of ``spark_jobs/*.py``, ``topic_lineage/tables.py``,
  ``topic_lineage/topic_id.py`` and ``topic_lineage/scd/*.py``, and the pyspark version.

A build records the digest of these (``store_fingerprint``) in its version's manifest, computed
from the same store listing it read. :func:`decide` compares the published version's recorded
fingerprint with the store's now: one directory walk and a few small files, no JVM. A version
built before fingerprints existed never matches, so the first build after an upgrade is a real
one. The quality gate is not run again on a no-op: the published version passed it, and nothing
it checked has changed (its freshness warning concerns the newest snapshot, which is the same).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from topic_lineage.warehouse.versions import STORE_FINGERPRINT as FINGERPRINT_KEY

HOLD_RATIO_ENV = "TOPIC_LINEAGE_HOLD_RATIO"
HOLD_MIN_ENV = "TOPIC_LINEAGE_HOLD_MIN"


def hold_thresholds(ratio: float | None = None, min_count: int | None = None) -> tuple[float, int]:
    """R3 thresholds from arguments, else ``$TOPIC_LINEAGE_HOLD_RATIO`` / ``_HOLD_MIN``, else
    the defaults (:mod:`topic_lineage.scd.hold`).

    Read here, without pyspark, so that the no-op decision of an Airflow run imports no Spark;
    the build (``hold_policy`` below) reads them through this function too.
    """
    import os

    from topic_lineage.errors import TopicLineageError
    from topic_lineage.scd.hold import DEFAULT_MIN_COUNT, DEFAULT_RATIO, HoldPolicy

    try:
        values = (float(ratio if ratio is not None else os.environ.get(HOLD_RATIO_ENV, DEFAULT_RATIO)),
                  int(min_count if min_count is not None else os.environ.get(HOLD_MIN_ENV, DEFAULT_MIN_COUNT)))
        HoldPolicy(*values)  # the ranges, checked before anything runs
    except ValueError as exc:
        raise TopicLineageError(
            f"invalid mass-deletion hold threshold: {exc}; give --hold-ratio in [0, 1) and "
            f"--hold-min of at least 1 (or ${HOLD_RATIO_ENV} / ${HOLD_MIN_ENV})"
        ) from None
    return values


def _build_code_files() -> list[Path]:
    here = Path(__file__).resolve().parent
    spec = importlib.util.find_spec("spark_jobs")  # finds the package without importing pyspark
    jobs = Path(next(iter(spec.submodule_search_locations))) if spec else None
    files = sorted(jobs.glob("*.py")) if jobs else []
    return files + [here / "tables.py", here / "topic_id.py", *sorted((here / "scd").glob("*.py"))]


def hold_policy(ratio: float | None = None, min_count: int | None = None):
    """The :class:`~topic_lineage.scd.hold.HoldPolicy` of :func:`hold_thresholds` (no pyspark:
    the CLI decides it before it starts a JVM; the build imports it from here too)."""
    from topic_lineage.scd.hold import HoldPolicy

    ratio, min_count = hold_thresholds(ratio, min_count)
    return HoldPolicy(ratio=ratio, min_count=min_count)


def code_digest() -> str:
    """Digest of what decides the build's output besides its input: the build code and pyspark."""
    digest = hashlib.sha256()
    for path in _build_code_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(metadata.version("pyspark").encode())
    return digest.hexdigest()


def fingerprint(listing: dict[str, tuple[int, int]], hold_ratio: float, hold_min: int) -> str:
    """The ``store_fingerprint`` of a build over ``listing`` with these hold thresholds."""
    payload = {
        "files": sorted([path, size, mtime_ns] for path, (size, mtime_ns) in listing.items()),
        "hold_policy": {"ratio": float(hold_ratio), "min_count": int(hold_min)},
        "code": code_digest(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class NoopDecision:
    noop: bool
    reason: str
    version: str | None = None  # the published version, when there is one

    def __str__(self) -> str:
        return self.reason


def decide(hold_ratio: float, hold_min: int) -> NoopDecision:
    """Whether a build now would only rewrite the published version (see the module doc)."""
    from topic_lineage import store
    from topic_lineage import warehouse as wh

    current = wh.current_version()
    if current is None:
        return NoopDecision(False, "nothing is published yet")
    try:
        manifest = wh.read_manifest(current)
    except wh.WarehouseError as exc:
        return NoopDecision(False, str(exc), current)
    recorded = manifest.get(FINGERPRINT_KEY)
    if not recorded:
        return NoopDecision(False, f"published version {current} records no store fingerprint", current)
    listing = store.fingerprint_listing()
    if fingerprint(listing, hold_ratio, hold_min) != recorded:
        return NoopDecision(
            False,
            f"the stored snapshots, hold thresholds or build code differ from those of the "
            f"published version {current}",
            current,
        )
    return NoopDecision(
        True,
        f"nothing new to build: the published version {current} was built from the same "
        f"{_what(listing)}, hold thresholds and build code",
        current,
    )


def _what(listing: dict) -> str:
    if len(listing) == 1 and next(iter(listing)).startswith("generation "):
        return "stored snapshots (generation " + next(iter(listing)).split()[1][:8] + " of the store)"
    return f"{len(listing)} stored snapshot(s)"
