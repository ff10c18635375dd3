"""Configuration of the topic-lineage DAGs: names, config values, the cluster Variable, connections.

Configuration, in one place each:

* the clusters to snapshot: the Airflow Variable ``topic_lineage_clusters``, a JSON list of
  ``{"alias": ..., "conn_id": ...}``; default ``[{"alias": "default", "conn_id": "kafka_default"}]``.
  Each ``conn_id`` is an Airflow connection of type ``kafka`` whose extra is the librdkafka config.
* an archive of old snapshots for backfills: the Airflow Variable ``topic_lineage_archive_dir``.
* schedules and timeouts: the ``[topic_lineage]`` section of the Airflow config (or the
  ``AIRFLOW__TOPIC_LINEAGE__<OPTION>`` environment variables), see :data:`CONFIG_DEFAULTS`.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topic_lineage.errors import TopicLineageError

# One logger for every task of the package, under the name task logs and log configurations
# have always shown (the module it was named after is now this package).
log = logging.getLogger("topic_lineage.airflow")

CLUSTERS_VARIABLE = "topic_lineage_clusters"
ARCHIVE_VARIABLE = "topic_lineage_archive_dir"
DEFAULT_KAFKA_CONN_ID = "kafka_default"
DEFAULT_CLUSTERS = ({"alias": "default", "conn_id": DEFAULT_KAFKA_CONN_ID},)
SPARK_CONN_ID = "spark_default"
PUBLISH_POOL = "topic_lineage_publish"
"""A pool with one slot: scheduled, manual and backfill runs never publish at the same time."""
BUILD_POOL = "topic_lineage_build"
"""A pool with one slot for the Spark build (the build holds an exclusive lock anyway)."""

SNAPSHOT_DAG_ID = "kafka_topic_snapshot"
INCARNATIONS_DAG_ID = "topic_incarnations"
OWNER = "topic-lineage"
TAGS = ["topic-lineage", "kafka"]

CONFIG_SECTION = "topic_lineage"
CONFIG_DEFAULTS = {
    # cron of the kafka_topic_snapshot DAG (its data interval is the capture window)
    "snapshot_schedule": "*/15 * * * *",
    # cron of the time-based runs of topic_incarnations (it also runs on every snapshot event)
    "build_schedule": "@daily",
    # a snapshot run whose interval ended longer ago than this is "late" and does not capture;
    # empty = one snapshot interval, at least 5 minutes
    "late_after_seconds": "",
    # bound on one capture of one cluster (passed to capture_snapshot)
    "capture_timeout_seconds": "120",
    # also record consumer groups' committed offsets (contract R8-R10); "false" = topics only
    "capture_groups": "true",
}


class OrchestrationError(TopicLineageError):
    """The Airflow configuration of topic-lineage is wrong; the message says how to fix it."""


# --- configuration -----------------------------------------------------------------------------
def config_value(option: str) -> str:
    """``[topic_lineage] <option>`` from the Airflow config, or its documented default."""
    from airflow.sdk import conf

    return conf.get(CONFIG_SECTION, option, fallback=CONFIG_DEFAULTS[option])


def capture_groups_enabled() -> bool:
    """``[topic_lineage] capture_groups``: whether live captures record consumer groups."""
    value = config_value("capture_groups").strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise OrchestrationError(
            f"[{CONFIG_SECTION}] capture_groups is {value!r}; use true or false"
        )
    return value in ("true", "1", "yes", "on")


def snapshot_cron() -> str:
    return config_value("snapshot_schedule")


def build_cron() -> str:
    return config_value("build_schedule")


@dataclass(frozen=True)
class ClusterSpec:
    """One configured cluster: the alias recorded with its snapshots, and its Kafka connection."""

    alias: str
    conn_id: str

    def to_dict(self) -> dict[str, str]:
        return {"alias": self.alias, "conn_id": self.conn_id}


_ALIAS_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def parse_clusters(
    raw: Any, *, default_conn_id: str = DEFAULT_KAFKA_CONN_ID, where: str | None = None
) -> list[ClusterSpec]:
    """The cluster list from the Variable's value (JSON text or a decoded list); ``None`` = default.

    Refuses anything ambiguous (duplicate aliases, missing fields) with a message that names the
    Variable, because a silently dropped cluster would look like a cluster with no topics.
    ``default_conn_id`` is the connection of the default cluster and of items without one.
    """
    where = where or f"Airflow Variable {CLUSTERS_VARIABLE!r}"
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return [ClusterSpec(c["alias"], default_conn_id) for c in DEFAULT_CLUSTERS]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise OrchestrationError(
                f"{where} is not JSON ({exc.msg} at column {exc.colno}); expected e.g. "
                '[{"alias": "prod-eu", "conn_id": "kafka_prod_eu"}]'
            ) from None
    if not isinstance(raw, list) or not raw:
        raise OrchestrationError(f"{where} must be a non-empty JSON list of {{alias, conn_id}}")
    clusters: list[ClusterSpec] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) - {"alias", "conn_id"}:
            raise OrchestrationError(
                f"{where}: item {index} must be an object with keys alias and conn_id, got "
                f"{json.dumps(item)}"
            )
        alias = item.get("alias")
        if not isinstance(alias, str) or not _ALIAS_RE.match(alias):
            raise OrchestrationError(
                f"{where}: item {index} has no valid alias (1-100 characters of A-Z a-z 0-9 . _ -)"
            )
        conn_id = item.get("conn_id", default_conn_id)
        if not isinstance(conn_id, str) or not conn_id.strip():
            raise OrchestrationError(f"{where}: item {index} ({alias}) has an empty conn_id")
        clusters.append(ClusterSpec(alias, conn_id))
    aliases = [c.alias for c in clusters]
    duplicates = sorted({a for a in aliases if aliases.count(a) > 1})
    if duplicates:
        raise OrchestrationError(f"{where}: alias(es) {', '.join(duplicates)} appear more than once")
    return clusters


def resolve_clusters(
    clusters: Sequence[ClusterSpec] | None = None, *, default_conn_id: str = DEFAULT_KAFKA_CONN_ID
) -> list[dict[str, str]]:
    """The configured clusters as plain dicts (the values the capture task is mapped over): the
    given ones (option ``clusters`` of :func:`topic_lineage.airflow.topic_lineage_dags`), else
    the Variable's, read now."""
    if clusters is None:
        from airflow.sdk import Variable

        raw = Variable.get(CLUSTERS_VARIABLE, default=None)
        clusters = parse_clusters(raw, default_conn_id=default_conn_id)
    log.info("snapshotting %d cluster(s): %s", len(clusters), ", ".join(c.alias for c in clusters))
    return [c.to_dict() for c in clusters]


def kafka_config(conn_id: str) -> dict[str, Any]:
    """The librdkafka config of a Kafka connection, built exactly as the Kafka provider builds it
    (its extra, plus allow-listed callbacks and managed-cloud authentication)."""
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

    try:
        return KafkaBaseHook(kafka_config_id=conn_id)._build_config()
    except ValueError as exc:
        raise OrchestrationError(
            f"Airflow connection {conn_id!r}: {exc}; set its extra to the librdkafka config, e.g. "
            '{"bootstrap.servers": "broker:9092"}'
        ) from None



# --- options of the DAG factory ----------------------------------------------------------------
@dataclass(frozen=True)
class DagOptions:
    """The options of :func:`topic_lineage.airflow.topic_lineage_dags`; ``None`` = today's
    behaviour (the ``[topic_lineage]`` config, the Variables and connections, read where and when
    they always were)."""

    snapshot_schedule: str | None = None
    """cron of ``kafka_topic_snapshot``; default ``[topic_lineage] snapshot_schedule``."""
    build_schedule: str | None = None
    """cron of ``topic_incarnations``' time-based runs; default ``[topic_lineage] build_schedule``."""
    clusters: tuple[ClusterSpec, ...] | None = None
    """the clusters to snapshot; default the Variable ``topic_lineage_clusters`` at run time."""
    kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID
    """connection of the default cluster and of cluster items without ``conn_id``."""
    spark_conn_id: str = SPARK_CONN_ID
    """the Spark connection of the ``build`` task's spark-submit."""
    spark_master: str | None = None
    """the master of that spark-submit instead of the connection's host (e.g. ``local[4]``)."""
    spark_connect_url: str | None = None
    """build on this Spark Connect server (``sc://host:port``) instead of spark-submit."""
    archive_dir: str | None = None
    """archive of old snapshots for backfills; default the Variable ``topic_lineage_archive_dir``."""
    home: str | None = None
    """``TOPIC_LINEAGE_HOME`` of the DAGs' tasks and assets; default the environment's."""

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any]) -> DagOptions:
        """Validated options; an unknown name raises ``TypeError`` naming it."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(
                f"topic_lineage_dags() got unknown option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        values = {k: v for k, v in options.items() if v is not None}
        for name in ("snapshot_schedule", "build_schedule", "kafka_conn_id", "spark_conn_id",
                     "spark_master", "spark_connect_url"):
            if name in values and (not isinstance(values[name], str) or not values[name].strip()):
                raise TypeError(f"topic_lineage_dags(): {name} must be a non-empty string")
        for name in ("archive_dir", "home"):
            if name in values:
                if not isinstance(values[name], str | os.PathLike):
                    raise TypeError(f"topic_lineage_dags(): {name} must be a path")
                values[name] = str(Path(values[name]).expanduser())
        if "clusters" in values:
            raw = values["clusters"]
            if isinstance(raw, str) or not isinstance(raw, Sequence):
                raise TypeError("topic_lineage_dags(): clusters must be a list of {alias, conn_id}")
            raw = [c.to_dict() if isinstance(c, ClusterSpec) else c for c in raw]
            values["clusters"] = tuple(parse_clusters(
                raw, default_conn_id=values.get("kafka_conn_id", DEFAULT_KAFKA_CONN_ID),
                where="topic_lineage_dags(clusters=...)",
            ))
        return cls(**values)

    def environment(self) -> dict[str, str]:
        """The environment variables these options set for a task (and its spark-submit)."""
        from topic_lineage.local.spark_server import REMOTE_ENV
        from topic_lineage.tables import HOME_ENV

        env = {}
        if self.home:
            env[HOME_ENV] = self.home
        if self.spark_connect_url:
            env[REMOTE_ENV] = self.spark_connect_url
        return env


@contextmanager
def options_environment(options: DagOptions | None) -> Iterator[None]:
    """Set :meth:`DagOptions.environment` in ``os.environ`` for the duration (a task's body, or
    the parsing of asset URIs), then restore it."""
    env = options.environment() if options is not None else {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
