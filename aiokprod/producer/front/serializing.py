"""Keys and values as bytes: the configured serializers, called by ``send()`` and
``send_many()`` before anything of a record is queued.

A plain ``Serializer`` is called with the object alone (the per-record path's cheapest call); a
``TopicSerializer`` (``aiokprod.hooks``) through its ``serialize_to_topic`` with the topic first,
because a Schema Registry serializer names its subject after the topic. A serializer that must
first finish asynchronous work (register its schema) raises ``SerializerNotReady``; the caller
awaits ``await_ready`` and serializes again, so the per-record path stays synchronous and only
a cache miss costs a wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from aiokprod.errors import SerializationError
from aiokprod.hooks import Serializer, SerializerNotReady, TopicSerializer
from aiokprod.producer.front.validation import BYTES_LIKE
from aiokprod.records.record_encoding import longest_bytes

__all__ = ["READY_ROUNDS", "TopicSerialize", "bulk_bytes", "serialize", "topic_serialize",
           "when_ready"]

TopicSerialize = Callable[[str, Any], "bytes | bytearray | memoryview | None"]
_T = TypeVar("_T")
# how many SerializerNotReady waits one call may take: a key's and a value's, with room
READY_ROUNDS = 4


def topic_serialize(serializer: Serializer | None) -> TopicSerialize | None:
    """A ``TopicSerializer``'s ``serialize_to_topic``, called instead of the serializer itself;
    ``None`` for a plain serializer (or none)."""
    if serializer is not None and isinstance(serializer, TopicSerializer):
        return serializer.serialize_to_topic
    return None


def serialize(topic: str, obj: Any, serializer: Serializer | None, what: str,
              to_topic: TopicSerialize | None) -> bytes | None:
    """A key or value (``what``) as bytes: through its serializer if one is configured.

    ``SerializerNotReady`` passes through for the caller to await (``when_ready``); any other
    failure of the serializer is a ``SerializationError`` naming the topic.
    """
    if serializer is not None:
        try:
            obj = serializer(obj) if to_topic is None else to_topic(topic, obj)
        except SerializerNotReady:
            raise
        except Exception as exc:
            raise _failed(what, topic, exc) from exc
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, BYTES_LIKE):
        return bytes(obj)
    raise _not_bytes(what, what, obj)


def bulk_bytes(topic: str, items: list[Any], serializer: Serializer | None, what: str,
               to_topic: TopicSerialize | None) -> list[bytes | None]:
    """``serialize`` for a whole list (``send_many``): the items as bytes or None.

    ``items`` is a list of the caller's own: it may be changed in place, but only once the
    serializer has answered for every item, so after a ``SerializerNotReady`` it is as it was
    and the call can be made again.
    """
    data = items
    if serializer is None and longest_bytes(data) >= 0:
        return data  # all bytes or None already: one scan, in C on the native path
    if serializer is not None:
        try:
            data = [serializer(x) for x in data] if to_topic is None else \
                [to_topic(topic, x) for x in data]
        except SerializerNotReady:
            raise
        except Exception as exc:
            raise _failed(what, topic, exc) from exc
    for i, x in enumerate(data):
        if x is not None and type(x) is not bytes:
            if not isinstance(x, BYTES_LIKE):
                raise _not_bytes(f"{what}s[{i}]", what, x)
            data[i] = bytes(x)
    return data


def _failed(what: str, topic: str, exc: Exception) -> SerializationError:
    return SerializationError(f"{what}_serializer failed for topic {topic!r}: {exc!r}")


def _not_bytes(name: str, what: str, obj: Any) -> TypeError:
    return TypeError(f"{name} must be bytes or None (got {type(obj).__name__}); "
                     f"configure {what}_serializer to send other types")


async def when_ready(topic: str, attempt: Callable[[], _T],
                     not_ready: SerializerNotReady) -> _T:
    """``attempt()`` (serializing a call's keys and values) again once the serializer that
    raised ``not_ready`` is ready: at most ``READY_ROUNDS`` waits, as a key's and a value's
    serializer may each need one."""
    for _ in range(READY_ROUNDS):
        await await_ready(not_ready, topic)
        try:
            return attempt()
        except SerializerNotReady as again:
            not_ready = again
    raise SerializationError(f"serializer still not ready for topic {topic!r} after "
                             f"{READY_ROUNDS} waits: {not_ready}")


async def await_ready(not_ready: SerializerNotReady, topic: str) -> None:
    """Wait until the serializer that raised ``not_ready`` can serialize for ``topic``.

    The wait is bounded by the serializer's own work (a registry client's timeouts and
    retries). The future is shielded: a cancelled send leaves it running for the other sends
    waiting on it. Its failure fails the send as a ``SerializationError`` with that cause.
    """
    try:
        await asyncio.shield(not_ready.ready)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise SerializationError(f"serializer not ready for topic {topic!r}: {exc}") from exc
