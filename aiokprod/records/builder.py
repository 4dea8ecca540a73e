"""RecordBatch v2 encoder: the producer's per-record hot path.

Records are appended to the batch's own ``bytearray`` behind a 61-byte placeholder for the
header, so sealing an uncompressed batch only fills in the header and the CRC. Growth uses
``buffer += record``: in CPython that is a resize plus memcpy (~8 ns for a 110-byte record),
while slice assignment of a ``bytes`` into a preallocated ``bytearray`` first copies the bytes
into a temporary bytearray (~120 ns) and ``memoryview`` slice assignment costs ~50 ns (measured
on CPython 3.11). The memory bound is the buffer pool's byte count, which the
write limit keeps us under, not the physical preallocation.

Each record is built with one ``bytes.join`` of table-looked-up varints and the caller's key and
value (one copy of the payload), then appended and truncated away again if it passed the limit:
checking after the write is one ``len()``, the rollback happens once per batch, and a refused
``try_append`` leaves the batch's bytes as they were.

Record layout (Kafka's DefaultRecord, magic 2; the batch header is in _layout.py):

    record: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
            keyLength varint | key | valueLength varint | value | headerCount varint |
            headers (keyLength varint | key utf-8 | valueLength varint | value)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import cast

from crc32c import crc32c

from aiokprod import _native

from ._layout import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    CRC,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    MAGIC,
)
from ._varint import ZIGZAG_TABLE, encode_varint
from .compression import (
    COMPRESSION_RATE_ESTIMATION_FACTOR,
    CompressionRatioEstimator,
    CompressionType,
    get_codec,
    validate_level,
)

__all__ = ["Headers", "RecordBatchBuilder", "encode_headers"]

_PLACEHOLDER = bytes(HEADER_SIZE)

Headers = Sequence[tuple[str, bytes | None]]

# zigzag(-1): the length of a null key, value or header value.
_NULL = b"\x01"
# Record attributes are unused in v2 and always 0; a headers section with no headers is count 0.
_ZERO = b"\x00"
# null key, null value, no headers: the tail of a tombstone record.
_NULL_KEY_NULL_VALUE = b"\x01\x01\x00"
# The most a record's framing adds to its key and value: length, attributes, timestamp delta,
# offset delta, key and value lengths, header count (varints at their widest).
_RECORD_FRAMING_MAX = 5 + 1 + 10 + 5 + 5 + 5 + 5


def _longest(items: Sequence[bytes | None]) -> int:
    """len() of the longest item (None counts 0), at C speed when there is no None."""
    try:
        return max(map(len, items), default=0)  # type: ignore[arg-type]
    except TypeError:
        return max((len(i) for i in items if i is not None), default=0)

_ZZ = ZIGZAG_TABLE
_TABLE_SIZE = len(ZIGZAG_TABLE)
# Record attributes (always 0) followed by the timestamp delta, in one lookup.
_ATTR_DELTA = [_ZERO + encoded for encoded in ZIGZAG_TABLE]

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


def _encode_body(
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None,
) -> bytes:
    """Everything after the length prefix, for values the lookup table does not cover."""
    return _body(timestamp_delta, offset_delta, key, value,
                 encode_headers(headers) if headers else None)


def _body(
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: bytes | None,
) -> bytes:
    """A record after its length prefix, with the header section already encoded (or None)."""
    return b"".join(
        (
            _ZERO,
            encode_varint(timestamp_delta),
            encode_varint(offset_delta),
            _NULL if key is None else encode_varint(len(key)),
            b"" if key is None else key,
            _NULL if value is None else encode_varint(len(value)),
            b"" if value is None else value,
            _ZERO if headers is None else headers,
        )
    )


def _append_record_py(
    buf: bytearray,
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: bytes | None,
) -> int:
    """One record, length prefix included, appended to ``buf``; returns its size. The twin of
    ``aiokprod._native._speedups.append_record`` (``headers``: the encoded section or None)."""
    body = _body(timestamp_delta, offset_delta, key, value, headers)
    prefix = encode_varint(len(body))
    buf += prefix
    buf += body
    return len(prefix) + len(body)


_append_record: Callable[
    [bytearray, int, int, bytes | None, bytes | None, bytes | None], int
] = _append_record_py if _native.speedups is None else _native.speedups.append_record


class _Sealed:
    """Stands in for a sealed builder's buffer on the append path.

    ``len()`` on it raises, so appending to a sealed batch fails without costing the open
    batch's hot path a state check.
    """

    __slots__ = ()

    def __len__(self) -> int:
        raise RuntimeError("cannot append to a sealed record batch")


_SEALED_TARGET = cast("bytearray", _Sealed())


class RecordBatchBuilder:
    """An open v2 batch that records are appended to until it is sealed.

    Not thread-safe, and not needed to be: one event loop owns the accumulator. After ``seal``
    the builder is immutable and ``buffer`` holds exactly the finished batch.
    """

    __slots__ = (
        "_buffer",
        "_estimator",
        "_level",
        "_limit",
        "_sealed",
        "_sizing_ratio",
        "_target",
        "_topic",
        "_uncompressed_size",
        "base_timestamp",
        "compression",
        "full",
        "max_record_size",
        "max_timestamp",
        "observed_ratio",
        "record_count",
        "write_limit",
    )

    def __init__(
        self,
        buffer: bytearray,
        *,
        write_limit: int,
        compression: CompressionType = CompressionType.NONE,
        compression_level: int | None = None,
        base_timestamp: int | None = None,
        estimated_ratio: float | None = None,
        estimator: CompressionRatioEstimator | None = None,
        topic: str = "",
    ) -> None:
        """Take ownership of ``buffer`` (its contents are discarded).

        ``write_limit`` bounds the batch's size on the wire; with compression it bounds the
        *estimated* compressed size, so the buffer may grow past its initial length (the Java
        producer does the same). The ratio comes from ``estimated_ratio`` (the estimator's
        raw estimate; the 1.05 factor is applied here) if given, else from
        ``estimator`` for ``topic``; ``estimator`` is also told the observed ratio at seal time.
        """
        if write_limit < HEADER_SIZE:
            raise ValueError(
                f"write_limit {write_limit} is smaller than the {HEADER_SIZE}-byte header"
            )
        compression = CompressionType(compression)
        # The bytes the records are written into, header placeholder first.
        del buffer[HEADER_SIZE:]
        if len(buffer) < HEADER_SIZE:
            buffer += _PLACEHOLDER[len(buffer) :]
        self._buffer = buffer
        # What appends write to: the buffer while open, a raising stand-in once sealed.
        self._target = buffer
        # Bytes allowed on the wire for this batch (batch.size, or the size of a lone big record).
        self.write_limit = write_limit
        self.compression = compression
        # Codec level, validated now so a bad config cannot fail at seal time.
        self._level = validate_level(compression, compression_level)
        # Told the observed ratio at seal (docs/compression.md, E2-E3).
        self._estimator = estimator
        self._topic = topic
        if compression is CompressionType.NONE:
            sizing = 1.0
        elif estimated_ratio is not None:
            sizing = estimated_ratio * COMPRESSION_RATE_ESTIMATION_FACTOR
        elif estimator is not None:
            sizing = estimator.sizing_ratio(topic, compression)
        else:
            sizing = COMPRESSION_RATE_ESTIMATION_FACTOR
        # Estimated compressed bytes per uncompressed byte, including the 1.05 safety factor.
        self._sizing_ratio = sizing
        # Largest buffer length (header + uncompressed records) whose estimated wire size stays
        # within write_limit, so the per-record check is one integer comparison.
        self._limit = HEADER_SIZE + math.floor((write_limit - HEADER_SIZE) / sizing)
        # Timestamp deltas are relative to this; the first record's timestamp unless given.
        self.base_timestamp: int | None = base_timestamp
        # Highest record timestamp, written to the header; -1 (Kafka's NO_TIMESTAMP) when empty.
        self.max_timestamp = -1
        # Records appended; the next record's offset delta.
        self.record_count = 0
        # Set when the next record would likely not fit (or one was refused): the accumulator
        # wakes the sender then, as Java does on "batch is full" (a plain flag: checked per
        # record).
        self.full = False
        # compressed/uncompressed size of the records section, known after seal.
        self.observed_ratio: float | None = None
        # The finished batch, once sealed.
        self._sealed: memoryview | None = None
        # Records-section size before compression, kept because seal overwrites those bytes.
        self._uncompressed_size = 0
        # The largest record appended, in bytes (Java's ProducerBatch.maxRecordSize, which
        # feeds record-size-max): exact for try_append, an upper bound for append_many.
        self.max_record_size = 0

    # ------------------------------------------------------------------------------ appending

    def try_append(
        self,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
    ) -> bool:
        """Append one record; False (nothing written) if it would pass the write limit.

        A record always goes into an empty batch: the caller sized that batch's buffer for it.
        """
        buf = self._target
        mark = len(buf)  # raises RuntimeError once sealed (see _Sealed)
        count = self.record_count
        base = self.base_timestamp
        if base is None:
            base = self.base_timestamp = timestamp_ms
        delta = timestamp_ms - base
        zz = _ZZ
        try:
            if delta < 0:
                raise IndexError  # negative indexes would wrap around the table
            if key is None and value is not None:
                # The most common shape gets its own join: fewer conditionals per record.
                body = b"".join(
                    (
                        _ATTR_DELTA[delta],
                        zz[count],
                        _NULL,
                        zz[len(value)],
                        value,
                        encode_headers(headers) if headers else _ZERO,
                    )
                )
            else:
                body = b"".join(
                    (
                        _ATTR_DELTA[delta],
                        zz[count],
                        _NULL if key is None else zz[len(key)],
                        b"" if key is None else key,
                        _NULL if value is None else zz[len(value)],
                        b"" if value is None else value,
                        encode_headers(headers) if headers else _ZERO,
                    )
                )
            buf += zz[len(body)]
        except IndexError:
            body = _encode_body(delta, count, key, value, headers)
            buf += encode_varint(len(body))
        buf += body
        # Written first and rolled back when over: the check then costs one len() and the
        # rollback happens once per batch.
        end = len(buf)
        if end > self._limit and count:
            del buf[mark:]
            self.full = True
            return False
        self.record_count = count + 1
        size = end - mark
        if end + size > self._limit:
            self.full = True  # another record like this one would not fit: send it now
        if size > self.max_record_size:  # noqa: PLR1730 - see max_timestamp below
            self.max_record_size = size
        # An `if` rather than max(): it skips the store and a builtin call on the hot path.
        if timestamp_ms > self.max_timestamp:  # noqa: PLR1730
            self.max_timestamp = timestamp_ms
        return True

    def _try_append_native(
        self,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
    ) -> bool:
        """``try_append`` with the record encoded in C (aiokprod._native): same bytes, same
        rules; it replaces ``try_append`` when the extension is in use."""
        buf = self._target
        mark = len(buf)  # raises RuntimeError once sealed (see _Sealed)
        count = self.record_count
        base = self.base_timestamp
        if base is None:
            base = self.base_timestamp = timestamp_ms
        size = _append_record(buf, timestamp_ms - base, count, key, value,
                              encode_headers(headers) if headers else None)
        end = mark + size
        if end > self._limit and count:
            del buf[mark:]
            self.full = True
            return False
        self.record_count = count + 1
        if end + size > self._limit:
            self.full = True
        if size > self.max_record_size:  # noqa: PLR1730
            self.max_record_size = size
        if timestamp_ms > self.max_timestamp:  # noqa: PLR1730
            self.max_timestamp = timestamp_ms
        return True

    def append_many(
        self,
        timestamp_ms: int,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Headers | None] | None = None,
        *,
        start: int = 0,
        stop: int | None = None,
    ) -> int:
        """Append ``values[start:stop]`` (one shared timestamp) in order until one does not fit.

        ``keys`` and ``headers`` (one header list per record) run parallel to ``values``.
        Returns how many records were taken; the caller opens a new batch and calls again with
        ``start`` advanced, which avoids re-slicing a long list once per batch. The shared
        timestamp is why this beats ``try_append`` in a loop: its varint is looked up once and
        the loop keeps all state in locals.
        """
        total = len(values)
        if keys is not None and len(keys) != total:
            raise ValueError(f"{len(keys)} keys for {total} values")
        if headers is not None and len(headers) != total:
            raise ValueError(f"{len(headers)} header lists for {total} values")
        if stop is not None:
            if not 0 <= stop <= total:
                raise ValueError(f"stop {stop} outside 0..{total}")
            total = stop  # the caller's run ends here (records of other partitions follow)
        if not 0 <= start <= total:
            raise ValueError(f"start {start} outside 0..{total}")
        buf = self._target
        len(buf)  # raises RuntimeError once sealed, before any state changes
        if start == total:
            return 0
        base = self.base_timestamp
        if base is None:
            base = self.base_timestamp = timestamp_ms
        delta = timestamp_ms - base
        zz = _ZZ
        first = self.record_count
        count = first
        # (a long ``values`` list is fine: the batch fills long before ``count`` outgrows the
        # varint table, and if it ever did, the IndexError path below takes over)
        if 0 <= delta < _TABLE_SIZE and first < _TABLE_SIZE:
            limit = self._limit
            # attributes + timestamp delta: the same bytes for every record of the call.
            prefix = _ZERO + zz[delta]
            mark = len(buf)
            try:
                if keys is None and headers is None:
                    for index in range(start, total):
                        value = values[index]
                        if value is None:
                            body = b"".join((prefix, zz[count], _NULL_KEY_NULL_VALUE))
                        else:
                            body = b"".join(
                                (prefix, zz[count], _NULL, zz[len(value)], value, _ZERO)
                            )
                        buf += zz[len(body)]
                        buf += body
                        if len(buf) > limit and count:
                            del buf[mark:]
                            break
                        mark = len(buf)
                        count += 1
                else:
                    for index in range(start, total):
                        key = None if keys is None else keys[index]
                        value = values[index]
                        record_headers = None if headers is None else headers[index]
                        body = b"".join(
                            (
                                prefix,
                                zz[count],
                                _NULL if key is None else zz[len(key)],
                                b"" if key is None else key,
                                _NULL if value is None else zz[len(value)],
                                b"" if value is None else value,
                                encode_headers(record_headers) if record_headers else _ZERO,
                            )
                        )
                        buf += zz[len(body)]
                        buf += body
                        if len(buf) > limit and count:
                            del buf[mark:]
                            break
                        mark = len(buf)
                        count += 1
            except IndexError:
                # A record too large for the varint table (raised before anything of it was
                # written): record what was taken, then go record by record.
                self._commit_many(timestamp_ms, count)
                taken = count - first
                return taken + self._append_each(
                    timestamp_ms, values, keys, headers, start + taken, total
                )
            self._commit_many(timestamp_ms, count)
            taken = count - first
            if taken:
                self._note_largest(values, keys, start, start + taken)
            if start + taken < total:
                self.full = True  # the loop stopped on the write limit
            return taken
        return self._append_each(timestamp_ms, values, keys, headers, start, total)

    def _note_largest(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                      start: int, stop: int) -> None:
        """``max_record_size`` after a bulk append: the largest key + value taken plus the
        most a record's framing adds (headers not counted), found by C-level max() over the
        slice instead of a compare per record in the loop above."""
        largest = _longest(values[start:stop])
        if keys is not None:
            largest += _longest(keys[start:stop])
        largest += _RECORD_FRAMING_MAX
        self.max_record_size = max(self.max_record_size, largest)

    def _commit_many(self, timestamp_ms: int, count: int) -> None:
        if count > self.record_count:
            self.record_count = count
            self.max_timestamp = max(self.max_timestamp, timestamp_ms)

    def _append_each(
        self,
        timestamp_ms: int,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Headers | None] | None,
        start: int,
        stop: int,
    ) -> int:
        taken = 0
        for index in range(start, stop):
            if not self.try_append(
                timestamp_ms,
                None if keys is None else keys[index],
                values[index],
                None if headers is None else headers[index],
            ):
                break
            taken += 1
        return taken

    # -------------------------------------------------------------------------------- sizing

    @property
    def buffer(self) -> bytearray:
        """The batch's bytes: header placeholder and records while open, the batch once sealed."""
        return self._buffer

    @property
    def is_sealed(self) -> bool:
        return self._sealed is not None

    @property
    def uncompressed_size(self) -> int:
        """Bytes of the records section before compression (the record-size metrics use it)."""
        if self._sealed is not None:
            return self._uncompressed_size
        return len(self._buffer) - HEADER_SIZE

    def estimated_size(self) -> int:
        """Bytes the sealed batch will take on the wire; exact unless compressed and open."""
        size = len(self._buffer)
        if self._sealed is not None or self.compression is CompressionType.NONE:
            return size
        return HEADER_SIZE + math.ceil((size - HEADER_SIZE) * self._sizing_ratio)

    def is_full(self) -> bool:
        """True when a record of this batch's average size would no longer fit.

        The accumulator uses it to treat a batch as ready before a refused append proves it.
        """
        if self._sealed is not None or self.full:
            return True
        count = self.record_count
        if not count:
            return False
        used = len(self._buffer)
        return used + (used - HEADER_SIZE) / count > self._limit

    # ------------------------------------------------------------------------------- sealing

    def seal(
        self,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        is_control: bool = False,
    ) -> memoryview:
        """Finish the batch: compress the records section if asked, write header and CRC.

        Returns a view of ``buffer``; while any view exists the bytearray cannot be resized,
        which is what keeps a batch in flight from being reused by mistake.
        """
        if self._sealed is not None:
            raise RuntimeError("batch is already sealed")
        count = self.record_count
        if not count:
            raise ValueError("cannot seal a batch with no records")
        buf = self._buffer
        base_timestamp = self.base_timestamp
        if base_timestamp is None:  # unreachable: the first append sets it
            raise RuntimeError("batch has records but no base timestamp")
        self._uncompressed_size = uncompressed = len(buf) - HEADER_SIZE
        compression = self.compression
        attributes = int(compression)
        if transactional:
            attributes |= ATTR_TRANSACTIONAL
        if is_control:
            attributes |= ATTR_CONTROL
        if compression is not CompressionType.NONE:
            with memoryview(buf) as view, view[HEADER_SIZE:] as records:
                compressed = get_codec(compression).compress(records, self._level)
            buf[HEADER_SIZE:] = compressed
            ratio = len(compressed) / uncompressed
            self.observed_ratio = ratio
            if self._estimator is not None:
                self._estimator.update(self._topic, compression, ratio)
        HEADER.pack_into(
            buf,
            0,
            0,  # base offset: the broker assigns offsets
            len(buf) - 12,  # batch length counts the bytes after the length field
            -1,  # partition leader epoch: the broker fills it in
            MAGIC,
            0,  # CRC, computed below over attributes..end
            attributes,
            count - 1,
            base_timestamp,
            self.max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        sealed = memoryview(buf)
        CRC.pack_into(buf, CRC_OFFSET, crc32c(sealed[ATTRIBUTES_OFFSET:]))
        self._target = _SEALED_TARGET
        self._sealed = sealed
        return sealed

    def __repr__(self) -> str:
        state = "sealed" if self._sealed is not None else "open"
        return (
            f"RecordBatchBuilder({state}, records={self.record_count}, "
            f"compression={self.compression.kafka_name}, estimated_size={self.estimated_size()}, "
            f"write_limit={self.write_limit})"
        )


if _native.speedups is not None:
    # the native path: chosen once here, so try_append costs no check per record
    RecordBatchBuilder.try_append = RecordBatchBuilder._try_append_native  # type: ignore[method-assign]
