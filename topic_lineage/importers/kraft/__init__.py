"""Topic history from the KRaft metadata log (``__cluster_metadata``).

Two inputs, one replay:

* the binary files of the metadata log directory: segments (``<base offset>.log``) and
  snapshots (``<end offset>-<epoch>.checkpoint``), decoded here from Kafka's on-disk format;
* the text that ``kafka-dump-log.sh --cluster-metadata-decoder --files <file>`` prints for those
  files, with or without ``--skip-record-metadata``.

Both are decoded into :class:`LogSource` objects (batches of the topic changes we need) and
replayed by :func:`replay` into one complete, authoritative :class:`Snapshot` per change.

Where the facts come from (apache/kafka):

* record batch v2 framing, attributes bits, CRC-32C coverage:
  ``clients/.../common/record/DefaultRecordBatch.java``; record framing (varints, key, value,
  headers): ``DefaultRecord.java``; varint/zig-zag: ``common/utils/ByteUtils.java``;
* control records (key = version int16 + type int16; SNAPSHOT_HEADER = 3):
  ``ControlRecordType.java``, ``ControlRecordUtils.java``, ``SnapshotHeaderRecord.json``;
* metadata record framing (unsigned varint frame version 1, api key, version, then the body):
  ``server-common/.../serialization/AbstractApiMessageSerde.java``;
* record bodies (flexible versions: compact strings/arrays, tagged fields):
  ``metadata/src/main/resources/common/metadata/TopicRecord.json`` (api key 2),
  ``PartitionRecord.json`` (3), ``PartitionChangeRecord.json`` (5), ``RemoveTopicRecord.json`` (9);
* metadata transactions (KIP-866): ``BeginTransactionRecord.json`` (23),
  ``EndTransactionRecord.json`` (24), ``AbortTransactionRecord.json`` (25), replayed as
  ``metadata/.../image/loader/MetadataBatchLoader.java`` does;
* a snapshot ends with ``SnapshotFooterRecord`` (control type 4) in a control batch of its own:
  ``ControlRecordType.java``, ``raft/.../snapshot/RecordsSnapshotWriter.java``;
* file names: ``raft/.../snapshot/Snapshots.java`` (20-digit offset, 10-digit epoch);
* text output: ``core/src/main/scala/kafka/tools/DumpLogSegments.scala`` (``dumpLog``: one
  line per record, empty for control records under ``--skip-record-metadata``; the header
  ``Log starting offset: N``, ``Starting offset: N`` before 3.3; ``printBatchLevel`` with
  ``count:``; ``ClusterMetadataLogMessageParser``);
* replication factor during a reassignment (replicas minus adding replicas) and internal topic
  names: ``tools/.../TopicCommand.java``, ``clients/.../common/internals/Topic.java``.
"""

from __future__ import annotations

from pathlib import Path

from topic_lineage.importers.kraft.dump_text import read_dump_text
from topic_lineage.importers.kraft.identity import find_meta_properties, read_meta_properties
from topic_lineage.importers.kraft.model import (
    BOOTSTRAP_CHECKPOINT,
    INTERNAL_TOPICS,
    METADATA_PARTITION_DIR,
    METADATA_TOPIC,
    LogBatch,
    LogSource,
    MetadataLogError,
)
from topic_lineage.importers.kraft.records import (
    SUPPORTED_CODECS,
    expand_paths,
    read_batches,
    read_binary_file,
)
from topic_lineage.importers.kraft.replay import replay
from topic_lineage.snapshot import Snapshot

__all__ = [
    "BOOTSTRAP_CHECKPOINT", "INTERNAL_TOPICS", "METADATA_PARTITION_DIR", "METADATA_TOPIC",
    "SUPPORTED_CODECS", "LogBatch", "LogSource", "MetadataLogError", "expand_paths",
    "find_meta_properties", "load", "read_batches", "read_binary_file", "read_dump_text",
    "read_meta_properties", "replay",
]


def load(paths: list[Path], *, text: bool, cluster_id: str, cluster_alias: str,
         notes: list[str] | None = None) -> list[Snapshot]:
    """Decode and replay metadata log files (binary, or kafka-dump-log text when ``text``)."""
    sources: list[LogSource] = []
    if text:
        for path in paths:
            if not path.is_file():
                raise MetadataLogError("no such file", location=str(path))
            sources.extend(read_dump_text(path))
    else:
        sources = [read_binary_file(path) for path in expand_paths(paths)]
    if not any(src.batches for src in sources if src.kind != "bootstrap"):
        raise MetadataLogError("no record batches found in " + ", ".join(map(str, paths)))
    return replay(sources, cluster_id, cluster_alias, notes)
