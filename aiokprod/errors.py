"""Every exception aiokprod raises, in one tree.

    Exception
     └── KafkaError                              code, retriable, message
          ├── BrokerResponseError                an error code returned by a broker
          │    ├── NotLeaderOrFollowerError      one class per ErrorCode (generated)
          │    ├── UnsupportedVersionError       also raised client-side: no usable API version
          │    ├── InvalidTopicError
          │    │    └── IllegalTopicNameError    (also ValueError) caught before sending
          │    ├── ...                           (UnknownServerError, RequestTimedOutError, ...)
          │    └── UnrecognizedBrokerError       codes this client does not know (per-code subclass)
          ├── ConfigError                        (also ValueError) invalid producer configuration
          ├── SerializationError                 (also ValueError) a serializer failed
          ├── RecordTooLargeError                (also ValueError) a record can never fit
          ├── KafkaTimeoutError                  a bounded wait expired
          │    ├── BufferExhaustedError          no buffer memory within max.block.ms
          │    └── ClientRequestTimeoutError     no response within request.timeout.ms
          ├── KafkaConnectionError               socket refused/reset/closed
          ├── ProtocolError                      malformed or truncated bytes from a broker
          ├── AuthenticationError                TLS or SASL authentication failed
          ├── ProducerClosedError                the producer is closed or closing
          ├── TransactionAbortedError            a queued record dropped by abort_transaction()
          └── IllegalStateError                  (also RuntimeError) an illegal state transition

No class derives from ``OSError`` (nor from ``TimeoutError`` or ``ConnectionError``, which are
``OSError`` subclasses): an ``except OSError`` around file or socket code of the application
never swallows a ``KafkaTimeoutError``, and ``except KafkaError`` is the one clause that catches
everything aiokprod raises. Socket, TLS and stream errors are turned into these classes once,
where the network layer touches the transport (``aiokprod.network.errors.map_exceptions``),
so nothing above it sees an ``OSError``.

Three timeouts, three meanings:

* ``KafkaTimeoutError`` — a user-facing bound expired: max.block.ms (waiting for metadata or
  buffer memory in ``send()``), delivery.timeout.ms (a record's future) or ``flush(timeout=)``.
  This is the one to catch around ``send()`` and on record futures (Java's
  ``TimeoutException``). ``BufferExhaustedError`` is its max.block.ms-for-memory case.
* ``ClientRequestTimeoutError`` (old name ``RequestTimeoutError``, kept as an alias) — this
  client waited request.timeout.ms for one response on one connection and gave up; the
  connection is closed and the retry policy decides what happens to the records. A
  ``KafkaTimeoutError`` too, so catching that covers it.
* ``RequestTimedOutError`` — the *broker's* error code 7, ``REQUEST_TIMED_OUT``: the broker
  itself timed out (for example waiting for acks=all replication). A ``BrokerResponseError``,
  retriable, not a ``KafkaTimeoutError``.

Two layers decide about retries: ``retriable`` on each class is the broker's (or, for
client-side classes, this library's) view of whether the same operation may succeed later;
``producer.retry_policy`` makes the client's decision and may differ on purpose.

Every class also carries ``category`` (:class:`ErrorCategory`, KIP-1050): retriable,
abortable, application-recoverable, invalid-configuration or fatal — what the application
should do about it. ``retriable`` and ``category`` agree: a class whose category is
``RETRIABLE`` is retriable; the reverse fails only where this client does not retry what the
broker calls retriable (``CorruptMessageError``). docs/api/errors.md tabulates them all.

The per-code classes live in the generated ``aiokprod/_broker_errors.py``, written by
``tools/gen_protocol.py`` from ``tools/kafka-specs/kafka-error-codes.tsv``: edit the table and
regenerate (``make gen``) rather than editing them. This module re-exports all of them, so
``from aiokprod.errors import NotLeaderOrFollowerError`` is the way to import one.
"""

from __future__ import annotations

from aiokprod import _broker_errors
from aiokprod._broker_errors import *  # noqa: F403  (one class per error code, re-exported)
from aiokprod._broker_errors import BROKER_ERRORS_BY_CODE, InvalidTopicError
from aiokprod._error_base import BrokerResponseError, ErrorCategory, KafkaError
from aiokprod._error_codes import ErrorCode

__all__ = [
    "AuthenticationError",
    "BrokerResponseError",
    "BufferExhaustedError",
    "ClientRequestTimeoutError",
    "ConfigError",
    "ErrorCategory",
    "IllegalStateError",
    "IllegalTopicNameError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "ProducerClosedError",
    "ProtocolError",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "SerializationError",
    "TransactionAbortedError",
    "UnrecognizedBrokerError",
    "error_for_code",
    "raise_for_error_code",
]
__all__ += _broker_errors.__all__


class UnrecognizedBrokerError(BrokerResponseError):
    """Base for error codes newer than this client's table; ``error_for_code`` makes one
    subclass per such code so the number survives to the caller."""

    retriable = False
    category = ErrorCategory.ABORTABLE


class ConfigError(KafkaError, ValueError):
    """The producer configuration is invalid; raised before anything is sent."""

    retriable = False
    category = ErrorCategory.INVALID_CONFIGURATION
    message = "Invalid producer configuration."


class SerializationError(KafkaError, ValueError):
    """A key or value serializer failed or returned something other than bytes."""

    retriable = False
    category = ErrorCategory.ABORTABLE
    message = "Could not serialize the record."


class RecordTooLargeError(KafkaError, ValueError):
    """A record is larger than max_request_size or buffer_memory, so it can never be sent.

    Client-side check; the broker's own verdict is ``MessageTooLargeError`` (code 10).
    """

    retriable = False
    category = ErrorCategory.ABORTABLE
    message = "The record is larger than the producer can ever send."


class KafkaTimeoutError(KafkaError):
    """A bounded wait expired; the message names the config value that bounds it.

    Raised as is for the user-facing bounds: max.block.ms (metadata in ``send()``,
    ``partitions_for()``), delivery.timeout.ms (a record's future) and ``flush(timeout=)``.
    Java's ``org.apache.kafka.common.errors.TimeoutException``. Not a ``TimeoutError``
    (an ``OSError``): catch it by this name or as a ``KafkaError``.
    """

    retriable = True
    category = ErrorCategory.RETRIABLE
    message = "The operation timed out."


class BufferExhaustedError(KafkaTimeoutError):
    """No buffer memory became free within max_block_ms."""

    message = "Failed to allocate buffer memory within max_block_ms."


class ClientRequestTimeoutError(KafkaTimeoutError):
    """The client gave up on one request after request.timeout.ms: no response arrived (or, with
    acks=0, the request could not even be written), and the connection is closed.

    Measured by this client, unlike the broker's ``RequestTimedOutError`` (code 7). The request
    may still have been applied, which is why idempotence, not the caller, decides what a retry
    means. Records whose request timed out are normally retried, so ``send()`` callers rarely
    see this; they see ``KafkaTimeoutError`` once delivery.timeout.ms expires.
    """

    message = "The broker did not answer within request.timeout.ms."


# The class's earlier name, kept so that existing imports and handlers work: one class, two names.
RequestTimeoutError = ClientRequestTimeoutError


class KafkaConnectionError(KafkaError):
    """A connection to a broker was refused, reset or closed; retrying on a new connection
    may succeed. Not a ``ConnectionError`` (an ``OSError``); the socket's own error is its
    ``__cause__``."""

    retriable = True
    category = ErrorCategory.RETRIABLE
    message = "Connection to the broker failed."

    def __init__(
        self,
        message: str | None = None,
        *,
        node_id: int | None = None,
        address: str | None = None,
    ) -> None:
        text = type(self).message if message is None else message
        if node_id is not None or address is not None:
            text = f"{text} (node {node_id}, {address})"
        super().__init__(text)
        self.node_id = node_id
        self.address = address


class ProtocolError(KafkaError):
    """Bytes from a broker could not be decoded (truncated, malformed, trailing data).

    Not retriable by itself: the connection is no longer in a known state and is closed; the
    retry policy decides whether the affected batches are retried on a new connection.
    """

    retriable = False
    category = ErrorCategory.ABORTABLE
    message = "Malformed data received from the broker."


class ProducerClosedError(KafkaError):
    """The producer is closed or closing and accepts no more records."""

    retriable = False
    category = ErrorCategory.FATAL
    message = "The producer is closed."


class TransactionAbortedError(KafkaError):
    """The record was never sent: its transaction was aborted while it was still queued
    (Java's ``TransactionAbortedException``, KIP-654). Nothing to handle beyond the abort
    itself; the producer carries on with the next transaction."""

    retriable = False
    category = ErrorCategory.ABORTABLE
    message = "The transaction was aborted before the record was sent."


class IllegalStateError(KafkaError, RuntimeError):
    """A state machine was asked for a transition its table does not allow; a bug or misuse."""

    retriable = False
    category = ErrorCategory.FATAL
    message = "Illegal state transition."


_UNRECOGNIZED: dict[int, type[BrokerResponseError]] = {}


def error_for_code(code: int) -> type[BrokerResponseError]:
    """The exception class for a broker error code; unknown codes get a cached subclass of
    :class:`UnrecognizedBrokerError` whose ``code`` is the number received."""
    known = BROKER_ERRORS_BY_CODE.get(code)
    if known is not None:
        return known
    cls = _UNRECOGNIZED.get(code)
    if cls is None:
        cls = type(
            f"UnrecognizedBrokerError{code}",
            (UnrecognizedBrokerError,),
            {
                "code": code,
                "error_code": ErrorCode.of(code),
                "message": f"Unrecognized broker error code {code}.",
                "__module__": __name__,
            },
        )
        _UNRECOGNIZED[code] = cls
    return cls


def raise_for_error_code(code: int, context: str) -> None:
    """Raise the error for ``code`` unless it is 0, prefixing the default message with
    ``context`` (for example ``"Produce to orders-3"``) so logs say where it happened."""
    if code == ErrorCode.NONE:
        return
    cls = error_for_code(code)
    raise cls(f"{context}: {cls.message}")


class IllegalTopicNameError(InvalidTopicError, ValueError):
    """A topic name the broker would refuse, caught before anything is queued.

    The client-side twin of INVALID_TOPIC_EXCEPTION (Java's ``Topic.validate``): it is also a
    ``ValueError`` because the caller passed bad input.
    """


class AuthenticationError(KafkaError):
    """TLS or SASL authentication with a broker failed: wrong credentials, an unknown user, an
    untrusted or mismatched certificate, or a mechanism the broker does not enable.

    Not retriable with the same credentials; the message names the broker, the mechanism and
    the cause, never a secret.
    """

    retriable = False
    category = ErrorCategory.INVALID_CONFIGURATION
    message = "Authentication with the broker failed."

