"""The KIP-714 exchange with the broker: GetTelemetrySubscriptions, then PushTelemetry.

One supervised background task follows ``TelemetrySchedule``: when a request is due it takes a
connection the producer already has (``Cluster.any_ready_connection``; telemetry never opens
one of its own, so an idle producer stays unconnected), sends the request bounded by
``request_timeout_ms`` and feeds the answer back. ``close()`` stops the task and sends the
terminating push, bounded by what is left of the producer's close timeout.

Telemetry is best-effort: a broker without the APIs, a timeout or a refused push only changes
the schedule (see ``subscription``), and an unexpected error while building a push turns
telemetry off with one logged error instead of making the producer fatal — the records being
sent matter more than the metrics about them.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from aiokprod._sensors import MetricsRegistry
from aiokprod._version import __version__
from aiokprod._waits import wait_event, wait_within
from aiokprod.errors import KafkaError
from aiokprod.network.cluster import Cluster
from aiokprod.network.connection import BrokerConnection
from aiokprod.protocol import (
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
)
from aiokprod.protocol.primitives import ZERO_UUID
from aiokprod.records import CompressionType
from aiokprod.records.compression import compress
from aiokprod.telemetry.collector import TelemetryCollector
from aiokprod.telemetry.otlp import encode_metrics_data
from aiokprod.telemetry.subscription import (
    Subscription,
    TelemetrySchedule,
    TelemetryState,
    accepted_types,
)

__all__ = ["ClientTelemetry"]

log = logging.getLogger(__name__)

_SCOPE = "aiokprod"
# With no connection to ride on, look again when one comes up or after this long.
_NO_CONNECTION_WAIT_MS = 30_000.0


class ClientTelemetry:
    """Pushes the producer's metrics as the broker's client-metrics subscription asks."""

    def __init__(self, *, cluster: Cluster, registry: MetricsRegistry, client_id: str,
                 request_timeout_ms: int, resource: Sequence[tuple[str, str]] = (),
                 clock: Callable[[], float] = time.monotonic,
                 schedule: TelemetrySchedule | None = None,
                 collector: TelemetryCollector | None = None) -> None:
        self._cluster = cluster
        self._client_id = client_id  # for log lines
        self._request_timeout_ms = request_timeout_ms  # bounds each request
        self._resource = tuple(resource)  # OTLP resource attributes (transactional_id)
        self.schedule = schedule or TelemetrySchedule(clock=clock)
        self._collector = collector or TelemetryCollector(registry)
        self._task: asyncio.Task[Any] | None = None  # the background loop while it runs
        # set by the cluster's on_change (a connection came up, or became writable again);
        # only the wait for a connection listens to it. Waiting for a request's time it is
        # ignored: on_change fires on every drained write, and waking there would cost a
        # loop turn and a task per large request for nothing (close() cancels the task)
        self._wake = asyncio.Event()
        self.last_push_bytes = 0  # size of the last payload sent (after compression)

    @property
    def client_instance_id(self) -> str | None:
        """The id the broker assigned this producer (KIP-714), once it has; None before. In
        Kafka's own spelling of a Uuid (URL-safe base64, no padding), as broker logs and
        telemetry plugins show it."""
        cid = self.schedule.client_instance_id
        return None if cid is None else \
            base64.urlsafe_b64encode(cid.bytes).rstrip(b"=").decode("ascii")

    def start(self, spawn: Callable[[Coroutine[Any, Any, None], str], asyncio.Task[Any]]
              ) -> None:
        self._cluster.on_change.append(self._wake.set)
        self._task = spawn(self._run(), "telemetry")

    async def _run(self) -> None:
        schedule = self.schedule
        while True:
            delay = schedule.time_to_next()
            if math.isinf(delay):
                return  # disabled, or terminating: nothing will be due again
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            conn = self._cluster.any_ready_connection()
            if conn is None:
                # woken by the cluster's on_change when a connection comes up (or at close)
                self._wake.clear()
                await wait_event(self._wake, _NO_CONNECTION_WAIT_MS / 1000)
                continue
            try:
                await self._exchange(conn, self._request_timeout_ms)
            except Exception:
                log.exception("[client %s] telemetry: unexpected error; metrics push is off "
                              "for this producer", self._client_id)
                schedule.disable()
                return

    async def _exchange(self, conn: BrokerConnection, timeout_ms: int) -> None:
        """Send the request that is due and apply its answer."""
        schedule = self.schedule
        state = schedule.begin_request()
        try:
            if state is TelemetryState.SUBSCRIPTION_IN_PROGRESS:
                await self._subscribe(conn, timeout_ms)
            else:
                await self._push(conn, timeout_ms,
                                 terminating=state is TelemetryState.TERMINATING_PUSH_IN_PROGRESS)
        except KafkaError as exc:  # timeout, lost connection, no such API on this broker
            log.debug("[client %s] telemetry: %s to %r failed: %s", self._client_id,
                      state.name, conn, exc)
            schedule.on_request_failed()

    async def _subscribe(self, conn: BrokerConnection, timeout_ms: int) -> None:
        schedule = self.schedule
        held = schedule.subscription
        request = GetTelemetrySubscriptionsRequest(
            client_instance_id=held.client_instance_id if held else ZERO_UUID)
        response = await conn.request(request, timeout_ms=timeout_ms)
        if response.error_code:
            log.debug("[client %s] telemetry: GetTelemetrySubscriptions error %d",
                      self._client_id, response.error_code)
            schedule.on_subscription(response.error_code, None)
            return
        instance = held.client_instance_id if held else response.client_instance_id
        if instance == ZERO_UUID:
            instance = response.client_instance_id
        sub = Subscription(
            client_instance_id=instance,
            subscription_id=response.subscription_id,
            push_interval_ms=response.push_interval_ms if response.push_interval_ms > 0
            else 300_000,
            accepted_compression_types=accepted_types(response.accepted_compression_types),
            telemetry_max_bytes=response.telemetry_max_bytes,
            delta_temporality=response.delta_temporality,
            requested_metrics=tuple(response.requested_metrics))
        if held is not None and held.delta_temporality != sub.delta_temporality:
            self._collector.reset()
        if held is None:
            log.info("[client %s] telemetry: client instance id %s", self._client_id, instance)
        schedule.on_subscription(0, sub)

    def payload(self, sub: Subscription) -> tuple[CompressionType, bytes]:
        """The OTLP payload of the metrics ``sub`` selects, compressed with the broker's most
        preferred codec we have (uncompressed if none works: NONE is always accepted)."""
        metrics = self._collector.collect(sub.selects, delta=sub.delta_temporality)
        data = encode_metrics_data(metrics, resource=self._resource, scope_name=_SCOPE,
                                   scope_version=__version__)
        for codec in sub.accepted_compression_types:
            if codec is CompressionType.NONE:
                break
            try:
                return codec, compress(codec, data)
            except Exception as exc:  # a codec whose library is missing: try the next one
                log.debug("telemetry: %s compression failed: %r", codec.kafka_name, exc)
        return CompressionType.NONE, data

    async def _push(self, conn: BrokerConnection, timeout_ms: int, *, terminating: bool) -> None:
        schedule = self.schedule
        sub = schedule.subscription
        assert sub is not None  # PUSH_NEEDED is reached only with a subscription
        codec, data = self.payload(sub)
        if len(data) > sub.telemetry_max_bytes > 0:
            log.warning("[client %s] telemetry: payload of %d bytes exceeds the broker's "
                        "telemetry max bytes %d", self._client_id, len(data),
                        sub.telemetry_max_bytes)
        self.last_push_bytes = len(data)
        response = await conn.request(PushTelemetryRequest(
            client_instance_id=sub.client_instance_id, subscription_id=sub.subscription_id,
            terminating=terminating, compression_type=int(codec), metrics=data),
            timeout_ms=timeout_ms)
        if response.error_code:
            log.debug("[client %s] telemetry: PushTelemetry error %d", self._client_id,
                      response.error_code)
        schedule.on_push(response.error_code)

    async def close(self, timeout: float) -> None:
        """Stop the loop and send the terminating push, all within ``timeout`` seconds.

        The push rides on a connection still open (none is dialled while closing) and is
        skipped when no subscription with metrics is held. Never raises a broker's error.
        """
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        schedule = self.schedule
        try:
            if not schedule.initiate_close():
                return
            conn = self._cluster.any_ready_connection()
            if conn is None or timeout <= 0:
                return
            bound_ms = max(1, min(self._request_timeout_ms, int(timeout * 1000)))
            try:
                await wait_within(self._exchange(conn, bound_ms), timeout)
            except asyncio.TimeoutError:
                log.debug("[client %s] telemetry: terminating push not answered within %.3f s "
                          "(the close timeout)", self._client_id, timeout)
            except Exception:  # building the payload failed: closing goes on regardless
                log.exception("[client %s] telemetry: terminating push failed", self._client_id)
        finally:
            schedule.terminate()

    def stop(self) -> None:
        """Closing was cut short: no terminating push, just end (idempotent)."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
        self.schedule.terminate()

    def __repr__(self) -> str:
        return f"ClientTelemetry({self.schedule!r}, last_push_bytes={self.last_push_bytes})"
