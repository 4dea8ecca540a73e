"""Delivery bookkeeping for ``send_many``: one future for many records, no object per record.

A bulk call appends runs of records straight into batches (``RecordBatchBuilder.append_many``)
and each batch remembers which run of the call it holds as one *segment*. When a batch is
acknowledged, a segment costs one tuple, whatever its length; when every segment is done the
call's single future resolves to a ``SendManyResult``, which computes a record's
``RecordMetadata`` only when asked for it. That is what lets ``send_many`` spend a fraction of a
microsecond per record where ``send`` needs a future, a tuple and a ``RecordMetadata``.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import overload

from aiokprod.record_metadata import RecordMetadata

__all__ = ["BulkDelivery", "BulkProgress", "SendManyResult"]


class SendManyResult(Sequence[RecordMetadata]):
    """The outcome of one ``send_many`` call, in input order, computed lazily."""

    __slots__ = ("_bulk", "_inverse", "_starts")

    def __init__(self, bulk: BulkDelivery) -> None:
        self._bulk = bulk
        bulk.segments.sort()
        self._starts = [s[0] for s in bulk.segments]
        self._inverse: list[int] | None = None  # original index → position, if reordered

    def __len__(self) -> int:
        return self._bulk.count

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...

    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._bulk.count))]
        bulk = self._bulk
        if index < 0:
            index += bulk.count
        if not 0 <= index < bulk.count:
            raise IndexError(f"record {index} of {bulk.count}")
        position = index
        if bulk.order is not None:
            if self._inverse is None:
                inverse = [0] * bulk.count
                for pos, original in enumerate(bulk.order):
                    inverse[original] = pos
                self._inverse = inverse
            position = self._inverse[index]
        start, _count, partition, first_offset, append_time = \
            bulk.segments[bisect_right(self._starts, position) - 1]
        offset = -1 if first_offset < 0 else first_offset + (position - start)
        key = None if bulk.keys is None else bulk.keys[index]
        value = bulk.values[index]
        return RecordMetadata(
            bulk.topic, partition, offset, append_time if append_time >= 0 else bulk.timestamp,
            -1 if key is None else len(key), -1 if value is None else len(value))

    def __iter__(self) -> Iterator[RecordMetadata]:
        for i in range(self._bulk.count):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same metadata (e.g. a list), like the list it stands for."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def partitions(self) -> dict[int, int]:
        """Records per partition, without building any ``RecordMetadata``."""
        out: dict[int, int] = {}
        for _start, count, partition, _offset, _t in self._bulk.segments:
            out[partition] = out.get(partition, 0) + count
        return out

    def __repr__(self) -> str:
        return f"<SendManyResult topic={self._bulk.topic!r} records={self._bulk.count}>"


class BulkDelivery:
    """One ``send_many`` call in flight: counts its records down as batches complete."""

    __slots__ = ("count", "future", "keys", "order", "pending", "segments", "timestamp",
                 "topic", "values")

    def __init__(self, future: asyncio.Future[SendManyResult], topic: str,
                 values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                 timestamp: int, order: list[int] | None) -> None:
        self.future = future  # resolved once, when ``pending`` reaches 0 or on the first error
        self.topic = topic
        self.values = values  # kept to report serialized sizes lazily
        self.keys = keys
        self.timestamp = timestamp  # one create time for the whole call
        # position → original index when records were regrouped by partition (keyed calls)
        self.order = order
        self.count = len(values)
        self.pending = len(values)  # records not yet acknowledged
        # (position, count, partition, offset of the first record or -1, log-append time or -1)
        self.segments: list[tuple[int, int, int, int, int]] = []

    def segment_done(self, position: int, count: int, partition: int, first_offset: int,
                     append_time: int) -> None:
        self.segments.append((position, count, partition, first_offset, append_time))
        self.pending -= count
        if self.pending == 0 and not self.future.done():
            self.future.set_result(SendManyResult(self))

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
            self.future.exception()  # retrieved: the caller may legitimately not await it


class BulkProgress:
    """How many records of a bulk call are queued so far: what its error counts as failed
    before the sender saw them, and what the error message says was still delivered."""

    __slots__ = ("queued",)

    def __init__(self) -> None:
        self.queued = 0
