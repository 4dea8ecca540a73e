"""A connection's session: set-up (ApiVersions, SASL) and SASL re-authentication (KIP-368).

``connection.py`` frames and pipelines requests; this module decides what goes over a new
connection before it is usable, and what happens when a SASL session nears its end:

* **Set-up** (:func:`set_up`): dial, ApiVersions (v3 with the client's name and version,
  KIP-511, falling back to the version the broker names), then SASL when the security protocol
  asks for it. ``BrokerConnection.open`` bounds all of it by one timeout and maps its errors.
* **Re-authentication** (:class:`Session`): the broker gave the session a lifetime; at 85–95%
  of it (``security.reauthentication_delay``) the client authenticates again on the same
  connection. Requests already written stay in the pipeline (the broker answers them in order
  before the SASL ones); requests sent meanwhile are *held* and written afterwards, in order, so
  nothing fails and nothing is reordered. A failed re-authentication fails the connection.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any, TypeVar, cast

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import (
    AuthenticationError,
    KafkaConnectionError,
    KafkaError,
    ProtocolError,
    UnsupportedVersionError,
    raise_for_error_code,
)
from aiokprod.network.errors import map_exceptions, transport_errors
from aiokprod.network.security import authenticate, build_ssl_context, reauthentication_delay
from aiokprod.network.transport import TransportConnector, tcp_connect
from aiokprod.protocol import ApiVersionsRequest, ApiVersionsResponse, KafkaRequest

if TYPE_CHECKING:
    from aiokprod.network.connection import BrokerConnection

__all__ = ["Session", "open_session", "set_up", "unsupported_api_versions"]

log = logging.getLogger(__name__)

_R = TypeVar("_R")
_API_VERSIONS_PREFERRED = 3  # KIP-511 client name/version arrive from v3 (flexible)
_UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION

# a request sent while re-authenticating: (request, version, timeout_ms, expect_response,
# the caller's future)
Held = tuple[KafkaRequest[Any], "int | None", "int | None", bool, asyncio.Future[Any]]


async def open_session(conn: BrokerConnection, *, connect_timeout_ms: float,
                       send_buffer_bytes: int, receive_buffer_bytes: int,
                       connector: TransportConnector | None) -> None:
    """Set ``conn`` up, bounded by ``connect_timeout_ms`` (socket.connection.setup.timeout.ms),
    with every transport error mapped (``errors.transport_errors``); on any failure, or
    cancellation, the half-open connection is closed and nothing is left running."""
    connect = tcp_connect if connector is None else connector
    security = conn.security
    if connector is None and security.uses_tls:
        context = security.ssl_context if security.ssl_context is not None \
            else build_ssl_context()
        connect = functools.partial(tcp_connect, ssl_context=context)
    errors = transport_errors(
        conn.name, tls=security.protocol,
        timeout=f"socket.connection.setup.timeout.ms={round(connect_timeout_ms)}")
    try:
        with map_exceptions(errors):
            await asyncio.wait_for(
                set_up(conn, connect, send_buffer_bytes, receive_buffer_bytes),
                connect_timeout_ms / 1000)
    except KafkaError as exc:
        conn.close(exc)
        raise
    except BaseException:
        conn.close(KafkaConnectionError(f"{conn.name}: connection setup abandoned"))
        raise
    conn.established = True


async def set_up(conn: BrokerConnection, connect: TransportConnector, send_buffer_bytes: int,
                 receive_buffer_bytes: int) -> None:
    """Dial, negotiate API versions, authenticate: everything before ``conn`` is usable."""
    await connect(conn.host, conn.port, conn.protocol_factory, send_buffer_bytes,
                  receive_buffer_bytes)
    await negotiate_versions(conn)
    if conn.security.uses_sasl:
        await conn.session.authenticate()


async def negotiate_versions(conn: BrokerConnection) -> None:
    """ApiVersions v3 (client name/version), falling back on UNSUPPORTED_VERSION.

    A broker that does not know v3 answers with error 35 and its own ApiVersions range in a
    v0 body; we then retry with the highest version it named (v0 for old brokers).
    """
    name, software_version = conn.software
    request = ApiVersionsRequest(client_software_name=name,
                                 client_software_version=software_version)
    version = _API_VERSIONS_PREFERRED
    for _ in range(3):
        response = await conn.request(request, version=version)
        if response.error_code == _UNSUPPORTED_VERSION:
            offered = [k for k in response.api_keys if k.api_key == ApiVersionsRequest.API_KEY]
            fallback = min(offered[0].max_version, version - 1) if offered else 0
            if fallback < 0 or fallback >= version:
                break
            log.debug("%s: ApiVersions v%d unsupported, retrying v%d",
                      conn.name, version, fallback)
            version = fallback
            continue
        if response.error_code != ErrorCode.NONE:
            raise_for_error_code(response.error_code, f"{conn.name}: ApiVersions")
        conn.broker_versions = {
            k.api_key: (k.min_version, k.max_version) for k in response.api_keys
        }
        conn.api_versions_version = version
        return
    raise UnsupportedVersionError(f"{conn.name}: broker accepts no ApiVersions version")


def unsupported_api_versions(body: memoryview) -> Any:
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


class Session:
    """One connection's SASL session: its lifetime, the re-authentication timer and task, and
    the requests held while re-authenticating (see the module docstring)."""

    def __init__(self, conn: BrokerConnection) -> None:
        self._conn = conn
        # requests sent while re-authenticating, written in order once it is done
        self.held: list[Held] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        # SASL session lifetime the broker gave (ms; 0: none) and re-authentications done
        self.lifetime_ms = 0
        self.reauthentications = 0

    @property
    def holding(self) -> bool:
        """Re-authenticating: requests are held, not written."""
        return self.held is not None

    async def authenticate(self) -> None:
        """Authenticate (again) and schedule the next re-authentication, if the session ends."""
        conn = self._conn
        lifetime = await authenticate(self._request_now, conn.broker_versions, conn.security,
                                      broker=conn.name)
        self.lifetime_ms = lifetime
        delay = reauthentication_delay(lifetime)
        if delay is not None and conn.closed_cause is None:
            self._timer = asyncio.get_running_loop().call_later(delay, self._start)

    def _request_now(self, request: KafkaRequest[_R], version: int) -> asyncio.Future[_R]:
        """Send past the hold: the SASL exchange itself."""
        # expect_response=True: the future resolves to a decoded response, never to None
        return cast("asyncio.Future[_R]", self._conn.write(request, version, None, True))

    def _start(self) -> None:
        self._timer = None
        if self._conn.closed_cause is not None:
            return
        self.held = []
        self._task = asyncio.get_running_loop().create_task(
            self._reauthenticate(), name=f"aiokprod-reauth[{self._conn.node_id}]")

    async def _reauthenticate(self) -> None:
        conn = self._conn
        try:
            await self.authenticate()
        except BaseException as exc:
            cause = exc if isinstance(exc, KafkaError) else AuthenticationError(
                f"{conn.name}: re-authentication failed: {type(exc).__name__}: {exc}")
            conn.close(cause)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        finally:
            self._task = None
        self.reauthentications += 1
        log.debug("%s: re-authenticated (session lifetime %d ms)", conn.name, self.lifetime_ms)
        held, self.held = self.held or [], None
        for request, version, timeout_ms, expect, future in held:
            _chain(conn.write(request, version, timeout_ms, expect), future)
        if conn.on_writable is not None and conn.writable:
            conn.on_writable()

    def close(self, cause: KafkaError) -> None:
        """The connection closed: stop the timer and the task, fail what was held."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self.held = self.held, None
        for _, _, _, _, future in held or ():
            if not future.done():
                future.set_exception(cause)
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()


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
