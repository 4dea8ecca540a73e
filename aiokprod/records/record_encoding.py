"""One v2 record's bytes: the record layout, the headers section and the record encoder,
native or its pure-Python twin (chosen once at import).

Split from ``builder`` so that the batch builder (its buffer, limit, header and CRC) and the
encoding of one record each have a module; the builder re-exports these names.

Record layout (Kafka's DefaultRecord, magic 2; the batch header is in _layout.py):

    record: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
            keyLength varint | key | valueLength varint | value | headerCount varint |
            headers (keyLength varint | key utf-8 | valueLength varint | value)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from aiokprod import _native

from ._varint import ZIGZAG_TABLE, encode_varint

__all__ = ["Headers", "append_run", "append_values", "encode_headers", "longest_bytes"]

Headers = Sequence[tuple[str, bytes | None]]

# zigzag(-1): the length of a null key, value or header value.
_NULL = b"\x01"
# Record attributes are unused in v2 and always 0; a headers section with no headers is count 0.
_ZERO = b"\x00"
_ZZ = ZIGZAG_TABLE
_TABLE_SIZE = len(ZIGZAG_TABLE)


class _AnyVarint:
    """Indexed like the table, for any value: what ``_append_record_py`` encodes with when a
    value is outside the table (a negative or large delta, a record past 8 KiB)."""

    __slots__ = ()

    def __getitem__(self, value: int) -> bytes:
        return encode_varint(value)


_ANY_VARINT = cast("list[bytes]", _AnyVarint())

# Header keys repeat across records (trace ids, content types), so their encoded form is cached;
# the cache is cleared rather than grown past this many keys so odd workloads cannot bloat it.
_HEADER_KEY_CACHE: dict[str, bytes] = {}
_HEADER_KEY_CACHE_MAX = 1024


def _header_key(name: str) -> bytes:
    encoded = _HEADER_KEY_CACHE.get(name)
    if encoded is None:
        if not isinstance(name, str):
            raise TypeError(f"header key must be str, got {type(name).__name__}")
        raw = name.encode("utf-8")
        encoded = encode_varint(len(raw)) + raw
        if len(_HEADER_KEY_CACHE) >= _HEADER_KEY_CACHE_MAX:
            _HEADER_KEY_CACHE.clear()
        _HEADER_KEY_CACHE[name] = encoded
    return encoded


def encode_headers(headers: Headers) -> bytes:
    """Encode a record's header section (count and entries)."""
    if len(headers) == 1:
        # One header (a trace id, a content type) is the common case: no list, one join.
        name, header_value = headers[0]
        encoded_key = _HEADER_KEY_CACHE.get(name) or _header_key(name)
        if header_value is None:
            return b"".join((b"\x02", encoded_key, _NULL))
        length = len(header_value)
        return b"".join(
            (
                b"\x02",
                encoded_key,
                _ZZ[length] if length < _TABLE_SIZE else encode_varint(length),
                header_value,
            )
        )
    count = len(headers)
    parts = [_ZZ[count] if count < _TABLE_SIZE else encode_varint(count)]
    for name, header_value in headers:
        parts.append(_HEADER_KEY_CACHE.get(name) or _header_key(name))
        if header_value is None:
            parts.append(_NULL)
        else:
            length = len(header_value)
            parts.append(_ZZ[length] if length < _TABLE_SIZE else encode_varint(length))
            parts.append(header_value)
    return b"".join(parts)


def _append_record_py(
    buf: bytearray,
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: bytes | None,
    zz: list[bytes] = _ZZ,
) -> int:
    """One record, length prefix included, appended to ``buf``; returns its size. The twin of
    ``aiokprod._native._speedups.append_record`` (``headers``: the encoded section or None).

    Varints come from the table ``zz``; a value outside it raises ``IndexError`` before anything
    is written, and the record is encoded again with ``_AnyVarint`` (same layout, any value).
    """
    if timestamp_delta < 0:
        zz = _ANY_VARINT  # a negative index would wrap around the table
    try:
        body = b"".join((
            _ZERO,  # attributes: unused in v2
            zz[timestamp_delta],
            zz[offset_delta],
            _NULL if key is None else zz[len(key)],
            b"" if key is None else key,
            _NULL if value is None else zz[len(value)],
            b"" if value is None else value,
            _ZERO if headers is None else headers,
        ))
        size = len(body)
        prefix = zz[size]
    except IndexError:
        if zz is _ANY_VARINT:
            raise
        return _append_record_py(buf, timestamp_delta, offset_delta, key, value, headers,
                                 _ANY_VARINT)
    buf += prefix
    buf += body
    return size + len(prefix)


# The one record encoder, chosen once: the native one when the extension is in use.
_append_record: Callable[
    [bytearray, int, int, bytes | None, bytes | None, bytes | None], int
] = _append_record_py if _native.speedups is None else _native.speedups.append_record


def longest_bytes_py(items: list[Any]) -> int:
    """The length of the longest item when every item is ``bytes`` or None (None counts 0);
    -1 as soon as one is anything else. The twin of ``_speedups.longest_bytes``: send_many's
    check of a whole list in one call instead of a Python loop."""
    longest = 0
    for item in items:
        if type(item) is bytes:
            if len(item) > longest:  # noqa: PLR1730 - no max() call per item
                longest = len(item)
        elif item is not None:
            return -1
    return longest


def append_values_py(buf: bytearray, delta: int, count: int, keys: list[bytes | None] | None,
                     values: list[bytes | None], start: int, stop: int, limit: int
                     ) -> tuple[int, int]:
    """``values[start:stop]`` (with ``keys``' items, or no keys) appended as records sharing
    one timestamp delta, numbered from ``count``, until one would pass ``limit`` (a record
    always goes into an empty batch). Returns ``(records taken, largest record's size)``.
    The twin of ``_speedups.append_values``: ``append_run`` without headers."""
    if keys is not None and len(keys) < stop:
        raise ValueError(f"{len(keys)} keys for a run up to {stop}")
    if len(values) < stop or start < 0 or start > stop:
        raise ValueError(f"run {start}..{stop} outside the {len(values)} values")
    return append_run(buf, delta, count, keys, values, None, start, stop, limit)


def append_run(buf: bytearray, delta: int, count: int, keys: Sequence[bytes | None] | None,
               values: Sequence[bytes | None], headers: Sequence[Headers | None] | None,
               start: int, stop: int, limit: int) -> tuple[int, int]:
    """``append_values`` for any sequences, each record with its own headers (or none): the
    loop of ``RecordBatchBuilder.append_many``, which takes ``append_values`` (native) for
    lists without headers. Returns ``(records taken, largest record's size)``."""
    append = _append_record
    mark = len(buf)
    first = count
    largest = 0
    for index in range(start, stop):
        record_headers = None if headers is None else headers[index]
        size = append(buf, delta, count, None if keys is None else keys[index], values[index],
                      encode_headers(record_headers) if record_headers else None)
        if mark + size > limit and count:
            del buf[mark:]
            break
        mark += size
        count += 1
        if size > largest:  # noqa: PLR1730
            largest = size
    return count - first, largest


longest_bytes: Callable[[list[Any]], int] = (
    longest_bytes_py if _native.speedups is None else _native.speedups.longest_bytes)
append_values: Callable[[bytearray, int, int, list[bytes | None] | None, list[bytes | None],
                         int, int, int], tuple[int, int]] = (
    append_values_py if _native.speedups is None else _native.speedups.append_values)
