"""Where socket, TLS and stream errors become aiokprod's errors: once, at the transport.

The standard library reports a refused connection, a reset, a TLS alert or a stream that
ended early as ``OSError``/``ssl.SSLError``/``asyncio.IncompleteReadError``/``TimeoutError``.
None of these may reach the producer: its rules decide by aiokprod's classes (retriable,
category), and an application's ``except OSError`` must never be what catches a Kafka failure.
So every place that touches a transport wraps the touching in :func:`map_exceptions`, and the
layers above handle ``KafkaError`` only (httpcore's ``map_exceptions`` is the same idea).

:func:`map_exceptions` takes an ordered mapping from a standard exception class to a factory
of the library's exception; the first class the error is an instance of wins, so a subclass
(``ssl.SSLError`` and ``TimeoutError`` are both ``OSError``\\ s) must come before its base.
The original error is kept as ``__cause__``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterator, Mapping

from aiokprod.errors import AuthenticationError, KafkaConnectionError, KafkaError

__all__ = ["ExceptionMapping", "map_exceptions", "transport_errors"]

#: standard exception class -> what it becomes (given the error); first match wins
ExceptionMapping = Mapping[type[BaseException], Callable[[BaseException], KafkaError]]


@contextlib.contextmanager
def map_exceptions(mapping: ExceptionMapping) -> Iterator[None]:
    """Re-raise the first matching standard exception as the library's, from the original.

    ``KafkaError`` and anything the mapping does not name (``CancelledError`` above all) pass
    through unchanged.
    """
    try:
        yield
    except KafkaError:
        raise
    except Exception as exc:
        for source, make in mapping.items():
            if isinstance(exc, source):
                raise make(exc) from exc
        raise


def transport_errors(name: str, *, timeout: str, tls: str) -> ExceptionMapping:
    """The mapping for opening a connection to a broker named ``name`` (for messages).

    ``timeout`` says which bound expired (the setting's name and value); ``tls`` names the
    security protocol. A TLS failure is an ``AuthenticationError``: an untrusted or mismatched
    certificate, or a peer that does not speak TLS, fails the same way on every retry. Any
    other socket or stream error is a retriable ``KafkaConnectionError``.
    """
    return {
        # asyncio.TimeoutError is TimeoutError (an OSError) since Python 3.11: before OSError
        asyncio.TimeoutError: lambda exc: KafkaConnectionError(
            f"{name}: connection setup did not finish within {timeout}"),
        ssl.SSLError: lambda exc: AuthenticationError(
            f"{name}: TLS handshake failed ({tls}): {_tls_reason(exc)}"),
        asyncio.IncompleteReadError: lambda exc: KafkaConnectionError(
            f"{name}: connection closed during set-up: {exc}"),
        OSError: lambda exc: KafkaConnectionError(f"{name}: cannot connect: {exc}"),
    }


def _tls_reason(exc: BaseException) -> object:
    return getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc
