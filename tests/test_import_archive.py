"""An archive location (files in any supported format) feeds backfills of past intervals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import kafka_builders as kb
import pytest
from test_import_kafka_topics import MODERN, PRE_ID
from test_import_kraft_log import CLUSTER, T0, at, history

from topic_lineage import store
from topic_lineage.importers.archive import (
    ArchiveError,
    classify,
    ingest_between,
    snapshots_between,
)
from topic_lineage.importers.kraft.model import MetadataLogError
from topic_lineage.snapshot import Snapshot, TopicObservation, write_jsonl

OTHER = "other-cluster"
DAY = timedelta(days=1)
NOV_1 = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def archive(tmp_path):
    root = tmp_path / "archive"
    kraft = root / "prod" / "kraft" / "__cluster_metadata-0"
    kraft.mkdir(parents=True)
    (root / "prod" / "kraft" / "meta.properties").write_text(f"cluster.id={CLUSTER}\n")
    (kraft / kb.segment_name(0)).write_bytes(kb.encode_log(history()))
    (kraft / "00000000000000000000.index").write_bytes(bytes(8))
    describes = root / "other" / "describe"
    describes.mkdir(parents=True)
    for day, text in ((1, PRE_ID), (2, MODERN), (3, MODERN)):
        (describes / f"topics-2026-11-0{day}T00-00-00Z.txt").write_text(
            f"# cluster_id: {OTHER}\n" + text)
    write_jsonl([Snapshot(OTHER, OTHER, NOV_1 + timedelta(hours=12), True,
                          (TopicObservation("orders", None, 3, 2, False),))],
                root / "other" / "extra.jsonl")
    (root / "README.md").write_text("archived topic history\n")
    (root / "prod" / "cluster.properties").write_text("# the production cluster\ncluster.alias=prod-eu\n")
    return root


def test_files_are_classified_by_name_and_first_line(archive):
    kinds = {p.name: classify(p) for p in archive.rglob("*") if p.is_file()}
    assert kinds["00000000000000000000.log"] == "kraft-log"
    assert kinds["topics-2026-11-02T00-00-00Z.txt"] == "kafka-topics"
    assert kinds["extra.jsonl"] == "jsonl"
    assert kinds["README.md"] is None and kinds["meta.properties"] is None
    assert kinds["00000000000000000000.index"] is None
    dump = archive / "dump.log"
    dump.write_text(kb.dump_text(history(), file_name=kb.segment_name(0)))
    assert classify(dump) == "kraft-dump"


def test_snapshots_between_returns_the_interval_only(archive):
    start = at(T0 + 2000)
    got = snapshots_between(archive, start, NOV_1 + 2 * DAY)
    assert [(s.cluster_id, s.captured_at) for s in got] == [
        (CLUSTER, at(T0 + 2000)), (CLUSTER, at(T0 + 4000)), (CLUSTER, at(T0 + 5000)),
        (CLUSTER, at(T0 + 6000)),
        (OTHER, NOV_1 + timedelta(hours=12)), (OTHER, NOV_1 + DAY),
    ]  # T0 is NOV_1: the capture of Nov 1 00:00 is before the start
    assert all(s.authoritative for s in got if s.cluster_id == CLUSTER)
    # cluster.properties names the alias of the metadata log below it; other files keep theirs
    assert {(s.cluster_id, s.cluster_alias) for s in got} == {(CLUSTER, "prod-eu"),
                                                              (OTHER, OTHER)}


def test_cluster_properties_override_the_arguments(archive):
    (archive / "other" / "cluster.properties").write_text("cluster.alias=legacy\n")
    got = snapshots_between(archive, NOV_1, NOV_1 + 3 * DAY, cluster_alias="ignored")
    aliases = {(s.cluster_id, s.cluster_alias) for s in got}
    # the JSONL file carries its own alias; the captures take the nearest cluster.properties
    assert aliases == {(CLUSTER, "prod-eu"), (OTHER, "legacy"), (OTHER, OTHER)}
    (archive / "other" / "cluster.properties").write_text("alias legacy\n")
    with pytest.raises(ArchiveError, match=r"cluster.properties:1: expected cluster.id"):
        snapshots_between(archive, NOV_1, NOV_1 + 3 * DAY)


def test_ingest_between_stores_with_each_format_as_source(tl_home, archive):
    result = ingest_between(archive, NOV_1 + DAY, NOV_1 + 3 * DAY)
    assert (result.stored, result.unchanged) == (2, 0)
    runs = store.read_runs()
    assert [(r["cluster_id"], r["captured_at"], r["source"]) for r in runs] == [
        (OTHER, NOV_1 + DAY, "import:kafka-topics"),
        (OTHER, NOV_1 + 2 * DAY, "import:kafka-topics"),
    ]
    again = ingest_between(archive, NOV_1, NOV_1 + 3 * DAY)
    assert (again.stored, again.unchanged) == (7, 2)
    assert {r["source"] for r in store.read_runs()} == {
        "import:kraft-log", "import:kafka-topics", "import:jsonl"}


def test_a_damaged_archive_file_fails_the_backfill_and_stores_nothing(tl_home, archive):
    segment = next(archive.rglob("*.log"))
    segment.write_bytes(segment.read_bytes()[:-3])
    with pytest.raises(MetadataLogError, match="truncated"):
        ingest_between(archive, NOV_1, NOV_1 + 3 * DAY)
    assert store.read_runs() == []


def test_bad_intervals_and_locations(tmp_path):
    with pytest.raises(ArchiveError, match="not a directory"):
        snapshots_between(tmp_path / "missing", NOV_1, NOV_1 + DAY)
    with pytest.raises(ArchiveError, match="no time zone"):
        snapshots_between(tmp_path, datetime(2026, 11, 1), NOV_1 + DAY)
    with pytest.raises(ArchiveError, match="empty interval"):
        snapshots_between(tmp_path, NOV_1, NOV_1)


def test_a_real_metadata_log_dir_in_an_archive(tmp_path):
    """Issue 13: a copied metadata.log.dir (meta.properties, bootstrap.checkpoint,
    __cluster_metadata-0/) is one replay; bootstrap.checkpoint holds no topics and is ignored.
    Files are symlinks to ../shared/real-kafka (read in place). A capture saved with 2>&1 is
    recognised past its log lines, and is complete only if it says so."""
    volume = kb.real_kafka("kraft-binary", "ldi-poc-kafka-3.7.0")
    root = tmp_path / "archive" / "ldi"
    (root / "__cluster_metadata-0").mkdir(parents=True)
    for name in ("meta.properties", "bootstrap.checkpoint",
                 "__cluster_metadata-0/00000000000000000000.log"):
        (root / name).symlink_to(volume / name)
    assert classify(root / "bootstrap.checkpoint") is None
    capture = tmp_path / "archive" / "other" / "2026-01-31T00-00-00Z.txt"
    capture.parent.mkdir()
    capture.write_text(f"# cluster_id: {OTHER}\n[2025-01-06 08:18:26,460] WARN [AdminClient "
                       "clientId=adminclient-1] slow (org.apache.kafka.clients.NetworkClient)\n"
                       + MODERN)
    assert classify(capture) == "kafka-topics"
    got = snapshots_between(tmp_path / "archive", datetime(2026, 1, 1, tzinfo=UTC),
                            datetime(2026, 2, 1, tzinfo=UTC))
    real = [s for s in got if s.cluster_id == kb.REAL_370_CLUSTER]
    assert [len(s.topics) for s in real] == [1, 2, 3, 4, 5]
    assert {t.name: t.topic_id for t in real[-1].topics} == {
        name: topic for name, (topic, *_rest) in kb.REAL_370_TOPICS.items()}
    [other] = [s for s in got if s.cluster_id == OTHER]
    assert not other.complete
