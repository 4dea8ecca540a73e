"""A tiny Kafka-speaking server on loopback whose answers a test scripts.

Real brokers cannot be told to send a truncated frame, a wrong correlation id or nothing at
all; this server can. It still speaks real Kafka framing over a real socket, decoding requests
with the generated classes, so the connection under test runs its production code path.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokprod.protocol import API_BY_KEY, ApiVersionsResponse, ResponseHeader

Handler = Callable[["ScriptedRequest"], Awaitable[bytes | None] | bytes | None]


@dataclass
class ScriptedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the decoded request

    def respond(self, response: Any, *, version: int | None = None) -> bytes:
        """The full frame answering this request with ``response``."""
        version = self.api_version if version is None else version
        header_version = type(response).header_version(version)
        header = ResponseHeader(correlation_id=self.correlation_id).encode(header_version)
        body = response.encode(version)
        return struct.pack(">i", len(header) + len(body)) + header + body


# GetTelemetrySubscriptions and PushTelemetry
_TELEMETRY_APIS = frozenset({71, 72})


def api_versions_response(
    versions: dict[int, tuple[int, int]] | None = None, error_code: int = 0
) -> Any:
    if versions is None:
        # every API we speak but KIP-714's telemetry: a producer would interleave its
        # GetTelemetrySubscriptions with the exact exchanges the tests script (a test of
        # telemetry passes ``versions`` that include them)
        versions = {key: (req.MIN_VERSION, req.MAX_VERSION) for key, (req, _) in API_BY_KEY.items()
                    if key not in _TELEMETRY_APIS}
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(versions.items())
        ],
    )


@dataclass
class ScriptedBroker:
    """Answers ApiVersions itself (unless scripted) and hands every other request to a handler."""

    handler: Handler | None = None
    versions: dict[int, tuple[int, int]] | None = None
    received: list[ScriptedRequest] = field(default_factory=list)
    server: asyncio.AbstractServer | None = None
    port: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    # ApiVersions versions the broker rejects with UNSUPPORTED_VERSION (v0 body), for fallback tests
    reject_api_versions_above: int | None = None

    async def start(self) -> ScriptedBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        for w in self.writers:
            w.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def __aenter__(self) -> ScriptedBroker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                size_bytes = await reader.readexactly(4)
                (size,) = struct.unpack(">i", size_bytes)
                frame = await reader.readexactly(size)
                api_key, api_version = struct.unpack_from(">hh", frame, 0)
                request_cls = API_BY_KEY[api_key][0]
                header_version = request_cls.header_version(api_version)
                correlation_id, client_id, offset = _parse_request_header(frame, header_version)
                body = request_cls.decode(memoryview(frame)[offset:], api_version)
                req = ScriptedRequest(api_key, api_version, correlation_id, client_id, body)
                self.received.append(req)
                out = await self._answer(req)
                if out is not None:
                    writer.write(out)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, req: ScriptedRequest) -> bytes | None:
        if req.api_key == 18:
            limit = self.reject_api_versions_above
            if limit is not None and req.api_version > limit:
                # what a real broker does: UNSUPPORTED_VERSION in a v0 body, header v0
                resp = api_versions_response({18: (0, limit)}, error_code=35)
                body = resp.encode(0)
                header = struct.pack(">i", req.correlation_id)
                return struct.pack(">i", len(header) + len(body)) + header + body
            return req.respond(api_versions_response(self.versions))
        if self.handler is None:
            return None
        result = self.handler(req)
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            return await result
        return result  # type: ignore[return-value]


def _parse_request_header(frame: bytes, header_version: int) -> tuple[int, str | None, int]:
    """Correlation id, client id and body offset of a request frame (header v1 or v2)."""
    (correlation_id,) = struct.unpack_from(">i", frame, 4)
    (length,) = struct.unpack_from(">h", frame, 8)
    offset = 10
    client_id = None
    if length >= 0:
        client_id = frame[offset : offset + length].decode()
        offset += length
    if header_version >= 2:
        if frame[offset] != 0:
            raise ValueError("tagged fields in a request header are not expected here")
        offset += 1
    return correlation_id, client_id, offset
