"""``Producer``: the public face of the package. It owns the producer's state — config,
cluster, buffer pool, accumulator, sender, partitioner, transaction manager — creates them in
``start()``, runs their lifecycle (start, flush, close) and answers the producer-wide queries
(health, metrics).

It is also where every send starts. ``send`` is the hot path: it validates and serializes,
finds the partition, and appends into the accumulator, without yielding to the loop unless it
must wait for metadata (first send to a topic) or for buffer memory, each bounded by
``max_block_ms``, or a sender turn is due (see ``sender_turns``). It returns the record's
delivery future; the sender task resolves it when the broker answers. It reads the state it
needs straight from the producer, with no object in between: a call or attribute hop per
record costs measurably at a few microseconds a record. ``send_many`` and ``send_columns``,
the bulk paths, share its checks and waits here; what is particular to each lives in
``send_many`` and ``columnar_send`` (``bulk``: their delivery bookkeeping). The transaction
methods check the producer's lifecycle here and hand the rest to the ``TransactionalApi``
``start()`` creates (``_transactional_api``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from threading import get_ident
from types import TracebackType
from typing import Any, NamedTuple, TypeVar, cast

from aiokprod._backoff import ExponentialBackoff
from aiokprod._murmur2 import group_keys
from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    ProducerFencedError,
    RecordTooLargeError,
)
from aiokprod.hooks import Headers, Serializer, SerializerNotReady
from aiokprod.metrics import ProducerMetrics
from aiokprod.network.cluster import Cluster
from aiokprod.network.metadata import TopicMetadata
from aiokprod.network.security import options_from_config
from aiokprod.producer.batch import ProducerBatch, RecordMetadata
from aiokprod.producer.batching.accumulator import RecordAccumulator, estimate_record_size
from aiokprod.producer.batching.buffer_pool import BufferPool
from aiokprod.producer.batching.partitioner import BuiltinPartitioner
from aiokprod.producer.bulk import BulkDelivery, BulkProgress, SendManyResult
from aiokprod.producer.front.columnar_send import (
    RECORD_OVERHEAD,
    RowKeys,
    RowStampedDelivery,
    column_runs,
)
from aiokprod.producer.front.send_many import check_bulk_sizes, group_by_partitioner
from aiokprod.producer.front.sender_turns import SenderTurns
from aiokprod.producer.front.serializing import (
    TopicSerialize,
    bulk_bytes,
    serialize,
    topic_serialize,
    when_ready,
)
from aiokprod.producer.front.transaction_api import TransactionalApi, send_refused
from aiokprod.producer.front.validation import (
    check_headers,
    check_timestamp_ms,
    validate_topic,
)
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.partition import Partitions
from aiokprod.producer.sending.sender import Sender
from aiokprod.producer.supervisor import Supervisor
from aiokprod.producer.transactional.committed_offsets import fetch_committed_offsets
from aiokprod.producer.transactional.coordinator import CoordinatorClient
from aiokprod.producer.transactional.prepared import PreparedTransaction, complete_prepared
from aiokprod.producer.transactional.transaction_manager import TransactionManager
from aiokprod.producer.transactional.transactions import ConsumerGroupMetadata, TransactionState
from aiokprod.records import CompressionRatioEstimator, CompressionType
from aiokprod.records.columnar import BinaryColumn, ColumnarRows, HeaderColumn
from aiokprod.settings import ProducerSettings
from aiokprod.telemetry import ClientTelemetry

if sys.version_info >= (3, 12):
    from typing import Unpack
else:  # PEP 692's Unpack for **kwargs is in typing from 3.12
    from typing_extensions import Unpack

__all__ = ["Headers", "Producer", "ProducerHealth"]

log = logging.getLogger(__name__)

_wall_clock = time.time
_P = TypeVar("_P", bound="Producer")


class ProducerHealth(NamedTuple):
    """``Producer.health()``: ``state`` is ``"ok"``, ``"degraded"`` or ``"fatal"``."""

    state: str
    reason: str | None


class Producer:
    """An asyncio Kafka producer. Use ``async with Producer(...)`` or ``start()``/``close()``.

    ``Producer(bootstrap_servers, **settings)`` takes every ``ProducerConfig`` setting as a
    typed keyword argument (``ProducerSettings``), so an editor completes the names and a type
    checker reports a misspelt one or a wrong value; ``ProducerConfig`` still validates them
    when the producer is built.
    """

    # created by start(), read only once it has run (the send path checks _acc first)
    _partitioner: BuiltinPartitioner
    _compression: CompressionType
    _estimator: CompressionRatioEstimator

    def __init__(self, bootstrap_servers: str | Sequence[str],
                 **settings: Unpack[ProducerSettings]) -> None:
        self._config = ProducerConfig(bootstrap_servers=bootstrap_servers, **settings)
        self._started = False
        self._closed = False
        # the loop start() ran on: the only loop send() may be called from
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_owner: Any = None  # self._loop when it is an asyncio.BaseEventLoop
        self._shutdown_task: asyncio.Task[None] | None = None
        # when the running shutdown ends at the latest (loop time), from the timeout of the
        # close() that started it (None: only delivery_timeout_ms bounds it); a later close()
        # with a tighter bound waits only that long, then cuts the shutdown short
        self._shutdown_deadline: float | None = None
        self._shutdown_cut = False  # a later close() cancelled the shutdown: only once
        self._supervisor: Supervisor | None = None
        self._cluster: Cluster | None = None
        self._sender: Sender | None = None
        # set when a batch filled or opened since send() last yielded and a turn is due
        self._yield_due = False
        self._turns: SenderTurns | None = None
        self._acc: RecordAccumulator | None = None
        self._pool: BufferPool | None = None
        self._metrics: ProducerMetrics | None = None
        self._idempotence: IdempotenceManager | None = None
        # transactional.id set: the transaction state and coordinator requests
        self._txn: TransactionManager | None = None
        # the transaction methods' work, given _txn, the sender and the accumulator (start())
        self._transactional: TransactionalApi | None = None
        # enable_metrics_push: the KIP-714 subscription and pushes (None when disabled)
        self._telemetry: ClientTelemetry | None = None
        cfg = self._config
        self._key_serializer: Serializer | None = cfg.key_serializer
        self._value_serializer: Serializer | None = cfg.value_serializer
        # a TopicSerializer's serialize_to_topic, called instead of the serializer (hooks.py)
        self._key_to_topic: TopicSerialize | None = topic_serialize(cfg.key_serializer)
        self._value_to_topic: TopicSerialize | None = topic_serialize(cfg.value_serializer)
        self._interceptors: tuple[Any, ...] = tuple(cfg.interceptors)
        self._max_block: int = cfg.max_block_ms
        self._max_record: int = min(cfg.max_request_size, cfg.buffer_memory)
        # below this, key + value alone cannot make a record too large (the estimate adds at
        # most the per-record overhead): the hot path skips the full estimate
        self._max_record_fast: int = self._max_record - 64

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Producer:
        """Build from Java-style dotted names (``{"bootstrap.servers": ..., "linger.ms": 5}``)."""
        return cls(**_as_kwargs(ProducerConfig.from_mapping(config)))

    @property
    def config(self) -> ProducerConfig:
        return self._config

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background tasks; returns once they run (it does not wait for a broker).

        The first ``send`` to a topic waits for its metadata, bounded by ``max_block_ms``.
        """
        if self._started:
            txn, transactional = self._txn, self._transactional
            if txn is not None and transactional is not None and \
                    txn.state is TransactionState.UNINITIALIZED and not self._closed:
                await transactional.initialize()  # an earlier start() timed out: try again
            return
        if self._closed:
            raise ProducerClosedError("cannot start a closed producer")
        cfg = self._config
        clock = time.monotonic
        self._loop = asyncio.get_running_loop()
        # asyncio's own loops (not uvloop) expose the thread they run in: see _sending_parts
        loop = self._loop
        self._loop_owner = loop if isinstance(loop, asyncio.BaseEventLoop) and \
            hasattr(loop, "_thread_id") else None
        self._turns = SenderTurns(cfg.linger_ms, clock)
        self._supervisor = Supervisor(cfg.client_id, self._turn_fatal)
        self._metrics = ProducerMetrics.for_config(cfg, clock=clock)
        self._cluster = Cluster(
            cfg.bootstrap_servers, client_id=cfg.client_id,
            request_timeout_ms=cfg.request_timeout_ms,
            connect_timeout_ms=cfg.socket_connection_setup_timeout_ms,
            reconnect_backoff_ms=cfg.reconnect_backoff_ms,
            reconnect_backoff_max_ms=cfg.reconnect_backoff_max_ms,
            connect_timeout_max_ms=cfg.socket_connection_setup_timeout_max_ms,
            retry_backoff_ms=cfg.retry_backoff_ms, metadata_max_age_ms=cfg.metadata_max_age_ms,
            metadata_max_idle_ms=cfg.metadata_max_idle_ms,
            connections_max_idle_ms=cfg.connections_max_idle_ms,
            send_buffer_bytes=cfg.send_buffer_bytes,
            receive_buffer_bytes=cfg.receive_buffer_bytes,
            metadata_recovery_strategy=cfg.metadata_recovery_strategy,
            rebootstrap_trigger_ms=cfg.metadata_recovery_rebootstrap_trigger_ms,
            security=options_from_config(cfg), clock=clock)
        self._pool = BufferPool(cfg.buffer_memory, cfg.batch_size, clock=clock,
                                metrics=self._metrics, on_wait=self._wakeup)
        self._compression = CompressionType.from_name(cfg.compression_type)
        self._estimator = CompressionRatioEstimator()
        retry_backoff = ExponentialBackoff(cfg.retry_backoff_ms, cfg.retry_backoff_max_ms)
        # one object per partition, shared: the accumulator queues its batches, idempotence
        # numbers them, the sender counts its requests (producer/partition.py)
        partitions: Partitions[ProducerBatch] = Partitions()
        self._acc = RecordAccumulator(
            pool=self._pool, batch_size=cfg.batch_size, linger_ms=cfg.linger_ms,
            delivery_timeout_ms=cfg.delivery_timeout_ms, compression=self._compression,
            estimator=self._estimator, compression_level=cfg.compression_level(),
            retry_backoff=retry_backoff.backoff_ms, clock=clock, on_wakeup=self._wakeup,
            partitions=partitions)
        self._metrics.bind_gauge("metadata-age", self._cluster.metadata_age)
        self._metrics.bind_gauge("connection-count",
                                 lambda: self._cluster.statistics().connections
                                 if self._cluster is not None else 0)
        # bump epochs through the broker (KIP-360), falling back to a fresh producer id where
        # the broker refuses (Tansu fences any epoch it did not hand out)
        idempotence = IdempotenceManager(
            clock=clock, bump_via_init_producer_id=True, retries=cfg.retries,
            backoff=retry_backoff, client_id=cfg.client_id, partitions=partitions,
            transactional=cfg.transactional_id is not None) if cfg.enable_idempotence else None
        self._idempotence = idempotence
        if cfg.transactional_id is not None and idempotence is not None:
            self._txn = TransactionManager(
                transactional_id=cfg.transactional_id,
                transaction_timeout_ms=cfg.transaction_timeout_ms, cluster=self._cluster,
                idempotence=idempotence, request_timeout_ms=cfg.request_timeout_ms,
                retry_backoff_ms=cfg.retry_backoff_ms, client_id=cfg.client_id,
                spawn=self._supervisor.spawn, wakeup=self._wakeup,
                on_fatal=self._on_transaction_fatal, clock=clock)
        self._sender = Sender(
            cluster=self._cluster, accumulator=self._acc, idempotence=idempotence,
            acks=cfg.acks, request_timeout_ms=cfg.request_timeout_ms,
            delivery_timeout_ms=cfg.delivery_timeout_ms, retries=cfg.retries,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            max_request_size=cfg.max_request_size,
            transaction_timeout_ms=cfg.transaction_timeout_ms, client_id=cfg.client_id,
            on_ack=self._on_acknowledgement if cfg.interceptors else None,
            metrics=self._metrics, clock=clock, spawn=self._supervisor.spawn,
            transactions=self._txn)
        if self._txn is not None:
            self._transactional = TransactionalApi(
                txn=self._txn, sender=self._sender, acc=self._acc, metrics=self._metrics,
                max_block_ms=self._max_block)
        self._partitioner = BuiltinPartitioner.from_config(cfg, last_batch=self._last_batch)
        if cfg.partitioner_availability_timeout_ms > 0:
            self._sender.set_node_ready_hook(self._partitioner.update_node_latency_stats)
        self._acc.on_queue_sizes = self._partitioner.update_queue_sizes
        self._cluster.topic_in_use = self._acc.topic_in_use
        self._cluster.on_topics_expired.append(self._forget_topics)
        if cfg.client_dns_lookup == "resolve_canonical_bootstrap_servers_only":
            await self._cluster.resolve_canonical_bootstrap()
        self._cluster.start(self._supervisor.spawn)
        self._sender.start()
        if cfg.enable_metrics_push:
            resource = [("transactional_id", cfg.transactional_id)] \
                if cfg.transactional_id is not None else []
            self._telemetry = ClientTelemetry(
                cluster=self._cluster, registry=self._metrics.registry,
                client_id=cfg.client_id, request_timeout_ms=cfg.request_timeout_ms,
                resource=resource, clock=clock)
            self._telemetry.start(self._supervisor.spawn)
        self._started = True
        if getattr(cfg, "idempotence_disabled_reason", None):
            log.info("[client %s] idempotence disabled: %s", cfg.client_id,
                     cfg.idempotence_disabled_reason)
        if self._transactional is not None:
            await self._transactional.initialize()

    def _last_batch(self, topic: str, partition: int) -> ProducerBatch | None:
        """The partition's last queued batch: the sticky partitioner switches only once it is
        full (docs/batching.md, P2). Asked about once per batch."""
        acc = self._acc
        return acc.last_queued_batch(topic, partition) if acc is not None else None

    def _forget_topics(self, topics: list[str]) -> None:
        """Topics unused for metadata.max.idle.ms: drop their per-topic state everywhere, so a
        producer that wrote to many topics over its life does not keep growing."""
        acc, partitioner, metrics = self._acc, self._partitioner, self._metrics
        idem = self._idempotence
        for topic in topics:
            self._estimator.forget_topic(topic)  # compression ratio estimates
            if acc is not None:
                acc.forget_topic(topic)
            if idem is not None:
                idem.forget_topic(topic)
            if partitioner is not None:
                partitioner.forget_topic(topic)
            if metrics is not None:
                metrics.forget_topic(topic)

    async def close(self, timeout: float | None = None) -> None:
        """Flush what is queued and stop, within ``timeout`` seconds if given.

        Records not delivered by then fail with ``ProducerClosedError``. Shielded: cancelling
        the caller does not abandon the shutdown half-way (it still completes in the
        background). A later ``close()`` waits for that same shutdown, but never longer than
        its own ``timeout``: when that runs out first, what is left fails with
        ``ProducerClosedError`` and the shutdown's remaining (bounded) steps run at once. It
        never raises what a background task died of (that error already failed the records it
        concerned). Without a timeout it is still bounded: no batch outlives
        ``delivery_timeout_ms``.
        """
        self._closed = True
        if not self._started:
            return
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + max(timeout, 0.0)
        task = self._shutdown_task
        if task is None:
            self._shutdown_deadline = deadline
            task = self._shutdown_task = asyncio.ensure_future(self._shutdown(timeout))
        elif deadline is not None and (self._shutdown_deadline is None
                                       or deadline < self._shutdown_deadline):
            # the close() that started the shutdown allowed more time (and was perhaps
            # cancelled, its shutdown going on in the background): this call's bound wins.
            # asyncio.wait, unlike wait_for, leaves the shutdown running if we are cancelled.
            await asyncio.wait({task}, timeout=max(deadline - loop.time(), 0.0))
            if not task.done() and not self._shutdown_cut:
                self._cut_shutdown(task, timeout)
        # asyncio.wait, not shield: a shutdown cut short by a later close() ends cancelled, and
        # that is not this caller's cancellation
        await asyncio.wait({task})
        if not task.cancelled():
            task.result()  # what the shutdown itself raised (never a background task's crash)

    def _cut_shutdown(self, task: asyncio.Task[None], timeout: float | None) -> None:
        """A later close()'s timeout ran out first: fail everything still held, then cancel the
        shutdown, whose ``finally`` steps stop the tasks and connections (each bounded)."""
        sender = self._sender
        if sender is not None:
            sender.abandon(ProducerClosedError(
                f"producer closed: close(timeout={timeout}) ran out before these records "
                "were delivered"))
        self._shutdown_cut = True
        task.cancel()

    async def _shutdown(self, timeout: float | None) -> None:
        sender, cluster, pool, supervisor = self._sender, self._cluster, self._pool, \
            self._supervisor
        assert sender is not None and cluster is not None and pool is not None
        assert supervisor is not None
        telemetry = self._telemetry
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + max(timeout, 0.0)
        try:
            await self._abort_open_transaction(timeout)
            await sender.close(timeout)
            if telemetry is not None:
                # KIP-714's terminating push, with the metrics of the records just flushed;
                # within what is left of the close timeout (request.timeout.ms without one)
                left = self._config.request_timeout_ms / 1000 if deadline is None else \
                    deadline - loop.time()
                await telemetry.close(left)
        finally:
            try:
                if telemetry is not None:
                    telemetry.stop()
                # sends still waiting for memory or metadata fail with ProducerClosedError
                pool.close()
                await cluster.close()
            finally:
                await supervisor.stop(timeout=1.0)

    async def _abort_open_transaction(self, timeout: float | None) -> None:
        """Closing with a transaction open aborts it (as Java's producer does): left open, its
        records would hold back read_committed consumers until transaction.timeout.ms."""
        txn, transactional = self._txn, self._transactional
        if txn is None or transactional is None or txn.fatal_error is not None or txn.state not in (
                TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR,
                TransactionState.ABORTING):
            return
        bound = self._max_block / 1000 if timeout is None else min(timeout,
                                                                   self._max_block / 1000)
        try:
            await transactional.abort(time.monotonic() + bound)
        except Exception as exc:  # close() goes on; the coordinator times the rest out
            log.warning("[client %s] closing: aborting the open transaction failed: %s",
                        self._config.client_id, exc)

    async def __aenter__(self) -> Producer:
        try:
            await self.start()
        except BaseException:
            # a transactional start() can fail (InitProducerId refused or timed out): the
            # block never runs, so __aexit__ would not stop the tasks start() began
            await self.close(timeout=0)
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    # ---- sending one record: the hot path, and the checks and waits every send shares ---

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
            try:
                if self._key_serializer is None and (key is None or type(key) is bytes):
                    key_bytes: bytes | None = key
                else:
                    key_bytes = serialize(topic, key, self._key_serializer, "key",
                                          self._key_to_topic)
                if self._value_serializer is None and (value is None or type(value) is bytes):
                    value_bytes: bytes | None = value
                else:
                    value_bytes = serialize(topic, value, self._value_serializer, "value",
                                            self._value_to_topic)
            except SerializerNotReady as not_ready:
                # a serializer's first record for this topic: await its set-up (a schema's
                # registration), then serialize again; nothing of the record is queued yet
                key_bytes, value_bytes = await when_ready(topic, lambda: (
                    serialize(topic, key, self._key_serializer, "key", self._key_to_topic),
                    serialize(topic, value, self._value_serializer, "value",
                              self._value_to_topic)), not_ready)
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
            raise send_refused(txn)
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

    # ---- sending many records: send_many and send_columns --------------------------------

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
        key_list = None if keys is None else list(keys)  # ours: bulk_bytes may change it

        def as_bytes() -> tuple[list[bytes | None], list[bytes | None] | None]:
            return (bulk_bytes(topic, values, self._value_serializer, "value",
                               self._value_to_topic),
                    None if key_list is None else bulk_bytes(
                        topic, key_list, self._key_serializer, "key", self._key_to_topic))

        try:
            vals, ks = as_bytes()
        except SerializerNotReady as not_ready:  # a serializer's first records for topic
            vals, ks = await when_ready(topic, as_bytes, not_ready)
        n = len(vals)
        if ks is not None and len(ks) != n:
            raise ValueError(f"send_many got {len(ks)} keys for {n} values")
        record_headers = None if headers is None else check_headers(headers)
        timestamp_ms = self._checked_timestamp(timestamp_ms)
        check_bulk_sizes(vals, ks, record_headers, self._max_record, self._max_record_fast)
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
                grouped = group_by_partitioner(self._partitioner.partition, topic, ks, vals,
                                               meta)
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
        cluster = self._cluster
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
        if length and rows.max_row_bytes() + RECORD_OVERHEAD > self._max_record:
            raise RecordTooLargeError(
                f"send_columns: a record is {rows.max_row_bytes() + RECORD_OVERHEAD} bytes when "
                f"serialized, larger than {self._max_record}, the smaller of "
                f"max.request.size and buffer.memory")
        future: asyncio.Future[SendManyResult] = asyncio.get_running_loop().create_future()
        key_view = None if keys is None else RowKeys(rows)
        delivery = BulkDelivery if timestamps_ms is None else RowStampedDelivery
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
        else:
            runs = column_runs(topic, rows, keys, meta, self._config, self._partitioner)
        bulk = delivery(future, topic, rows, key_view, -1 if timestamps_ms is not None else stamp,
                        # position → row; an int64 array reads like the list send_many keeps
                        None if rows.order is None else cast("list[int]", rows.order))
        await self._append_runs(
            "send_columns", topic, meta, runs, bulk, rows, None, None, stamp,
            lambda i: acc.bulk_allocation_size(None, bytes(rows.record_size(i)), None),
            lambda i: rows.timestamp_of(rows.row(i)), start, BulkProgress())
        return future

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

    # ---- transactions: the lifecycle checks here, the work in TransactionalApi ----------

    def _transactions(self, call: str) -> TransactionalApi:
        """The transactions' work, after the checks every transactional call makes."""
        transactional = self._transactional
        if transactional is None:
            raise IllegalStateError(f"{call}: this producer has no transactional_id; "
                                    f"configure one to use transactions")
        if self._closed or not self._started:
            raise self._not_sending_error()
        transactional.check_fatal()
        return transactional

    def begin_transaction(self) -> None:
        """Open a transaction: ``send()`` is allowed until ``commit_transaction()`` or
        ``abort_transaction()``. Local only: nothing is sent to a broker."""
        started = time.perf_counter_ns()
        try:
            # timed here, not in TransactionalApi: a begin the checks refuse counts too
            self._transactions("begin_transaction()").begin()
        finally:
            self._time_operation("txn-begin", started)

    async def commit_transaction(self) -> None:
        """Flush, then commit: the records and offsets of the transaction become visible to
        read_committed consumers, all or none.

        Fails with the first record error as ``TransactionAbortableError`` (call
        ``abort_transaction()``), with ``ProducerFencedError`` when fenced (close the
        producer), or with ``KafkaTimeoutError`` after max.block.ms (calling it again resumes
        the commit). Cancelling it leaves the commit resumable the same way.
        """
        await self._transactions("commit_transaction()").commit()

    async def prepare_transaction(self) -> PreparedTransaction:
        """Flush the open transaction and leave it open, for someone else to end (KIP-939).

        Returns when every record of the transaction is acknowledged: the
        ``PreparedTransaction`` names the transaction by transactional id, producer id and
        epoch, so any producer can commit or abort it with
        ``complete_prepared_transaction()`` — the second phase of a two-phase commit whose
        coordinator (a job's driver) decides which of several writers' transactions count.
        Afterwards this producer sends nothing more in it; ``close()`` leaves it open (the
        coordinator aborts it after transaction.timeout.ms if nobody ends it), and
        ``commit_transaction()`` / ``abort_transaction()`` here still end it.

        Fails like ``commit_transaction()``'s flush: ``TransactionAbortableError`` when a
        record failed (abort), ``ProducerFencedError``, ``KafkaTimeoutError`` after
        max.block.ms (calling it again keeps waiting).
        """
        return await self._transactions("prepare_transaction()").prepare()

    async def complete_prepared_transaction(
            self, prepared: PreparedTransaction, *, commit: bool,
            offsets: Mapping[tuple[str, int], int] | None = None,
            group: str | None = None) -> None:
        """Commit or abort a transaction another producer prepared (``prepare_transaction``).

        With ``commit``, ``offsets`` of consumer group ``group`` are added to the transaction
        first, so they become visible with its records (a progress marker, a consumer's
        position). Works on any started producer, transactional or not; the transaction's
        own producer need not be running. Repeating a completion that already happened is
        answered as a success. A transaction that can no longer commit (aborted after
        transaction.timeout.ms, or fenced by a newer producer with its transactional id)
        raises ``TransactionAbortedError``. Bounded by max.block.ms (``KafkaTimeoutError``;
        calling it again resumes).
        """
        if not isinstance(prepared, PreparedTransaction):
            raise TypeError(f"prepared must be a PreparedTransaction (from "
                            f"prepare_transaction()), got {type(prepared).__name__}")
        if offsets and not (isinstance(group, str) and group):
            raise ValueError(f"offsets need a non-empty group id, got {group!r}")
        if self._closed or not self._started or self._cluster is None:
            raise self._not_sending_error()
        config = self._config
        coordinators = CoordinatorClient(
            cluster=self._cluster, transactional_id=prepared.transactional_id,
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms, client_id=config.client_id)
        await complete_prepared(coordinators, prepared, commit=commit, offsets=offsets,
                                group=group, deadline=time.monotonic() + self._max_block / 1000)

    async def abort_transaction(self) -> None:
        """Abort: records still queued fail with "transaction aborted", those on the wire are
        awaited, and EndTxn(abort) makes read_committed consumers skip all of them.

        Bounded by max.block.ms (``KafkaTimeoutError``; calling it again resumes the abort).
        A fenced producer raises ``ProducerFencedError`` at once: close it.
        """
        transactional = self._transactions("abort_transaction()")
        await transactional.abort(time.monotonic() + self._max_block / 1000)

    async def send_offsets_to_transaction(
            self, offsets: Mapping[tuple[str, int], int],
            group: str | ConsumerGroupMetadata | bytes | object) -> None:
        """Commit consumer offsets with the transaction (read-process-write, KIP-98/447).

        ``offsets`` maps ``(topic, partition)`` to the next offset to consume. ``group`` is the
        consumer's group membership as the consumer gives it: confluent-kafka's
        ``consumer.consumer_group_metadata()``, an aiokafka ``AIOKafkaConsumer`` itself, a
        ``ConsumerGroupMetadata``, or only the group id. With the generation and member id
        the first three carry, the group refuses the offsets of a consumer that was
        rebalanced out of it (a zombie); a bare group id cannot be fenced. Bounded by
        max.block.ms.
        """
        await self._transactions("send_offsets_to_transaction()").send_offsets(offsets, group)

    async def committed_offsets(
            self, group_id: str, partitions: Iterable[tuple[str, int]],
    ) -> dict[tuple[str, int], int | None]:
        """The offsets ``group_id`` has committed for ``partitions`` (``None``: none).

        The read-back of ``send_offsets_to_transaction``: a writer that records its progress
        as a group's offsets inside its transactions asks here, after ``start()`` fenced any
        older instance, what the last committed transaction recorded. An offset still pending
        in an open transaction is waited for (OffsetFetch ``require_stable``, KIP-447), never
        reported as absent or as committed. Works on any started producer (transactional or
        not); bounded by max.block.ms (``KafkaTimeoutError``). Cancelling it sends nothing
        more and changes no state.
        """
        if not isinstance(group_id, str) or not group_id:
            raise ValueError(f"group_id must be a non-empty string, got {group_id!r}")
        wanted = list(partitions)
        for key in wanted:
            if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)
                    and isinstance(key[1], int) and key[1] >= 0):
                raise ValueError(f"partitions must be (topic, partition) pairs, got {key!r}")
        if self._closed or not self._started or self._cluster is None:
            raise self._not_sending_error()
        if not wanted:
            return {}
        config = self._config
        coordinators = CoordinatorClient(
            cluster=self._cluster, transactional_id=config.transactional_id or "",
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms, client_id=config.client_id)
        return await fetch_committed_offsets(coordinators, group_id, wanted,
                                             time.monotonic() + self._max_block / 1000)

    @contextlib.asynccontextmanager
    async def transaction(self: _P) -> AsyncIterator[_P]:
        """``async with producer.transaction():`` begins; a normal exit commits (flushing
        first); an exception aborts and is re-raised, as is a failed commit (after aborting,
        unless the producer was fenced). A failed commit whose abort finds the producer
        fenced raises ``ProducerFencedError`` (from the commit's error)."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            await self._abort_quietly()
            raise
        try:
            await self.commit_transaction()
        except KafkaError as exc:
            await self._abort_quietly()
            txn = self._txn
            if txn is not None and isinstance(txn.fatal_error, ProducerFencedError) and \
                    not isinstance(exc, ProducerFencedError):
                # transaction version 2: a zombie's Produce is refused with
                # INVALID_PRODUCER_EPOCH, which is abortable (KIP-588: the epoch may have been
                # bumped by a transaction timeout); the abort's EndTxn tells it was fenced. The
                # block ends with what the caller must act on: close this producer
                raise send_refused(txn) from exc
            raise

    async def _abort_quietly(self) -> None:
        """Abort after a failure in a ``transaction()`` block; the original error wins."""
        txn = self._txn
        if txn is None or txn.state not in (TransactionState.IN_TRANSACTION,
                                            TransactionState.ABORTABLE_ERROR,
                                            TransactionState.ABORTING):
            return
        try:
            await self.abort_transaction()
        except Exception as exc:
            log.warning("[client %s] aborting the transaction failed too: %s",
                        self._config.client_id, exc)

    # ---- flushing and queries --------------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> None:
        """Make everything queued sendable now and wait until it is acknowledged or failed.

        Bounded by ``timeout`` if given (raises ``KafkaTimeoutError``), otherwise by
        ``delivery_timeout_ms``, which no batch outlives.
        """
        acc = self._acc
        if acc is None:
            raise self._not_sending_error()
        pending = acc.begin_flush()
        started = time.perf_counter_ns()
        try:
            waits = [b.wait_done() for b in pending]
            if waits:
                _, not_done = await asyncio.wait(waits, timeout=timeout)
                if not_done:
                    raise KafkaTimeoutError(
                        f"flush(timeout={timeout}) expired with {len(not_done)} batch(es) "
                        f"undelivered")
        finally:
            acc.end_flush()
            self._time_operation("flush", started)

    async def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic``, waiting for its metadata up to ``max_block_ms``."""
        if self._cluster is None or self._closed:
            raise self._not_sending_error()
        validate_topic(topic)
        meta = await self._wait_for_topic(topic)
        return list(meta.partition_ids)

    def health(self) -> ProducerHealth:
        """How the producer is doing, cheaply and without waiting (for health endpoints).

        ``fatal``: it can send nothing more (the reason says why; create a new producer).
        ``degraded``: it works but is held back — not started or closing, no broker
        connection, a record unacknowledged for longer than ``linger_ms + request_timeout_ms``
        (a broker that stopped answering keeps its connection open), or sends waiting for
        buffer memory.
        ``ok`` otherwise.
        """
        sender, cluster, pool = self._sender, self._cluster, self._pool
        if sender is not None and sender.fatal_error is not None:
            return ProducerHealth("fatal", f"{type(sender.fatal_error).__name__}: "
                                           f"{sender.fatal_error}")
        if self._closed:
            return ProducerHealth("fatal", "the producer is closed")
        if sender is None or cluster is None or pool is None:
            return ProducerHealth("degraded", "the producer is not started")
        stats = cluster.statistics()
        if stats.connections == 0:
            return ProducerHealth("degraded", "no connection to any broker"
                                  + (" (connecting)" if stats.connecting else ""))
        acc = self._acc
        waited = 0.0 if acc is None else acc.oldest_incomplete_age()
        # a batch may linger, then its request may take request_timeout_ms: longer is a stall
        if waited * 1000 > self._config.linger_ms + self._config.request_timeout_ms:
            return ProducerHealth("degraded", f"deliveries stalled: a record unacknowledged "
                                              f"for {waited * 1000:.0f} ms")
        if pool.waiters:
            return ProducerHealth("degraded", f"buffer memory exhausted: {pool.waiters} "
                                              f"send(s) waiting for memory")
        return ProducerHealth("ok", None)

    def client_instance_id(self) -> str | None:
        """The id the broker assigned this producer for metrics push (KIP-714), spelt as Kafka
        spells a Uuid (URL-safe base64); None until the first GetTelemetrySubscriptions
        answer, or with ``enable_metrics_push=False``. (Java's ``clientInstanceId(timeout)``
        waits for it; here it never waits.) Broker-side metrics pipelines key what this
        producer pushed by it."""
        telemetry = self._telemetry
        return None if telemetry is None else telemetry.client_instance_id

    def metrics(self) -> dict[str, float]:
        """Java-named producer metrics, keyed ``group:name{tags}`` (e.g.
        ``producer-metrics:record-send-rate``, ``producer-topic-metrics:byte-rate{topic=t}``)."""
        if self._metrics is None:
            return {}
        return self._metrics.registry.snapshot_flat()

    # ---- background events -----------------------------------------------------------------

    def _on_transaction_fatal(self, error: BaseException) -> None:
        """The transaction turned fatal (fenced, not authorized...): every record held fails
        with that error now, as nothing of it can be sent any more."""
        sender = self._sender
        if sender is not None and sender.fatal_error is None:
            sender.fail_everything(error)

    def _turn_fatal(self, crash: BaseException, task_name: str) -> None:
        """The supervisor saw a background task crash: fail everything with that cause."""
        error = KafkaError(f"background task {task_name} crashed: {crash!r}")
        error.__cause__ = crash
        if self._sender is not None:
            self._sender.fail_everything(error)
        if self._pool is not None:
            self._pool.close()
        if self._cluster is not None:
            self._cluster.fail(error)

    def _wakeup(self) -> None:
        turns = self._turns
        if not self._yield_due and turns is not None and turns.take():
            self._yield_due = True
        sender = self._sender
        if sender is not None:
            sender.wakeup()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("started" if self._started else "new")
        return (f"<Producer client_id={self._config.client_id!r} {state} "
                f"bootstrap={','.join(self._config.bootstrap_servers)}>")


def _as_kwargs(config: ProducerConfig) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if f.init}
