"""The one place that turns any topic-ID text into Kafka's canonical form.

A topic ID (KIP-516) is 16 bytes. Kafka prints it with ``Uuid.toString()``: URL-safe base64
without padding, 22 characters; that is also what brokers write in each partition directory's
``partition.metadata`` (``topic_id: b8tRS7h4TJ2Vt43Dp85v2A``) and what the metadata log's
JSON dumps show. librdkafka / confluent-kafka print the same bytes in standard base64 (``+``
and ``/``); many other tools use RFC 4122 hex. Every entry point of topic-lineage accepts all
of these (and confluent-kafka ``Uuid`` objects) and stores only the canonical form.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from typing import Any

from topic_lineage.errors import TopicLineageError

CANONICAL_PATTERN = r"^[A-Za-z0-9_-]{22}$"

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
"""Kafka's ``Uuid.ZERO_UUID``: "no ID" (a cluster or broker without topic IDs)."""

ONE_UUID = "AAAAAAAAAAAAAAAAAAAAAQ"
"""Kafka's ``Uuid.ONE_UUID``: the ID of the ``__cluster_metadata`` topic."""

RESERVED_IDS = frozenset({ZERO_UUID, ONE_UUID})

_BASE64_22 = re.compile(r"^[A-Za-z0-9+/_-]{22}(==)?$")
_HEX_32 = re.compile(r"^[0-9a-fA-F]{32}$")
_RFC4122 = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)


class TopicIdError(TopicLineageError, ValueError):
    """A value is not a topic ID in any accepted form."""


def _from_signed_halves(most: int, least: int) -> bytes:
    return (most & (2**64 - 1)).to_bytes(8, "big") + (least & (2**64 - 1)).to_bytes(8, "big")


def to_bytes(value: Any) -> bytes:
    """The 16 bytes of a topic ID given in any accepted form.

    Accepted: Kafka's URL-safe base64 (22 chars), standard base64 (22 chars, optionally ``==``
    padded), RFC 4122 text with or without dashes, ``uuid.UUID``, 16 raw bytes, and
    confluent-kafka ``Uuid`` objects (compared by their two 64-bit halves, since ``Uuid`` has
    no value equality). Raises :class:`TopicIdError` naming the value otherwise.
    """
    if isinstance(value, (bytes, bytearray)):
        if len(value) != 16:
            raise TopicIdError(f"topic ID bytes must be 16 long, got {len(value)}")
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return value.bytes
    if hasattr(value, "get_most_significant_bits") and hasattr(value, "get_least_significant_bits"):
        return _from_signed_halves(
            value.get_most_significant_bits(), value.get_least_significant_bits()
        )
    if not isinstance(value, str):
        raise TopicIdError(f"topic ID must be text, got {type(value).__name__}: {value!r}")
    text = value.strip()
    if _RFC4122.match(text) or _HEX_32.match(text):
        return uuid.UUID(hex=text).bytes
    if _BASE64_22.match(text):
        body = text[:22]
        if ("-" in body or "_" in body) and ("+" in body or "/" in body):
            raise TopicIdError(f"topic ID {value!r} mixes URL-safe and standard base64 alphabets")
        try:
            raw = base64.urlsafe_b64decode(body.replace("+", "-").replace("/", "_") + "==")
        except (binascii.Error, ValueError) as exc:  # pragma: no cover - regex guards this
            raise TopicIdError(f"topic ID {value!r} is not valid base64: {exc}") from exc
        # 22 base64 chars carry 132 bits; the last 4 must be zero for a 16-byte value.
        if _canonical_from_bytes(raw) != body.replace("+", "-").replace("/", "_"):
            raise TopicIdError(f"topic ID {value!r} is not the base64 of 16 bytes (trailing bits set)")
        return raw
    raise TopicIdError(
        f"not a topic ID: {value!r} (expected 22-char base64 such as 'b8tRS7h4TJ2Vt43Dp85v2A', "
        "or RFC 4122 text such as '6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8')"
    )


def _canonical_from_bytes(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def canonical(value: Any) -> str:
    """Kafka's ``Uuid.toString()`` form of a topic ID given in any accepted form."""
    return _canonical_from_bytes(to_bytes(value))


def canonical_or_none(value: Any) -> str | None:
    """Canonical ID, or ``None`` for "no ID" (``None``, empty text or ZERO_UUID)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = canonical(value)
    return None if text == ZERO_UUID else text


def rfc4122(value: Any) -> str:
    """The RFC 4122 text form (lower-case, with dashes) of a topic ID in any accepted form."""
    return str(uuid.UUID(bytes=to_bytes(value)))


def is_reserved(value: Any) -> bool:
    """True for ZERO_UUID and ONE_UUID, which are never a real incarnation's ID."""
    return canonical(value) in RESERVED_IDS


def is_canonical(text: str) -> bool:
    """True when ``text`` is already in canonical form (22 URL-safe base64 chars, 16 bytes)."""
    if not isinstance(text, str) or not re.match(CANONICAL_PATTERN, text):
        return False
    try:
        return canonical(text) == text
    except TopicIdError:
        return False


_URLSAFE = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_DASHES = (8, 12, 16, 20)  # hex digits before each dash of the RFC 4122 text


def rfc4122_array(ids):
    """:func:`rfc4122` of each canonical ID in an Arrow string array (nulls stay null), in a
    few vector operations over its distinct values: a build writes ``topic_uuid`` for millions
    of observations of a few thousand IDs.

    Any value that is not 22 canonical characters makes it fall back to :func:`rfc4122` one
    value at a time (the store only holds canonical IDs)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks else pa.nulls(0, pa.string())
    if len(ids) == 0:
        return pa.nulls(0, pa.string())
    encoded = pc.dictionary_encode(ids)  # a null stays a null index
    return pc.take(_rfc4122_distinct(encoded.dictionary.cast(pa.string())), encoded.indices)


def _rfc4122_distinct(ids):
    """:func:`rfc4122_array` of an array without nulls."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(ids)
    table = np.full(256, 255, np.uint8)
    table[np.frombuffer(_URLSAFE, np.uint8)] = np.arange(64, dtype=np.uint8)
    sixes = None
    lengths = pc.min_max(pc.binary_length(ids)).as_py() if count else {}
    if lengths == {"min": 22, "max": 22}:  # (not to_numpy: it imports pandas, in a task too)
        offsets = np.frombuffer(ids.buffers()[1], np.int32)[ids.offset:ids.offset + count + 1]
        sixes = table[np.frombuffer(ids.buffers()[2], np.uint8)[offsets[0]:offsets[0] + 22 * count]]
        sixes = sixes.reshape(count, 22)
    if sixes is None or (sixes == 255).any() or (sixes[:, 21] & 15).any():
        return pa.array([rfc4122(v) for v in ids.to_pylist()], pa.string())
    # 4 characters of 6 bits are 3 bytes; 22 characters (two zero ones added) give 18, of which 16
    quads = np.zeros((count, 24), np.uint32)
    quads[:, :22] = sixes
    quads = quads.reshape(count, 6, 4)
    word = quads[:, :, 0] << 18 | quads[:, :, 1] << 12 | quads[:, :, 2] << 6 | quads[:, :, 3]
    raw = np.stack([word >> 16, word >> 8, word], axis=2).astype(np.uint8).reshape(count, 18)[:, :16]
    hexdigits = np.frombuffer(b"0123456789abcdef", np.uint8)
    digits = np.stack([hexdigits[raw >> 4], hexdigits[raw & 15]], axis=2).reshape(count, 32)
    text = np.insert(digits, _DASHES, ord("-"), axis=1)  # 36 characters each
    offsets = np.arange(0, 36 * (count + 1), 36, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets.tobytes()),
                                                      pa.py_buffer(text.tobytes())])
