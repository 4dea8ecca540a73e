"""What ends a connection's request other than its answer: its deadline, or the buffer draining.

Why a module of its own: ``connection.py`` writes requests, matches each answer to the oldest
pending one and closes the connection; the requests' clock and the transport's back-pressure
are a job of their own, kept here. ``InFlight`` is a mixin of ``BrokerConnection``: the state
it reads is the connection's, set in ``BrokerConnection.__init__`` and declared below; the
timer (``_timer``, ``_timer_deadline``) is changed only by the methods here (``write`` arms it
through ``_arm_timer``).

Timeouts: one ``TimerHandle`` per connection watches the earliest deadline among the requests
awaiting an answer and the unanswered ones still in the buffer; when one is overdue the
connection is closed (the third invariant in ``connection.py``'s docstring).

Back-pressure: asyncio's transport buffers whatever is written and calls ``pause_writing`` when
the buffer passes its high-water mark. A request sent without expecting an answer (Produce with
acks=0) is done only when its bytes are no longer piling up: at once if the buffer stayed under
the high-water mark, else when the transport calls ``resume_writing`` (buffer drained below the
low-water mark). Until then its future stays pending — so the producer's pool memory is not
released while the bytes still sit in our process — and it is bounded by ``request_timeout_ms``
like any request (Java's NetworkClient completes an acks=0 send only once the socket took it).
``writable`` is False while paused; the cluster stops handing the connection to the sender and
``on_writable`` tells it when to look again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokprod.errors import KafkaConnectionError, KafkaError, RequestTimeoutError
from aiokprod.network.wire import Pending

if TYPE_CHECKING:
    from aiokprod.network.session import Session

__all__ = ["InFlight"]


class InFlight:
    """The deadlines and the write buffer of the requests a ``BrokerConnection`` has written,
    as methods of the connection."""

    # the connection's state, as this side uses it (set in BrokerConnection.__init__)
    request_timeout_ms: int
    timeouts: int
    last_activity: float
    on_writable: Callable[[], None] | None
    session: Session
    _name: str
    _clock: Callable[[], float]
    _loop: asyncio.AbstractEventLoop
    _transport: asyncio.Transport | None
    _closed_cause: KafkaError | None
    _pending: deque[Pending]
    _unflushed: deque[tuple[float, asyncio.Future[Any]]]
    _timer: asyncio.TimerHandle | None
    _timer_deadline: float
    _write_paused: bool

    if TYPE_CHECKING:  # BrokerConnection's
        def _fail(self, cause: KafkaError) -> None: ...

    # ---- in flight -------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def busy(self) -> bool:
        """Requests await answers, or unanswered ones still wait to leave the buffer."""
        return bool(self._pending or self._unflushed)

    def idle_for(self, now: float) -> float:
        """Seconds with nothing in flight and nothing written or read; 0 while busy."""
        if self._pending or self._unflushed:
            return 0.0
        return max(0.0, now - self.last_activity)

    # ---- back-pressure ---------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        """Connected and not write-paused: more requests would not just pile up in memory."""
        return not self._write_paused and self._transport is not None and \
            self._closed_cause is None and not self.session.holding

    @property
    def write_buffer_size(self) -> int:
        transport = self._transport
        return 0 if transport is None or transport.is_closing() else \
            transport.get_write_buffer_size()

    def writing_paused(self) -> None:
        self._write_paused = True

    def writing_resumed(self) -> None:
        """The buffer drained below the low-water mark: what was waiting in it is sent."""
        self._write_paused = False
        unflushed, self._unflushed = self._unflushed, deque()
        for _, future in unflushed:
            if not future.done():
                future.set_result(None)
        if self.on_writable is not None and self._closed_cause is None:
            self.on_writable()

    # ---- timeouts --------------------------------------------------------------------------

    def _arm_timer(self, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_deadline = deadline
        delay = max(0.0, deadline - self._clock())
        self._timer = self._loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline = float("inf")
        if not self._pending and not self._unflushed:
            return
        now = self._clock()
        if self._unflushed and self._unflushed[0][0] <= now:
            self.timeouts += 1
            error = RequestTimeoutError(
                f"{self._name}: a request sent without expecting an answer (acks=0) could not be "
                f"written within request.timeout.ms={self.request_timeout_ms}: the broker does "
                f"not read; disconnecting")
            for _, future in self._unflushed:
                if not future.done():
                    future.set_exception(error)
            self._unflushed.clear()
            self._fail(KafkaConnectionError(
                f"{self._name}: disconnected after a request timed out"))
            return
        expired = [p for p in self._pending if p.deadline <= now]
        if expired:
            self.timeouts += 1
            first = expired[0]
            error = RequestTimeoutError(
                f"{self._name}: {first.api_name} request (correlation id "
                f"{first.correlation_id}) got no response within request.timeout.ms="
                f"{round((first.deadline - first.sent_at) * 1000)}; disconnecting")
            for p in expired:
                if not p.future.done():
                    p.future.set_exception(error)
            self._fail(KafkaConnectionError(
                f"{self._name}: disconnected after a request timed out"))
            return
        deadlines = [p.deadline for p in self._pending]
        if self._unflushed:
            deadlines.append(self._unflushed[0][0])
        self._arm_timer(min(deadlines))

    # ---- closing ---------------------------------------------------------------------------

    def _fail_in_flight(self, cause: KafkaError) -> None:
        """The connection closed (``BrokerConnection._fail``): stop the timer, fail every
        request awaiting an answer and every unanswered one still in the buffer with ``cause``."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_deadline = float("inf")
        pending, self._pending = self._pending, deque()
        for p in pending:
            if not p.future.done():
                p.future.set_exception(cause)
        unflushed, self._unflushed = self._unflushed, deque()
        for _, future in unflushed:
            if not future.done():
                future.set_exception(cause)
