"""Our batches read by decoders that are not ours, and theirs read by ours.

aiokafka is a bench-only dependency, so its tests skip cleanly when it is absent. Its Cython and
pure-Python record implementations are separate decoders and both are exercised.
"""

from __future__ import annotations

import gzip
from typing import Any

import lz4.frame
import pytest
import zstandard

from aiokprod.records import HEADER_SIZE, CompressionType, RecordBatchBuilder, read_batches

TS = 1_700_000_000_000

# (timestamp, key, value, headers): nulls, empties, headers with null values, a negative delta
RECORDS: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (TS, b"key-0", b"value-0" * 20, []),
    (TS + 7, None, b"value-1" * 20, [("trace", b"abc"), ("null", None)]),
    (TS - 4, b"key-2", None, []),
    (TS + 1000, b"", b"", [("empty", b"")]),
    (TS + 3, b"k" * 300, b"v" * 9000, [("ключ", b"\x00\x01")]),
] + [(TS + i, b"key-%d" % i, b"{'n': %d, 'pad': '%s'}" % (i, b"x" * (i % 40)), [])
     for i in range(5, 60)]


def our_batch(codec: CompressionType) -> bytes:
    builder = RecordBatchBuilder(bytearray(16384), write_limit=1 << 20, compression=codec)
    for timestamp, key, value, headers in RECORDS:
        assert builder.try_append(timestamp, key, value, headers)
    return bytes(builder.seal(producer_id=12345, producer_epoch=3, base_sequence=77))


def aiokafka_batch_classes() -> list[Any]:
    records = pytest.importorskip("aiokafka.record.default_records")
    classes = [records._DefaultRecordBatchPy]
    if records.DefaultRecordBatch is not records._DefaultRecordBatchPy:
        classes.append(records.DefaultRecordBatch)  # the Cython implementation
    return classes


@pytest.mark.parametrize("codec", list(CompressionType))
def test_aiokafka_reads_our_batches(codec: CompressionType) -> None:
    data = our_batch(codec)
    for batch_class in aiokafka_batch_classes():
        batch = batch_class(data)
        assert batch.validate_crc()
        assert batch.compression_type == int(codec)
        assert batch.producer_id == 12345
        assert batch.producer_epoch == 3
        assert batch.base_sequence == 77
        assert batch.first_timestamp == TS
        assert batch.max_timestamp == TS + 1000
        assert batch.last_offset_delta == len(RECORDS) - 1
        decoded = list(batch)
        assert len(decoded) == len(RECORDS)
        for offset, (record, (timestamp, key, value, headers)) in enumerate(
            zip(decoded, RECORDS, strict=True)
        ):
            assert record.offset == offset
            assert record.timestamp == timestamp
            assert record.key == key
            assert record.value == value
            assert list(record.headers) == headers


@pytest.mark.parametrize("codec", list(CompressionType))
def test_we_read_aiokafka_batches(codec: CompressionType) -> None:
    records = pytest.importorskip("aiokafka.record.default_records")
    builders = [records._DefaultRecordBatchBuilderPy]
    if records.DefaultRecordBatchBuilder is not records._DefaultRecordBatchBuilderPy:
        builders.append(records.DefaultRecordBatchBuilder)
    for builder_class in builders:
        builder = builder_class(
            magic=2, compression_type=int(codec), is_transactional=0,
            producer_id=99, producer_epoch=1, base_sequence=5, batch_size=1 << 20,
        )
        for offset, (timestamp, key, value, headers) in enumerate(RECORDS):
            assert builder.append(offset, timestamp, key, value, headers) is not None
        (batch,) = list(read_batches(bytes(builder.build())))
        assert batch.compression is codec
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (99, 1, 5)
        assert batch.max_timestamp == TS + 1000
        for offset, (record, (timestamp, key, value, headers)) in enumerate(
            zip(batch.records, RECORDS, strict=True)
        ):
            assert (record.offset, record.timestamp, record.key, record.value) == (
                offset, timestamp, key, value,
            )
            assert list(record.headers) == headers


def records_section(codec: CompressionType) -> bytes:
    return our_batch(codec)[HEADER_SIZE:]


@pytest.mark.parametrize(
    ("codec", "foreign_decompress"),
    [
        (CompressionType.GZIP, gzip.decompress),
        (CompressionType.LZ4, lz4.frame.decompress),
        (CompressionType.ZSTD, lambda data: zstandard.ZstdDecompressor().decompress(data)),
    ],
)
def test_codec_libraries_read_our_records_sections(
    codec: CompressionType, foreign_decompress: Any
) -> None:
    assert foreign_decompress(records_section(codec)) == records_section(CompressionType.NONE)


def test_aiokafka_xerial_snappy_reads_our_records_section() -> None:
    codec = pytest.importorskip("aiokafka.codec")
    section = records_section(CompressionType.SNAPPY)
    assert codec._detect_xerial_stream(section)
    assert codec.snappy_decode(section) == records_section(CompressionType.NONE)
