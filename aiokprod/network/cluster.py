"""The client's view of the cluster: metadata kept fresh, over a pool of connections.

``Cluster`` keeps the metadata (``ClusterView``: brokers, topics, leaders) and one background
task that refreshes it every ``metadata_max_age_ms`` or as soon as someone asks (a send to a
new topic, a NOT_LEADER_OR_FOLLOWER answer, a lost connection), never more often than
``retry_backoff_ms``. The same task does the housekeeping: it has the pool close connections to
brokers that left the cluster and connections idle for ``connections_max_idle_ms``, and forgets
topics nobody used for ``metadata_max_idle_ms`` (telling ``on_topics_expired``). When metadata
cannot be had, ``metadata.recovery.strategy`` decides whether to start over from the bootstrap
servers (KIP-899, KIP-1102).

The connections are ``pool.ConnectionPool``'s; ``Cluster`` passes its connection methods
through (``ready_connection``, ``connection``, ``least_loaded_connection``, ...) so callers
hold one object.

The background task's methods (the refresh loop, rebootstrap, topic expiry, housekeeping) are
``metadata_refresh.MetadataRefresh``'s, a mixin ``Cluster`` inherits; the state they share is
created here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import (
    AuthenticationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    error_for_code,
)
from aiokprod.network.addresses import parse_bootstrap
from aiokprod.network.connection import BrokerConnection, TransportConnector
from aiokprod.network.metadata import (
    UNKNOWN_TOPIC_OR_PARTITION,
    BrokerNode,
    ClusterView,
    TopicMetadata,
    TopicPartition,
)
from aiokprod.network.metadata_refresh import MetadataRefresh
from aiokprod.network.pool import ConnectionPool
from aiokprod.network.security import SecurityOptions

__all__ = ["Cluster", "ClusterStatistics", "parse_bootstrap"]

# Errors on a topic that no amount of waiting fixes: fail the waiting send at once.
_FATAL_TOPIC_ERRORS = frozenset({ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 ErrorCode.TOPIC_AUTHORIZATION_FAILED})


@dataclass(frozen=True)
class ClusterStatistics:
    known_brokers: int
    connections: int
    connecting: int
    tracked_topics: int
    metadata_refreshes: int
    metadata_failures: int
    metadata_age_s: float
    # connections closed after connections.max.idle.ms with nothing in flight
    idle_closed: int = 0
    # links dropped because their broker was no longer in the metadata
    departed_closed: int = 0
    # topics forgotten after metadata.max.idle.ms without use
    expired_topics: int = 0
    # connection attempts that failed (refused, set-up timeout, handshake error)
    failed_connects: int = 0
    # times the known brokers were forgotten for the bootstrap servers (KIP-899, KIP-1102)
    rebootstraps: int = 0


class Cluster(MetadataRefresh):
    """Metadata kept fresh over a connection pool; see the module docstring."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "aiokprod",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        connect_timeout_max_ms: int = 30000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        metadata_max_idle_ms: int = 300000,
        connections_max_idle_ms: int = 540000,
        send_buffer_bytes: int = 131072,
        receive_buffer_bytes: int = 32768,
        dial_stagger_ms: float = 250.0,
        metadata_recovery_strategy: str = "rebootstrap",
        rebootstrap_trigger_ms: int = 300000,
        connector: TransportConnector | None = None,
        security: SecurityOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.metadata_max_idle_ms = metadata_max_idle_ms
        # metadata.recovery.strategy: "rebootstrap" forgets the known brokers for the
        # bootstrap servers when they all fail (KIP-899), when metadata kept failing for
        # metadata.recovery.rebootstrap.trigger.ms, or on REBOOTSTRAP_REQUIRED (KIP-1102);
        # "none" keeps dialling the brokers last known
        if metadata_recovery_strategy not in ("rebootstrap", "none"):
            raise ValueError(f"metadata_recovery_strategy must be rebootstrap or none, got "
                             f"{metadata_recovery_strategy!r}")
        self._rebootstrap = metadata_recovery_strategy == "rebootstrap"
        self.rebootstrap_trigger_ms = rebootstrap_trigger_ms
        self._clock = clock
        # the current snapshot; replaced whole on every change (a plain attribute: send() reads it
        # per record)
        self.view = ClusterView({}, {})
        self.pool = ConnectionPool(
            parse_bootstrap(bootstrap_servers), self, client_id=client_id,
            request_timeout_ms=request_timeout_ms, connect_timeout_ms=connect_timeout_ms,
            connect_timeout_max_ms=connect_timeout_max_ms,
            reconnect_backoff_ms=reconnect_backoff_ms,
            reconnect_backoff_max_ms=reconnect_backoff_max_ms,
            connections_max_idle_ms=connections_max_idle_ms,
            send_buffer_bytes=send_buffer_bytes, receive_buffer_bytes=receive_buffer_bytes,
            dial_stagger_ms=dial_stagger_ms, rebootstrap=self._rebootstrap,
            connector=connector, security=security, clock=clock)
        # topic -> when it was last used (add_topic / touch_topics): expiry after
        # metadata_max_idle_ms
        self._topics: dict[str, float] = {}
        # topic -> sends waiting in wait_for_topic: only these justify fast refreshes of a
        # topic the broker reports as missing
        self._waiters: dict[str, int] = {}
        self._update_requested = asyncio.Event()
        # set when housekeeping's next due time may have moved earlier (a link connected, the
        # last waiter of a topic left): the loop recomputes it without refreshing metadata
        self._housekeeping_requested = asyncio.Event()
        # set (and replaced) whenever metadata changes or a refresh fails: waiters re-check
        self._updated = asyncio.Event()
        self._last_refresh = float("-inf")
        self._last_attempt = float("-inf")
        self._last_error: BaseException | None = None
        self._refreshes = 0
        self._failures = 0
        self._expired_topics = 0
        self._rebootstraps = 0
        # when the first metadata attempt since the last success started (None: the last one
        # succeeded); metadata.recovery.rebootstrap.trigger.ms counts from it, so a refresh
        # that is merely due never counts as failing (KIP-1102)
        self._failing_since: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # set by fail(): the producer is fatal and waiters must stop waiting
        self._fatal_error: BaseException | None = None
        # called after a connection opens/closes/resumes or metadata changes: the sender looks
        self.on_change: list[Callable[[], None]] = []
        # called with the topics whose partition leaders moved (KIP-1269 resets its window),
        # including topics re-created under the same name (a new topic id)
        self.on_leaders_moved: list[Callable[[list[str]], None]] = []
        # called with the topics forgotten after metadata_max_idle_ms: prune per-topic state
        self.on_topics_expired: list[Callable[[list[str]], None]] = []
        # whether records of a topic are still queued: such a topic never expires
        self.topic_in_use: Callable[[str], bool] = lambda topic: False

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self, spawn: Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]]
              | None = None) -> None:
        """Start the metadata task; ``spawn`` (the producer's supervisor) owns it if given."""
        if self._task is None:
            name = f"aiokprod-metadata[{self.client_id}]"
            if spawn is None:
                self._task = asyncio.get_running_loop().create_task(self._refresh_loop(),
                                                                    name=name)
            else:
                self._task = spawn(self._refresh_loop(), name)
            self._update_requested.set()

    def fail(self, error: BaseException) -> None:
        """The producer turned fatal: every metadata waiter raises ``error`` from now on."""
        if self._fatal_error is None:
            self._fatal_error = error
        self._signal_waiters()
        self.pool.signal_links()

    async def close(self) -> None:
        """Stop refreshing and close every connection; pending requests fail with the cause."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # wait without re-raising: a crash of the task was reported by its supervisor
            await asyncio.wait({task})
        await self.pool.close()
        self._signal_waiters()

    # ---- metadata --------------------------------------------------------------------------

    def topic(self, name: str) -> TopicMetadata | None:
        return self.view.topics.get(name)

    def add_topic(self, topic: str) -> None:
        """Track ``topic`` (refreshing soon if it is new); counts as a use of it."""
        known = topic in self._topics
        self._topics[topic] = self._clock()
        if not known:
            self.request_update()

    def touch_topics(self, topics: Iterable[str], now: float | None = None) -> None:
        """Record a use of ``topics`` (the sender calls it per drained batch) so they do not
        expire after metadata.max.idle.ms while records still flow to them."""
        when = self._clock() if now is None else now
        for topic in topics:
            self._topics[topic] = when

    def request_update(self) -> None:
        """Ask for a refresh soon (respecting retry_backoff_ms); never blocks."""
        self._update_requested.set()

    def metadata_age(self) -> float:
        return self._clock() - self._last_refresh

    async def wait_for_topic(self, topic: str, timeout_ms: float) -> TopicMetadata:
        """Metadata for ``topic``, waiting at most ``timeout_ms`` (the caller's max.block.ms).

        While it waits, the topic is refreshed as often as retry_backoff_ms allows; once it
        stops waiting (cancelled included), a topic the broker reports missing is no longer
        refreshed on its account.
        """
        meta = self.view.topics.get(topic)
        if meta is not None and meta.partition_ids:
            return meta
        self.add_topic(topic)
        self._waiters[topic] = self._waiters.get(topic, 0) + 1
        try:
            return await self._wait_for_topic(topic, timeout_ms)
        finally:
            left = self._waiters[topic] - 1
            if left:
                self._waiters[topic] = left
            else:
                del self._waiters[topic]
                # the topic may expire from now on: housekeeping must count it again
                self._housekeeping_requested.set()

    async def _wait_for_topic(self, topic: str, timeout_ms: float) -> TopicMetadata:
        deadline = self._clock() + timeout_ms / 1000
        while True:
            meta = self.view.topics.get(topic)
            if meta is not None and meta.partition_ids:
                return meta
            if self._fatal_error is not None:
                raise self._fatal_error
            if self._closed:
                raise KafkaConnectionError(
                    f"[client {self.client_id}] closed while waiting for metadata of {topic!r}")
            if self.pool.auth_error is not None:
                raise AuthenticationError(str(self.pool.auth_error))
            code = self.view.topic_errors.get(topic)
            if code is not None and code in _FATAL_TOPIC_ERRORS:
                err = error_for_code(code)
                raise err(f"topic {topic!r}: {err.message}")
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise KafkaTimeoutError(self._missing_topic_message(topic, timeout_ms))
            self._topics[topic] = self._clock()  # waiting is using it
            self.request_update()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._updated.wait(), remaining)

    async def wait_for_update(self, timeout_ms: float) -> None:
        """Wait until metadata changes or a refresh fails, at most ``timeout_ms``."""
        event = self._updated
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), max(0.0, timeout_ms) / 1000)

    def _missing_topic_message(self, topic: str, timeout_ms: float) -> str:
        code = self.view.topic_errors.get(topic)
        if code == UNKNOWN_TOPIC_OR_PARTITION:
            why = "the broker says the topic does not exist (and did not auto-create it)"
        elif not self.view.brokers:
            why = "no broker answered: " + (str(self._last_error) if self._last_error
                                             else self.pool.connect_errors() or "still connecting")
        elif code is not None:
            why = f"the broker answered {error_for_code(code).__name__}"
        else:
            why = "no metadata for it arrived yet"
        return (f"Topic {topic!r} not present in metadata after max.block.ms="
                f"{int(timeout_ms)}: {why}")

    def apply_leader_hint(self, tp: TopicPartition, leader: int, leader_epoch: int,
                          endpoints: Iterable[BrokerNode] = ()) -> bool:
        """KIP-951: a Produce response named the new leader; use it without a refresh."""
        view = self.view.with_leader(tp, leader, leader_epoch, endpoints)
        if view is None:
            return False
        self.view = view
        for b in endpoints:
            self.pool.update_address(b)
        self._notify_leaders_moved([tp.topic])
        self.notify_change()
        return True

    def _signal_waiters(self) -> None:
        event, self._updated = self._updated, asyncio.Event()
        event.set()

    def notify_change(self) -> None:
        for cb in self.on_change:
            cb()

    def _notify_leaders_moved(self, topics: list[str]) -> None:
        for cb in self.on_leaders_moved:
            cb(topics)

    # ---- the pool's owner (pool.PoolOwner) -------------------------------------------------

    def check_usable(self) -> None:
        if self._fatal_error is not None:
            raise self._fatal_error
        if self._closed:
            raise KafkaConnectionError(f"[client {self.client_id}] client is closed")

    def auth_failed(self) -> None:
        self._signal_waiters()

    def housekeeping_due(self) -> None:
        self._housekeeping_requested.set()

    # ---- connections (the pool's, passed through) -------------------------------------------

    def ready_connection(self, node_id: int) -> BrokerConnection | None:
        """A live, writable connection to ``node_id`` now, or None; never suspends."""
        return self.pool.ready_connection(node_id)

    def connection_delay(self, node_id: int) -> float:
        return self.pool.connection_delay(node_id)

    async def connection(self, node_id: int, timeout_ms: float | None = None) -> BrokerConnection:
        return await self.pool.connection(node_id, timeout_ms)

    def any_ready_connection(self) -> BrokerConnection | None:
        return self.pool.any_ready_connection()

    async def any_connection(self) -> BrokerConnection:
        return await self.pool.any_connection()

    async def least_loaded_connection(self, timeout_ms: float) -> BrokerConnection:
        return await self.pool.least_loaded_connection(timeout_ms)

    async def resolve_canonical_bootstrap(self) -> list[tuple[str, int]]:
        return await self.pool.resolve_canonical_bootstrap()

    def node_error(self, node_id: int) -> BaseException | None:
        return self.pool.node_error(node_id)

    def links(self) -> dict[int, tuple[str, int]]:
        return self.pool.links()

    def tracked_topics(self) -> dict[str, float]:
        """topic -> when it was last used; what the next Metadata request asks for."""
        return dict(self._topics)

    # ---- introspection ---------------------------------------------------------------------

    def statistics(self) -> ClusterStatistics:
        connections, connecting = self.pool.connection_counts()
        return ClusterStatistics(
            known_brokers=len(self.view.brokers),
            connections=connections,
            connecting=connecting,
            tracked_topics=len(self._topics),
            metadata_refreshes=self._refreshes,
            metadata_failures=self._failures,
            metadata_age_s=self.metadata_age(),
            idle_closed=self.pool.idle_closed,
            departed_closed=self.pool.departed_closed,
            expired_topics=self._expired_topics,
            failed_connects=self.pool.failed_connects,
            rebootstraps=self._rebootstraps,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"<Cluster client={self.client_id} brokers={s.known_brokers} "
                f"connections={s.connections} topics={s.tracked_topics} "
                f"refreshes={s.metadata_refreshes}>")
