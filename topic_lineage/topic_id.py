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
