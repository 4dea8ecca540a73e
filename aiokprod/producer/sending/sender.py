"""The sender: the one background task that does produce I/O.

Each wake-up (docs/batching.md, S1-S6): expire what outlived ``delivery_timeout_ms`` → ask the
accumulator which nodes are ready → keep those with a live connection and room under
``max_in_flight_requests_per_connection`` → drain one request per node → write them. Responses
are handled in the connection's callback, synchronously: batches complete, are retried in
sequence order after a backoff, split, or fail — then the sender is woken to send more.

It sleeps on at most one pending timer (``waker.Waker``), woken early by: a new or full batch, a
response, a connection that opened, new metadata, flush and close. There is no timer per record
or per batch. Building a Produce request and reading its answer are the job of a
``produce_exchange.ProduceExchange`` the sender owns; what each outcome does to its batch is
``outcomes.BatchOutcomes``'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokprod.errors import ProducerClosedError
from aiokprod.network.cluster import Cluster
from aiokprod.network.metadata import TopicPartition
from aiokprod.producer.batch import ProducerBatch, RecordMetadata
from aiokprod.producer.batching.accumulator import RecordAccumulator
from aiokprod.producer.batching.send_rules import SendRules
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.idempotent.producer_id import ProducerIdRequester, init_on_any_broker
from aiokprod.producer.sending.outcomes import BatchOutcomes
from aiokprod.producer.sending.produce_exchange import ProduceExchange
from aiokprod.producer.sending.waker import Waker

if TYPE_CHECKING:
    from aiokprod.producer.transactional.transaction_manager import TransactionManager

__all__ = ["Sender", "SenderStatistics"]

log = logging.getLogger(__name__)



def _plain_spawn(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(coro, name=name)


@dataclass(frozen=True)
class SenderStatistics:
    in_flight_requests: int
    in_flight_batches: int
    requests_sent: int
    batches_sent: int
    retries: int
    failed_batches: int
    producer_id: int
    producer_epoch: int


class Sender:
    """The background task that drains the accumulator into Produce requests (one per node
    per wake-up) and the producer's lifecycle around it: start, close, fatal errors."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        accumulator: RecordAccumulator,
        idempotence: IdempotenceManager | None,
        acks: int,
        request_timeout_ms: int,
        delivery_timeout_ms: int,
        retries: int,
        max_in_flight: int,
        max_request_size: int,
        transaction_timeout_ms: int = 60000,
        client_id: str = "aiokprod",
        on_ack: Callable[[RecordMetadata | None, BaseException | None], None] | None = None,
        metrics: Any = None,
        clock: Callable[[], float] = time.monotonic,
        spawn: Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]] | None = None,
        on_node_ready: Callable[[int, int, bool], None] | None = None,
        transactions: TransactionManager | None = None,
    ) -> None:
        self._cluster = cluster
        # transactional producer: it runs InitProducerId itself (with the transactional id),
        # and a partition's batches are drained only once it was added to the transaction
        self._txn = transactions
        # starts background tasks: the producer's supervisor, so that a crash turns it fatal
        self._spawn = spawn or _plain_spawn
        # (node, now in ms, could drain): feeds partitioner.availability.timeout.ms, which
        # leaves out partitions whose leader has had data ready but could not take it
        self._on_node_ready = on_node_ready
        self._acc = accumulator
        self._idem = idempotence
        # the steps around each partition's verdict in a drain (idempotence, the transaction)
        self._rules = SendRules(idempotence, transactions)
        self._max_in_flight = max_in_flight
        # one request per connection promises order even without idempotence (docs/batching.md)
        accumulator.guarantee_order = max_in_flight == 1
        self._max_request_size = max_request_size
        self._transaction_timeout_ms = transaction_timeout_ms
        self._client = client_id
        self._clock = clock
        self._waker = Waker()
        # the sender's wake-up is its waker's, without a call in between: the accumulator
        # wakes it for every new and every full batch
        self.wakeup: Callable[[], None] = self._waker.wake
        # what each outcome the sender reports does to its batch, partition and producer
        self._outcomes = BatchOutcomes(
            accumulator=accumulator, idempotence=idempotence, transactions=transactions,
            retries=retries, delivery_timeout_ms=delivery_timeout_ms, client_id=client_id,
            on_ack=on_ack, metrics=metrics, refresh_metadata=cluster.request_update,
            on_fatal=self._set_fatal)
        # Produce requests out and answers in; it counts each node's requests on the wire
        exchange = self._exchange = ProduceExchange(
            cluster=cluster, outcomes=self._outcomes, idempotence=idempotence,
            transactions=transactions, acks=acks, request_timeout_ms=request_timeout_ms,
            client_id=client_id, metrics=metrics, clock=clock, wakeup=self._waker.wake)
        self._task: asyncio.Task[None] | None = None
        self._init_task: asyncio.Task[None] | None = None
        self._closing = False  # deliver what is queued, then stop
        # set once: every later send fails with it (a plain attribute: send() reads it per record)
        self.fatal_error: BaseException | None = None
        cluster.on_change.append(self.wakeup)
        if metrics is not None:
            metrics.bind_gauge("requests-in-flight",
                               lambda: sum(exchange.in_flight_requests.values()))
        if idempotence is not None:
            cluster.on_leaders_moved.append(self._on_leaders_moved)

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = self._spawn(self._run(), f"aiokprod-sender[{self._client}]")

    def set_node_ready_hook(self, hook: Callable[[int, int, bool], None]) -> None:
        """Report, per ready node and wake-up, whether it could take data (KIP-794)."""
        self._on_node_ready = hook

    async def close(self, timeout: float | None) -> None:
        """Deliver everything queued, within ``timeout`` seconds; then fail what is left.

        ``timeout=None`` waits until every batch is done; that is bounded too, because no batch
        outlives ``delivery_timeout_ms``.
        """
        self._closing = True
        self._acc.close()
        self.wakeup()
        task = self._task
        try:
            if task is not None and not task.done() and (timeout is None or timeout > 0):
                # a crash of the task ends this wait too; the supervisor reports it
                await asyncio.wait({task}, timeout=timeout)
        finally:
            # whatever happened (timeout, crash, our caller's cancellation), nothing may stay
            # pending: fail what is left and stop the tasks, each step bounded
            if task is None or not task.done():
                why = ("before it started" if task is None
                       else f"with timeout={timeout}s before these records were delivered")
                self._abort_everything(ProducerClosedError(f"producer closed {why}"))
            elif self.fatal_error is None and task.cancelled():
                self._abort_everything(ProducerClosedError("producer closed"))
            for t in (task, self._init_task):
                if t is not None and not t.done():
                    t.cancel()
                    await asyncio.wait({t}, timeout=1.0)

    def abandon(self, error: BaseException) -> None:
        """A later close()'s timeout ran out: fail every record still held, without turning the
        producer fatal (the shutdown goes on to stop the task)."""
        self._abort_everything(error)

    def fail_everything(self, error: BaseException) -> None:
        """The producer turned fatal: refuse new sends and fail every record it holds."""
        if self.fatal_error is None:
            self.fatal_error = error
        self._abort_everything(error)
        self.wakeup()

    def _abort_everything(self, error: BaseException) -> None:
        self._outcomes.abort_everything(error)

    # ---- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        # no catch-all here: an unexpected exception ends the task and the supervisor turns the
        # producer fatal, failing every record with that cause (see supervisor.py)
        try:
            while True:
                if self._closing and not self._acc.has_incomplete() and \
                        not self._acc.on_wire():
                    return
                delay = self._run_once(self._clock())
                await self._waker.sleep(delay)
        finally:
            self._waker.close()

    def _run_once(self, now: float) -> float:
        acc = self._acc
        cluster = self._cluster
        if self.fatal_error is not None:
            # records appended after the producer failed (their send was waiting for metadata
            # or memory when it did) fail at once, not at delivery.timeout.ms
            for batch in acc.abort_queued():
                self._outcomes.fail(batch, self.fatal_error)
        expiry = self._outcomes.expire(now)
        idem = self._idem
        if idem is not None and self.fatal_error is None and idem.needs_producer_id() and \
                self._txn is None:
            self._ensure_producer_id()
        view = cluster.view
        ready = acc.ready(view, now)
        if ready.unknown_leader_topics:
            for topic in ready.unknown_leader_topics:
                cluster.add_topic(topic)
            cluster.request_update()
        delay = min(ready.next_ready_delay, expiry)
        nodes: list[int] = []
        on_node_ready = self._on_node_ready
        in_flight_requests = self._exchange.in_flight_requests
        for node in ready.ready_nodes:
            conn = cluster.ready_connection(node)
            if conn is None:
                wait = cluster.connection_delay(node)
                if wait > 0:
                    delay = min(delay, wait)
                if on_node_ready is not None:
                    on_node_ready(node, int(now * 1000), False)
                continue  # on_change wakes us when it connects
            if in_flight_requests.get(node, 0) >= self._max_in_flight:
                if on_node_ready is not None:
                    on_node_ready(node, int(now * 1000), False)
                continue  # a response wakes us
            if on_node_ready is not None:
                on_node_ready(node, int(now * 1000), True)
            nodes.append(node)
        if not nodes:
            return delay
        drained = acc.drain(view, nodes, self._max_request_size, now, self._rules)
        send = self._exchange.send
        for node, batches in drained.items():
            send(node, batches, now)
        if idem is not None:
            self._outcomes.fail_doomed()
        if drained:
            # a request takes at most one batch per partition: more may be sendable now
            # (Java polls with timeout 0 while nodes are ready). When nothing could be drained
            # we sleep instead: a response, a new batch or a new connection wakes us.
            return 0.0
        return delay

    # ---- producer id (idempotence) ---------------------------------------------------------

    def _ensure_producer_id(self) -> None:
        if self._init_task is None or self._init_task.done():
            self._init_task = self._spawn(self._init_producer_id(),
                                          f"aiokprod-init-pid[{self._client}]")

    async def _init_producer_id(self) -> None:
        """InitProducerId on any broker until the manager holds an id
        (``producer_id.init_on_any_broker``: the transactional producer's rules too)."""
        idem = self._idem
        if idem is None:
            return
        requester = ProducerIdRequester(idem, transactional_id=None,
                                        transaction_timeout_ms=self._transaction_timeout_ms,
                                        client_id=self._client)
        if await init_on_any_broker(requester, self._cluster,
                                    stopped=lambda: self.fatal_error is not None,
                                    on_fatal=self._set_fatal):
            self.wakeup()

    def _set_fatal(self, error: BaseException) -> None:
        if self.fatal_error is None:
            self.fatal_error = error
            log.error("[client %s] fatal producer error: %s", self._client, error)
            for batch in self._acc.abort_queued():
                self._outcomes.fail(batch, error)
            self.wakeup()

    def _on_leaders_moved(self, topics: list[str]) -> None:
        """KIP-1269: a new leader may keep the classic 5 batches, whatever the old one said, so
        every partition of a topic whose leaders moved goes back to 5 and learns again (the
        metadata says which topics moved, not which partitions; 5 is always safe)."""
        idem = self._idem
        if idem is None:
            return
        view = self._cluster.view
        for topic in set(topics):
            meta = view.topics.get(topic)
            for partition in (meta.partition_ids if meta is not None else ()):
                idem.on_leader_change(TopicPartition(topic, partition))

    # ---- outcomes --------------------------------------------------------------------------

    def abort_queued_batches(self, error: BaseException) -> int:
        """Fail every batch still queued with ``error`` (a transaction abort); batches on the
        wire are left to their answers. Returns how many were failed."""
        aborted = self._outcomes.abort_queued(error)
        self.wakeup()
        return aborted

    def in_flight_batches(self) -> list[ProducerBatch]:
        """Batches sent and not answered yet (a transaction abort waits for them)."""
        return self._acc.on_wire()

    # ---- introspection ---------------------------------------------------------------------

    def statistics(self) -> SenderStatistics:
        idem = self._idem
        exchange = self._exchange
        return SenderStatistics(
            in_flight_requests=sum(exchange.in_flight_requests.values()),
            in_flight_batches=len(self._acc.on_wire()),
            requests_sent=exchange.requests_sent,
            batches_sent=exchange.batches_sent,
            retries=self._outcomes.retries_done,
            failed_batches=self._outcomes.failed_batches,
            producer_id=idem.producer_id if idem is not None else -1,
            producer_epoch=idem.producer_epoch if idem is not None else -1,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"<Sender client={self._client} in_flight={s.in_flight_batches} "
                f"requests={s.requests_sent} retries={s.retries} pid={s.producer_id}>")
