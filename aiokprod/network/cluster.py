"""The client's view of the cluster: connections per node and metadata kept fresh.

``Cluster`` owns one ``BrokerConnection`` per node, reconnecting with exponential backoff
(``reconnect_backoff_ms`` → ``reconnect_backoff_max_ms``), and one background task that refreshes
metadata every ``metadata_max_age_ms`` or as soon as someone asks (a send to a new topic, a
NOT_LEADER_OR_FOLLOWER answer, a lost connection), never more often than ``retry_backoff_ms``.

The sender asks synchronously, without suspending: ``ready_connection(node)`` returns a live
connection or starts connecting in the background and tells the sender, via ``on_change``,
when it is worth looking again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokprod._backoff import ExponentialBackoff
from aiokprod.config import parse_bootstrap_servers
from aiokprod.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    error_for_code,
)
from aiokprod.network.connection import BrokerConnection
from aiokprod.network.metadata import (
    UNKNOWN_TOPIC_OR_PARTITION,
    BrokerNode,
    ClusterView,
    TopicMetadata,
    TopicPartition,
    merge_metadata_response,
)
from aiokprod.protocol import MetadataRequest

__all__ = ["Cluster", "ClusterStatistics", "parse_bootstrap"]

log = logging.getLogger(__name__)

# Errors on a topic that no amount of waiting fixes: fail the waiting send at once.
_FATAL_TOPIC_ERRORS = frozenset({17, 29})  # INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED
# Errors on a topic that a later refresh may clear: keep refreshing while someone waits.
_WAIT_TOPIC_ERRORS = frozenset({UNKNOWN_TOPIC_OR_PARTITION, 5})  # ..., LEADER_NOT_AVAILABLE


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """'h1:9092,h2:9093' or ['h1:9092'] → [(host, port)]; validated by the config's parser
    (a ``ConfigError``, i.e. a ``ValueError``, naming bootstrap.servers on junk)."""
    result: list[tuple[str, int]] = []
    for entry in parse_bootstrap_servers(servers):
        host, _, port = entry.rpartition(":")
        result.append((host.strip("[]"), int(port)))
    return result


@dataclass(frozen=True)
class ClusterStatistics:
    known_brokers: int
    connections: int
    connecting: int
    tracked_topics: int
    metadata_refreshes: int
    metadata_failures: int
    metadata_age_s: float


class _NodeLink:
    """Connection state of one node, including its reconnect backoff."""

    __slots__ = ("address", "attempts", "connecting", "connection", "last_error",
                 "next_attempt_at")

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address  # where the node listens; a change forces a reconnect
        self.connection: BrokerConnection | None = None  # live connection, if any
        self.connecting: asyncio.Task[BrokerConnection] | None = None  # attempt under way
        self.attempts = 0  # consecutive failed attempts: the backoff exponent
        self.next_attempt_at = 0.0  # monotonic time before which we do not dial again
        self.last_error: BaseException | None = None  # why the last attempt failed


class Cluster:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "aiokprod",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self._clock = clock
        self._reconnect_backoff = ExponentialBackoff(reconnect_backoff_ms,
                                                     reconnect_backoff_max_ms)
        # the current snapshot; replaced whole on every change (a plain attribute: send() reads it
        # per record)
        self.view = ClusterView({}, {})
        self._links: dict[int, _NodeLink] = {}
        # bootstrap servers act as nodes -1, -2, ... until metadata names the real ones
        for i, addr in enumerate(self._bootstrap):
            self._links[-(i + 1)] = _NodeLink(addr)
        self._topics: set[str] = set()
        self._update_requested = asyncio.Event()
        # set (and replaced) whenever metadata changes or a refresh fails: waiters re-check
        self._updated = asyncio.Event()
        self._last_refresh = float("-inf")
        self._last_attempt = float("-inf")
        self._last_error: BaseException | None = None
        self._refreshes = 0
        self._failures = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # set by fail(): the producer is fatal and waiters must stop waiting
        self._fatal_error: BaseException | None = None
        self._bootstrap_cursor = 0
        # called after a connection opens/closes or metadata changes: the sender re-checks
        self.on_change: list[Callable[[], None]] = []
        # called with the topics whose partition leaders moved (KIP-1269 resets its window)
        self.on_leaders_moved: list[Callable[[list[str]], None]] = []
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

    # ---- metadata --------------------------------------------------------------------------

    def topic(self, name: str) -> TopicMetadata | None:
        return self.view.topics.get(name)

    def add_topic(self, topic: str) -> None:
        if topic not in self._topics:
            self._topics.add(topic)
            self.request_update()

    def request_update(self) -> None:
        """Ask for a refresh soon (respecting retry_backoff_ms); never blocks."""
        self._update_requested.set()

    def metadata_age(self) -> float:
        return self._clock() - self._last_refresh

    async def wait_for_topic(self, topic: str, timeout_ms: float) -> TopicMetadata:
        """Metadata for ``topic``, waiting at most ``timeout_ms`` (the caller's max.block.ms)."""
        meta = self.view.topics.get(topic)
        if meta is not None and meta.partition_ids:
            return meta
        self.add_topic(topic)
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
            code = self.view.topic_errors.get(topic)
            if code is not None and code in _FATAL_TOPIC_ERRORS:
                err = error_for_code(code)
                raise err(f"topic {topic!r}: {err.message}")
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise KafkaTimeoutError(self._missing_topic_message(topic, timeout_ms))
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
                                             else "still connecting")
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
            self._update_link_address(b)
        self._notify_leaders_moved([tp.topic])
        self._notify_change()
        return True

    async def refresh_now(self, timeout_ms: float) -> None:
        """Refresh once, bounded; used at start-up and by tests."""
        await asyncio.wait_for(self._refresh_once(), timeout_ms / 1000)

    async def _refresh_loop(self) -> None:
        while not self._closed:
            max_age = self.metadata_max_age_ms / 1000
            wait = max(0.0, self._last_refresh + max_age - self._clock())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._update_requested.wait(), wait)
            # never hammer the cluster: at most one attempt per retry_backoff_ms
            since = self._clock() - self._last_attempt
            backoff = self.retry_backoff_ms / 1000
            if since < backoff:
                await asyncio.sleep(backoff - since)
            self._update_requested.clear()
            self._last_attempt = self._clock()
            try:
                await asyncio.wait_for(self._refresh_once(), self.request_timeout_ms / 1000)
            except (KafkaError, OSError, asyncio.TimeoutError) as exc:
                self._failures += 1
                self._last_error = exc
                log.debug("[client %s] metadata refresh failed: %s", self.client_id, exc)
                self._update_requested.set()  # try again after the backoff
                self._signal_waiters()

    async def _refresh_once(self) -> None:
        conn = await self.any_connection()
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
        self._apply_metadata(response)

    def _apply_metadata(self, response: Any) -> None:
        view, moved = merge_metadata_response(self.view, response)
        self.view = view
        for b in view.brokers.values():
            self._update_link_address(b)
        self._refreshes += 1
        self._last_refresh = self._clock()
        self._last_error = None
        if any(code in _WAIT_TOPIC_ERRORS for code in view.topic_errors.values()):
            self._update_requested.set()  # keep looking while someone waits for the topic
        if moved:
            self._notify_leaders_moved(moved)
        self._notify_change()
        self._signal_waiters()

    def _signal_waiters(self) -> None:
        event, self._updated = self._updated, asyncio.Event()
        event.set()

    def _notify_change(self) -> None:
        for cb in self.on_change:
            cb()

    def _notify_leaders_moved(self, topics: list[str]) -> None:
        for cb in self.on_leaders_moved:
            cb(topics)

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
                link.connection.close()
                link.connection = None

    def ready_connection(self, node_id: int) -> BrokerConnection | None:
        """A live connection to ``node_id`` now, or None (then connecting or backing off).

        Never suspends: the sender calls it on every wake-up.
        """
        link = self._links.get(node_id)
        if link is None:
            return None
        conn = link.connection
        if conn is not None:
            if conn.connected:
                return conn
            self._on_disconnect(node_id, link, conn.closed_cause)
        if link.connecting is None and self._clock() >= link.next_attempt_at and not self._closed:
            task = asyncio.get_running_loop().create_task(
                self._connect(node_id, link), name=f"aiokprod-connect[{node_id}]")
            task.add_done_callback(_retrieve_exception)
            link.connecting = task
        return None

    def connection_delay(self, node_id: int) -> float:
        """Seconds until a connection attempt to ``node_id`` may start (0 if now)."""
        link = self._links.get(node_id)
        if link is None or link.connection is not None or link.connecting is not None:
            return 0.0
        return max(0.0, link.next_attempt_at - self._clock())

    def is_connecting(self, node_id: int) -> bool:
        link = self._links.get(node_id)
        return link is not None and link.connecting is not None

    async def connection(self, node_id: int) -> BrokerConnection:
        """A connection to ``node_id``, connecting if needed (honours the reconnect backoff)."""
        link = self._links.get(node_id)
        if link is None:
            raise KafkaConnectionError(f"[client {self.client_id}] unknown node {node_id}")
        while True:
            conn = self.ready_connection(node_id)
            if conn is not None:
                return conn
            if link.connecting is not None:
                try:
                    return await asyncio.shield(link.connecting)
                except KafkaError:
                    if self._closed:
                        raise
                    continue
            if self._closed:
                raise KafkaConnectionError(f"[client {self.client_id}] client is closed")
            await asyncio.sleep(self.connection_delay(node_id))

    async def any_connection(self) -> BrokerConnection:
        """The least loaded live connection, else the next node in rotation (leastLoadedNode)."""
        live = [link.connection for link in self._links.values()
                if link.connection is not None and link.connection.connected]
        if live:
            return min(live, key=lambda c: c.in_flight)
        candidates = [n for n in self._links if n >= 0] or list(self._links)
        # rotate so one dead bootstrap server does not block the others
        order = candidates[self._bootstrap_cursor % len(candidates):] + \
            candidates[:self._bootstrap_cursor % len(candidates)]
        self._bootstrap_cursor += 1
        ready = [n for n in order if self.connection_delay(n) == 0] or order
        return await self.connection(ready[0])

    async def _connect(self, node_id: int, link: _NodeLink) -> BrokerConnection:
        host, port = link.address
        try:
            conn = await BrokerConnection.open(
                host, port, node_id=node_id, client_id=self.client_id,
                request_timeout_ms=self.request_timeout_ms,
                connect_timeout_ms=self.connect_timeout_ms, clock=self._clock)
        except BaseException as exc:
            link.connecting = None
            link.last_error = exc
            link.next_attempt_at = self._clock() + \
                self._reconnect_backoff.backoff_ms(link.attempts) / 1000
            link.attempts += 1
            log.debug("[client %s] node %d (%s:%d): connect failed (attempt %d): %s",
                      self.client_id, node_id, host, port, link.attempts, exc)
            if not isinstance(exc, asyncio.CancelledError):
                self.request_update()
                self._notify_change()
            raise
        link.connecting = None
        link.connection = conn
        link.attempts = 0
        link.last_error = None
        if self.on_connection_latency is not None:
            hook = self.on_connection_latency
            conn.on_latency = lambda api, secs: hook(node_id, api, secs)
        log.debug("[client %s] connected to node %d (%s:%d)", self.client_id, node_id, host, port)
        self._notify_change()
        return conn

    def _on_disconnect(self, node_id: int, link: _NodeLink, cause: BaseException | None) -> None:
        link.connection = None
        link.last_error = cause
        link.next_attempt_at = self._clock() + \
            self._reconnect_backoff.backoff_ms(link.attempts) / 1000
        link.attempts += 1
        log.debug("[client %s] node %d disconnected: %s", self.client_id, node_id, cause)
        self.request_update()  # a lost broker often means leaders moved

    def node_error(self, node_id: int) -> BaseException | None:
        link = self._links.get(node_id)
        return None if link is None else link.last_error

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
