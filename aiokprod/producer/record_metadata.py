"""RecordMetadata: what a delivery future resolves to.

In its own module so that ``bulk.py`` (``send_many``'s results) and ``batch.py`` (the batches
that complete them) both use it without importing each other.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["RecordMetadata"]


class RecordMetadata(NamedTuple):
    """What the broker told us about one acknowledged record."""

    topic: str
    partition: int
    offset: int  # -1 with acks=0, or when the broker answered DUPLICATE_SEQUENCE_NUMBER
    timestamp: int  # create time, or the broker's log-append time when the topic uses it
    serialized_key_size: int  # -1 for a null key
    serialized_value_size: int  # -1 for a null value
