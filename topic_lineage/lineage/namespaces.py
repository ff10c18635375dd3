"""The OpenLineage dataset namespace of each cluster: ``kafka://<bootstrap host:port>``.

The OpenLineage naming spec names a Kafka topic by the ``host:port`` of a bootstrap server and
the topic's name. Snapshots carry the cluster's ID and alias, not how it was reached, so a live
capture records the first bootstrap server it used (:func:`remember`), one small file per
cluster under ``$TOPIC_LINEAGE_HOME/lineage/clusters/``. ``TOPIC_LINEAGE_OPENLINEAGE_KAFKA``
(JSON, ``{"<alias or cluster ID>": "host:port"}``) overrides it, and names clusters known only
from imports; without either, the namespace is ``kafka://<cluster alias>`` and a warning says so.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.errors import TopicLineageError

log = logging.getLogger("topic_lineage.lineage")

OVERRIDE_ENV = "TOPIC_LINEAGE_OPENLINEAGE_KAFKA"


def clusters_dir() -> Path:
    return t.home() / "lineage" / "clusters"


def first_server(bootstrap_servers: str) -> str:
    """``host:port`` of the first bootstrap server (a ``SASL_SSL://`` style prefix removed)."""
    first = str(bootstrap_servers).split(",")[0].strip()
    return re.sub(r"^[A-Za-z_]+://", "", first)


def remember(cluster_id: str, cluster_alias: str, bootstrap_servers: str) -> None:
    """Record how a capture reached ``cluster_id`` (a failure to record only costs the name)."""
    server = first_server(bootstrap_servers)
    if not server:
        return
    home = storage.home()
    path = clusters_dir() / (t.cluster_partition(cluster_id) + ".json")
    record = {"cluster_id": cluster_id, "cluster_alias": cluster_alias, "bootstrap": server}
    try:
        if json.loads(home.read_text(path) or "null") == record:
            return
        home.write_bytes(path, json.dumps(record, sort_keys=True))
    except (OSError, ValueError, TopicLineageError) as exc:
        log.warning("could not record the bootstrap server of cluster %s (%s): %s",
                    cluster_alias, exc, path)


class Namespaces:
    """``namespace(cluster_id, alias)``: the dataset namespace, decided once per cluster."""

    def __init__(self) -> None:
        self._override = _override()
        self._recorded: dict[str, str] = {}
        home, directory = storage.home(), clusters_dir()
        for name in sorted(home.listing(directory)):
            if not name.endswith(".json") or "/" in name:
                continue
            try:
                record = json.loads(home.read_text(directory / name) or "")
                self._recorded[record["cluster_id"]] = record["bootstrap"]
            except (OSError, ValueError, KeyError):
                log.warning("ignoring unreadable cluster record %s", directory / name)
        self._cache: dict[str, str] = {}

    def __call__(self, cluster_id: str, alias: str) -> str:
        found = self._cache.get(cluster_id)
        if found is None:
            server = (self._override.get(alias) or self._override.get(cluster_id)
                      or self._recorded.get(cluster_id))
            if server:
                found = f"kafka://{first_server(server)}"
            else:
                found = f"kafka://{alias}"
                log.warning("no bootstrap server known for cluster %s (%s): its datasets are "
                            "named under %s; set %s to name its host:port", alias, cluster_id,
                            found, OVERRIDE_ENV)
            self._cache[cluster_id] = found
        return found


def _override() -> dict[str, str]:
    text = os.environ.get(OVERRIDE_ENV, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise TopicLineageError(f"{OVERRIDE_ENV} is not JSON ({exc}); expected "
                                '{"<alias or cluster ID>": "host:port"}') from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise TopicLineageError(f'{OVERRIDE_ENV} must be a JSON object {{"<alias or cluster '
                                'ID>": "host:port"}}')
    return value
