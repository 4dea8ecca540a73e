"""Codecs (framing as Kafka's Java client writes it) and the compression ratio estimator."""

from __future__ import annotations

import gzip
import random
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from aiokprod.records.compression import (
    COMPRESSION_RATE_ESTIMATION_FACTOR,
    CompressionRatioEstimator,
    CompressionType,
    CorruptCompressedDataError,
    compress,
    decompress,
    validate_level,
)

CODECS = [c for c in CompressionType if c is not CompressionType.NONE]


def sample(size: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"user", b"event", b"12", b"{", b"}", b","]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) if rng.random() < 0.8 else bytes([rng.randrange(256)])
    return bytes(out[:size])


# ------------------------------------------------------------------------------------ names


@pytest.mark.parametrize(
    ("name", "codec"),
    [("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4), (" ZSTD ", 4)],
)
def test_from_name_uses_kafka_compression_type_values(name: str, codec: int) -> None:
    assert CompressionType.from_name(name) == codec
    assert CompressionType(codec).kafka_name == name.strip().lower()


def test_from_name_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="gzip"):
        CompressionType.from_name("brotli")


def test_levels() -> None:
    assert validate_level(CompressionType.GZIP, None) == 6
    assert validate_level(CompressionType.ZSTD, None) == 3
    assert validate_level(CompressionType.LZ4, 9) == 9
    assert validate_level(CompressionType.SNAPPY, None) is None
    for codec, bad in [(CompressionType.GZIP, 10), (CompressionType.ZSTD, 23),
                       (CompressionType.LZ4, 17), (CompressionType.SNAPPY, 1),
                       (CompressionType.NONE, 1)]:
        with pytest.raises(ValueError):
            validate_level(codec, bad)
    with pytest.raises(TypeError):
        validate_level(CompressionType.GZIP, True)


# ------------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 100, 40_000, 200_000])
def test_round_trip(codec: CompressionType, size: int) -> None:
    data = sample(size)
    for payload in (data, bytearray(data), memoryview(data)):
        assert decompress(codec, compress(codec, payload)) == data


@pytest.mark.parametrize(("codec", "level"), [(CompressionType.GZIP, 1),
                                             (CompressionType.GZIP, 9),
                                             (CompressionType.LZ4, 9),
                                             (CompressionType.ZSTD, 19),
                                             (CompressionType.ZSTD, -5)])
def test_levels_change_output_and_still_round_trip(codec: CompressionType, level: int) -> None:
    data = sample(50_000)
    out = compress(codec, data, level)
    assert decompress(codec, out) == data
    assert out != compress(codec, data)


def test_none_is_identity() -> None:
    assert compress(CompressionType.NONE, bytearray(b"abc")) == b"abc"
    assert decompress(CompressionType.NONE, memoryview(b"abc")) == b"abc"


# ---------------------------------------------------------------- framing, as Java writes it


def test_gzip_is_one_standard_member_readable_by_gzip() -> None:
    data = sample(30_000)
    out = compress(CompressionType.GZIP, data)
    assert out[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(out) == data
    decompressor = zlib.decompressobj(31)
    assert decompressor.decompress(out) == data and decompressor.unused_data == b""


def test_gzip_reads_concatenated_members_and_rejects_truncation() -> None:
    assert decompress(CompressionType.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    with pytest.raises(CorruptCompressedDataError):
        decompress(CompressionType.GZIP, gzip.compress(sample(1000))[:-5])


def test_snappy_uses_xerial_framing_with_32k_blocks() -> None:
    data = sample(70_000)
    out = compress(CompressionType.SNAPPY, data)
    assert out[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack_from(">ii", out, 8) == (1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(out)
    assert [len(b) for b in blocks] == [32768, 32768, 70_000 - 65536]
    assert b"".join(blocks) == data


def test_snappy_decodes_raw_unframed_input() -> None:
    data = sample(5000)
    assert decompress(CompressionType.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_rejects_broken_framing() -> None:
    out = compress(CompressionType.SNAPPY, sample(5000))
    for broken in (out[:-1], out[:18], out[:12]):
        with pytest.raises(CorruptCompressedDataError):
            decompress(CompressionType.SNAPPY, broken)


def test_lz4_frame_flags_match_kafka() -> None:
    data = sample(150_000)
    out = compress(CompressionType.LZ4, data)
    assert out[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = out[4], out[5]
    assert flg >> 6 == 0b01  # version 1
    assert flg & 0x20  # independent blocks
    assert not flg & 0x10  # no block checksum
    assert not flg & 0x08  # no content size
    assert not flg & 0x04  # no content checksum
    assert (bd >> 4) & 0x7 == 4  # 64 KiB maximum block size
    assert lz4.frame.decompress(out) == data
    info = lz4.frame.get_frame_info(out)
    assert info["block_linked"] is False and info["content_checksum"] is False


def test_lz4_reads_foreign_frames_and_rejects_garbage() -> None:
    data = sample(10_000)
    linked = lz4.frame.compress(data, block_linked=True, content_checksum=True, store_size=True)
    assert decompress(CompressionType.LZ4, linked) == data
    with pytest.raises(CorruptCompressedDataError):
        decompress(CompressionType.LZ4, b"not lz4 at all")
    with pytest.raises(CorruptCompressedDataError):
        decompress(CompressionType.LZ4, linked[:-7])


def test_zstd_frames_with_and_without_content_size() -> None:
    data = sample(100_000)
    out = compress(CompressionType.ZSTD, data)
    assert zstandard.ZstdDecompressor().decompress(out) == data
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.get_frame_parameters(streamed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(CompressionType.ZSTD, streamed) == data
    assert decompress(CompressionType.ZSTD, streamed + out) == data + data
    with pytest.raises(CorruptCompressedDataError):
        decompress(CompressionType.ZSTD, streamed[:-4])


# ----------------------------------------------------------------------- ratio estimator


def test_estimator_starts_at_one_per_topic_and_codec() -> None:
    estimator = CompressionRatioEstimator()
    assert estimator.estimation("t", CompressionType.LZ4) == 1.0
    assert estimator.sizing_ratio("t", CompressionType.LZ4) == COMPRESSION_RATE_ESTIMATION_FACTOR
    assert estimator.sizing_ratio("t", CompressionType.NONE) == 1.0
    estimator.update("t", CompressionType.LZ4, 0.3)
    assert estimator.estimation("t", CompressionType.ZSTD) == 1.0
    assert estimator.estimation("u", CompressionType.LZ4) == 1.0


def test_estimator_improves_by_at_most_0_005() -> None:
    estimator = CompressionRatioEstimator()
    assert estimator.update("t", CompressionType.GZIP, 0.3) == pytest.approx(0.995)
    for _ in range(9):
        estimator.update("t", CompressionType.GZIP, 0.3)
    assert estimator.estimation("t", CompressionType.GZIP) == pytest.approx(0.95)
    assert estimator.sizing_ratio("t", CompressionType.GZIP) == pytest.approx(0.95 * 1.05)
    # a small improvement lands exactly on the observed ratio
    assert estimator.update("t", CompressionType.GZIP, 0.948) == pytest.approx(0.948)


def test_estimator_worsens_by_at_most_0_05() -> None:
    estimator = CompressionRatioEstimator()
    for _ in range(130):  # learn 0.4, 0.005 at a time
        estimator.update("t", CompressionType.ZSTD, 0.4)
    assert estimator.estimation("t", CompressionType.ZSTD) == pytest.approx(0.4)
    assert estimator.update("t", CompressionType.ZSTD, 0.9) == pytest.approx(0.45)
    assert estimator.update("t", CompressionType.ZSTD, 0.9) == pytest.approx(0.5)
    assert estimator.update("t", CompressionType.ZSTD, 0.51) == pytest.approx(0.51)
    assert estimator.update("t", CompressionType.ZSTD, 0.51) == pytest.approx(0.51)


def test_estimator_reset_after_message_too_large() -> None:
    estimator = CompressionRatioEstimator()
    for _ in range(100):
        estimator.update("t", CompressionType.LZ4, 0.2)
    assert estimator.estimation("t", CompressionType.LZ4) == pytest.approx(0.5)
    assert estimator.reset("t", CompressionType.LZ4, 0.7) == 1.0
    assert estimator.reset("t", CompressionType.LZ4, 1.3) == 1.3
    assert estimator.estimation("t", CompressionType.LZ4) == 1.3
    assert "t/lz4=1.3000" in repr(estimator)
