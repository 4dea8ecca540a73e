"""A connection's SASL session and its re-authentication (KIP-368).

The broker gave the session a lifetime; at 85–95% of it (``security.reauthentication_delay``)
the client authenticates again on the same connection. Requests already written stay in the
pipeline (the broker answers them in order before the SASL ones); requests sent meanwhile are
*held* and written afterwards, in order, so nothing fails and nothing is reordered. A failed
re-authentication fails the connection.

``Session`` is created and owned by its ``BrokerConnection`` (``connection.py``), which hands it
what it needs in its constructor — how to write past the hold, how to close the connection, what
to tell it once the hold ends — so this module never imports the connection: the connection
sits above its session. The connection's set-up (dial, ApiVersions, then the first
``Session.authenticate``) is the connection's own, in ``connection.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aiokprod.errors import AuthenticationError, KafkaError
from aiokprod.network.security import SecurityOptions, authenticate, reauthentication_delay
from aiokprod.protocol import KafkaRequest

__all__ = ["Held", "Session", "Write"]

log = logging.getLogger(__name__)

_R = TypeVar("_R")

# a request sent while re-authenticating: (request, version, timeout_ms, expect_response,
# the caller's future)
Held = tuple[KafkaRequest[Any], "int | None", "int | None", bool, asyncio.Future[Any]]

#: ``BrokerConnection.write``: frame and write (request, version, timeout_ms, expect_response)
#: now, past any hold; a future of the decoded answer (None when none is expected)
Write = Callable[[KafkaRequest[Any], "int | None", "int | None", bool], "asyncio.Future[Any]"]


class Session:
    """One connection's SASL session: its lifetime, the re-authentication timer and task, and
    the requests held while re-authenticating (see the module docstring)."""

    def __init__(self, name: str, node_id: int, security: SecurityOptions, *, write: Write,
                 close: Callable[[KafkaError], None],
                 resumed: Callable[[], None]) -> None:
        """``name``: the connection's, for messages; ``write``: the connection's ``write``;
        ``close``: closes the connection (a failed re-authentication); ``resumed``: the hold
        ended and the held requests are written (the connection may be writable again)."""
        self._name = name
        self._node_id = node_id
        self._security = security
        self._write = write
        self._close_connection = close
        self._resumed = resumed
        # the connection closed (``close`` below): nothing more is scheduled
        self._closed = False
        # API key -> (broker min, broker max), as the first authentication was given them
        self._broker_versions: dict[int, tuple[int, int]] = {}
        # requests sent while re-authenticating, written in order once it is done
        self.held: list[Held] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        # SASL session lifetime the broker gave (ms; 0: none) and re-authentications done
        self.lifetime_ms = 0
        self.reauthentications = 0

    @property
    def holding(self) -> bool:
        """Re-authenticating: requests are held, not written."""
        return self.held is not None

    async def authenticate(self, broker_versions: dict[int, tuple[int, int]]) -> None:
        """Authenticate and schedule the re-authentication, if the session ends.

        ``broker_versions``: what ApiVersions negotiated (the SASL requests' versions); kept for
        the re-authentications.
        """
        self._broker_versions = broker_versions
        await self._authenticate()

    async def _authenticate(self) -> None:
        lifetime = await authenticate(self._request_now, self._broker_versions, self._security,
                                      broker=self._name)
        self.lifetime_ms = lifetime
        delay = reauthentication_delay(lifetime)
        if delay is not None and not self._closed:
            self._timer = asyncio.get_running_loop().call_later(delay, self._start)

    def _request_now(self, request: KafkaRequest[_R], version: int) -> asyncio.Future[_R]:
        """Send past the hold: the SASL exchange itself."""
        # expect_response=True: the future resolves to a decoded response, never to None
        return cast("asyncio.Future[_R]", self._write(request, version, None, True))

    def _start(self) -> None:
        self._timer = None
        if self._closed:
            return
        self.held = []
        self._task = asyncio.get_running_loop().create_task(
            self._reauthenticate(), name=f"aiokprod-reauth[{self._node_id}]")

    async def _reauthenticate(self) -> None:
        try:
            await self._authenticate()
        except BaseException as exc:
            cause = exc if isinstance(exc, KafkaError) else AuthenticationError(
                f"{self._name}: re-authentication failed: {type(exc).__name__}: {exc}")
            self._close_connection(cause)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        finally:
            self._task = None
        self.reauthentications += 1
        log.debug("%s: re-authenticated (session lifetime %d ms)", self._name, self.lifetime_ms)
        held, self.held = self.held or [], None
        for request, version, timeout_ms, expect, future in held:
            _chain(self._write(request, version, timeout_ms, expect), future)
        self._resumed()

    def close(self, cause: KafkaError) -> None:
        """The connection closed: stop the timer and the task, fail what was held."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self.held = self.held, None
        for _, _, _, _, future in held or ():
            if not future.done():
                future.set_exception(cause)
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()


def _chain(source: asyncio.Future[Any], target: asyncio.Future[Any]) -> None:
    """Complete ``target`` as ``source`` completes (a held request's caller-facing future)."""
    def copy(done: asyncio.Future[Any]) -> None:
        if target.done():
            if not done.cancelled():
                done.exception()
            return
        if done.cancelled():
            target.cancel()
        elif done.exception() is not None:
            target.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)
