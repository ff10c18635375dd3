"""Importing the KRaft metadata log: binary segments/checkpoints and kafka-dump-log text.

Inputs are built to Kafka's formats by tests/kafka_builders.py (sources cited there).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import kafka_builders as kb
import pytest

from topic_lineage import store
from topic_lineage import topic_id as tid
from topic_lineage.cli import main
from topic_lineage.importers import ImportInputError, import_files, kraft_log, read_files
from topic_lineage.importers.crc32c import crc32c, crc32c_py

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
    with pytest.raises(kraft_log.MetadataLogError, match="starts at offset 10, not 0"):
        read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)


def test_missing_segment_is_refused(tmp_path):
    batches = history()
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_log(batches[:2]))
    (tmp_path / kb.segment_name(11)).write_bytes(kb.encode_log(batches[5:]))
    with pytest.raises(kraft_log.MetadataLogError, match=r"offsets 5\.\.10 are missing"):
        read_files("kraft-log", [tmp_path], cluster_id=CLUSTER)


def _offset_of_batch(batches, index):
    return sum(len(kb.encode_batch(b)) for b in batches[:index])


def test_bad_crc_imports_nothing_and_names_file_and_batch(tl_home, log_dir):
    segment = log_dir / kb.segment_name(0)
    data = bytearray(segment.read_bytes())
    start = _offset_of_batch(history(), 2)
    data[start + 70] ^= 0xFF  # inside the records of the third batch
    segment.write_bytes(bytes(data))
    with pytest.raises(kraft_log.MetadataLogError) as excinfo:
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
    with pytest.raises(kraft_log.MetadataLogError, match=f"batch at byte {last}: .*truncated"):
        import_files("kraft-log", [log_dir])
    assert store.read_runs() == []


def test_unsupported_codec_is_named(tmp_path):
    batch = kb.Batch(0, T0, [kb.Rec(kb.topic_record("orders", ORDERS_1))])
    batch.compression = 2  # snappy: attributes say so, the body is not actually compressed
    (tmp_path / kb.segment_name(0)).write_bytes(kb.encode_batch(batch))
    with pytest.raises(kraft_log.MetadataLogError, match="snappy, which is not supported"):
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
    with pytest.raises(kraft_log.MetadataLogError, match=message) as excinfo:
        import_files("kraft-dump", [dump], cluster_id=CLUSTER)
    assert f"{dump}:7" in str(excinfo.value)
    assert store.read_runs() == []


def test_invalid_batch_in_dump_is_refused(tmp_path):
    text = kb.dump_text(history(), file_name=kb.segment_name(0))
    dump = tmp_path / "dump.txt"
    dump.write_text(text.replace("isvalid: true", "isvalid: false", 1))
    with pytest.raises(kraft_log.MetadataLogError, match="CRC mismatch"):
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
