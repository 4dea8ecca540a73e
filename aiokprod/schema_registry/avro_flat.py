"""A per-schema Avro encoder for flat records: the per-record path of ``AvroSerializer``.

fastavro's compiled encoder walks the schema for every record (a type test and a call per field),
~6.5 us for ten fields. A record whose fields are all primitives (``null``, ``boolean``, ``int``,
``long``, ``float``, ``double``, ``string``, ``bytes``) or unions of ``null`` and one of them can
instead be encoded by one function generated for its schema: one expression per field, joined
with ``b"".join``, small varints from a table; that halves the cost. Where the native extension
is built, its twin (``FlatAvroEncoder`` in ``aiokprod/_native/_avro.pxi``) walks the same plan
of the fields in C, into one buffer, about ten times faster again. Anything else (nested
records, arrays, maps, enums, fixed, logical types) returns ``None`` and fastavro stays in use.

What the generated code accepts follows fastavro's writer: a missing field takes the schema's
default (missing without one is an error), ``int`` and ``long`` must be integers in their
range (``bool`` included, as fastavro), ``float``/``double`` anything ``struct.pack`` takes,
``string`` a ``str``, ``bytes`` a ``bytes``-like object; a wrong value raises (``TypeError``,
``ValueError``, ``struct.error``), which ``send()`` turns into ``SerializationError``. It is
stricter than fastavro in two places, where fastavro writes what a reader cannot take: an
``int`` outside 32 bits, and a ``null`` field given something else than ``None``.
``tests/unit/test_schema_registry_formats.py`` compares its bytes with fastavro's.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from aiokprod import _native
from aiokprod.records._varint import encode_unsigned_varint

__all__ = ["flat_record_encoder"]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "string", "bytes"})
_SMALL = tuple(bytes([n]) if n < 0x80 else bytes([(n & 0x7F) | 0x80, n >> 7])
               for n in range(1 << 14))
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_MISSING = object()


def _varint(n: int) -> bytes:
    return _SMALL[n] if n < 0x4000 else encode_unsigned_varint(n)


def _int(value: Any) -> bytes:
    if not isinstance(value, int):
        raise TypeError(f"{value!r} is not an Avro int")
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"{value} is out of range for an Avro int")
    n = (value << 1) ^ (value >> 63)
    return _SMALL[n] if n < 0x4000 else _varint(n)


def _long(value: Any) -> bytes:
    if not isinstance(value, int):
        raise TypeError(f"{value!r} is not an Avro long")
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{value} is out of range for an Avro long")
    n = (value << 1) ^ (value >> 63)
    return _SMALL[n] if n < 0x4000 else _varint(n)


def _string(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not an Avro string")
    data = value.encode()
    n = len(data) << 1
    return (_SMALL[n] if n < 0x4000 else _varint(n)) + data


def _bytes(value: Any) -> bytes:
    data = bytes(value) if not isinstance(value, bytes) else value
    n = len(data) << 1
    return (_SMALL[n] if n < 0x4000 else _varint(n)) + data


def _boolean(value: Any) -> bytes:
    return b"\x01" if value else b"\x00"


def _null(value: Any) -> bytes:
    if value is not None:
        raise TypeError(f"{value!r} is not an Avro null")
    return b""


_ENCODERS: dict[str, Callable[[Any], bytes]] = {
    "null": _null, "boolean": _boolean, "int": _int, "long": _long,
    "float": struct.Struct("<f").pack, "double": struct.Struct("<d").pack,
    "string": _string, "bytes": _bytes,
}


def _primitive(schema: Any) -> str | None:
    if isinstance(schema, str):
        return schema if schema in _PRIMITIVES else None
    if isinstance(schema, Mapping) and set(schema) <= {"type"} | {"__fastavro_parsed"}:
        return _primitive(schema.get("type"))
    return None


def flat_record_encoder(schema: Any) -> Callable[..., bytes] | None:
    """A function ``encode(record, header=b"")`` writing ``header`` and then a record of
    ``schema`` (a record schema as JSON ``dict``), or ``None`` when the schema is not flat (see
    the module docstring). It is the native twin where the extension is built, else the
    generated function; both take the same plan of the fields."""
    fields = _flat_fields(schema)
    if fields is None:
        return None
    speedups = _native.speedups
    if speedups is not None:
        native: Callable[..., bytes] = speedups.FlatAvroEncoder(tuple(fields), _MISSING)
        return native
    return _generated_encoder(fields)


def _flat_fields(schema: Any) -> list[tuple[str, str, int, Any]] | None:
    """Each field's (name, primitive type, union, default): ``union`` is -1 for a plain field,
    0 for ``["null", T]`` and 1 for ``[T, "null"]``; ``default`` is ``_MISSING`` when the schema
    gives none. ``None`` when a field is not a primitive or a nullable one."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        return None
    fields = []
    for field in schema.get("fields", ()):
        field_type = field.get("type")
        name = field.get("name")
        if not isinstance(name, str):
            return None
        default = field.get("default", _MISSING)
        kind = _primitive(field_type)
        if kind is not None:
            fields.append((name, kind, -1, default))
        elif isinstance(field_type, list) and len(field_type) == 2 and \
                "null" in field_type and field_type[0] != field_type[1]:
            other = _primitive(field_type[1 - field_type.index("null")])
            if other is None or other == "null":
                return None
            fields.append((name, other, field_type.index("null"), default))
        else:
            return None
    return fields


def _generated_encoder(fields: list[tuple[str, str, int, Any]]) -> Callable[..., bytes]:
    """One Python function for the fields: an expression per field, one ``b"".join``."""
    names: dict[str, Any] = {"_MISSING": _MISSING}
    parts = []
    for i, (name, kind, union, default) in enumerate(fields):
        names[f"_d{i}"] = default
        names[f"_e{i}"] = _ENCODERS[kind]
        names[f"_name{i}"] = name
        if union < 0:
            parts.append(f"_e{i}(_v{i})")
        else:
            names[f"_n{i}"] = b"\x00" if union == 0 else b"\x02"  # the null branch's index
            names[f"_b{i}"] = b"\x02" if union == 0 else b"\x00"
            parts.append(f"(_n{i} if _v{i} is None else _b{i} + _e{i}(_v{i}))")
    lines = ["def encode(record, header=b''):"]
    for i in range(len(parts)):
        lines.append(f"    _v{i} = record.get(_name{i}, _d{i})")
        lines.append(f"    if _v{i} is _MISSING:")
        lines.append(f"        raise ValueError('no value for field ' + repr(_name{i}))")
    lines.append(f"    return b''.join((header, {', '.join(parts)}))")
    exec("\n".join(lines), names)  # the source holds field indexes only; names are bound
    encode: Callable[..., bytes] = names["encode"]
    return encode
