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

``Producer.send_columns`` makes the checks and waits every send makes and queues the runs as
``send_many`` does; this module holds what is particular to rows in buffers: their partition
runs, and the keys and create times the result reads back from the buffers.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import overload

from aiokprod.config import ProducerConfig
from aiokprod.network.metadata import TopicMetadata
from aiokprod.producer.batching.partitioner import BuiltinPartitioner
from aiokprod.producer.bulk import BulkDelivery, SendManyResult
from aiokprod.record_metadata import RecordMetadata
from aiokprod.records.columnar import BinaryColumn, ColumnarRows

__all__ = ["RECORD_OVERHEAD", "RowKeys", "RowStampedDelivery", "column_runs"]

RECORD_OVERHEAD = 21  # attributes and varints of one record at their widest


class RowKeys(Sequence[bytes | None]):
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


class RowStampedDelivery(BulkDelivery):
    """``BulkDelivery`` completing with ``_RowStampedResult`` (its ``timestamp`` is -1)."""

    __slots__ = ()

    def segment_done(self, position: int, count: int, partition: int, first_offset: int,
                     append_time: int) -> None:
        self.segments.append((position, count, partition, first_offset, append_time))
        self.pending -= count
        if self.pending == 0 and not self.future.done():
            self.future.set_result(_RowStampedResult(self))


def column_runs(topic: str, rows: ColumnarRows, keys: BinaryColumn | None,
                meta: TopicMetadata, config: ProducerConfig,
                partitioner: BuiltinPartitioner) -> list[tuple[int | None, int, int]]:
    """The runs of rows per partition for a ``send_columns`` call that names no partition:
    keyed rows by murmur2 (one C pass) or by a custom partitioner asked per row, unkeyed ones
    (and null keys) by the sticky partitioner."""
    length = len(rows)
    if keys is None or (config.partitioner_ignore_keys and config.partitioner is None):
        return [(None, 0, length)]
    if config.partitioner is None:
        # null keys go where the sticky partitioner says now, in input order among the keyed
        # rows of that partition (send_many's order)
        sticky = -1
        if keys.validity is not None:
            sticky = partitioner.partition(topic, None, None, meta.partition_ids,
                                           meta.available_partitions)
        return _runs(rows.group(len(meta.partition_ids), sticky))
    # a custom partitioner: asked per row, as send_many does
    return _custom_runs(partitioner.partition, topic, rows, meta.partition_ids,
                        meta.available_partitions)


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
