"""Importing the KRaft metadata log: binary segments/checkpoints and kafka-dump-log text.

Inputs are built to Kafka's formats by tests/kafka_builders.py (sources cited there).
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta

import kafka_builders as kb
import pytest

from topic_lineage import store
from topic_lineage import topic_id as tid
from topic_lineage.cli import main
from topic_lineage.importers import ImportInputError, import_files, read_files
from topic_lineage.importers.crc32c import crc32c, crc32c_py
from topic_lineage.importers.kraft.model import MetadataLogError

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
ORDERS_1 = "b8tRS7h4TJ2Vt43Dp85v2A"
PAYMENTS = tid.canonical("0f5e2b1c-7d3a-4e8f-9a6b-1c2d3e4f5a6b")
ORDERS_2 = tid.canonical("9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d")
OFFSETS = tid.canonical("11111111-2222-4333-8444-555555555555")

T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z in epoch milliseconds


def at(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def history() -> list[kb.Batch]:
    """Creations, an ISR-only change, partition growth, a deletion and a re-creation."""
    return [
        kb.Batch(0, T0, [kb.Rec(kb.feature_level_record())]),
        kb.Batch(1, T0 + 1000, [kb.Rec(kb.topic_record("orders", ORDERS_1))]
                 + [kb.Rec(kb.partition_record(ORDERS_1, p, [1, 2, 3])) for p in range(3)]),
        kb.Batch(5, T0 + 2000, [kb.Rec(kb.topic_record("payments", PAYMENTS)),
                                kb.Rec(kb.partition_record(PAYMENTS, 0, [2, 3], version=1,
                                                           leader_recovery_state=0)),
                                kb.Rec(kb.topic_record("__consumer_offsets", OFFSETS)),
                                kb.Rec(kb.partition_record(OFFSETS, 0, [1]))]),
        kb.Batch(9, T0 + 2500, [kb.leader_change()], control=True),
        kb.Batch(10, T0 + 3000, [kb.Rec(kb.partition_change_record(ORDERS_1, 0, isr=[1, 2],
                                                                   leader=1))]),
        kb.Batch(11, T0 + 4000, [kb.Rec(kb.partition_record(ORDERS_1, 3, [3, 1, 2]))]),
        kb.Batch(12, T0 + 5000, [kb.Rec(kb.remove_topic_record(ORDERS_1))]),
        kb.Batch(13, T0 + 6000, [kb.Rec(kb.topic_record("orders", ORDERS_2))]
                 + [kb.Rec(kb.partition_record(ORDERS_2, p, [1])) for p in range(2)]),
    ]


def state(snapshot) -> dict[str, tuple]:
    return {t.name: (t.topic_id, t.partition_count, t.replication_factor, t.is_internal)
            for t in snapshot.topics}


PAYMENTS_ROW = (PAYMENTS, 1, 2, False)
OFFSETS_ROW = (OFFSETS, 1, 1, True)
EXPECTED = [
    (at(T0 + 1000), {"orders": (ORDERS_1, 3, 3, False)}),
    (at(T0 + 2000), {"orders": (ORDERS_1, 3, 3, False), "payments": PAYMENTS_ROW,
                     "__consumer_offsets": OFFSETS_ROW}),
    (at(T0 + 4000), {"orders": (ORDERS_1, 4, 3, False), "payments": PAYMENTS_ROW,
                     "__consumer_offsets": OFFSETS_ROW}),
    (at(T0 + 5000), {"payments": PAYMENTS_ROW, "__consumer_offsets": OFFSETS_ROW}),
    (at(T0 + 6000), {"orders": (ORDERS_2, 2, 1, False), "payments": PAYMENTS_ROW,
                     "__consumer_offsets": OFFSETS_ROW}),
]


@pytest.fixture
def log_dir(tmp_path):
    """A metadata log directory as a controller leaves it: meta.properties one level up."""
    root = tmp_path / "kraft"
    segment_dir = root / "__cluster_metadata-0"
    segment_dir.mkdir(parents=True)
    (root / "meta.properties").write_text(f"version=1\nnode.id=1\ncluster.id={CLUSTER}\n")
    (segment_dir / kb.segment_name(0)).write_bytes(kb.encode_log(history()))
    return segment_dir


def test_crc32c_matches_rfc3720_vectors():
    """The batch checksum is CRC-32C; RFC 3720 B.4 gives its test vectors."""
    for fn in (crc32c, crc32c_py):
        assert fn(b"123456789") == 0xE3069283
        assert fn(bytes(32)) == 0x8A9136AA
        assert fn(b"\xff" * 32) == 0x62A8AB43
        assert fn(bytes(range(32))) == 0x46DD794E


def test_binary_log_replays_into_exact_snapshots(log_dir):
    """One complete, authoritative snapshot per topic change, at the records' timestamps."""
    snapshots = read_files("kraft-log", [log_dir])
    assert [(s.captured_at, state(s)) for s in snapshots] == EXPECTED
    assert all(s.complete and s.authoritative for s in snapshots)
    assert {s.cluster_id for s in snapshots} == {CLUSTER}
    assert {s.cluster_alias for s in snapshots} == {CLUSTER}


@pytest.mark.parametrize("skip_metadata", [False, True], ids=["with-metadata", "skip-metadata"])
def test_dump_text_gives_the_same_snapshots_as_binary(tmp_path, skip_metadata):
    text = kb.dump_text(history(), file_name="/kraft/__cluster_metadata-0/" + kb.segment_name(0),
                        skip_record_metadata=skip_metadata)
    dump = tmp_path / "metadata-dump.txt"
    dump.write_text(text)
    snapshots = read_files("kraft-dump", [dump], cluster_id=CLUSTER, cluster_alias="prod")
    assert [(s.captured_at, state(s)) for s in snapshots] == EXPECTED
    assert {s.cluster_alias for s in snapshots} == {"prod"}


def test_import_stores_authoritative_snapshots_once(tl_home, log_dir):
    result = import_files("kraft-log", [log_dir])
    assert (result.stored, result.unchanged) == (5, 0)
    runs = store.read_runs(CLUSTER)
    assert [r["source"] for r in runs] == ["import:kraft-log"] * 5
    assert all(r["authoritative"] and r["complete"] for r in runs)
    assert [r["captured_at"] for r in runs] == [when for when, _ in EXPECTED]
    again = import_files("kraft-log", [log_dir])
    assert (again.stored, again.unchanged) == (0, 5)


@pytest.mark.parametrize("codec", [1, 4], ids=["gzip", "zstd"])
def test_segments_split_across_files_and_compressed_batches(tmp_path, codec):
    batches = history()
    batches[1].compression = batches[5].compression = codec
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches[:4]))
    (tmp_path / kb.segment_name(10)).write_bytes(kb.encode_log(batches[4:]))
    snapshots = read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)
    assert [(s.captured_at, state(s)) for s in snapshots] == EXPECTED


def test_checkpoint_anchors_a_log_that_no_longer_starts_at_zero(tmp_path):
    """Kafka deletes old segments after a snapshot: the .checkpoint is the starting state."""
    snap_ts = T0 + 4500
    checkpoint = [
        kb.Batch(0, T0 + 9999, [kb.snapshot_header(snap_ts)], control=True),
        kb.Batch(1, T0 + 9999, [kb.Rec(kb.topic_record("orders", ORDERS_1))]
                 + [kb.Rec(kb.partition_record(ORDERS_1, p, [1, 2, 3])) for p in range(4)]),
        kb.Batch(6, T0 + 9999, [kb.snapshot_footer()], control=True),
    ]
    (tmp_path / kb.checkpoint_name(12)).write_bytes(kb.encode_log(checkpoint))
    # the segment still holds offsets 10..13; the ones the snapshot covers must not apply twice
    (tmp_path / kb.segment_name(10)).write_bytes(kb.encode_log(history()[4:]))
    snapshots = read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)
    assert [(s.captured_at, state(s)) for s in snapshots] == [
        (at(snap_ts), {"orders": (ORDERS_1, 4, 3, False)}),
        (at(T0 + 5000), {}),
        (at(T0 + 6000), {"orders": (ORDERS_2, 2, 1, False)}),
    ]


def test_checkpoint_dump_text_uses_the_snapshot_header_time(tmp_path):
    checkpoint = [
        kb.Batch(0, T0 + 9999, [kb.snapshot_header(T0 + 4500)], control=True),
        kb.Batch(1, T0 + 9999, [kb.Rec(kb.topic_record("orders", ORDERS_1)),
                                kb.Rec(kb.partition_record(ORDERS_1, 0, [1, 2]))]),
        kb.Batch(3, T0 + 9999, [kb.snapshot_footer()], control=True),
    ]
    dump = tmp_path / "checkpoint.txt"
    dump.write_text(kb.dump_text(checkpoint, file_name=kb.checkpoint_name(12), snapshot_end=12))
    [snapshot] = read_files("kraft-dump", [dump], cluster_id=CLUSTER)
    assert (snapshot.captured_at, state(snapshot)) == (at(T0 + 4500),
                                                       {"orders": (ORDERS_1, 1, 2, False)})


def test_reassignment_counts_the_target_replicas_only_when_done(tmp_path):
    """TopicCommand's rule: while adding replicas, the factor is replicas minus adding."""
    batches = [
        kb.Batch(0, T0, [kb.Rec(kb.topic_record("orders", ORDERS_1)),
                         kb.Rec(kb.partition_record(ORDERS_1, 0, [1, 2]))]),
        kb.Batch(2, T0 + 1000, [kb.Rec(kb.partition_change_record(
            ORDERS_1, 0, replicas=[1, 2, 3], adding=[3]))]),
        kb.Batch(3, T0 + 2000, [kb.Rec(kb.partition_change_record(
            ORDERS_1, 0, replicas=[1, 2, 3], adding=[], isr=[1, 2, 3]))]),
    ]
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches))
    snapshots = read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)
    assert [(s.captured_at, s.topics[0].replication_factor) for s in snapshots] == [
        (at(T0), 2), (at(T0 + 2000), 3)]


def test_changes_in_one_millisecond_keep_their_order(tmp_path):
    batches = [
        kb.Batch(0, T0, [kb.Rec(kb.topic_record("orders", ORDERS_1)),
                         kb.Rec(kb.partition_record(ORDERS_1, 0, [1]))]),
        kb.Batch(2, T0, [kb.Rec(kb.remove_topic_record(ORDERS_1))]),
    ]
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches))
    snapshots = read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)
    assert [(s.captured_at, len(s.topics)) for s in snapshots] == [
        (at(T0), 1), (at(T0) + timedelta(microseconds=1), 0)]


def test_log_without_a_starting_state_is_refused(tmp_path):
    (tmp_path / kb.segment_name(10)).write_bytes(kb.encode_log(history()[4:]))
    with pytest.raises(MetadataLogError, match="starts at offset 10, not 0"):
        read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)


def test_missing_segment_is_refused(tmp_path):
    batches = history()
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches[:2]))
    (tmp_path / kb.segment_name(11)).write_bytes(kb.encode_log(batches[5:]))
    with pytest.raises(MetadataLogError, match=r"offsets 5\.\.10 are missing"):
        read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)


def _offset_of_batch(batches, index):
    return sum(len(kb.encode_batch(b)) for b in batches[:index])


def test_bad_crc_imports_nothing_and_names_file_and_batch(tl_home, log_dir):
    segment = log_dir / kb.segment_name(0)
    data = bytearray(segment.read_bytes())
    start = _offset_of_batch(history(), 2)
    data[start + 70] ^= 0xFF  # inside the records of the third batch
    segment.write_bytes(bytes(data))
    with pytest.raises(MetadataLogError) as excinfo:
        import_files("kraft-log", [log_dir])
    message = str(excinfo.value)
    assert str(segment) in message and f"batch at byte {start}" in message
    assert "CRC-32C mismatch" in message
    assert store.read_runs() == []


def test_truncated_segment_imports_nothing(tl_home, log_dir):
    segment = log_dir / kb.segment_name(0)
    data = segment.read_bytes()
    segment.write_bytes(data[:-7])
    last = _offset_of_batch(history(), len(history()) - 1)
    with pytest.raises(MetadataLogError, match=f"batch at byte {last}: .*truncated"):
        import_files("kraft-log", [log_dir])
    assert store.read_runs() == []


def test_unsupported_codec_is_named(tmp_path):
    batch = kb.Batch(0, T0, [kb.Rec(kb.topic_record("orders", ORDERS_1))])
    batch.compression = 2  # snappy: attributes say so, the body is not actually compressed
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_batch(batch))
    with pytest.raises(MetadataLogError, match="snappy, which is not supported"):
        read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)


RECORD_META = "| offset: 5 CreateTime: 1 keySize: -1 valueSize: 9 sequence: -1 headerKeys: [] "


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("this is not kafka-dump-log output", "unrecognised line"),
        (RECORD_META + "payload: {not json", "payload is not a metadata record"),
        (RECORD_META + "payload: Error at 5, skipping. Could not deserialize", "could not decode"),
        ("Found 17 invalid bytes at the end of 00000000000000000000.log", "damaged file"),
    ],
    ids=["garbage", "bad-json", "undecodable", "trailing-bytes"],
)
def test_damaged_dump_text_imports_nothing(tl_home, tmp_path, bad_line, message):
    lines = kb.dump_text(history(), file_name=kb.segment_name(0)).splitlines()
    lines.insert(6, bad_line)
    dump = tmp_path / "dump.txt"
    dump.write_text("\n".join(lines) + "\n")
    with pytest.raises(MetadataLogError, match=message) as excinfo:
        import_files("kraft-dump", [dump], cluster_id=CLUSTER)
    assert f"{dump}:7" in str(excinfo.value)
    assert store.read_runs() == []


def test_invalid_batch_in_dump_is_refused(tmp_path):
    text = kb.dump_text(history(), file_name=kb.segment_name(0))
    dump = tmp_path / "dump.txt"
    dump.write_text(text.replace("isvalid: true", "isvalid: false", 1))
    with pytest.raises(MetadataLogError, match="CRC mismatch"):
        read_files("kraft-dump", [dump], cluster_id=CLUSTER)


def test_cluster_id_is_required_without_meta_properties(tmp_path):
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(history()))
    with pytest.raises(ImportInputError, match="--cluster-id"):
        read_files("kraft-log", [tmp_path])
    meta = tmp_path.parent / "elsewhere.properties"
    meta.write_text("cluster.id=FromFile0000000000000000\n")
    snapshots = read_files("kraft-log", [tmp_path], cluster_id=str(meta))
    assert {s.cluster_id for s in snapshots} == {"FromFile0000000000000000"}


def test_cli_import_and_one_line_error(tl_home, log_dir, capsys):
    assert main(["import", "--format", "kraft-log", "--cluster-alias", "prod", str(log_dir)]) == 0
    assert "5 snapshot(s) stored" in capsys.readouterr().out
    assert main(["import", "--format", "nope", str(log_dir)]) == 2
    err = capsys.readouterr().err
    assert "unknown import format 'nope'" in err and "kraft-log" in err and "kafka-topics" in err


def test_a_checkpoint_bridges_a_gap_between_segments(tmp_path):
    """Offsets 5..11 are gone, but the snapshot at 12 holds the state they produced."""
    batches = history()
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches[:2]))
    checkpoint = [
        kb.Batch(0, T0 + 9999, [kb.snapshot_header(T0 + 4500)], control=True),
        kb.Batch(1, T0 + 9999, [kb.Rec(kb.topic_record("orders", ORDERS_1))]
                 + [kb.Rec(kb.partition_record(ORDERS_1, p, [1, 2, 3])) for p in range(4)]
                 + [kb.Rec(kb.topic_record("payments", PAYMENTS)),
                    kb.Rec(kb.partition_record(PAYMENTS, 0, [2, 3]))]),
        kb.Batch(8, T0 + 9999, [kb.snapshot_footer()], control=True),
    ]
    (tmp_path / kb.checkpoint_name(12)).write_bytes(kb.encode_log(checkpoint))
    (tmp_path / kb.segment_name(12)).write_bytes(kb.encode_log(batches[6:]))
    snapshots = read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)
    assert [(s.captured_at, sorted(state(s))) for s in snapshots] == [
        (at(T0 + 1000), ["orders"]),
        (at(T0 + 4500), ["orders", "payments"]),
        (at(T0 + 5000), ["payments"]),
        (at(T0 + 6000), ["orders", "payments"]),
    ]


# --- issue 13: real Kafka files, transactions, truncation, newer record versions -------------
def first_seen(snapshots) -> dict[str, tuple]:
    """Each topic's ID, partitions, replication factor at the end, and first snapshot time."""
    seen: dict[str, tuple] = {}
    for snap in snapshots:
        for t in snap.topics:
            seen.setdefault(t.name, snap.captured_at)
    last = snapshots[-1]
    return {t.name: (t.topic_id, t.partition_count, t.replication_factor, seen[t.name])
            for t in last.topics}


@pytest.mark.parametrize("where", ["metadata.log.dir", "__cluster_metadata-0"])
def test_real_kafka_3_7_volume_replays_its_five_topics(where):
    """Point 9 (and 5 on real bytes): Kafka 3.7.0's own log, BEGIN/END_TRANSACTION, ZK_MIGRATION
    and 4,801 NO_OPs included, from the metadata.log.dir root or from the partition folder."""
    root = kb.real_kafka("kraft-binary", "ldi-poc-kafka-3.7.0")
    path = root if where == "metadata.log.dir" else root / "__cluster_metadata-0"
    snapshots = read_files("kraft-log", [path])  # cluster ID from the volume's meta.properties
    assert {s.cluster_id for s in snapshots} == {kb.REAL_370_CLUSTER}
    assert all(s.complete and s.authoritative for s in snapshots)
    assert first_seen(snapshots) == kb.REAL_370_TOPICS
    # one snapshot per topic creation; the bootstrap transaction (no topics) adds none
    assert [len(s.topics) for s in snapshots] == [1, 2, 3, 4, 5]
    assert {t.name: t.is_internal for t in snapshots[-1].topics}["__consumer_offsets"]


def test_cli_imports_the_real_volume_from_its_root(tl_home, capsys):
    root = kb.real_kafka("kraft-binary", "ldi-poc-kafka-3.7.0")
    assert main(["import", "--format", "kraft-log", "--cluster-alias", "ldi", str(root)]) == 0
    runs = store.read_runs("ldi")
    assert runs and all(r["source"] == "import:kraft-log" and r["complete"] for r in runs)
    assert runs[-1]["topic_count"] == 5
    assert runs[-1]["captured_at"] == kb.REAL_370_TOPICS["Retry.TestTopicPatient"][3]


def migration_with_failover() -> list[kb.Batch]:
    """Kafka 3.6-3.9 ZooKeeper migration: the first controller's transaction is aborted after
    a failover, and the new controller writes every topic again in a new transaction."""
    def topics():
        return [kb.Rec(kb.topic_record("orders", ORDERS_1)),
                kb.Rec(kb.partition_record(ORDERS_1, 0, [1, 2, 3])),
                kb.Rec(kb.topic_record("payments", PAYMENTS)),
                kb.Rec(kb.partition_record(PAYMENTS, 0, [2, 3]))]

    return [
        # a record before the transaction in the same batch is committed on its own
        kb.Batch(0, T0, [kb.Rec(kb.topic_record("__consumer_offsets", OFFSETS)),
                         kb.Rec(kb.partition_record(OFFSETS, 0, [1])),
                         kb.Rec(kb.begin_transaction_record("ZK migration"))]),
        kb.Batch(3, T0 + 1000, topics()),
        kb.Batch(7, T0 + 1500, [kb.Rec(kb.topic_record("ghost", ORDERS_2)),
                                kb.Rec(kb.partition_record(ORDERS_2, 0, [1]))]),
        kb.Batch(9, T0 + 2000, [kb.leader_change()], control=True),
        kb.Batch(10, T0 + 3000, [kb.Rec(kb.abort_transaction_record())]),
        kb.Batch(11, T0 + 4000, [kb.Rec(kb.begin_transaction_record("ZK migration"))]),
        kb.Batch(12, T0 + 5000, topics()),
        kb.Batch(16, T0 + 6000, [kb.Rec(kb.end_transaction_record())]),
    ]


TXN_EXPECTED = [
    (at(T0), {"__consumer_offsets": OFFSETS_ROW}),
    (at(T0 + 6000), {"__consumer_offsets": OFFSETS_ROW, "orders": (ORDERS_1, 1, 3, False),
                     "payments": PAYMENTS_ROW}),
]


@pytest.mark.parametrize("form", ["binary", "dump"])
def test_metadata_transactions_apply_at_their_end_and_aborts_are_discarded(tmp_path, form):
    """Point 5: as MetadataBatchLoader; before the fix this log was refused ('that name or ID is
    already live') and 'ghost' was kept as a phantom topic."""
    batches = migration_with_failover()
    if form == "binary":
        (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches))
        snapshots = read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)
    else:
        dump = tmp_path / "dump.txt"
        dump.write_text(kb.dump_text(batches, file_name=kb.segment_name(0)))
        snapshots = read_files("kraft-dump", [dump], cluster_id=CLUSTER)
    assert [(s.captured_at, state(s)) for s in snapshots] == TXN_EXPECTED


def test_a_transaction_open_at_the_end_of_the_log_is_not_applied(tmp_path):
    batches = migration_with_failover()[:-1]  # the END_TRANSACTION was never written
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches))
    notes: list[str] = []
    snapshots = read_files("kraft-log", [tmp_path], cluster_id=CLUSTER, notes=notes)
    assert [(s.captured_at, state(s)) for s in snapshots] == TXN_EXPECTED[:1]
    assert notes == [("the log ends inside the metadata transaction begun at offset 11: its "
                     "changes were never committed and are not imported")]


def test_end_transaction_without_begin_is_refused(tmp_path):
    batches = [*history()[:2], kb.Batch(5, T0 + 2000, [kb.Rec(kb.end_transaction_record())])]
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches))
    with pytest.raises(MetadataLogError,
                       match="EndTransactionRecord at offset 5 without a BeginTransactionRecord"):
        read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)


@pytest.mark.parametrize("name", [
    "kd01-apache-kafka-2.8-kraft-readme-skip-record-metadata.txt",
    "kd02-apache-kafka-3.0-kraft-readme-skip-record-metadata.txt",
])
def test_dumps_printed_by_kafka_2_8_and_3_0(name):
    """Point 6: 'Starting offset: 0' (DumpLogSegments 2.8-3.2), read in place."""
    dump = kb.real_kafka("kraft-dump", name)
    [snapshot] = read_files("kraft-dump", [dump], cluster_id=CLUSTER)
    assert state(snapshot) == {"foo": ("5zoAlv-xEh9xRANKXt1Lbg", 1, 1, False)}
    assert snapshot.captured_at == at(1614382712158)  # the batch of its TopicRecord


def test_a_partial_excerpt_is_named_as_such():
    """Point 10: the Strimzi blog's excerpt (offsets 3004-3008, no batch lines)."""
    dump = kb.real_kafka("kraft-dump", "kd03-strimzi-blog-3.7-topic-creation-excerpt.txt")
    with pytest.raises(MetadataLogError) as excinfo:
        read_files("kraft-dump", [dump], cluster_id=CLUSTER)
    message = str(excinfo.value)
    assert message.startswith(f"{dump}:1: ")
    assert "first offset 3004" in message and "partial excerpt" in message
    assert "cannot be replayed" in message and "record line before any batch line" not in message


def test_a_dump_that_starts_after_offset_0_is_a_partial_excerpt(tmp_path):
    dump = tmp_path / "dump.txt"
    dump.write_text(kb.dump_text(history()[4:], file_name=kb.segment_name(10)))
    with pytest.raises(MetadataLogError,
                       match="starts at offset 10, not 0.*partial excerpt of the log cannot be "
                             "replayed"):
        read_files("kraft-dump", [dump], cluster_id=CLUSTER)


def checkpoint_batches() -> list[kb.Batch]:
    return [
        kb.Batch(0, T0 + 9999, [kb.snapshot_header(T0 + 4500)], control=True),
        kb.Batch(1, T0 + 9999, [kb.Rec(kb.topic_record("orders", ORDERS_1)),
                                kb.Rec(kb.partition_record(ORDERS_1, 0, [1, 2]))]),
        kb.Batch(3, T0 + 9999, [kb.snapshot_footer()], control=True),
    ]


@pytest.mark.parametrize("skip_metadata", [False, True], ids=["with-metadata", "skip-metadata"])
def test_checkpoint_dump_cut_after_its_first_batch_line_stores_nothing(tl_home, tmp_path,
                                                                        skip_metadata):
    """Point 7: this was stored as a complete, authoritative, empty snapshot dated 1970."""
    text = kb.dump_text(checkpoint_batches(), file_name=kb.checkpoint_name(12), snapshot_end=12,
                        skip_record_metadata=skip_metadata)
    dump = tmp_path / "checkpoint.txt"
    dump.write_text("\n".join(text.splitlines()[:3]) + "\n")  # Dumping, Snapshot end, batch
    with pytest.raises(MetadataLogError,
                       match=r"checkpoint.txt:3: the batch line says count: 1, but 0 record "
                             r"line\(s\) follow it: the dump is truncated"):
        import_files("kraft-dump", [dump], cluster_id=CLUSTER)
    assert store.read_runs() == []


def test_dump_whose_record_lines_do_not_add_up_to_count_is_refused(tmp_path):
    lines = kb.dump_text(history(), file_name=kb.segment_name(0)).splitlines()
    dump = tmp_path / "dump.txt"
    dump.write_text("\n".join(lines[:-1]) + "\n")  # the re-created topic's last PartitionRecord
    with pytest.raises(MetadataLogError, match="count: 3, but 2 record line"):
        read_files("kraft-dump", [dump], cluster_id=CLUSTER)


@pytest.mark.parametrize("form", ["binary", "dump"])
def test_snapshot_without_its_footer_stores_nothing(tl_home, tmp_path, form):
    """Point 7: a checkpoint cut at a batch boundary is well-formed batch by batch."""
    batches = checkpoint_batches()[:-1]
    if form == "binary":
        (tmp_path / kb.checkpoint_name(12)).write_bytes(kb.encode_log(batches))
        paths, fmt = [tmp_path], "kraft-log"
    else:
        dump = tmp_path / "checkpoint.txt"
        dump.write_text(kb.dump_text(batches, file_name=kb.checkpoint_name(12), snapshot_end=12))
        paths, fmt = [dump], "kraft-dump"
    with pytest.raises(MetadataLogError, match="does not end with its "
                                                         "SnapshotFooterRecord"):
        import_files(fmt, paths, cluster_id=CLUSTER)
    assert store.read_runs() == []
    # the whole checkpoint imports
    (tmp_path / kb.checkpoint_name(12)).write_bytes(kb.encode_log(checkpoint_batches()))
    [snapshot] = read_files("kraft-log", [tmp_path / kb.checkpoint_name(12)], cluster_id=CLUSTER)
    assert (snapshot.captured_at, state(snapshot)) == (at(T0 + 4500),
                                                       {"orders": (ORDERS_1, 1, 2, False)})


def test_partition_change_record_newer_than_known_is_read_by_its_tags(tmp_path):
    """Point 8: a version above 2 still carries Replicas as tag 2; it used to be dropped."""
    unknown_tag = {9: b"\x01\x02"}  # a field a future Kafka adds
    body = struct.pack(">i", 0) + tid.to_bytes(ORDERS_1)
    newer = kb.frame(5, 3, body + kb.tagged({2: kb.compact_int32s([1, 2, 3]), **unknown_tag}))
    batches = [
        kb.Batch(0, T0, [kb.Rec(kb.topic_record("orders", ORDERS_1)),
                         kb.Rec(kb.partition_record(ORDERS_1, 0, [1]))]),
        kb.Batch(2, T0 + 1000, [kb.Rec(newer)]),
    ]
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches))
    snapshots = read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)
    assert [(s.captured_at, s.topics[0].replication_factor) for s in snapshots] == [
        (at(T0), 1), (at(T0 + 1000), 3)]
    # a newer version that is not tagged fields only is refused by name, not half-read
    odd = kb.frame(5, 3, body + kb.tagged({2: kb.compact_int32s([1, 2, 3])}) + b"\x00\x07")
    batches[1] = kb.Batch(2, T0 + 1000, [kb.Rec(odd)])
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches))
    with pytest.raises(MetadataLogError,
                       match="PartitionChangeRecord version 3 is newer than this reader knows"):
        read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)
