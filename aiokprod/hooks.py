"""What users plug into the producer, as typed interfaces: serializers, a partitioner and
interceptors (``ProducerConfig(key_serializer=..., partitioner=..., interceptors=[...])``).

They are ``typing.Protocol`` classes, so nothing has to inherit from them: a plain function is a
``Serializer`` or a ``Partitioner`` when its signature fits, and any object with the
two methods is a ``ProducerInterceptor``. They exist so that a type checker can tell a user
that a hook does not fit before the producer calls it, and so that one page documents what each
hook receives and must return. The parameters are positional-only: the producer passes them by
position, so a hook may name them as it likes.

Where each is called (Java names in brackets):

* serializers — in ``send()`` and ``send_many()``, before anything is queued
  (``Serializer.serialize``); an exception becomes ``SerializationError``. A serializer that
  needs the topic (a Schema Registry subject is named after it) is a ``TopicSerializer``; one
  that must first do asynchronous work (register a schema) raises ``SerializerNotReady``, which
  ``send()`` awaits before it calls the serializer again (docs/serialization.md);
* the partitioner — in ``send()`` and ``send_many()`` for records without an explicit
  partition (``Partitioner.partition``); an answer that names no partition of the topic fails
  that call;
* interceptors — ``on_send`` before serialization, ``on_acknowledgement`` when a record is
  acknowledged or fails, including when ``send()`` itself refuses it after ``on_send``
  (``ProducerInterceptor``); an exception from either is logged and the record goes on, as in
  Java. ``send_many()`` refuses to run with interceptors configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from aiokprod.record_metadata import RecordMetadata

__all__ = ["Headers", "Partitioner", "ProducerInterceptor", "SendArgs", "Serializer",
           "SerializerNotReady", "TopicSerializer"]

Headers = Sequence[tuple[str, "bytes | None"]]
"""Record headers as ``send()`` takes them: (key, value) pairs, a value may be ``None``."""

SendArgs = tuple[str, Any, Any, "int | None", "int | None", "Headers | None"]
"""What ``ProducerInterceptor.on_send`` returns to replace a record:
``(topic, value, key, partition, timestamp_ms, headers)``, in ``send()``'s order."""


class Serializer(Protocol):
    """Turns a key or value into bytes (``key_serializer``, ``value_serializer``).

    Called with the object given to ``send()``; returns ``bytes`` (a ``bytearray`` or
    ``memoryview`` is copied to ``bytes``) or ``None`` for a null key or value (a tombstone).
    Without a serializer, keys and values must already be bytes or ``None``.
    """

    def __call__(self, obj: Any, /) -> bytes | bytearray | memoryview | None:
        """The bytes of ``obj``, or ``None``."""


@runtime_checkable
class TopicSerializer(Protocol):
    """A serializer that is told the topic (``key_serializer``, ``value_serializer``).

    Java's ``Serializer.serialize(topic, data)`` passes the topic; our plain ``Serializer`` does
    not, because almost none needs it and the call is on the per-record path. A serializer
    object with a ``serialize_to_topic`` method is called through that instead, with the topic
    first: a Schema Registry serializer names its subject after the topic.
    """

    def __call__(self, obj: Any, /) -> bytes | bytearray | memoryview | None:
        """The bytes of ``obj`` where no topic is known (may refuse)."""

    def serialize_to_topic(self, topic: str, obj: Any, /
                           ) -> bytes | bytearray | memoryview | None:
        """The bytes of ``obj`` sent to ``topic``, or ``None``."""


class SerializerNotReady(Exception):
    """Raised by a serializer that must first finish asynchronous work, such as registering its
    schema: ``send()`` (and ``send_many()``) awaits ``ready`` and calls the serializer again.

    The per-record path stays synchronous: only a serializer's first record for a topic (a
    cache miss) raises this, and every concurrent send shares the one ``ready`` future. If
    ``ready`` fails, the send fails with ``SerializationError`` carrying that cause, and nothing
    of the record is queued.
    """

    def __init__(self, message: str, ready: asyncio.Future[Any]) -> None:
        super().__init__(message)
        self.ready = ready


class Partitioner(Protocol):
    """Chooses the partition of a record sent without one (``partitioner``).

    Receives the topic, the serialized key (``None`` for none), every partition id of the topic
    and the ids whose leader is currently available; returns an index into the topic's
    partitions (``0 <= p < len(all_partitions)``). It runs on the event loop inside ``send()``,
    so it must not block. Without one, keyed records go by murmur2 of the key (Java's default)
    and unkeyed ones stick to a partition per batch (KIP-480, KIP-794).
    """

    def __call__(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
        /,
    ) -> int:
        """The index of the partition for this record."""


class ProducerInterceptor(Protocol):
    """Sees every record before it is sent and every acknowledgement after (``interceptors``).

    Interceptors run in the order configured, on the event loop, and must not block. The type
    asks for both methods, as Java's interface does; at run time one an interceptor lacks is
    skipped.
    """

    def on_send(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
        /,
    ) -> SendArgs | None:
        """Called by ``send()`` before serialization with the record as given; return
        ``None`` to keep it, or a replacement ``SendArgs`` tuple that the next interceptor
        (and then the producer) receives."""

    def on_acknowledgement(
        self, metadata: RecordMetadata | None, error: BaseException | None, /
    ) -> None:
        """Called once per record when its batch is acknowledged (``metadata`` set, ``error``
        ``None``) or fails (``error`` set); runs before the record's future is resolved. A
        record that ``on_send`` saw and ``send()`` then refused (too large, a serializer error,
        no metadata within ``max_block_ms``, bad input, a cancelled wait) arrives here too, with
        ``metadata`` ``None`` and the error ``send()`` raised (Java's ``onSendError``)."""
