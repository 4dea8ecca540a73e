"""RecordBatch v2 encoder and decoder: wire bytes, limits, timestamps, restamp, splitting."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod.errors import ProtocolError
from aiokprod.records import (
    HEADER_SIZE,
    CompressionRatioEstimator,
    CompressionType,
    Record,
    RecordBatchBuilder,
    read_batches,
    restamp,
    split_batch,
)
from aiokprod.records._varint import (
    ZIGZAG_TABLE,
    decode_varint,
    encode_unsigned_varint,
    encode_varint,
    varint_size,
)
from support.examples import examples

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
TS = 1_700_000_000_000


def new_builder(write_limit: int = 16384, **kwargs: object) -> RecordBatchBuilder:
    return RecordBatchBuilder(bytearray(write_limit), write_limit=write_limit, **kwargs)  # type: ignore[arg-type]


def read_one(data: bytes | bytearray | memoryview) -> list[Record]:
    (batch,) = list(read_batches(data))
    return batch.records


# ---------------------------------------------------------------------------------- varints

# (value, zigzag varint bytes) worked out by hand from the protobuf zigzag definition.
VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (8192, "808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "hex_bytes"), VARINT_VECTORS)
def test_varint_vectors(value: int, hex_bytes: str) -> None:
    encoded = bytes.fromhex(hex_bytes)
    assert encode_varint(value) == encoded
    assert varint_size(value) == len(encoded)
    assert decode_varint(encoded + b"\xaa", 0) == (value, len(encoded))


def test_lookup_table_matches_the_loop_encoder() -> None:
    assert all(ZIGZAG_TABLE[i] == encode_varint(i) for i in range(len(ZIGZAG_TABLE)))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(b"\x00" + encoded, 1, 10) == (value, 1 + len(encoded))
    assert len(encoded) == varint_size(value)


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint32_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) <= 5
    assert decode_varint(encoded, 0, 5) == (value, len(encoded))


def test_varint_rejects_out_of_range_and_overlong() -> None:
    with pytest.raises(ValueError):
        encode_varint(INT64_MAX + 1)
    with pytest.raises(ValueError):
        encode_unsigned_varint(-1)
    # int32 max + 1 fits in 5 bytes but not in an int32 varint field
    with pytest.raises(ValueError):
        decode_varint(encode_varint(INT32_MAX + 1), 0, 5)
    with pytest.raises(ValueError):
        decode_varint(b"\xff" * 10 + b"\x01", 0, 10)
    with pytest.raises(IndexError):
        decode_varint(b"\x80\x80", 0, 10)


def test_crc32c_known_vector() -> None:
    assert crc32c(b"123456789") == 0xE3069283


# ------------------------------------------------------------------------------ wire bytes


def test_one_record_batch_bytes_worked_out_from_the_spec() -> None:
    builder = new_builder()
    assert builder.try_append(1000, b"k", b"v")
    sealed = bytes(builder.seal())
    record = bytes.fromhex(
        "10"  # length 8, zigzag 16
        "00"  # attributes
        "00"  # timestamp delta 0
        "00"  # offset delta 0
        "02" "6b"  # key length 1, "k"
        "02" "76"  # value length 1, "v"
        "00"  # no headers
    )
    after_crc = (
        bytes.fromhex("0000")  # attributes: no codec, CreateTime, not transactional
        + bytes.fromhex("00000000")  # last offset delta
        + (1000).to_bytes(8, "big")  # base timestamp
        + (1000).to_bytes(8, "big")  # max timestamp
        + b"\xff" * 8  # producer id -1
        + b"\xff" * 2  # producer epoch -1
        + b"\xff" * 4  # base sequence -1
        + bytes.fromhex("00000001")  # record count
        + record
    )
    expected = (
        bytes(8)  # base offset 0
        + (70 - 12).to_bytes(4, "big")  # batch length: bytes after this field
        + b"\xff\xff\xff\xff"  # partition leader epoch -1
        + b"\x02"  # magic
        + crc32c(after_crc).to_bytes(4, "big")
        + after_crc
    )
    assert len(expected) == 70
    assert sealed == expected


def test_header_fields_land_at_their_offsets() -> None:
    builder = new_builder()
    builder.try_append(TS + 5, None, b"a")
    builder.try_append(TS, None, b"b")
    builder.try_append(TS + 9, None, b"c")
    sealed = builder.seal(
        producer_id=0x0102030405060708, producer_epoch=0x0A0B, base_sequence=0x11223344,
        transactional=True,
    )
    data = bytes(sealed)
    assert struct.unpack_from(">q", data, 0)[0] == 0
    assert struct.unpack_from(">i", data, 8)[0] == len(data) - 12
    assert struct.unpack_from(">i", data, 12)[0] == -1
    assert data[16] == 2
    assert struct.unpack_from(">I", data, 17)[0] == crc32c(data[21:])
    assert struct.unpack_from(">h", data, 21)[0] == 0x10  # transactional bit
    assert struct.unpack_from(">i", data, 23)[0] == 2  # last offset delta
    assert struct.unpack_from(">q", data, 27)[0] == TS + 5  # first record's timestamp
    assert struct.unpack_from(">q", data, 35)[0] == TS + 9
    assert struct.unpack_from(">q", data, 43)[0] == 0x0102030405060708
    assert struct.unpack_from(">h", data, 51)[0] == 0x0A0B
    assert struct.unpack_from(">i", data, 53)[0] == 0x11223344
    assert struct.unpack_from(">i", data, 57)[0] == 3
    (batch,) = list(read_batches(data))
    assert batch.is_transactional and not batch.is_control
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        0x0102030405060708, 0x0A0B, 0x11223344,
    )


@pytest.mark.parametrize("codec", list(CompressionType))
def test_codec_id_in_attributes(codec: CompressionType) -> None:
    builder = new_builder(compression=codec)
    builder.try_append(TS, None, b"x" * 50)
    data = bytes(builder.seal(is_control=True))
    assert struct.unpack_from(">h", data, 21)[0] == int(codec) | 0x20
    (batch,) = list(read_batches(data))
    assert batch.compression is codec and batch.is_control


# ---------------------------------------------------------------------- records round trip


def test_timestamps_negative_and_large_deltas() -> None:
    builder = new_builder()
    stamps = [TS, TS - 10, TS + 5, TS - 3_000_000_000, TS + 10**9]
    for stamp in stamps:
        assert builder.try_append(stamp, None, b"v")
    assert builder.base_timestamp == TS
    assert builder.max_timestamp == TS + 10**9
    (batch,) = list(read_batches(builder.seal()))
    assert batch.base_timestamp == TS and batch.max_timestamp == TS + 10**9
    assert [r.timestamp for r in batch.records] == stamps
    assert [r.offset for r in batch.records] == list(range(5))


def test_explicit_base_timestamp() -> None:
    builder = new_builder(base_timestamp=TS - 100)
    builder.try_append(TS, None, b"v")
    (batch,) = list(read_batches(builder.seal()))
    assert batch.base_timestamp == TS - 100
    assert batch.records[0].timestamp == TS


def test_null_versus_empty_keys_values_and_headers() -> None:
    builder = new_builder()
    cases: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]] = [
        (None, None, None),
        (b"", b"", []),
        (None, b"", [("a", None)]),
        (b"", None, [("", b""), ("ключ", b"\x00\xff"), ("n", None)]),
    ]
    for key, value, headers in cases:
        assert builder.try_append(TS, key, value, headers)
    records = read_one(builder.seal())
    for record, (key, value, headers) in zip(records, cases, strict=True):
        assert record.key == key
        assert record.value == value
        assert record.headers == tuple(headers or ())


def test_large_fields_use_the_general_encoder() -> None:
    big_key = bytes(range(256)) * 40  # 10240 bytes, beyond the varint table
    big_value = b"v" * 70_000
    builder = new_builder(write_limit=200_000)
    assert builder.try_append(TS, big_key, big_value, [("h" * 9000, b"x" * 9000)])
    assert builder.try_append(TS, None, b"small")
    records = read_one(builder.seal())
    assert records[0].key == big_key and records[0].value == big_value
    assert records[0].headers == (("h" * 9000, b"x" * 9000),)
    assert records[1].value == b"small"


def test_many_records_past_the_offset_delta_table() -> None:
    count = len(ZIGZAG_TABLE) + 200
    builder = new_builder(write_limit=200_000)
    taken = builder.append_many(TS, [None] * count)
    assert taken == count
    for i in range(10):
        assert builder.try_append(TS + i, b"k", None)
    records = read_one(builder.seal())
    assert len(records) == count + 10
    assert records[-1].offset == count + 9 and records[-1].key == b"k"


record_strategy = st.tuples(
    st.integers(-(10**6), 10**6),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=200),
    st.none()
    | st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3),
)


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(record_strategy, min_size=1, max_size=30),
    st.sampled_from(list(CompressionType)),
)
def test_round_trip_any_records_any_codec(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]],
    codec: CompressionType,
) -> None:
    builder = new_builder(write_limit=1 << 20, compression=codec)
    for delta, key, value, headers in records:
        assert builder.try_append(TS + delta, key, value, headers)
    (batch,) = list(read_batches(builder.seal()))
    assert batch.compression is codec
    assert batch.record_count == len(records) and batch.last_offset_delta == len(records) - 1
    assert batch.max_timestamp == TS + max(r[0] for r in records)
    decoded = batch.records
    for (delta, key, value, headers), record in zip(records, decoded, strict=True):
        assert (record.timestamp, record.key, record.value, record.headers) == (
            TS + delta, key, value, tuple(headers or ()),
        )


# -------------------------------------------------------------------------- write limits


def encoded_record_size(builder_limit: int, *args: object) -> int:
    """Size a record takes, measured on a scratch builder."""
    scratch = new_builder(builder_limit)
    before = len(scratch.buffer)
    scratch.try_append(*args)  # type: ignore[arg-type]
    return len(scratch.buffer) - before


def test_try_append_refuses_past_the_limit_and_writes_nothing() -> None:
    first = encoded_record_size(16384, TS, None, b"a" * 100)
    second = encoded_record_size(16384, TS, None, b"b" * 100)  # same size at offset delta 1
    limit = HEADER_SIZE + first + second
    builder = new_builder(limit)
    assert builder.try_append(TS, None, b"a" * 100)
    assert builder.try_append(TS, None, b"b" * 100)  # exactly at the limit
    snapshot = bytes(builder.buffer)
    assert not builder.try_append(TS + 1, None, b"c")
    assert bytes(builder.buffer) == snapshot
    assert builder.record_count == 2 and builder.max_timestamp == TS
    assert builder.estimated_size() == limit
    tight = new_builder(limit - 1)
    assert tight.try_append(TS, None, b"a" * 100)
    assert not tight.try_append(TS, None, b"b" * 100)


def test_a_lone_oversize_record_always_goes_into_an_empty_batch() -> None:
    builder = new_builder(100)
    assert builder.try_append(TS, None, b"x" * 1000)
    assert not builder.try_append(TS, None, b"y")
    assert read_one(builder.seal())[0].value == b"x" * 1000
    many = new_builder(100)
    assert many.append_many(TS, [b"x" * 1000, b"y"]) == 1


def test_is_full_after_typical_records_stop_fitting() -> None:
    builder = new_builder(1000)
    assert not builder.is_full()
    builder.try_append(TS, None, b"x" * 100)
    assert not builder.is_full()
    while builder.try_append(TS, None, b"x" * 100):
        pass
    assert builder.is_full()
    builder.seal()
    assert builder.is_full()


def test_compressed_batch_sizes_by_estimated_compressed_size() -> None:
    value = b"abcdefgh" * 25  # very compressible
    builder = new_builder(16384, compression=CompressionType.LZ4, estimated_ratio=0.2)
    while builder.try_append(TS, None, value):
        pass
    # the uncompressed records exceed write_limit; the estimate (ratio x 1.05) stays within it
    assert builder.uncompressed_size > 16384
    assert len(builder.buffer) > 16384
    assert builder.estimated_size() <= 16384
    record = encoded_record_size(16384, TS, None, value)
    assert HEADER_SIZE + (builder.uncompressed_size + record) * 0.2 * 1.05 > 16384
    uncompressed = builder.uncompressed_size
    sealed = builder.seal()
    assert len(sealed) < 16384
    assert builder.uncompressed_size == uncompressed
    assert builder.observed_ratio == pytest.approx((len(sealed) - HEADER_SIZE) / uncompressed)
    assert all(r.value == value for r in read_one(sealed))


def test_estimator_supplies_the_ratio_and_hears_the_observed_one() -> None:
    estimator = CompressionRatioEstimator()
    builder = new_builder(compression=CompressionType.GZIP, estimator=estimator, topic="t")
    assert builder.estimated_size() == HEADER_SIZE
    builder.append_many(TS, [b"z" * 100] * 20)
    assert builder.estimated_size() == HEADER_SIZE + -(-builder.uncompressed_size * 105 // 100)
    builder.seal()
    assert builder.observed_ratio is not None and builder.observed_ratio < 0.5
    assert estimator.estimation("t", CompressionType.GZIP) == pytest.approx(0.995)
    assert estimator.estimation("other", CompressionType.GZIP) == 1.0


# --------------------------------------------------------------------------- append_many


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
@pytest.mark.parametrize("with_keys", [False, True])
@pytest.mark.parametrize("with_headers", [False, True])
def test_append_many_writes_what_try_append_writes(
    codec: CompressionType, with_keys: bool, with_headers: bool
) -> None:
    values: list[bytes | None] = [b"v%03d" % i * 10 if i % 7 else None for i in range(300)]
    keys: list[bytes | None] | None = (
        [b"k%d" % i if i % 5 else None for i in range(300)] if with_keys else None
    )
    headers = [[("h", b"%d" % i)] if i % 3 else None for i in range(300)] if with_headers else None
    one = new_builder(4000, compression=codec)
    taken = 0
    for i in range(300):
        if not one.try_append(TS + 3, None if keys is None else keys[i], values[i],
                              None if headers is None else headers[i]):
            break
        taken += 1
    many = new_builder(4000, compression=codec)
    many.try_append(TS, b"first", b"record")
    one_first = new_builder(4000, compression=codec)
    one_first.try_append(TS, b"first", b"record")
    for i in range(300):
        if not one_first.try_append(TS + 3, None if keys is None else keys[i], values[i],
                                    None if headers is None else headers[i]):
            break
    many_taken = many.append_many(TS + 3, values, keys, headers)
    assert 0 < many_taken < 300
    assert many.record_count == one_first.record_count
    assert bytes(many.seal()) == bytes(one_first.seal())
    fresh = new_builder(4000, compression=codec)
    assert fresh.append_many(TS + 3, values, keys, headers) == taken


def test_append_many_start_and_validation() -> None:
    values = [b"%d" % i for i in range(10)]
    builder = new_builder()
    assert builder.append_many(TS, values, start=4) == 6
    assert [r.value for r in read_one(builder.seal())] == values[4:]
    other = new_builder()
    with pytest.raises(ValueError):
        other.append_many(TS, values, keys=[b"k"])
    with pytest.raises(ValueError):
        other.append_many(TS, values, headers=[None])
    with pytest.raises(ValueError):
        other.append_many(TS, values, start=11)
    assert other.append_many(TS, values, start=10) == 0
    assert other.record_count == 0 and other.base_timestamp is None


def test_append_many_negative_delta_and_big_values() -> None:
    builder = new_builder(100_000)
    builder.try_append(TS, None, b"x")
    assert builder.append_many(TS - 50, [b"a", b"b" * 9000, b"c"]) == 3
    records = read_one(builder.seal())
    assert [r.timestamp for r in records] == [TS, TS - 50, TS - 50, TS - 50]
    assert records[2].value == b"b" * 9000 and records[3].value == b"c"
    assert [r.offset for r in records] == [0, 1, 2, 3]


# ------------------------------------------------------------------------ sealing, restamp


def test_sealed_and_empty_batch_misuse() -> None:
    with pytest.raises(ValueError):
        new_builder().seal()
    builder = new_builder()
    builder.try_append(TS, None, b"v")
    view = builder.seal()
    assert builder.is_sealed
    with pytest.raises(RuntimeError):
        builder.try_append(TS, None, b"w")
    with pytest.raises(RuntimeError):
        builder.append_many(TS, [b"w"])
    with pytest.raises(RuntimeError):
        builder.seal()
    assert builder.estimated_size() == len(view)
    assert len(read_one(view)) == 1
    with pytest.raises(ValueError):
        new_builder(60)


def test_builder_discards_stale_buffer_contents() -> None:
    buffer = bytearray(b"\xee" * 500)
    builder = RecordBatchBuilder(buffer, write_limit=500)
    builder.try_append(TS, None, b"v")
    view = builder.seal()
    assert view.obj is buffer
    assert read_one(view)[0].value == b"v"


@pytest.mark.parametrize("codec", list(CompressionType))
def test_restamp_rewrites_producer_fields_and_crc_only(codec: CompressionType) -> None:
    builder = new_builder(compression=codec)
    builder.append_many(TS, [b"value %d" % i for i in range(50)])
    view = builder.seal(producer_id=7, producer_epoch=1, base_sequence=10)
    before = bytes(view)
    restamp(view, producer_id=7, producer_epoch=2, base_sequence=0)
    after = bytes(view)
    changed = {i for i in range(len(before)) if before[i] != after[i]}
    assert changed <= set(range(17, 21)) | set(range(43, 57))
    assert changed & set(range(17, 21)), "the CRC must change with the producer fields"
    (batch,) = list(read_batches(after))  # verifies the new CRC
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 2, 0)
    assert [r.value for r in batch.records] == [b"value %d" % i for i in range(50)]
    assert after[HEADER_SIZE:] == before[HEADER_SIZE:]


def test_restamp_rejects_non_batches() -> None:
    with pytest.raises(ValueError):
        restamp(bytearray(70), producer_id=1, producer_epoch=0, base_sequence=0)
    builder = new_builder()
    builder.try_append(TS, None, b"v")
    data = bytearray(builder.seal()) + b"\x00"
    with pytest.raises(ValueError):
        restamp(data, producer_id=1, producer_epoch=0, base_sequence=0)


# ------------------------------------------------------------------------------- reader


def sealed_batch(codec: CompressionType = CompressionType.NONE, n: int = 5) -> bytes:
    builder = new_builder(compression=codec)
    builder.append_many(TS, [b"record-%d" % i for i in range(n)], [b"k"] * n)
    return bytes(builder.seal(producer_id=3, producer_epoch=0, base_sequence=0))


def fix_crc(data: bytearray) -> bytearray:
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return data


def test_reads_concatenated_batches() -> None:
    data = sealed_batch() + sealed_batch(CompressionType.GZIP, 3)
    batches = list(read_batches(bytearray(data)))
    assert [b.record_count for b in batches] == [5, 3]
    assert [len(b) for b in batches] == [5, 3]
    assert batches[1].records[2] == Record(2, TS, b"k", b"record-2", ())
    assert sum(b.size_in_bytes for b in batches) == len(data)
    assert list(read_batches(b"")) == []


@pytest.mark.parametrize("cut", [1, 30, 61, 69])
def test_truncated_batch_raises(cut: int) -> None:
    data = sealed_batch()
    with pytest.raises(ProtocolError):
        list(read_batches(data + data[:cut]))
    with pytest.raises(ProtocolError):
        list(read_batches(data[:-cut]))


def test_crc_mismatch_raises() -> None:
    data = bytearray(sealed_batch())
    data[-3] ^= 0x01
    with pytest.raises(ProtocolError, match="CRC"):
        list(read_batches(data))


def test_unsupported_magic_raises() -> None:
    data = bytearray(sealed_batch())
    data[16] = 1
    with pytest.raises(ProtocolError, match="magic"):
        list(read_batches(data))


def test_unknown_codec_raises() -> None:
    data = bytearray(sealed_batch())
    data[22] |= 0x05
    with pytest.raises(ProtocolError, match="compression"):
        list(read_batches(fix_crc(data)))


@pytest.mark.parametrize(
    ("position", "replacement"),
    [
        (HEADER_SIZE, b"\x7e"),  # first record claims 63 bytes
        (HEADER_SIZE + 4, b"\x09"),  # key length -5
        (-1, b"\x02"),  # last record claims one header that is not there
    ],
)
def test_corrupt_records_with_valid_crc_raise(position: int, replacement: bytes) -> None:
    data = bytearray(sealed_batch())
    data[position : position + 1 if position != -1 else None] = replacement
    (batch,) = list(read_batches(fix_crc(data)))
    with pytest.raises(ProtocolError):
        _ = batch.records


def test_record_count_mismatch_raises() -> None:
    data = bytearray(sealed_batch())
    struct.pack_into(">i", data, 57, 4)  # one record left over
    (batch,) = list(read_batches(fix_crc(data)))
    with pytest.raises(ProtocolError, match="after the last"):
        _ = batch.records
    struct.pack_into(">i", data, 57, 6)  # one record missing
    (batch,) = list(read_batches(fix_crc(data)))
    with pytest.raises(ProtocolError):
        _ = batch.records


def test_corrupt_compressed_payload_raises() -> None:
    data = bytearray(sealed_batch(CompressionType.ZSTD, 20))
    data[HEADER_SIZE + 6] ^= 0xFF
    (batch,) = list(read_batches(fix_crc(data)))
    with pytest.raises(ProtocolError, match="zstd"):
        _ = batch.records


def test_log_append_time_batches_use_max_timestamp() -> None:
    data = bytearray(sealed_batch())
    data[22] |= 0x08
    struct.pack_into(">q", data, 35, 42)
    (batch,) = list(read_batches(fix_crc(data)))
    assert batch.is_log_append_time
    assert {r.timestamp for r in batch.records} == {42}


# ------------------------------------------------------------------------------ splitting


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.SNAPPY])
def test_split_batch_groups_fit_and_preserve_order(codec: CompressionType) -> None:
    builder = new_builder(1 << 20, compression=codec)
    values = [bytes([i % 251]) * (50 + i % 90) for i in range(400)]
    headers = [[("i", b"%d" % i)] for i in range(400)]
    for i, value in enumerate(values):
        builder.try_append(TS + i % 17 - 8, b"k%d" % i, value, headers[i])
    sealed = bytes(builder.seal())
    groups = split_batch(sealed, 4096, estimated_ratio=1.0)
    assert len(groups) > 1
    flat = [record for group in groups for record in group]
    assert [r.value for r in flat] == values
    assert [r.headers for r in flat] == [tuple(h) for h in headers]
    for group in groups:
        again = new_builder(4096, compression=codec, estimated_ratio=1.0)
        for record in group:
            assert again.try_append(record.timestamp, record.key, record.value, record.headers)
        assert again.estimated_size() <= 4096
        if codec is CompressionType.NONE:
            assert len(again.seal()) <= 4096
    (parsed,) = list(read_batches(sealed))
    assert split_batch(parsed, 4096, estimated_ratio=1.0) == groups


def test_split_batch_keeps_a_lone_oversize_record_alone() -> None:
    builder = new_builder(1 << 16)
    builder.append_many(TS, [b"a" * 10, b"b" * 5000, b"c" * 10])
    groups = split_batch(builder.seal(), 1000)
    assert [[r.value for r in g] for g in groups] == [[b"a" * 10], [b"b" * 5000], [b"c" * 10]]
    with pytest.raises(ValueError):
        split_batch(sealed_batch() + sealed_batch(), 1000)


def test_append_many_stops_at_stop_and_takes_long_lists_on_the_fast_path() -> None:
    from aiokprod.records import RecordBatchBuilder, read_batches

    values = [f"v{i}".encode() for i in range(20_000)]
    builder = RecordBatchBuilder(bytearray(), write_limit=16384)
    assert builder.append_many(1000, values, start=5, stop=9) == 4
    taken = builder.append_many(1000, values, start=9)
    assert 100 < taken < 20_000 - 9  # the batch filled up before the list ended
    batch = next(read_batches(builder.seal()))
    assert [r.value for r in batch.records] == values[5:9 + taken]
