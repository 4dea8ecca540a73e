"""``Producer``: the public face that wires config, cluster, pool, accumulator and sender, and
runs their lifecycle (start, flush, close) and the producer-wide queries (health, metrics).

What it sends through lives in mixins it inherits, one job each: ``send_path`` (``send``, the
per-record hot path, and the checks and waits every send shares), ``send_many`` (the bulk
path) and ``_transactional_api`` (the transaction methods). ``start()`` sets the state they read.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple

from aiokprod._backoff import ExponentialBackoff
from aiokprod.config import ProducerConfig
from aiokprod.errors import KafkaError, KafkaTimeoutError, ProducerClosedError
from aiokprod.metrics import ProducerMetrics
from aiokprod.network.cluster import Cluster
from aiokprod.network.security import options_from_config
from aiokprod.producer._transactional_api import TransactionalApi
from aiokprod.producer.accumulator import RecordAccumulator
from aiokprod.producer.batch import ProducerBatch
from aiokprod.producer.buffer_pool import BufferPool
from aiokprod.producer.columnar_send import SendColumns
from aiokprod.producer.idempotence import IdempotenceManager
from aiokprod.producer.partition import Partitions
from aiokprod.producer.partitioner import BuiltinPartitioner
from aiokprod.producer.send_many import SendMany
from aiokprod.producer.send_path import Headers
from aiokprod.producer.sender import Sender
from aiokprod.producer.sender_turns import SenderTurns
from aiokprod.producer.supervisor import Supervisor
from aiokprod.producer.transaction_manager import TransactionManager
from aiokprod.producer.transactions import TransactionState
from aiokprod.producer.validation import validate_topic
from aiokprod.records import CompressionRatioEstimator, CompressionType
from aiokprod.settings import ProducerSettings
from aiokprod.telemetry import ClientTelemetry

if sys.version_info >= (3, 12):
    from typing import Unpack
else:  # PEP 692's Unpack for **kwargs is in typing from 3.12
    from typing_extensions import Unpack

__all__ = ["Headers", "Producer", "ProducerHealth"]

log = logging.getLogger(__name__)


class ProducerHealth(NamedTuple):
    """``Producer.health()``: ``state`` is ``"ok"``, ``"degraded"`` or ``"fatal"``."""

    state: str
    reason: str | None


class Producer(SendMany, SendColumns, TransactionalApi):
    """An asyncio Kafka producer. Use ``async with Producer(...)`` or ``start()``/``close()``.

    ``Producer(bootstrap_servers, **settings)`` takes every ``ProducerConfig`` setting as a
    typed keyword argument (``ProducerSettings``), so an editor completes the names and a type
    checker reports a misspelt one or a wrong value; ``ProducerConfig`` still validates them
    when the producer is built.
    """

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
        # enable_metrics_push: the KIP-714 subscription and pushes (None when disabled)
        self._telemetry: ClientTelemetry | None = None

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
            txn = self._txn
            if txn is not None and txn.state is TransactionState.UNINITIALIZED and \
                    not self._closed:
                await self._init_transactions()  # an earlier start() timed out: try again
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
        partitions = Partitions()
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
        self._partitioner = BuiltinPartitioner.from_config(cfg, last_batch=self._last_batch)
        if cfg.partitioner_availability_timeout_ms > 0:
            self._sender.set_node_ready_hook(self._partitioner.update_node_latency_stats)
        self._acc.on_queue_sizes = self._partitioner.update_queue_sizes
        self._cluster.topic_in_use = self._acc.topic_in_use
        self._cluster.on_topics_expired.append(self._forget_topics)
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        self._interceptors = tuple(cfg.interceptors)
        self._max_block = cfg.max_block_ms
        self._max_record = min(cfg.max_request_size, cfg.buffer_memory)
        # below this, key + value alone cannot make a record too large (the estimate adds at
        # most the per-record overhead): the hot path skips the full estimate
        self._max_record_fast = self._max_record - 64
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
        if self._txn is not None:
            await self._init_transactions()

    def _last_batch(self, topic: str, partition: int) -> ProducerBatch | None:
        """The partition's last queued batch: the sticky partitioner switches only once it is
        full (docs/batching.md, P2). Asked about once per batch."""
        acc = self._acc
        batches = acc.queued_batches(topic, partition) if acc is not None else None
        return batches[-1] if batches else None

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
        txn = self._txn
        if txn is None or txn.fatal_error is not None or txn.state not in (
                TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR,
                TransactionState.ABORTING):
            return
        bound = self._max_block / 1000 if timeout is None else min(timeout,
                                                                   self._max_block / 1000)
        try:
            await self._abort(txn, time.monotonic() + bound)
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
