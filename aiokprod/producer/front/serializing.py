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
from typing import Any

from aiokprod.errors import SerializationError
from aiokprod.hooks import Serializer, SerializerNotReady, TopicSerializer
from aiokprod.producer.front.validation import BYTES_LIKE

__all__ = ["READY_ROUNDS", "TopicSerialize", "await_ready", "serialize", "topic_serialize"]

TopicSerialize = Callable[[str, Any], "bytes | bytearray | memoryview | None"]
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

    ``SerializerNotReady`` passes through for the caller to await; any other failure of the
    serializer is a ``SerializationError`` naming the topic.
    """
    if serializer is not None:
        try:
            obj = serializer(obj) if to_topic is None else to_topic(topic, obj)
        except SerializerNotReady:
            raise
        except Exception as exc:
            raise SerializationError(
                f"{what}_serializer failed for topic {topic!r}: {exc!r}") from exc
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, BYTES_LIKE):
        return bytes(obj)
    raise TypeError(f"{what} must be bytes or None (got {type(obj).__name__}); "
                    f"configure {what}_serializer to send other types")


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
