"""The sender's sleep: one pending timer per wake-up, ended early by ``wake()``.

The sender sleeps until the delay ``ready()`` computed, unless something wakes it first (a
new or full batch, a response, a connection that opened, new metadata, flush, close). One
future and at most one timer per sleep: cheaper than ``asyncio.wait_for`` on an event, and no
timer per record or per batch.
"""

from __future__ import annotations

import asyncio

__all__ = ["Waker"]


class Waker:
    """One pending timer per sleep; ``wake()`` ends the sleep early. Cheaper than wait_for."""

    __slots__ = ("_future", "_loop", "_timer", "woken")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._future: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.woken = False  # a wake() arrived while not sleeping: skip the next sleep

    def wake(self) -> None:
        future = self._future
        if future is None:
            self.woken = True
        elif not future.done():
            future.set_result(None)

    async def sleep(self, delay: float) -> None:
        if self.woken:
            self.woken = False
            return
        future = self._future = self._loop.create_future()
        timer = None
        if delay != float("inf"):
            timer = self._loop.call_later(max(delay, 0.0), _resolve, future)
        try:
            await future
        finally:
            self._future = None
            if timer is not None:
                timer.cancel()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
