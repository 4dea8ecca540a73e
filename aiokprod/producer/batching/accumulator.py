"""RecordAccumulator: per-partition queues of batches between ``send`` and the sender.

docs/batching.md (A1-A3, R1-R5, D1-D4) states the rules. ``send`` appends into the last open
batch of the partition, or starts a new one with memory from the ``BufferPool``; the sender asks
``ready()`` which nodes have something sendable and when to look again, then ``drain()`` takes at
most one request's worth per node. No per-record timer exists: the sender is woken when a batch is
created or fills up, and otherwise sleeps until the delay ``ready()`` computed. A retried batch
goes back to its place in its partition's queue (``reenqueue``), so do the batches a split cut
from a refused one (``split``, ``requeue_split``); ``expire`` takes out what outlived
``delivery_timeout_ms`` (docs/batching.md D1-D5).

A partition's first batch is sendable when (docs/batching.md, R1-R4):
full (or a second batch is queued behind it) | lingered ``linger_ms`` | someone waits for memory
| a flush is in progress | the producer is closing — and it is not backing off after an error.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiokprod.errors import KafkaTimeoutError
from aiokprod.network.metadata import ClusterView
from aiokprod.producer.batch import DELIVERY_STRIDE, ProducerBatch, RecordMetadata
from aiokprod.producer.batch import append_open as _append_open
from aiokprod.producer.batching.batch_split import split_refused
from aiokprod.producer.batching.send_rules import SendRules
from aiokprod.producer.partition import (
    GIVE_UP_FIRST,
    HOLD_BACKOFF,
    PartitionProducer,
    Partitions,
)
from aiokprod.records import (
    CompressionRatioEstimator,
    CompressionType,
    RecordBatchBuilder,
)
from aiokprod.records.columnar import ColumnarRows

if TYPE_CHECKING:
    from aiokprod.producer.batching.buffer_pool import BufferPool
    from aiokprod.producer.bulk import BulkDelivery

__all__ = ["NO_RULES", "AccumulatorStatistics", "ReadyCheck", "RecordAccumulator",
           "estimate_record_size"]

# a partition of this producer, whose queue holds ProducerBatch objects
_Partition = PartitionProducer[ProducerBatch]

# The rules of a producer that is neither idempotent nor transactional: they ask nothing.
NO_RULES = SendRules()

log = logging.getLogger(__name__)

_BATCH_HEADER = 61  # RecordBatch v2 header bytes
_RECORD_OVERHEAD = 21  # worst-case varints + attributes of one record
# Python-side bookkeeping per record queued with send(): its future, its delivery slots and
# their ints, as measured with tracemalloc on CPython 3.11 (229 bytes), rounded up. buffer.memory
# is charged for it in blocks (one record per KiB of batch.size: 16 records by default), so the
# pool bounds what queued records really cost (the Java client bounds only their bytes).
RECORD_BOOKKEEPING_BYTES = 240


def estimate_record_size(key: bytes | None, value: bytes | None,
                         headers: Sequence[tuple[str, bytes | None]] | None) -> int:
    """An upper bound of one record's encoded size, to size a buffer for an oversize record."""
    size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        for hk, hv in headers:
            size += 10 + len(hk) * 4 + (len(hv) if hv else 0)
    return size


@dataclass
class ReadyCheck:
    """What ``ready()`` found: the nodes to drain now, and when to look again."""

    ready_nodes: set[int] = field(default_factory=set)
    # seconds until some batch becomes sendable on its own (linger/backoff); inf when none
    next_ready_delay: float = float("inf")
    unknown_leader_topics: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class AccumulatorStatistics:
    partitions: int
    queued_batches: int
    queued_records: int
    incomplete_batches: int
    flushes_in_progress: int
    closed: bool
    # partitions held back because a batch of theirs is on the wire (guarantee_order only)
    muted_partitions: int = 0


class RecordAccumulator:
    """The per-partition queues of batches, with both of their sides in one class.

    ``send`` appends (``try_append`` and the rest, never suspending); the sender asks which
    nodes are ready, drains, puts retries and split batches back and expires what waited too
    long. Both sides keep the same counts (queued records, incomplete batches) and read the
    same flush/close state, so they are one object: the Java client's RecordAccumulator has the
    same shape.
    """

    def __init__(
        self,
        *,
        pool: BufferPool,
        batch_size: int,
        linger_ms: int,
        delivery_timeout_ms: int,
        compression: CompressionType = CompressionType.NONE,
        compression_level: int | None = None,
        estimator: CompressionRatioEstimator | None = None,
        retry_backoff: Callable[[int], float] | None = None,
        on_wakeup: Callable[[], None] = lambda: None,
        clock: Callable[[], float],
        partitions: Partitions[ProducerBatch] | None = None,
    ) -> None:
        self._pool = pool
        self.batch_size = batch_size
        # records per bookkeeping block, and what a block is charged to the pool
        self._block_records = max(1, batch_size // 1024)
        self._block_bytes = self._block_records * RECORD_BOOKKEEPING_BYTES
        self._linger = linger_ms / 1000
        self._delivery_timeout = delivery_timeout_ms / 1000
        self.compression = compression
        # attempts → milliseconds before a retried batch is sendable again (KIP-580)
        self._retry_backoff = retry_backoff or (lambda attempts: 100.0)  # retry.backoff.ms
        self._compression_level = compression_level
        # per (topic, codec) compression ratio estimate (docs/compression.md E1-E5)
        self._estimator = estimator
        self._wakeup = on_wakeup
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._create_future = self._loop.create_future
        # the producer's partitions, shared with idempotence (their sequences): each holds
        # its queue of batches. by_topic is read directly on the append path.
        self._partitions = partitions if partitions is not None else Partitions()
        self._queues = self._partitions.by_topic
        self._incomplete: set[ProducerBatch] = set()  # created, not yet completed or failed
        self._flushes = 0  # flush() calls in progress: everything is sendable meanwhile
        self._closed = False  # close(): everything is sendable, no new appends
        # node → where its next drain starts in its list of partitions (``_partitions_by_node``),
        # rotated so that no partition always goes first (fairness); not to be confused with a
        # partition's ``drain_index``, its cursor into its own queue
        self._node_rotation: dict[int, int] = {}
        self._queued_records = 0  # incrementally kept for statistics()
        # max.in.flight.requests.per.connection=1 promises order without idempotence: a
        # partition with a batch on the wire (a batch in PartitionProducer.wire) is muted --
        # neither ready nor drained -- so a later batch cannot overtake it through a new
        # leader (Java's guaranteeMessageOrder)
        self.guarantee_order = False
        # partitions grouped by leader for drain(): (view, partitions created, by leader), valid
        # while the view is the same object (views are replaced, not mutated) and no partition
        # was created since
        self._nodes_cache: tuple[ClusterView, int,
                                 dict[int, list[tuple[_Partition, int]]]] | None = None
        # topic, [(partition, leader or None, queued batches)] → the partitioner (KIP-794)
        self.on_queue_sizes: Callable[[str, list[tuple[int, int | None, int]]], None] | None \
            = None

    # ---- appending (the producer's fast path; never suspends) ------------------------------

    def try_append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> asyncio.Future[RecordMetadata] | None:
        """Append into the open batch or a new one with memory available now; None if none is.

        The hot path: one dict lookup per level, then for a record without headers one call
        (``batch.append_open``, in C on the native path) that encodes it, updates the builder
        and makes its future (again after charging a new bookkeeping block, if that was what
        was missing); a record with headers goes through the builder here. A full batch opens
        a new one. The sender is woken when a batch fills, not per record.
        """
        parts = self._queues.get(topic)
        queue = parts.get(partition) if parts is not None else None
        if queue is None:
            queue = self.partition(topic, partition)
        batches = queue.batches
        if batches:
            last = batches[-1]
            appended: asyncio.Future[RecordMetadata] | None = None
            if headers is None:
                appended = _append_open(last, timestamp, key, value, self._create_future)
                if appended is None and last.sealed is None and \
                        len(last.deliveries) >= last.covered_slots and self._cover(last):
                    # its bookkeeping was used up: with another block charged it may take it
                    # (refused for lack of room, it is not encoded a second time)
                    appended = _append_open(last, timestamp, key, value, self._create_future)
            elif last.sealed is None and (
                    len(last.deliveries) < last.covered_slots or self._cover(last)) and \
                    last.builder.try_append(timestamp, key, value, headers):
                appended = self._create_future()
                builder = last.builder
                last.deliveries.extend((appended, builder.record_count - 1,
                                        timestamp - last.ts_base,
                                        -1 if key is None else len(key),
                                        -1 if value is None else len(value)))
            if appended is not None:
                self._queued_records += 1
                if last.builder.full:
                    self._wakeup()  # R1: a full batch is sendable now (Java: batchIsFull)
                return appended
        if batches and batches[-1].sealed is None and not batches[-1].builder.full and \
                len(batches[-1].deliveries) >= batches[-1].covered_slots:
            return None  # the open batch has room but no bookkeeping block: wait for memory
        size = self.allocation_size(key, value, headers)
        buffer = self._pool.try_allocate(size)
        if buffer is None:
            return None
        future = self._loop.create_future()
        self._new_batch(queue, buffer, size, timestamp, key, value, headers, future)
        return future

    def _cover(self, batch: ProducerBatch) -> bool:
        """Charge the pool for one more block of records' bookkeeping, if it has the memory."""
        if self._pool.try_allocate(self._block_bytes) is None:
            return False
        batch.buffer_size += self._block_bytes
        batch.covered_slots += self._block_records * DELIVERY_STRIDE
        return True

    def append_with_buffer(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
        buffer: bytearray,
        size: int,
    ) -> asyncio.Future[RecordMetadata]:
        """Append after waiting for ``size`` bytes of memory (``allocation_size``).

        The memory waited for opens a new batch, which it always suffices for, so a send that
        waited never fails for memory afterwards. Only if the open batch can take the record
        within what it is already charged (another send made room meanwhile) does the record
        go there, and the memory goes back to the pool. See docs/memory.md.
        """
        queue = self.partition(topic, partition)
        future: asyncio.Future[RecordMetadata] = self._loop.create_future()
        last = queue.batches[-1] if queue.batches else None
        if last is not None and len(last.deliveries) < last.covered_slots and \
                last.try_append(timestamp, key, value, headers, future):
            self._queued_records += 1
            self._pool.deallocate(b"", size)
            if last.builder.full:
                self._wakeup()
            return future
        self._new_batch(queue, buffer, size, timestamp, key, value, headers, future)
        return future

    def try_append_many(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
        start: int,
        stop: int,
        bulk: BulkDelivery,
    ) -> tuple[int, int]:
        """Append ``values[start:stop]`` into the partition's open batch, as many as fit.

        Returns (records taken, bytes they added); (0, 0) when there is no open batch with
        room, and the caller then opens one with ``append_many_with_buffer``.
        """
        parts = self._queues.get(topic)
        queue = parts.get(partition) if parts is not None else None
        if queue is None:
            queue = self.partition(topic, partition)
        batches = queue.batches
        if not batches or batches[-1].sealed is not None:
            return 0, 0
        return self._append_run(batches[-1], timestamp, values, keys, headers, start, stop,
                                bulk)

    def append_many_with_buffer(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
        start: int,
        stop: int,
        bulk: BulkDelivery,
        buffer: bytearray,
        size: int,
    ) -> tuple[int, int]:
        """Open a new batch in ``buffer`` and append a run into it (at least one record)."""
        queue = self.partition(topic, partition)
        batch = self._open_batch(queue, buffer, size, size, timestamp)
        taken = self._append_run(batch, timestamp, values, keys, headers, start, stop, bulk)
        self._enqueue_new(queue, batch, appended=taken[0] > 0)
        return taken

    def _append_run(
        self,
        batch: ProducerBatch,
        timestamp: int,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
        start: int,
        stop: int,
        bulk: BulkDelivery,
    ) -> tuple[int, int]:
        builder = batch.builder
        first = builder.record_count
        before = builder.uncompressed_size
        if type(values) is ColumnarRows:  # send_columns: rows straight from Arrow buffers
            taken = values.append_to(builder, start, stop)
        else:
            taken = builder.append_many(timestamp, values, keys, headers, start=start, stop=stop)
        if builder.full:
            self._wakeup()
        if taken:
            segment = (bulk, start, taken, first)
            if batch.segments is None:
                batch.segments = [segment]
            else:
                batch.segments.append(segment)
            self._queued_records += taken
        return taken, builder.uncompressed_size - before

    def allocation_size(self, key: bytes | None, value: bytes | None,
                        headers: Sequence[tuple[str, bytes | None]] | None) -> int:
        """Memory a new batch for this record takes: its bytes and a first bookkeeping block."""
        size = self.batch_size
        if key is not None or headers or value is not None:
            size = max(size, estimate_record_size(key, value, headers) + _BATCH_HEADER)
        return size + self._block_bytes

    def bulk_allocation_size(self, key: bytes | None, value: bytes | None,
                             headers: Sequence[tuple[str, bytes | None]] | None) -> int:
        """Memory a new batch opened by send_many takes: its bytes only (a bulk run keeps one
        small tuple per batch, not per record)."""
        return self.allocation_size(key, value, headers) - self._block_bytes

    def _new_batch(
        self,
        queue: _Partition,
        buffer: bytearray,
        size: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
        future: asyncio.Future[RecordMetadata],
    ) -> None:
        batch = self._open_batch(queue, buffer, size, size - self._block_bytes, timestamp)
        # allocation_size included a first block
        batch.covered_slots = self._block_records * DELIVERY_STRIDE
        appended = batch.try_append(timestamp, key, value, headers, future)
        self._enqueue_new(queue, batch, appended=appended)
        self._queued_records += 1

    def _open_batch(self, queue: _Partition, buffer: bytearray, size: int,
                    record_bytes: int, timestamp: int) -> ProducerBatch:
        """A new batch charged ``size`` bytes, of which ``record_bytes`` are for records, for
        a first record stamped ``timestamp``."""
        builder = RecordBatchBuilder(
            buffer, write_limit=max(record_bytes, self.batch_size), compression=self.compression,
            compression_level=self._compression_level, estimator=self._estimator,
            topic=queue.topic)
        return ProducerBatch(queue, buffer, size, builder, self._clock(), timestamp)

    def _enqueue_new(self, queue: _Partition, batch: ProducerBatch, *, appended: bool
                     ) -> None:
        if not appended:
            # cannot happen for an empty batch sized for the record; fail loudly, lose nothing
            self._pool.deallocate(b"", batch.buffer_size)
            raise RuntimeError(f"a record did not fit an empty batch of {batch.buffer_size} "
                               f"bytes")
        queue.batches.append(batch)
        self._incomplete.add(batch)
        self._wakeup()

    def queued_batches(self, topic: str, partition: int) -> list[ProducerBatch]:
        """The partition's batches waiting to be drained, head first (tests and
        diagnostics)."""
        queue = self._partitions.find(topic, partition)
        return [] if queue is None else queue.waiting()

    def last_queued_batch(self, topic: str, partition: int) -> ProducerBatch | None:
        """The partition's last batch waiting to be drained (the sticky partitioner's)."""
        queue = self._partitions.find(topic, partition)
        return None if queue is None else queue.last_waiting()

    def release(self, batch: ProducerBatch) -> None:
        """The batch is finished: forget it and return its memory. A drained batch leaves
        its partition's queue here; a waiting one was taken out by whoever failed it."""
        self._incomplete.discard(batch)
        if not batch.queued:
            batch.owner.discard(batch)
        if batch.buffer_size:
            # Hand back the bytes, not the bytearray: the batch and its sealed memoryview (which
            # pins the buffer's size) may outlive this call (flush(), unresolved idempotent
            # batches), and the builder resizes buffers anyway, so reuse would gain nothing.
            self._pool.deallocate(b"", batch.buffer_size)
            batch.buffer_size = 0

    # ---- the sender's side: ready nodes, draining, re-queueing, expiry ---------------------

    def ready(self, view: ClusterView, now: float) -> ReadyCheck:
        """The nodes leading a partition whose first batch is sendable now (R1-R5; a muted
        partition is skipped, D5), and how long until one becomes sendable on its own."""
        result = ReadyCheck()
        exhausted = self._pool.waiters > 0
        feed = self.on_queue_sizes
        urgent = exhausted or self._flushes > 0 or self._closed
        linger = self._linger
        guarantee_order = self.guarantee_order
        for topic, parts in self._queues.items():
            meta = view.topics.get(topic)
            if feed is not None and meta is not None:
                # KIP-794: the adaptive partitioner steers new records away from long queues
                sizes = []
                for p in meta.partition_ids:
                    leader_of = meta.leader(p)
                    queue = parts.get(p)
                    sizes.append((p, leader_of if leader_of >= 0 else None,
                                  0 if queue is None else len(queue.batches) - queue.drain_index))
                feed(topic, sizes)
            for partition, queue in parts.items():
                first = queue.head()
                if first is None:
                    continue
                pm = meta.partitions.get(partition) if meta is not None else None
                if pm is None or pm.leader < 0:
                    result.unknown_leader_topics.add(topic)
                    continue
                leader = pm.leader
                if leader in result.ready_nodes:
                    continue
                # what the drain's verdict would say of time and the wire: a retry backing
                # off (R4), or muted behind its batch on the wire (D5)
                hold = queue.waits(first, now, pm.leader_epoch, guarantee_order)
                if hold == HOLD_BACKOFF:
                    result.next_ready_delay = min(result.next_ready_delay, first.retry_at - now)
                    continue
                if hold:
                    continue
                if first.attempts > 0:
                    result.ready_nodes.add(leader)  # a retry goes as soon as it may
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
        rules: SendRules = NO_RULES,
    ) -> dict[int, list[ProducerBatch]]:
        """At most one request's worth of batches per node, rotating the starting partition.

        Each partition's head goes if its verdict says so (``PartitionProducer.verdict``, the
        one place that decides); ``rules`` runs the steps around the question (idempotence,
        the transaction: ``SendRules``), ``before_drain`` first and ``after_drain`` last.
        """
        rules.before_drain(now)
        by_node = self._partitions_by_node(view)
        guarantee_order = self.guarantee_order
        facts = rules.facts
        result: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            queues = by_node.get(node)
            if not queues:
                continue
            start = self._node_rotation.get(node, 0) % len(queues)
            taken: list[ProducerBatch] = []
            size = 0
            n = len(queues)
            for i in range(n):
                queue, leader_epoch = queues[(start + i) % n]
                first = queue.head()
                if first is None:
                    continue
                verdict = queue.verdict(first, now, leader_epoch, guarantee_order, facts)
                if verdict == GIVE_UP_FIRST:
                    rules.give_up_unrenumberable(queue)
                    verdict = queue.verdict(first, now, leader_epoch, guarantee_order, facts)
                if verdict:
                    rules.held(queue, verdict)
                    continue
                if taken and size + first.size_in_bytes > max_request_size:
                    # D1: stop here; the rest goes in the next request
                    self._node_rotation[node] = (start + i) % n
                    break
                rules.taken(queue, first)  # numbered (idempotence) before it is on the wire
                queue.take_head(first)
                self._queued_records -= first.record_count
                first.seal()
                first.drained_at = now
                first.leader_epoch = leader_epoch
                taken.append(first)
                size += first.size_in_bytes
            else:
                self._node_rotation[node] = (start + 1) % n
            if taken:
                result[node] = taken
        rules.after_drain()  # what the holds ask: AddPartitionsToTxn, an abortable transaction
        return result

    def _partitions_by_node(self, view: ClusterView
                            ) -> dict[int, list[tuple[_Partition, int]]]:
        """Each node's partitions with their leader epoch in ``view``."""
        cached = self._nodes_cache
        created = self._partitions.created
        if cached is not None and cached[0] is view and cached[1] == created:
            return cached[2]
        by_node: dict[int, list[tuple[_Partition, int]]] = {}
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

        The batch never left its partition's queue (``PartitionProducer.batches`` holds every
        unacknowledged batch in the order it was first drained), so it keeps its place: before
        every batch drained after it and every batch never drained. For an idempotent
        producer that place is its sequence order (docs/idempotence.md step 8b), with no
        comparison of sequence numbers, which wrap at 2**31-1 and are renumbered by resets.
        ``front`` is kept for callers: a retry always goes before what was never drained.
        """
        batch.attempts += 1
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
        batch.owner.put_back(batch)
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
        queue = batch.owner
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
        oldest = math.inf  # a loop, not generators: it runs at every wake-up of the sender
        for parts in self._queues.values():
            for queue in parts.values():
                head = queue.head()
                if head is not None and head.created_at < oldest:
                    oldest = head.created_at
        return max(0.0, oldest + self._delivery_timeout - now)  # inf when nothing is queued

    # ---- flush / close -------------------------------------------------------------------

    def begin_flush(self) -> list[ProducerBatch]:
        self._flushes += 1
        self._wakeup()
        return list(self._incomplete)

    def end_flush(self) -> None:
        self._flushes -= 1

    def close(self) -> None:
        self._closed = True
        self._wakeup()

    @property
    def closed(self) -> bool:
        return self._closed

    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def oldest_incomplete_age(self) -> float:
        """Seconds since the oldest batch not yet acknowledged nor failed was created (0 with
        none): how long deliveries have been stalled, for ``Producer.health()``. It reads
        every such batch, which a health check a few times a minute can afford."""
        incomplete = self._incomplete
        if not incomplete:
            return 0.0
        return self._clock() - min(b.created_at for b in incomplete)

    def has_queued(self) -> bool:
        return self._queued_records > 0 or any(
            q.head() is not None for parts in self._queues.values() for q in parts.values())

    def abort_queued(self) -> list[ProducerBatch]:
        """Take every waiting batch out (close with a timeout, fatal errors); caller fails
        them. Drained batches stay until their answers."""
        aborted: list[ProducerBatch] = []
        for parts in self._queues.values():
            for queue in parts.values():
                aborted.extend(queue.take_waiting())
        self._queued_records = 0
        return aborted

    def remove_queued(self, batch: ProducerBatch) -> bool:
        """Take one queued batch out (idempotence gave up on it); the caller fails it.
        False if it is not queued (already drained, expired or aborted)."""
        if not batch.queued or not batch.owner.discard(batch):
            return False
        self._queued_records -= batch.record_count
        return True

    def on_wire(self) -> list[ProducerBatch]:
        """The batches sent and not answered yet, nor failed meanwhile (by
        delivery.timeout.ms): read from the partitions' ``wire``, where the drain put them."""
        return [b for parts in self._queues.values() for p in parts.values() if p.wire
                for b in p.wire if not b.done]

    def incomplete_batches(self) -> list[ProducerBatch]:
        return list(self._incomplete)

    def partition(self, topic: str, partition: int) -> _Partition:
        """The partition's object (created on first use)."""
        return self._partitions.get(topic, partition)

    def topic_in_use(self, topic: str) -> bool:
        """Records of ``topic`` are queued: its metadata must not expire (the sender still
        needs its leaders), whatever metadata.max.idle.ms says."""
        parts = self._queues.get(topic)
        return parts is not None and any(q.batches for q in parts.values())

    def forget_topic(self, topic: str) -> bool:
        """Drop the topic's (empty) queues after it expired from metadata; False, keeping
        them, if any batch is still queued."""
        parts = self._queues.get(topic)
        if parts is None:
            return True
        if any(p.batches or p.wire or p.in_flight or p.unresolved or p.next_sequence
               for p in parts.values()):
            return False  # queued, on the wire, or sequences idempotence decides about
        for partition in list(parts):
            self._partitions.drop(topic, partition)
        return True

    def statistics(self) -> AccumulatorStatistics:
        return AccumulatorStatistics(
            partitions=sum(len(p) for p in self._queues.values()),
            queued_batches=sum(len(q.waiting()) for p in self._queues.values()
                               for q in p.values()),
            queued_records=self._queued_records,
            incomplete_batches=len(self._incomplete),
            flushes_in_progress=self._flushes,
            closed=self._closed,
            muted_partitions=sum(1 for p in self._partitions if p.wire)
            if self.guarantee_order else 0,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"<RecordAccumulator partitions={s.partitions} queued_batches={s.queued_batches} "
                f"queued_records={s.queued_records} incomplete={s.incomplete_batches}>")
