"""The DAGs' assets, named by URI so the OpenLineage provider maps them without extra work."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def snapshots_asset_uri() -> str:
    """The snapshot store, as a file URI (OpenLineage namespace ``file``), or with the home on
    object storage its URL there (``s3://bucket/prefix/snapshots``): the same asset whichever
    worker names it."""
    return _home_uri("snapshots")


def table_asset_uri(table: str) -> str:
    """A published table, as a URI under the warehouse (an asset name: the table itself is an
    Iceberg table, docs/warehouse.md); on object storage, its URL there."""
    return _home_uri(f"warehouse/{table}")


def _home_uri(relative: str) -> str:
    """The URL of ``relative`` under the home (``file:`` on a local disk), named without
    touching it (the DAGs are parsed by processes that never read the home)."""
    from topic_lineage import storage

    return storage.configured().url_of(relative)


def kafka_asset_uri(config: Mapping[str, Any], alias: str) -> str:
    """``kafka://<first bootstrap server>/<alias>``: the cluster a snapshot was read from."""
    first = str(config.get("bootstrap.servers", "unknown")).split(",")[0].strip()
    first = re.sub(r"^[A-Za-z_]+://", "", first) or "unknown"
    return f"kafka://{first}/{alias}"

