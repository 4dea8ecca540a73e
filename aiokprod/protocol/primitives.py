"""Readers and writers for the Kafka protocol's primitive types.

The generated message modules (``aiokprod.protocol._generated``) inline runs of fixed-size
fields as precompiled ``struct.Struct`` calls and call into this module for everything of
variable length: unsigned varints, (compact) strings and bytes, array lengths, UUIDs and the
tagged-field section of flexible versions.

Conventions shared with the generated code:

* Writers return ``bytes`` (or append to an ``out`` list of chunks); the caller joins the
  chunks once, so a large payload such as a ``records`` field is copied exactly one time.
* Readers take ``(data, pos, end, what)`` and return ``(value, new_pos)``. ``end`` bounds the
  read (it is smaller than ``len(data)`` inside a tagged field) and ``what`` names the message
  class and field, so a truncated or malformed frame raises :class:`ProtocolError` saying
  where, instead of an ``IndexError`` or ``struct.error`` from deep inside a decoder.
* Every length read from the wire is checked against the bytes that remain *before* anything
  is allocated, so a hostile length cannot make the decoder allocate gigabytes or spin.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Sized
from typing import Any, Final, NamedTuple

from aiokprod.errors import ProtocolError

Buf = bytes | bytearray | memoryview
"""What decoders accept: any contiguous buffer of bytes."""

Chunk = bytes | bytearray | memoryview
"""What encoders append to their output list; ``b"".join`` accepts all three."""


class FieldInfo(NamedTuple):
    """Run-time description of one spec field, as ``FIELDS`` on every generated class.

    Version ranges are inclusive ``(lo, hi)`` pairs capped at the message's MAX_VERSION;
    ``(1, 0)`` is the empty range. Tests build version-valid instances from these, and callers
    can ask which versions carry a field without reading the JSON specs.
    """

    name: str
    spec_name: str
    type: str
    versions: tuple[int, int]
    nullable_versions: tuple[int, int]
    tag: int | None
    tagged_versions: tuple[int, int]
    ignorable: bool

    def present_in(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def nullable_in(self, version: int) -> bool:
        return self.nullable_versions[0] <= version <= self.nullable_versions[1]

    def tagged_in(self, version: int) -> bool:
        return self.tagged_versions[0] <= version <= self.tagged_versions[1]


class _Missing(enum.Enum):
    """Marks an argument the caller did not pass, where ``None`` is a meaningful value.

    Nullable arrays (``MetadataRequest.topics``) use ``None`` for the wire's null, so the
    generated ``__init__`` needs a different marker to mean "use the spec's default".
    """

    MISSING = 0


MISSING: Final = _Missing.MISSING

INT8: Final = struct.Struct(">b")
INT16: Final = struct.Struct(">h")
UINT16: Final = struct.Struct(">H")
INT32: Final = struct.Struct(">i")
UINT32: Final = struct.Struct(">I")
INT64: Final = struct.Struct(">q")
FLOAT64: Final = struct.Struct(">d")

_SMALL_UVARINTS: Final = tuple(bytes((i,)) for i in range(128))
_NULL_INT16: Final = INT16.pack(-1)
_NULL_INT32: Final = INT32.pack(-1)
_MAX_UINT32: Final = 0xFFFFFFFF
_MAX_INT32: Final = 0x7FFFFFFF
_MAX_INT16: Final = 0x7FFF
ZERO_UUID: Final = uuid.UUID(int=0)


# --------------------------------------------------------------------------- errors


def truncated(what: str, need: int, have: int) -> ProtocolError:
    """The error for a frame that ends before a field does; kept in one place for one wording."""
    return ProtocolError(f"{what}: truncated input, need {need} more bytes but {have} remain")


def null_not_allowed(what: str) -> ValueError:
    return ValueError(f"{what}: None is not allowed for this field in this version")


# --------------------------------------------------------------------------- varints


def uvarint(value: int) -> bytes:
    """Encode an unsigned 32-bit varint (compact lengths, tags, tag sizes)."""
    if 0 <= value < 128:
        return _SMALL_UVARINTS[value]
    if value < 0 or value > _MAX_UINT32:
        raise ValueError(f"unsigned varint out of range: {value}")
    if value < 0x4000:  # two bytes: a records field's length up to 16 KiB, every request
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(data: Buf, pos: int, end: int, what: str) -> tuple[int, int]:
    """Read an unsigned varint of at most 5 bytes (Kafka's are 32-bit)."""
    if pos >= end:
        raise truncated(what, 1, 0)
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    p = pos + 1
    while True:
        if p >= end:
            raise truncated(what, 1, 0)
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            raise ProtocolError(f"{what}: unsigned varint longer than 5 bytes")
    if result > _MAX_UINT32:
        raise ProtocolError(f"{what}: unsigned varint exceeds 32 bits")
    return result, p


# Signed (zigzag) varints appear only inside a RecordBatch, never in a message field: they are
# aiokprod.records._varint's, the one implementation (with its native twin in _speedups.pyx).


# --------------------------------------------------------------------------- writers


def enc_string(value: str | None, what: str) -> bytes:
    if value is None:
        raise null_not_allowed(what)
    b = value.encode("utf-8")
    if len(b) > _MAX_INT16:
        raise ValueError(f"{what}: string of {len(b)} bytes exceeds 32767")
    return INT16.pack(len(b)) + b


def enc_nullable_string(value: str | None, what: str) -> bytes:
    if value is None:
        return _NULL_INT16
    return enc_string(value, what)


def enc_compact_string(value: str | None, what: str) -> bytes:
    if value is None:
        raise null_not_allowed(what)
    b = value.encode("utf-8")
    n = len(b)
    if n < 127:
        return _SMALL_UVARINTS[n + 1] + b
    if n > _MAX_INT32 - 1:
        raise ValueError(f"{what}: string of {n} bytes is too long")
    return uvarint(n + 1) + b


def enc_compact_nullable_string(value: str | None, what: str) -> bytes:
    if value is None:
        return b"\x00"
    return enc_compact_string(value, what)


def enc_bytes_len(value: Chunk | None, what: str) -> bytes:
    """The int32 length prefix of a non-flexible bytes/records field (-1 when null is allowed)."""
    if value is None:
        raise null_not_allowed(what)
    return INT32.pack(len(value))


def enc_nullable_bytes_len(value: Chunk | None, what: str) -> bytes:
    if value is None:
        return _NULL_INT32
    return INT32.pack(len(value))


def enc_compact_bytes_len(value: Chunk | None, what: str) -> bytes:
    if value is None:
        raise null_not_allowed(what)
    return uvarint(len(value) + 1)


def enc_compact_nullable_bytes_len(value: Chunk | None, what: str) -> bytes:
    if value is None:
        return b"\x00"
    return uvarint(len(value) + 1)


def enc_uuid(value: uuid.UUID | None, what: str) -> bytes:
    if value is None:
        raise null_not_allowed(what)
    return value.bytes


def enc_array_len(value: Sized | None, what: str) -> bytes:
    if value is None:
        raise null_not_allowed(what)
    return INT32.pack(len(value))


def enc_nullable_array_len(value: Sized | None, what: str) -> bytes:
    if value is None:
        return _NULL_INT32
    return INT32.pack(len(value))


def enc_compact_array_len(value: Sized | None, what: str) -> bytes:
    if value is None:
        raise null_not_allowed(what)
    n = len(value)
    if n < 127:
        return _SMALL_UVARINTS[n + 1]
    return uvarint(n + 1)


def enc_compact_nullable_array_len(value: Sized | None, what: str) -> bytes:
    if value is None:
        return b"\x00"
    return enc_compact_array_len(value, what)


def write_tagged_fields(
    out: list[Chunk],
    known: list[tuple[int, bytes]],
    unknown: dict[int, bytes],
    known_tags: frozenset[int],
    what: str,
) -> None:
    """Write a tagged-field section: known fields that differ from their default plus the
    unknown ones kept from a decode, merged in ascending tag order as the protocol requires."""
    if unknown:
        for tag in unknown:
            if tag in known_tags:
                raise ValueError(f"{what}: unknown_tagged_fields holds tag {tag}, a known field")
            if tag < 0 or tag > _MAX_UINT32:
                raise ValueError(f"{what}: tag {tag} out of range")
        known = known + list(unknown.items())
        known.sort(key=lambda item: item[0])
    if not known:
        out.append(b"\x00")
        return
    out.append(uvarint(len(known)))
    for tag, payload in known:
        out.append(uvarint(tag))
        out.append(uvarint(len(payload)))
        out.append(payload)


# --------------------------------------------------------------------------- readers


def _utf8(data: Buf, pos: int, end: int, what: str) -> str:
    try:
        return str(data[pos:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what}: invalid UTF-8 in string") from exc


def read_string(data: Buf, pos: int, end: int, what: str) -> tuple[str, int]:
    if end - pos < 2:
        raise truncated(what, 2, end - pos)
    n = (data[pos] << 8) | data[pos + 1]
    if n & 0x8000:
        raise ProtocolError(f"{what}: null or negative length for a non-nullable string")
    pos += 2
    if n > end - pos:
        raise truncated(what, n, end - pos)
    return _utf8(data, pos, pos + n, what), pos + n


def read_nullable_string(data: Buf, pos: int, end: int, what: str) -> tuple[str | None, int]:
    if end - pos < 2:
        raise truncated(what, 2, end - pos)
    (n,) = INT16.unpack_from(data, pos)
    pos += 2
    if n < 0:
        if n != -1:
            raise ProtocolError(f"{what}: negative string length {n}")
        return None, pos
    if n > end - pos:
        raise truncated(what, n, end - pos)
    return _utf8(data, pos, pos + n, what), pos + n


# The compact readers below take a one-byte length (below 0x80: up to 126 bytes or elements,
# almost every length on the wire) without calling read_uvarint: they run several times per
# partition of every answer.
def read_compact_string(data: Buf, pos: int, end: int, what: str) -> tuple[str, int]:
    if pos < end and data[pos] < 0x80:
        n = data[pos]
        pos += 1
    else:
        n, pos = read_uvarint(data, pos, end, what)
    if n == 0:
        raise ProtocolError(f"{what}: null for a non-nullable compact string")
    n -= 1
    if n > end - pos:
        raise truncated(what, n, end - pos)
    return _utf8(data, pos, pos + n, what), pos + n


def read_compact_nullable_string(
    data: Buf, pos: int, end: int, what: str
) -> tuple[str | None, int]:
    if pos < end and data[pos] < 0x80:
        n = data[pos]
        pos += 1
    else:
        n, pos = read_uvarint(data, pos, end, what)
    if n == 0:
        return None, pos
    n -= 1
    if n > end - pos:
        raise truncated(what, n, end - pos)
    return _utf8(data, pos, pos + n, what), pos + n


def read_bytes(data: Buf, pos: int, end: int, what: str) -> tuple[bytes, int]:
    value, pos = read_nullable_bytes(data, pos, end, what)
    if value is None:
        raise ProtocolError(f"{what}: null for a non-nullable bytes field")
    return value, pos


def read_nullable_bytes(data: Buf, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise truncated(what, 4, end - pos)
    (n,) = INT32.unpack_from(data, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise ProtocolError(f"{what}: negative bytes length {n}")
        return None, pos
    if n > end - pos:
        raise truncated(what, n, end - pos)
    return bytes(data[pos : pos + n]), pos + n


def read_compact_bytes(data: Buf, pos: int, end: int, what: str) -> tuple[bytes, int]:
    value, pos = read_compact_nullable_bytes(data, pos, end, what)
    if value is None:
        raise ProtocolError(f"{what}: null for a non-nullable compact bytes field")
    return value, pos


def read_compact_nullable_bytes(
    data: Buf, pos: int, end: int, what: str
) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(data, pos, end, what)
    if n == 0:
        return None, pos
    n -= 1
    if n > end - pos:
        raise truncated(what, n, end - pos)
    return bytes(data[pos : pos + n]), pos + n


def read_uuid(data: Buf, pos: int, end: int, what: str) -> tuple[uuid.UUID, int]:
    if end - pos < 16:
        raise truncated(what, 16, end - pos)
    return uuid.UUID(bytes=bytes(data[pos : pos + 16])), pos + 16


def read_array_len(data: Buf, pos: int, end: int, min_elem: int, what: str) -> tuple[int, int]:
    """Read an int32 array length; ``min_elem`` (>= 1) bounds it by the bytes that remain."""
    n, pos = read_nullable_array_len(data, pos, end, min_elem, what)
    if n < 0:
        raise ProtocolError(f"{what}: null for a non-nullable array")
    return n, pos


def read_nullable_array_len(
    data: Buf, pos: int, end: int, min_elem: int, what: str
) -> tuple[int, int]:
    """Like :func:`read_array_len` but returns -1 for a null array."""
    if end - pos < 4:
        raise truncated(what, 4, end - pos)
    (n,) = INT32.unpack_from(data, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise ProtocolError(f"{what}: negative array length {n}")
        return -1, pos
    if n * min_elem > end - pos:
        raise truncated(what, n * min_elem, end - pos)
    return n, pos


def read_compact_array_len(
    data: Buf, pos: int, end: int, min_elem: int, what: str
) -> tuple[int, int]:
    if pos < end and data[pos] < 0x80:
        n = data[pos] - 1
        if n >= 0 and n * min_elem < end - pos:  # a length and elements that fit: done
            return n, pos + 1
    n, pos = read_compact_nullable_array_len(data, pos, end, min_elem, what)
    if n < 0:
        raise ProtocolError(f"{what}: null for a non-nullable compact array")
    return n, pos


def read_compact_nullable_array_len(
    data: Buf, pos: int, end: int, min_elem: int, what: str
) -> tuple[int, int]:
    if pos < end and data[pos] < 0x80:
        n = data[pos]
        pos += 1
    else:
        n, pos = read_uvarint(data, pos, end, what)
    if n == 0:
        return -1, pos
    n -= 1
    if n * min_elem > end - pos:
        raise truncated(what, n * min_elem, end - pos)
    return n, pos


def read_fixed_array(data: Buf, pos: int, n: int, code: str, size: int) -> tuple[list[Any], int]:
    """Unpack ``n`` fixed-size elements at once; the caller has already bounded ``n``."""
    values = struct.unpack_from(f">{n}{code}", data, pos)
    return list(values), pos + n * size


def read_unknown_tags(data: Buf, pos: int, end: int, what: str) -> tuple[dict[int, bytes], int]:
    """Read a tagged-field section of a struct version that declares no tagged fields."""
    if pos < end and data[pos] == 0:
        return {}, pos + 1
    count, pos = read_uvarint(data, pos, end, what)
    if count * 2 > end - pos:
        raise truncated(what, count * 2, end - pos)
    unknown: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = read_uvarint(data, pos, end, what)
        size, pos = read_uvarint(data, pos, end, what)
        if size > end - pos:
            raise truncated(f"{what} (tag {tag})", size, end - pos)
        unknown[tag] = bytes(data[pos : pos + size])
        pos += size
    return unknown, pos


def records_repr(value: Chunk | None) -> str:
    """Records are kilobytes of RecordBatch; a repr shows their size, not their bytes."""
    return "None" if value is None else f"<{len(value)} bytes>"
