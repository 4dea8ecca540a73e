"""Kafka RecordBatch v2: the encoder the accumulator appends into, the decoder, and codecs."""

from ._layout import HEADER_SIZE, restamp
from .builder import RecordBatchBuilder
from .compression import (
    COMPRESSION_RATE_ESTIMATION_FACTOR,
    CompressionRatioEstimator,
    CompressionType,
    compress,
    decompress,
    validate_level,
)
from .reader import Record, RecordBatch, read_batches, split_batch
from .record_encoding import Headers

__all__ = [
    "COMPRESSION_RATE_ESTIMATION_FACTOR",
    "HEADER_SIZE",
    "CompressionRatioEstimator",
    "CompressionType",
    "Headers",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "compress",
    "decompress",
    "read_batches",
    "restamp",
    "split_batch",
    "validate_level",
]
