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


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> float:
    """Seconds until ``check()`` held; fails after ``timeout``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            pytest.fail(f"condition not met within {timeout} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - start
