"""A minimal protocol-buffers writer: the few wire types KIP-714's OTLP payload needs.

Why hand-written: client metrics push (``aiokprod.telemetry``) sends one small OTLP
``MetricsData`` message every push interval. The ``protobuf`` runtime plus
``opentelemetry-proto`` would add two dependencies (one with a native extension) to every
install for a few hundred bytes a minute; the encoding itself is five wire rules. The test
suite decodes our output with ``opentelemetry-proto`` as an independent reader.

Only writing is supported, fields are written in the order the caller emits them (any order is
valid protobuf), and proto3 defaults are the caller's concern: a field written with its default
value is still a valid encoding.
"""

from __future__ import annotations

import builtins
import struct

__all__ = ["ProtoWriter"]

_VARINT = 0
_I64 = 1
_LEN = 2
_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")
_SFIXED64 = struct.Struct("<q")
_U64 = 1 << 64


class ProtoWriter:
    """Appends protobuf fields to one buffer; :meth:`message` nests a finished writer."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()  # the encoded fields so far

    def _varint(self, value: int) -> None:
        if value < 0:  # int32/int64/enum negatives: ten-byte two's complement, as protobuf does
            value += _U64
        buf = self._buf
        while value > 0x7F:
            buf.append((value & 0x7F) | 0x80)
            value >>= 7
        buf.append(value)

    def _key(self, field: int, wire_type: int) -> None:
        if field < 1:
            raise ValueError(f"protobuf field numbers start at 1, got {field}")
        self._varint((field << 3) | wire_type)

    def uint(self, field: int, value: int) -> None:
        """A varint field: uint32/uint64/int32/int64 and enums."""
        self._key(field, _VARINT)
        self._varint(value)

    def bool(self, field: int, value: bool) -> None:
        self._key(field, _VARINT)
        self._buf.append(1 if value else 0)

    def fixed64(self, field: int, value: int) -> None:
        self._key(field, _I64)
        self._buf += _FIXED64.pack(value)

    def sfixed64(self, field: int, value: int) -> None:
        self._key(field, _I64)
        self._buf += _SFIXED64.pack(value)

    def double(self, field: int, value: float) -> None:
        self._key(field, _I64)
        self._buf += _DOUBLE.pack(value)

    def bytes(self, field: int, value: builtins.bytes | bytearray) -> None:
        self._key(field, _LEN)
        self._varint(len(value))
        self._buf += value

    def string(self, field: int, value: str) -> None:
        self.bytes(field, value.encode("utf-8"))

    def message(self, field: int, inner: ProtoWriter) -> None:
        """An embedded message: ``inner``'s fields, length-prefixed."""
        self.bytes(field, inner._buf)

    def getvalue(self) -> builtins.bytes:
        return bytes(self._buf)

    def __len__(self) -> int:
        return len(self._buf)
