"""A Produce request written straight from the drained batches, without the generated
classes' three objects per request.

The sender's requests are the one message sent once per batch: building a ``ProduceRequest``
with its ``TopicProduceData`` and ``PartitionProduceData`` and encoding it field by field was
a measurable part of a batch's fixed cost. ``ProduceBody`` holds what the request needs
(transactional id, acks, timeout, each topic's ``(partition, records)`` pairs) and is framed
like a generated request (the same ``API_KEY`` and header). Its flexible versions (9-14, every
release since Kafka 2.8) are written by the native ``write_produce`` when the extension is
built; ``write_generated``, which builds the generated request and encodes it, is its twin and
writes the older versions. Its answer is read by ``ProduceAnswer``: the common one natively,
into the generated ``ProduceResponse`` objects. The tests compare each pair on random input.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import ClassVar

from aiokprod import _native
from aiokprod.protocol._generated import ProduceRequest, ProduceResponse
from aiokprod.protocol.primitives import ZERO_UUID, Chunk

__all__ = ["FIRST_VERSION_BY_ID", "ProduceAnswer", "ProduceBody", "Topics", "write_generated"]

#: Each topic (its name up to v12, its id from v13) with its ``(partition, records)`` pairs.
Topics = list[tuple[str | uuid.UUID, list[tuple[int, Chunk | None]]]]
#: Produce names topics by their id from this version on (KIP-516).
FIRST_VERSION_BY_ID = 13
_FIRST_FLEXIBLE_VERSION: int = ProduceRequest.FIRST_FLEXIBLE_VERSION or 0  # 9


def write_generated(out: list[Chunk], version: int, transactional_id: str | None, acks: int,
                    timeout_ms: int, topics: Topics) -> None:
    """The body through the generated ``ProduceRequest`` (every version it knows)."""
    by_id = version >= FIRST_VERSION_BY_ID
    topic_data = []
    for topic, parts in topics:
        if by_id != isinstance(topic, uuid.UUID):
            raise TypeError(f"Produce v{version} names a topic by its "
                            f"{'id' if by_id else 'name'}, not {topic!r}")
        partition_data = [ProduceRequest.PartitionProduceData(index=p, records=r)
                          for p, r in parts]
        topic_data.append(
            ProduceRequest.TopicProduceData(name=topic, partition_data=partition_data)
            if isinstance(topic, str) else
            ProduceRequest.TopicProduceData(topic_id=topic, partition_data=partition_data))
    ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
                   topic_data=topic_data).write(out, version)


_Write = Callable[[list[Chunk], int, "str | None", int, int, Topics], None]
_write_flexible: _Write = (write_generated if _native.speedups is None
                           else _native.speedups.write_produce)


_read_common: Callable[[Chunk, int], ProduceResponse | None] | None = None
if _native.speedups is not None:
    _read_common = _native.speedups.ProduceAnswerReader(
        ProduceResponse, ProduceResponse.TopicProduceResponse,
        ProduceResponse.PartitionProduceResponse, ProduceResponse.LeaderIdAndEpoch, uuid.UUID,
        ZERO_UUID).read


class ProduceAnswer(ProduceResponse):
    """How a ``ProduceBody``'s answer is read: the common answer of v10-14 (every partition
    without record errors, error message or tagged fields) by the native reader, into the
    generated classes' objects; anything else, and every answer without the extension, by the
    generated decoder, its twin, which also says what is wrong with a malformed one. Never
    instantiated: ``decode`` returns ``ProduceResponse`` objects."""

    __slots__ = ()

    @classmethod
    def decode(cls, data: Chunk, version: int, *, strict: bool = True) -> ProduceResponse:
        if _read_common is not None and not strict:
            found = _read_common(data, version)
            if found is not None:
                return found
        return ProduceResponse.decode(data, version, strict=strict)


class ProduceBody:
    """One Produce request of drained batches, framed by ``encode_request`` like a generated
    request (``KafkaRequest``): the records buffers are appended to the frame, not copied
    twice."""

    __slots__ = ("acks", "timeout_ms", "topics", "transactional_id")

    API_KEY: ClassVar[int] = ProduceRequest.API_KEY
    API_NAME: ClassVar[str] = ProduceRequest.API_NAME
    MIN_VERSION: ClassVar[int] = ProduceRequest.MIN_VERSION
    MAX_VERSION: ClassVar[int] = ProduceRequest.MAX_VERSION
    RESPONSE_TYPE: ClassVar[type[ProduceResponse]] = ProduceAnswer

    @staticmethod
    def header_version(version: int) -> int:
        """The request header's version at ``version`` (v2 from the flexible versions)."""
        return ProduceRequest.header_version(version)

    def __init__(self, transactional_id: str | None, acks: int, timeout_ms: int,
                 topics: Topics) -> None:
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics = topics

    def write(self, out: list[Chunk], version: int) -> None:
        """Append the body's chunks at ``version`` to ``out``."""
        write = _write_flexible if version >= _FIRST_FLEXIBLE_VERSION else write_generated
        write(out, version, self.transactional_id, self.acks, self.timeout_ms, self.topics)

    def __repr__(self) -> str:
        parts = sum(len(p) for _, p in self.topics)
        return (f"ProduceBody(transactional_id={self.transactional_id!r}, acks={self.acks}, "
                f"timeout_ms={self.timeout_ms}, {len(self.topics)} topics, {parts} partitions)")
