"""RecordAccumulator with a real BufferPool and an injected clock: append, ready, drain, retry
order, expiry, memory, introspection and batch splitting.

The accumulator takes the running loop in its constructor (it creates futures), hence async
tests; nothing here sleeps or reads a real clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from aiokprod.errors import KafkaTimeoutError
from aiokprod.network.metadata import BrokerNode, ClusterView, PartitionMetadata, TopicMetadata
from aiokprod.producer.batch import ProducerBatch, RecordMetadata
from aiokprod.producer.batching.accumulator import (
    NO_RULES,
    RECORD_BOOKKEEPING_BYTES,
    RecordAccumulator,
)
from aiokprod.producer.batching.buffer_pool import BufferPool
from aiokprod.producer.batching.send_rules import SendRules
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.partition import Partitions
from aiokprod.producer.sending.outcomes import BatchOutcomes
from aiokprod.records import CompressionRatioEstimator, CompressionType, read_batches

TOPIC = "t"
TS = 1_700_000_000_000
BATCH_SIZE = 1024
# what one new batch is charged: its bytes and its first bookkeeping block (one record per KiB)
CHARGED_PER_BATCH = BATCH_SIZE + RECORD_BOOKKEEPING_BYTES
VALUE = b"v" * 100  # ~110 bytes on the wire: 8 records fill a 1024-byte batch
EPS = 1e-9  # past a deadline computed in floating point


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Harness:
    """An accumulator, its pool and clock, and a count of sender wake-ups."""

    def __init__(
        self,
        *,
        batch_size: int = BATCH_SIZE,
        buffer_memory: int = 64 * 1024,
        linger_ms: int = 10,
        delivery_timeout_ms: int = 5000,
        retry_backoff_ms: float = 100.0,
        compression: CompressionType = CompressionType.NONE,
        estimator: CompressionRatioEstimator | None = None,
    ) -> None:
        self.clock = FakeClock()
        self.pool = BufferPool(buffer_memory, batch_size, clock=self.clock)
        self.wakeups = 0
        self.partitions = Partitions()  # shared with an IdempotenceManager a test makes
        self.acc = RecordAccumulator(
            pool=self.pool, partitions=self.partitions, batch_size=batch_size,
            linger_ms=linger_ms,
            delivery_timeout_ms=delivery_timeout_ms, compression=compression,
            estimator=estimator, retry_backoff=lambda attempts: retry_backoff_ms,
            on_wakeup=self._wake, clock=self.clock)

    def _wake(self) -> None:
        self.wakeups += 1

    def append(self, partition: int = 0, value: bytes | None = VALUE, key: bytes | None = None,
               topic: str = TOPIC, ts: int = TS,
               headers: Sequence[tuple[str, bytes | None]] | None = None,
               ) -> asyncio.Future[RecordMetadata]:
        future = self.acc.try_append(topic, partition, ts, key, value, headers)
        assert future is not None, "memory should be available"
        return future

    def fill(self, partition: int, records: int, topic: str = TOPIC) -> None:
        for _ in range(records):
            self.append(partition, topic=topic)

    def drain(self, view: ClusterView, node: int = 1, max_request_size: int = 1 << 20, *,
              rules: SendRules = NO_RULES) -> list[ProducerBatch]:
        drained = self.acc.drain(view, [node], max_request_size, self.clock.now, rules)
        return drained.get(node, [])


def view_of(leaders: dict[str, Sequence[int]]) -> ClusterView:
    """A view where topic ``t`` partition ``i`` is led by ``leaders[t][i]`` (-1: no leader)."""
    nodes = {n for ls in leaders.values() for n in ls if n >= 0}
    brokers = {n: BrokerNode(n, "localhost", 9000 + n) for n in nodes}
    topics = {
        name: TopicMetadata.build(
            name, [PartitionMetadata(p, leader, 0) for p, leader in enumerate(ls)])
        for name, ls in leaders.items()
    }
    return ClusterView(brokers, topics)


def records_of(batch: ProducerBatch) -> list[tuple[bytes | None, bytes | None, int]]:
    assert batch.sealed is not None
    (decoded,) = list(read_batches(batch.sealed))
    return [(r.key, r.value, r.timestamp) for r in decoded.records]


# ---------------------------------------------------------------------------------- append


async def test_records_go_into_the_open_batch_until_it_is_full_then_a_new_one() -> None:
    h = Harness()
    first = h.append()
    assert h.wakeups == 1  # a new batch wakes the sender
    stats = h.acc.statistics()
    assert (stats.queued_batches, stats.queued_records, stats.incomplete_batches) == (1, 1, 1)
    futures = [first]
    while h.acc.statistics().queued_batches == 1:
        futures.append(h.append())
    per_batch = len(futures) - 1  # the last append opened batch two
    assert 5 <= per_batch <= 9, per_batch  # ~110-byte records in 1024 bytes
    # appends into an open batch do not wake the sender; filling it does (Java: batchIsFull),
    # and so does opening batch two
    assert h.wakeups == 3
    assert len(set(map(id, futures))) == len(futures)  # one future per record
    assert h.acc.statistics().queued_records == per_batch + 1
    # another partition gets a batch of its own
    h.append(partition=1)
    stats = h.acc.statistics()
    assert (stats.partitions, stats.queued_batches, stats.queued_records) == (
        2, 3, per_batch + 2)
    # the first batch holds exactly the records appended before it filled, in order
    view = view_of({TOPIC: [1, 1]})
    (batch,) = [b for b in h.drain(view) if b.partition == 0]
    assert batch.record_count == per_batch
    assert batch.record_futures() == futures[:per_batch]


async def test_record_larger_than_batch_size_gets_a_batch_of_its_own_size() -> None:
    h = Harness()
    h.append(value=b"small")
    big = b"B" * (3 * BATCH_SIZE)
    h.append(value=big)
    assert h.acc.statistics().queued_batches == 2
    assert h.pool.statistics().allocated_memory > 3 * BATCH_SIZE  # sized for the record
    (batch,) = h.drain(view_of({TOPIC: [1]}), max_request_size=1 << 20)
    assert records_of(batch) == [(None, b"small", TS)]


# ---------------------------------------------------------------------------------- ready


async def test_not_ready_before_linger_and_delay_is_the_remaining_linger() -> None:
    h = Harness(linger_ms=50)
    view = view_of({TOPIC: [1, 2]})
    h.append(partition=0)
    h.clock.advance(0.02)
    h.append(partition=1)
    check = h.acc.ready(view, h.clock.now)
    assert check.ready_nodes == set()
    # partition 0 lingers 30 ms more, partition 1 50 ms: the sender sleeps 30 ms
    assert check.next_ready_delay == pytest.approx(0.03)
    h.clock.advance(0.03 + EPS)
    check = h.acc.ready(view, h.clock.now)
    assert check.ready_nodes == {1}
    assert check.next_ready_delay == pytest.approx(0.02)
    h.clock.advance(0.02 + EPS)
    assert h.acc.ready(view, h.clock.now).ready_nodes == {1, 2}


async def test_nothing_queued_means_no_node_and_an_infinite_delay() -> None:
    h = Harness()
    check = h.acc.ready(view_of({TOPIC: [1]}), h.clock.now)
    assert check.ready_nodes == set() and check.next_ready_delay == float("inf")
    assert check.unknown_leader_topics == set()


async def test_ready_when_a_second_batch_is_queued_before_linger() -> None:
    h = Harness(linger_ms=10_000)
    view = view_of({TOPIC: [1]})
    h.append()
    assert h.acc.ready(view, h.clock.now).ready_nodes == set()
    while h.acc.statistics().queued_batches == 1:
        h.append()
    assert h.acc.ready(view, h.clock.now).ready_nodes == {1}


async def test_ready_when_the_open_batch_is_full_without_a_second_one() -> None:
    h = Harness(linger_ms=10_000)
    view = view_of({TOPIC: [1]})
    # records of 500 bytes: the second one leaves no room for a third of the same size
    h.append(value=b"x" * 450)
    assert h.acc.ready(view, h.clock.now).ready_nodes == set()
    h.append(value=b"x" * 450)
    assert h.acc.statistics().queued_batches == 1
    assert h.acc.ready(view, h.clock.now).ready_nodes == {1}


async def test_ready_when_someone_waits_for_memory() -> None:
    # room for exactly two batches (each charged its bytes and a first bookkeeping block)
    h = Harness(linger_ms=10_000, buffer_memory=2 * (BATCH_SIZE + RECORD_BOOKKEEPING_BYTES))
    view = view_of({TOPIC: [1, 2]})
    h.append(partition=0)
    h.append(partition=1)
    assert h.acc.ready(view, h.clock.now).ready_nodes == set()
    waiter = asyncio.create_task(h.pool.allocate(BATCH_SIZE, 60_000))
    try:
        for _ in range(3):
            await asyncio.sleep(0)
        assert h.pool.waiters == 1
        assert h.acc.ready(view, h.clock.now).ready_nodes == {1, 2}
    finally:
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert h.acc.ready(view, h.clock.now).ready_nodes == set()


async def test_ready_while_a_flush_is_in_progress() -> None:
    h = Harness(linger_ms=10_000)
    view = view_of({TOPIC: [1]})
    future = h.append()
    before = h.wakeups
    pending = h.acc.begin_flush()
    assert h.wakeups == before + 1
    assert [f for b in pending for f in b.record_futures()] == [future]
    assert h.acc.statistics().flushes_in_progress == 1
    assert h.acc.ready(view, h.clock.now).ready_nodes == {1}
    h.acc.end_flush()
    assert h.acc.statistics().flushes_in_progress == 0
    assert h.acc.ready(view, h.clock.now).ready_nodes == set()


async def test_ready_when_closing() -> None:
    h = Harness(linger_ms=10_000)
    view = view_of({TOPIC: [1]})
    h.append()
    assert not h.acc.closed
    h.acc.close()
    assert h.acc.closed and h.acc.statistics().closed
    assert h.acc.ready(view, h.clock.now).ready_nodes == {1}


async def test_retried_batch_waits_for_its_backoff_even_when_urgent() -> None:
    h = Harness(linger_ms=0, retry_backoff_ms=100)
    view = view_of({TOPIC: [1]})
    h.append()
    (batch,) = h.drain(view)
    h.acc.reenqueue(batch, h.clock.now)
    assert batch.attempts == 1 and batch.queued  # waiting again, as a retry
    assert batch.retry_at == pytest.approx(h.clock.now + 0.1)
    h.acc.begin_flush()  # urgency does not override the backoff (docs/batching.md, R4)
    check = h.acc.ready(view, h.clock.now)
    assert check.ready_nodes == set()
    assert check.next_ready_delay == pytest.approx(0.1)
    assert h.drain(view) == []  # drain does not take it either
    h.clock.advance(0.06)
    assert h.acc.ready(view, h.clock.now).next_ready_delay == pytest.approx(0.04)
    h.clock.advance(0.04 + EPS)
    assert h.acc.ready(view, h.clock.now).ready_nodes == {1}
    assert h.drain(view) == [batch]



async def test_default_retry_backoff_is_javas_100_ms() -> None:
    clock = FakeClock()
    acc = RecordAccumulator(pool=BufferPool(64 * 1024, BATCH_SIZE), batch_size=BATCH_SIZE,
                            linger_ms=0, delivery_timeout_ms=120_000, clock=clock)
    view = view_of({TOPIC: [1]})
    assert acc.try_append(TOPIC, 0, TS, None, VALUE, None) is not None
    (batch,) = acc.drain(view, [1], 1 << 20, clock.now)[1]
    acc.reenqueue(batch, clock.now)
    clock.advance(0.05)
    assert acc.ready(view, clock.now).ready_nodes == set()
    clock.advance(0.05 + EPS)
    assert acc.ready(view, clock.now).ready_nodes == {1}


async def test_unknown_leader_reports_the_topic_instead_of_a_node() -> None:
    h = Harness(linger_ms=0)
    h.append(topic="led", partition=0)
    h.append(topic="leaderless", partition=0)
    h.append(topic="unknown", partition=0)
    view = view_of({"led": [1], "leaderless": [-1]})
    check = h.acc.ready(view, h.clock.now)
    assert check.ready_nodes == {1}
    assert check.unknown_leader_topics == {"leaderless", "unknown"}
    drained = h.acc.drain(view, [1], 1 << 20, h.clock.now)
    assert [b.topic for b in drained[1]] == ["led"]
    assert h.acc.statistics().queued_batches == 2  # the others wait for metadata


# ---------------------------------------------------------------------------------- drain


def _one_batch_per_partition(h: Harness, partitions: int, records: int = 3) -> None:
    for p in range(partitions):
        h.fill(p, records)


async def test_drain_stops_before_max_request_size_but_takes_at_least_one() -> None:
    h = Harness(linger_ms=0)
    view = view_of({TOPIC: [1, 1, 1]})
    _one_batch_per_partition(h, 3)
    (size,) = {b.builder.estimated_size() for b in h.acc.incomplete_batches()}
    taken = h.drain(view, max_request_size=2 * size + size // 2)
    assert [b.partition for b in taken] == [0, 1]
    assert sum(b.size_in_bytes for b in taken) <= 2 * size + size // 2
    assert [b.partition for b in h.drain(view, max_request_size=2 * size)] == [2]
    # a request size smaller than any batch still sends one batch per request
    _one_batch_per_partition(h, 3)
    taken = h.drain(view, max_request_size=10)
    assert len(taken) == 1
    assert h.acc.statistics().queued_batches == 2


async def test_drain_rotates_the_first_partition_across_calls() -> None:
    h = Harness(linger_ms=0)
    view = view_of({TOPIC: [1, 1, 1]})
    orders = []
    for _ in range(4):
        _one_batch_per_partition(h, 3, records=1)
        orders.append([b.partition for b in h.drain(view)])
    assert orders == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]


async def test_drain_resumes_at_the_partition_that_did_not_fit() -> None:
    h = Harness(linger_ms=0)
    view = view_of({TOPIC: [1, 1, 1]})
    firsts = []
    for _ in range(3):
        _one_batch_per_partition(h, 3, records=1)
        taken = h.drain(view, max_request_size=1)  # one batch per request
        firsts.append(taken[0].partition)
        h.acc.abort_queued()  # leave the others out: each round starts from full queues
    assert firsts == [0, 1, 2]  # no partition starves behind partition 0


async def test_drain_skips_a_partition_its_verdict_holds() -> None:
    h = Harness(linger_ms=0)
    view = view_of({TOPIC: [1, 1, 1]})
    _one_batch_per_partition(h, 3)
    h.acc.guarantee_order = True
    muted = h.acc.partition(TOPIC, 1)
    muted.wire.append(muted.batches[0])  # muted: a batch of it is on the wire (D5)
    taken = h.drain(view)
    assert sorted(b.partition for b in taken) == [0, 2]
    assert all(b.sealed is not None for b in taken)
    assert h.acc.statistics().queued_batches == 1
    muted.wire.clear()  # answered
    (held,) = h.drain(view)
    assert held.partition == 1


async def test_a_taken_batch_is_numbered_before_it_is_sealed() -> None:
    h = Harness(linger_ms=0)
    view = view_of({TOPIC: [1]})
    idem = IdempotenceManager(clock=h.clock, partitions=h.partitions)
    idem.init_producer_id_params()
    idem.on_producer_id(4242, 7)
    h.fill(0, 3)
    (batch,) = h.drain(view, rules=SendRules(idem))
    assert batch.drained_at == h.clock.now
    assert batch.sealed is not None
    (decoded,) = list(read_batches(batch.sealed))
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (4242, 7, 0)
    assert decoded.record_count == 3


async def test_drain_only_asks_for_nodes_it_was_given() -> None:
    h = Harness(linger_ms=0)
    view = view_of({TOPIC: [1, 2]})
    _one_batch_per_partition(h, 2)
    drained = h.acc.drain(view, [2], 1 << 20, h.clock.now)
    assert list(drained) == [2] and [b.partition for b in drained[2]] == [1]


# ---------------------------------------------------------------------------------- reenqueue


async def test_reenqueue_puts_retries_back_in_sequence_order() -> None:
    h = Harness(linger_ms=0, retry_backoff_ms=10)
    view = view_of({TOPIC: [1]})
    sent = []
    for seq in (0, 3, 6):
        h.fill(0, 3)

        (batch,) = h.drain(view)
        batch.base_sequence = seq
        sent.append(batch)
    h.fill(0, 2)  # a new batch, never drained: no sequence yet
    # the answers come back out of order: 6 first, then 0, then 3
    for i in (2, 0, 1):
        h.acc.reenqueue(sent[i], h.clock.now)
    assert h.acc.statistics().queued_records == 3 * 3 + 2
    h.clock.advance(1.0)
    order = []
    while batches := h.drain(view):
        (batch,) = batches
        order.append(batch.base_sequence)
    assert order == [0, 3, 6, -1]


async def test_reenqueue_front_puts_a_sequence_less_batch_first() -> None:
    h = Harness(linger_ms=0, retry_backoff_ms=0)
    view = view_of({TOPIC: [1]})
    h.fill(0, 1)
    (retried,) = h.drain(view)
    h.fill(0, 1)  # queued behind, never drained
    h.acc.reenqueue(retried, h.clock.now, front=True)
    assert h.drain(view) == [retried]


# ---------------------------------------------------------------------------------- expiry


async def test_expire_returns_batches_past_delivery_timeout() -> None:
    h = Harness(linger_ms=10_000, delivery_timeout_ms=1000)
    old = h.append(partition=0)
    h.clock.advance(0.6)
    young = h.append(partition=1)
    assert h.acc.expire(h.clock.now) == []
    assert h.acc.next_expiry_delay(h.clock.now) == pytest.approx(0.4)
    h.clock.advance(0.4)
    (expired,) = h.acc.expire(h.clock.now)
    assert expired.record_futures() == [old]
    assert h.acc.statistics().queued_records == 1
    error = h.acc.delivery_timeout_error(expired, h.clock.now)
    assert isinstance(error, KafkaTimeoutError)
    assert "delivery.timeout.ms=1000" in str(error)
    assert f"{TOPIC}-0" in str(error) and "1000 ms has passed" in str(error)
    h.clock.advance(0.6)
    (expired,) = h.acc.expire(h.clock.now)
    assert expired.record_futures() == [young]
    assert not h.acc.has_queued()


async def test_outcomes_look_for_expired_batches_only_once_one_can_have_expired() -> None:
    """``BatchOutcomes.expire`` runs at every sender pass; it reads every queue and wire only
    once a batch can have expired: the earliest deadline its last look found, or a batch
    created since then expiring ``delivery.timeout.ms`` after that look."""
    h = Harness(linger_ms=10_000, delivery_timeout_ms=1000)
    outcomes = BatchOutcomes(
        accumulator=h.acc, idempotence=None, transactions=None, retries=0,
        delivery_timeout_ms=1000, client_id="t", on_ack=None, metrics=None,
        refresh_metadata=lambda: None, on_fatal=lambda error: None)
    looks = 0
    expire = h.acc.expire

    def counted(now: float) -> list[ProducerBatch]:
        nonlocal looks
        looks += 1
        return expire(now)

    h.acc.expire = counted  # type: ignore[method-assign]
    old = h.append(partition=0)
    assert outcomes.expire(h.clock.now) == pytest.approx(1.0)
    h.clock.advance(0.6)
    young = h.append(partition=1)  # created after the look: it expires after ``old``
    assert outcomes.expire(h.clock.now) == pytest.approx(0.4)
    assert looks == 1
    h.clock.advance(0.4 + EPS)
    assert outcomes.expire(h.clock.now) == pytest.approx(0.6)
    assert looks == 2
    assert isinstance(old.exception(), KafkaTimeoutError) and not young.done()
    h.clock.advance(0.6)
    outcomes.expire(h.clock.now)
    assert looks == 3
    assert isinstance(young.exception(), KafkaTimeoutError)


# ---------------------------------------------------------------------------------- memory


async def test_release_returns_the_memory_to_the_pool_once() -> None:
    h = Harness(linger_ms=0)
    view = view_of({TOPIC: [1, 1]})
    h.fill(0, 2)
    h.append(partition=1, value=b"x" * (2 * BATCH_SIZE))  # an odd-size buffer
    stats = h.pool.statistics()
    assert stats.allocated_memory >= 3 * BATCH_SIZE
    batches = h.drain(view)
    assert len(batches) == 2
    for batch in batches:
        batch.complete(0, -1)
        h.acc.release(batch)
    stats = h.pool.statistics()
    assert stats.allocated_memory == 0
    assert stats.available_memory == stats.total_memory
    assert not h.acc.has_incomplete()
    for batch in batches:
        h.acc.release(batch)  # a second release must not free the memory twice
    assert h.pool.statistics().allocated_memory == 0


async def test_statistics_and_repr() -> None:
    h = Harness(linger_ms=0)
    assert h.acc.statistics().queued_batches == 0
    h.fill(0, 3)
    h.fill(1, 2, topic="other")
    stats = h.acc.statistics()
    assert stats.partitions == 2
    assert stats.queued_batches == 2
    assert stats.queued_records == 5
    assert stats.incomplete_batches == 2
    assert stats.flushes_in_progress == 0 and not stats.closed
    assert repr(h.acc) == ("<RecordAccumulator partitions=2 queued_batches=2 queued_records=5 "
                           "incomplete=2>")
    h.drain(view_of({TOPIC: [1, 1], "other": [1, 1]}))
    stats = h.acc.statistics()
    assert (stats.queued_batches, stats.queued_records, stats.incomplete_batches) == (0, 0, 2)
    assert "queued_records=0 incomplete=2" in repr(h.acc)


# ---------------------------------------------------------------------------------- split


async def test_split_keeps_every_record_and_its_future_in_order() -> None:
    estimator = CompressionRatioEstimator()
    for _ in range(200):  # a history of batches that compressed very well
        estimator.update(TOPIC, CompressionType.GZIP, 0.02)
    h = Harness(linger_ms=0, compression=CompressionType.GZIP, estimator=estimator)
    view = view_of({TOPIC: [1]})
    sent = []
    futures = []
    for i in range(60):
        key = f"k{i}".encode() if i % 3 else None
        value = f"value-{i:04d}".encode() * 10
        ts = TS + (i * 7919 % 60) * 1000 - 20_000  # out of order, deltas of either sign
        sent.append((key, value, ts))
        futures.append(h.append(key=key, value=value, ts=ts))
    assert h.acc.statistics().queued_batches == 1  # the estimate packed them into one batch
    (big,) = h.drain(view)
    assert big.record_count == 60
    assert records_of(big) == sent
    # its bytes, and the bookkeeping of its 60 records (a block per record at batch.size 1 KiB)
    assert h.pool.statistics().allocated_memory == BATCH_SIZE + 60 * RECORD_BOOKKEEPING_BYTES

    parts = h.acc.split(big, h.clock.now)

    assert len(parts) >= 3  # ~7 KB uncompressed re-cut by batch.size at ratio 1.0
    assert big.done and big.final_state == "split"
    assert h.pool.statistics().allocated_memory == 0  # the big batch's memory is back
    assert [f for p in parts for f in p.record_futures()] == futures
    assert all(not f.done() for f in futures)
    assert sum(p.record_count for p in parts) == 60
    assert h.acc.statistics().incomplete_batches == len(parts)
    assert estimator.estimation(TOPIC, CompressionType.GZIP) == 1.0  # reset (compression.md S2)
    # the new batches hold the same records, in order, each within batch.size
    for p in reversed(parts):
        h.acc.reenqueue(p, h.clock.now, front=True)
    h.clock.advance(1.0)
    resent: list[ProducerBatch] = []
    while batches := h.drain(view):
        resent.extend(batches)
    assert resent == parts
    assert [r for p in resent for r in records_of(p)] == sent
    assert all(p.size_in_bytes <= BATCH_SIZE for p in resent)
    assert all(b.compression is CompressionType.GZIP
               for p in resent for b in read_batches(p.sealed or b""))
    # completing the parts resolves the original futures with consecutive offsets per part
    offset = 100
    for p in resent:
        p.complete(offset, -1)
        offset += p.record_count + 10
        h.acc.release(p)
    metas = [f.result() for f in futures]
    assert [m.timestamp for m in metas] == [ts for _k, _v, ts in sent]
    assert not h.acc.has_incomplete()



async def test_a_new_batch_can_start_while_a_released_batch_is_still_referenced() -> None:
    h = Harness(linger_ms=0)
    view = view_of({TOPIC: [1]})
    h.fill(0, 8)  # 8 x 109 bytes + 61 header = 933: 91 bytes left
    (open_batch,) = h.acc.incomplete_batches()
    left = BATCH_SIZE - open_batch.size_in_bytes
    h.append(value=b"z" * (left - 9))  # a 91-byte record: null key, 2-byte lengths
    assert open_batch.size_in_bytes == BATCH_SIZE  # filled to the byte (happens by chance)
    (done,) = h.drain(view)
    done.complete(0, -1)
    h.acc.release(done)  # `done` stays referenced, as Producer.flush() keeps its batches
    assert h.pool.statistics().allocated_memory == 0
    # the next batch must start normally and keep the pool's accounting exact
    future = h.append(value=b"next")
    assert not future.done()
    assert h.pool.statistics().allocated_memory == CHARGED_PER_BATCH
    assert records_of(done) == [(None, VALUE, TS)] * 8 + [(None, b"z" * (left - 9), TS)]


async def test_a_refused_batch_smaller_than_batch_size_is_cut_in_halves() -> None:
    """The broker's limit is below batch.size: re-cutting by batch.size would give back the
    same batch, refused forever; it is cut by half of what was refused, again if refused again
    (docs/compression.md S3)."""
    h = Harness(linger_ms=0)
    view = view_of({TOPIC: [1]})
    sent = []
    for i in range(8):
        value = f"v{i}".encode() * 20
        sent.append((None, value, TS + i))
        h.append(value=value, ts=TS + i)
    (batch,) = h.drain(view)
    assert batch.size_in_bytes < BATCH_SIZE
    halves = h.acc.split(batch, h.clock.now)
    assert len(halves) >= 2
    assert all(p.record_count < batch.record_count for p in halves)
    for p in reversed(halves):
        h.acc.reenqueue(p, h.clock.now, front=True)
    h.clock.advance(1.0)
    (first, *_rest) = h.drain(view)
    quarters = h.acc.split(first, h.clock.now)  # refused again: halves again
    assert len(quarters) >= 2
    assert sum(q.record_count for q in quarters) == first.record_count
    for q in reversed(quarters):
        h.acc.reenqueue(q, h.clock.now, front=True)
    h.clock.advance(1.0)
    resent: list[ProducerBatch] = list(_rest)
    while batches := h.drain(view):
        resent.extend(batches)
    # every record once, in order (the un-drained halves went back behind the quarters)
    assert sorted((r for b in resent for r in records_of(b)), key=lambda r: r[2]) == sent
    assert [r for b in quarters for r in records_of(b)] == sent[:first.record_count]


# ---------------------------------------------------------------------------------- leader change


def _led_by(leader: int, leader_epoch: int) -> ClusterView:
    return ClusterView({leader: BrokerNode(leader, "localhost", 9000 + leader)},
                       {TOPIC: TopicMetadata.build(TOPIC, [PartitionMetadata(0, leader,
                                                                             leader_epoch)])})


async def test_a_retry_skips_its_backoff_once_its_partition_has_a_new_leader() -> None:
    """Java's hasLeaderChangedForTheOngoingRetry: the error was most likely the old leader's,
    so a retry whose partition moved to a newer leader epoch goes at once; a retry that failed
    at the new leader backs off again."""
    h = Harness(linger_ms=0, retry_backoff_ms=1000)
    old = _led_by(1, 4)
    h.append()
    (batch,) = h.drain(old)
    h.acc.reenqueue(batch, h.clock.now)
    h.clock.advance(0.01)
    check = h.acc.ready(old, h.clock.now)
    assert check.ready_nodes == set() and check.next_ready_delay == pytest.approx(0.99)
    assert h.drain(old) == []
    new = _led_by(2, 5)  # the leader moved (a KIP-951 hint or new metadata)
    assert h.acc.ready(new, h.clock.now).ready_nodes == {2}
    assert h.drain(new, node=2) == [batch]
    h.acc.reenqueue(batch, h.clock.now)  # failed at the new leader too: back off again
    assert h.acc.ready(new, h.clock.now).ready_nodes == set()
    assert h.drain(new, node=2) == []
    h.clock.advance(1.0 + EPS)
    assert h.drain(new, node=2) == [batch]


async def test_split_parts_are_queued_as_never_tried() -> None:
    """The broker refused the batch for its size: its parts go at once, with no retry backoff
    and no attempt used up (Java's splitAndReenqueue)."""
    h = Harness(linger_ms=0, retry_backoff_ms=1000)
    view = view_of({TOPIC: [1]})
    h.fill(0, 6)
    (big,) = h.drain(view)
    parts = h.acc.split(big, h.clock.now)
    assert len(parts) >= 2
    h.acc.requeue_split(parts)
    assert [b.attempts for b in parts] == [0] * len(parts)
    assert h.acc.ready(view, h.clock.now).ready_nodes == {1}
    resent: list[ProducerBatch] = []
    while batches := h.drain(view):
        resent.extend(batches)
    assert resent == parts
