"""One TCP connection to one Kafka broker: framing, pipelining, timeouts, clean failure.

Why an ``asyncio.Protocol`` and not streams: the sender pipelines several Produce requests per
connection and the broker answers them strictly in order, so a response is matched to the head of
a FIFO of pending requests inside ``data_received``. That costs no coroutine, task or timer per
response; a reader coroutine awaiting ``readexactly`` twice per frame would.

Invariants (tests assert them through ``statistics()``):
- every request sent is either answered, failed with the cause, or still pending — never dropped;
- responses arrive in request order; a correlation id out of order is a ``ProtocolError`` that
  closes the connection, failing every pending request;
- one ``TimerHandle`` per connection watches the earliest request deadline; when a request
  outlives ``request_timeout_ms`` the connection is closed (as the Java client's NetworkClient
  does: a broker that does not answer one request cannot be trusted with the ones behind it).

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
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from aiokprod._error_codes import ErrorCode
from aiokprod._version import __version__
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
from aiokprod.network.security import (
    PLAINTEXT,
    SecurityOptions,
    authenticate,
    build_ssl_context,
    reauthentication_delay,
)
from aiokprod.network.transport import TransportConnector, tcp_connect
from aiokprod.protocol import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    KafkaRequest,
    KafkaResponse,
    decode_response_header,
    encode_request,
)

__all__ = [
    "BrokerConnection",
    "ConnectionStatistics",
    "KafkaRequest",
    "KafkaResponse",
    "TransportConnector",
    "tcp_connect",
]

log = logging.getLogger(__name__)

_R = TypeVar("_R")  # the response type of the request being sent

_SIZE = struct.Struct(">i")
_MAX_FRAME = 512 * 1024 * 1024  # a size beyond this is corruption, not a response
_API_VERSIONS_PREFERRED = 3  # KIP-511 client name/version arrive from v3 (flexible)
_UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION


class _Pending:
    """A request written to the socket whose response has not been matched yet."""

    __slots__ = ("api_key", "api_name", "correlation_id", "deadline", "future", "header_version",
                 "response_type", "sent_at", "version")

    def __init__(
        self,
        correlation_id: int,
        future: asyncio.Future[Any],
        response_type: type[Any],
        version: int,
        header_version: int,
        deadline: float,
        api_name: str,
        sent_at: float,
        api_key: int,
    ) -> None:
        self.api_key = api_key  # for per-API latency metrics
        self.correlation_id = correlation_id  # matched against the response header
        self.future = future  # resolved with the decoded response body
        self.response_type = response_type  # decodes the body
        self.version = version  # the version the request was encoded with
        self.header_version = header_version  # response header layout to expect
        self.deadline = deadline  # monotonic time after which the connection is given up
        self.api_name = api_name  # for error messages
        self.sent_at = sent_at  # latency measurement


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


class _WireProtocol(asyncio.Protocol):
    """Adapts asyncio's transport callbacks to the connection; holds only the partial frame."""

    def __init__(self, conn: BrokerConnection) -> None:
        self._conn = conn
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._conn._on_connection_made(cast(asyncio.Transport, transport))

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        pos = 0
        end = len(buf)
        conn = self._conn
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 4 or size > _MAX_FRAME:
                conn._fail(ProtocolError(f"{conn._name}: invalid response frame size {size}"))
                return
            if end - pos - 4 < size:
                break
            frame = bytes(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            conn._bytes_received += size + 4
            if not conn._on_frame(frame):
                return
        if pos:
            del buf[:pos]

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost reports it

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn._on_connection_lost(exc)

    def pause_writing(self) -> None:
        self._conn._write_paused = True

    def resume_writing(self) -> None:
        self._conn._on_resume_writing()


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
        self._pending: deque[_Pending] = deque()
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
        # Called with (api_key, latency_seconds) for every answered request: the metrics hook.
        self.on_latency: Callable[[int, float], None] | None = None
        # KIP-368: while re-authenticating, other requests wait here (request, version,
        # timeout_ms, expect_response, future) and go out, in order, once it is done
        self._held: list[tuple[KafkaRequest[Any], int | None, int | None, bool,
                               asyncio.Future[Any]]] | None = None
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        # SASL session lifetime the broker gave (ms; 0: none) and re-authentications done
        self.session_lifetime_ms = 0
        self.reauthentications = 0
        # set once open() finished (TLS, ApiVersions, SASL): failures before it are set-up ones
        self._established = False

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
        connect = tcp_connect if connector is None else connector
        context = conn._security.ssl_context
        if connector is None and conn._security.uses_tls:
            if context is None:
                context = build_ssl_context()
            connect = functools.partial(tcp_connect, ssl_context=context)
        errors = transport_errors(
            conn._name, tls=conn._security.protocol,
            timeout=f"socket.connection.setup.timeout.ms={round(connect_timeout_ms)}")
        try:
            with map_exceptions(errors):
                await asyncio.wait_for(
                    conn._setup(connect, send_buffer_bytes, receive_buffer_bytes),
                    connect_timeout_ms / 1000)
        except KafkaError as exc:
            conn.close(exc)
            raise
        except BaseException:
            conn.close(KafkaConnectionError(f"{conn._name}: connection setup abandoned"))
            raise
        conn._established = True
        return conn

    async def _setup(self, connect: TransportConnector, send_buffer_bytes: int,
                     receive_buffer_bytes: int) -> None:
        await connect(self.host, self.port, lambda: _WireProtocol(self), send_buffer_bytes,
                      receive_buffer_bytes)
        await self._handshake()
        if self._security.uses_sasl:
            await self._authenticate()

    # ---- SASL (KIP-368 re-authentication included) ------------------------------------------

    async def _authenticate(self) -> None:
        lifetime = await authenticate(self._request_now, self.broker_versions, self._security,
                                      broker=self._name)
        self.session_lifetime_ms = lifetime
        delay = reauthentication_delay(lifetime)
        if delay is not None and self._closed_cause is None:
            self._reauth_timer = self._loop.call_later(delay, self._start_reauthentication)

    def _start_reauthentication(self) -> None:
        """The session nears its end: authenticate again on this same connection.

        Requests already written stay in the pipeline (the broker answers them in order before
        the SASL ones); requests sent meanwhile are held and written afterwards, in order, so
        nothing fails and nothing is reordered.
        """
        self._reauth_timer = None
        if self._closed_cause is not None:
            return
        self._held = []
        self._reauth_task = self._loop.create_task(
            self._reauthenticate(), name=f"aiokprod-reauth[{self.node_id}]")

    async def _reauthenticate(self) -> None:
        try:
            await self._authenticate()
        except BaseException as exc:
            cause = exc if isinstance(exc, KafkaError) else AuthenticationError(
                f"{self._name}: re-authentication failed: {type(exc).__name__}: {exc}")
            self._fail(cause)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        finally:
            self._reauth_task = None
        self.reauthentications += 1
        log.debug("%s: re-authenticated (session lifetime %d ms)", self._name,
                  self.session_lifetime_ms)
        held, self._held = self._held or [], None
        for request, version, timeout_ms, expect, future in held:
            _chain(self._send_now(request, version, timeout_ms, expect), future)
        if self.on_writable is not None and self.writable:
            self.on_writable()

    def _request_now(self, request: KafkaRequest[_R], version: int) -> asyncio.Future[_R]:
        """Send past the re-authentication hold: the SASL exchange itself."""
        # expect_response=True: the future resolves to a decoded response, never to None
        return cast("asyncio.Future[_R]", self._send_now(request, version, None, True))

    async def _handshake(self) -> None:
        """ApiVersions v3 (client name/version), falling back on UNSUPPORTED_VERSION.

        A broker that does not know v3 answers with error 35 and its own ApiVersions range in a
        v0 body; we then retry with the highest version it named (v0 for old brokers).
        """
        request = ApiVersionsRequest(
            client_software_name=self._software[0],
            client_software_version=self._software[1],
        )
        version = _API_VERSIONS_PREFERRED
        for _ in range(3):
            response = await self.request(request, version=version)
            if response.error_code == _UNSUPPORTED_VERSION:
                offered = [k for k in response.api_keys if k.api_key == ApiVersionsRequest.API_KEY]
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

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def writable(self) -> bool:
        """Connected and not write-paused: more requests would not just pile up in memory."""
        return not self._write_paused and self._transport is not None and \
            self._closed_cause is None and self._held is None

    @property
    def paused(self) -> bool:
        return self._write_paused

    @property
    def write_buffer_size(self) -> int:
        transport = self._transport
        return 0 if transport is None or transport.is_closing() else \
            transport.get_write_buffer_size()

    @property
    def busy(self) -> bool:
        """Requests await answers, or unanswered ones still wait to leave the buffer."""
        return bool(self._pending or self._unflushed)

    def idle_for(self, now: float) -> float:
        """Seconds with nothing in flight and nothing written or read; 0 while busy."""
        if self._pending or self._unflushed:
            return 0.0
        return max(0.0, now - self.last_activity)

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
        held = self._held
        if held is not None and self._closed_cause is None:
            waiting: asyncio.Future[_R | None] = self._loop.create_future()
            held.append((request, version, timeout_ms, expect_response, waiting))
            return waiting
        return self._send_now(request, version, timeout_ms, expect_response)

    def _send_now(self, request: KafkaRequest[_R], version: int | None, timeout_ms: int | None,
                  expect_response: bool) -> asyncio.Future[_R | None]:
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
        frame = encode_request(request, version, correlation_id, self.client_id)
        now = self._clock()
        self.last_activity = now
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        deadline = now + timeout
        if expect_response:
            response_type: type[Any] = request.RESPONSE_TYPE
            self._pending.append(_Pending(
                correlation_id, future, response_type, version,
                response_type.header_version(version), deadline, request.API_NAME, now,
                request.API_KEY))
            if deadline < self._timer_deadline:
                self._arm_timer(deadline)
        transport.write(frame)
        self.requests_sent += 1
        self.bytes_sent += len(frame)
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

    def _on_resume_writing(self) -> None:
        """The buffer drained below the low-water mark: what was waiting in it is sent."""
        self._write_paused = False
        unflushed, self._unflushed = self._unflushed, deque()
        for _, future in unflushed:
            if not future.done():
                future.set_result(None)
        if self.on_writable is not None and self._closed_cause is None:
            self.on_writable()

    # ---- receiving -------------------------------------------------------------------------

    def _on_frame(self, frame: bytes) -> bool:
        """Match one response frame to the oldest pending request. False if the link broke."""
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
        if self.on_latency is not None:
            self.on_latency(pending.api_key, self._clock() - pending.sent_at)
        if not pending.future.done():
            pending.future.set_result(response)
        return True

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

    # ---- closing ---------------------------------------------------------------------------

    def _on_connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def _on_connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError) and not self._established:
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
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        held, self._held = self._held, None
        for _, _, _, _, future in held or ():
            if not future.done():
                future.set_exception(cause)
        if self._reauth_task is not None and self._reauth_task is not asyncio.current_task():
            self._reauth_task.cancel()
        if self._transport is not None:
            self._transport.abort()
        if first and self.on_close is not None:
            self.on_close()

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


def _chain(source: asyncio.Future[Any], target: asyncio.Future[Any]) -> None:
    """Complete ``target`` as ``source`` completes (a held request's caller-facing future)."""
    def copy(done: asyncio.Future[Any]) -> None:
        if target.done():
            if not done.cancelled():
                done.exception()
            return
        if done.cancelled():
            target.cancel()
        elif done.exception() is not None:
            target.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


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
