"""The per-record send path of ``Producer``: ``send``, ``send_and_wait`` and the checks, waits
and hooks every send goes through.

``send`` is the hot path. It validates and serializes, finds the partition, and appends into
the accumulator, without yielding to the loop unless it must wait for metadata (first send to a
topic) or for buffer memory, each bounded by ``max_block_ms``, or a sender turn is due (see
``sender_turns``). It returns the record's delivery future; the sender task resolves it when
the broker answers.

A mixin, as ``_transactional_api`` is: ``Producer`` (producer.py, the wiring and the
lifecycle) inherits these methods, and the state they read, declared below for the type
checker, is set by ``Producer.start()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from threading import get_ident
from typing import TYPE_CHECKING, Any

from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
)
from aiokprod.hooks import Serializer
from aiokprod.metrics import ProducerMetrics
from aiokprod.network.cluster import Cluster
from aiokprod.network.metadata import TopicMetadata
from aiokprod.producer.accumulator import RecordAccumulator, estimate_record_size
from aiokprod.producer.batch import RecordMetadata
from aiokprod.producer.buffer_pool import BufferPool
from aiokprod.producer.bulk import BulkDelivery
from aiokprod.producer.partitioner import BuiltinPartitioner
from aiokprod.producer.sender import Sender
from aiokprod.producer.transaction_manager import TransactionManager
from aiokprod.producer.transactions import TransactionState
from aiokprod.producer.validation import check_header_key, check_timestamp_ms, validate_topic

__all__ = ["BYTES_LIKE", "BulkProgress", "Headers", "SendPath", "check_headers"]

_wall_clock = time.time

log = logging.getLogger("aiokprod.producer.producer")  # one logger for the Producer's messages

BYTES_LIKE = (bytes, bytearray, memoryview)
Headers = Sequence[tuple[str, bytes | None]]


class BulkProgress:
    """How many records of a bulk call are queued, for what its error counts."""

    __slots__ = ("queued",)

    def __init__(self) -> None:
        self.queued = 0


class SendPath:
    """``send``, ``send_and_wait`` and the helpers they share with ``send_many`` and the
    lifecycle, as methods of ``Producer``."""

    # Producer's state, as the send path uses it (set by start())
    _config: ProducerConfig
    _closed: bool
    _loop: asyncio.AbstractEventLoop | None
    _loop_owner: Any
    _cluster: Cluster | None
    _sender: Sender | None
    _acc: RecordAccumulator | None
    _pool: BufferPool | None
    _metrics: ProducerMetrics | None
    _txn: TransactionManager | None
    _yield_due: bool
    _partitioner: BuiltinPartitioner
    _key_serializer: Serializer | None
    _value_serializer: Serializer | None
    _interceptors: tuple[Any, ...]
    _max_block: int
    _max_record: int
    _max_record_fast: int

    if TYPE_CHECKING:  # TransactionalApi's, which Producer also inherits
        def _send_refused(self, txn: TransactionManager) -> KafkaError: ...

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; returns its delivery future (await it for ``RecordMetadata``).

        Suspends to wait for the topic's metadata or for buffer memory, each at most
        ``max_block_ms``, and once after a batch filled or opened, at most once per
        ``min(0.5 ms, linger_ms)``: in a tight ``await send()`` loop nothing else would yield,
        and the sender would not run until memory ran out (Java wakes its sender thread when a
        batch fills; on one event loop the sender needs the loop; see ``sender_turns``).
        Cancelling it while it waits leaves nothing queued.
        """
        if self._yield_due:
            # before anything of this record is queued, so a cancellation here loses nothing
            self._yield_due = False
            await asyncio.sleep(0)
        acc = self._acc
        sender = self._sender
        owner = self._loop_owner
        # the common state in one test, inline (a call to _sending_parts costs ~0.1 us per
        # record); anything else there (a transaction, another loop, closed, fatal) asks it
        if acc is None or sender is None or owner is None or self._txn is not None or \
                self._closed or owner._thread_id != get_ident() or \
                sender.fatal_error is not None:
            try:
                acc, _sender = self._sending_parts()
            except KafkaError:
                # what send() itself refuses counts as a record error, as in Java's doSend;
                # the interceptors never saw this record (on_send comes after this check,
                # which also keeps them from running on another loop's thread), so they are
                # not told
                self._count_record_errors(1)
                raise
        try:
            if self._interceptors:
                topic, value, key, partition, timestamp_ms, headers = self._on_send(
                    topic, value, key, partition, timestamp_ms, headers)
            cluster = self._cluster
            assert cluster is not None
            meta = cluster.view.topics.get(topic)
            if meta is None:
                validate_topic(topic)  # known topics were validated on their first send
            # the common case (bytes or None, no serializer) costs no call
            if self._key_serializer is None and (key is None or type(key) is bytes):
                key_bytes: bytes | None = key
            else:
                key_bytes = self._serialize(topic, key, self._key_serializer, "key")
            if self._value_serializer is None and (value is None or type(value) is bytes):
                value_bytes: bytes | None = value
            else:
                value_bytes = self._serialize(topic, value, self._value_serializer, "value")
            if headers is not None:
                headers = check_headers(headers)
            if timestamp_ms is None:  # inline: the call cost as much as reading the clock
                timestamp_ms = int(_wall_clock() * 1000)
            else:
                timestamp_ms = check_timestamp_ms(timestamp_ms)
            size = (0 if key_bytes is None else len(key_bytes)) + \
                (0 if value_bytes is None else len(value_bytes))
            if headers or size > self._max_record_fast:
                size = estimate_record_size(key_bytes, value_bytes, headers)
            if size > self._max_record:
                raise RecordTooLargeError(
                    f"The message is {size} bytes when serialized which is larger than "
                    f"{self._max_record}, the smaller of max.request.size="
                    f"{self._config.max_request_size} and buffer.memory="
                    f"{self._config.buffer_memory}")
            start = 0.0
            if meta is None or not meta.partition_ids:
                start = time.monotonic()
                meta = await self._wait_for_topic(topic)
            if partition is None:
                partition = self._partitioner.place(topic, key_bytes, value_bytes,
                                                    meta.partition_ids, meta.available_partitions,
                                                    size)
            else:
                if partition not in meta.partitions:
                    if not start:
                        start = time.monotonic()
                    meta = await self._wait_for_partition(topic, partition, start)
                self._partitioner.on_append(topic, partition, size)
            future = acc.try_append(topic, partition, timestamp_ms, key_bytes, value_bytes, headers)
            if future is None:
                if not start:
                    start = time.monotonic()
                future = await self._append_waiting(topic, partition, timestamp_ms, key_bytes,
                                                    value_bytes, headers, start)
            return future
        except KafkaError as exc:
            self._count_record_errors(1)
            if self._interceptors:
                self._on_acknowledgement(None, exc)
            raise
        except (Exception, asyncio.CancelledError) as exc:
            # bad input or a cancelled wait: not a record error (as in Java), but on_send saw
            # the record, so on_acknowledgement hears how it ended (Java's onSendError)
            if self._interceptors:
                self._on_acknowledgement(None, exc)
            raise

    def _count_record_errors(self, records: int) -> None:
        """``records`` failed in the call that raised, before the sender saw them: counted in
        record-error as Java's ``doSend`` counts a refused ``send()`` (no topic tag: the
        topic may be what was wrong)."""
        metrics = self._metrics
        if metrics is not None:
            metrics.record_errors.record(records, records)

    async def _append_waiting(self, topic: str, partition: int, timestamp_ms: int,
                              key: bytes | None, value: bytes | None, headers: Headers | None,
                              start: float) -> asyncio.Future[RecordMetadata]:
        acc = self._acc
        assert acc is not None
        size = acc.allocation_size(key, value, headers)
        buffer = await self._allocate_waiting(size, start)
        return acc.append_with_buffer(topic, partition, timestamp_ms, key, value, headers,
                                      buffer, size)

    async def _allocate_waiting(self, size: int, start: float) -> bytearray:
        """``size`` bytes of buffer memory for a record (or a bulk call's run) that found no
        room, waited for at most what is left of ``max_block_ms`` since ``start``; every send
        path waits through here, so a producer that closes or fails meanwhile takes the memory
        back and refuses the same way for all of them."""
        pool = self._pool
        assert pool is not None
        remaining = max(0.0, self._max_block - (time.monotonic() - start) * 1000)
        try:
            buffer = await pool.allocate(size, remaining)
        except IllegalStateError as exc:  # the pool closed under us: closing or fatal
            raise self._stopped_error("memory") from exc
        if self._closed or self._sender is None or self._sender.fatal_error is not None:
            pool.deallocate(buffer, size)
            raise self._stopped_error("memory")
        return buffer

    async def _append_runs(
        self,
        call: str,
        topic: str,
        meta: TopicMetadata,
        runs: Sequence[tuple[int | None, int, int]],
        bulk: BulkDelivery,
        values: Any,
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Headers | None] | None,
        timestamp_ms: int,
        new_batch_size: Callable[[int], int],
        new_batch_stamp: Callable[[int], int],
        start: float,
        progress: BulkProgress,
    ) -> None:
        """Queue a bulk call's records (``send_many``, ``send_columns``), run by run.

        Each run is a range of positions for one partition (None: the sticky partitioner's
        choice, asked again for every batch). Records go into the partition's open batch, then
        into new ones charged ``new_batch_size(position)`` bytes and stamped
        ``new_batch_stamp(position)``, waiting for memory within ``max_block_ms`` since
        ``start``. If anything raises, what was queued is still delivered, and ``bulk`` fails
        with the error, which then says how many records were queued (``call`` names the
        method in it); ``progress.queued`` counts them as it goes.
        """
        acc, pool, partitioner = self._acc, self._pool, self._partitioner
        assert acc is not None and pool is not None
        total = bulk.count
        queued = 0
        try:
            for run_partition, run_start, run_stop in runs:
                i = run_start
                while i < run_stop:
                    p = run_partition if run_partition is not None else partitioner.partition(
                        topic, None, None, meta.partition_ids, meta.available_partitions)
                    taken, added = acc.try_append_many(topic, p, timestamp_ms, values, keys,
                                                       headers, i, run_stop, bulk)
                    if not taken:
                        size = new_batch_size(i)
                        buffer = pool.try_allocate(size)
                        if buffer is None:
                            buffer = await self._allocate_waiting(size, start)
                        taken, added = acc.append_many_with_buffer(
                            topic, p, new_batch_stamp(i), values, keys, headers, i, run_stop,
                            bulk, buffer, size)
                    if run_partition is None:
                        partitioner.on_append(topic, p, added)
                    i += taken
                    queued += taken
                    progress.queued = queued
        except BaseException as exc:
            bulk.pending -= total - queued  # what was queued still completes; the call fails now
            if isinstance(exc, KafkaError) and queued:
                error = type(exc)(f"{call}: {queued} of {total} records were queued (they will "
                                  f"still be delivered) before: {exc}")
                bulk.fail(error)
                raise error from exc
            bulk.fail(exc)
            raise

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> RecordMetadata:
        """Send one record and wait for its acknowledgement.

        Cancelling the caller stops the waiting, not the record: it may still be delivered,
        and the producer stays fully usable.
        """
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def _wait_for_topic(self, topic: str) -> TopicMetadata:
        """The topic's metadata within what is left of max.block.ms; a close or a fatal error
        during the wait ends it with ``ProducerClosedError`` or the fatal cause."""
        cluster = self._cluster
        assert cluster is not None
        started = time.perf_counter_ns()
        try:
            # the first wait of any call, so all of max.block.ms is left (and the timeout
            # message names the configured value)
            meta = await cluster.wait_for_topic(topic, self._max_block)
        except KafkaError as exc:
            if self._closed or (self._sender is not None and self._sender.fatal_error):
                raise self._stopped_error("metadata") from exc
            raise
        finally:
            self._time_operation("metadata-wait", started)
        if self._closed:
            raise self._stopped_error("metadata")
        return meta

    def _time_operation(self, operation: str, started_ns: int) -> None:
        """Add the time since ``started_ns`` to ``{operation}-time-ns-total``."""
        metrics = self._metrics
        if metrics is not None:
            metrics.operation_time[operation].record(time.perf_counter_ns() - started_ns, 1)

    async def _wait_for_partition(self, topic: str, partition: int, start: float
                                  ) -> TopicMetadata:
        """Java waits for a partition it does not know yet (one added to the topic): refresh
        and wait within max.block.ms rather than fail on possibly stale metadata."""
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ValueError(f"partition must be a non-negative int, got {partition!r}")
        cluster = self._cluster
        assert cluster is not None
        while True:
            meta = cluster.view.topics.get(topic)
            if meta is not None and partition in meta.partitions:
                return meta
            elapsed_ms = (time.monotonic() - start) * 1000
            if elapsed_ms >= self._max_block:
                count = 0 if meta is None else len(meta.partition_ids)
                raise KafkaTimeoutError(
                    f"Partition {partition} of topic {topic!r} with partition count {count} "
                    f"is not present in metadata after max.block.ms={self._max_block}: "
                    f"partition {partition} does not exist (yet)")
            cluster.request_update()
            await self._metadata_changed(min(self._max_block - elapsed_ms,
                                             self._config.retry_backoff_ms * 2))

    async def _metadata_changed(self, timeout_ms: float) -> None:
        cluster = self._cluster
        assert cluster is not None
        await cluster.wait_for_update(timeout_ms)
        if self._closed or (self._sender is not None and self._sender.fatal_error):
            raise self._stopped_error("metadata")

    def _stopped_error(self, what: str) -> KafkaError:
        """Why a send that waited for ``what`` cannot go on: closed, or fatal."""
        sender = self._sender
        fatal = sender.fatal_error if sender is not None else None
        if fatal is not None:
            error = KafkaError(f"producer is in a fatal state: {fatal}")
            error.__cause__ = fatal
            return error
        return ProducerClosedError(f"producer closed while this send waited for {what}")

    def _not_sending_error(self) -> KafkaError:
        if self._closed:
            return ProducerClosedError("the producer is closed: send() after close()")
        return IllegalStateError("the producer is not started: call `await producer.start()` "
                                 "or use `async with Producer(...)`")

    @staticmethod
    def _serialize(topic: str, obj: Any, serializer: Serializer | None, what: str
                   ) -> bytes | None:
        """A key or value (``what``) as bytes: through its serializer if one is configured."""
        if serializer is not None:
            try:
                obj = serializer(obj)
            except Exception as exc:
                raise SerializationError(
                    f"{what}_serializer failed for topic {topic!r}: {exc!r}") from exc
        if obj is None or type(obj) is bytes:
            return obj
        if isinstance(obj, BYTES_LIKE):
            return bytes(obj)
        raise TypeError(f"{what} must be bytes or None (got {type(obj).__name__}); "
                        f"configure {what}_serializer to send other types")

    def _sending_parts(self) -> tuple[RecordAccumulator, Sender]:
        """The accumulator and sender, or the error that says why nothing can be sent now."""
        acc, sender = self._acc, self._sender
        if acc is None or sender is None or self._closed:
            raise self._not_sending_error()
        owner = self._loop_owner
        if owner is None or owner._thread_id != get_ident():
            self._check_running_loop()
        txn = self._txn
        if txn is not None and txn.state is not TransactionState.IN_TRANSACTION:
            raise self._send_refused(txn)
        fatal = sender.fatal_error
        if fatal is not None:
            raise KafkaError(f"producer is in a fatal state: {fatal}") from fatal
        return acc, sender

    def _check_running_loop(self) -> None:
        """Refuses a call from any loop but the one ``start()`` ran on.

        ``asyncio.get_running_loop()`` makes a ``getpid()`` system call on every call (CPython
        guards against forked children), which cost 0.3-0.4 µs per ``send()`` here. So
        ``_sending_parts`` asks only when it cannot tell cheaply: an asyncio loop records the
        thread it runs in (``_thread_id``), and one loop runs per thread, so that thread being
        the current one already proves the running loop is ours. Other loops (uvloop) and any
        mismatch come here for the exact answer.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not self._loop:
            # the producer's state is not thread-safe and lives on one loop: refuse before
            # anything is queued, so a caller who retries elsewhere creates no duplicate
            raise RuntimeError(
                "this Producer belongs to another event loop (the one start() ran on); a "
                "producer cannot be shared across event loops or threads: create one per loop")

    @staticmethod
    def _checked_timestamp(timestamp_ms: int | None) -> int:
        if timestamp_ms is None:
            return int(time.time() * 1000)
        return check_timestamp_ms(timestamp_ms)

    def _on_send(self, topic: str, value: Any, key: Any, partition: int | None,
                 timestamp_ms: int | None, headers: Headers | None) -> tuple[Any, ...]:
        record = (topic, value, key, partition, timestamp_ms, headers)
        for interceptor in self._interceptors:
            hook = getattr(interceptor, "on_send", None)
            if hook is None:
                continue
            try:
                result = hook(*record)
            except Exception:  # Java: an interceptor's failure is logged, the record goes on
                log.exception("on_send interceptor %r raised", interceptor)
                continue
            if result is not None:
                record = tuple(result)
        return record

    def _on_acknowledgement(self, md: RecordMetadata | None, error: BaseException | None
                            ) -> None:
        """Every interceptor's ``on_acknowledgement``: from the sender when a batch completes
        or fails, and from ``send()`` with ``md=None`` when it raises for a record ``on_send``
        already saw (Java's ``onSendError``)."""
        for interceptor in self._interceptors:
            hook = getattr(interceptor, "on_acknowledgement", None)
            if hook is not None:
                try:
                    hook(md, error)
                except Exception:  # Java: log and go on to the next interceptor
                    log.exception("on_acknowledgement interceptor %r raised", interceptor)


def check_headers(headers: Headers) -> list[tuple[str, bytes | None]]:
    checked: list[tuple[str, bytes | None]] = []
    for item in headers:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError(f"headers must be (str, bytes | None) pairs, got {item!r}")
        hkey, hvalue = item
        if not isinstance(hkey, str):
            raise TypeError(f"header key must be str, got {type(hkey).__name__}: {hkey!r}")
        check_header_key(hkey)
        if hvalue is not None and not isinstance(hvalue, BYTES_LIKE):
            raise TypeError(f"header {hkey!r} value must be bytes or None, "
                            f"got {type(hvalue).__name__}")
        checked.append((hkey, None if hvalue is None else bytes(hvalue)))
    return checked


