"""``Producer.send_many``: many records of one topic queued in one call, with one future.

The bulk path: its checks run once per call, records are appended in runs straight into
batches (no future, tuple or metadata object per record, see ``bulk``), and the future
resolves to a ``SendManyResult``. A mixin over ``SendPath``, whose checks and waits it shares;
``Producer`` inherits it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from aiokprod._murmur2 import KeyGroups, group_keys, groups_in_runs
from aiokprod.errors import KafkaError, RecordTooLargeError, SerializationError
from aiokprod.hooks import Serializer
from aiokprod.network.metadata import TopicMetadata
from aiokprod.producer.accumulator import estimate_record_size
from aiokprod.producer.bulk import BulkDelivery, SendManyResult
from aiokprod.producer.send_path import (
    BYTES_LIKE,
    BulkProgress,
    Headers,
    SendPath,
    check_headers,
)
from aiokprod.producer.validation import validate_topic
from aiokprod.records.record_encoding import longest_bytes

__all__ = ["SendMany"]


class SendMany(SendPath):
    """``send_many`` and its checks, as methods of ``Producer``."""

    async def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        keys: Iterable[Any] | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> asyncio.Future[SendManyResult]:
        """Queue many records of one topic; one future for all of them.

        The bulk path: checks run once per call, records are appended in runs straight into
        batches (no future, tuple or metadata object per record), and the future resolves to a
        ``SendManyResult`` — a sequence of ``RecordMetadata`` in input order, built only for the
        records you look at. It fails with the first error any record met. ``headers``, if
        given, go on every record. Keyed records are partitioned by key (murmur2) and keep
        their order within a partition; unkeyed ones go by the sticky partitioner.

        Suspends only to wait for metadata or memory (each bounded by ``max_block_ms``). If a
        wait fails part-way, the records already queued are still delivered and the error says
        how many were.

        What it raises before the records are queued counts every record of the call in
        record-error (what is queued counts when it fails, as any record): the same errors
        ``send()`` counts for its one record, Kafka errors, not bad input.
        """
        items = list(values)
        progress = BulkProgress()
        try:
            return await self._queue_many(topic, items, keys, partition, timestamp_ms, headers,
                                          progress)
        except KafkaError:
            self._count_record_errors(len(items) - progress.queued)
            raise

    async def _queue_many(self, topic: str, values: list[Any], keys: Iterable[Any] | None,
                          partition: int | None, timestamp_ms: int | None,
                          headers: Headers | None, progress: BulkProgress
                          ) -> asyncio.Future[SendManyResult]:
        """``send_many``'s work; ``progress.queued`` says how many records it queued before
        anything it raises."""
        acc, _sender = self._sending_parts()
        cluster = self._cluster
        assert cluster is not None
        if topic not in cluster.view.topics:
            validate_topic(topic)
        if self._interceptors:
            raise ValueError("send_many() does not run interceptors; use send() per record "
                             "with interceptors configured")
        vals = self._bulk_bytes(topic, values, self._value_serializer, "value", owned=True)
        n = len(vals)
        ks = None if keys is None else self._bulk_bytes(topic, keys, self._key_serializer, "key")
        if ks is not None and len(ks) != n:
            raise ValueError(f"send_many got {len(ks)} keys for {n} values")
        record_headers = None if headers is None else check_headers(headers)
        timestamp_ms = self._checked_timestamp(timestamp_ms)
        self._check_bulk_sizes(vals, ks, record_headers)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[SendManyResult] = loop.create_future()
        if n == 0:
            future.set_result(SendManyResult(BulkDelivery(future, topic, vals, ks,
                                                          timestamp_ms, None)))
            return future
        start = time.monotonic()
        meta = cluster.view.topics.get(topic)
        if meta is None or not meta.partition_ids:
            meta = await self._wait_for_topic(topic)
        # runs of consecutive records bound for one partition; None = ask the sticky partitioner
        runs: list[tuple[int | None, int, int]]
        order: list[int] | None = None
        ordered_vals, ordered_keys = vals, ks
        if partition is not None:
            if partition not in meta.partitions:
                meta = await self._wait_for_partition(topic, partition, start)
            runs = [(partition, 0, n)]
        elif ks is None or (self._config.partitioner_ignore_keys and \
                self._config.partitioner is None):
            runs = [(None, 0, n)]
        else:
            # the built-in rule for keys in one call (native: one C pass); a custom
            # partitioner, or a None key among them, asks the partitioner per record
            grouped = group_keys(ks, vals, len(meta.partition_ids)) \
                if self._config.partitioner is None else None
            if grouped is None:
                grouped = self._group_by_partitioner(topic, ks, vals, meta)
            order, partition_runs, ordered_keys, ordered_vals = grouped
            runs = [*partition_runs]
        hdrs = None if record_headers is None else [record_headers] * n
        bulk = BulkDelivery(future, topic, vals, ks, timestamp_ms, order)
        await self._append_runs(
            "send_many", topic, meta, runs, bulk, ordered_vals, ordered_keys, hdrs, timestamp_ms,
            lambda i: acc.bulk_allocation_size(
                None if ordered_keys is None else ordered_keys[i], ordered_vals[i],
                record_headers),
            lambda _i: timestamp_ms, start, progress)
        return future

    def _group_by_partitioner(self, topic: str, ks: list[bytes | None],
                              vals: list[bytes | None], meta: TopicMetadata) -> KeyGroups:
        """``group_keys``'s answer, with the partitioner choosing each record's partition."""
        choose = self._partitioner.partition
        ids, available = meta.partition_ids, meta.available_partitions
        by_partition: dict[int, list[int]] = {}
        for i, (k, v) in enumerate(zip(ks, vals, strict=True)):
            by_partition.setdefault(choose(topic, k, v, ids, available), []).append(i)
        return groups_in_runs(by_partition, ks, vals)

    def _bulk_bytes(self, topic: str, items: Iterable[Any], serializer: Serializer | None,
                    what: str, *, owned: bool = False) -> list[bytes | None]:
        """The items as bytes or None; ``owned``: ``items`` is a list of our own, which may be
        changed in place rather than copied."""
        data = items if owned and type(items) is list else list(items)
        if serializer is None and longest_bytes(data) >= 0:
            return data  # all bytes or None already: one scan, in C on the native path
        if serializer is not None:
            try:
                data = [serializer(x) for x in data]
            except Exception as exc:
                raise SerializationError(
                    f"{what}_serializer failed for topic {topic!r}: {exc!r}") from exc
        for i, x in enumerate(data):
            if x is not None and type(x) is not bytes:
                if isinstance(x, BYTES_LIKE):
                    data[i] = bytes(x)
                    continue
                raise TypeError(f"{what}s[{i}] must be bytes or None (got {type(x).__name__}); "
                                f"configure {what}_serializer to send other types")
        return data

    def _check_bulk_sizes(self, vals: list[bytes | None], keys: list[bytes | None] | None,
                          headers: list[tuple[str, bytes | None]] | None) -> None:
        # both lists hold only bytes or None here (_bulk_bytes): one scan each
        longest = longest_bytes(vals)
        if keys is not None:
            longest += longest_bytes(keys)
        if longest <= self._max_record_fast and not headers:
            return
        for i, v in enumerate(vals):
            size = estimate_record_size(None if keys is None else keys[i], v, headers)
            if size > self._max_record:
                raise RecordTooLargeError(
                    f"send_many: values[{i}] is {size} bytes when serialized, larger than "
                    f"{self._max_record}, the smaller of max.request.size and buffer.memory")
