"""The client's view of the cluster: connections per node and metadata kept fresh.

``Cluster`` owns one ``BrokerConnection`` per node and one background task that refreshes
metadata every ``metadata_max_age_ms`` or as soon as someone asks (a send to a new topic, a
NOT_LEADER_OR_FOLLOWER answer, a lost connection), never more often than ``retry_backoff_ms``.
The same task does the housekeeping: it closes connections to brokers that left the cluster and
connections idle for ``connections_max_idle_ms``, and forgets topics nobody used for
``metadata_max_idle_ms`` (telling ``on_topics_expired``).

Connection attempts follow ``nodes.NodeConnectionStates``: exponential reconnect backoff, and a
set-up bound (``socket_connection_setup_timeout_ms`` doubling per failed set-up up to
``socket_connection_setup_timeout_max_ms``). Requests any broker can answer (Metadata,
InitProducerId) go to ``nodes.least_loaded_node``'s choice through ``least_loaded_connection``,
which never waits on one node alone and is bounded by its timeout. docs/network.md has the rules.

The sender asks synchronously, without suspending: ``ready_connection(node)`` returns a live,
writable connection or starts connecting in the background and tells the sender, via
``on_change``, when it is worth looking again (connected, failed, or no longer write-paused).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokprod._backoff import ExponentialBackoff
from aiokprod._error_codes import ErrorCode
from aiokprod.errors import (
    AuthenticationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    RebootstrapRequiredError,
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
    merge_metadata_response,
)
from aiokprod.network.nodes import (
    Candidate,
    NodeConnectionStates,
    least_loaded_node,
    should_dial_another,
)
from aiokprod.network.security import SecurityOptions
from aiokprod.protocol import MetadataRequest, MetadataResponse

__all__ = ["Cluster", "ClusterStatistics", "parse_bootstrap"]

log = logging.getLogger(__name__)

# Errors on a topic that no amount of waiting fixes: fail the waiting send at once.
_FATAL_TOPIC_ERRORS = frozenset({ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 ErrorCode.TOPIC_AUTHORIZATION_FAILED})
# Errors on a topic that a later refresh may clear: keep refreshing while someone waits.
_WAIT_TOPIC_ERRORS = frozenset({UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE})
# How often housekeeping looks again at a link it could not close yet (requests in flight).
_RECHECK_S = 1.0


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


class _NodeLink:
    """One node's address, connection and attempt under way (backoff lives in ``_states``)."""

    __slots__ = ("address", "connecting", "connection", "last_error")

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address  # where the node listens; a change forces a reconnect
        self.connection: BrokerConnection | None = None  # live connection, if any
        self.connecting: asyncio.Task[BrokerConnection] | None = None  # attempt under way
        self.last_error: BaseException | None = None  # why the last attempt failed


class Cluster:
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
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms  # socket.connection.setup.timeout.ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.metadata_max_idle_ms = metadata_max_idle_ms
        self.connections_max_idle_ms = connections_max_idle_ms  # < 0: never close idle ones
        self._socket_buffers = (send_buffer_bytes, receive_buffer_bytes)
        # while every attempt under way is older than this, one more node may be dialled
        self._dial_stagger = dial_stagger_ms / 1000
        # metadata.recovery.strategy: "rebootstrap" forgets the known brokers for the
        # bootstrap servers when they all fail (KIP-899), when metadata kept failing for
        # metadata.recovery.rebootstrap.trigger.ms, or on REBOOTSTRAP_REQUIRED (KIP-1102);
        # "none" keeps dialling the brokers last known
        if metadata_recovery_strategy not in ("rebootstrap", "none"):
            raise ValueError(f"metadata_recovery_strategy must be rebootstrap or none, got "
                             f"{metadata_recovery_strategy!r}")
        self._rebootstrap = metadata_recovery_strategy == "rebootstrap"
        self.rebootstrap_trigger_ms = rebootstrap_trigger_ms
        self._connector = connector
        self._security = security
        # the latest TLS/SASL failure, until a connection authenticates: waiters fail with it
        # at once instead of waiting out max.block.ms (retrying cannot fix credentials)
        self._auth_error: AuthenticationError | None = None
        self._clock = clock
        self._states = NodeConnectionStates(
            ExponentialBackoff(reconnect_backoff_ms, reconnect_backoff_max_ms),
            ExponentialBackoff(connect_timeout_ms, connect_timeout_max_ms))
        # the current snapshot; replaced whole on every change (a plain attribute: send() reads it
        # per record)
        self.view = ClusterView({}, {})
        self._links: dict[int, _NodeLink] = {}
        # bootstrap servers act as nodes -1, -2, ... until metadata names the real ones; they stay
        # as the fallback when no known broker can be reached
        for i, addr in enumerate(self._bootstrap):
            self._links[-(i + 1)] = _NodeLink(addr)
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
        # set (and replaced) whenever a link connects, fails, closes or resumes writing
        self._links_changed = asyncio.Event()
        self._last_refresh = float("-inf")
        self._last_attempt = float("-inf")
        self._last_error: BaseException | None = None
        self._refreshes = 0
        self._failures = 0
        self._idle_closed = 0
        self._departed_closed = 0
        self._expired_topics = 0
        self._failed_connects = 0
        self._rebootstraps = 0
        # when the first metadata attempt since the last success started (None: the last one
        # succeeded); metadata.recovery.rebootstrap.trigger.ms counts from it, so a refresh
        # that is merely due never counts as failing (KIP-1102)
        self._failing_since: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # set by fail(): the producer is fatal and waiters must stop waiting
        self._fatal_error: BaseException | None = None
        # start offset of least_loaded_node's scan, advanced per call: ties rotate
        self._rotation = 0
        # called after a connection opens/closes/resumes or metadata changes: the sender looks
        self.on_change: list[Callable[[], None]] = []
        # called with the topics whose partition leaders moved (KIP-1269 resets its window),
        # including topics re-created under the same name (a new topic id)
        self.on_leaders_moved: list[Callable[[list[str]], None]] = []
        # called with the topics forgotten after metadata_max_idle_ms: prune per-topic state
        self.on_topics_expired: list[Callable[[list[str]], None]] = []
        # whether records of a topic are still queued: such a topic never expires
        self.topic_in_use: Callable[[str], bool] = lambda topic: False
        self.on_connection_latency: Callable[[int, int, float], None] | None = None

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
        self._signal_links()

    async def close(self) -> None:
        """Stop refreshing and close every connection; pending requests fail with the cause."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # wait without re-raising: a crash of the task was reported by its supervisor
            await asyncio.wait({task})
        for link in self._links.values():
            if link.connecting is not None:
                link.connecting.cancel()
                with contextlib.suppress(BaseException):
                    await link.connecting
            if link.connection is not None:
                link.connection.close(KafkaConnectionError(
                    f"[client {self.client_id}] connection closed: client is closing"))
        self._signal_waiters()
        self._signal_links()

    async def resolve_canonical_bootstrap(self) -> list[tuple[str, int]]:
        """client.dns.lookup=resolve_canonical_bootstrap_servers_only: replace each bootstrap
        host by the canonical names of all its addresses (Java resolves every address and takes
        ``getCanonicalHostName()``), e.g. so a Kerberos principal matches the broker's name.
        Call before ``start``; an address without a reverse name is kept as an address."""
        loop = asyncio.get_running_loop()
        resolved: list[tuple[str, int]] = []
        for host, port in self._bootstrap:
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                raise KafkaConnectionError(
                    f"[client {self.client_id}] cannot resolve bootstrap server {host}:{port} "
                    f"(client.dns.lookup=resolve_canonical_bootstrap_servers_only): {exc}"
                ) from exc
            for *_, address in infos:
                try:
                    name, _ = await loop.getnameinfo((str(address[0]), port), socket.NI_NAMEREQD)
                except OSError:
                    name = str(address[0])
                if (name, port) not in resolved:
                    resolved.append((name, port))
        for node_id in [n for n in self._links if n < 0]:
            del self._links[node_id]
        self._bootstrap = resolved
        for i, addr in enumerate(resolved):
            self._links[-(i + 1)] = _NodeLink(addr)
        return resolved

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
            if self._auth_error is not None:
                raise AuthenticationError(str(self._auth_error))
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
                                             else self._connect_errors() or "still connecting")
        elif code is not None:
            why = f"the broker answered {error_for_code(code).__name__}"
        else:
            why = "no metadata for it arrived yet"
        return (f"Topic {topic!r} not present in metadata after max.block.ms="
                f"{int(timeout_ms)}: {why}")

    def _connect_errors(self) -> str:
        """Each node's last connection failure, for messages: while a metadata request still
        waits for a connection, these say why none is up (refused, set-up timeout)."""
        return "; ".join(
            f"node {n} ({link.address[0]}:{link.address[1]}): {link.last_error}"
            for n, link in self._links.items()
            if link.last_error is not None
            and not isinstance(link.last_error, asyncio.CancelledError))

    def apply_leader_hint(self, tp: TopicPartition, leader: int, leader_epoch: int,
                          endpoints: Iterable[BrokerNode] = ()) -> bool:
        """KIP-951: a Produce response named the new leader; use it without a refresh."""
        view = self.view.with_leader(tp, leader, leader_epoch, endpoints)
        if view is None:
            return False
        self.view = view
        for b in endpoints:
            self._update_link_address(b)
        self._notify_leaders_moved([tp.topic])
        self._notify_change()
        return True

    async def refresh_now(self, timeout_ms: float) -> None:
        """Refresh once, bounded; used at start-up and by tests."""
        try:
            await asyncio.wait_for(self._refresh_once(), timeout_ms / 1000)
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
                await asyncio.wait_for(self._refresh_once(), self._attempt_bound(now))
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
                 ",".join(f"{h}:{p}" for h, p in self._bootstrap), reason)
        error = KafkaConnectionError(f"[client {self.client_id}] connection closed: "
                                     f"rebootstrapping ({reason})")
        for node_id, link in list(self._links.items()):
            if link.connecting is not None:
                link.connecting.cancel()
                link.connecting = None
            conn, link.connection = link.connection, None
            if conn is not None:
                conn.close(error)
            del self._links[node_id]
            self._states.remove(node_id)
        # fresh link objects: an attempt being cancelled above finds its link gone and leaves
        # the new one's backoff alone
        for i, addr in enumerate(self._bootstrap):
            self._links[-(i + 1)] = _NodeLink(addr)
        view = self.view
        self.view = ClusterView({}, view.topics, None, -1, view.topic_errors)
        self._rebootstraps += 1
        self._failing_since = self._clock()  # the bootstrap servers get a whole trigger period
        self.request_update()
        self._notify_change()
        self._signal_links()

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
            self._update_link_address(b)
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
        self._notify_change()
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

    def _signal_waiters(self) -> None:
        event, self._updated = self._updated, asyncio.Event()
        event.set()

    def _signal_links(self) -> None:
        event, self._links_changed = self._links_changed, asyncio.Event()
        event.set()

    def _notify_change(self) -> None:
        for cb in self.on_change:
            cb()

    def _notify_leaders_moved(self, topics: list[str]) -> None:
        for cb in self.on_leaders_moved:
            cb(topics)

    # ---- housekeeping ----------------------------------------------------------------------

    def housekeeping(self, now: float) -> float:
        """Close departed and idle links, expire unused topics; seconds until the next due.

        A link to a broker that left the cluster (absent from the latest metadata), or to a
        bootstrap server once real brokers are known, is closed as soon as nothing is in flight
        on it; any link idle for connections.max.idle.ms is closed too (Java's Selector does
        the same). Bootstrap links keep their address as the fallback for later.
        """
        next_due = float("inf")
        brokers = self.view.brokers
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
                    self._departed_closed += 1
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
                self._idle_closed += 1
            else:
                next_due = min(next_due, idle_limit - idle)
        self._expire_topics(now)
        topic_limit = self.metadata_max_idle_ms / 1000
        for topic, used in self._topics.items():
            if topic not in self._waiters:  # a waiter keeps its topic; it re-checks itself
                next_due = min(next_due, used + topic_limit - now)
        return max(next_due, 0.01)

    # ---- connections -----------------------------------------------------------------------

    def _update_link_address(self, node: BrokerNode) -> None:
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
            self.request_update()
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
            self._check_usable()
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
            self._check_usable()
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
            if self._auth_error is not None:
                # the last attempt was refused on credentials or certificate; the next dial
                # waits for its backoff, so say why now rather than at the deadline
                raise AuthenticationError(str(self._auth_error))
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
        brokers = [n for n in self._links if n >= 0 and n in self.view.brokers]
        found = [self._candidate(n, now) for n in brokers]
        if found:
            if any(c.ready or c.connecting or c.can_connect for c in found) or any(
                    self._links[c.node_id].connection is not None for c in found) or \
                    not self._rebootstrap:
                return found  # a write-paused connection still counts: it resumes
            self.rebootstrap("no known broker can be reached: " + "; ".join(
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

    def _check_usable(self) -> None:
        if self._fatal_error is not None:
            raise self._fatal_error
        if self._closed:
            raise KafkaConnectionError(f"[client {self.client_id}] client is closed")

    async def _wait_links_changed(self, timeout: float) -> None:
        event = self._links_changed
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), max(0.0, timeout))

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
                connector=self._connector, security=self._security, clock=self._clock)
        except BaseException as exc:
            if link.connecting is asyncio.current_task():
                link.connecting = None
            link.last_error = exc
            if self._links.get(node_id) is link:  # not dropped meanwhile (broker left)
                self._states.disconnected(node_id, self._clock())
            if isinstance(exc, AuthenticationError):
                log.error("%s", exc)  # names the client, the broker and the cause
                self._auth_error = exc
                self._signal_waiters()
            if not isinstance(exc, asyncio.CancelledError):
                self._failed_connects += 1
                log.debug("[client %s] node %d (%s:%d): connect failed (attempt %d): %s",
                          self.client_id, node_id, host, port,
                          self._states.failed_attempts(node_id), exc)
                self.request_update()
                self._notify_change()
            self._signal_links()
            raise
        link.connecting = None
        if self._closed or self._links.get(node_id) is not link:
            conn.close(KafkaConnectionError(
                f"[client {self.client_id}] node {node_id}: link dropped while connecting"))
            raise KafkaConnectionError(f"[client {self.client_id}] node {node_id} link dropped")
        link.connection = conn
        link.last_error = None
        self._auth_error = None
        self._states.ready(node_id)
        if self.on_connection_latency is not None:
            hook = self.on_connection_latency
            conn.on_latency = lambda api, secs: hook(node_id, api, secs)
        conn.on_writable = self._on_writable
        conn.on_close = lambda: self._on_connection_closed(node_id, link, conn)
        self._housekeeping_requested.set()  # its idle deadline may come before the next pass
        log.debug("[client %s] connected to node %d (%s:%d)", self.client_id, node_id, host, port)
        self._notify_change()
        self._signal_links()
        return conn

    def _on_writable(self) -> None:
        self._notify_change()
        self._signal_links()

    def _on_connection_closed(self, node_id: int, link: _NodeLink,
                              conn: BrokerConnection) -> None:
        if link.connection is conn:  # not one we closed on purpose (those are unlinked first)
            self._on_disconnect(node_id, link, conn)
            self._notify_change()
        self._signal_links()

    def _on_disconnect(self, node_id: int, link: _NodeLink, conn: BrokerConnection) -> None:
        link.connection = None
        link.last_error = conn.closed_cause
        self._states.disconnected(node_id, self._clock())
        log.debug("[client %s] node %d disconnected: %s", self.client_id, node_id,
                  conn.closed_cause)
        self.request_update()  # a lost broker often means leaders moved

    def node_error(self, node_id: int) -> BaseException | None:
        link = self._links.get(node_id)
        return None if link is None else link.last_error

    def links(self) -> dict[int, tuple[str, int]]:
        """node id -> address of every link (bootstrap servers are negative): for tests."""
        return {n: link.address for n, link in self._links.items()}

    def tracked_topics(self) -> dict[str, float]:
        """topic -> when it was last used; what the next Metadata request asks for."""
        return dict(self._topics)

    # ---- introspection ---------------------------------------------------------------------

    def statistics(self) -> ClusterStatistics:
        return ClusterStatistics(
            known_brokers=len(self.view.brokers),
            connections=sum(1 for x in self._links.values()
                            if x.connection is not None and x.connection.connected),
            connecting=sum(1 for x in self._links.values() if x.connecting is not None),
            tracked_topics=len(self._topics),
            metadata_refreshes=self._refreshes,
            metadata_failures=self._failures,
            metadata_age_s=self.metadata_age(),
            idle_closed=self._idle_closed,
            departed_closed=self._departed_closed,
            expired_topics=self._expired_topics,
            failed_connects=self._failed_connects,
            rebootstraps=self._rebootstraps,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"<Cluster client={self.client_id} brokers={s.known_brokers} "
                f"connections={s.connections} topics={s.tracked_topics} "
                f"refreshes={s.metadata_refreshes}>")


def _retrieve_exception(task: asyncio.Task[Any]) -> None:
    """Connect attempts nobody awaits report through ``node_error``, not as unhandled errors."""
    if not task.cancelled():
        task.exception()
