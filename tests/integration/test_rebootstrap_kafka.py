"""Rebootstrap against Apache Kafka: every broker the producer knows moves (KIP-899, KIP-1102).

The shape: one Kafka node whose PLAINTEXT listener advertises the port of proxy P1. The
producer bootstraps through proxy P0 (its only ``bootstrap_servers`` entry), which forwards to
that listener, so the metadata names node 1 at P1 and the records flow through P1. Then the
cluster "moves": P1 stops (the address every known broker had is dead) and P0 is re-pointed at
the node's INTERNAL listener, which advertises the node at its own port — the same node id at
a new address, as a cluster replaced behind the same bootstrap name or load balancer would be.

With ``metadata_recovery_strategy="rebootstrap"`` the producer finds node 1 at its new address
through P0 and delivers everything, without a restart; with ``"none"`` it keeps dialling the
dead P1 and the records after the move fail at delivery.timeout.ms. Either way every record
that was acknowledged is in the log exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from aiokprod import Producer
from aiokprod.errors import KafkaTimeoutError
from aiokprod.settings import MetadataRecoveryStrategy, ProducerSettings
from support.kafka_cluster import KafkaCluster
from support.kafka_jars import KafkaJars
from support.proxy import ProxyThread
from support.reader import read_back

BEFORE = 200  # records acknowledged before the move
AFTER = 200  # records sent after it


@dataclass
class MovableKafka:
    cluster: KafkaCluster
    advertised_port: int  # where the PLAINTEXT listener says node 1 is: P1's port

    def start_p1(self) -> ProxyThread:
        return ProxyThread(port=self.advertised_port,
                           upstream=("127.0.0.1", self.cluster.port(1))).start()


@pytest.fixture(scope="module")
def movable_kafka(kafka_jars: KafkaJars,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[MovableKafka]:
    # the port P1 will listen on, chosen by binding it once; each test binds it again
    with ProxyThread() as probe:
        port = probe.port
    cluster = KafkaCluster(kafka_jars, work_dir=tmp_path_factory.mktemp("kafka-rebootstrap"),
                           advertised_ports={1: port})
    cluster.start()
    try:
        yield MovableKafka(cluster, port)
    finally:
        cluster.stop()


def settings(strategy: MetadataRecoveryStrategy) -> ProducerSettings:
    # "none" waits out delivery.timeout.ms, so it is short there (but it also bounds the
    # healthy records before the move); with "rebootstrap" it is the failure the elapsed bound
    # stands below, so it is long
    timeout = 120_000 if strategy == "rebootstrap" else 20_000
    return {
        "metadata_recovery_strategy": strategy, "linger_ms": 5, "request_timeout_ms": 3000,
        "delivery_timeout_ms": timeout, "max_block_ms": timeout, "reconnect_backoff_ms": 50,
        "reconnect_backoff_max_ms": 200, "socket_connection_setup_timeout_ms": 1000,
    }


async def produce(producer: Producer, topic: str, prefix: str, count: int
                  ) -> tuple[list[bytes], list[BaseException]]:
    """Send ``count`` records; the values acknowledged, and the errors of the others."""
    values = [f"{prefix}-{i}".encode() for i in range(count)]
    futures = [await producer.send(topic, v, key=str(i % 8).encode())
               for i, v in enumerate(values)]
    await asyncio.wait(futures)
    acked = [v for v, f in zip(values, futures, strict=True) if f.exception() is None]
    errors = [e for f in futures if (e := f.exception()) is not None]
    return acked, errors


@pytest.mark.parametrize("strategy", ["rebootstrap", "none"])
async def test_every_known_broker_moves(movable_kafka: MovableKafka,
                                        strategy: MetadataRecoveryStrategy) -> None:
    cluster = movable_kafka.cluster
    topic = f"rebootstrap-{strategy}"
    cluster.create_topic(topic, 2)
    internal = cluster.port(1, "INTERNAL")
    p1 = movable_kafka.start_p1()
    p0 = ProxyThread(upstream=("127.0.0.1", cluster.port(1))).start()
    try:
        async with Producer(p0.bootstrap, **settings(strategy)) as producer:
            cl = producer._cluster
            assert cl is not None
            first, errors = await produce(producer, topic, "before", BEFORE)
            assert len(first) == BEFORE and not errors
            assert cl.links()[1] == ("127.0.0.1", movable_kafka.advertised_port)
            assert p1.statistics().produce_requests > 0
            bootstrap_connections = p0.statistics().connections_accepted

            # the move: the known address dies, the bootstrap name leads to the new one
            p1.stop()
            p0.set_upstream("127.0.0.1", internal)
            started = time.monotonic()
            second, errors = await produce(producer, topic, "after", AFTER)
            elapsed = time.monotonic() - started
            stats = cl.statistics()
            if strategy == "rebootstrap":
                assert len(second) == AFTER and not errors, errors[:3]
                # ~1 s quiet; a producer that did not rebootstrap would fail its records at
                # delivery.timeout.ms (120 s)
                assert elapsed < 60.0, elapsed
                assert stats.rebootstraps >= 1
                assert cl.links()[1] == ("127.0.0.1", internal)
                assert p0.statistics().connections_accepted > bootstrap_connections
            else:
                assert second == [] and len(errors) == AFTER
                assert all(isinstance(e, KafkaTimeoutError) for e in errors), errors[:3]
                assert stats.rebootstraps == 0
                assert cl.links()[1] == ("127.0.0.1", movable_kafka.advertised_port)
                assert p0.statistics().connections_accepted == bootstrap_connections
    finally:
        p1.stop()
        p0.stop()

    acked = first + second
    # read through the INTERNAL listener: PLAINTEXT advertises the dead P1
    log = read_back(cluster.bootstrap_for("INTERNAL"), topic, expected=len(acked), timeout=20.0,
                    isolation_level="read_uncommitted", settle=0.5)
    values = [r.value for r in log]
    assert sorted(v for v in values if v is not None) == sorted(acked)
