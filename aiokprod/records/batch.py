"""RecordBatch v2 under one import path; the code lives in builder.py and reader.py."""

from ._layout import HEADER_SIZE, restamp
from .builder import Headers, RecordBatchBuilder
from .reader import Record, RecordBatch, read_batches, split_batch

__all__ = [
    "HEADER_SIZE",
    "Headers",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "read_batches",
    "restamp",
    "split_batch",
]
