"""The accumulator's side that the sender calls (docs/batching.md R1-R5, D1-D5): which nodes
are ready and when to look again, draining one request's worth per node, putting retries and
split batches back in order, expiry.

A mixin of ``RecordAccumulator`` (the append side, the memory pool and flush/close live in
``accumulator.py``); the state it reads is the accumulator's, declared below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiokprod.errors import KafkaTimeoutError
from aiokprod.network.metadata import ClusterView
from aiokprod.producer.batch import ProducerBatch
from aiokprod.producer.batch_split import split_refused
from aiokprod.producer.partition import PartitionProducer, Partitions

if TYPE_CHECKING:
    from aiokprod.producer.buffer_pool import BufferPool
    from aiokprod.records import CompressionRatioEstimator, CompressionType

__all__ = ["ReadyCheck", "SenderSide"]


@dataclass
class ReadyCheck:
    ready_nodes: set[int] = field(default_factory=set)
    # seconds until some batch becomes sendable on its own (linger/backoff); inf when none
    next_ready_delay: float = float("inf")
    unknown_leader_topics: set[str] = field(default_factory=set)



class SenderSide:
    """ready, drain, re-queueing and expiry over the accumulator's partitions."""

    # the accumulator's state (set in RecordAccumulator.__init__)
    batch_size: int
    compression: CompressionType
    guarantee_order: bool
    on_queue_sizes: Callable[[str, list[tuple[int, int | None, int]]], None] | None
    _pool: BufferPool
    _partitions: Partitions
    _queues: dict[str, dict[int, PartitionProducer]]
    _incomplete: set[ProducerBatch]
    _flushes: int
    _closed: bool
    _linger: float
    _delivery_timeout: float
    _retry_backoff: Callable[[int], float]
    _compression_level: int | None
    _estimator: CompressionRatioEstimator | None
    _wakeup: Callable[[], None]
    _drain_index: dict[int, int]
    _queued_records: int
    _nodes_cache: tuple[ClusterView, int, dict[int, list[tuple[PartitionProducer, int]]]] | None

    def _queue(self, topic: str, partition: int) -> PartitionProducer:
        raise NotImplementedError

    def release(self, batch: ProducerBatch) -> None:
        raise NotImplementedError

    def ready(self, view: ClusterView, now: float) -> ReadyCheck:
        result = ReadyCheck()
        exhausted = self._pool.waiters > 0
        feed = self.on_queue_sizes
        urgent = exhausted or self._flushes > 0 or self._closed
        linger = self._linger
        for topic, parts in self._queues.items():
            meta = view.topics.get(topic)
            if feed is not None and meta is not None:
                # KIP-794: the adaptive partitioner steers new records away from long queues
                feed(topic, [(p, meta.leader(p) if meta.leader(p) >= 0 else None,
                              len(parts[p].batches) - parts[p].drain_index
                              if p in parts else 0)
                             for p in meta.partition_ids])
            for partition, queue in parts.items():
                first = queue.head()
                if first is None:
                    continue
                if queue.wire_requests and self.guarantee_order:
                    continue  # muted: its batch on the wire must be answered first (D5)
                pm = meta.partitions.get(partition) if meta is not None else None
                if pm is None or pm.leader < 0:
                    result.unknown_leader_topics.add(topic)
                    continue
                leader = pm.leader
                if leader in result.ready_nodes:
                    continue
                if first.attempts > 0:
                    wait_until = first.retry_at
                    # backing off, unless its partition has a new leader since (Java's
                    # hasLeaderChangedForTheOngoingRetry): the error was the old leader's
                    if now < wait_until and not pm.leader_epoch > first.leader_epoch:
                        result.next_ready_delay = min(result.next_ready_delay, wait_until - now)
                        continue
                    result.ready_nodes.add(leader)
                    continue
                full = len(queue.batches) - queue.drain_index > 1 or first.builder.is_full()
                waited = now - first.created_at
                if full or urgent or waited >= linger:
                    result.ready_nodes.add(leader)
                else:
                    result.next_ready_delay = min(result.next_ready_delay, linger - waited)
        return result

    def drain(
        self,
        view: ClusterView,
        nodes: Iterable[int],
        max_request_size: int,
        now: float,
        can_send: Callable[[ProducerBatch], bool] = lambda b: True,
        on_drain: Callable[[ProducerBatch], None] = lambda b: None,
    ) -> dict[int, list[ProducerBatch]]:
        """At most one request's worth of batches per node, rotating the starting partition.

        ``can_send`` lets idempotence hold a partition back (docs/idempotence.md step 2);
        ``on_drain`` assigns sequences before the batch is sealed (steps 3-5).
        """
        by_node = self._partitions_by_node(view)
        result: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            queues = by_node.get(node)
            if not queues:
                continue
            start = self._drain_index.get(node, 0) % len(queues)
            taken: list[ProducerBatch] = []
            size = 0
            n = len(queues)
            for i in range(n):
                queue, leader_epoch = queues[(start + i) % n]
                first = queue.head()
                if first is None:
                    continue
                if first.attempts > 0 and now < first.retry_at and \
                        not leader_epoch > first.leader_epoch:
                    continue  # backing off, unless its partition has a new leader since
                batch_size = first.size_in_bytes
                if taken and size + batch_size > max_request_size:
                    # D1: stop here; the rest goes in the next request
                    self._drain_index[node] = (start + i) % n
                    break
                if queue.wire_requests and self.guarantee_order:
                    continue  # muted (D5)
                if not can_send(first):
                    continue
                queue.drain_index += 1  # it stays in the queue until answered
                first.queued = False
                self._queued_records -= first.record_count
                on_drain(first)
                first.seal()
                first.drained_at = now
                first.leader_epoch = leader_epoch
                taken.append(first)
                size += first.size_in_bytes
            else:
                self._drain_index[node] = (start + 1) % n
            if taken:
                result[node] = taken
        return result

    def _partitions_by_node(self, view: ClusterView
                            ) -> dict[int, list[tuple[PartitionProducer, int]]]:
        """Each node's partitions with their leader epoch in ``view``."""
        cached = self._nodes_cache
        created = self._partitions.created
        if cached is not None and cached[0] is view and cached[1] == created:
            return cached[2]
        by_node: dict[int, list[tuple[PartitionProducer, int]]] = {}
        for topic, parts in self._queues.items():
            meta = view.topics.get(topic)
            if meta is None:
                continue
            for partition, queue in sorted(parts.items()):
                pm = meta.partitions.get(partition)
                if pm is not None and pm.leader >= 0:
                    by_node.setdefault(pm.leader, []).append((queue, pm.leader_epoch))
        self._nodes_cache = (view, created, by_node)
        return by_node

    def reenqueue(self, batch: ProducerBatch, now: float, *, front: bool = False) -> None:
        """Put a drained batch back for a retry: its partition's drain cursor rewinds to it.

        The batch never left its partition's queue (``PartitionState.batches`` holds every
        unacknowledged batch in the order it was first drained), so it keeps its place: before
        every batch drained after it and every batch never drained. For an idempotent
        producer that place is its sequence order (docs/idempotence.md step 8b), with no
        comparison of sequence numbers, which wrap at 2**31-1 and are renumbered by resets.
        ``front`` is kept for callers: a retry always goes before what was never drained.
        """
        batch.attempts += 1
        batch.in_retry = True
        batch.last_attempt_at = now
        batch.retry_at = now + self._retry_backoff(batch.attempts - 1) / 1000
        self._put_back(batch)

    def requeue_split(self, batches: Sequence[ProducerBatch]) -> None:
        """Queue the batches a split made (they hold the refused batch's place, ``split``),
        as never tried.

        The broker refused the batch for its size, not for anything a wait would change, so
        its parts go out without the retry backoff and with ``attempts`` 0, as new batches
        (the Java client's splitAndReenqueue): no attempt was used up and, being first
        attempts, they count in the per-batch metrics.
        """
        for batch in batches:
            self._put_back(batch)

    def _put_back(self, batch: ProducerBatch) -> None:
        self._queue(batch.topic, batch.partition).put_back(batch)
        self._queued_records += batch.record_count
        self._wakeup()

    def split(self, batch: ProducerBatch, now: float) -> list[ProducerBatch]:
        """docs/compression.md S1-S5: re-cut a batch the broker refused as too large
        (``batch_split.split_refused``); the new batches take its place in its partition's
        queue and are tracked as incomplete, and the old one's memory goes back to the pool.
        The caller numbers (idempotence) and queues them (``requeue_split``)."""
        created = split_refused(batch, batch_size=self.batch_size,
                                compression=self.compression,
                                compression_level=self._compression_level,
                                estimator=self._estimator)
        for part in created:
            part.queued = False  # waiting once requeue_split (or a reenqueue) puts it back
        queue = self._queue(batch.topic, batch.partition)
        if batch in queue.batches:
            queue.replace_batch(batch, created)
        self._incomplete.update(created)
        batch.done = True
        batch.final_state = "split"
        self.release(batch)
        return created

    def expire(self, now: float) -> list[ProducerBatch]:
        """Batches still waiting past ``delivery_timeout_ms``, oldest first from each
        partition's drain cursor: taken out, for the sender to fail."""
        expired: list[ProducerBatch] = []
        deadline = self._delivery_timeout
        for parts in self._queues.values():
            for queue in parts.values():
                batch = queue.head()
                while batch is not None and now - batch.created_at >= deadline:
                    queue.discard(batch)
                    self._queued_records -= batch.record_count
                    expired.append(batch)
                    batch = queue.head()
        return expired

    def delivery_timeout_error(self, batch: ProducerBatch, now: float) -> KafkaTimeoutError:
        return KafkaTimeoutError(
            f"Expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
            f"{int((now - batch.created_at) * 1000)} ms has passed since batch creation "
            f"(delivery.timeout.ms={int(self._delivery_timeout * 1000)})")

    def next_expiry_delay(self, now: float) -> float:
        heads = (q.head() for parts in self._queues.values() for q in parts.values())
        oldest = min((h.created_at for h in heads if h is not None), default=None)
        return float("inf") if oldest is None else max(0.0, oldest + self._delivery_timeout - now)
