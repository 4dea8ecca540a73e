"""A fault-injecting, Kafka-aware TCP proxy for tests: one broker behind one loopback port.

Why: the failures an idempotent producer exists for — a response lost after the broker
appended the batch, a response slower than request.timeout.ms, a connection reset mid-flight
— do not happen on loopback by themselves, and a mock broker cannot prove a *real* broker's
log ends up without duplicates. So the broker is started advertising this proxy's port
(``tansu_behind_proxy``), every client connection crosses the proxy, and a ``FaultPlan``
(``support.faults``) decides which frames to drop, hold, rewrite or reset.

The proxy understands Kafka framing (4-byte big-endian size, then the frame) in both
directions and remembers, per connection, which (api key, version) each correlation id was
sent with, so it knows which response answers which request. Frames are forwarded verbatim
unless a rewrite rule re-encodes a Produce response (same version, same header bytes).

Per connection there are three tasks: one reads requests from the client and forwards them,
one reads responses from the broker and queues them with a release time (arrival + rtt +
stall), and one delivers the queue in order — so added latency and stalls never reorder
responses, exactly as a slow broker would not.

Two ways to run it: ``KafkaProxy`` on the caller's event loop (``async with``), or
``ProxyThread`` — the same proxy on its own loop in its own thread, for tests whose client is
synchronous (confluent-kafka) or whose producer must not share a loop with its own faults.
Internal errors (e.g. a rewrite hook that raises) never pass silently: they are counted in
``statistics().errors`` and re-raised as ``ProxyError`` when the proxy is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any

from aiokprod.devbroker import TansuBroker
from aiokprod.protocol import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ProduceRequest,
    ProduceResponse,
    decode_response_header,
)
from support.faults import PRODUCE_API_KEY, FaultPlan, ResponseDecision

__all__ = [
    "KafkaProxy",
    "ProxyError",
    "ProxyStatistics",
    "ProxyThread",
    "set_batches_to_retain",
    "tansu_behind_proxy",
]

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_API_VERSION = struct.Struct(">h")  # a request header's api_version (bytes 2-3 of the frame)
# KIP-1269: Produce v14 is v13 on the wire for the request; the response adds a tagged field
_PRODUCE_V14 = 14
_PRODUCE_V13 = 13
_REQUEST_HEADER_START = struct.Struct(">hhi")  # api_key, api_version, correlation_id
# A frame bigger than this is a framing bug (or garbage), not a Kafka message.
_MAX_FRAME = 256 * 1024 * 1024
# SO_LINGER on, timeout 0: close() sends RST instead of FIN — what "connection reset" means.
_LINGER_RESET = struct.pack("ii", 1, 0)


class ProxyError(RuntimeError):
    """The proxy itself failed (bad frame, raising rewrite hook, stop not finished in time)."""


@dataclass(frozen=True)
class ProxyStatistics:
    """A consistent snapshot of the proxy's counters; tests assert on these."""

    # Client connections accepted (whether or not the broker could be reached).
    connections_accepted: int
    # Client connections currently paired with a broker connection.
    connections_open: int
    # Connections aborted with RST (reset rules and reset_connections()).
    connections_reset: int
    # Connections closed because a Produce response was dropped.
    connections_closed_after_drop: int
    # Client connections closed at once because the broker could not be reached.
    upstream_connect_failures: int
    # Requests seen from clients, by API key (including ones a reset rule swallowed).
    requests_by_api_key: Mapping[int, int]
    # Responses seen from the broker, by the API key of the request they answer.
    responses_by_api_key: Mapping[int, int]
    # Produce responses by the version the client asked for (what it negotiated).
    produce_versions: Mapping[int, int]
    # Produce requests with acks=0, for which no response is expected or tracked.
    produce_requests_without_response: int
    # Produce requests not forwarded because a reset rule hit them.
    produce_requests_reset: int
    # Produce requests kept from the broker and answered with an error by a refuse rule.
    produce_requests_refused: int
    produce_responses_dropped: int
    produce_responses_rewritten: int
    produce_responses_stalled: int
    # Stalled responses of every API (Produce included).
    responses_stalled: int
    # Responses whose correlation id matched no tracked request (forwarded as they are).
    responses_unmatched: int
    # Requests forwarded whose response has not arrived yet, over open connections.
    responses_awaited: int
    # Responses received and queued but not yet delivered (rtt, stalls), over open connections.
    responses_queued: int
    # Internal failures, oldest first; non-empty means the test's setup is broken.
    errors: tuple[str, ...]

    @property
    def produce_requests(self) -> int:
        return self.requests_by_api_key.get(PRODUCE_API_KEY, 0)

    @property
    def produce_responses(self) -> int:
        return self.responses_by_api_key.get(PRODUCE_API_KEY, 0)


class _Counters:
    """Counts kept incrementally under a lock: the proxy thread writes, the test thread reads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connections_accepted = 0
        self.connections_open = 0
        self.connections_reset = 0
        self.connections_closed_after_drop = 0
        self.upstream_connect_failures = 0
        self.requests: Counter[int] = Counter()
        self.responses: Counter[int] = Counter()
        self.produce_versions: Counter[int] = Counter()
        self.produce_requests_without_response = 0
        self.produce_requests_reset = 0
        self.produce_requests_refused = 0
        self.produce_responses_dropped = 0
        self.produce_responses_rewritten = 0
        self.produce_responses_stalled = 0
        self.responses_stalled = 0
        self.responses_unmatched = 0
        self.responses_awaited = 0
        self.responses_queued = 0
        self.errors: list[str] = []

    def add(self, name: str, amount: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + amount)

    def snapshot(self) -> ProxyStatistics:
        with self.lock:
            return ProxyStatistics(
                connections_accepted=self.connections_accepted,
                connections_open=self.connections_open,
                connections_reset=self.connections_reset,
                connections_closed_after_drop=self.connections_closed_after_drop,
                upstream_connect_failures=self.upstream_connect_failures,
                requests_by_api_key=MappingProxyType(dict(self.requests)),
                responses_by_api_key=MappingProxyType(dict(self.responses)),
                produce_versions=MappingProxyType(dict(self.produce_versions)),
                produce_requests_without_response=self.produce_requests_without_response,
                produce_requests_reset=self.produce_requests_reset,
                produce_requests_refused=self.produce_requests_refused,
                produce_responses_dropped=self.produce_responses_dropped,
                produce_responses_rewritten=self.produce_responses_rewritten,
                produce_responses_stalled=self.produce_responses_stalled,
                responses_stalled=self.responses_stalled,
                responses_unmatched=self.responses_unmatched,
                responses_awaited=self.responses_awaited,
                responses_queued=self.responses_queued,
                errors=tuple(self.errors),
            )


# -- frame parsing ---------------------------------------------------------------------------


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One frame without its size prefix; None on a clean EOF between frames."""
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    (size,) = _SIZE.unpack(prefix)
    if not 0 <= size <= _MAX_FRAME:
        raise ProxyError(f"implausible frame size {size}")
    return await reader.readexactly(size)


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varint at ``pos``: (value, position after it)."""
    value = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProxyError("varint longer than 5 bytes")


def _skip_tagged_fields(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def _produce_body_start(frame: bytes, version: int) -> int:
    """Where a Produce request frame's body starts: after its header (v1, or v2 with tags)."""
    pos = _REQUEST_HEADER_START.size
    (client_id_size,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + max(0, client_id_size)
    if ProduceRequest.header_version(version) >= 2:
        pos = _skip_tagged_fields(frame, pos)
    return pos


def _produce_acks(frame: bytes, version: int) -> int:
    """The acks of a Produce request frame, read without decoding its records.

    Needed because acks=0 requests get no response: tracking them would leave correlation
    ids waiting forever and make ``responses_awaited`` lie.
    """
    pos = _produce_body_start(frame, version)
    flexible = ProduceRequest.header_version(version) >= 2
    if version >= 3:  # transactional_id comes before acks
        if flexible:
            size_plus_one, pos = _uvarint(frame, pos)
            pos += max(0, size_plus_one - 1)
        else:
            (size,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + max(0, size)
    (acks,) = struct.unpack_from(">h", frame, pos)
    return int(acks)


def _refusal(frame: bytes, version: int, correlation_id: int, error_code: int) -> bytes:
    """The response frame (no size prefix) a broker refusing every partition of this Produce
    request with ``error_code`` would send, at the client's version."""
    request = ProduceRequest.decode(frame[_produce_body_start(frame, version):], version)
    response = ProduceResponse(responses=[
        ProduceResponse.TopicProduceResponse(
            name=topic.name, topic_id=topic.topic_id,
            partition_responses=[
                ProduceResponse.PartitionProduceResponse(index=p.index, error_code=error_code,
                                                         base_offset=-1)
                for p in topic.partition_data])
        for topic in request.topic_data])
    header = _SIZE.pack(correlation_id)
    if ProduceResponse.header_version(version) >= 1:
        header += b"\x00"  # no tagged fields
    return header + bytes(response.encode(version))


def _api_versions_v0(correlation_id: int) -> bytes:
    """An ApiVersions v0 request frame (no size prefix): what the broker gets in place of a
    refused Produce request, so that its answer takes that request's place in the order."""
    return _REQUEST_HEADER_START.pack(ApiVersionsRequest.API_KEY, 0, correlation_id) + \
        struct.pack(">h", -1)  # null client id; v0 has an empty body


def set_batches_to_retain(value: int) -> Any:
    """A rewrite hook setting KIP-1269's ``ProducerStateBatchesToRetain`` of every topic.

    The field exists in ProduceResponse v14+ only (TopicProduceResponse, tag 1); the hook
    refuses older versions rather than pretend, since the field would not be on the wire.
    Pair it with ``KafkaProxy.speak_produce_v14`` in front of a broker that stops at v13.
    """

    def rewrite(response: Any, version: int) -> None:
        if version < _PRODUCE_V14:
            raise ProxyError(
                f"ProduceResponse v{version} cannot carry ProducerStateBatchesToRetain "
                "(KIP-1269: v14+)"
            )
        for topic in response.responses:
            topic.producer_state_batches_to_retain = value

    return rewrite


# -- one proxied connection ------------------------------------------------------------------


@dataclass(frozen=True)
class _Awaited:
    """What a forwarded request was, so its response can be recognised."""

    api_key: int
    api_version: int  # what the client sent
    upstream_version: int = -1  # what the broker got, when the proxy translated it (v14 -> v13)
    # A refused Produce request: the broker got an ApiVersions request in its place (so its
    # answer keeps the connection's order) and the client gets this frame instead.
    replacement: bytes | None = None


@dataclass(frozen=True)
class _Outgoing:
    """A queued response (or, with frame None, a 'close here' marker) and when to deliver it."""

    frame: bytes | None
    release_at: float
    # For a close marker: abort with RST instead of FIN.
    abort: bool = False


@dataclass(eq=False)
class _Link:
    """A client connection, its broker connection, and the bookkeeping between them."""

    link_id: int
    client_reader: asyncio.StreamReader
    client_writer: asyncio.StreamWriter
    upstream_reader: asyncio.StreamReader
    upstream_writer: asyncio.StreamWriter
    # Correlation id → request, for requests whose response has not arrived.
    awaited: dict[int, _Awaited] = field(default_factory=dict)
    # Responses in delivery order; None means "the broker closed: close after the rest".
    outbox: asyncio.Queue[_Outgoing | None] = field(default_factory=asyncio.Queue)
    # The three tasks; set by _run, cancelled by close().
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # Responses (not close markers) in the outbox, so close() can settle the counters.
    queued: int = 0
    # Set once by close(): later closes are no-ops and the tasks know to stop.
    closed: bool = False


class KafkaProxy:
    """The proxy on the current event loop; see the module docstring.

    ``upstream`` may be given later (``set_upstream``) because the broker must be started
    knowing the proxy's port; a client connecting before then is closed at once.
    """

    def __init__(
        self,
        *,
        upstream: tuple[str, int] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        faults: FaultPlan | None = None,
        connect_timeout: float = 5.0,
    ) -> None:
        self.host = host
        self._requested_port = port
        # Where the broker listens; read at each accept, so it can be set after start().
        self._upstream = upstream
        # The plan tests configure; shared with (and read under its own lock by) this proxy.
        self.faults = faults if faults is not None else FaultPlan(seed)
        # KIP-1269 for brokers that stop at Produce v13: advertise v14, forward it as v13 and
        # answer it as v14 (with set_batches_to_retain adding the field)
        self.speak_produce_v14 = False
        self.connect_timeout = connect_timeout
        self._counters = _Counters()
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        # Open links by id; only touched on the proxy's loop.
        self._links: dict[int, _Link] = {}
        # Every client-handler task, including ones still connecting upstream, so stop()
        # can wait for (or cancel) all of them.
        self._handlers: set[asyncio.Task[Any]] = set()
        self._ids = itertools.count(1)
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> KafkaProxy:
        """Listen; returns once the port is bound (so it can be advertised)."""
        if self._server is not None:
            raise ProxyError(f"{self!r} already started")
        self._server = await asyncio.start_server(self._serve, self.host, self._requested_port)
        self._port = self._server.sockets[0].getsockname()[1]
        logger.info("proxy: listening on %s", self.bootstrap)
        return self

    async def stop(self, timeout: float = 5.0) -> None:
        """Close the server and every connection; wait at most ``timeout`` for the tasks.

        Idempotent. Raises ProxyError if a task outlived the bound or internal errors were
        recorded while running.
        """
        self._stopping = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for link in list(self._links.values()):
            self._close(link, abort=False)
        stragglers: set[asyncio.Task[Any]] = set()
        if self._handlers:
            _, pending = await asyncio.wait(set(self._handlers), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                _, stragglers = await asyncio.wait(pending, timeout=timeout)
        if server is not None:
            await asyncio.wait_for(server.wait_closed(), timeout)
        if stragglers:
            raise ProxyError(f"{len(stragglers)} connection task(s) survived stop()")
        self.raise_for_errors()

    async def __aenter__(self) -> KafkaProxy:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.stop()
        except ProxyError:
            if exc is None:
                raise
            logger.exception("proxy: stop failed while another exception propagates")

    def raise_for_errors(self) -> None:
        errors = self._counters.snapshot().errors
        if errors:
            raise ProxyError(f"proxy recorded {len(errors)} internal error(s): {list(errors)}")

    # -- state -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise ProxyError("proxy not started")
        return self._port

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def upstream(self) -> tuple[str, int] | None:
        return self._upstream

    def set_upstream(self, host: str, port: int) -> None:
        """Point new connections at the broker (existing ones keep theirs)."""
        self._upstream = (host, port)

    def statistics(self) -> ProxyStatistics:
        return self._counters.snapshot()

    def reset_connections(self) -> int:
        """Abort every open connection with RST now; returns how many. Call on the proxy's loop."""
        links = [link for link in self._links.values() if not link.closed]
        for link in links:
            self._close(link, abort=True)
        self._counters.add("connections_reset", len(links))
        return len(links)

    def __repr__(self) -> str:
        where = f"{self.host}:{self._port}" if self._port is not None else "unbound"
        upstream = f"{self._upstream[0]}:{self._upstream[1]}" if self._upstream else "unset"
        s = self.statistics()
        state = "listening" if self._server is not None else "stopped"
        return (
            f"<KafkaProxy {where} -> {upstream} {state} open={s.connections_open} "
            f"produce={s.produce_requests} dropped={s.produce_responses_dropped} "
            f"stalled={s.responses_stalled} rewritten={s.produce_responses_rewritten} "
            f"reset={s.connections_reset} errors={len(s.errors)} {self.faults!r}>"
        )

    # -- connection handling -----------------------------------------------------------

    async def _serve(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:  # always true inside the server's handler task
            self._handlers.add(task)
        try:
            await self._pair(client_reader, client_writer)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _pair(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        self._counters.add("connections_accepted")
        upstream = self._upstream
        if upstream is None or self._stopping:
            await _close_writer(client_writer, abort=False)
            return
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(*upstream), self.connect_timeout
            )
        except (OSError, asyncio.TimeoutError) as exc:
            # The broker may be down on purpose (a test stopped it): the client sees the
            # same thing it would see connecting to a dead broker.
            logger.info("proxy: cannot reach broker %s:%d: %s", *upstream, exc)
            self._counters.add("upstream_connect_failures")
            await _close_writer(client_writer, abort=True)
            return
        link = _Link(
            next(self._ids), client_reader, client_writer, upstream_reader, upstream_writer
        )
        self._links[link.link_id] = link
        self._counters.add("connections_open")
        if self._stopping:  # stop() began while we were connecting
            self._close(link, abort=False)
        try:
            await self._run(link)
        finally:
            self._close(link, abort=False)
            del self._links[link.link_id]
            self._counters.add("connections_open", -1)
            await _close_writer(link.client_writer, abort=False)
            await _close_writer(link.upstream_writer, abort=False)

    async def _run(self, link: _Link) -> None:
        link.tasks = [
            asyncio.create_task(self._guard(link, self._pump_requests)),
            asyncio.create_task(self._guard(link, self._pump_responses)),
            asyncio.create_task(self._guard(link, self._deliver)),
        ]
        if link.closed:
            for task in link.tasks:
                task.cancel()
        await asyncio.wait(link.tasks)

    async def _guard(self, link: _Link, work: Callable[[_Link], Coroutine[Any, Any, None]]) -> None:
        """Run one of a link's tasks; any ending but cancellation closes the link.

        ``work`` is a function, not a coroutine, so a task cancelled before its first step
        leaves no never-awaited coroutine behind.
        """
        try:
            await work(link)
        except (OSError, asyncio.IncompleteReadError) as exc:
            # A peer went away mid-frame or reset us: the other side must see it too.
            logger.debug("proxy: link %d: %r", link.link_id, exc)
            self._close(link, abort=True)
        except asyncio.CancelledError:
            pass  # close() cancels the sibling tasks; nothing more to do
        except Exception as exc:
            logger.exception("proxy: link %d failed", link.link_id)
            with self._counters.lock:
                self._counters.errors.append(f"link {link.link_id}: {exc!r}")
            self._close(link, abort=True)

    def _close(self, link: _Link, *, abort: bool) -> None:
        """Close both sides once (RST if ``abort``), cancel the tasks, settle the counters."""
        if link.closed:
            return
        link.closed = True
        with self._counters.lock:
            self._counters.responses_awaited -= len(link.awaited)
            self._counters.responses_queued -= link.queued
        link.awaited.clear()
        for writer in (link.client_writer, link.upstream_writer):
            if abort:
                _abort(writer)
            else:
                writer.close()
        current = asyncio.current_task()
        for task in link.tasks:
            if task is not current:
                task.cancel()

    async def _pump_requests(self, link: _Link) -> None:
        counters = self._counters
        while not link.closed:
            frame = await _read_frame(link.client_reader)
            if frame is None:
                self._close(link, abort=False)
                return
            api_key, api_version, correlation_id = _REQUEST_HEADER_START.unpack_from(frame)
            expects_response = True
            if api_key == PRODUCE_API_KEY and _produce_acks(frame, api_version) == 0:
                expects_response = False
            with counters.lock:
                counters.requests[api_key] += 1
                if not expects_response:
                    counters.produce_requests_without_response += 1
            decision = self.faults.on_request(api_key)
            if decision.reset:
                counters.add("produce_requests_reset")
                counters.add("connections_reset")
                logger.info(
                    "proxy: link %d: reset on Produce request %d", link.link_id, correlation_id
                )
                self._close(link, abort=True)
                return
            refuse_with = decision.refuse_with if expects_response else 0
            if refuse_with:
                counters.add("produce_requests_refused")
                logger.info("proxy: link %d: refusing Produce request %d with error %d",
                            link.link_id, correlation_id, refuse_with)
                link.awaited[correlation_id] = _Awaited(
                    api_key, api_version, 0,
                    replacement=_refusal(frame, api_version, correlation_id, refuse_with))
                counters.add("responses_awaited")
                frame = _api_versions_v0(correlation_id)
            elif expects_response:
                upstream = api_version
                if api_key == PRODUCE_API_KEY and api_version == _PRODUCE_V14 and \
                        self.speak_produce_v14:
                    # the request is the same as v13 on the wire: only the header changes
                    frame = frame[:2] + _API_VERSION.pack(_PRODUCE_V13) + frame[4:]
                    upstream = _PRODUCE_V13
                link.awaited[correlation_id] = _Awaited(api_key, api_version, upstream)
                counters.add("responses_awaited")
            link.upstream_writer.write(_SIZE.pack(len(frame)) + frame)
            await link.upstream_writer.drain()

    async def _pump_responses(self, link: _Link) -> None:
        counters = self._counters
        loop = asyncio.get_running_loop()
        while not link.closed:
            frame = await _read_frame(link.upstream_reader)
            if frame is None:
                # The broker closed: deliver what is queued, then close the client.
                link.outbox.put_nowait(None)
                return
            (correlation_id,) = _SIZE.unpack_from(frame)
            now = loop.time()
            awaited = link.awaited.pop(correlation_id, None)
            if awaited is None:
                counters.add("responses_unmatched")
                self._enqueue(link, _Outgoing(frame, now + self.faults.rtt_ms / 1000.0))
                continue
            with counters.lock:
                counters.responses_awaited -= 1
                counters.responses[awaited.api_key] += 1
                if awaited.api_key == PRODUCE_API_KEY:
                    counters.produce_versions[awaited.api_version] += 1
            if awaited.replacement is not None:  # a refused Produce request's answer
                self._enqueue(link, _Outgoing(awaited.replacement,
                                              now + self.faults.rtt_ms / 1000.0))
                continue
            if awaited.api_key == ApiVersionsRequest.API_KEY and self.speak_produce_v14:
                frame = self._advertise_produce_v14(frame, awaited.api_version)
            decision = self.faults.on_response(awaited.api_key)
            release_at = now + decision.delay_seconds
            if decision.drop:
                counters.add("produce_responses_dropped")
                logger.info(
                    "proxy: link %d: dropping Produce response %d",
                    link.link_id,
                    correlation_id,
                )
                self._enqueue(link, _Outgoing(None, release_at, abort=decision.abort))
                continue
            translated = awaited.upstream_version not in (-1, awaited.api_version)
            if decision.rewrites or translated:
                frame = self._rewrite(frame, awaited, decision)
                counters.add("produce_responses_rewritten")
            if decision.stall_seconds > 0:
                release_at += decision.stall_seconds
                with counters.lock:
                    counters.responses_stalled += 1
                    if awaited.api_key == PRODUCE_API_KEY:
                        counters.produce_responses_stalled += 1
            self._enqueue(link, _Outgoing(frame, release_at))

    def _enqueue(self, link: _Link, item: _Outgoing) -> None:
        if item.frame is not None:
            link.queued += 1
            self._counters.add("responses_queued")
        link.outbox.put_nowait(item)

    @staticmethod
    def _rewrite(frame: bytes, awaited: _Awaited, decision: ResponseDecision) -> bytes:
        """Decode (at the version the broker answered), let each hook edit, re-encode at the
        version the client asked for, with the same header bytes (v13 and v14 share them)."""
        version = awaited.api_version
        upstream = version if awaited.upstream_version < 0 else awaited.upstream_version
        _, header_size = decode_response_header(frame, ProduceResponse.header_version(upstream))
        response = ProduceResponse.decode(frame[header_size:], upstream)
        for hook in decision.rewrites:
            replaced = hook(response, version)
            if replaced is not None:
                response = replaced
        return frame[:header_size] + bytes(response.encode(version))

    @staticmethod
    def _advertise_produce_v14(frame: bytes, version: int) -> bytes:
        """ApiVersions answer: Produce up to v14 where the broker reaches v13 (the proxy turns
        v14 into v13 and back). Its header is v0 whatever the version (KIP-511)."""
        _, header_size = decode_response_header(frame, 0)
        response = ApiVersionsResponse.decode(frame[header_size:], version)
        for key in response.api_keys:
            if key.api_key == PRODUCE_API_KEY and key.max_version >= _PRODUCE_V13:
                key.max_version = _PRODUCE_V14
        return frame[:header_size] + bytes(response.encode(version))

    async def _deliver(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        while not link.closed:
            item = await link.outbox.get()
            if item is None:
                self._close(link, abort=False)
                return
            wait = item.release_at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if item.frame is None:
                self._counters.add("connections_closed_after_drop")
                if item.abort:
                    self._counters.add("connections_reset")
                self._close(link, abort=item.abort)
                return
            link.queued -= 1
            self._counters.add("responses_queued", -1)
            link.client_writer.write(_SIZE.pack(len(item.frame)) + item.frame)
            await link.client_writer.drain()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST: SO_LINGER 0, then abort (which skips flushing our buffers)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    writer.transport.abort()


async def _close_writer(writer: asyncio.StreamWriter, *, abort: bool) -> None:
    if abort:
        _abort(writer)
    else:
        writer.close()
    with contextlib.suppress(OSError, asyncio.TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)


# -- the proxy in its own thread -------------------------------------------------------------


class ProxyThread:
    """A ``KafkaProxy`` on a private event loop in a daemon thread, driven synchronously.

    For tests whose client blocks (confluent-kafka) or that want faults to keep happening
    while their own loop is busy. ``start()`` returns once the port is bound; ``stop()``
    closes the server and every connection and joins the thread within ``stop_timeout``.
    Configure faults through ``faults`` from any thread.
    """

    def __init__(
        self,
        *,
        upstream: tuple[str, int] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        connect_timeout: float = 5.0,
        start_timeout: float = 5.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self.proxy = KafkaProxy(
            upstream=upstream, host=host, port=port, seed=seed, connect_timeout=connect_timeout
        )
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Set by the thread once listening (or failed to); start() waits on it.
        self._ready = threading.Event()
        # Created on the proxy's loop; setting it (thread-safely) ends the thread's main.
        self._stop_requested: asyncio.Event | None = None
        # Whatever start or stop raised inside the thread, re-raised in the caller.
        self._failure: BaseException | None = None

    @property
    def faults(self) -> FaultPlan:
        return self.proxy.faults

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def bootstrap(self) -> str:
        return self.proxy.bootstrap

    def set_upstream(self, host: str, port: int) -> None:
        self.proxy.set_upstream(host, port)

    def statistics(self) -> ProxyStatistics:
        return self.proxy.statistics()

    def start(self) -> ProxyThread:
        if self._thread is not None:
            raise ProxyError(f"{self!r} already started")
        self._thread = threading.Thread(target=self._main, name="kafka-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(self.start_timeout):
            raise ProxyError(f"proxy did not start within start_timeout={self.start_timeout}s")
        if self._failure is not None:
            self._thread.join(self.stop_timeout)
            raise ProxyError(f"proxy failed to start: {self._failure!r}") from self._failure
        return self

    def stop(self) -> None:
        """Idempotent; raises ProxyError if the thread does not end within stop_timeout."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stop_requested = self._loop, self._stop_requested
        if loop is not None and stop_requested is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stop_requested.set)
        thread.join(self.stop_timeout * 2 + 1)
        if thread.is_alive():
            raise ProxyError(f"proxy thread still alive after stop_timeout={self.stop_timeout}s")
        if self._failure is not None:
            raise ProxyError(f"proxy failed: {self._failure}") from self._failure

    def reset_connections(self) -> int:
        """Abort every open connection with RST now; returns how many were open."""
        loop = self._loop
        if loop is None or self._thread is None:
            raise ProxyError("proxy thread not running")

        async def reset() -> int:
            return self.proxy.reset_connections()

        return asyncio.run_coroutine_threadsafe(reset(), loop).result(self.stop_timeout)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stop_requested = asyncio.Event()
        try:
            await self.proxy.start()
        except BaseException as exc:
            self._failure = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop_requested.wait()
        finally:
            try:
                await self.proxy.stop(self.stop_timeout)
            except ProxyError as exc:
                self._failure = exc

    def __enter__(self) -> ProxyThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        except ProxyError:
            if exc is None:
                raise
            logger.exception("proxy: stop failed while another exception propagates")

    def __repr__(self) -> str:
        state = "running" if self._thread is not None else "stopped"
        return f"<ProxyThread {state} {self.proxy!r}>"


@contextlib.contextmanager
def tansu_behind_proxy(
    *, seed: int = 0, **broker_kwargs: Any
) -> Iterator[tuple[TansuBroker, ProxyThread]]:
    """A Tansu broker advertising a proxy's port, and that proxy: every client crosses it.

    Tansu takes its advertised listener only as a startup flag, so the proxy's port must be
    known first. The proxy binds port 0 and *keeps* the socket, so nothing can take that port
    between choosing and advertising it; the broker then picks its own listening port (and
    retries if it loses that race, see ``TansuBroker.start``) and the proxy is pointed at it.
    Clients should bootstrap to ``proxy.bootstrap``.
    """
    with ProxyThread(seed=seed) as proxy:
        broker = TansuBroker(advertised_port=proxy.port, **broker_kwargs)
        with broker:
            proxy.set_upstream(broker.host, broker.port)
            yield broker, proxy
