"""When a tight ``await send()`` loop hands the event loop a turn, so that the sender runs.

The caller and the sender share one event loop. ``send()`` finishes without suspending while
metadata and memory are there, so a loop that awaits nothing but ``send()`` never lets the
sender run until memory runs out (acks then arrive hundreds of milliseconds late). Java wakes
its sender thread when a batch fills; here ``send()`` yields once after a batch filled or
opened.

One turn per batch is too many when records are large: 1 KiB records fill a 16 KiB batch every
~80 µs, and a sender run per batch makes one small produce request per batch. Measured on the
mock cluster (1 KiB, fire-and-forget): 11 µs CPU per record and 90k records/s with a turn per
batch, 5 µs and 200k with turns at least 0.5 ms apart; 100 B records went from 425k to 490k
records/s, and their ack latency at half that rate did not move (p99 5.3-6.0 ms). So turns
are spaced at least ``min(0.5 ms, linger.ms)`` apart: ``linger.ms=0`` keeps one per batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["MAX_SPACING_S", "SenderTurns"]

#: the longest a tight send loop goes between turns while batches keep filling or opening
MAX_SPACING_S = 0.0005


class SenderTurns:
    """Decides, at each batch that filled or opened, whether ``send()`` should yield."""

    __slots__ = ("_clock", "_next_at", "_spacing")

    def __init__(self, linger_ms: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._spacing = min(MAX_SPACING_S, max(0.0, linger_ms) / 1000)
        self._next_at = -math.inf

    def take(self) -> bool:
        """True when this batch event should give the loop a turn (and starts the spacing)."""
        now = self._clock()
        if now < self._next_at:
            return False
        self._next_at = now + self._spacing
        return True
