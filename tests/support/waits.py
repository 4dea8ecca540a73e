"""Waiting for a condition, not for an amount of time.

A test that needs something to have happened waits for it with ``eventually``, bounded far
above the normal case (the suite runs on loaded 2-core machines, several times slower than a
quiet one), never with a fixed sleep.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from aiokprod import KafkaTimeoutError, Producer


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> float:
    """Seconds until ``check()`` held; fails after ``timeout``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            pytest.fail(f"condition not met within {timeout} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - start


async def topic_known(producer: Producer, topic: str, timeout: float = 60.0) -> None:
    """Wait until ``producer`` has ``topic``'s metadata, asking again while each ask runs out.

    For tests that set a short ``max.block.ms`` for what they test (a full buffer, a missing
    partition): a producer's first metadata waits for its first connection under the same
    bound, which a loaded machine can outlast (200 ms once did). Asking again loses nothing:
    a send that timed out waiting for metadata accepted no record."""
    start = time.monotonic()
    while True:
        try:
            await producer.partitions_for(topic)
            return
        except KafkaTimeoutError:
            if time.monotonic() - start > timeout:
                raise
