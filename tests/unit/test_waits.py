"""``aiokprod._waits``: bounded waits that pass every cancellation on (CPython gh-86296)."""

from __future__ import annotations

import asyncio
import pathlib
import re

import pytest

import aiokprod
from aiokprod._waits import wait_event, wait_within


async def test_result_within_the_bound() -> None:
    async def work() -> str:
        await asyncio.sleep(0)
        return "done"

    assert await wait_within(work(), 5) == "done"


async def test_error_of_the_work_propagates() -> None:
    async def work() -> None:
        await asyncio.sleep(0)
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        await wait_within(work(), 5)


async def test_timeout_ends_the_work_before_it_raises() -> None:
    ended = []

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(True)

    with pytest.raises(asyncio.TimeoutError):
        await wait_within(work(), 0.01)
    assert ended == [True]


async def test_cancelled_in_the_turn_the_work_completes_raises_and_discards_the_result() -> None:
    """``asyncio.wait_for`` before 3.12 returned "opened" here and the cancellation was lost."""
    discarded = []
    outer: asyncio.Task[str] | None = None

    async def work() -> str:
        await asyncio.sleep(0)
        assert outer is not None
        outer.cancel()  # lands while the work's own task finishes, in this very turn
        return "opened"

    outer = asyncio.ensure_future(wait_within(work(), 5, discard=discarded.append))
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert discarded == ["opened"]


async def test_cancelled_while_waiting_ends_the_work_first() -> None:
    started, ended = asyncio.Event(), []

    async def work() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # unwinding takes turns of its own
            ended.append(True)

    outer = asyncio.ensure_future(wait_within(work(), 30))
    await started.wait()
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert ended == [True]


async def test_wait_event_cancelled_in_the_turn_the_event_lands_raises() -> None:
    """The event set, its waiter run to its end, then the cancellation in that same turn:
    ``asyncio.wait_for`` before 3.12 returned True here and the cancellation was lost."""
    event = asyncio.Event()
    outer = asyncio.ensure_future(wait_event(event, 30))
    for _ in range(3):
        await asyncio.sleep(0)  # the outer task waits, and so does its waiter on the event
    event.set()  # schedules the waiter's last step
    asyncio.get_running_loop().call_soon(outer.cancel)  # runs right after that step
    with pytest.raises(asyncio.CancelledError):
        await outer


def test_the_package_bounds_its_waits_here_only() -> None:
    """``asyncio.wait_for`` anywhere in the package would bring the lost cancellation back."""
    root = pathlib.Path(aiokprod.__file__).parent
    users = [str(p.relative_to(root)) for p in root.rglob("*.py")
             if re.search(r"\basyncio\.wait_for\(", p.read_text(encoding="utf-8"))]
    assert users == []
