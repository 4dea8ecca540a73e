"""The metadata task: the loop ``Cluster.start()`` runs, and what each of its turns does.

Apart from ``cluster.py`` because the two have different readers: ``cluster.py`` is what callers
use (the view, tracking and waiting for topics, leader hints, the pool's connections passed
through); this is the one background task behind it, whose timing rules (``metadata_max_age_ms``,
``retry_backoff_ms``, the rebootstrap trigger, the housekeeping deadlines) are read together. It
keeps the view fresh, starts over from the bootstrap servers when it cannot (KIP-899, KIP-1102),
and forgets what went unused.

A mixin, as ``producer/send_path.py`` is: ``Cluster`` inherits these methods, and the state
they read and write, declared below for the type checker, is created (and commented) in
``Cluster.__init__``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    RebootstrapRequiredError,
    error_for_code,
)
from aiokprod.network.metadata import (
    UNKNOWN_TOPIC_OR_PARTITION,
    ClusterView,
    merge_metadata_response,
)
from aiokprod.network.pool import ConnectionPool
from aiokprod.protocol import MetadataRequest, MetadataResponse

if TYPE_CHECKING:
    from aiokprod.network.connection import BrokerConnection

__all__ = ["MetadataRefresh"]

# the Cluster's logger: its messages keep the name logging configurations select
log = logging.getLogger("aiokprod.network.cluster")

# Errors on a topic that a later refresh may clear: keep refreshing while someone waits.
_WAIT_TOPIC_ERRORS = frozenset({UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE})


class MetadataRefresh:
    """The metadata task's turns, as methods of ``Cluster``; see the module docstring."""

    # Cluster's state, as the metadata task uses it (set by Cluster.__init__)
    client_id: str
    request_timeout_ms: int
    retry_backoff_ms: int
    metadata_max_age_ms: int
    metadata_max_idle_ms: int
    rebootstrap_trigger_ms: int
    _rebootstrap: bool
    _clock: Callable[[], float]
    view: ClusterView
    pool: ConnectionPool
    _topics: dict[str, float]
    _waiters: dict[str, int]
    _update_requested: asyncio.Event
    _housekeeping_requested: asyncio.Event
    _last_refresh: float
    _last_attempt: float
    _last_error: BaseException | None
    _refreshes: int
    _failures: int
    _expired_topics: int
    _rebootstraps: int
    _failing_since: float | None
    _closed: bool
    on_topics_expired: list[Callable[[list[str]], None]]
    topic_in_use: Callable[[str], bool]

    if TYPE_CHECKING:  # Cluster's, which it defines beside these
        def request_update(self) -> None: ...
        def notify_change(self) -> None: ...
        def _signal_waiters(self) -> None: ...
        def _notify_leaders_moved(self, topics: list[str]) -> None: ...
        async def least_loaded_connection(self, timeout_ms: float) -> BrokerConnection: ...

    # ---- refreshing ------------------------------------------------------------------------

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
