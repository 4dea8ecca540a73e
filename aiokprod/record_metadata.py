"""RecordMetadata: what a delivery future resolves to.

Below the producer package, on its own: the hooks a user plugs in (an interceptor's
``on_acknowledgement`` receives one), ``send_many``'s results and the batches that complete them
all name it, and none of those may import another's layer for it.
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
