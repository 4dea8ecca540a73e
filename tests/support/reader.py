"""An independent reader: what a topic really holds, as seen by a client we did not write.

Tests of our producer must not trust our own decoder to check our own encoder. This reader
uses confluent-kafka's Consumer (librdkafka), which also verifies record-batch CRCs
(``check.crcs``), so a wrong CRC, varint or compression frame fails here even if our own
round-trip tests agree with themselves.

It assigns every partition from the beginning instead of joining a group, so there is no
rebalance delay and no committed state, and it returns whatever arrived by the deadline:
the assertion (count, order, content) is the test's job.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

__all__ = ["ReadRecord", "ReaderError", "partition_count", "read_back"]

logger = logging.getLogger(__name__)

# Kafka's timestamp types as librdkafka reports them.
TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2


class ReaderError(RuntimeError):
    """The reader could not read at all (unknown topic, fatal client error)."""


@dataclass(frozen=True)
class ReadRecord:
    """One record as a foreign client decoded it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    # Order and duplicates preserved; a header whose value was null reads back as None.
    headers: list[tuple[str, bytes | None]]
    timestamp_type: int
    timestamp: int


def _consumer(bootstrap: str, isolation_level: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            # Required by the client even though assign() never joins the group.
            "group.id": f"aiokprod-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "allow.auto.create.topics": False,
            "check.crcs": True,
            "isolation.level": isolation_level,
            "fetch.wait.max.ms": 50,
            # an event when a partition is read to its end: read_back's settle waits for it
            "enable.partition.eof": True,
            "fetch.error.backoff.ms": 50,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "log_level": 3,
        }
    )


def _to_record(message: Message, topic: str) -> ReadRecord:
    timestamp_type, timestamp = message.timestamp()
    partition, offset = message.partition(), message.offset()
    if partition is None or offset is None:
        raise ReaderError(f"consumed a message without partition/offset from {topic!r}")
    headers: list[tuple[str, bytes | None]] = []
    raw_headers = message.headers() or []
    # The stubs allow a dict (the produce side accepts one); consumed headers are a list.
    pairs = list(raw_headers.items()) if isinstance(raw_headers, dict) else raw_headers
    for name, value in pairs:
        # librdkafka hands header values back as bytes (or None); str would mean a bug here.
        if isinstance(value, str):
            raise ReaderError(f"header {name!r} came back as str, expected bytes")
        headers.append((name, value))
    return ReadRecord(
        topic=message.topic() or topic,
        partition=partition,
        offset=offset,
        key=_as_bytes(message.key()),
        value=_as_bytes(message.value()),
        headers=headers,
        timestamp_type=timestamp_type,
        timestamp=timestamp,
    )


def _as_bytes(data: str | bytes | None) -> bytes | None:
    if isinstance(data, str):
        raise ReaderError("a key or value came back as str; the reader uses no deserializer")
    return data


def _topic_partitions(consumer: Consumer, topic: str, deadline: float) -> list[int]:
    last_error: object = "no metadata"
    while True:
        remaining = deadline - time.monotonic()
        try:
            metadata = consumer.list_topics(topic=topic, timeout=max(0.1, min(2.0, remaining)))
        except KafkaException as exc:
            last_error = exc
        else:
            topic_md = metadata.topics.get(topic)
            if topic_md is not None and topic_md.error is None and topic_md.partitions:
                return sorted(topic_md.partitions)
            last_error = topic_md.error if topic_md is not None else "topic absent"
        if remaining <= 0:
            raise ReaderError(f"no partitions for topic {topic!r}: {last_error}")
        time.sleep(0.05)


def partition_count(bootstrap: str, topic: str, *, timeout: float = 10.0) -> int:
    """How many partitions a foreign client sees for ``topic``."""
    consumer = _consumer(bootstrap, "read_uncommitted")
    try:
        return len(_topic_partitions(consumer, topic, time.monotonic() + timeout))
    finally:
        consumer.close()


def read_back(
    bootstrap: str,
    topic: str,
    *,
    expected: int,
    timeout: float = 20.0,
    partitions: Iterable[int] | None = None,
    isolation_level: str = "read_committed",
    settle: float = 0.0,
) -> list[ReadRecord]:
    """Read ``topic`` from the start of every (or the given) partition.

    Returns once ``expected`` records arrived, or at ``timeout`` with what arrived (never
    raises for too few). ``settle`` keeps reading after ``expected`` is reached, to catch
    duplicates a test wants to rule out: at least that many seconds, and then until every
    partition was read to its end (its last event an end-of-partition, not a record), so a
    reader slowed by a loaded machine still reads everything written before it got there.
    Records come in arrival order
    (ordered within a partition, interleaved across partitions). ``read_committed`` (the
    default, as in librdkafka) hides aborted transactional records.
    """
    deadline = time.monotonic() + timeout
    consumer = _consumer(bootstrap, isolation_level)
    records: list[ReadRecord] = []
    try:
        wanted = (
            sorted(partitions)
            if partitions is not None
            else _topic_partitions(consumer, topic, deadline)
        )
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        stop_at: float | None = None
        at_end: set[int] = set()  # partitions whose last event was their end, not a record
        while True:
            now = time.monotonic()
            if stop_at is None and len(records) >= expected:
                stop_at = min(deadline, now + settle)
            if now >= deadline:
                break
            if stop_at is not None and now >= stop_at and (
                    settle <= 0 or at_end.issuperset(wanted)):
                break
            limit = stop_at if stop_at is not None and now < stop_at else deadline
            for message in consumer.consume(num_messages=500, timeout=min(0.2, limit - now)):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition())
                        continue
                    if error.fatal():
                        raise ReaderError(f"fatal consumer error reading {topic!r}: {error}")
                    # Transient (broker down, leader moved): librdkafka retries by itself.
                    logger.info("reader: transient error on %s: %s", topic, error)
                    continue
                records.append(_to_record(message, topic))
                at_end.discard(message.partition())
    finally:
        consumer.close()
    return records
