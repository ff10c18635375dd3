"""CRC-32C (Castagnoli), the checksum of Kafka record batches (magic v2).

Kafka computes it with ``org.apache.kafka.common.utils.Crc32C`` over the bytes from the batch
``attributes`` field to the end of the batch (``DefaultRecordBatch``). Pure Python, table
driven (slicing-by-8), so no compiled dependency is needed; a C implementation is used when the
small ``crc32c`` or ``google-crc32c`` package happens to be installed.
"""

from __future__ import annotations

_POLY = 0x82F63B78  # reflected Castagnoli polynomial (RFC 3720, appendix B.4)


def _tables() -> list[list[int]]:
    first = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        first.append(crc)
    tables = [first]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(prev[n] >> 8) ^ first[prev[n] & 0xFF] for n in range(256)])
    return tables


_T = _tables()


def crc32c_py(data: bytes | memoryview, crc: int = 0) -> int:
    """CRC-32C of ``data`` (pure Python)."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _T
    crc ^= 0xFFFFFFFF
    data = bytes(data)
    n = len(data)
    head = n - n % 8
    from_bytes = int.from_bytes
    for i in range(0, head, 8):
        lo = crc ^ from_bytes(data[i : i + 4], "little")
        hi = from_bytes(data[i + 4 : i + 8], "little")
        crc = (
            t7[lo & 0xFF] ^ t6[(lo >> 8) & 0xFF] ^ t5[(lo >> 16) & 0xFF] ^ t4[lo >> 24]
            ^ t3[hi & 0xFF] ^ t2[(hi >> 8) & 0xFF] ^ t1[(hi >> 16) & 0xFF] ^ t0[hi >> 24]
        )
    for byte in data[head:]:
        crc = (crc >> 8) ^ t0[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


def _native():
    try:
        import crc32c as _crc32c  # type: ignore[import-not-found]

        return lambda data: _crc32c.crc32c(bytes(data))
    except ImportError:
        pass
    try:
        import google_crc32c  # type: ignore[import-not-found]

        return lambda data: google_crc32c.value(bytes(data))
    except ImportError:
        return None


_NATIVE = _native()


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C of ``data`` as an unsigned 32-bit integer."""
    return _NATIVE(data) if _NATIVE is not None else crc32c_py(data)
