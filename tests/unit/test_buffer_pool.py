"""BufferPool: accounting, FIFO fairness, partial accumulation, timeouts, cancellation."""

from __future__ import annotations

import asyncio
import random

import pytest

from aiokprod.errors import (
    BufferExhaustedError,
    IllegalStateError,
    KafkaTimeoutError,
    RecordTooLargeError,
)
from aiokprod.metrics import PRODUCER_GROUP, MetricsRegistry, ProducerMetrics
from aiokprod.producer.batching.buffer_pool import BufferPool

LONG = 60_000  # max_block_ms for waits that tests end by hand


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def settle() -> None:
    """Let every ready task run up to its next real wait."""
    for _ in range(5):
        await asyncio.sleep(0)


def check_invariants(pool: BufferPool) -> None:
    s = pool.statistics()
    assert s.allocated_memory + s.available_memory + s.accumulated_by_waiters == s.total_memory
    assert 0 <= s.available_memory <= s.total_memory
    if s.waiters:
        # Everything free belongs to the head waiter while anyone waits.
        assert s.available_memory == 0


def test_allocations_count_bytes_and_hand_out_new_empty_buffers() -> None:
    """The pool counts; it keeps no buffers (no free list) and zero-fills nothing: each
    allocation is a new empty bytearray for the batch builder to grow."""
    pool = BufferPool(1000, 100)
    a = pool.try_allocate(100)
    assert a == bytearray() and type(a) is bytearray
    pool.deallocate(a, 100)
    b = pool.try_allocate(100)
    assert b == bytearray() and b is not a  # never handed out twice
    big = pool.try_allocate(300)
    assert big == bytearray()
    assert pool.available_memory == 1000 - 100 - 300
    pool.deallocate(big, 300)
    assert pool.statistics().available_memory == 900
    check_invariants(pool)


def test_deallocate_with_explicit_size_and_double_free_detected() -> None:
    pool = BufferPool(500, 100)
    buf = pool.try_allocate(200)
    assert buf is not None
    buf += b"x" * 900  # the builder grew it (past what was counted, as compression may)
    pool.deallocate(buf, 200)  # what was counted out comes back, whatever the buffer became
    assert pool.available_memory == 500
    with pytest.raises(IllegalStateError, match="double free"):
        pool.deallocate(b"", 200)


async def test_request_larger_than_total_fails_fast_naming_buffer_memory() -> None:
    pool = BufferPool(1000, 100)
    with pytest.raises(RecordTooLargeError, match=r"1001 bytes.*1000.*buffer\.memory"):
        pool.try_allocate(1001)
    with pytest.raises(RecordTooLargeError, match=r"buffer\.memory \(buffer_memory\)"):
        await pool.allocate(1001, LONG)
    assert pool.statistics().allocations_blocked == 0


async def test_max_block_expiry_raises_naming_max_block_ms_and_returns_memory() -> None:
    pool = BufferPool(1000, 100)
    held = pool.try_allocate(700)
    assert held is not None
    with pytest.raises(BufferExhaustedError) as err:
        await pool.allocate(500, 5)
    text = str(err.value)
    assert "max.block.ms (max_block_ms) = 5 ms" in text
    assert "500 bytes" in text and "buffer.memory (buffer_memory) = 1000" in text
    assert "accumulated for this request = 300" in text
    assert isinstance(err.value, KafkaTimeoutError)
    s = pool.statistics()
    # The 300 bytes it accumulated went back.
    assert s.available_memory == 300 and s.waiters == 0 and s.accumulated_by_waiters == 0
    assert s.exhausted_count == 1 and s.allocations_blocked == 1
    check_invariants(pool)


async def test_zero_max_block_fails_without_queueing() -> None:
    pool = BufferPool(100, 100)
    assert pool.try_allocate(100) is not None
    with pytest.raises(BufferExhaustedError, match="= 0 ms"):
        await pool.allocate(100, 0)
    assert pool.statistics().waiters == 0 and pool.statistics().exhausted_count == 1


async def test_waiter_is_woken_by_deallocate() -> None:
    pool = BufferPool(200, 100)
    a, b = pool.try_allocate(100), pool.try_allocate(100)
    assert a is not None and b is not None
    task = asyncio.create_task(pool.allocate(100, LONG))
    await settle()
    assert pool.waiters == 1 and not task.done()
    pool.deallocate(a, 100)
    assert pool.waiters == 0  # handed over synchronously
    await settle()
    assert task.done()
    got = await task
    assert got == bytearray() and got is not a
    check_invariants(pool)


async def test_partial_accumulation_lets_a_big_request_progress() -> None:
    pool = BufferPool(1000, 100)
    smalls = [pool.try_allocate(100) for _ in range(10)]
    big = asyncio.create_task(pool.allocate(450, LONG))
    await settle()
    for i, buf in enumerate(smalls[:4]):
        assert buf is not None
        pool.deallocate(buf, 100)
        assert pool.statistics().accumulated_by_waiters == 100 * (i + 1)
        assert not big.done()
    last = smalls[4]
    assert last is not None
    pool.deallocate(last, 100)
    await settle()
    assert big.done()
    assert await big == bytearray()
    s = pool.statistics()
    assert s.available_memory == 50 and s.accumulated_by_waiters == 0
    check_invariants(pool)


async def test_fifo_large_first_waiter_is_not_starved_by_later_small_ones() -> None:
    pool = BufferPool(1000, 100)
    held = pool.try_allocate(900)
    assert held is not None
    order: list[str] = []

    async def want(name: str, size: int) -> bytearray:
        buf = await pool.allocate(size, LONG)
        order.append(name)
        return buf

    big = asyncio.create_task(want("big", 800))
    await settle()
    small = asyncio.create_task(want("small", 50))
    await settle()
    # Memory for the small request is not free (the big waiter holds the 100 free bytes), and
    # the fast path refuses to jump the queue even for a tiny request.
    assert pool.try_allocate(1) is None
    assert pool.statistics().waiters == 2
    pool.deallocate(bytearray(200), 200)  # 300 accumulated: still not enough for big
    await settle()
    assert order == [] and not small.done()
    pool.deallocate(bytearray(600), 600)  # big completes, the rest flows on to small
    await settle()
    assert big.done() and small.done()
    assert order == ["big", "small"]
    assert await big == bytearray() and await small == bytearray()
    check_invariants(pool)


async def test_cancelling_a_waiter_returns_its_accumulated_memory_to_the_next() -> None:
    pool = BufferPool(1000, 100)
    held = pool.try_allocate(700)
    assert held is not None
    first = asyncio.create_task(pool.allocate(800, LONG))
    await settle()
    second = asyncio.create_task(pool.allocate(250, LONG))
    await settle()
    assert pool.statistics().accumulated_by_waiters == 300
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    # The 300 bytes went straight to the second waiter.
    await settle()
    assert second.done()
    assert await second == bytearray()
    s = pool.statistics()
    assert s.waiters == 0 and s.available_memory == 50 and s.accumulated_by_waiters == 0
    check_invariants(pool)


async def test_cancel_after_handover_but_before_resume_gives_buffer_back() -> None:
    pool = BufferPool(100, 100)
    a = pool.try_allocate(100)
    assert a is not None
    task = asyncio.create_task(pool.allocate(100, LONG))
    await settle()
    pool.deallocate(a, 100)  # resolves the waiter's future synchronously...
    task.cancel()  # ...and the cancel lands before the task resumes
    with pytest.raises(asyncio.CancelledError):
        await task
    s = pool.statistics()
    assert s.available_memory == 100 and s.waiters == 0
    check_invariants(pool)


async def test_head_timeout_passes_memory_to_next_waiter() -> None:
    pool = BufferPool(1000, 100)
    held = pool.try_allocate(600)
    assert held is not None
    # long enough that the head is still waiting when the next waiter queues behind it, even
    # when a loaded machine pauses this test between the two
    head = asyncio.create_task(pool.allocate(900, 400))
    await settle()
    nxt = asyncio.create_task(pool.allocate(300, LONG))
    await settle()
    assert pool.statistics().waiters == 2
    assert not nxt.done()
    with pytest.raises(BufferExhaustedError):
        await head
    await settle()
    assert nxt.done()
    assert await nxt == bytearray()
    check_invariants(pool)


async def test_close_fails_waiters_and_refuses_new_requests() -> None:
    pool = BufferPool(100, 100)
    held = pool.try_allocate(60)
    assert held is not None
    waiter = asyncio.create_task(pool.allocate(100, LONG))
    await settle()
    pool.close()
    with pytest.raises(IllegalStateError, match="closed"):
        await waiter
    with pytest.raises(IllegalStateError):
        pool.try_allocate(1)
    pool.deallocate(held, 60)  # returning memory after close is still allowed
    assert pool.available_memory == 100
    assert "closed" in repr(pool)


async def test_wait_time_and_metrics_hooks_use_java_names() -> None:
    clock = FakeClock()
    registry = MetricsRegistry(clock=clock)
    metrics = ProducerMetrics(registry, "c1")
    pool = BufferPool(200, 100, clock=clock, metrics=metrics)
    a = pool.try_allocate(200)
    assert a is not None
    task = asyncio.create_task(pool.allocate(100, LONG))
    await settle()
    snap = {k.name: v for k, v in registry.snapshot().items() if k.group == PRODUCER_GROUP}
    assert snap["waiting-threads"] == 1
    assert snap["buffer-total-bytes"] == 200 and snap["buffer-available-bytes"] == 0
    clock.now += 0.25
    pool.deallocate(a, 200)
    await task
    assert pool.statistics().total_wait_time_ns == 250_000_000
    with pytest.raises(BufferExhaustedError):
        await pool.allocate(150, 0)
    snap = {k.name: v for k, v in registry.snapshot().items() if k.group == PRODUCER_GROUP}
    assert snap["bufferpool-wait-time-ns-total"] == 250_000_000
    assert snap["buffer-exhausted-total"] == 1
    assert snap["waiting-threads"] == 0 and snap["buffer-available-bytes"] == 100
    assert snap["bufferpool-wait-ratio"] > 0


def test_statistics_and_repr_are_informative() -> None:
    pool = BufferPool(1000, 100)
    pool.try_allocate(300)
    s = pool.statistics()
    assert (s.total_memory, s.poolable_size, s.available_memory, s.allocated_memory) == (
        1000, 100, 700, 300,
    )
    text = repr(pool)
    assert "total=1000" in text and "available=700" in text and "waiters=0" in text


async def test_random_workload_keeps_accounting_exact() -> None:
    """Random allocations, frees, waits, cancels and timeouts never leak or invent memory."""
    rng = random.Random(20240611)
    pool = BufferPool(4096, 256)
    held: list[int] = []  # sizes counted out
    tasks: list[tuple[int, asyncio.Task[bytearray]]] = []
    for _ in range(400):
        op = rng.random()
        size = 256 if rng.random() < 0.6 else rng.randint(1, 1500)
        if op < 0.35:
            if pool.try_allocate(size) is not None:
                held.append(size)
        elif op < 0.55:
            tasks.append((size, asyncio.create_task(
                pool.allocate(size, rng.choice([0, 1, LONG])))))
        elif op < 0.85 and held:
            pool.deallocate(b"", held.pop(rng.randrange(len(held))))
        elif tasks:
            tasks[rng.randrange(len(tasks))][1].cancel()
        await asyncio.sleep(0)
        check_invariants(pool)
        for entry in [e for e in tasks if e[1].done()]:
            tasks.remove(entry)
            if not entry[1].cancelled() and entry[1].exception() is None:
                held.append(entry[0])
    for _, t in tasks:
        t.cancel()
    await asyncio.gather(*(t for _, t in tasks), return_exceptions=True)
    for size, t in tasks:
        if not t.cancelled() and t.exception() is None:
            held.append(size)
    for size in held:
        pool.deallocate(b"", size)
    s = pool.statistics()
    assert s.available_memory == 4096 and s.waiters == 0 and s.accumulated_by_waiters == 0
    assert s.allocated_memory == 0
