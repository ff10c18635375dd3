"""The mass-deletion hold's thresholds (contract R3), defined once.

Plain Python (no pyspark): the no-op decision (:mod:`topic_lineage.noop`), the reference fold
(:mod:`topic_lineage.scd.reference`) and the walk (:mod:`topic_lineage.scd.walk`) all take
their defaults from here.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_RATIO = 0.5
"""Hold a complete snapshot that would close more than this share of the live incarnations..."""
DEFAULT_MIN_COUNT = 5
"""... and at least this many of them."""


@dataclass(frozen=True)
class HoldPolicy:
    """R3 thresholds: hold a snapshot closing more than ``ratio`` of live incarnations and at
    least ``min_count`` of them."""

    ratio: float = DEFAULT_RATIO
    min_count: int = DEFAULT_MIN_COUNT

    def __post_init__(self):
        if not 0 <= self.ratio < 1:
            raise ValueError(f"hold ratio must be in [0, 1), got {self.ratio}")
        if self.min_count < 1:
            raise ValueError(f"hold minimum must be at least 1, got {self.min_count}")
