"""``Producer.send_columns``: ``send_many`` for records held in Arrow buffers.

The same path as ``send_many`` from the accumulator on — the same batches, sequence numbers,
idempotence and transactions, one future resolving to a ``SendManyResult``, memory from the
buffer pool within ``max_block_ms`` — but the records never become Python objects: keys are
hashed with murmur2 and grouped by partition in one C pass over the key column
(``records.columnar.partition_rows``), and each run of rows is encoded from the buffers
straight into the open batch (``ColumnarRows.append_to``). Per row, that is the C loop's cost
only; ``send_many`` spends a Python ``bytes`` per key and value, a partitioner call per keyed
record and a Python loop iteration per record on top. Rows may carry their own timestamps and
headers, which ``send_many`` cannot.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any, cast, overload

from aiokprod.errors import RecordTooLargeError
from aiokprod.producer.bulk import BulkDelivery, SendManyResult
from aiokprod.producer.send_path import BulkProgress, SendPath
from aiokprod.producer.validation import validate_topic
from aiokprod.record_metadata import RecordMetadata
from aiokprod.records.columnar import BinaryColumn, ColumnarRows, HeaderColumn

__all__ = ["SendColumns"]

_RECORD_OVERHEAD = 21  # attributes and varints of one record at their widest


class _Keys(Sequence[bytes | None]):
    """Row keys for ``SendManyResult``'s sizes, read from the buffers when asked."""

    __slots__ = ("_rows",)

    def __init__(self, rows: ColumnarRows) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> bytes | None: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes | None]: ...

    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes | None] | None:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._rows.key(index)


class _RowStampedResult(SendManyResult):
    """A ``SendManyResult`` whose records carry their own create times."""

    __slots__ = ()

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...

    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        metadata = super().__getitem__(index)
        if metadata.timestamp < 0:  # not the broker's log-append time: the row's own
            rows = self._bulk.values
            assert isinstance(rows, ColumnarRows)
            metadata = metadata._replace(timestamp=rows.timestamp_of(index))
        return metadata


class _RowStampedDelivery(BulkDelivery):
    """``BulkDelivery`` completing with ``_RowStampedResult`` (its ``timestamp`` is -1)."""

    __slots__ = ()

    def segment_done(self, position: int, count: int, partition: int, first_offset: int,
                     append_time: int) -> None:
        self.segments.append((position, count, partition, first_offset, append_time))
        self.pending -= count
        if self.pending == 0 and not self.future.done():
            self.future.set_result(_RowStampedResult(self))


class SendColumns(SendPath):
    """``Producer.send_columns``, a mixin ``Producer`` inherits (as it does ``SendMany``)."""

    async def send_columns(
        self,
        topic: str,
        length: int,
        values: BinaryColumn,
        keys: BinaryColumn | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        timestamps_ms: tuple[Any, int] | None = None,
        headers: HeaderColumn | None = None,
    ) -> asyncio.Future[SendManyResult]:
        """``send_many`` for ``length`` records held in Arrow-layout buffers, without a Python
        object per record (``BinaryColumn.from_arrow`` / ``HeaderColumn.from_arrow`` build the
        arguments from pyarrow arrays; see ``aiokprod.records.columnar``).

        Same semantics as ``send_many``: one future resolving to a ``SendManyResult`` in input
        order, failing with the first error; keyed rows go to murmur2(key) % partitions (a
        custom ``partitioner`` is asked per row), unkeyed ones (and null keys) by the sticky
        partitioner; waits for metadata or memory only, each within ``max_block_ms``.
        Serializers and interceptors do not apply (the buffers are the serialized bytes).
        Beyond ``send_many``, rows may have their own create times (``timestamps_ms``: an int64
        buffer of epoch milliseconds and the first row's index in it) and headers
        (``headers``).
        """
        acc, _sender = self._sending_parts()
        cluster, config = self._cluster, self._config
        assert cluster is not None
        if topic not in cluster.view.topics:
            validate_topic(topic)
        if self._interceptors:
            raise ValueError("send_columns() does not run interceptors; use send() per record "
                             "with interceptors configured")
        if timestamp_ms is not None and timestamps_ms is not None:
            raise ValueError("give timestamp_ms (every row) or timestamps_ms (one per row), "
                             "not both")
        if length < 0:
            raise ValueError(f"length {length} < 0")
        stamp = self._checked_timestamp(timestamp_ms)
        rows = ColumnarRows(length, values, keys, timestamps_ms, headers, stamp)
        if length and rows.max_row_bytes() + _RECORD_OVERHEAD > self._max_record:
            raise RecordTooLargeError(
                f"send_columns: a record is {rows.max_row_bytes() + _RECORD_OVERHEAD} bytes when "
                f"serialized, larger than {self._max_record}, the smaller of "
                f"max.request.size and buffer.memory")
        future: asyncio.Future[SendManyResult] = asyncio.get_running_loop().create_future()
        key_view = None if keys is None else _Keys(rows)
        delivery = BulkDelivery if timestamps_ms is None else _RowStampedDelivery
        if length == 0:
            future.set_result(SendManyResult(delivery(future, topic, rows, key_view, stamp, None)))
            return future
        start = time.monotonic()
        meta = cluster.view.topics.get(topic)
        if meta is None or not meta.partition_ids:
            meta = await self._wait_for_topic(topic)
        runs: list[tuple[int | None, int, int]]
        if partition is not None:
            if partition not in meta.partitions:
                meta = await self._wait_for_partition(topic, partition, start)
            runs = [(partition, 0, length)]
        elif keys is None or (config.partitioner_ignore_keys and config.partitioner is None):
            runs = [(None, 0, length)]
        elif config.partitioner is None:
            # null keys go where the sticky partitioner says now, in input order among the keyed
            # rows of that partition (send_many's order)
            sticky = -1
            if keys.validity is not None:
                sticky = self._partitioner.partition(topic, None, None, meta.partition_ids,
                                                     meta.available_partitions)
            runs = _runs(rows.group(len(meta.partition_ids), sticky))
        else:  # a custom partitioner: asked per row, as send_many does
            runs = _custom_runs(self._partitioner.partition, topic, rows, meta.partition_ids,
                                meta.available_partitions)
        bulk = delivery(future, topic, rows, key_view, -1 if timestamps_ms is not None else stamp,
                        # position → row; an int64 array reads like the list send_many keeps
                        None if rows.order is None else cast("list[int]", rows.order))
        await self._append_runs(
            "send_columns", topic, meta, runs, bulk, rows, None, None, stamp,
            lambda i: acc.bulk_allocation_size(None, bytes(rows.record_size(i)), None),
            lambda i: rows.timestamp_of(rows.row(i)), start, BulkProgress())
        return future


def _runs(counts: list[int]) -> list[tuple[int | None, int, int]]:
    """Consecutive position ranges per partition; the last group (null keys, when they were
    not given a partition) goes by the sticky partitioner."""
    runs: list[tuple[int | None, int, int]] = []
    pos = 0
    last = len(counts) - 1
    for p, count in enumerate(counts):
        if count:
            runs.append((None if p == last else p, pos, pos + count))
            pos += count
    return runs


def _custom_runs(choose: Callable[..., int], topic: str, rows: ColumnarRows,
                 ids: Sequence[int], available: Sequence[int]
                 ) -> list[tuple[int | None, int, int]]:
    by_partition: dict[int, list[int]] = {}
    for row in range(len(rows)):
        by_partition.setdefault(choose(topic, rows.key(row), rows[row], ids, available),
                                []).append(row)
    order = array("q", [row for group in by_partition.values() for row in group])
    rows.use_order(order)
    runs: list[tuple[int | None, int, int]] = []
    pos = 0
    for p, group in by_partition.items():
        runs.append((p, pos, pos + len(group)))
        pos += len(group)
    return runs
