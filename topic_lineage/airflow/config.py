"""Configuration of the topic-lineage DAGs: names, config values, the cluster Variable, connections.

Configuration, in one place each:

* the clusters to snapshot: the Airflow Variable ``topic_lineage_clusters``, a JSON list of
  ``{"alias": ..., "conn_id": ...}``; default ``[{"alias": "default", "conn_id": "kafka_default"}]``.
  Each ``conn_id`` is an Airflow connection of type ``kafka`` whose extra is the librdkafka config.
* an archive of old snapshots for backfills: the Airflow Variable ``topic_lineage_archive_dir``.
* schedules and timeouts: the ``[topic_lineage]`` section of the Airflow config (or the
  ``AIRFLOW__TOPIC_LINEAGE__<OPTION>`` environment variables), see :data:`CONFIG_DEFAULTS`.
* the object store's credentials, with the home on S3: the Airflow connection named by
  ``[topic_lineage] object_store_conn_id`` (or the DAG option), type ``aws``; none by default,
  the worker's environment or role then (:func:`object_store_environment`).

Every task with the home on object storage works in a working copy of its own, in its
``TMPDIR``, removed when it ends (:func:`task_environment`).
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

from topic_lineage import location
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
    # the Airflow connection (type aws) whose credentials and endpoint the tasks use for a home
    # on S3; empty = none (the worker's environment or role, as any AWS client finds them)
    "object_store_conn_id": "",
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
    """``TOPIC_LINEAGE_HOME`` of the DAGs' tasks and assets (a path or a URL such as
    ``s3://bucket/prefix``); default the environment's."""
    object_store_conn_id: str | None = None
    """the Airflow connection (type ``aws``) of an S3 home's credentials, endpoint and region;
    default ``[topic_lineage] object_store_conn_id`` (empty: none, the worker's environment or
    role)."""

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
                     "spark_master", "spark_connect_url", "object_store_conn_id"):
            if name in values and (not isinstance(values[name], str) or not values[name].strip()):
                raise TypeError(f"topic_lineage_dags(): {name} must be a non-empty string")
        for name in ("archive_dir", "home"):
            if name in values and not isinstance(values[name], str | os.PathLike):
                raise TypeError(f"topic_lineage_dags(): {name} must be a path")
        if "archive_dir" in values:
            values["archive_dir"] = str(Path(values["archive_dir"]).expanduser())
        if "home" in values:
            values["home"] = _home_option(values["home"])
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


def _home_option(value: str | os.PathLike) -> str:
    """The ``home`` option as the tasks' ``TOPIC_LINEAGE_HOME``: a URL as given (checked with
    :func:`topic_lineage.location.parse`: one :class:`~topic_lineage.location.LocationError`
    line for one the project cannot use), a path with ``~`` expanded."""
    text = os.fspath(value).strip()
    if not location.is_url(text):
        return str(Path(text).expanduser())
    try:
        location.parse(text)
    except location.LocationError as exc:  # the option is the tasks' $TOPIC_LINEAGE_HOME
        raise location.LocationError(f"topic_lineage_dags(home=...): {exc}") from None
    return text


@contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in ``os.environ`` for the duration, then what was there restored."""
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


@contextmanager
def options_environment(options: DagOptions | None) -> Iterator[None]:
    """Set :meth:`DagOptions.environment` in ``os.environ`` for the duration (the parsing of
    asset URIs; a task's body goes through :func:`task_environment`), then restore it."""
    with _environ(options.environment() if options is not None else {}):
        yield


@contextmanager
def task_environment(options: DagOptions | None) -> Iterator[None]:
    """The environment of one task's body (and of the processes it starts: spark-submit
    inherits it), restored when it ends: the options' (:meth:`DagOptions.environment`); with
    the home on object storage, the store's connection (:func:`object_store_environment`) and a
    working copy of the task's own (:meth:`topic_lineage.storage.Home.private_working_copy`). Nothing goes on a command line."""
    from topic_lineage import storage

    with options_environment(options):
        home = storage.configured()
        conn_id = (options.object_store_conn_id if options is not None else None) or (
            config_value("object_store_conn_id").strip())
        env = object_store_environment(conn_id, home) if conn_id else {}
        with _environ(env), home.private_working_copy():
            yield


# --- the object store's connection ---------------------------------------------------------------
AWS_CONNECTION_EXTRAS = {
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "aws_session_token": "AWS_SESSION_TOKEN",
    "region_name": "AWS_REGION",
    "endpoint_url": "AWS_ENDPOINT_URL",
    "profile_name": "AWS_PROFILE",
}
"""The extra fields of an Amazon provider ``aws`` connection the tasks read, and the variable of
the AWS SDKs each one sets (the connection's login and password are the key id and secret key;
``service_config``'s ``s3.endpoint_url`` sets ``AWS_ENDPOINT_URL_S3``)."""
AWS_CONNECTION_REFUSED = ("role_arn", "assume_role_method", "assume_role_kwargs")
"""Extras asking the Amazon provider to assume a role: the tasks' S3 clients (pyarrow, botocore,
Spark's S3A) would not, and would silently act as another identity; refused in one line."""


def object_store_environment(conn_id: str, store) -> dict[str, str]:
    """The ``AWS_*`` variables the Airflow connection ``conn_id`` gives a task whose home is
    ``store`` (a :class:`topic_lineage.storage.Home`; S3 only: GCS and Azure take their
    credentials from the worker's environment, a local home needs none).

    Read the way the Amazon provider reads an ``aws`` connection (its provider need not be
    installed): login = access key id, password = secret access key, and the extras of
    :data:`AWS_CONNECTION_EXTRAS`. A missing connection, or one the tasks cannot honour, is one
    :class:`OrchestrationError` line naming it; no value of it is ever logged."""
    if store.connection_types is None:
        return {}
    if "aws" not in store.connection_types:
        raise OrchestrationError(
            f"object_store_conn_id {conn_id!r}: a connection gives credentials for an S3 home "
            f"only; {store.url} is on {store.kind}, whose credentials come from the worker's "
            "environment (docs/object-storage.md)")
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        connection = Connection.get(conn_id)
    except AirflowNotFoundException:
        raise OrchestrationError(
            f"Airflow connection {conn_id!r} (object_store_conn_id, the credentials of "
            f"{store.url}) does not exist; create it (type aws: login = access key id, "
            "password = secret access key, extra region_name / endpoint_url) or unset "
            "object_store_conn_id to use the worker's environment or role") from None
    extra = connection.extra_dejson
    if not isinstance(extra, dict):
        raise OrchestrationError(f"Airflow connection {conn_id!r}: its extra is not a JSON object")
    refused = sorted(set(extra) & set(AWS_CONNECTION_REFUSED))
    if refused:
        raise OrchestrationError(
            f"Airflow connection {conn_id!r}: {', '.join(refused)} (assuming a role) is not "
            "supported for the home on S3; give the worker the role, or put that role's "
            "credentials in the connection")
    env = {var: str(extra[key]) for key, var in AWS_CONNECTION_EXTRAS.items() if extra.get(key)}
    if connection.login:
        env["AWS_ACCESS_KEY_ID"] = connection.login
    if connection.password:
        env["AWS_SECRET_ACCESS_KEY"] = connection.password
    s3_config = (extra.get("service_config") or {}).get("s3") or {}
    if isinstance(s3_config, dict) and s3_config.get("endpoint_url"):
        env["AWS_ENDPOINT_URL_S3"] = str(s3_config["endpoint_url"])
    if "AWS_REGION" in env:
        env["AWS_DEFAULT_REGION"] = env["AWS_REGION"]
    if ("AWS_ACCESS_KEY_ID" in env) != ("AWS_SECRET_ACCESS_KEY" in env):
        raise OrchestrationError(
            f"Airflow connection {conn_id!r}: give both the access key id (login) and the "
            "secret access key (password), or neither")
    log.info("object store %s: credentials of Airflow connection %r (%s)", store.url, conn_id,
             ", ".join(sorted(env)) or "none: the worker's environment or role")
    return env


