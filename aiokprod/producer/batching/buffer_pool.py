"""Bounded memory for batch buffers: the Java BufferPool's rules on one asyncio event loop.

Why a pool: ``buffer.memory`` bounds what unsent batches may hold, so a producer faster than its
brokers slows down (``send`` waits, bounded by ``max.block.ms``) instead of growing without
limit (Java's ``BufferPool``; docs/memory.md).

It counts bytes; it does not recycle buffers. Java keeps buffers of exactly ``batch.size`` on a
free list and reuses them; here a sealed batch's bytes may still be referenced by the request
being written and by the batch until its futures resolve, and handing that bytearray to a new
batch while it is referenced corrupted records once (a pinned buffer). So every allocation hands
out a new, *empty* ``bytearray`` for the batch builder to grow, and ``deallocate`` takes back a
size. (An earlier version kept Java's free list, which the producer never filled, and zero-filled
a ``bytearray`` of the full size per batch that the builder truncated at once.) The bound is on
what the pool has counted out, not on the bytes Python holds: see docs/memory.md.

Fairness, the rule the tests pin:

* Waiters are served strictly first come, first served. While anyone waits, a new request does
  not take memory even if enough for it is free (``try_allocate`` returns None, ``allocate``
  queues behind), so a large request cannot be starved by a stream of small ones.
* The head waiter accumulates memory as it is freed (Java's partial accumulation), so it makes
  progress even when no single deallocation is large enough. Consequently, while someone waits,
  all free memory belongs to the head waiter: ``available_memory`` is 0.
* Memory is handed over synchronously inside ``deallocate``; the waiter's task only resumes to
  pick up its buffer. Hence a deque of futures rather than an ``asyncio.Condition``: a woken
  condition waiter would re-check later, and a newcomer could take the memory in between.
  A waiter that times out or is cancelled gives back what it accumulated, and that memory
  passes on to the next waiter at once.

No threads and no locks: every method runs to completion on the loop, so the bookkeeping is
never observed half-done. Counts are kept incrementally; ``statistics()`` never rescans.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiokprod.errors import BufferExhaustedError, IllegalStateError, RecordTooLargeError

if TYPE_CHECKING:
    from aiokprod.metrics import ProducerMetrics, Sensor

__all__ = ["BufferPool", "BufferPoolStatistics"]


@dataclass(frozen=True, slots=True)
class BufferPoolStatistics:
    """A consistent view of the pool at one instant."""

    # buffer.memory: the bound on everything the pool hands out.
    total_memory: int
    # batch.size, for messages: what a batch is normally charged.
    poolable_size: int
    # Free memory right now (0 while someone waits: it all goes to the head waiter).
    available_memory: int
    # Bytes already handed to waiters that are still short of their full request.
    accumulated_by_waiters: int
    # Bytes given out and not yet returned.
    allocated_memory: int
    # allocate() calls queued right now; > 0 means "send everything now" to the accumulator.
    waiters: int
    # allocate() calls that had to wait, since creation.
    allocations_blocked: int
    # allocate() calls that gave up after max.block.ms, since creation.
    exhausted_count: int
    # Total time spent waiting in allocate(), nanoseconds, since creation.
    total_wait_time_ns: int


class _Waiter:
    """One queued allocate() call."""

    __slots__ = ("accumulated", "future", "queued", "size")

    def __init__(self, size: int, future: asyncio.Future[bytearray]) -> None:
        # Bytes requested.
        self.size = size
        # Bytes handed over so far (partial accumulation); returned if the wait fails.
        self.accumulated = 0
        # Resolved with an empty buffer when complete, or failed on timeout / close.
        self.future = future
        # Still in the pool's queue; makes removal idempotent across timeout/cancel races.
        self.queued = True


class BufferPool:
    """``buffer.memory`` bytes, counted out with a new empty ``bytearray`` per allocation; see
    the module docstring."""

    def __init__(
        self,
        total_memory: int,
        poolable_size: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        metrics: ProducerMetrics | None = None,
        on_wait: Callable[[], None] | None = None,
    ) -> None:
        if total_memory < 0 or poolable_size < 0:
            raise ValueError(
                f"total_memory and poolable_size must be >= 0, got {total_memory} and "
                f"{poolable_size}"
            )
        self._total = total_memory
        # batch.size=0 means batches of 1 byte in Java; the pool follows the same floor.
        self._poolable = max(1, poolable_size)
        self._clock = clock
        # Free bytes: neither counted out nor accumulated by a waiter.
        self._available = total_memory
        # Queued allocate() calls, head first.
        self._waiters: deque[_Waiter] = deque()
        # Sum of accumulated bytes over queued waiters.
        self._accumulated = 0
        self._closed = False
        # called when an allocation starts to wait: the sender must look again, since a
        # waiter makes batches sendable now (Java's RecordAccumulator "exhausted" rule)
        self._on_wait = on_wait
        self._allocations_blocked = 0
        self._exhausted = 0
        self._wait_ns = 0
        self._wait_sensor: Sensor | None = None
        self._exhausted_sensor: Sensor | None = None
        if metrics is not None:
            self._wait_sensor = metrics.bufferpool_wait_time
            self._exhausted_sensor = metrics.buffer_exhausted
            metrics.bind_gauge("buffer-total-bytes", lambda: self._total)
            metrics.bind_gauge("buffer-available-bytes", lambda: self.available_memory)
            metrics.bind_gauge("waiting-threads", lambda: len(self._waiters))

    # -- cheap queries ------------------------------------------------------------------------

    @property
    def total_memory(self) -> int:
        return self._total

    @property
    def poolable_size(self) -> int:
        return self._poolable

    @property
    def available_memory(self) -> int:
        return self._available

    @property
    def waiters(self) -> int:
        """Queued allocate() calls: the accumulator's "memory is short, send now" signal."""
        return len(self._waiters)

    def statistics(self) -> BufferPoolStatistics:
        available = self._available
        return BufferPoolStatistics(
            total_memory=self._total,
            poolable_size=self._poolable,
            available_memory=available,
            accumulated_by_waiters=self._accumulated,
            allocated_memory=self._total - available - self._accumulated,
            waiters=len(self._waiters),
            allocations_blocked=self._allocations_blocked,
            exhausted_count=self._exhausted,
            total_wait_time_ns=self._wait_ns,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<BufferPool {state} total={self._total} available={self._available} "
            f"waiters={len(self._waiters)} accumulated={self._accumulated} "
            f"exhausted={self._exhausted}>"
        )

    # -- allocation ---------------------------------------------------------------------------

    def try_allocate(self, size: int) -> bytearray | None:
        """``size`` bytes counted out, with an empty buffer to write them into, if that can be
        done without waiting; else None.

        Never suspends: the send fast path calls this first. Returns None while anyone waits,
        even if ``size`` bytes are free (first come, first served).

        Raises ``RecordTooLargeError`` if ``size`` exceeds ``buffer.memory`` (it could never be
        satisfied), ``IllegalStateError`` after :meth:`close`.
        """
        self._check_request(size)
        if self._waiters:
            return None
        if self._available >= size:
            self._available -= size
            return bytearray()
        return None

    async def allocate(self, size: int, max_block_ms: float) -> bytearray:
        """``size`` bytes counted out (with an empty buffer), waiting up to ``max_block_ms`` for
        memory to be freed.

        Raises ``BufferExhaustedError`` when the wait runs out, ``RecordTooLargeError`` at once
        if ``size`` exceeds ``buffer.memory``, ``IllegalStateError`` if the pool is closed before
        or during the wait. Cancellation: memory accumulated so far (or a buffer handed over just
        before the cancel arrived) goes back to the pool and on to the next waiter; the pool is
        left as if this call never happened.
        """
        buffer = self.try_allocate(size)
        if buffer is not None:
            return buffer
        if max_block_ms <= 0:
            self._on_exhausted()
            raise self._exhausted_error(size, max_block_ms, accumulated=0)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(size, loop.create_future())
        self._waiters.append(waiter)
        self._allocations_blocked += 1
        if self._on_wait is not None:
            self._on_wait()
        # If nobody was ahead, start accumulating what is free right now.
        self._serve_waiters()
        timer = loop.call_later(max_block_ms / 1000.0, self._expire, waiter, max_block_ms)
        started = self._clock()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise
        finally:
            timer.cancel()
            waited_ns = max(0, int((self._clock() - started) * 1e9))
            self._wait_ns += waited_ns
            if self._wait_sensor is not None:
                self._wait_sensor.record(waited_ns)

    def deallocate(self, buffer: object, size: int) -> None:
        """Return ``size`` bytes, as counted out, and hand them to waiters, in order.

        ``buffer`` is not kept (callers pass the batch's buffer, or ``b""``): only the size
        counts, whatever the buffer grew or shrank to. Returning more than was handed out raises
        ``IllegalStateError`` (a double free would otherwise silently raise the memory bound).
        """
        if size < 0:
            raise ValueError(f"cannot deallocate a negative size: {size}")
        outstanding = self._total - self._available - self._accumulated
        if size > outstanding:
            raise IllegalStateError(
                f"deallocating {size} bytes but only {outstanding} bytes are allocated from this "
                f"pool (double free?): {self!r}"
            )
        self._available += size
        if self._waiters:
            self._serve_waiters()

    def close(self) -> None:
        """Fail every waiter with ``IllegalStateError`` and refuse new requests.

        Memory still allocated can be returned after close; it is only counted.
        """
        self._closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            waiter.queued = False
            self._release(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(
                    IllegalStateError("producer closed while waiting for buffer memory")
                )

    # -- internals ----------------------------------------------------------------------------

    def _check_request(self, size: int) -> None:
        if self._closed:
            raise IllegalStateError("buffer pool is closed: producer closed")
        if size > self._total:
            raise RecordTooLargeError(
                f"Attempt to allocate {size} bytes, but there is a hard limit of {self._total} "
                f"bytes on memory allocations: buffer.memory (buffer_memory)"
            )
        if size < 0:
            raise ValueError(f"cannot allocate a negative size: {size}")

    def _serve_waiters(self) -> None:
        """Give free memory to waiters in order until it runs out or nobody waits."""
        waiters = self._waiters
        while waiters:
            waiter = waiters[0]
            if waiter.future.done():
                # Cancelled while queued; its task has not run its cleanup yet.
                waiters.popleft()
                waiter.queued = False
                self._release(waiter)
                continue
            need = waiter.size - waiter.accumulated
            got = min(need, self._available)
            self._available -= got
            waiter.accumulated += got
            self._accumulated += got
            if waiter.accumulated < waiter.size:
                return
            waiters.popleft()
            waiter.queued = False
            self._accumulated -= waiter.accumulated
            waiter.accumulated = 0
            waiter.future.set_result(bytearray())

    def _release(self, waiter: _Waiter) -> None:
        """Take ``waiter`` out of the queue and free what it accumulated (idempotent)."""
        if waiter.queued:
            waiter.queued = False
            self._waiters.remove(waiter)
        if waiter.accumulated:
            self._available += waiter.accumulated
            self._accumulated -= waiter.accumulated
            waiter.accumulated = 0

    def _expire(self, waiter: _Waiter, max_block_ms: float) -> None:
        """Timer callback: ``max_block_ms`` passed before ``waiter`` got its memory."""
        if waiter.future.done():
            return
        accumulated = waiter.accumulated
        self._release(waiter)
        self._on_exhausted()
        waiter.future.set_exception(self._exhausted_error(waiter.size, max_block_ms, accumulated))
        self._serve_waiters()

    def _abandon(self, waiter: _Waiter) -> None:
        """The allocating task was cancelled: undo whatever state its wait reached."""
        future = waiter.future
        if future.done() and not future.cancelled():
            if future.exception() is None:
                # Memory was handed over just before the cancel landed: give it back.
                self.deallocate(future.result(), waiter.size)
            return
        future.cancel()
        self._release(waiter)
        self._serve_waiters()

    def _on_exhausted(self) -> None:
        self._exhausted += 1
        if self._exhausted_sensor is not None:
            self._exhausted_sensor.record()

    def _exhausted_error(
        self, size: int, max_block_ms: float, accumulated: int
    ) -> BufferExhaustedError:
        return BufferExhaustedError(
            f"Failed to allocate {size} bytes within max.block.ms (max_block_ms) = "
            f"{max_block_ms:g} ms: buffer.memory (buffer_memory) = {self._total} bytes, "
            f"available = {self._available} bytes, accumulated for this request = "
            f"{accumulated} bytes, poolable size (batch.size) = {self._poolable} bytes, "
            f"{len(self._waiters)} other waiter(s)"
        )
