"""Error paths only a real broker produces by itself, on Apache Kafka.

* NOT_ENOUGH_REPLICAS: a topic with ``min.insync.replicas=3`` on the 3-node cluster refuses
  ``acks=all`` appends while one node is down; an idempotent producer keeps retrying, and
  once the node is back every record is written exactly once, in order per key.
* MESSAGE_TOO_LARGE from a real size limit (``max.message.bytes`` on the topic), not an
  injected error code: a lone record above the limit fails with ``RecordTooLargeError``; a
  batch under ``batch.size`` but over the limit is split by half of what was refused (re-cutting
  by ``batch.size`` gave back the same batch, refused until delivery.timeout.ms) and delivered.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import pytest
from test_kafka_brokers import KEYS, check_exactly_once, collect

from aiokprod import Producer, RecordMetadata
from aiokprod.errors import RecordTooLargeError
from support.kafka_cluster import KafkaCluster
from support.reader import read_back
from support.waits import eventually


async def test_not_enough_replicas_is_retried_until_the_isr_is_back(
    kafka_factory: Callable[..., KafkaCluster],
) -> None:
    cluster = kafka_factory(brokers=3)
    topic = "min-isr-3"
    cluster.create_topic(topic, 3, config={"min.insync.replicas": "3"})
    down = 3
    async with Producer(bootstrap_servers=cluster.bootstrap, acks="all",
                        enable_idempotence=True, linger_ms=2, request_timeout_ms=5000,
                        # covers the window, the retries and a JVM restart on a busy machine
                        delivery_timeout_ms=300_000, retry_backoff_ms=50,
                        retry_backoff_max_ms=500) as producer:
        first = [await producer.send(topic, f"{n}".encode(), key=f"key-{n % KEYS}".encode())
                 for n in range(300)]
        await asyncio.gather(*first)
        await asyncio.to_thread(cluster.stop_broker, down)
        # wait until the controller has taken the node out of every ISR, so appends are
        # refused (NOT_ENOUGH_REPLICAS) rather than merely slow
        await asyncio.to_thread(_wait_isr_without, cluster, topic, down)
        second = [await producer.send(topic, f"{n}".encode(), key=f"key-{n % KEYS}".encode())
                  for n in range(300, 600)]
        await asyncio.sleep(2.0)  # a window in which nothing may succeed
        # refused and retried (every 50-500 ms) for as long as the ISR is short
        await eventually(
            lambda: producer.metrics().get("producer-metrics:record-retry-total", 0.0) > 0,
            60.0)
        assert not any(f.done() for f in second), "acks=all succeeded with the ISR below 3"
        retried = producer.metrics().get("producer-metrics:record-retry-total", 0.0)
        await asyncio.to_thread(cluster.start_broker, down)
        acked, failed = await collect(first + second)
    log = [(r.partition, r.offset, int(r.value or b"-1"))
           for r in await asyncio.to_thread(read_back, cluster.bootstrap, topic,
                                            expected=600, timeout=120, settle=0.5)]
    print(f"records retried while the ISR was short: {retried:.0f}")
    assert retried > 0
    assert not failed, list(failed.items())[:3]
    check_exactly_once(log, acked, failed, 600)


def _wait_isr_without(cluster: KafkaCluster, topic: str, node: int, timeout: float = 30.0,
                      ) -> None:
    deadline = time.monotonic() + timeout
    while any(node in p.isr for p in cluster.partitions(topic)):
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node} still in an ISR of {topic} after {timeout}s")
        time.sleep(0.1)


def _incompressible(count: int, size: int, seed: int = 9) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(size) + f"{i:05d}".encode() for i in range(count)]


@pytest.mark.parametrize("codec", ["none", "gzip"])
async def test_batch_under_batch_size_but_over_the_topic_limit_is_delivered(
    kafka: KafkaCluster, kafka_topic: Callable[..., str], codec: str
) -> None:
    """max.message.bytes=4000 on the topic, batch.size=16384: ten 1 KB records make one
    ~10 KB batch, which Kafka refuses with MESSAGE_TOO_LARGE. Records of 1 KB each fit the
    limit, so a client that splits by what the broker refused delivers them all."""
    topic = kafka_topic(partitions=1, config={"max.message.bytes": "4000"})
    values = _incompressible(10, 1000)
    async with Producer(bootstrap_servers=kafka.bootstrap, linger_ms=50, batch_size=16_384,
                        compression_type=codec) as producer:
        futures = [await producer.send(topic, v, partition=0) for v in values]
        metas: list[RecordMetadata] = list(await asyncio.gather(*futures))
    offsets = [m.offset for m in metas]
    assert offsets == list(range(offsets[0], offsets[0] + len(values))), offsets
    got = read_back(kafka.bootstrap, topic, expected=len(values), settle=0.5)
    assert [r.value for r in got] == values


async def test_a_lone_record_over_the_topic_limit_fails_as_too_large(
    kafka: KafkaCluster, kafka_topic: Callable[..., str]
) -> None:
    """A one-record batch Kafka refuses (MESSAGE_TOO_LARGE) fails at once with
    RecordTooLargeError; a record under the limit sent beside it is delivered."""
    topic = kafka_topic(partitions=1, config={"max.message.bytes": "4000"})
    big, small = _incompressible(1, 8000)[0], b"small"
    async with Producer(bootstrap_servers=kafka.bootstrap, request_timeout_ms=3000,
                        delivery_timeout_ms=20_000) as producer:
        refused = await producer.send(topic, big, partition=0)
        with pytest.raises(RecordTooLargeError):
            await refused
        meta = await (await producer.send(topic, small, partition=0))
    got = read_back(kafka.bootstrap, topic, expected=1, settle=0.5)
    assert [(r.offset, r.value) for r in got] == [(meta.offset, small)]
