"""What a request or response message is: the one protocol framing and the network layer use.

Structural types (``typing.Protocol``), so the generated classes need no base class. The
request type is generic in its response: ``BrokerConnection.request(MetadataRequest(...))``
is typed ``MetadataResponse``, and every attribute read of an answer is checked by mypy.
``framing.encode_request`` and ``decode_response`` take the same types, so a class that can
be framed can be sent, and the other way round.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, TypeVar

from aiokprod.protocol.primitives import Chunk

__all__ = ["KafkaRequest", "KafkaResponse"]

_R_co = TypeVar("_R_co", covariant=True)


class KafkaResponse(Protocol):
    """What the connection needs of a generated response class."""

    def decode(self, data: Chunk, version: int, *, strict: bool = True) -> Any: ...

    @staticmethod
    def header_version(version: int) -> int: ...


class KafkaRequest(Protocol[_R_co]):
    """What the connection needs of a generated request class; generic in its response type,
    so ``await conn.request(MetadataRequest(...))`` is typed ``MetadataResponse``."""

    API_KEY: ClassVar[int]
    API_NAME: ClassVar[str]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]

    @property
    def RESPONSE_TYPE(self) -> type[_R_co]: ...  # the generated classes' ClassVar

    @staticmethod
    def header_version(version: int) -> int: ...

    def write(self, out: list[Chunk], version: int) -> None: ...
