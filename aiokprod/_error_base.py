"""The two roots of the exception tree, apart so the generated classes can derive from them.

``aiokprod/_broker_errors.py`` (generated) subclasses :class:`BrokerResponseError` once per
error code and ``aiokprod/errors.py`` re-exports both modules; keeping the roots here lets the
generated module import them without importing ``errors.py`` half-initialised. Import every
name from :mod:`aiokprod.errors`, their public home.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from aiokprod._error_codes import ErrorCode

__all__ = ["BrokerResponseError", "ErrorCategory", "KafkaError"]


class ErrorCategory(enum.Enum):
    """What an error asks of the application (KIP-1050's categories, as the Java client 4.x
    names them), so a handler can decide by category instead of listing classes.

    docs/api/errors.md has every class's category in one table.
    """

    __module__ = "aiokprod.errors"

    #: Retrying the same operation may succeed. The producer already retried it until
    #: delivery.timeout.ms (or max.block.ms); inside a transaction do not resend the records:
    #: the transaction must be aborted, and the ``transaction()`` block or the commit reports
    #: ``TransactionAbortableError`` with this error as its cause.
    RETRIABLE = "retriable"
    #: The operation failed and the producer carries on. Inside a transaction, abort it
    #: (``async with producer.transaction()`` does) and run the next one.
    ABORTABLE = "abortable"
    #: This producer can do nothing more (fenced by a newer instance): close it; the
    #: application restarts its work from its last committed state with a new producer.
    APPLICATION_RECOVERABLE = "application_recoverable"
    #: A setting, credential or ACL is wrong; retrying changes nothing until it is fixed.
    INVALID_CONFIGURATION = "invalid_configuration"
    #: This producer can do nothing more, and a new one would fail the same way until
    #: something outside changes (a bug, a broker too old): close it and report.
    FATAL = "fatal"


class KafkaError(Exception):
    """Base of every aiokprod error.

    ``code`` is the broker error code when there is one (``None`` for client-side errors),
    ``retriable`` whether retrying the same operation may succeed, ``category`` what it asks
    of the application (KIP-1050, :class:`ErrorCategory`; set per class), ``message`` the
    text.
    """

    __module__ = "aiokprod.errors"

    code: int | None = None
    retriable: bool = False
    category: ClassVar[ErrorCategory] = ErrorCategory.FATAL
    message: str = "A Kafka client error occurred."

    def __init__(self, message: str | None = None) -> None:
        text = type(self).message if message is None else message
        super().__init__(text)
        self.message = text


class BrokerResponseError(KafkaError):
    """A broker answered with a non-zero error code.

    Subclasses exist per code so callers can ``except NotLeaderOrFollowerError``; the class
    attributes carry the code, the broker's retriable flag and its default message.
    """

    __module__ = "aiokprod.errors"

    code: int = -1
    # each code's class has its own; a broker's error fails the operation that got it
    category: ClassVar[ErrorCategory] = ErrorCategory.ABORTABLE
    error_code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR

    def __str__(self) -> str:
        return f"[Error {self.code}] {self.error_code.name}: {self.message}"
