"""Topic-ID parsing: every accepted form round-trips to Kafka's canonical form; nothing else does."""

from __future__ import annotations

import base64
import uuid

import pytest
from confluent_kafka import Uuid
from hypothesis import given, settings
from hypothesis import strategies as st

from topic_lineage import topic_id as tid
from topic_lineage.errors import TopicLineageError

# Kafka's documented example pair (kafka-topics.sh output and its RFC 4122 form).
KAFKA_EXAMPLE = "b8tRS7h4TJ2Vt43Dp85v2A"
KAFKA_EXAMPLE_RFC = "6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8"

ids = st.binary(min_size=16, max_size=16)


def signed64(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def kafka_to_string(raw: bytes) -> str:
    """Kafka's Uuid.toString(), written independently of the module under test."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@given(ids)
def test_canonical_is_kafkas_url_safe_form(raw):
    """The canonical form is exactly Kafka's Uuid.toString(): 22 URL-safe chars, no padding."""
    text = tid.canonical(raw)
    assert text == kafka_to_string(raw)
    assert len(text) == 22 and tid.is_canonical(text)


@given(ids)
def test_every_accepted_form_round_trips(raw):
    """All input forms of the same 16 bytes give one canonical ID, and back to the same bytes."""
    expected = kafka_to_string(raw)
    standard = base64.b64encode(raw).decode()  # librdkafka's form, padded
    as_uuid = uuid.UUID(bytes=raw)
    forms = [
        expected,
        standard,
        standard.rstrip("="),
        str(as_uuid),
        str(as_uuid).upper(),
        as_uuid.hex,
        as_uuid,
        raw,
        bytearray(raw),
        Uuid(signed64(raw[:8]), signed64(raw[8:])),
        f"  {expected}\n",
    ]
    for form in forms:
        assert tid.canonical(form) == expected, form
        assert tid.to_bytes(form) == raw, form
        assert tid.rfc4122(form) == str(as_uuid), form


@given(ids)
def test_confluent_uuid_text_is_standard_base64_of_the_same_bytes(raw):
    """What confluent-kafka prints (str(Uuid), standard base64) parses to the same ID."""
    confluent = Uuid(signed64(raw[:8]), signed64(raw[8:]))
    assert tid.canonical(str(confluent)) == tid.canonical(confluent) == kafka_to_string(raw)


@given(ids)
def test_rfc4122_and_canonical_are_inverse(raw):
    canonical = tid.canonical(raw)
    assert tid.canonical(tid.rfc4122(canonical)) == canonical


def test_kafka_documented_example():
    assert tid.canonical(KAFKA_EXAMPLE_RFC) == KAFKA_EXAMPLE
    assert tid.rfc4122(KAFKA_EXAMPLE) == KAFKA_EXAMPLE_RFC


def test_reserved_ids():
    """ZERO_UUID means "no ID"; ZERO and ONE (__cluster_metadata) are reserved."""
    assert tid.rfc4122(tid.ZERO_UUID) == "00000000-0000-0000-0000-000000000000"
    assert tid.rfc4122(tid.ONE_UUID) == "00000000-0000-0000-0000-000000000001"
    assert tid.is_reserved("00000000-0000-0000-0000-000000000001")
    assert tid.is_reserved(bytes(16))
    assert not tid.is_reserved(KAFKA_EXAMPLE)
    assert tid.RESERVED_IDS == {tid.ZERO_UUID, tid.ONE_UUID}


@pytest.mark.parametrize(
    "value",
    [None, "", "   ", tid.ZERO_UUID, "00000000-0000-0000-0000-000000000000", "0" * 32, bytes(16),
     Uuid(0, 0)],
    ids=["none", "empty", "blank", "zero-canonical", "zero-rfc", "zero-hex", "zero-bytes",
         "zero-confluent"],
)
def test_canonical_or_none_maps_no_id_to_none(value):
    assert tid.canonical_or_none(value) is None


def test_canonical_or_none_keeps_one_uuid():
    """ONE_UUID is a real ID (the metadata topic), not "no ID"."""
    assert tid.canonical_or_none(tid.ONE_UUID) == tid.ONE_UUID


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("b8tRS7h4TJ2Vt43Dp85v2", "not a topic ID"),  # 21 chars
        ("b8tRS7h4TJ2Vt43Dp85v2AA", "not a topic ID"),  # 23 chars
        ("b8tRS7h4TJ2Vt43Dp85v2!", "not a topic ID"),
        ("AAAAAAAAAAAAAAAAAAAAAB", "trailing bits"),  # 22 chars but not 16 bytes
        ("ab+cdefghijklmnopqr-uw", "mixes URL-safe and standard"),
        ("6fcb514b-b878-4c9d-95b7-8dc3a7ce6fdz", "not a topic ID"),
        ("6fcb514bb8784c9d95b78dc3a7ce6fd", "not a topic ID"),  # 31 hex digits
        ("orders", "not a topic ID"),
        (b"\x00" * 15, "16 long"),
        (12345, "must be text"),
        (1.5, "must be text"),
        (["b8tRS7h4TJ2Vt43Dp85v2A"], "must be text"),
    ],
    ids=lambda v: repr(v)[:30],
)
def test_rejections_name_the_value(value, fragment):
    with pytest.raises(tid.TopicIdError) as excinfo:
        tid.canonical(value)
    message = str(excinfo.value)
    assert fragment in message
    assert isinstance(excinfo.value, TopicLineageError) and isinstance(excinfo.value, ValueError)
    if isinstance(value, str):
        assert repr(value) in message


@settings(max_examples=300)
@given(st.text(max_size=40))
def test_arbitrary_text_is_either_rejected_cleanly_or_canonical(text):
    """No input crashes the parser with anything but TopicIdError; accepted text is canonical."""
    try:
        result = tid.canonical(text)
    except tid.TopicIdError:
        return
    assert tid.is_canonical(result)
    assert tid.canonical(result) == result


@given(ids)
def test_is_canonical_rejects_the_librdkafka_form_when_it_differs(raw):
    standard = base64.b64encode(raw).decode().rstrip("=")
    assert tid.is_canonical(standard) == (standard == kafka_to_string(raw))
    assert not tid.is_canonical(str(uuid.UUID(bytes=raw)))


@settings(max_examples=200, deadline=None)  # the first call imports pyarrow
@given(st.lists(st.one_of(st.none(), ids), max_size=30), st.integers(0, 5))
def test_rfc4122_array_is_rfc4122_of_each_value(raws, skip):
    """The vectorised form a build writes ``topic_uuid`` with equals :func:`rfc4122` value for
    value: nulls stay null, repeated IDs, an array that is a slice of a longer one."""
    import pyarrow as pa

    values = [None if raw is None else tid.canonical(raw) for raw in raws]
    array = pa.array([tid.ZERO_UUID] * skip + values + values, pa.string()).slice(skip)
    want = [None if v is None else tid.rfc4122(v) for v in values + values]
    assert tid.rfc4122_array(array).to_pylist() == want
    assert tid.rfc4122_array(pa.chunked_array([array], pa.string())).to_pylist() == want


def test_rfc4122_array_of_other_forms_falls_back_to_one_value_at_a_time():
    import pyarrow as pa

    values = ["b8tRS7h4TJ2Vt43Dp85v2A==", "6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8", None]
    assert tid.rfc4122_array(pa.array(values)).to_pylist() == [
        "6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8", "6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8", None]
