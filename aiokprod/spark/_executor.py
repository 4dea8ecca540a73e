"""The executor side: one producer per Python worker, fed whole Arrow batches.

Spark runs a write task in a Python worker process and hands it an iterator of Arrow
``RecordBatch`` es. A producer is expensive to start (connections, metadata, a producer id) and
cheap to keep, and Spark reuses its Python workers across tasks (``spark.python.worker.reuse``,
on by default), so each worker keeps **one producer per configuration** in a module-level
cache, on **one event loop owned by a background thread** of that worker. The task's own thread
splits each Arrow batch by topic and partition columns and hands the groups' buffers to the loop
(``run_coroutine_threadsafe``), where ``Producer.send_columns`` encodes the rows straight from
the Arrow buffers into record batches (keys hashed with murmur2 in C, no Python object per row;
per-row timestamps and headers included); while the loop queues one batch, the task thread
prepares the next, so the two overlap.

Every task ends with ``flush()``: when ``write`` returns, every record of the task was
acknowledged, or the task raises ``KafkaSinkError`` naming how many records failed and the
first error, and Spark retries it. A failed task drops its producer from the cache (the retry
gets a fresh one, with a fresh producer id).

The cache is reset after a ``fork`` (a thread does not survive one). Producers are closed by an
``atexit`` hook when the worker exits normally; Spark's daemon ends its forked workers with
``os._exit``, which skips ``atexit`` — nothing is lost then (every task flushed), the operating
system closes the connections.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future as ConcurrentFuture
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from aiokprod.producer.bulk import SendManyResult
from aiokprod.producer.producer import Producer
from aiokprod.records.columnar import BinaryColumn, HeaderColumn
from aiokprod.spark._options import SinkSettings

__all__ = ["KafkaSinkError", "TaskSummary", "TaskWriter", "cached_producer_count",
           "close_all_producers", "shared_loop"]

logger = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 10.0


class KafkaSinkError(RuntimeError):
    """A write task could not write all its rows; Spark fails (and retries) the task."""


@dataclass(frozen=True)
class TaskSummary:
    """What one task wrote; carried to the driver inside the commit message."""

    partition_id: int
    attempt: int
    records: int
    # key + value bytes, as the DataFrame held them (before compression and framing)
    bytes: int
    # records per topic
    topics: tuple[tuple[str, int], ...]
    # transactional mode: an earlier attempt of this task (or the run before a restart)
    # committed these rows already, so this one wrote nothing (records, bytes, topics are 0)
    skipped: bool = False


# -- one loop thread and a producer cache per worker process ---------------------------------


class _LoopThread:
    """An event loop running forever in a daemon thread: the home of this worker's producers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="aiokprod-spark-loop",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Any) -> ConcurrentFuture[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(_CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()


_lock = threading.Lock()
_pid: int | None = None  # the process the cache below belongs to (reset after a fork)
_loop_thread: _LoopThread | None = None
_producers: dict[tuple[tuple[str, str], ...], Producer] = {}


def _shared_loop_locked() -> _LoopThread:
    global _pid, _loop_thread
    if _pid != os.getpid():  # first use, or a forked child: the parent's thread is gone
        _pid, _loop_thread = os.getpid(), None
        _producers.clear()
        atexit.register(close_all_producers)
    if _loop_thread is None:
        _loop_thread = _LoopThread()
    return _loop_thread


def shared_loop() -> _LoopThread:
    """This worker's event loop thread (started on first use, again after a fork)."""
    with _lock:
        return _shared_loop_locked()


def _loop_and_producer(config: tuple[tuple[str, str], ...]) -> tuple[_LoopThread, Producer]:
    with _lock:
        loop_thread = _shared_loop_locked()
        producer = _producers.get(config)
        if producer is not None and producer.health().state == "fatal":
            _discard_locked(config)
            producer = None
        if producer is None:
            producer = Producer.from_config(dict(config))
            loop_thread.submit(producer.start()).result()
            _producers[config] = producer
            logger.info("aiokprod sink: started %r in Python worker %d", producer, os.getpid())
        return loop_thread, producer


def _discard_locked(config: tuple[tuple[str, str], ...]) -> None:
    producer = _producers.pop(config, None)
    if producer is not None and _loop_thread is not None:
        try:
            _loop_thread.submit(producer.close(timeout=1.0)).result(_CLOSE_TIMEOUT_S)
        except Exception:  # closing a broken producer: its error was already reported
            logger.warning("aiokprod sink: closing a failed producer raised", exc_info=True)


def _discard(config: tuple[tuple[str, str], ...]) -> None:
    with _lock:
        _discard_locked(config)


def close_all_producers() -> None:
    """Flush and close this worker's producers and stop their loop (``atexit`` hook)."""
    global _loop_thread
    with _lock:
        if _pid != os.getpid() or _loop_thread is None:
            return
        for config in list(_producers):
            _discard_locked(config)
        _loop_thread.stop()
        _loop_thread = None


def cached_producer_count() -> int:
    """How many producers this worker keeps (tests and diagnostics)."""
    with _lock:
        return len(_producers) if _pid == os.getpid() else 0


# -- one task ---------------------------------------------------------------------------------


@dataclass
class _Bulk:
    """One ``send_columns`` call: the rows of one topic (and partition) in order."""

    topic: str
    partition: int | None
    rows: int
    values: BinaryColumn
    keys: BinaryColumn | None
    timestamp_ms: int | None  # every row's, when there is no per-row column
    timestamps_ms: tuple[Any, int] | None  # (int64 epoch-ms buffer, first row's index)
    headers: HeaderColumn | None


_Plan = list[_Bulk]


class TaskWriter:
    """Writes one Spark task's Arrow batches through this worker's shared producer."""

    def __init__(self, settings: SinkSettings, partition_id: int, attempt: int) -> None:
        self._settings = settings
        self._partition_id = partition_id
        self._attempt = attempt
        self._loop_thread, self._producer = self._connect()
        # filled by the loop thread (callbacks) and read after the final flush
        self._records = 0  # rows handed to the producer
        self._bytes = 0
        self._topics: dict[str, int] = {}
        self._failed = 0  # records whose delivery failed
        self._first_error: BaseException | None = None
        # calls not completed yet → their record counts; dropped when done, so the Arrow
        # buffers a call reads from are freed as soon as its records are acknowledged
        self._bulk_pending: dict[asyncio.Future[SendManyResult], int] = {}

    def write(self, batches: Iterable[pa.RecordBatch]) -> TaskSummary:
        """Send every row; return once all are acknowledged, or raise ``KafkaSinkError``.

        An exception raised by ``batches`` itself (a failing upstream stage) propagates
        unchanged: it is not the sink's failure, and the producer stays in the cache.
        """
        source = iter(batches)
        queued: ConcurrentFuture[None] | None = None
        while True:
            try:
                batch = next(source)
            except StopIteration:
                break
            except BaseException:
                if queued is not None:  # what was handed over is queued before we give up
                    self._settle(queued)
                raise
            if batch.num_rows == 0:
                continue
            with self._sending():
                plan = self._plan(batch)  # converts in this thread while the loop sends
                if queued is not None:
                    queued.result()
                queued = self._loop_thread.submit(self._queue(plan))
        with self._sending():
            if queued is not None:
                queued.result()
            self._loop_thread.submit(self._finish()).result()
        if self._failed:
            self._drop_producer()
            assert self._first_error is not None
            raise KafkaSinkError(self._describe_failure(self._first_error, sending=False)) \
                from self._first_error
        return TaskSummary(self._partition_id, self._attempt, self._records, self._bytes,
                           tuple(sorted(self._topics.items())))

    def _connect(self) -> tuple[_LoopThread, Producer]:
        """The loop and producer this task sends through: the worker's cached one."""
        return _loop_and_producer(self._settings.producer_config)

    def _drop_producer(self) -> None:
        """After a failure: the retry must not inherit a broken producer."""
        _discard(self._settings.producer_config)

    @staticmethod
    def _settle(queued: ConcurrentFuture[None]) -> None:
        try:
            queued.result()
        except Exception:  # secondary to the error being raised; the records' futures have it
            logger.warning("aiokprod sink: queueing a batch failed while the task's input was "
                           "failing", exc_info=True)

    @contextmanager
    def _sending(self) -> Iterator[None]:
        """Turn what goes wrong while sending into ``KafkaSinkError``; drop the producer."""
        try:
            yield
        except BaseException as exc:
            self._drop_producer()
            if isinstance(exc, KafkaSinkError):
                raise
            raise KafkaSinkError(self._describe_failure(exc, sending=True)) from exc

    @property
    def _where(self) -> str:
        return f"task for partition {self._partition_id} (attempt {self._attempt})"

    def _describe_failure(self, error: BaseException, *, sending: bool) -> str:
        where = self._where
        if sending:
            return (f"aiokprod sink: {where} stopped after handing {self._records} records to "
                    f"the producer ({self._failed} of them failed): {type(error).__name__}: "
                    f"{error}")
        return (f"aiokprod sink: {where}: {self._failed} of {self._records} records were not "
                f"written to Kafka; first error: {type(error).__name__}: {error}")

    # -- Arrow → plain lists (task thread) ----------------------------------------------------

    def _plan(self, batch: pa.RecordBatch) -> _Plan:
        columns = self._settings.columns
        if self._settings.value_registry is None:  # else counted once encoded (_bulk)
            self._bytes += _payload_bytes(batch.column("value"))
        if "key" in columns and self._settings.key_registry is None:
            self._bytes += _payload_bytes(batch.column("key"))
        plan: _Plan = []
        for topic, by_topic in self._by_topic(batch):
            if "partition" in columns:
                for partition, part in _groups(by_topic, "partition"):
                    plan.append(self._bulk(topic, partition, part))
            else:
                plan.append(self._bulk(topic, None, by_topic))
        return plan

    def _by_topic(self, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
        if self._settings.topic is not None:
            yield self._settings.topic, batch
            return
        topics = batch.column("topic")
        if topics.null_count:
            raise KafkaSinkError(f"aiokprod sink: null topic in column 'topic' "
                                 f"({topics.null_count} of {batch.num_rows} rows) and no "
                                 f"'topic' option")
        for topic, part in _groups(batch, "topic"):
            assert isinstance(topic, str)
            yield topic, part

    def _bulk(self, topic: str, partition: int | None, batch: pa.RecordBatch) -> _Bulk:
        columns, n = self._settings.columns, batch.num_rows
        timestamp_ms: int | None = None
        timestamps_ms: tuple[Any, int] | None = None
        if "timestamp" in columns:
            timestamp_ms, timestamps_ms = _timestamps(batch.column("timestamp"))
        keys = None
        if "key" in columns:
            key_column = batch.column("key")
            if key_column.null_count < n:
                if self._settings.key_registry is not None:
                    key_column = self._through_registry(topic, key_column, is_key=True)
                keys = BinaryColumn.from_arrow(key_column)
        headers = None
        if "headers" in columns:
            header_column = batch.column("headers")
            if header_column.null_count < n and pc.max(pc.list_value_length(header_column)).as_py():
                headers = HeaderColumn.from_arrow(header_column)
        values = batch.column("value")
        if self._settings.value_registry is not None:
            values = self._through_registry(topic, values, is_key=False)
        return _Bulk(topic, partition, n, BinaryColumn.from_arrow(values), keys,
                     timestamp_ms, timestamps_ms, headers)

    def _through_registry(self, topic: str, column: pa.Array, *, is_key: bool) -> pa.Array:
        """A struct column as framed Avro (aiokprod.spark._registry); the first batch of a
        topic waits, in this task thread, for the schema's registration on the loop."""
        from aiokprod.spark._registry import registry_column  # needs aiokprod[avro]

        options = self._settings.key_registry if is_key else self._settings.value_registry
        assert options is not None
        encoded = registry_column(options, is_key=is_key).encode(
            topic, column, lambda coro: self._loop_thread.submit(coro).result())
        self._bytes += _payload_bytes(encoded)
        return encoded

    # -- sending (loop thread) ----------------------------------------------------------------

    async def _queue(self, plan: _Plan) -> None:
        send_columns = self._producer.send_columns
        for item in plan:
            future = await send_columns(
                item.topic, item.rows, item.values, item.keys, partition=item.partition,
                timestamp_ms=item.timestamp_ms, timestamps_ms=item.timestamps_ms,
                headers=item.headers)
            self._count(item.topic, item.rows)
            if future.done():
                self._bulk_done(future, item.rows)
            else:
                self._bulk_pending[future] = item.rows
                future.add_done_callback(self._bulk_done)

    def _count(self, topic: str, n: int) -> None:
        self._records += n
        self._topics[topic] = self._topics.get(topic, 0) + n

    def _bulk_done(self, future: asyncio.Future[SendManyResult], n: int | None = None) -> None:
        if n is None:
            n = self._bulk_pending.pop(future)
        if future.cancelled() or future.exception() is not None:
            # send_columns fails a call as a whole: all its records count as not written
            self._fail(n, future.exception() if not future.cancelled() else
                       asyncio.CancelledError("send_columns cancelled"))

    def _fail(self, n: int, error: BaseException | None) -> None:
        self._failed += n
        if self._first_error is None:
            self._first_error = error

    async def _finish(self) -> None:
        await self._producer.flush()
        # flush() returns when every batch is done; the futures' callbacks may still be queued
        if self._bulk_pending:
            await asyncio.wait(list(self._bulk_pending))
            await asyncio.sleep(0)  # their done callbacks run on the next loop turn


# -- Arrow helpers ----------------------------------------------------------------------------


def _groups(batch: pa.RecordBatch, column: str) -> Iterator[tuple[Any, pa.RecordBatch]]:
    """Sub-batches with one value of ``column`` each, rows in their original order."""
    values = batch.column(column)
    distinct = pc.unique(values)
    if len(distinct) == 1:
        yield distinct[0].as_py(), batch
        return
    for scalar in distinct:
        mask = pc.is_null(values) if not scalar.is_valid else pc.equal(values, scalar)
        yield scalar.as_py(), batch.filter(mask)


def _payload_bytes(column: pa.Array) -> int:
    total = pc.sum(pc.binary_length(column)).as_py()
    return int(total or 0)


def _timestamps(column: pa.Array) -> tuple[int | None, tuple[Any, int] | None]:
    """Arrow timestamps (Spark sends microseconds) as epoch milliseconds for ``send_columns``:
    (one for every row, None) when they are all equal, (None, an int64 buffer) when they differ;
    a null takes the current time, as ``send`` does for a record without a timestamp."""
    if column.null_count == len(column):
        return None, None
    unit = column.type.unit
    ticks = column.cast(pa.int64())
    divisor = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[unit]
    if divisor is None:
        millis = pc.multiply(ticks, 1000)
    elif divisor == 1:
        millis = ticks
    else:
        millis = pc.divide(ticks, divisor)  # integer division: whole milliseconds
    if column.null_count:
        millis = pc.fill_null(millis, int(time.time() * 1000))
    bounds = pc.min_max(millis)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low == high:
        return low, None
    if low < 0:
        raise KafkaSinkError(f"aiokprod sink: timestamp column holds {low} ms, before 1970; "
                             f"Kafka record timestamps are >= 0")
    if millis.offset or millis.buffers()[1] is None:
        millis = pa.concat_arrays([millis])  # own buffer, first row first
    return None, (millis.buffers()[1], millis.offset)
