"""Zigzag varints as the v2 record format uses them (protobuf's encoding of signed ints).

The encoder side is a lookup table because a record carries five varints and table indexing is
~10x cheaper in CPython than the shift loop; the loop remains for values outside the table.
"""

from __future__ import annotations

__all__ = [
    "ZIGZAG_TABLE",
    "ZIGZAG_TABLE_SIZE",
    "decode_varint",
    "encode_unsigned_varint",
    "encode_varint",
    "varint_size",
]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def encode_unsigned_varint(value: int) -> bytes:
    """Little-endian base-128, 7 bits per byte, high bit set on every byte but the last."""
    if value < 0:
        raise ValueError(f"unsigned varint cannot encode {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit value (Kafka's varint and varlong share this encoding)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit in a signed 64-bit varlong")
    return encode_unsigned_varint((value << 1) ^ (value >> 63))


def varint_size(value: int) -> int:
    """Bytes the zigzag varint of ``value`` takes, without building it."""
    zigzag = (value << 1) ^ (value >> 63)
    size = 1
    while zigzag > 0x7F:
        zigzag >>= 7
        size += 1
    return size


# Values 0..ZIGZAG_TABLE_SIZE-1 cover offset deltas, key/value lengths and record lengths of all
# but the largest records, and timestamp deltas of batches open for under ~8 s. Entries up to 63
# are CPython's cached one-byte objects; the rest cost ~300 KB once per process.
ZIGZAG_TABLE_SIZE = 1 << 13
ZIGZAG_TABLE: list[bytes] = [encode_varint(i) for i in range(ZIGZAG_TABLE_SIZE)]


def decode_varint(data: bytes | bytearray | memoryview, pos: int, max_bytes: int = 10) -> tuple[
    int, int
]:
    """Decode the zigzag varint at ``pos``; return (value, position after it).

    ``max_bytes`` is 5 for a varint (int32) and 10 for a varlong (int64); a longer run of
    continuation bits, or input ending mid-varint, raises ValueError so a corrupt batch cannot
    make the reader run past its end or build huge integers.
    """
    byte = data[pos]  # IndexError on empty input is translated by the caller
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    end = pos + max_bytes
    pos += 1
    while True:
        if pos >= end:
            raise ValueError(f"varint longer than {max_bytes} bytes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    value = (result >> 1) ^ -(result & 1)
    limit = 1 << (7 * max_bytes - 4 if max_bytes == 5 else 63)
    if not -limit <= value < limit:
        raise ValueError(f"varint value {value} out of range")
    return value, pos
