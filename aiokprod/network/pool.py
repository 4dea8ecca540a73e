"""Connections to the cluster's nodes: one link per node, dialled, kept and closed.

``ConnectionPool`` owns one ``BrokerConnection`` per node (the bootstrap servers act as nodes
-1, -2, ... until metadata names the real ones, and stay as the fallback). Connection attempts
follow ``nodes.NodeConnectionStates``: exponential reconnect backoff, and a set-up bound
(``socket_connection_setup_timeout_ms`` doubling per failed set-up up to
``socket_connection_setup_timeout_max_ms``). Requests any broker can answer (Metadata,
InitProducerId) go to ``nodes.least_loaded_node``'s choice through ``least_loaded_connection``,
which dials beside set-ups that hang (``nodes.should_dial_another``), never waits on one node
alone and is bounded by its timeout; under metadata.recovery.strategy=rebootstrap it falls back
to the bootstrap servers when no known broker can be reached. ``any_ready_connection`` picks
among live links without dialling. docs/network.md has the rules.

The sender asks synchronously, without suspending: ``ready_connection(node)`` returns a live,
writable connection or starts connecting in the background, and the owner's ``notify_change``
says when it is worth looking again (connected, failed, or no longer write-paused).

Which nodes exist, and when to start over from the bootstrap servers, is the metadata's
business: the pool asks its :class:`PoolOwner` (the ``Cluster``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from aiokprod._backoff import ExponentialBackoff
from aiokprod._waits import wait_event
from aiokprod.errors import AuthenticationError, KafkaConnectionError
from aiokprod.network.addresses import canonical_names
from aiokprod.network.connection import BrokerConnection
from aiokprod.network.metadata import BrokerNode
from aiokprod.network.nodes import (
    Candidate,
    NodeConnectionStates,
    least_loaded_node,
    should_dial_another,
)
from aiokprod.network.security import SecurityOptions
from aiokprod.network.transport import TransportConnector

__all__ = ["ConnectionPool", "PoolOwner"]

log = logging.getLogger(__name__)

# How often housekeeping looks again at a link it could not close yet (requests in flight).
_RECHECK_S = 1.0


class _View(Protocol):
    @property
    def brokers(self) -> Mapping[int, BrokerNode]: ...


class PoolOwner(Protocol):
    """What the pool needs from the metadata side (the ``Cluster``)."""

    @property
    def view(self) -> _View: ...

    def check_usable(self) -> None:
        """Raise if the client is closed or fatal: nobody should wait for a connection."""

    def request_update(self) -> None:
        """A connection failed or closed: leaders may have moved; refresh metadata soon."""

    def notify_change(self) -> None:
        """A link connected, failed, closed or resumed writing: the sender looks again."""

    def auth_failed(self) -> None:
        """TLS or SASL was refused (``auth_error`` is set): waiters should stop waiting."""

    def housekeeping_due(self) -> None:
        """A link connected: its idle deadline may come before housekeeping's next pass."""

    def rebootstrap(self, reason: str) -> None:
        """Every known broker is unreachable: start over from the bootstrap servers."""


class _NodeLink:
    """One node's address, connection and attempt under way (backoff lives in ``_states``)."""

    __slots__ = ("address", "connecting", "connection", "last_error")

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address  # where the node listens; a change forces a reconnect
        self.connection: BrokerConnection | None = None  # live connection, if any
        self.connecting: asyncio.Task[BrokerConnection] | None = None  # attempt under way
        self.last_error: BaseException | None = None  # why the last attempt failed


class ConnectionPool:
    """One link per node; see the module docstring."""

    def __init__(
        self,
        bootstrap: list[tuple[str, int]],
        owner: PoolOwner,
        *,
        client_id: str,
        request_timeout_ms: int,
        connect_timeout_ms: int,
        connect_timeout_max_ms: int,
        reconnect_backoff_ms: int,
        reconnect_backoff_max_ms: int,
        connections_max_idle_ms: int,
        send_buffer_bytes: int,
        receive_buffer_bytes: int,
        dial_stagger_ms: float,
        rebootstrap: bool,
        connector: TransportConnector | None,
        security: SecurityOptions | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap = bootstrap
        self._owner = owner
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connections_max_idle_ms = connections_max_idle_ms  # < 0: never close idle ones
        self._socket_buffers = (send_buffer_bytes, receive_buffer_bytes)
        # while every attempt under way is older than this, one more node may be dialled
        self._dial_stagger = dial_stagger_ms / 1000
        self._rebootstrap = rebootstrap
        self._connector = connector
        self.security = security
        self._clock = clock
        self._states = NodeConnectionStates(
            ExponentialBackoff(reconnect_backoff_ms, reconnect_backoff_max_ms),
            ExponentialBackoff(connect_timeout_ms, connect_timeout_max_ms))
        self._links: dict[int, _NodeLink] = {}
        self.reset_to_bootstrap()
        # the latest TLS/SASL failure, until a connection authenticates: waiters fail with it
        # at once instead of waiting out max.block.ms (retrying cannot fix credentials)
        self.auth_error: AuthenticationError | None = None
        # set (and replaced) whenever a link connects, fails, closes or resumes writing
        self._links_changed = asyncio.Event()
        self._closed = False
        # start offset of least_loaded_node's scan, advanced per call: ties rotate
        self._rotation = 0
        self.idle_closed = 0  # connections closed after connections.max.idle.ms
        self.departed_closed = 0  # links dropped because their broker left the metadata
        self.failed_connects = 0  # connection attempts that failed

    def reset_to_bootstrap(self, error: KafkaConnectionError | None = None) -> None:
        """Close every link (with ``error``) and keep only the bootstrap servers'.

        Fresh link objects: an attempt being cancelled here finds its link gone and leaves the
        new one's backoff alone.
        """
        for node_id, link in list(self._links.items()):
            if link.connecting is not None:
                link.connecting.cancel()
                link.connecting = None
            conn, link.connection = link.connection, None
            if conn is not None:
                conn.close(error)
            del self._links[node_id]
            self._states.remove(node_id)
        for i, addr in enumerate(self.bootstrap):
            self._links[-(i + 1)] = _NodeLink(addr)

    async def close(self) -> None:
        """Close every connection and stop every attempt; pending requests fail."""
        self._closed = True
        for link in self._links.values():
            if link.connecting is not None:
                link.connecting.cancel()
                with contextlib.suppress(BaseException):
                    await link.connecting
            if link.connection is not None:
                link.connection.close(KafkaConnectionError(
                    f"[client {self.client_id}] connection closed: client is closing"))
        self.signal_links()

    def signal_links(self) -> None:
        event, self._links_changed = self._links_changed, asyncio.Event()
        event.set()

    def connection_counts(self) -> tuple[int, int]:
        """(live connections, attempts under way)."""
        return (sum(1 for x in self._links.values()
                    if x.connection is not None and x.connection.connected),
                sum(1 for x in self._links.values() if x.connecting is not None))

    async def resolve_canonical_bootstrap(self) -> list[tuple[str, int]]:
        """client.dns.lookup=resolve_canonical_bootstrap_servers_only: the bootstrap links
        become the canonical names of the bootstrap hosts (``addresses.canonical_names``).
        Call before ``start``."""
        resolved = await canonical_names(self.bootstrap, f"[client {self.client_id}]")
        for node_id in [n for n in self._links if n < 0]:
            del self._links[node_id]
        self.bootstrap = resolved
        for i, addr in enumerate(resolved):
            self._links[-(i + 1)] = _NodeLink(addr)
        return resolved

    def close_departed_and_idle(self, now: float) -> float:
        """Close departed and idle links; seconds until the next one may be due.

        A link to a broker that left the cluster (absent from the latest metadata), or to a
        bootstrap server once real brokers are known, is closed as soon as nothing is in flight
        on it; any link idle for connections.max.idle.ms is closed too (Java's Selector does
        the same). Bootstrap links keep their address as the fallback for later.
        """
        next_due = float("inf")
        brokers = self._owner.view.brokers
        idle_limit = self.connections_max_idle_ms / 1000
        for node_id in list(self._links):
            link = self._links[node_id]
            departed = bool(brokers) and node_id not in brokers
            conn = link.connection
            if departed:
                if conn is not None and conn.connected and conn.busy:
                    next_due = min(next_due, _RECHECK_S)
                    continue
                if conn is not None or link.connecting is not None:
                    log.debug("[client %s] node %d (%s:%d) %s: closing its link",
                              self.client_id, node_id, *link.address,
                              "is a bootstrap server" if node_id < 0 else "left the cluster")
                if link.connecting is not None:
                    link.connecting.cancel()
                    link.connecting = None
                if conn is not None:
                    link.connection = None
                    conn.close(KafkaConnectionError(
                        f"[client {self.client_id}] node {node_id} is no longer in the metadata"))
                    self.departed_closed += 1
                if node_id >= 0:
                    del self._links[node_id]
                    self._states.remove(node_id)
                else:
                    self._states.closed_idle(node_id)
                continue
            if conn is None or not conn.connected or idle_limit < 0:
                continue
            idle = conn.idle_for(now)
            if idle >= idle_limit:
                log.debug("[client %s] node %d idle for connections.max.idle.ms=%d: closing",
                          self.client_id, node_id, self.connections_max_idle_ms)
                link.connection = None
                conn.close(KafkaConnectionError(
                    f"[client {self.client_id}] node {node_id}: idle for "
                    f"connections.max.idle.ms={self.connections_max_idle_ms}"))
                self._states.closed_idle(node_id)
                self.idle_closed += 1
            else:
                next_due = min(next_due, idle_limit - idle)
        return next_due

    def update_address(self, node: BrokerNode) -> None:
        link = self._links.get(node.node_id)
        address = (node.host, node.port)
        if link is None:
            self._links[node.node_id] = _NodeLink(address)
        elif link.address != address:
            log.info("[client %s] node %d moved %s:%d -> %s:%d", self.client_id, node.node_id,
                     *link.address, *address)
            link.address = address
            if link.connection is not None:
                conn, link.connection = link.connection, None
                conn.close()
                self._states.closed_idle(node.node_id)

    def ready_connection(self, node_id: int) -> BrokerConnection | None:
        """A live, writable connection to ``node_id`` now, or None.

        None while connecting, backing off, or write-paused (``on_change`` fires when any of
        these ends). Never suspends: the sender calls it on every wake-up.
        """
        link = self._links.get(node_id)
        if link is None:
            # a leader on a broker the latest metadata did not list (it was down, or left):
            # only newer metadata can tell where to send, as for an unknown leader
            self._owner.request_update()
            return None
        conn = link.connection
        if conn is not None:
            if conn.connected:
                return conn if conn.writable else None
            self._on_disconnect(node_id, link, conn)
        if link.connecting is None and not self._closed and \
                self._states.can_connect(node_id, self._clock()):
            self._start_connect(node_id, link)
        return None

    def connection_delay(self, node_id: int) -> float:
        """Seconds until a connection attempt to ``node_id`` may start (0 if now)."""
        link = self._links.get(node_id)
        if link is None or link.connection is not None or link.connecting is not None:
            return 0.0
        return self._states.delay(node_id, self._clock())

    async def connection(self, node_id: int, timeout_ms: float | None = None) -> BrokerConnection:
        """A connection to ``node_id``, connecting if needed, within ``timeout_ms``
        (request.timeout.ms by default); honours the reconnect backoff between attempts.

        Raises ``KafkaConnectionError`` with the last failure when the time is up.
        """
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = self._clock() + timeout / 1000
        while True:
            self._owner.check_usable()
            link = self._links.get(node_id)
            if link is None:
                raise KafkaConnectionError(f"[client {self.client_id}] unknown node {node_id}")
            conn = self.ready_connection(node_id)
            if conn is not None:
                return conn
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise KafkaConnectionError(
                    f"[client {self.client_id}] node {node_id} ({link.address[0]}:"
                    f"{link.address[1]}) not connected within {round(timeout)} ms: "
                    f"{link.last_error or 'still connecting'}")
            wait = remaining
            if link.connecting is None and link.connection is None:
                wait = min(wait, max(self.connection_delay(node_id), 0.001))
            await self._wait_links_changed(wait)

    # ---- the least loaded choice: requests any broker can answer ---------------------------

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

    # ---- the links' lifecycle --------------------------------------------------------------

    async def _wait_links_changed(self, timeout: float) -> None:
        await wait_event(self._links_changed, timeout)

    def _start_connect(self, node_id: int, link: _NodeLink) -> None:
        setup_ms = self._states.connecting(node_id, self._clock())
        task = asyncio.get_running_loop().create_task(
            self._connect(node_id, link, setup_ms), name=f"aiokprod-connect[{node_id}]")
        task.add_done_callback(_retrieve_exception)
        link.connecting = task

    async def _connect(self, node_id: int, link: _NodeLink, setup_ms: float) -> BrokerConnection:
        host, port = link.address
        try:
            conn = await BrokerConnection.open(
                host, port, node_id=node_id, client_id=self.client_id,
                request_timeout_ms=self.request_timeout_ms, connect_timeout_ms=setup_ms,
                send_buffer_bytes=self._socket_buffers[0],
                receive_buffer_bytes=self._socket_buffers[1],
                connector=self._connector, security=self.security, clock=self._clock)
        except BaseException as exc:
            if link.connecting is asyncio.current_task():
                link.connecting = None
            link.last_error = exc
            if self._links.get(node_id) is link:  # not dropped meanwhile (broker left)
                self._states.disconnected(node_id, self._clock())
            if isinstance(exc, AuthenticationError):
                log.error("%s", exc)  # names the client, the broker and the cause
                self.auth_error = exc
                self._owner.auth_failed()
            if not isinstance(exc, asyncio.CancelledError):
                self.failed_connects += 1
                log.debug("[client %s] node %d (%s:%d): connect failed (attempt %d): %s",
                          self.client_id, node_id, host, port,
                          self._states.failed_attempts(node_id), exc)
                self._owner.request_update()
                self._owner.notify_change()
            self.signal_links()
            raise
        link.connecting = None
        if self._closed or self._links.get(node_id) is not link:
            conn.close(KafkaConnectionError(
                f"[client {self.client_id}] node {node_id}: link dropped while connecting"))
            raise KafkaConnectionError(f"[client {self.client_id}] node {node_id} link dropped")
        link.connection = conn
        link.last_error = None
        self.auth_error = None
        self._states.ready(node_id)
        conn.on_writable = self._on_writable
        conn.on_close = lambda: self._on_connection_closed(node_id, link, conn)
        self._owner.housekeeping_due()  # its idle deadline may come before the next pass
        log.debug("[client %s] connected to node %d (%s:%d)", self.client_id, node_id, host, port)
        self._owner.notify_change()
        self.signal_links()
        return conn

    def _on_writable(self) -> None:
        self._owner.notify_change()
        self.signal_links()

    def _on_connection_closed(self, node_id: int, link: _NodeLink,
                              conn: BrokerConnection) -> None:
        if link.connection is conn:  # not one we closed on purpose (those are unlinked first)
            self._on_disconnect(node_id, link, conn)
            self._owner.notify_change()
        self.signal_links()

    def _on_disconnect(self, node_id: int, link: _NodeLink, conn: BrokerConnection) -> None:
        link.connection = None
        link.last_error = conn.closed_cause
        self._states.disconnected(node_id, self._clock())
        log.debug("[client %s] node %d disconnected: %s", self.client_id, node_id,
                  conn.closed_cause)
        self._owner.request_update()  # a lost broker often means leaders moved

    def node_error(self, node_id: int) -> BaseException | None:
        link = self._links.get(node_id)
        return None if link is None else link.last_error

    def links(self) -> dict[int, tuple[str, int]]:
        """node id -> address of every link (bootstrap servers are negative): for tests."""
        return {n: link.address for n, link in self._links.items()}

    def connect_errors(self) -> str:
        """Each node's last connection failure, for messages: while a metadata request still
        waits for a connection, these say why none is up (refused, set-up timeout)."""
        return "; ".join(
            f"node {n} ({link.address[0]}:{link.address[1]}): {link.last_error}"
            for n, link in self._links.items()
            if link.last_error is not None
            and not isinstance(link.last_error, asyncio.CancelledError))


def _retrieve_exception(task: asyncio.Task[Any]) -> None:
    """Connect attempts nobody awaits report through ``node_error``, not as unhandled errors."""
    if not task.cancelled():
        task.exception()
