"""buffer.memory accounting: one rule, in docs/memory.md, checked against the real pool.

A batch is charged, when it opens, its record buffer plus the bookkeeping of a first block of
records; each further block is charged when the batch takes the block's first record, if the
pool has it free at once. When it has not, the record waits for memory for a NEW batch, and the
memory it waited for opens that batch: a send that waited never fails for memory afterwards.
"""

from __future__ import annotations

import asyncio

from aiokprod.producer.batching.accumulator import RECORD_BOOKKEEPING_BYTES, RecordAccumulator
from aiokprod.producer.batching.buffer_pool import BufferPool

BATCH = 16384
BLOCK = (BATCH // 1024) * RECORD_BOOKKEEPING_BYTES  # bookkeeping of 16 records


def _accumulator(pool: BufferPool) -> RecordAccumulator:
    return RecordAccumulator(pool=pool, batch_size=BATCH, linger_ms=30_000,
                             delivery_timeout_ms=120_000, clock=lambda: 0.0)


async def test_memory_a_send_waited_for_opens_its_batch_and_is_not_given_to_the_open_one(
) -> None:
    first = BATCH + BLOCK  # what the first batch is charged
    big = b"v" * 16_000  # fits no batch that already holds records
    pool = BufferPool(2 * first + 1000, BATCH)
    acc = _accumulator(pool)
    size = acc.allocation_size(None, big, None)
    assert size == first  # a batch.size buffer holds it, plus a first bookkeeping block
    for _ in range(16):  # 16 small records use up the open batch's first bookkeeping block
        assert acc.try_append("t", 0, 0, None, b"s", None) is not None
    held = pool.try_allocate(size)  # other partitions' batches hold the rest
    assert held is not None
    assert acc.try_append("t", 0, 0, None, big, None) is None  # needs memory: wait
    waiting = asyncio.ensure_future(pool.allocate(size, 5_000))
    await asyncio.sleep(0)
    pool.deallocate(held, size)  # another batch completes
    buffer = await waiting
    # it used to go to the open batch's bookkeeping; the record did not fit there, and a new
    # batch found no memory: BufferExhaustedError at once, long before max.block.ms
    future = acc.append_with_buffer("t", 0, 0, None, big, None, buffer, size)
    assert not future.done()
    stats = acc.statistics()
    assert stats.queued_batches == 2 and stats.queued_records == 17
    assert pool.available_memory == 1000


async def test_memory_waited_for_goes_back_when_the_open_batch_made_room_meanwhile() -> None:
    pool = BufferPool(4 * (BATCH + BLOCK), BATCH)
    acc = _accumulator(pool)
    assert acc.try_append("t", 0, 0, None, b"a", None) is not None
    before = pool.available_memory
    size = acc.allocation_size(None, b"b", None)
    buffer = pool.try_allocate(size)
    assert buffer is not None
    acc.append_with_buffer("t", 0, 0, None, b"b", None, buffer, size)
    assert acc.statistics().queued_batches == 1
    assert pool.available_memory == before


async def test_a_pool_with_waiters_asks_the_sender_to_look_again() -> None:
    calls: list[int] = []
    pool = BufferPool(BATCH, BATCH, on_wait=lambda: calls.append(1))
    held = pool.try_allocate(BATCH)
    assert held is not None
    waiting = asyncio.ensure_future(pool.allocate(BATCH, 5_000))
    await asyncio.sleep(0)
    assert calls == [1]
    pool.deallocate(held, BATCH)
    await waiting
    assert pool.statistics().allocated_memory == BATCH
