"""OpenLineage events about topic incarnations and consumer lineage (issue #41, docs/lineage.md).

Lineage and catalog tools (Marquez, DataHub, OpenMetadata, Dataplex, DataZone) key a Kafka
topic by its name, so a deleted and re-created topic is one dataset to them. After each publish
topic-lineage tells them which incarnation is which, as an OpenLineage producer:

- :mod:`~topic_lineage.lineage.changes`: the published tables as a list of changes (created,
  altered, renamed, dropped incarnations; consumer groups reading one), each with its own key,
  its event time and the dataset it is about (pure, no I/O);
- :mod:`~topic_lineage.lineage.events`: one change as an OpenLineage ``RunEvent`` (the
  ``openlineage-python`` client's classes, our two facets);
- :mod:`~topic_lineage.lineage.ledger`: what was emitted, beside the versions
  (``warehouse/openlineage/``), written atomically after each batch;
- :mod:`~topic_lineage.lineage.emit`: the client and its transport from the standard
  configuration, and the emission of what the ledger lacks, in order, once;
- :mod:`~topic_lineage.lineage.ordered_http`: an ``http``/``async_http`` transport's settings
  sent with an acknowledgement per event, in order, on kept-alive connections.

The dataset namespaces (``kafka://host:port`` of the cluster's connection) come from
:mod:`~topic_lineage.lineage.namespaces`, which a live capture records.
"""
