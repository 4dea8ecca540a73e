"""One HTTP/1.1 exchange on asyncio streams: how the OAuth login asks a token endpoint
(``https_post``) and the Schema Registry client asks a registry (``aiokprod.schema_registry``).

Why our own and not ``urllib`` or an HTTP library: ``urllib`` blocks the event loop (a thread
would break the one-loop rule), and ``httpx``/``aiohttp`` would be a dependency with its own
timeouts and retry rules beside ours, for requests made once every few minutes (a token) or on
a cache miss (a schema's first record per topic), where pooling and HTTP/2 buy nothing. An
exchange is one request on a fresh connection (``Connection: close``), its answer read by
``Content-Length``, chunked encoding or to the end of the stream; TLS is ``ssl``'s.

Every wait is bounded: connecting (TCP and the TLS handshake) by ``connect_timeout_s``, sending
the request and reading the whole answer by ``read_timeout_s``, closing by the latter too.
``HttpError`` says which step failed and how; each caller words it with its own settings' names
and decides what is worth another attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiokprod._waits import wait_within

__all__ = ["HttpError", "HttpResponse", "display_url", "exchange"]


class HttpError(Exception):
    """No usable answer. ``connecting``: the connection (or its TLS handshake) was not made;
    ``timed_out``: that step's bound passed; ``tls``: the handshake failed (an untrusted
    certificate will not be trusted on the next attempt either); ``too_large``: the answer
    exceeded the caller's limit."""

    def __init__(self, message: str, *, connecting: bool = False, timed_out: bool = False,
                 tls: bool = False, too_large: bool = False) -> None:
        super().__init__(message)
        self.connecting = connecting
        self.timed_out = timed_out
        self.tls = tls
        self.too_large = too_large


@dataclass(frozen=True)
class HttpResponse:
    """The status and body of one answer (no caller needs its headers)."""

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


async def exchange(method: str, url: str, body: bytes | None, headers: Mapping[str, str], *,
                   ssl_context: ssl.SSLContext | None, connect_timeout_s: float,
                   read_timeout_s: float, max_response_bytes: int) -> HttpResponse:
    """Send one request to ``url`` (``http://`` or ``https://``, the latter with
    ``ssl_context``) and read its whole answer; ``HttpError`` if there is none. Cancellation
    closes the connection and propagates."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    context = ssl_context if secure else None
    try:
        reader, writer = await wait_within(
            asyncio.open_connection(host, port, ssl=context,
                                    server_hostname=host if context else None, limit=64 * 1024),
            connect_timeout_s, discard=lambda opened: opened[1].close())
    except asyncio.TimeoutError:
        raise HttpError("no connection in time", connecting=True, timed_out=True) from None
    except ssl.SSLError as exc:
        reason = getattr(exc, "verify_message", None) or exc.reason or exc
        raise HttpError(f"TLS handshake failed: {reason}", connecting=True, tls=True) from None
    except OSError as exc:
        raise HttpError(f"cannot connect: {exc.strerror or exc}", connecting=True) from None
    try:
        host_header = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            host_header += f":{parts.port}"
        payload = body or b""
        head = [f"{method} {target} HTTP/1.1", f"Host: {host_header}",
                f"Content-Length: {len(payload)}", "Connection: close"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        try:
            return await wait_within(_read_response(reader, max_response_bytes), read_timeout_s)
        except asyncio.TimeoutError:
            raise HttpError("no complete answer in time", timed_out=True) from None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise HttpError(f"the connection failed while reading the answer: "
                            f"{type(exc).__name__}") from None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            # TLS close_notify: bounded like the exchange itself
            await wait_within(writer.wait_closed(), read_timeout_s)


async def _read_response(reader: asyncio.StreamReader, limit: int) -> HttpResponse:
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
        return HttpResponse(status, await _read_chunked(reader, limit))
    if length is not None:
        if length > limit:
            raise HttpError(f"an answer of {length} bytes is too large", too_large=True)
        return HttpResponse(status, await reader.readexactly(length))
    data = await reader.read(limit + 1)
    while chunk := await reader.read(limit + 1 - len(data)):
        data += chunk
    if len(data) > limit:
        raise HttpError("the answer is too large", too_large=True)
    return HttpResponse(status, data)


async def _read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    body = bytearray()
    while True:
        size_line = (await reader.readline()).split(b";")[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise HttpError("malformed chunked encoding") from None
        if size == 0:
            return bytes(body)
        if len(body) + size > limit:
            raise HttpError("the answer is too large", too_large=True)
        body += await reader.readexactly(size)
        await reader.readexactly(2)  # the CRLF after each chunk
