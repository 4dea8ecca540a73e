"""Metrics measured from real sends against Tansu: each one records what its name says.

(Unit tests in tests/unit/test_metrics.py check the registry; these check that the producer
feeds it: timers that were never started, a size fed the wrong number, errors not counted.)
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aiokprod import KafkaTimeoutError, Producer, RecordTooLargeError, SerializationError
from aiokprod.devbroker import TansuBroker
from support.waits import topic_known

M = "producer-metrics"


async def test_flush_and_metadata_wait_times_are_recorded(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=10_000) as producer:
        assert producer.metrics()[f"{M}:metadata-wait-time-ns-total"] == 0
        future = await producer.send(topic, b"first")  # waits for the new topic's metadata
        waited = producer.metrics()[f"{M}:metadata-wait-time-ns-total"]
        assert waited > 0
        await producer.flush()  # linger.ms=10 s: only flush sends it
        assert future.done()
        assert producer.metrics()[f"{M}:flush-time-ns-total"] > 0
        await producer.send(topic, b"second")  # metadata known: no more waiting
        assert producer.metrics()[f"{M}:metadata-wait-time-ns-total"] == waited


async def test_record_size_max_is_the_largest_record_not_the_batch_mean(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=50,
                        batch_size=64 * 1024) as producer:
        await producer.partitions_for(topic)
        futures = [await producer.send(topic, b"v" * size, partition=0)
                   for size in (10, 10, 5000, 10, 10)]
        await producer.flush()
        assert len({(await f).offset // 100 for f in futures}) == 1  # one batch
        largest = producer.metrics()[f"{M}:record-size-max"]
    # the 5000-byte value plus a record's framing (the batch mean would be ~1 KB)
    assert 5000 <= largest <= 5040, largest


async def test_bulk_sends_report_the_largest_record_too(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=50) as producer:
        await producer.partitions_for(topic)
        future = await producer.send_many(topic, [b"a" * 20] * 50 + [b"b" * 3000],
                                          partition=0)
        assert len(await future) == 51
        largest = producer.metrics()[f"{M}:record-size-max"]
    assert 3000 <= largest <= 3040, largest


async def test_sends_refused_by_send_itself_count_as_record_errors(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    async with Producer(bootstrap_servers=tansu.bootstrap, max_request_size=10_000,
                        max_block_ms=300) as producer:
        await topic_known(producer, topic)  # max.block.ms is for the refusals
        with pytest.raises(RecordTooLargeError):
            await producer.send(topic, b"x" * 20_000)
        with pytest.raises(KafkaTimeoutError):
            await producer.send(topic, b"x", partition=99)  # no such partition
        with pytest.raises(ValueError):  # bad input: not a Kafka error, not counted (Java)
            await producer.send(topic, b"x", timestamp_ms=-5)
        assert producer.metrics()[f"{M}:record-error-total"] == 2


async def test_send_many_refusals_count_every_record_of_the_call_as_errors(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    """What send_many() raises before queueing anything fails every record of the call, and
    record-error counts them as send() counts its one record: Kafka errors (too large, a
    serializer failing, no such partition within max.block.ms), not bad input."""
    topic = new_topic()

    def encode(value: object) -> object:
        return value.encode() if isinstance(value, str) else value

    async with Producer(bootstrap_servers=tansu.bootstrap, max_request_size=10_000,
                        max_block_ms=300, value_serializer=encode) as producer:  # type: ignore[arg-type]
        await topic_known(producer, topic)  # max.block.ms is for the refusals
        with pytest.raises(RecordTooLargeError):
            await producer.send_many(topic, ["ok", "x" * 20_000, "ok"])
        with pytest.raises(SerializationError):
            await producer.send_many(topic, ["a", Unencodable(), "c", "d"])
        with pytest.raises(KafkaTimeoutError):
            await producer.send_many(topic, ["a", "b"], partition=99)  # no such partition
        with pytest.raises(TypeError):  # bad input: not a Kafka error, not counted (as send)
            await producer.send_many(topic, ["a", 5])
        assert producer.metrics()[f"{M}:record-error-total"] == 3 + 4 + 2
        result = await (await producer.send_many(topic, ["fine"] * 3))
        assert len(result) == 3
        assert producer.metrics()[f"{M}:record-error-total"] == 9


class Unencodable(str):
    """A str whose encode() fails, as a serializer meeting a value it cannot handle."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        raise UnicodeEncodeError("utf-8", str(self), 0, 1, "cannot encode this one")
