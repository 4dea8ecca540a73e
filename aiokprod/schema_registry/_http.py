"""One HTTP/1.1 exchange on asyncio streams: how the registry client talks to a Schema Registry.

Why our own and not ``httpx``/``aiohttp``: the registry is asked only on a cache miss (a
schema's first record per topic), so pooling and HTTP/2 buy nothing, while a client library
would be one more dependency with its own timeouts and retry rules beside ours. An exchange is
one request on a fresh connection (``Connection: close``), its answer read by
``Content-Length``, chunked encoding or to the end of the stream; TLS is ``ssl``'s.
``aiokprod/network/https_post.py`` does the same for OAuth token requests.

The whole exchange (connect, TLS handshake, request, answer) is bounded by one timeout, which
the caller names in its messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["MAX_RESPONSE_BYTES", "HttpError", "HttpResponse", "exchange"]

# a schema with its references is KiBs; an answer far larger is not a registry's
MAX_RESPONSE_BYTES = 16 << 20


class HttpError(Exception):
    """No answer: the connection, TLS or the stream failed, or the bound passed."""

    def __init__(self, message: str, *, timed_out: bool = False, tls: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.tls = tls


@dataclass(frozen=True)
class HttpResponse:
    """The status and body of one answer."""

    status: int
    body: bytes


async def exchange(method: str, url: str, body: bytes | None, headers: Mapping[str, str], *,
                   ssl_context: ssl.SSLContext | None, timeout_s: float) -> HttpResponse:
    """Send one request to ``url`` (``http://`` or ``https://``) and read its answer, all
    within ``timeout_s``; ``HttpError`` if there is no answer."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        return await asyncio.wait_for(
            _exchange(method, host, port, target, parts.port, body, headers,
                      ssl_context if secure else None), timeout_s)
    except asyncio.TimeoutError:
        raise HttpError("no answer in time", timed_out=True) from None


async def _exchange(method: str, host: str, port: int, target: str, given_port: int | None,
                    body: bytes | None, headers: Mapping[str, str],
                    ssl_context: ssl.SSLContext | None) -> HttpResponse:
    try:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=ssl_context, server_hostname=host if ssl_context else None,
            limit=64 * 1024)
    except ssl.SSLError as exc:
        reason = getattr(exc, "verify_message", None) or exc.reason or exc
        raise HttpError(f"TLS handshake failed: {reason}", tls=True) from None
    except OSError as exc:
        raise HttpError(f"cannot connect: {exc.strerror or exc}") from None
    try:
        host_header = f"[{host}]" if ":" in host else host
        if given_port is not None:
            host_header += f":{given_port}"
        payload = body or b""
        head = [f"{method} {target} HTTP/1.1", f"Host: {host_header}",
                f"Content-Length: {len(payload)}", "Connection: close"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        try:
            return await _read_response(reader)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise HttpError(f"the connection failed while reading the answer: "
                            f"{type(exc).__name__}") from None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _read_response(reader: asyncio.StreamReader) -> HttpResponse:
    status_line = await reader.readline()
    fields = status_line.decode("latin-1").split(None, 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not fields[1].isdigit():
        raise HttpError("not an HTTP/1.x answer")
    status = int(fields[1])
    length: int | None = None
    chunked = False
    while True:
        line = await reader.readline()
        if not line:
            raise HttpError("the answer ended inside its headers")
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "content-length" and value.isdigit():
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        body = bytearray()
        while True:
            size_line = (await reader.readline()).split(b";")[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise HttpError("malformed chunked encoding") from None
            if size == 0:
                break
            if len(body) + size > MAX_RESPONSE_BYTES:
                raise HttpError("the answer is too large for a schema registry's")
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        return HttpResponse(status, bytes(body))
    if length is not None:
        if length > MAX_RESPONSE_BYTES:
            raise HttpError("the answer is too large for a schema registry's")
        return HttpResponse(status, await reader.readexactly(length))
    data = await reader.read(MAX_RESPONSE_BYTES + 1)
    while chunk := await reader.read(MAX_RESPONSE_BYTES + 1 - len(data)):
        data += chunk
    if len(data) > MAX_RESPONSE_BYTES:
        raise HttpError("the answer is too large for a schema registry's")
    return HttpResponse(status, data)
