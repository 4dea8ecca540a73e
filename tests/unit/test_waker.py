"""The sender's sleeps (producer/sending/waker.py): woken early, never late, and one pending
timer serving every sleep whose deadline is not earlier than its own.

A timer per sleep pushed a handle on the loop's heap twice per batch at full speed, and the
cancelled ones stayed there; these tests count the timers the loop is asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokprod.producer.sending.waker import Waker


def _count_timers(loop: asyncio.AbstractEventLoop) -> list[asyncio.TimerHandle]:
    """Every timer asked of ``loop`` from now on (``call_later`` goes through ``call_at``)
    but asyncio's own: the tests' ``wait_for`` bounds are timers too."""
    handles: list[asyncio.TimerHandle] = []
    call_at = loop.call_at

    def recording(when: float, callback: Callable[..., Any], *args: Any,
                  **kwargs: Any) -> asyncio.TimerHandle:
        handle = call_at(when, callback, *args, **kwargs)
        if not getattr(callback, "__module__", "").startswith("asyncio."):
            handles.append(handle)
        return handle

    loop.call_at = recording  # type: ignore[method-assign]
    return handles


async def _woken_at_once(delay: float) -> tuple[Waker, list[asyncio.TimerHandle]]:
    """A waker whose sleep of ``delay`` was ended at once by wake(), its timer left pending;
    with the timers it asked for."""
    loop = asyncio.get_running_loop()
    waker = Waker()
    timers = _count_timers(loop)
    loop.call_soon(waker.wake)
    await waker.sleep(delay)
    return waker, timers


async def test_a_sleep_of_no_delay_is_one_turn_of_the_loop_without_a_timer() -> None:
    waker = Waker()
    timers = _count_timers(asyncio.get_running_loop())
    turned = []
    asyncio.get_running_loop().call_soon(turned.append, True)
    await waker.sleep(0.0)
    assert turned == [True]  # the loop ran what was ready before the sleep ended
    assert timers == []


async def test_a_wake_before_the_sleep_skips_it() -> None:
    waker = Waker()
    timers = _count_timers(asyncio.get_running_loop())
    waker.wake()
    await asyncio.wait_for(waker.sleep(3600), timeout=5)
    assert timers == []


async def test_a_pending_timer_serves_a_later_deadline_and_ends_it_no_later() -> None:
    loop = asyncio.get_running_loop()
    waker, timers = await _woken_at_once(0.2)  # its timer stays pending
    assert len(timers) == 1 and not timers[0].cancelled()
    first_deadline = timers[0].when()
    await asyncio.wait_for(waker.sleep(3600), timeout=30)  # a later deadline: the same timer
    assert len(timers) == 1
    assert loop.time() >= first_deadline  # ended by that timer, not before it fired
    await asyncio.wait_for(waker.sleep(0.01), timeout=30)  # none pending now: a new one
    assert len(timers) == 2


async def test_an_earlier_deadline_replaces_the_pending_timer() -> None:
    loop = asyncio.get_running_loop()
    waker, timers = await _woken_at_once(3600)
    await asyncio.wait_for(waker.sleep(0.05), timeout=30)
    assert len(timers) == 2
    assert timers[0].cancelled() and not timers[1].cancelled()
    assert loop.time() >= timers[1].when()


async def test_a_sleep_without_deadline_ends_only_when_woken() -> None:
    loop = asyncio.get_running_loop()
    waker = Waker()
    timers = _count_timers(loop)
    sleeping = asyncio.ensure_future(waker.sleep(float("inf")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not sleeping.done() and timers == []
    waker.wake()
    await asyncio.wait_for(sleeping, timeout=5)


async def test_close_cancels_the_pending_timer() -> None:
    waker, timers = await _woken_at_once(3600)
    waker.close()
    assert len(timers) == 1 and timers[0].cancelled()


async def test_a_wake_during_a_sleep_of_no_delay_ends_it_and_no_later_sleep() -> None:
    """The sender looks at its batches after every sleep: a wake() that came during the turn
    of the loop is answered by that look, like one that ends a sleep on a future."""
    loop = asyncio.get_running_loop()
    waker = Waker()
    loop.call_soon(waker.wake)
    await waker.sleep(0.0)
    sleeping = asyncio.ensure_future(waker.sleep(float("inf")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not sleeping.done()  # not skipped: nothing woke it since
    waker.wake()
    await asyncio.wait_for(sleeping, timeout=5)
