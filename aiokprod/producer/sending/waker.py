"""The sender's sleep: a turn of the loop, or a future ended by ``wake()`` or the one timer.

The sender sleeps until the delay ``ready()`` computed, unless something wakes it first (a
new or full batch, a response, a connection that opened, new metadata, flush, close).

Timers are the costly part of a sleep in asyncio: each is a handle pushed on the loop's heap
(comparisons in Python), and a cancelled one stays there until its time comes. At full speed
the sender sleeps twice per batch, once with no delay (after a drain, to let the loop run) and
once until the next linger or expiry deadline, which moves later with every batch. So:

* a sleep of no delay is one turn of the loop, not a timer;
* a pending timer is kept across sleeps and serves every sleep whose deadline is not earlier
  than its own; it may end a later sleep early, which costs the sender one extra look at its
  batches (its loop recomputes and sleeps again), never a late send. Only a sleep that must
  end earlier replaces it.

At full speed that is one timer per deadline the sender actually reaches, not one per sleep.
"""

from __future__ import annotations

import asyncio

__all__ = ["Waker"]

_INF = float("inf")


class Waker:
    """The sender's sleeps, woken early by ``wake()``; at most one pending timer."""

    __slots__ = ("_future", "_loop", "_timer", "woken")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._future: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None  # pending, or None
        self.woken = False  # a wake() arrived while not sleeping: skip the next sleep

    def wake(self) -> None:
        future = self._future
        if future is None:
            self.woken = True
        elif not future.done():
            future.set_result(None)

    async def sleep(self, delay: float) -> None:
        """Return after ``delay`` seconds at the latest, or as soon as ``wake()`` is called
        (or was, since the last sleep); possibly earlier (see the module's docstring)."""
        if self.woken:
            self.woken = False
            return
        loop = self._loop
        if delay <= 0:
            await asyncio.sleep(0)  # one turn of the loop: a bare yield, no future or timer
            # a wake() during that turn is seen by the sender's look that follows: counted
            # again, it would skip the next sleep and cost a second look for nothing
            self.woken = False
            return
        if delay != _INF:
            at = loop.time() + delay
            timer = self._timer
            if timer is None or at < timer.when():
                if timer is not None:
                    timer.cancel()
                self._timer = loop.call_at(at, self._on_timer)
        future = self._future = loop.create_future()
        try:
            await future
        finally:
            self._future = None

    def close(self) -> None:
        """Cancel the pending timer (the sender's task has ended)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)
