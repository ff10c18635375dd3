"""One change (:mod:`topic_lineage.lineage.changes`) as one OpenLineage ``RunEvent``.

Every event is a ``COMPLETE`` run event: OpenMetadata, Google Dataplex and Amazon DataZone
process nothing else, and Marquez and DataHub take them too (docs/lineage.md). Its run ID is a
UUIDv7 derived from the change's key and time (``generate_static_uuid``), so an event sent twice
(a receiver that got it before a failure was noticed) is the same run to the receiver.

- a topic change is a run of job ``<alias>.topic_incarnations`` (namespace
  ``OPENLINEAGE_NAMESPACE``, default ``topic-lineage``) with the topic as its output, carrying
  the ``lifecycleStateChange``, ``symlinks`` and ``topicLineage_incarnation`` facets;
- a group reading an incarnation is a run of job ``<alias>.consumer_group.<group>`` with the topic
  as its input (the same two identifying facets) and, when its position was carried (R9), the
  input facet ``topicLineage_carriedPosition``.

Imports the ``openlineage-python`` client (only when an event is made).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from importlib import resources

import attr
from openlineage.client.event_v2 import (
    InputDataset,
    Job,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
)
from openlineage.client.facet_v2 import (
    DatasetFacet,
    InputDatasetFacet,
    lifecycle_state_change_dataset,
    symlinks_dataset,
)
from openlineage.client.uuid import generate_static_uuid

from topic_lineage import tables as t
from topic_lineage.lineage.changes import DROP, READ, RENAME, Change

NAMESPACE_ENV = "OPENLINEAGE_NAMESPACE"
DEFAULT_JOB_NAMESPACE = "topic-lineage"
PRODUCER = "https://topic-lineage.dev/producer/topic-lineage"
SCHEMA_BASE = "https://topic-lineage.dev/spec/facets/1-0-0/"
INCARNATION_FACET = "topicLineage_incarnation"
CARRIED_FACET = "topicLineage_carriedPosition"
SYMLINK_TYPE = "KAFKA_TOPIC_ID"
"""The symlink identifier of an incarnation: namespace ``kafka-cluster://<cluster ID>``, name
the canonical topic ID (what a receiver can tell incarnations apart by)."""


def schema_path(name: str):
    """A JSON Schema shipped in the package (``schemas/<name>``)."""
    return resources.files("topic_lineage.lineage") / "schemas" / name


@attr.define
class TopicIncarnationDatasetFacet(DatasetFacet):
    """topic-lineage's dataset facet: which incarnation of the topic, and which version of it."""

    clusterId: str
    incarnationKey: str
    version: int
    changeType: str
    validFrom: str
    clusterAlias: str | None = attr.field(default=None)
    topicId: str | None = attr.field(default=None)
    topicUuid: str | None = attr.field(default=None)
    validTo: str | None = attr.field(default=None)
    deletedAt: str | None = attr.field(default=None)
    partitions: int | None = attr.field(default=None)
    replicationFactor: int | None = attr.field(default=None)
    isInternal: bool | None = attr.field(default=None)
    tableVersion: str | None = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_BASE + "TopicIncarnationDatasetFacet.json#/$defs/TopicIncarnationDatasetFacet"


@attr.define
class CarriedPositionInputDatasetFacet(InputDatasetFacet):
    """A consumer group's position on this incarnation was carried from an earlier one (R9)."""

    groupId: str
    clusterId: str
    incarnationKey: str
    maxCommittedOffset: int
    topicId: str | None = attr.field(default=None)
    firstSeenAt: str | None = attr.field(default=None)
    lastSeenAt: str | None = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return (SCHEMA_BASE
                + "CarriedPositionInputDatasetFacet.json#/$defs/CarriedPositionInputDatasetFacet")


def iso(value: datetime | None) -> str | None:
    """An instant as OpenLineage writes it (ISO 8601 with the offset, UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


def job_namespace() -> str:
    return os.environ.get(NAMESPACE_ENV, "").strip() or DEFAULT_JOB_NAMESPACE


def _identifying_facets(change: Change, table_version: str) -> dict:
    row = change.row
    kind = change.kind if change.kind != READ else None
    facets: dict = {
        INCARNATION_FACET: TopicIncarnationDatasetFacet(
            clusterId=row[t.CLUSTER_ID], clusterAlias=row[t.CLUSTER_ALIAS],
            incarnationKey=row[t.INCARNATION_KEY], version=int(row[t.VERSION]),
            changeType="deleted" if kind == DROP else row[t.CHANGE_TYPE],
            validFrom=iso(row[t.VALID_FROM]), validTo=iso(row[t.VALID_TO]),
            deletedAt=iso(row[t.DELETED_AT]), topicId=row[t.TOPIC_ID], topicUuid=row[t.TOPIC_UUID],
            partitions=row[t.PARTITION_COUNT], replicationFactor=row[t.REPLICATION_FACTOR],
            isInternal=row[t.IS_INTERNAL], tableVersion=table_version, producer=PRODUCER,
        ),
    }
    if row[t.TOPIC_ID]:
        facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(
            identifiers=[symlinks_dataset.Identifier(
                namespace=f"kafka-cluster://{row[t.CLUSTER_ID]}", name=row[t.TOPIC_ID],
                type=SYMLINK_TYPE,
            )],
            producer=PRODUCER,
        )
    if kind is not None:
        previous = None
        if kind == RENAME and change.previous_name:
            previous = lifecycle_state_change_dataset.PreviousIdentifier(
                name=change.previous_name, namespace=change.namespace)
        facets["lifecycleStateChange"] = lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet(
            lifecycleStateChange=lifecycle_state_change_dataset.LifecycleStateChange(kind),
            previousIdentifier=previous, producer=PRODUCER,
        )
    return facets


def to_event(change: Change, table_version: str, namespace: str | None = None) -> RunEvent:
    """The ``COMPLETE`` run event of one change (``namespace``: the jobs' namespace)."""
    namespace = namespace or job_namespace()
    row = change.row
    alias = row[t.CLUSTER_ALIAS]
    facets = _identifying_facets(change, table_version)
    if change.kind == READ:
        group = change.group
        input_facets = {}
        if group[t.CARRIED_OFFSET]:
            input_facets[CARRIED_FACET] = CarriedPositionInputDatasetFacet(
                groupId=group[t.GROUP_ID], clusterId=group[t.CLUSTER_ID],
                incarnationKey=group[t.INCARNATION_KEY],
                maxCommittedOffset=int(group[t.MAX_COMMITTED_OFFSET]), topicId=group[t.TOPIC_ID],
                firstSeenAt=iso(group[t.FIRST_SEEN_AT]), lastSeenAt=iso(group[t.LAST_SEEN_AT]),
                producer=PRODUCER,
            )
        job = Job(namespace=namespace, name=f"{alias}.consumer_group.{group[t.GROUP_ID]}")
        inputs = [InputDataset(namespace=change.namespace, name=change.name, facets=facets,
                               inputFacets=input_facets)]
        outputs = []
    else:
        job = Job(namespace=namespace, name=f"{alias}.topic_incarnations")
        inputs = []
        outputs = [OutputDataset(namespace=change.namespace, name=change.name, facets=facets)]
    return RunEvent(
        eventType=RunState.COMPLETE,
        eventTime=iso(change.at),
        run=Run(runId=str(generate_static_uuid(change.at, change.key.encode()))),
        job=job, inputs=inputs, outputs=outputs, producer=PRODUCER,
    )
