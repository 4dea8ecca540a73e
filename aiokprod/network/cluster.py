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

The background task (the refresh loop, rebootstrap, topic expiry, housekeeping) works on the same
state the callers' methods read — the view, the tracked topics, their waiters, the refresh
bookkeeping — so it is methods of ``Cluster`` too, kept together under their own heading: its
timing rules (``metadata_max_age_ms``, ``retry_backoff_ms``, the rebootstrap trigger, the
housekeeping deadlines) are read together.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokprod._error_codes import ErrorCode
from aiokprod._waits import wait_event, wait_within
from aiokprod.errors import (
    AuthenticationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    RebootstrapRequiredError,
    error_for_code,
)
from aiokprod.network.addresses import parse_bootstrap
from aiokprod.network.connection import BrokerConnection
from aiokprod.network.metadata import (
    UNKNOWN_TOPIC_OR_PARTITION,
    BrokerNode,
    ClusterView,
    TopicMetadata,
    TopicPartition,
    merge_metadata_response,
)
from aiokprod.network.pool import ConnectionPool
from aiokprod.network.security import SecurityOptions
from aiokprod.network.transport import TransportConnector
from aiokprod.protocol import MetadataRequest, MetadataResponse

__all__ = ["Cluster", "ClusterStatistics", "parse_bootstrap"]

log = logging.getLogger(__name__)

# Errors on a topic that a later refresh may clear: keep refreshing while someone waits.
_WAIT_TOPIC_ERRORS = frozenset({UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE})
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


class Cluster:
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
            await wait_event(self._updated, remaining)

    async def wait_for_update(self, timeout_ms: float) -> None:
        """Wait until metadata changes or a refresh fails, at most ``timeout_ms``."""
        await wait_event(self._updated, timeout_ms / 1000)

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

    # ---- the metadata task: refreshing -----------------------------------------------------

    async def refresh_now(self, timeout_ms: float) -> None:
        """Refresh once, bounded; used at start-up and by tests."""
        try:
            await wait_within(self._refresh_once(), timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise KafkaTimeoutError(f"[client {self.client_id}] no metadata within "
                                    f"{round(timeout_ms)} ms") from None

    async def _refresh_loop(self) -> None:
        while not self._closed:
            due = max(0.0, self._last_refresh + self.metadata_max_age_ms / 1000 - self._clock())
            self._housekeeping_requested.clear()
            wait = min(due, self.housekeeping(self._clock()))
            await self._sleep_until_requested(wait)
            if not self._update_requested.is_set() and \
                    self._clock() < self._last_refresh + self.metadata_max_age_ms / 1000:
                continue  # woke for housekeeping only
            # never hammer the cluster: at most one attempt per retry_backoff_ms
            since = self._clock() - self._last_attempt
            backoff = self.retry_backoff_ms / 1000
            if since < backoff:
                await asyncio.sleep(backoff - since)
            self._update_requested.clear()
            now = self._last_attempt = self._clock()
            if self._failing_since is None:
                self._failing_since = now
            elif self._rebootstrap_due(now):
                self.rebootstrap(
                    f"no metadata for metadata.recovery.rebootstrap.trigger.ms="
                    f"{self.rebootstrap_trigger_ms}: {self._last_error}")
            try:
                await wait_within(self._refresh_once(), self._attempt_bound(now))
            except (KafkaError, asyncio.TimeoutError) as exc:  # the bound of this attempt
                self._failures += 1
                self._last_error = exc
                log.debug("[client %s] metadata refresh failed: %s", self.client_id, exc)
                self._update_requested.set()  # try again after the backoff
                self._signal_waiters()

    def _rebootstrap_due(self, now: float) -> bool:
        """Metadata has failed for metadata.recovery.rebootstrap.trigger.ms while brokers are
        known (with none known, the bootstrap servers are in use already)."""
        return (self._rebootstrap and self._failing_since is not None and bool(self.view.brokers)
                and now - self._failing_since >= self.rebootstrap_trigger_ms / 1000)

    def _attempt_bound(self, now: float) -> float:
        """Seconds one refresh attempt may take: request.timeout.ms, cut short where the
        rebootstrap trigger falls due first so an attempt on a hung broker cannot hold the
        rebootstrap back by up to request.timeout.ms."""
        bound = self.request_timeout_ms / 1000
        if self._rebootstrap and self._failing_since is not None and self.view.brokers:
            left = self._failing_since + self.rebootstrap_trigger_ms / 1000 - now
            if left > 0:  # (a trigger of 0 cuts nothing: the next attempt rebootstraps)
                bound = min(bound, left)
        return bound

    def rebootstrap(self, reason: str) -> None:
        """Forget every broker the metadata named and start over from bootstrap.servers.

        Java's ``Metadata.rebootstrap`` (KIP-899): the brokers may all have moved (a cluster
        replaced behind the same bootstrap name or load balancer), so the addresses we know
        lead nowhere, while the bootstrap servers lead to whatever serves the cluster now.
        Every connection is closed — to known brokers and to bootstrap servers alike, as the
        Java client does — so the next dial resolves the bootstrap names again; requests in
        flight fail with a retriable connection error and are retried once metadata names
        the brokers again. Topic metadata stays (leaders on nodes without a link ask for
        fresh metadata), so queued batches wait instead of failing.
        """
        log.info("[client %s] rebootstrapping with bootstrap.servers %s: %s", self.client_id,
                 ",".join(f"{h}:{p}" for h, p in self.pool.bootstrap), reason)
        error = KafkaConnectionError(f"[client {self.client_id}] connection closed: "
                                     f"rebootstrapping ({reason})")
        self.pool.reset_to_bootstrap(error)
        view = self.view
        self.view = ClusterView({}, view.topics, None, -1, view.topic_errors)
        self._rebootstraps += 1
        self._failing_since = self._clock()  # the bootstrap servers get a whole trigger period
        self.request_update()
        self.notify_change()
        self.pool.signal_links()

    async def _sleep_until_requested(self, timeout: float) -> None:
        """Wait until a refresh or a housekeeping pass is requested, at most ``timeout``."""
        if self._update_requested.is_set() or self._housekeeping_requested.is_set():
            return
        waits = [asyncio.ensure_future(self._update_requested.wait()),
                 asyncio.ensure_future(self._housekeeping_requested.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _refresh_once(self) -> None:
        self._expire_topics(self._clock())
        conn = await self.least_loaded_connection(self.request_timeout_ms)
        version = conn.version_for(MetadataRequest)
        topics = sorted(self._topics)
        if topics or version == 0:
            request = MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                allow_auto_topic_creation=True,
            )
        else:
            request = MetadataRequest(topics=[], allow_auto_topic_creation=True)
        response = await conn.request(request, version=version)
        code = getattr(response, "error_code", 0)  # top level, Metadata v13+ (KIP-1102)
        if code:
            err = error_for_code(code)
            if err is RebootstrapRequiredError and self._rebootstrap:
                self.rebootstrap(f"node {conn.node_id} answered Metadata with "
                                 f"REBOOTSTRAP_REQUIRED")
            raise err(f"[client {self.client_id}] Metadata from node {conn.node_id}: "
                      f"{err.message}")
        self._apply_metadata(response)

    def _apply_metadata(self, response: MetadataResponse) -> None:
        view, moved = merge_metadata_response(self.view, response)
        # a topic that expired while this request was in flight stays forgotten
        gone = [t for t in view.topics if t not in self._topics]
        if gone:
            view = view.without_topics(gone)
        self.view = view
        for b in view.brokers.values():
            self.pool.update_address(b)
        self._refreshes += 1
        self._last_refresh = self._clock()
        self._last_error = None
        self._failing_since = None
        if any(code in _WAIT_TOPIC_ERRORS and topic in self._waiters
               for topic, code in view.topic_errors.items()):
            # keep looking while a send waits for the topic (not after it gave up)
            self._update_requested.set()
        if moved:
            self._notify_leaders_moved(moved)
        self.housekeeping(self._clock())
        self.notify_change()
        self._signal_waiters()

    def _expire_topics(self, now: float) -> list[str]:
        """Forget topics unused for metadata.max.idle.ms (Java's ``ProducerMetadata``)."""
        limit = self.metadata_max_idle_ms / 1000
        expired = [t for t, used in self._topics.items()
                   if now - used >= limit and t not in self._waiters]
        in_use = [t for t in expired if self.topic_in_use(t)]
        for t in in_use:
            self._topics[t] = now  # records still queued: it counts as used now
        if in_use:
            expired = [t for t in expired if t not in in_use]
        if not expired:
            return expired
        for t in expired:
            del self._topics[t]
        self._expired_topics += len(expired)
        self.view = self.view.without_topics(expired)
        log.debug("[client %s] topics unused for metadata.max.idle.ms=%d forgotten: %s",
                  self.client_id, self.metadata_max_idle_ms, expired)
        for cb in self.on_topics_expired:
            cb(expired)
        return expired

    # ---- housekeeping ----------------------------------------------------------------------

    def housekeeping(self, now: float) -> float:
        """Have the pool close departed and idle links, expire unused topics; seconds until the
        next pass is due."""
        next_due = self.pool.close_departed_and_idle(now)
        self._expire_topics(now)
        topic_limit = self.metadata_max_idle_ms / 1000
        for topic, used in self._topics.items():
            if topic not in self._waiters:  # a waiter keeps its topic; it re-checks itself
                next_due = min(next_due, used + topic_limit - now)
        return max(next_due, 0.01)

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
