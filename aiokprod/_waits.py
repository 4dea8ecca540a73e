"""Bounded waits that never lose a cancellation.

``asyncio.wait_for`` before Python 3.12 returns the inner result when the awaited thing completes
in the same turn of the loop as a cancellation arrives, and the cancellation is lost (CPython
gh-86296): the cancelled task runs on after whoever cancelled it has moved on. The producer's
bounded waits are cancelled at close, often in the very turn that close signals what they wait
for; a lost cancellation there left a metadata refresh running against a closed client, which
failed with nobody to read its error ("Task exception was never retrieved"), and could hand a
freshly dialed connection to a pool that had already closed. ``asyncio.wait`` propagates a
cancellation whatever completed beside it, so every bounded wait here is built on it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["wait_event", "wait_within"]

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set, at most ``timeout`` seconds; True if it was set."""
    if not event.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_within(event.wait(), timeout)
    return event.is_set()


async def wait_within(aw: Awaitable[T], timeout: float,
                      discard: Callable[[T], object] | None = None) -> T:
    """``asyncio.wait_for`` as Python 3.12 has it, on every Python we support: the result of
    ``aw`` if it finishes within ``timeout`` seconds, else ``asyncio.TimeoutError``; either way
    ``aw`` has finished when this returns or raises. A cancellation always propagates, also
    when ``aw`` completed in the same turn; a result that then has no taker (a connection
    dialed for a caller that left) goes to ``discard``, which releases it."""
    task = asyncio.ensure_future(aw)
    try:
        await asyncio.wait((task,), timeout=max(0.0, timeout))
    except BaseException:
        await _finish(task, discard)
        raise
    if not task.done():
        await _finish(task, discard)
        raise asyncio.TimeoutError
    return task.result()


async def _finish(task: asyncio.Future[T], discard: Callable[[T], object] | None) -> None:
    """Cancel ``task`` and wait until it has ended, so nothing it does runs after its caller
    moved on; its outcome is taken here, so none is reported as never retrieved."""
    task.cancel()
    try:
        await asyncio.wait((task,))
    finally:
        if task.done() and not task.cancelled() and task.exception() is None \
                and discard is not None:
            discard(task.result())
