"""Metrics measured from real sends against Tansu: each one records what its name says.

(Unit tests in tests/unit/test_metrics.py check the registry; these check that the producer
feeds it: timers that were never started, a size fed the wrong number, errors not counted.)
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aiokprod import KafkaTimeoutError, Producer, RecordTooLargeError
from aiokprod.devbroker import TansuBroker

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
        await producer.partitions_for(topic)
        with pytest.raises(RecordTooLargeError):
            await producer.send(topic, b"x" * 20_000)
        with pytest.raises(KafkaTimeoutError):
            await producer.send(topic, b"x", partition=99)  # no such partition
        with pytest.raises(ValueError):  # bad input: not a Kafka error, not counted (Java)
            await producer.send(topic, b"x", timestamp_ms=-5)
        assert producer.metrics()[f"{M}:record-error-total"] == 2
