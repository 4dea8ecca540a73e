"""One HTTPS form POST: how the built-in OAuth login talks to a token endpoint.

The exchange itself is ``aiokprod.network.http``'s; this module words its failures with the
login's settings and decides which may pass on another attempt. Connecting (TCP and the TLS
handshake) is bounded by ``sasl.login.connect.timeout.ms``, sending the request and reading the
whole answer by ``sasl.login.read.timeout.ms``; the messages name the setting.
``EndpointError.retriable`` follows Java's ``HttpJwtRetriever``: a refused connection, a
timeout or a 5xx may pass; a 4xx such as 401, an untrusted certificate or an answer too large
for a token will not.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

from aiokprod.network.http import HttpError, HttpResponse, display_url, exchange

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
    try:
        return await exchange(
            "POST", url, body,
            {"Content-Type": "application/x-www-form-urlencoded", **headers},
            ssl_context=ssl_context, connect_timeout_s=connect_timeout_ms / 1000,
            read_timeout_s=read_timeout_ms / 1000, max_response_bytes=MAX_RESPONSE_BYTES)
    except HttpError as exc:
        if exc.timed_out and exc.connecting:
            message = f"no connection within sasl.login.connect.timeout.ms={connect_timeout_ms}"
        elif exc.timed_out:
            message = f"no complete answer within sasl.login.read.timeout.ms={read_timeout_ms}"
        elif exc.too_large:
            message = f"{exc} for a token"
        else:
            message = str(exc)
        raise EndpointError(f"{shown}: {message}",
                            retriable=not (exc.tls or exc.too_large)) from None


def is_final_status(status: int) -> bool:
    """Whether an HTTP error status will not change by asking again (Java's list)."""
    return status in _FINAL_STATUSES
