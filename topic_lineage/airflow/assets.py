"""The DAGs' assets, named by URI so the OpenLineage provider maps them without extra work."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from topic_lineage import tables as t


def snapshots_asset_uri() -> str:
    """The snapshot store, as a file URI (OpenLineage namespace ``file``)."""
    return t.snapshots_dir().as_uri()


def table_asset_uri(table: str) -> str:
    """A published table, as a file URI under the warehouse (an asset name: the table itself is
    an Iceberg table, docs/warehouse.md)."""
    return (t.warehouse_dir() / table).as_uri()


def kafka_asset_uri(config: Mapping[str, Any], alias: str) -> str:
    """``kafka://<first bootstrap server>/<alias>``: the cluster a snapshot was read from."""
    first = str(config.get("bootstrap.servers", "unknown")).split(",")[0].strip()
    first = re.sub(r"^[A-Za-z_]+://", "", first) or "unknown"
    return f"kafka://{first}/{alias}"

