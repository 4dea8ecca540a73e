"""The supervisor: one owner for the producer's background tasks.

A producer runs background work — the sender, the metadata refresh, producer-id requests. A
task that dies of an unexpected exception must never die silently: before this existed, a
crash in the sender left every later ``send()`` waiting for ``delivery_timeout_ms`` and a
crash in the metadata task left every new topic waiting for ``max_block_ms``. Here every
background task is started (or adopted) by the ``Supervisor``; when one ends with an exception
the supervisor logs it once and calls ``on_fatal`` with it, and the producer then fails every
pending record with that cause, wakes every waiter and refuses new sends.

Normal ends (a task returning, or cancelled by ``close()``) are not failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["Supervisor"]

log = logging.getLogger(__name__)


class Supervisor:
    """Starts, watches and stops the producer's background tasks."""

    def __init__(self, client_id: str, on_fatal: Callable[[BaseException, str], None]) -> None:
        self._client_id = client_id  # for log lines
        # called once, with the first crash and the crashed task's name
        self._on_fatal = on_fatal
        # every task still running; a finished task removes itself
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False  # close() is cancelling tasks: their ends are expected
        # the first unexpected exception, kept for callers that ask why the producer is fatal
        self.crash: BaseException | None = None

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a supervised task named ``name``."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.watch(task)
        return task

    def watch(self, task: asyncio.Task[Any]) -> None:
        """Supervise a task someone else created."""
        self._tasks.add(task)
        task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if self.crash is not None:
            log.debug("[client %s] %s also ended with %r after the first crash",
                      self._client_id, task.get_name(), exc)
            return
        self.crash = exc
        log.error("[client %s] background task %s crashed; the producer is now fatal",
                  self._client_id, task.get_name(), exc_info=exc)
        self._on_fatal(exc, task.get_name())

    @property
    def running(self) -> int:
        """Tasks still running (for statistics and tests)."""
        return len(self._tasks)

    async def stop(self, timeout: float) -> None:
        """Cancel every task still running and wait for them, at most ``timeout`` seconds."""
        self._stopping = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait(tasks, timeout=timeout)
        still = [t.get_name() for t in tasks if not t.done()]
        if still:
            log.warning("[client %s] tasks still running after close: %s", self._client_id,
                        ", ".join(still))
