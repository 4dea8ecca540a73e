"""One TCP connection to one Kafka broker: set-up, pipelining, timeouts, clean failure.

Frames are cut from the byte stream by ``wire.WireProtocol``; the SASL session and its
re-authentication are ``session.Session``'s, a collaborator the connection creates and owns.
This module opens the connection (dial, ApiVersions, then SASL, all under one bound), writes
requests, matches each response to the oldest pending request, decodes it, ends requests that
outlive their deadline, holds back acks=0 requests until their bytes leave the buffer, and
fails everything in flight with one cause when the connection ends.

Invariants (tests assert them through ``statistics()``):
- every request sent is either answered, failed with the cause, or still pending — never dropped;
- responses arrive in request order; a correlation id out of order is a ``ProtocolError`` that
  closes the connection, failing every pending request;
- one ``TimerHandle`` per connection watches the earliest request deadline; when a request
  outlives ``request_timeout_ms`` the connection is closed (as the Java client's NetworkClient
  does: a broker that does not answer one request cannot be trusted with the ones behind it).

Set-up (``open``): dial, ApiVersions (v3 with the client's name and version, KIP-511, falling
back to the version the broker names), then SASL when the security protocol asks for it, all of
it bounded by socket.connection.setup.timeout.ms with its errors mapped.

Timeouts: the one timer watches the earliest deadline among the requests awaiting an answer and
the unanswered ones still in the buffer; when one is overdue the connection is closed (the
third invariant above).

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
import functools
import logging
import ssl
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from aiokprod._error_codes import ErrorCode
from aiokprod._version import __version__
from aiokprod._waits import wait_within
from aiokprod.errors import (
    AuthenticationError,
    KafkaConnectionError,
    KafkaError,
    ProtocolError,
    RequestTimeoutError,
    UnsupportedVersionError,
    raise_for_error_code,
)
from aiokprod.network.errors import map_exceptions, transport_errors
from aiokprod.network.security import PLAINTEXT, SecurityOptions, build_ssl_context
from aiokprod.network.session import Session
from aiokprod.network.transport import TransportConnector, tcp_connect
from aiokprod.network.wire import Pending, WireProtocol
from aiokprod.protocol import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    KafkaRequest,
    decode_response_header,
    encode_request_pieces,
)

__all__ = ["BrokerConnection", "ConnectionStatistics"]

log = logging.getLogger(__name__)

_R = TypeVar("_R")  # the response type of the request being sent
_API_VERSIONS_PREFERRED = 3  # KIP-511 client name/version arrive from v3 (flexible)
_UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION


@dataclass(frozen=True)
class ConnectionStatistics:
    """A snapshot of one connection's bookkeeping."""

    node_id: int
    address: str
    connected: bool
    in_flight: int
    requests_sent: int
    responses_received: int
    bytes_sent: int
    bytes_received: int
    timeouts: int
    write_paused: bool
    # bytes written but still in the transport's buffer (not yet taken by the kernel)
    write_buffer_bytes: int = 0
    # requests sent expecting no answer whose bytes have not left the buffer yet
    unflushed: int = 0


class BrokerConnection:
    """A pipelined connection to one broker node, with negotiated API versions.

    Use ``await BrokerConnection.open(...)``; it returns once the TCP connection is up and the
    ApiVersions handshake is done, so ``version_for`` can answer synchronously afterwards.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str = "aiokprod",
        request_timeout_ms: int = 30000,
        clock: Callable[[], float] = time.monotonic,
        software_name: str = "aiokprod",
        software_version: str = __version__,
        security: SecurityOptions | None = None,
    ) -> None:
        self.host = host
        self._security = security if security is not None else PLAINTEXT
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self._clock = clock
        self._software = (software_name, software_version)
        self._name = f"[client {client_id}] node {node_id} ({host}:{port})"
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._pending: deque[Pending] = deque()
        # correlation ids of requests sent expecting no answer (Produce acks=0); Kafka never
        # answers them but some brokers (Tansu) do, and such an answer must not look like a
        # protocol violation. Bounded: only the most recent ones can still be answered.
        self._unanswered: deque[int] = deque(maxlen=4096)
        self._next_correlation_id = 0
        self._closed_cause: KafkaError | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline = float("inf")
        self._write_paused = False
        # requests sent expecting no answer, written while the transport was paused: (deadline,
        # future); resolved when it resumes, failed with the connection, bounded by the timer
        self._unflushed: deque[tuple[float, asyncio.Future[Any]]] = deque()
        # when a request was last written or an answer last read: idle connections are closed
        # after connections.max.idle.ms (the cluster asks ``idle_for``)
        self.last_activity = clock()
        # called when a paused transport takes data again: the sender may send once more
        self.on_writable: Callable[[], None] | None = None
        # called once when the connection closes, whoever closed it: the cluster's bookkeeping
        self.on_close: Callable[[], None] | None = None
        # API key -> (broker min, broker max), filled by the handshake
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self.requests_sent = 0
        self.responses_received = 0
        self.bytes_sent = 0
        self._bytes_received = 0
        self.timeouts = 0
        # the ApiVersions version the handshake settled on (-1 until it is done)
        self.api_versions_version = -1
        # SASL session and its re-authentication (KIP-368); holds requests meanwhile
        self.session = Session(self._name, node_id, self._security, write=self.write,
                               close=self.close, resumed=self._reauthenticated)
        # set once open() finished (TLS, ApiVersions, SASL): failures before it are set-up ones
        self.established = False

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        connect_timeout_ms: float = 10000,
        send_buffer_bytes: int = 131072,
        receive_buffer_bytes: int = 32768,
        connector: TransportConnector | None = None,
        **kwargs: Any,
    ) -> BrokerConnection:
        """Connect and negotiate versions, bounded by ``socket_connection_setup_timeout_ms``.

        ``send_buffer_bytes``/``receive_buffer_bytes`` set SO_SNDBUF/SO_RCVBUF (Java's
        send.buffer.bytes/receive.buffer.bytes; -1 keeps the OS default). ``connector`` replaces
        TCP (tests script a transport with it). Cancellation closes the half-open socket;
        nothing is left running.
        """
        conn = cls(host, port, **kwargs)
        await conn._set_up(connect_timeout_ms, send_buffer_bytes, receive_buffer_bytes,
                           connector)
        return conn

    async def _set_up(self, connect_timeout_ms: float, send_buffer_bytes: int,
                      receive_buffer_bytes: int, connector: TransportConnector | None) -> None:
        """Set up, bounded by ``connect_timeout_ms`` (socket.connection.setup.timeout.ms), with
        every transport error mapped (``errors.transport_errors``); on any failure, or
        cancellation, the half-open connection is closed and nothing is left running."""
        connect = tcp_connect if connector is None else connector
        security = self._security
        if connector is None and security.uses_tls:
            context = security.ssl_context if security.ssl_context is not None \
                else build_ssl_context()
            connect = functools.partial(tcp_connect, ssl_context=context)
        errors = transport_errors(
            self._name, tls=security.protocol,
            timeout=f"socket.connection.setup.timeout.ms={round(connect_timeout_ms)}")
        try:
            with map_exceptions(errors):
                await wait_within(
                    self._dial_and_negotiate(connect, send_buffer_bytes, receive_buffer_bytes),
                    connect_timeout_ms / 1000)
        except KafkaError as exc:
            self.close(exc)
            raise
        except BaseException:
            self.close(KafkaConnectionError(f"{self._name}: connection setup abandoned"))
            raise
        self.established = True

    async def _dial_and_negotiate(self, connect: TransportConnector, send_buffer_bytes: int,
                                  receive_buffer_bytes: int) -> None:
        """Dial, negotiate API versions, authenticate: everything before this is usable."""
        await connect(self.host, self.port, self.protocol_factory, send_buffer_bytes,
                      receive_buffer_bytes)
        await self._negotiate_versions()
        if self._security.uses_sasl:
            await self.session.authenticate(self.broker_versions)

    async def _negotiate_versions(self) -> None:
        """ApiVersions v3 (client name/version), falling back on UNSUPPORTED_VERSION.

        A broker that does not know v3 answers with error 35 and its own ApiVersions range in a
        v0 body; we then retry with the highest version it named (v0 for old brokers).
        """
        name, software_version = self._software
        request = ApiVersionsRequest(client_software_name=name,
                                     client_software_version=software_version)
        version = _API_VERSIONS_PREFERRED
        for _ in range(3):
            response = await self.request(request, version=version)
            if response.error_code == _UNSUPPORTED_VERSION:
                offered = [k for k in response.api_keys
                           if k.api_key == ApiVersionsRequest.API_KEY]
                fallback = min(offered[0].max_version, version - 1) if offered else 0
                if fallback < 0 or fallback >= version:
                    break
                log.debug("%s: ApiVersions v%d unsupported, retrying v%d",
                          self._name, version, fallback)
                version = fallback
                continue
            if response.error_code != ErrorCode.NONE:
                raise_for_error_code(response.error_code, f"{self._name}: ApiVersions")
            self.broker_versions = {
                k.api_key: (k.min_version, k.max_version) for k in response.api_keys
            }
            self.api_versions_version = version
            return
        raise UnsupportedVersionError(f"{self._name}: broker accepts no ApiVersions version")

    def protocol_factory(self) -> asyncio.Protocol:
        """The asyncio protocol a transport to the broker feeds (framing lives there)."""
        return WireProtocol(self)

    @property
    def name(self) -> str:
        """``[client id] node N (host:port)``: how logs and errors name this connection."""
        return self._name

    @property
    def security(self) -> SecurityOptions:
        return self._security

    @property
    def software(self) -> tuple[str, str]:
        """(client software name, version) sent in ApiVersions (KIP-511)."""
        return self._software

    @property
    def session_lifetime_ms(self) -> int:
        """The SASL session lifetime the broker gave at the last authentication (0: none)."""
        return self.session.lifetime_ms

    @property
    def reauthentications(self) -> int:
        return self.session.reauthentications

    # ---- versions --------------------------------------------------------------------------

    def version_for(self, request_type: type[KafkaRequest[Any]] | KafkaRequest[Any], *,
                    max_version: int | None = None) -> int:
        """The highest version of ``request_type`` both sides support."""
        # a caller's cap never lifts the version past what the generated class can encode
        ours_max = request_type.MAX_VERSION if max_version is None else min(
            max_version, request_type.MAX_VERSION)
        theirs = self.broker_versions.get(request_type.API_KEY)
        if theirs is None:
            raise UnsupportedVersionError(
                f"{self._name}: broker does not support the {request_type.API_NAME} API "
                f"(api key {request_type.API_KEY})")
        version = min(ours_max, theirs[1])
        if version < max(request_type.MIN_VERSION, theirs[0]):
            raise UnsupportedVersionError(
                f"{self._name}: no common version of the {request_type.API_NAME} API: "
                f"broker supports v{theirs[0]}-v{theirs[1]}, aiokprod "
                f"v{request_type.MIN_VERSION}-v{ours_max}")
        return version

    # ---- sending ---------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._closed_cause is None

    def send(
        self,
        request: KafkaRequest[_R],
        *,
        version: int | None = None,
        timeout_ms: int | None = None,
        expect_response: bool = True,
    ) -> asyncio.Future[_R | None]:
        """Write ``request`` now and return a future of its decoded response.

        Synchronous on purpose: the sender writes several requests per wake-up without a
        coroutine each. With ``expect_response=False`` (Produce with acks=0, which the broker
        never answers) the future resolves to None once the bytes have left the transport's
        buffer (see the module docstring): at once unless the write paused the transport,
        else on ``resume_writing``; it fails with the connection, or after ``request_timeout_ms``.
        While the connection re-authenticates (KIP-368) the request is held and written after.
        """
        held = self.session.held
        if held is not None and self._closed_cause is None:
            waiting: asyncio.Future[_R | None] = self._loop.create_future()
            held.append((request, version, timeout_ms, expect_response, waiting))
            return waiting
        return self.write(request, version, timeout_ms, expect_response)

    def write(self, request: KafkaRequest[_R], version: int | None, timeout_ms: int | None,
              expect_response: bool) -> asyncio.Future[_R | None]:
        """Frame and write ``request`` now, past any re-authentication hold (``send`` is the
        entry point; the session writes its SASL exchange and the held requests with this)."""
        future: asyncio.Future[_R | None] = self._loop.create_future()
        cause = self._closed_cause
        transport = self._transport
        if cause is not None or transport is None:
            future.set_exception(KafkaConnectionError(
                f"{self._name}: connection is closed" + (f" ({cause})" if cause else "")))
            return future
        if version is None:
            version = self.version_for(type(request))
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        pieces = encode_request_pieces(request, version, correlation_id, self.client_id)
        now = self._clock()
        self.last_activity = now
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        deadline = now + timeout
        if expect_response:
            response_type: type[Any] = request.RESPONSE_TYPE
            self._pending.append(Pending(
                correlation_id, future, response_type, version,
                response_type.header_version(version), deadline, request.API_NAME, now))
            if deadline < self._timer_deadline:
                self._arm_timer(deadline)
        _write_pieces(transport, pieces)
        self.requests_sent += 1
        self.bytes_sent += sum(map(len, pieces))
        if not expect_response:
            self._unanswered.append(correlation_id)
            if self._write_paused:
                # its bytes sit in our buffer: done when the transport drains (or times out)
                self._unflushed.append((deadline, future))
                if deadline < self._timer_deadline:
                    self._arm_timer(deadline)
            else:
                future.set_result(None)
        return future

    async def request(
        self,
        request: KafkaRequest[_R],
        *,
        version: int | None = None,
        timeout_ms: int | None = None,
    ) -> _R:
        """Send and await the response, bounded by ``request_timeout_ms``.

        Cancelling the caller does not cancel the request on the wire (it cannot be unsent);
        its response is read and dropped, so the connection stays usable.
        """
        # expect_response=True: the future resolves to a decoded response, never to None
        future = cast("asyncio.Future[_R]",
                      self.send(request, version=version, timeout_ms=timeout_ms))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(_retrieve)  # its outcome has no reader any more
            raise

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

    # ---- receiving -------------------------------------------------------------------------

    def frame_size_invalid(self, size: int) -> None:
        self._fail(ProtocolError(f"{self._name}: invalid response frame size {size}"))

    def frame_received(self, frame: bytes) -> bool:
        """Match one response frame to the oldest pending request. False if the link broke."""
        self._bytes_received += len(frame) + 4
        if self._unanswered and len(frame) >= 4 and \
                int.from_bytes(frame[:4], "big", signed=True) in self._unanswered:
            self._unanswered.remove(int.from_bytes(frame[:4], "big", signed=True))
            return True  # an answer to a request that expects none (see _unanswered)
        if not self._pending:
            self._fail(ProtocolError(f"{self._name}: response received with no request pending"))
            return False
        pending = self._pending[0]
        try:
            correlation_id, offset = decode_response_header(frame, pending.header_version)
        except Exception as exc:  # any decode failure: the broker sent it
            self._fail(ProtocolError(f"{self._name}: bad response header: {_why(exc)}"))
            return False
        if correlation_id != pending.correlation_id:
            self._fail(ProtocolError(
                f"{self._name}: correlation id {correlation_id} does not match the oldest "
                f"pending request ({pending.api_name}, id {pending.correlation_id})"))
            return False
        self._pending.popleft()
        self.responses_received += 1
        self.last_activity = self._clock()
        body = memoryview(frame)[offset:]
        try:
            try:
                response = pending.response_type.decode(body, pending.version, strict=False)
            except ProtocolError:
                # A broker that does not support the ApiVersions version we asked for answers
                # UNSUPPORTED_VERSION in a v0 body (KIP-511); every other API fails here.
                if pending.response_type is not ApiVersionsResponse or pending.version == 0:
                    raise
                response = _unsupported_api_versions(body)
        except Exception as exc:  # popped: the request must fail here
            error = ProtocolError(
                f"{self._name}: malformed {pending.api_name} v{pending.version} response: "
                f"{_why(exc)}")
            if not pending.future.done():
                pending.future.set_exception(error)
            self._fail(error)
            return False
        if not pending.future.done():
            pending.future.set_result(response)
        return True

    # ---- closing ---------------------------------------------------------------------------

    def transport_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def transport_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError) and not self.established:
            # a TLS alert before the connection was usable: the broker refused our certificate
            # (missing, or from a CA it does not trust) — the same settings will fail again
            self._fail(AuthenticationError(
                f"{self._name}: TLS handshake failed ({self._security.protocol}): the broker "
                f"refused the session: {exc.reason or exc} (does it require a client "
                f"certificate, ssl_certfile, from a CA it trusts?)"))
            return
        reason = f": {exc}" if exc else ""
        self._fail(KafkaConnectionError(f"{self._name}: connection closed by broker{reason}"))

    def _fail(self, cause: KafkaError) -> None:
        """Close once; fail every pending request with ``cause``."""
        first = self._closed_cause is None
        if self._closed_cause is None:
            self._closed_cause = cause
        else:
            cause = self._closed_cause
        if first:
            # connection losses are routine, and the cluster logs authentication failures once
            level = logging.DEBUG if isinstance(cause, (KafkaConnectionError,
                                                        AuthenticationError)) \
                else logging.WARNING
            log.log(level, "%s: closing: %s (%d in flight)", self._name, cause, len(self._pending))
        self._fail_in_flight(cause)
        self.session.close(cause)
        if self._transport is not None:
            self._transport.abort()
        if first and self.on_close is not None:
            self.on_close()

    def _fail_in_flight(self, cause: KafkaError) -> None:
        """The connection closed (``_fail``): stop the timer, fail every
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

    def _reauthenticated(self) -> None:
        """The session's re-authentication ended its hold (KIP-368): the sender may send once
        more."""
        if self.on_writable is not None and self.writable:
            self.on_writable()

    def close(self, cause: KafkaError | None = None) -> None:
        """Close now; pending requests fail with ``cause`` (or 'closed by the client')."""
        self._fail(cause or KafkaConnectionError(f"{self._name}: connection closed by the client"))

    @property
    def closed_cause(self) -> KafkaError | None:
        return self._closed_cause

    # ---- introspection ---------------------------------------------------------------------

    def statistics(self) -> ConnectionStatistics:
        return ConnectionStatistics(
            node_id=self.node_id,
            address=f"{self.host}:{self.port}",
            connected=self.connected,
            in_flight=len(self._pending),
            requests_sent=self.requests_sent,
            responses_received=self.responses_received,
            bytes_sent=self.bytes_sent,
            bytes_received=self._bytes_received,
            timeouts=self.timeouts,
            write_paused=self._write_paused,
            write_buffer_bytes=self.write_buffer_size,
            unflushed=len(self._unflushed),
        )

    def __repr__(self) -> str:
        state = "connected" if self.connected else f"closed ({self._closed_cause})"
        return (f"<BrokerConnection node={self.node_id} {self.host}:{self.port} {state} "
                f"in_flight={len(self._pending)} sent={self.requests_sent}>")


def _why(exc: Exception) -> str:
    """A decode error for a message: a ``ProtocolError`` says where; anything else (a decoder
    bug on unexpected bytes) is named by its class too."""
    return str(exc) if isinstance(exc, ProtocolError) else f"{type(exc).__name__}: {exc}"


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _unsupported_api_versions(body: memoryview) -> Any:
    """Read an ApiVersions answer to a version the broker does not support.

    Kafka brokers answer in a v0 body listing their ApiVersions range; others (librdkafka's
    mock cluster) send only the error code in a layout of their own. Either way the error code
    leads the body, which is all the fallback needs (the Java client relies on the same).
    """
    try:
        return ApiVersionsResponse.decode(body, 0)
    except ProtocolError:
        if len(body) >= 2 and int.from_bytes(body[:2], "big", signed=True) == _UNSUPPORTED_VERSION:
            return ApiVersionsResponse(error_code=_UNSUPPORTED_VERSION, api_keys=[])
        raise


def _write_pieces(transport: asyncio.Transport, pieces: list[Any]) -> None:
    """A frame in pieces (``encode_request_pieces``; most frames are one). From Python 3.12
    the selector transport's ``writelines`` hands several to one ``sendmsg`` and keeps what the
    socket did not take as views, uncopied; before 3.12 ``writelines`` joins them, so each is
    written in turn (the transport sends it at once while its buffer is empty, and copies it
    in otherwise)."""
    if _WRITELINES_GATHERS and len(pieces) > 1:
        transport.writelines(pieces)
    else:
        for piece in pieces:
            transport.write(piece)


_WRITELINES_GATHERS = sys.version_info >= (3, 12)
