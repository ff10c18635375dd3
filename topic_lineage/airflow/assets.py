"""The DAGs' assets, named by URI so the OpenLineage provider maps them without extra work."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from topic_lineage import tables as t


def snapshots_asset_uri() -> str:
    """The snapshot store, as a file URI (OpenLineage namespace ``file``), or with the home on
    object storage its URL there (``s3://bucket/prefix/snapshots``): the same asset whichever
    worker names it."""
    return _home_uri("snapshots", t.snapshots_dir)


def table_asset_uri(table: str) -> str:
    """A published table, as a URI under the warehouse (an asset name: the table itself is an
    Iceberg table, docs/warehouse.md); on object storage, its URL there."""
    return _home_uri(f"warehouse/{table}", lambda: t.warehouse_dir() / table)


def _home_uri(relative: str, local: Callable[[], Path]) -> str:
    """The URL of ``relative`` under an object-store home, named without a working copy (the
    DAGs are parsed by processes that never touch the store); else the ``file:`` URI of
    ``local()``."""
    from topic_lineage import location

    store = location.home_store()
    return store.url_of(relative) if store is not None else local().as_uri()


def kafka_asset_uri(config: Mapping[str, Any], alias: str) -> str:
    """``kafka://<first bootstrap server>/<alias>``: the cluster a snapshot was read from."""
    first = str(config.get("bootstrap.servers", "unknown")).split(",")[0].strip()
    first = re.sub(r"^[A-Za-z_]+://", "", first) or "unknown"
    return f"kafka://{first}/{alias}"

