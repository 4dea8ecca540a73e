"""The two roots of the exception tree, apart so the generated classes can derive from them.

``aiokprod/_broker_errors.py`` (generated) subclasses :class:`BrokerResponseError` once per
error code and ``aiokprod/errors.py`` re-exports both modules; keeping the roots here lets the
generated module import them without importing ``errors.py`` half-initialised. Import every
name from :mod:`aiokprod.errors`, their public home.
"""

from __future__ import annotations

from typing import ClassVar

from aiokprod._error_codes import ErrorCode

__all__ = ["BrokerResponseError", "KafkaError"]


class KafkaError(Exception):
    """Base of every aiokprod error.

    ``code`` is the broker error code when there is one (``None`` for client-side errors),
    ``retriable`` whether retrying the same operation may succeed, ``message`` the text.
    """

    __module__ = "aiokprod.errors"

    code: int | None = None
    retriable: bool = False
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
    error_code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR

    def __str__(self) -> str:
        return f"[Error {self.code}] {self.error_code.name}: {self.message}"
