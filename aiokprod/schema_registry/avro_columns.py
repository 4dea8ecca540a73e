"""Avro records encoded a column at a time, from an Arrow struct column: the Spark sink's
registry path (docs/spark.md, "Schema Registry").

Encoding a Spark row through fastavro costs a Python dict and an object per field; a struct of
primitive fields can instead be encoded straight from the Arrow buffers, no Python object per row.
The native extension does it in C (``encode_avro_columns``, 0.2 us a row for ten fields); without
it, whole-column NumPy operations do (1.1 us). In the NumPy encoder each field becomes one run of
bytes per row (its lengths and its bytes back to back): a boolean is a byte, ``float``/``double``
their little-endian bytes, ``int``/``long`` zig-zag varints (computed as up to ten 7-bit groups per
value, masked to each value's length), a ``string``/``bytes`` its length as a varint and then
Arrow's own data buffer, and a nullable field the union's branch (0 for null, 1 for the value) in
front. The runs are then scattered into one buffer, row by row behind the 5-byte Confluent header,
and the result is an Arrow binary column the sink hands to ``send_columns`` like any value column.

The Avro schema is derived from the Spark/Arrow struct (``avro_schema_for``) as Spark's own
``to_avro`` does: record ``topLevelRecord`` (the ``record.name`` option changes it), a nullable
field a union ``["null", T]``. Nested types are refused with a message naming the field.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aiokprod import _native

__all__ = ["AvroColumnEncoder", "avro_schema_for"]

_U8 = np.uint8


def _kind(arrow_type: pa.DataType, name: str) -> str:
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_int64(arrow_type):
        return "long"
    if pa.types.is_int32(arrow_type) or pa.types.is_int16(arrow_type) or \
            pa.types.is_int8(arrow_type):
        return "int"
    if pa.types.is_float64(arrow_type):
        return "double"
    if pa.types.is_float32(arrow_type):
        return "float"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return "bytes"
    raise ValueError(f"field {name!r} has type {arrow_type}: the registry path encodes structs "
                     f"of boolean, int, long, float, double, string and binary fields")


def avro_schema_for(struct: pa.StructType, *, name: str = "topLevelRecord",
                    namespace: str | None = None) -> dict[str, Any]:
    """The Avro record schema of an Arrow struct type (its fields' nullability included)."""
    fields = []
    for field in struct:
        kind = _kind(field.type, field.name)
        fields.append({"name": field.name, "type": ["null", kind] if field.nullable else kind})
    schema: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
    if namespace:
        schema["namespace"] = namespace
    return schema


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unsigned 64-bit ``values`` as varints: (length of each, their bytes back to back).

    Only as many 7-bit groups as the largest value needs are computed, one column of them at a
    time with its continuation bit; one boolean gather then drops each row's unused groups.
    """
    m = len(values)
    if m == 0:
        return np.zeros(0, dtype=np.int64), np.empty(0, dtype=_U8)
    values = values.astype(np.uint64, copy=False)
    top = int(values.max())
    width = max(1, (top.bit_length() + 6) // 7)
    groups = np.empty((m, width), dtype=_U8)
    lengths = np.ones(m, dtype=np.int64)
    rest = values
    for j in range(width):
        more = values >= np.uint64(1 << (7 * (j + 1))) if j + 1 < width else None
        column = (rest & np.uint64(0x7F)).astype(_U8)
        if more is not None:
            column |= more.astype(_U8) << _U8(7)
            lengths += more
            rest = rest >> np.uint64(7)
        groups[:, j] = column
    if width == 1:
        return lengths, groups.reshape(m)
    return lengths, groups[np.arange(width) < lengths[:, None]]


def _zigzag(values: np.ndarray) -> np.ndarray:
    signed = values.astype(np.int64, copy=False)
    zigzag: np.ndarray = ((signed << np.int64(1)) ^ (signed >> np.int64(63))).view(np.uint64)
    return zigzag


class AvroColumnEncoder:
    """Encodes an Arrow struct column (of the type it was made for) as Confluent-framed Avro.

    With the native extension, ``encode_avro_columns`` (``aiokprod/_native/_avro.pxi``) reads
    the children's Arrow buffers and writes every row in C, two passes (sizes, then bytes);
    ``encode_numpy`` below is its pure twin, whole-column NumPy operations.
    """

    def __init__(self, struct: pa.StructType) -> None:
        self._fields = [(f.name, _kind(f.type, f.name), f.nullable) for f in struct]
        self._widths = [f.type.bit_width // 8 if _kind(f.type, f.name) in ("int", "long")
                        else 0 for f in struct]
        speedups = _native.speedups
        self._native = None if speedups is None else speedups.encode_avro_columns

    def encode(self, column: pa.Array, header: bytes) -> pa.Array:
        """``column``'s rows, each as ``header`` + its Avro binary encoding; a null row stays
        null (a tombstone)."""
        if isinstance(column, pa.ChunkedArray):
            column = pa.concat_arrays(column.chunks)
        if self._native is None:
            return self.encode_numpy(column, header)
        n = len(column)
        specs = []
        for (name, kind, nullable), width, child in zip(self._fields, self._widths,
                                                        column.flatten(), strict=True):
            buffers = child.buffers()
            validity = buffers[0] if child.null_count else None
            if kind in ("string", "bytes"):
                large = pa.types.is_large_string(child.type) or \
                    pa.types.is_large_binary(child.type)
                specs.append((name, kind, nullable, 0, validity, buffers[2], buffers[1],
                              child.offset, large))
            else:
                specs.append((name, kind, nullable, width, validity, buffers[1], None,
                              child.offset, False))
        offsets, data, validity, large = self._native(
            n, column.buffers()[0] if column.null_count else None, column.offset, header,
            specs)
        return pa.Array.from_buffers(
            pa.large_binary() if large else pa.binary(), n,
            [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets),
             pa.py_buffer(data)])

    def encode_numpy(self, column: pa.Array, header: bytes) -> pa.Array:
        """``encode`` in NumPy, without the native extension."""
        n = len(column)
        valid = None
        if column.null_count:
            valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            column = column.filter(pa.array(valid))
        children = column.flatten()
        pieces: list[tuple[np.ndarray, np.ndarray]] = []
        for (name, kind, nullable), child in zip(self._fields, children, strict=True):
            if child.null_count and not nullable:
                raise ValueError(f"field {name!r} is not nullable but holds "
                                 f"{child.null_count} nulls")
            pieces.extend(self._field(kind, nullable, child))
        encoded = _interleave(len(column), header, pieces)
        if valid is None:
            return encoded
        return _with_nulls(encoded, valid, n)

    @staticmethod
    def _field(kind: str, nullable: bool, child: pa.Array
               ) -> list[tuple[np.ndarray, np.ndarray]]:
        m = len(child)
        pieces = []
        present = None
        if child.null_count:
            present = np.asarray(child.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            child = pc.fill_null(child, False if kind == "boolean" else
                                 ("" if kind == "string" else
                                  (b"" if kind == "bytes" else 0)))
        if nullable:
            branch = np.full(m, 2, dtype=_U8) if present is None else \
                np.where(present, _U8(2), _U8(0)).astype(_U8)  # zig-zag 1 or 0
            pieces.append((np.ones(m, dtype=np.int64), branch))
        keep = present
        if kind == "boolean":
            data = np.asarray(child.to_numpy(zero_copy_only=False), dtype=_U8)
            pieces.append(_fixed(data, 1, keep))
        elif kind in ("long", "int"):
            lengths, data = _varints(_zigzag(child.to_numpy(zero_copy_only=False)))
            pieces.append(_masked(lengths, data, keep))
        elif kind == "double":
            values = child.to_numpy(zero_copy_only=False).astype("<f8", copy=False)
            pieces.append(_fixed(values.view(_U8), 8, keep))
        elif kind == "float":
            values = child.to_numpy(zero_copy_only=False).astype("<f4", copy=False)
            pieces.append(_fixed(values.view(_U8), 4, keep))
        else:  # string, bytes: length, then the bytes straight from Arrow's data buffer
            offsets, data = _binary_buffers(child)
            lengths = np.diff(offsets)
            if keep is not None:
                lengths = np.where(keep, lengths, 0)
            varint_lengths, varint_data = _varints(_zigzag(lengths))
            pieces.append(_masked(varint_lengths, varint_data, keep))
            pieces.append((lengths.astype(np.int64), data))
        return pieces


def _fixed(data: np.ndarray, width: int, keep: np.ndarray | None
           ) -> tuple[np.ndarray, np.ndarray]:
    m = len(data) // width
    if keep is None:
        return np.full(m, width, dtype=np.int64), data
    rows = data.reshape(m, width)[keep].reshape(-1)
    return np.where(keep, width, 0).astype(np.int64), rows


def _masked(lengths: np.ndarray, data: np.ndarray, keep: np.ndarray | None
            ) -> tuple[np.ndarray, np.ndarray]:
    """A varint piece with the rows not kept (null values) dropped."""
    if keep is None:
        return lengths, data
    per_byte_row = np.repeat(np.arange(len(lengths)), lengths)
    return np.where(keep, lengths, 0), data[keep[per_byte_row]]


def _binary_buffers(child: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string/binary array's offsets (rebased to 0) and its bytes, without copying rows."""
    large = pa.types.is_large_string(child.type) or pa.types.is_large_binary(child.type)
    buffers = child.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if large else np.int32)
    offsets = offsets[child.offset:child.offset + len(child) + 1].astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(buffers[2], dtype=_U8)[start:end] if buffers[2] is not None and \
        end > start else np.empty(0, dtype=_U8)
    return offsets - start, data


def _interleave(m: int, header: bytes, pieces: list[tuple[np.ndarray, np.ndarray]]
                ) -> pa.Array:
    """Rows of ``header`` + each piece's bytes of that row, as one Arrow binary array: each
    piece's bytes scattered to their places by index. (Laying the pieces into a padded matrix
    and gathering it row by row was measured slower.)"""
    width = len(header)
    totals = np.full(m, width, dtype=np.int64)
    for lengths, _ in pieces:
        totals += lengths
    offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(totals, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=_U8)
    starts = offsets[:-1]
    out[(starts[:, None] + np.arange(width)).reshape(-1)] = np.tile(
        np.frombuffer(header, dtype=_U8), m)
    position = starts + width
    for lengths, data in pieces:
        if len(data):
            source = np.zeros(m, dtype=np.int64)
            np.cumsum(lengths[:-1], out=source[1:])
            out[np.repeat(position - source, lengths) + np.arange(len(data))] = data
        position = position + lengths
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(
            offsets.astype(np.int32)), pa.py_buffer(out)])
    return pa.Array.from_buffers(pa.large_binary(), m,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(out)])


def _with_nulls(encoded: pa.Array, valid: np.ndarray, n: int) -> pa.Array:
    """``encoded`` (one row per valid row) spread over ``n`` rows, null where not valid."""
    if not valid.any():  # every row null: nothing to take from
        return pa.nulls(n, encoded.type)
    positions = np.cumsum(valid) - 1
    taken = pa.array(np.where(valid, positions, 0))
    return pc.if_else(pa.array(valid), encoded.take(taken), pa.scalar(None, encoded.type))
