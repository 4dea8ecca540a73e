"""Compression codecs for the records section of a v2 batch, and the compression ratio estimator.

Each codec writes exactly what the Java client writes, because brokers (and every consumer that
will read the batch after the broker stores it) only promise to read what Java produces:

- gzip: one standard gzip member (zlib; measured ~1.5x faster than cramjam at level 6).
- snappy: the xerial framing the Java client's ``SnappyOutputStream`` writes; raw (unframed)
  snappy is accepted on decode because librdkafka can produce it.
- lz4: one LZ4 frame with independent 64 KiB blocks, no block or content checksum and no content
  size, which is what Kafka's ``KafkaLZ4BlockOutputStream`` writes and reads.
- zstd: one zstandard frame; decode also accepts frames without a content size (zstd-jni's
  streaming encoder omits it) and concatenated frames.

Decompression is off the hot path (batch splitting, tests), so decoders favour strictness over
speed: cramjam's lz4 and zstd decoders read every concatenated frame instead of silently ignoring
all but the first.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import cramjam
import lz4.frame
import zstandard

__all__ = [
    "COMPRESSION_RATE_ESTIMATION_FACTOR",
    "Codec",
    "CompressionRatioEstimator",
    "CompressionType",
    "compress",
    "decompress",
    "get_codec",
    "validate_level",
]


class CompressionType(enum.IntEnum):
    """The codec id carried in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Accept Kafka's ``compression.type`` spellings so config values pass straight through."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            valid = ", ".join(member.name.lower() for member in cls)
            raise ValueError(
                f"unknown compression.type {name!r}; expected one of {valid}"
            ) from None

    @property
    def kafka_name(self) -> str:
        return self.name.lower()


# The buffer protocol is what every codec library accepts; bytes/bytearray/memoryview cover
# what the builder and reader pass.
BytesLike = bytes | bytearray | memoryview

# Level ranges, chosen to match what the Java client accepts where the underlying library
# agrees (KIP-390); a level outside the range is a user mistake, reported at configuration time.
_LEVEL_RANGES: dict[CompressionType, tuple[int, int]] = {
    CompressionType.GZIP: (0, 9),
    CompressionType.LZ4: (0, 16),
    CompressionType.ZSTD: (-131072, 22),
}

# Defaults. gzip 6 and zstd 3 are Java's. For lz4 we default to the fast compressor (level 0),
# as librdkafka does and as Java did before 3.8: Java >= 3.8 defaults to LZ4-HC level 9, which we
# measured at ~17x the CPU per batch for ~40% smaller output; set level=9 to match it.
DEFAULT_LEVELS: dict[CompressionType, int | None] = {
    CompressionType.NONE: None,
    CompressionType.GZIP: 6,
    CompressionType.SNAPPY: None,
    CompressionType.LZ4: 0,
    CompressionType.ZSTD: 3,
}


def validate_level(codec: CompressionType, level: int | None) -> int | None:
    """Return the effective level, so a bad level fails when configured rather than at seal time."""
    if level is None:
        return DEFAULT_LEVELS[codec]
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"compression level must be an int or None, got {type(level).__name__}")
    bounds = _LEVEL_RANGES.get(codec)
    if bounds is None:
        raise ValueError(f"compression type {codec.kafka_name} does not take a level")
    low, high = bounds
    if not low <= level <= high:
        raise ValueError(
            f"compression level {level} out of range [{low}, {high}] for {codec.kafka_name}"
        )
    return level


class CorruptCompressedDataError(ValueError):
    """Raised by a decoder on input it cannot read; the batch reader translates it."""


# --------------------------------------------------------------------------------------- gzip


def _gzip_compress(data: BytesLike, level: int | None) -> bytes:
    # wbits=31 selects the gzip container (header + CRC32 trailer) that GZIPInputStream expects.
    compressor = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data: BytesLike) -> bytes:
    # Concatenated members are legal gzip (GZIPInputStream reads them), so keep going while
    # input remains.
    out: list[bytes] = []
    remaining = bytes(data)
    try:
        while True:
            decompressor = zlib.decompressobj(31)
            out.append(decompressor.decompress(remaining))
            if not decompressor.eof:
                raise CorruptCompressedDataError("gzip stream is truncated")
            remaining = decompressor.unused_data
            if not remaining:
                return b"".join(out)
    except zlib.error as exc:
        raise CorruptCompressedDataError(f"gzip: {exc}") from exc


# ------------------------------------------------------------------------------------- snappy

# xerial snappy-java framing: magic, then big-endian int32 version and minimum compatible
# version, then blocks of (int32 compressed length, raw snappy block).
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# snappy-java's default block size, so our blocks decode with the same buffers Java allocates.
_XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")


def _snappy_compress(data: BytesLike, level: int | None) -> bytes:
    del level  # snappy has no level; validate_level already refused one
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    compress_raw = cramjam.snappy.compress_raw
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: BytesLike) -> bytes:
    view = memoryview(data)
    try:
        if bytes(view[:8]) != _XERIAL_MAGIC:
            return bytes(cramjam.snappy.decompress_raw(view))
        if len(view) < len(_XERIAL_HEADER):
            raise CorruptCompressedDataError("xerial snappy header is truncated")
        out: list[bytes] = []
        pos = len(_XERIAL_HEADER)
        end = len(view)
        while pos < end:
            if pos + 4 > end:
                raise CorruptCompressedDataError("xerial snappy block length is truncated")
            (block_len,) = _INT32.unpack_from(view, pos)
            pos += 4
            if block_len < 0 or pos + block_len > end:
                raise CorruptCompressedDataError("xerial snappy block is truncated")
            out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + block_len])))
            pos += block_len
        return b"".join(out)
    except cramjam.DecompressionError as exc:
        raise CorruptCompressedDataError(f"snappy: {exc}") from exc


# ---------------------------------------------------------------------------------------- lz4


def _lz4_compress(data: BytesLike, level: int | None) -> bytes:
    # Independent 64 KiB blocks, no checksums, no content size: the frame Kafka's
    # KafkaLZ4BlockOutputStream writes, which every Kafka reader handles.
    result: bytes = lz4.frame.compress(
        data,
        compression_level=0 if level is None else level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    return result


def _lz4_decompress(data: BytesLike) -> bytes:
    try:
        return bytes(cramjam.lz4.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptCompressedDataError(f"lz4: {exc}") from exc


# --------------------------------------------------------------------------------------- zstd


@lru_cache(maxsize=32)
def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    # Compressor objects hold a reusable context; building one per batch costs more than the
    # compression of a small batch.
    return zstandard.ZstdCompressor(level=level)


def _zstd_compress(data: BytesLike, level: int | None) -> bytes:
    result: bytes = _zstd_compressor(3 if level is None else level).compress(data)
    return result


def _zstd_decompress(data: BytesLike) -> bytes:
    try:
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptCompressedDataError(f"zstd: {exc}") from exc


# ----------------------------------------------------------------------------------- registry


@dataclass(frozen=True, slots=True)
class Codec:
    """One codec's pair of functions; the batch builder and reader look these up by id."""

    type: CompressionType
    compress: Callable[[BytesLike, int | None], bytes]
    decompress: Callable[[BytesLike], bytes]


_CODECS: dict[CompressionType, Codec] = {
    CompressionType.GZIP: Codec(CompressionType.GZIP, _gzip_compress, _gzip_decompress),
    CompressionType.SNAPPY: Codec(CompressionType.SNAPPY, _snappy_compress, _snappy_decompress),
    CompressionType.LZ4: Codec(CompressionType.LZ4, _lz4_compress, _lz4_decompress),
    CompressionType.ZSTD: Codec(CompressionType.ZSTD, _zstd_compress, _zstd_decompress),
}


def get_codec(codec: CompressionType) -> Codec:
    try:
        return _CODECS[codec]
    except KeyError:
        raise ValueError(f"no codec for compression type {codec!r}") from None


def compress(codec: CompressionType, data: BytesLike, level: int | None = None) -> bytes:
    """Compress a records section; ``NONE`` returns the input unchanged as bytes."""
    if codec is CompressionType.NONE:
        return bytes(data)
    return get_codec(codec).compress(data, validate_level(codec, level))


def decompress(codec: CompressionType, data: BytesLike) -> bytes:
    """Raises CorruptCompressedDataError (a ValueError) on input the codec cannot read."""
    if codec is CompressionType.NONE:
        return bytes(data)
    return get_codec(codec).decompress(data)


# --------------------------------------------------------------------------- ratio estimator

# Sizing uses the estimate times this factor, so a batch sized on a slightly optimistic estimate
# still fits (docs/compression.md, E4).
COMPRESSION_RATE_ESTIMATION_FACTOR = 1.05
# docs/compression.md, E3: move down by at most 0.005 when compression improves...
COMPRESSION_RATIO_IMPROVING_STEP = 0.005
# ...and up by at most 0.05 when it worsens.
COMPRESSION_RATIO_DETERIORATE_STEP = 0.05


class CompressionRatioEstimator:
    """Estimated compressed/uncompressed ratio per (topic, codec), for sizing open batches.

    The estimate moves slowly toward what sealed batches show, so one unusual batch does not
    make the accumulator pack the next batches too tightly; batch splitting (docs/compression.md,
    S1-S5) covers the cases where it was still too optimistic. Pure: no clock, no I/O.
    """

    __slots__ = ("_ratios",)

    def __init__(self) -> None:
        # (topic, codec) -> current ratio estimate; absent means 1.0 (docs/compression.md,
        # E1).
        self._ratios: dict[tuple[str, CompressionType], float] = {}

    def estimation(self, topic: str, codec: CompressionType) -> float:
        """The current ratio estimate (without the 1.05 sizing factor)."""
        return self._ratios.get((topic, codec), 1.0)

    def sizing_ratio(self, topic: str, codec: CompressionType) -> float:
        """The ratio to size a new batch with: estimate × COMPRESSION_RATE_ESTIMATION_FACTOR."""
        if codec is CompressionType.NONE:
            return 1.0
        return self.estimation(topic, codec) * COMPRESSION_RATE_ESTIMATION_FACTOR

    def forget_topic(self, topic: str) -> None:
        """The topic expired from metadata (metadata.max.idle.ms): drop its estimates, so a
        producer that wrote to many topics does not keep one per topic forever. A later batch
        of the topic starts again from 1.0, the safe (largest) estimate."""
        for key in [k for k in self._ratios if k[0] == topic]:
            del self._ratios[key]

    def update(self, topic: str, codec: CompressionType, observed: float) -> float:
        """Fold in the ratio of a sealed batch; returns the new estimate.

        docs/compression.md, E3: the estimate moves toward the observed ratio by
        at most COMPRESSION_RATIO_IMPROVING_STEP downward and at most
        COMPRESSION_RATIO_DETERIORATE_STEP upward. (The Java client's upward move is
        max(current + 0.05, observed), i.e. at least 0.05; ours never passes the observation.)
        """
        key = (topic, codec)
        current = self._ratios.get(key, 1.0)
        if observed > current:
            new = min(current + COMPRESSION_RATIO_DETERIORATE_STEP, observed)
        elif observed < current:
            new = max(current - COMPRESSION_RATIO_IMPROVING_STEP, observed)
        else:
            return current
        self._ratios[key] = new
        return new

    def reset(self, topic: str, codec: CompressionType, observed: float) -> float:
        """After MESSAGE_TOO_LARGE: docs/compression.md, S2, max(1.0, observed)."""
        new = max(1.0, observed)
        self._ratios[(topic, codec)] = new
        return new

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{topic}/{codec.kafka_name}={ratio:.4f}"
            for (topic, codec), ratio in sorted(self._ratios.items())
        )
        return f"CompressionRatioEstimator({shown})"
