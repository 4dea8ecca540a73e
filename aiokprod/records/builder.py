"""RecordBatch v2 encoder: the producer's per-record hot path.

Records are appended to the batch's own ``bytearray`` behind a 61-byte placeholder for the
header, so sealing an uncompressed batch only fills in the header and the CRC. Growth uses
``buffer += record``: in CPython that is a resize plus memcpy (~8 ns for a 110-byte record),
while slice assignment of a ``bytes`` into a preallocated ``bytearray`` first copies the bytes
into a temporary bytearray (~120 ns) and ``memoryview`` slice assignment costs ~50 ns (measured
on CPython 3.11). The memory bound is the buffer pool's byte count, which the
write limit keeps us under, not the physical preallocation.

One function encodes a record: ``_append_record`` (``record_encoding``, which also holds the
record layout below and the headers' encoding), bound once at import to the native
``aiokprod._native._speedups.append_record`` or to its pure-Python twin ``_append_record_py``
(one ``bytes.join`` of table-looked-up varints and the caller's key and value: one copy of the
payload). ``try_append`` and ``append_many`` both call it; the record is appended and truncated
away again if it passed the limit: checking after the write is one comparison, the rollback
happens once per batch, and a refused append leaves the batch's bytes as they were.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

from crc32c import crc32c

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
from .compression import (
    COMPRESSION_RATE_ESTIMATION_FACTOR,
    CompressionRatioEstimator,
    CompressionType,
    get_codec,
    validate_level,
)
from .record_encoding import Headers, _append_record, append_run, encode_headers
from .record_encoding import append_values as _append_values

__all__ = ["RecordBatchBuilder"]

_PLACEHOLDER = bytes(HEADER_SIZE)

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
        if type(compression) is not CompressionType:  # a batch per call: skip the enum's call
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
        # feeds record-size-max).
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
        size = _append_record(buf, timestamp_ms - base, count, key, value,
                              encode_headers(headers) if headers else None)
        end = mark + size
        if end > self._limit and count:
            del buf[mark:]
            self.full = True
            return False
        self.record_count = count + 1
        if end + size > self._limit:
            self.full = True  # another record like this one would not fit: send it now
        # `if`s rather than max(): they skip the store and a builtin call on the hot path
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
        timestamp is why this beats ``try_append`` in a loop: its delta is computed once and the
        loop keeps all state in locals.
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
        count = self.record_count
        if headers is None and type(values) is list and (keys is None or type(keys) is list):
            # the common run (lists, no headers) in one call: in C on the native path
            taken, largest = _append_values(buf, delta, count, keys, values, start, total,
                                            self._limit)
        else:
            taken, largest = append_run(buf, delta, count, keys, values, headers, start, total,
                                        self._limit)
        if start + taken < total:
            self.full = True  # stopped on the write limit
        if taken:
            self.record_count = count + taken
            if largest > self.max_record_size:  # noqa: PLR1730
                self.max_record_size = largest
            if timestamp_ms > self.max_timestamp:  # noqa: PLR1730
                self.max_timestamp = timestamp_ms
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

