"""RecordBatch v2 decoder and the batch splitter used after MESSAGE_TOO_LARGE.

A producer rarely reads batches: it does so to split a batch the broker refused, and tests use
it to check what the encoder wrote. So this side is strict rather than fast: every length is
bounds-checked, the CRC is verified, and anything malformed raises ``ProtocolError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from ..errors import ProtocolError
from ._layout import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAGIC_OFFSET,
)
from ._varint import decode_varint
from .builder import RecordBatchBuilder
from .compression import CompressionType, decompress

__all__ = ["Record", "RecordBatch", "read_batches", "split_batch"]

# batchLength counts from the partition leader epoch on, i.e. the batch minus these bytes.
_LENGTH_PREFIX = 12


class Record(NamedTuple):
    """One decoded record, with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class RecordBatch:
    """A verified v2 batch: every header field, and its records decoded on first access."""

    __slots__ = (
        "_records",
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "crc",
        "data",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "record_count",
    )

    # Header fields, in wire order (see builder.py for the layout).
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    def __init__(self, data: bytes) -> None:
        """``data`` is exactly one batch whose length, magic and CRC were already checked."""
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = HEADER.unpack_from(data, 0)
        # The whole batch as it was on the wire (header, then records, possibly compressed).
        self.data = data
        self._records: list[Record] | None = None
        try:
            CompressionType(self.attributes & ATTR_COMPRESSION_MASK)
        except ValueError:
            raise ProtocolError(
                f"record batch at offset {self.base_offset} uses unknown compression id "
                f"{self.attributes & ATTR_COMPRESSION_MASK}"
            ) from None
        if self.record_count < 0:
            raise ProtocolError(f"record batch has a negative record count {self.record_count}")

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & ATTR_COMPRESSION_MASK)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def size_in_bytes(self) -> int:
        return len(self.data)

    @property
    def records(self) -> list[Record]:
        """Decoded records (decompressed first if needed); ProtocolError if malformed."""
        if self._records is None:
            self._records = self._decode()
        return self._records

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return self.record_count

    def _decode(self) -> list[Record]:
        payload = memoryview(self.data)[HEADER_SIZE:]
        codec = self.compression
        try:
            section = decompress(codec, payload) if codec is not CompressionType.NONE else bytes(
                payload
            )
            return _decode_records(
                section,
                self.record_count,
                self.base_offset,
                self.base_timestamp,
                self.max_timestamp if self.is_log_append_time else None,
            )
        except (ValueError, IndexError) as exc:
            # IndexError: a varint ran off the end; ValueError covers malformed varints,
            # lengths, UTF-8 header keys and codec errors (CorruptCompressedDataError).
            raise ProtocolError(
                f"corrupt record batch at offset {self.base_offset} "
                f"({codec.kafka_name}): {exc or type(exc).__name__}"
            ) from exc

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, records={self.record_count}, "
            f"compression={self.compression.kafka_name}, size={len(self.data)}, "
            f"producer_id={self.producer_id}, producer_epoch={self.producer_epoch}, "
            f"base_sequence={self.base_sequence})"
        )


def _decode_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> list[Record]:
    records: list[Record] = []
    end = len(data)
    pos = 0
    for _ in range(count):
        length, pos = decode_varint(data, pos, 5)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise ValueError(f"record length {length} runs past the records section")
        pos += 1  # attributes: unused in v2
        timestamp_delta, pos = decode_varint(data, pos, 10)
        offset_delta, pos = decode_varint(data, pos, 5)
        key, pos = _read_nullable(data, pos, record_end)
        value, pos = _read_nullable(data, pos, record_end)
        header_count, pos = decode_varint(data, pos, 5)
        if header_count < 0:
            raise ValueError(f"negative header count {header_count}")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(header_count):
            name, pos = _read_nullable(data, pos, record_end)
            if name is None:
                raise ValueError("null header key")
            header_value, pos = _read_nullable(data, pos, record_end)
            headers.append((name.decode("utf-8"), header_value))
        if pos != record_end:
            raise ValueError(f"record declares {length} bytes but its fields end elsewhere")
        timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        records.append(Record(base_offset + offset_delta, timestamp, key, value, tuple(headers)))
    if pos != end:
        raise ValueError(f"{end - pos} bytes after the last of {count} records")
    return records


def _read_nullable(data: bytes, pos: int, limit: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos, 5)
    if length == -1:
        return None, pos
    if length < -1 or pos + length > limit:
        raise ValueError(f"field length {length} runs past its record")
    return data[pos : pos + length], pos + length


def read_batches(data: bytes | bytearray | memoryview) -> Iterator[RecordBatch]:
    """Yield each v2 batch in ``data``, verifying length, magic and CRC as it goes.

    A truncated trailing batch raises ProtocolError instead of being skipped (fetch responses
    may end mid-batch, but every buffer this producer reads holds whole batches).
    """
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    end = len(view)
    pos = 0
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise ProtocolError(f"truncated record batch: {end - pos} bytes left at byte {pos}")
        magic = view[pos + MAGIC_OFFSET]
        if magic != MAGIC:
            raise ProtocolError(f"unsupported record batch magic {magic} at byte {pos}")
        batch_length: int = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        total = batch_length + _LENGTH_PREFIX
        if total < HEADER_SIZE:
            raise ProtocolError(f"record batch length {batch_length} is below the header size")
        if pos + total > end:
            raise ProtocolError(
                f"truncated record batch at byte {pos}: needs {total} bytes, {end - pos} left"
            )
        stored_crc = int.from_bytes(view[pos + 17 : pos + 21], "big")
        actual_crc = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + total])
        if stored_crc != actual_crc:
            raise ProtocolError(
                f"record batch CRC mismatch at byte {pos}: stored {stored_crc:#010x}, "
                f"computed {actual_crc:#010x}"
            )
        yield RecordBatch(bytes(view[pos : pos + total]))
        pos += total


def split_batch(
    batch: RecordBatch | bytes | bytearray | memoryview,
    max_size: int,
    *,
    estimated_ratio: float = 1.0,
) -> list[list[Record]]:
    """Group a refused batch's records into runs that each fit a batch of ``max_size``.

    docs/compression.md, S3: decompress and re-assemble by batch.size. The caller
    resets the ratio estimate first (step 2) and passes it here; each group is decided by a
    scratch ``RecordBatchBuilder`` with the same codec, write limit and ratio, so re-appending a
    group into a real builder configured the same way accepts every record of it.
    """
    if not isinstance(batch, RecordBatch):
        batches = list(read_batches(batch))
        if len(batches) != 1:
            raise ValueError(f"expected exactly one record batch, found {len(batches)}")
        batch = batches[0]
    groups: list[list[Record]] = []
    current: list[Record] = []
    builder: RecordBatchBuilder | None = None
    for record in batch.records:
        if builder is None or not builder.try_append(
            record.timestamp, record.key, record.value, record.headers
        ):
            builder = RecordBatchBuilder(
                bytearray(),
                write_limit=max_size,
                compression=batch.compression,
                estimated_ratio=estimated_ratio,
            )
            builder.try_append(record.timestamp, record.key, record.value, record.headers)
            if current:
                groups.append(current)
            current = []
        current.append(record)
    if current:
        groups.append(current)
    return groups
