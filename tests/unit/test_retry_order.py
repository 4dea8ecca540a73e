"""Retries across the int32 sequence wrap (issue 8, item 3), on the real RecordAccumulator and
IdempotenceManager wired the way the sender wires them.

Sequences wrap from 2**31-1 to 0. ``RecordAccumulator.reenqueue`` used to order retries with a
plain ``>``, so a retry of sequence 2**31-2 went back *behind* a retry of sequence 1. While a
partition retries, idempotence sends only the first batch it holds (docs/idempotence.md 2c): the
queue's head was never that batch, and the partition stalled until delivery.timeout.ms.
"""

from __future__ import annotations

import asyncio

from aiokprod._error_codes import ErrorCode
from aiokprod.network.metadata import BrokerNode, ClusterView, PartitionMetadata, TopicMetadata
from aiokprod.producer.batch import ProducerBatch
from aiokprod.producer.batching.accumulator import RecordAccumulator
from aiokprod.producer.batching.buffer_pool import BufferPool
from aiokprod.producer.batching.send_rules import SendRules
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.partition import Partitions
from aiokprod.producer.retry_policy import Action
from aiokprod.producer.sequences import MAX_SEQUENCE
from aiokprod.records import read_batches

TOPIC = "t"
VALUE = b"v" * 100


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def view() -> ClusterView:
    return ClusterView({1: BrokerNode(1, "localhost", 9001)},
                       {TOPIC: TopicMetadata.build(TOPIC, [PartitionMetadata(0, 1, 0)])})


def accumulator(clock: Clock, partitions: Partitions | None = None) -> RecordAccumulator:
    return RecordAccumulator(pool=BufferPool(1 << 20, 1024, clock=clock), batch_size=1024,
                             linger_ms=0, delivery_timeout_ms=120_000,
                             retry_backoff=lambda attempts: 10.0, clock=clock,
                             partitions=partitions)


async def test_retries_across_the_sequence_wrap_go_back_in_wrap_aware_order() -> None:
    """A retry keeps its place in its partition's queue (the drain cursor rewinds to it), so
    a goes before b whatever their sequence numbers say."""
    clock = Clock()
    partitions = Partitions()
    acc = accumulator(clock, partitions)
    idem = IdempotenceManager(clock=clock, partitions=partitions)
    idem.init_producer_id_params()
    idem.on_producer_id(7, 0)
    cluster = view()

    rules = SendRules(idem)

    def drain() -> list[ProducerBatch]:
        drained = acc.drain(cluster, [1], 1 << 20, clock.now, rules)
        return drained.get(1, [])

    # one batch acknowledged, then the partition's sequences are moved close to the wrap
    assert acc.try_append(TOPIC, 0, 0, None, VALUE, None) is not None
    (first,) = drain()
    idem.on_success(first, base_offset=0)
    p = idem.partition_state(first)
    p.next_sequence, p.last_acked_sequence = MAX_SEQUENCE - 1, MAX_SEQUENCE - 2
    # two full batches: a holds MAX-1, MAX, 0 .. and b continues after the wrap
    sent: list[ProducerBatch] = []
    for _ in range(2):
        for _ in range(3):
            acc.try_append(TOPIC, 0, 0, None, VALUE, None)
        clock.now += 0.001
        acc.try_append(TOPIC, 0, 0, None, b"x" * 900, None)  # forces the next batch
        (batch,) = drain()
        sent.append(batch)
    a, b = sent
    assert a.base_sequence == MAX_SEQUENCE - 1
    assert 0 < b.base_sequence < a.base_sequence  # b's sequence wrapped
    # the leader moved: b is answered first, then a; both go back for a retry
    for batch in (b, a):
        assert idem.on_error(batch, ErrorCode.NOT_LEADER_OR_FOLLOWER, clock.now).action \
            is Action.RETRY
        acc.reenqueue(batch, clock.now)
    clock.now += 1.0
    # a must come first; with the plain ">" the queue was [b, a] and nothing could be drained
    order = []
    for _ in range(4):
        drained = drain()
        if not drained:
            break
        (batch,) = drained
        order.append(batch)
        idem.on_success(batch, base_offset=len(order))
        clock.now += 0.001
    assert order[:2] == [a, b], [x.base_sequence for x in order]
    # what goes on the wire carries the wrapped sequences, as the broker expects them
    assert b.sealed is not None
    (decoded,) = list(read_batches(b.sealed))
    assert decoded.base_sequence == b.base_sequence
    assert acc.statistics().queued_batches <= 1
    await asyncio.sleep(0)


async def test_a_retry_rewinds_the_drain_cursor_instead_of_being_reinserted() -> None:
    """The partition keeps one queue of unacknowledged batches: a retry stays where it was
    drained and the cursor goes back to it, whatever order the answers come in and whatever
    the sequence numbers say (here deliberately out of order); batches still awaiting their
    answers are stepped over, not drained twice."""
    clock = Clock()
    acc = accumulator(clock)
    cluster = view()
    sent = []
    for seq in (30, 10, 20):
        acc.try_append(TOPIC, 0, 0, None, b"x" * 1000, None)
        (batch,) = acc.drain(cluster, [1], 1 << 20, clock.now)[1]
        batch.base_sequence = seq  # the cursor must not go by these
        sent.append(batch)
    a, b, c = sent
    acc.try_append(TOPIC, 0, 0, None, VALUE, None)  # new, unnumbered: stays last
    queue = acc.partition(TOPIC, 0)
    (d,) = acc.queued_batches(TOPIC, 0)
    assert list(queue.batches) == [a, b, c, d] and queue.drain_index == 3
    acc.reenqueue(b, clock.now)  # a and c still await their answers
    assert list(queue.batches) == [a, b, c, d] and queue.drain_index == 1
    assert acc.queued_batches(TOPIC, 0) == [b, d]
    assert acc.last_queued_batch(TOPIC, 0) is d  # what the sticky partitioner watches
    clock.now += 1.0

    def drain() -> list[ProducerBatch]:
        return acc.drain(cluster, [1], 1 << 20, clock.now).get(1, [])

    assert drain() == [b]
    assert drain() == [d]  # c is on its way: stepped over
    assert drain() == []
    assert acc.last_queued_batch(TOPIC, 0) is None  # all drained: none waits
    for batch in (c, a):  # answered out of order: both retry, in their queue order
        acc.reenqueue(batch, clock.now)
    assert acc.queued_batches(TOPIC, 0) == [a, c]
    assert acc.last_queued_batch(TOPIC, 0) is c  # d, after it, is on the wire
    clock.now += 1.0
    assert [drain(), drain(), drain()] == [[a], [c], []]
    for batch in (a, b, c, d):  # answered: they leave the queue
        batch.complete(0, -1)
        acc.release(batch)
    assert not queue.batches and queue.drain_index == 0
