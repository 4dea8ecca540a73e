"""One HTTPS form POST on asyncio streams: how the built-in OAuth login talks to a token endpoint.

Why not ``urllib`` or an HTTP library: ``urllib`` blocks the event loop (and a thread would
break the one-loop, no-threads rule), and ``httpx``/``aiohttp`` would be a dependency of the
core install for one request every few minutes. A token request is the simplest HTTP there is:
one POST on a fresh TLS connection with ``Connection: close``, a small JSON answer, read by
``Content-Length``, chunked encoding or to the end of the stream.

Every wait is bounded: connecting (TCP and the TLS handshake) by ``sasl.login.connect.timeout.ms``,
sending the request and reading the whole answer by ``sasl.login.read.timeout.ms``; the messages
name the setting. ``EndpointError.retriable`` tells the caller whether another attempt may help
(Java's ``HttpJwtRetriever`` rules: a refused connection, a timeout or a 5xx may pass; a 4xx
such as 401 or an untrusted certificate will not).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["MAX_RESPONSE_BYTES", "EndpointError", "HttpResponse", "display_url", "is_final_status",
           "post_form"]

# A token response is a few KiB; anything far larger is not a token endpoint.
MAX_RESPONSE_BYTES = 1 << 20

# Java's HttpJwtRetriever treats these as final: asking again will get the same answer.
_FINAL_STATUSES = frozenset({400, 401, 402, 403, 404, 405, 406, 407, 409, 410, 411, 412, 413,
                             414, 415, 501, 505})


class EndpointError(Exception):
    """A failed exchange with the endpoint; ``retriable`` says whether to try again."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


@dataclass(frozen=True)
class HttpResponse:
    """The status and body of one answer (headers are not needed by a token request)."""

    status: int
    body: bytes


def display_url(url: str) -> str:
    """The URL as messages show it: scheme, host, port and path, never a query or user info
    (either could carry a secret)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


async def post_form(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    ssl_context: ssl.SSLContext,
    connect_timeout_ms: int,
    read_timeout_ms: int,
) -> HttpResponse:
    """POST ``body`` (``application/x-www-form-urlencoded``) to the ``https://`` ``url``.

    Raises ``EndpointError`` naming the URL (as ``display_url`` shows it) and, for a timeout,
    the setting that bounded it. Cancellation closes the connection and propagates.
    """
    parts = urlsplit(url)
    shown = display_url(url)
    if parts.scheme != "https" or not parts.hostname:
        raise EndpointError(f"{shown}: not an https:// URL", retriable=False)
    host = parts.hostname
    port = parts.port or 443
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ssl_context, server_hostname=host,
                                    limit=64 * 1024),
            connect_timeout_ms / 1000)
    except asyncio.TimeoutError:
        raise EndpointError(f"{shown}: no connection within sasl.login.connect.timeout.ms="
                            f"{connect_timeout_ms}", retriable=True) from None
    except ssl.SSLError as exc:
        reason = getattr(exc, "verify_message", None) or exc.reason or exc
        raise EndpointError(f"{shown}: TLS handshake failed: {reason}",
                            retriable=False) from None
    except OSError as exc:
        raise EndpointError(f"{shown}: cannot connect: {exc.strerror or exc}",
                            retriable=True) from None
    try:
        host_header = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            host_header += f":{parts.port}"
        head = [f"POST {target} HTTP/1.1", f"Host: {host_header}",
                "Content-Type: application/x-www-form-urlencoded",
                f"Content-Length: {len(body)}", "Connection: close"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        try:
            return await asyncio.wait_for(_read_response(reader, shown), read_timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise EndpointError(f"{shown}: no complete answer within "
                                f"sasl.login.read.timeout.ms={read_timeout_ms}",
                                retriable=True) from None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise EndpointError(f"{shown}: the connection failed while reading the answer: "
                                f"{type(exc).__name__}", retriable=True) from None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            # TLS close_notify: bounded like the exchange itself
            await asyncio.wait_for(writer.wait_closed(), read_timeout_ms / 1000)


async def _read_response(reader: asyncio.StreamReader, shown: str) -> HttpResponse:
    status_line = await reader.readline()
    fields = status_line.decode("latin-1").split(None, 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not fields[1].isdigit():
        raise EndpointError(f"{shown}: not an HTTP/1.x answer", retriable=True)
    status = int(fields[1])
    length: int | None = None
    chunked = False
    while True:
        line = await reader.readline()
        if not line:
            raise EndpointError(f"{shown}: the answer ended inside its headers", retriable=True)
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "content-length" and value.isdigit():
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        body = await _read_chunked(reader, shown)
    elif length is not None:
        if length > MAX_RESPONSE_BYTES:
            raise EndpointError(f"{shown}: an answer of {length} bytes is too large for a "
                                f"token", retriable=False)
        body = await reader.readexactly(length)
    else:
        body = await reader.read(MAX_RESPONSE_BYTES + 1)
        while chunk := await reader.read(MAX_RESPONSE_BYTES + 1 - len(body)):
            body += chunk
    if len(body) > MAX_RESPONSE_BYTES:
        raise EndpointError(f"{shown}: the answer is too large for a token", retriable=False)
    return HttpResponse(status, body)


async def _read_chunked(reader: asyncio.StreamReader, shown: str) -> bytes:
    body = bytearray()
    while True:
        size_line = (await reader.readline()).split(b";")[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise EndpointError(f"{shown}: malformed chunked encoding", retriable=True) from None
        if size == 0:
            return bytes(body)
        if len(body) + size > MAX_RESPONSE_BYTES:
            raise EndpointError(f"{shown}: the answer is too large for a token",
                                retriable=False)
        body += await reader.readexactly(size)
        await reader.readexactly(2)  # the CRLF after each chunk


def is_final_status(status: int) -> bool:
    """Whether an HTTP error status will not change by asking again (Java's list)."""
    return status in _FINAL_STATUSES
