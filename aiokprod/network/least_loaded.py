"""The pool's answer to requests any broker can answer (Metadata, InitProducerId, telemetry).

``least_loaded_connection`` takes ``nodes.least_loaded_node``'s choice among the pool's links,
dials beside set-ups that hang (``nodes.should_dial_another``) and, under
metadata.recovery.strategy=rebootstrap, falls back to the bootstrap servers when no known
broker can be reached; ``any_ready_connection`` picks among live links without dialling.
docs/network.md has the rules.

A mixin of ``ConnectionPool`` (``pool.py`` keeps the links, dials them and closes them): this
choice is the one part of the pool that reads every link at once, and it stays apart from
their lifecycle. The state it reads is the pool's, declared below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokprod.errors import AuthenticationError, KafkaConnectionError
from aiokprod.network.connection import BrokerConnection
from aiokprod.network.nodes import (
    Candidate,
    NodeConnectionStates,
    least_loaded_node,
    should_dial_another,
)

if TYPE_CHECKING:
    from aiokprod.network.pool import PoolOwner, _NodeLink

__all__ = ["LeastLoadedChoice"]


class LeastLoadedChoice:
    """``least_loaded_connection`` and ``any_ready_connection``, as methods of
    ``ConnectionPool``."""

    # the pool's state (set in ConnectionPool.__init__)
    client_id: str
    request_timeout_ms: int
    auth_error: AuthenticationError | None
    _owner: PoolOwner
    _links: dict[int, _NodeLink]
    _states: NodeConnectionStates
    _clock: Callable[[], float]
    _dial_stagger: float
    _rebootstrap: bool
    _rotation: int

    if TYPE_CHECKING:  # ConnectionPool's: the links' lifecycle
        def _start_connect(self, node_id: int, link: _NodeLink) -> None: ...

        def _on_disconnect(self, node_id: int, link: _NodeLink,
                           conn: BrokerConnection) -> None: ...

        async def _wait_links_changed(self, timeout: float) -> None: ...

    def any_ready_connection(self) -> BrokerConnection | None:
        """A live, writable connection with the fewest requests in flight, or None; never dials.

        For background work that should ride on the connections the producer opened anyway
        rather than open one of its own (KIP-714 telemetry: an idle producer stays unconnected).
        """
        best: BrokerConnection | None = None
        for link in self._links.values():
            conn = link.connection
            if conn is not None and conn.writable and (best is None
                                                       or conn.in_flight < best.in_flight):
                best = conn
        return best

    async def any_connection(self) -> BrokerConnection:
        """``least_loaded_connection`` bounded by request.timeout.ms (Metadata, InitProducerId)."""
        return await self.least_loaded_connection(self.request_timeout_ms)

    async def least_loaded_connection(self, timeout_ms: float) -> BrokerConnection:
        """A ready connection to the least loaded node, within ``timeout_ms``.

        Candidates are the known brokers, or the bootstrap servers while none is known or none
        can be reached. Each pass takes ``least_loaded_node``'s choice: a ready connection is
        returned; a node whose backoff elapsed is dialled; while only set-ups are under way and
        each is older than the stagger, one more node is dialled beside them. A node that
        refuses or hangs is therefore never waited on alone; each set-up is bounded by its own
        timeout. Raises ``KafkaConnectionError`` naming every node's last error when
        ``timeout_ms`` runs out. Cancellation leaves attempts under way running (they finish or
        time out by themselves and serve the next caller).
        """
        deadline = self._clock() + timeout_ms / 1000
        offset = self._rotation
        self._rotation += 1
        while True:
            self._owner.check_usable()
            now = self._clock()
            candidates = self._candidates(now)
            choice = least_loaded_node(candidates, offset)
            if choice is not None and choice.ready:
                conn = self._links[choice.node_id].connection
                assert conn is not None  # ready implies a live connection
                return conn
            dial: Candidate | None = None
            if choice is not None and choice.can_connect:
                dial = choice
            elif should_dial_another(candidates, now, self._dial_stagger):
                dial = min((c for c in candidates if c.can_connect),
                           key=lambda c: c.last_attempt_at)
            if dial is not None:
                self._start_connect(dial.node_id, self._links[dial.node_id])
                continue
            if self.auth_error is not None:
                # the last attempt was refused on credentials or certificate; the next dial
                # waits for its backoff, so say why now rather than at the deadline
                raise AuthenticationError(str(self.auth_error))
            remaining = deadline - now
            if remaining <= 0:
                raise KafkaConnectionError(self._no_connection_message(timeout_ms, candidates))
            # besides a link event, wake when the stagger of the newest attempt ends or when a
            # backoff elapses: either may allow a new dial
            wakeups = [remaining]
            connecting = [c.last_attempt_at for c in candidates if c.connecting]
            if connecting:
                stagger_left = max(connecting) + self._dial_stagger - now
                if stagger_left > 0:
                    wakeups.append(stagger_left)
            for c in candidates:
                if not (c.ready or c.connecting or c.can_connect):
                    delay = self._states.delay(c.node_id, now)
                    if delay > 0:
                        wakeups.append(delay)
            await self._wait_links_changed(min(wakeups))

    def _candidates(self, now: float) -> list[Candidate]:
        """Known brokers; the bootstrap servers while none is known.

        When every known broker is unusable at once (backing off after failures, none
        connecting or connected), metadata.recovery.strategy decides: ``rebootstrap`` forgets
        them and the bootstrap servers are the candidates (Java's ``NetworkClient``
        rebootstraps when ``leastLoadedNode`` finds no node available); ``none`` keeps them,
        and the caller waits for a backoff to elapse.
        """
        brokers = [n for n in self._links if n >= 0 and n in self._owner.view.brokers]
        found = [self._candidate(n, now) for n in brokers]
        if found:
            if any(c.ready or c.connecting or c.can_connect for c in found) or any(
                    self._links[c.node_id].connection is not None for c in found) or \
                    not self._rebootstrap:
                return found  # a write-paused connection still counts: it resumes
            self._owner.rebootstrap("no known broker can be reached: " + "; ".join(
                f"node {c.node_id}: {self._links[c.node_id].last_error}" for c in found))
        return [self._candidate(n, now) for n in self._links if n < 0]

    def _candidate(self, node_id: int, now: float) -> Candidate:
        link = self._links[node_id]
        conn = link.connection
        if conn is not None and not conn.connected:
            self._on_disconnect(node_id, link, conn)
            conn = None
        ready = conn is not None and conn.writable
        return Candidate(
            node_id=node_id,
            ready=ready,
            in_flight=conn.in_flight if conn is not None else 0,
            connecting=link.connecting is not None,
            can_connect=conn is None and link.connecting is None
            and self._states.can_connect(node_id, now),
            last_attempt_at=self._states.last_attempt_at(node_id),
        )

    def _no_connection_message(self, timeout_ms: float, candidates: list[Candidate]) -> str:
        tried = "; ".join(
            f"node {c.node_id} ({self._links[c.node_id].address[0]}:"
            f"{self._links[c.node_id].address[1]}): "
            f"{self._links[c.node_id].last_error or ('connecting' if c.connecting else 'idle')}"
            for c in candidates)
        return (f"[client {self.client_id}] no broker connection within {round(timeout_ms)} ms "
                f"(request.timeout.ms); {tried}")
