"""A bounded wait on an ``asyncio.Event`` that never loses a cancellation.

``asyncio.wait_for`` before Python 3.12 returns the inner result when the event is set in the
same turn of the loop as a cancellation arrives, and the cancellation is lost (CPython
gh-86296): the cancelled task runs on after whoever cancelled it has moved on. The producer's
waits on events (a link coming up, metadata arriving, a telemetry wake-up) are cancelled at
close, often in the very turn that close signals the event; a lost cancellation there left a
metadata refresh running against a closed client, which failed with nobody to read its error
("Task exception was never retrieved"). ``asyncio.wait`` propagates a cancellation whatever
completed beside it.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set, at most ``timeout`` seconds; True if it was set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((waiter,), timeout=max(0.0, timeout))
    finally:
        waiter.cancel()
    return event.is_set()
