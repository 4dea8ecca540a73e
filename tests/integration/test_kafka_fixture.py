"""The Apache Kafka fixture itself: what it does when the loopback port it picked is gone, and
that it keeps what the tests write however old its timestamps."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from aiokprod import Producer
from support import kafka_cluster
from support.kafka_cluster import KafkaCluster, KafkaJars
from support.reader import read_back
from support.waits import eventually


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another process (here: this one) is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("brokers", [1, 3])
def test_a_port_taken_before_the_node_binds_it_is_retried(
    kafka_jars: KafkaJars, taken_port: int,
    monkeypatch: pytest.MonkeyPatch, brokers: int,
) -> None:
    """The first pick hands the last node a port someone else holds (the race between
    picking a free port and the JVM binding it); the start is retried on fresh ports and
    succeeds. With 3 nodes the others are alive, waiting to see the one that exited: that
    exit must end the attempt (it once waited out the whole bound, then failed). A fresh pick
    can lose the same race to another process of a busy machine (a cold run's second attempt
    did on a slowed machine), so the third and last attempt may be the one that starts."""
    real = kafka_cluster.free_ports
    picks: list[list[int]] = []

    def first_pick_taken(count: int) -> list[int]:
        ports = real(count)
        if not picks:
            ports[3 * (brokers - 1) + 2] = taken_port  # the last node's PLAINTEXT listener
        picks.append(ports)
        return ports

    monkeypatch.setattr(kafka_cluster, "free_ports", first_pick_taken)
    cluster = KafkaCluster(kafka_jars, brokers=brokers)
    try:
        cluster.start()
        assert 2 <= len(picks) <= kafka_cluster._PORT_ATTEMPTS, picks
        assert taken_port in picks[0] and all(taken_port not in p for p in picks[1:]), picks
        assert taken_port not in {cluster.port(n) for n in range(1, brokers + 1)}
        assert cluster.running_node_ids() == list(range(1, brokers + 1))
    finally:
        cluster.stop()


async def test_records_stamped_years_ago_outlive_the_retention_check(kafka_jars: KafkaJars) -> None:
    """Many tests write fixed timestamps from 2023 and read them back. Under Kafka's default
    7-day retention the broker's check (every 5 minutes, from 30 s after start) deleted such
    records between a test's write and its read-back (a run on 2026-12-05 read back 0 of 300).
    Here the check runs every 100 ms from the start; a topic with its own 1 s retention shows
    when it has run, twice, over every log, and the fixture's default topic keeps its records."""
    config = {"log.initial.task.delay.ms": "0", "log.retention.check.interval.ms": "100"}
    old = 1_700_000_000_000
    with KafkaCluster(kafka_jars, broker_config=config) as kafka:
        kafka.create_topic("kept")
        kafka.create_topic("expiring", config={"retention.ms": "1000"})
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "watermarks"})
        try:
            def log_start(topic: str) -> int:
                low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
                return int(low)

            async with Producer(bootstrap_servers=kafka.bootstrap) as producer:
                for topic in ("kept", "expiring"):
                    for i in range(10):
                        await producer.send(topic, value=b"v%d" % i, timestamp_ms=old + i)
                await producer.flush()
                await eventually(lambda: log_start("expiring") == 10, timeout=120)
                # one more pass, wholly after the one above, has been over "kept" too
                await (await producer.send("expiring", value=b"v", timestamp_ms=old))
                await eventually(lambda: log_start("expiring") == 11, timeout=120)
            assert log_start("kept") == 0
            assert len(read_back(kafka.bootstrap, "kept", expected=10)) == 10
        finally:
            consumer.close()
