"""The releases users run besides the newest: a focused set against Kafka 3.9 and 4.1.

Every other Kafka test runs against the newest release (``KAFKA_VERSION``, 4.4.0). Many
production clusters still run 3.x, and 4.1 is the release most 4.x users met first, so the
paths whose protocol differs by release run against those too:

* idempotent produce read back by librdkafka: Produce v11 on 3.9, v13 (topic ids, KIP-516)
  on 4.1;
* the leader SIGKILLed mid-stream on 3 nodes: exactly once, order kept, the node back in every
  ISR;
* a transaction committed and one aborted: transaction version 1 on 3.9 (AddPartitionsToTxn),
  version 2 on 4.1 (KIP-890: partitions added implicitly, the epoch bumped at every EndTxn);
* the SASL_SSL SCRAM-SHA-512 handshake.

Fencing on every release is in ``test_transactions_kafka.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from test_kafka_brokers import KEYS, check_exactly_once, collect, leader_killed_mid_stream
from test_kafka_security import PASSWORD, USER

from aiokprod import Producer, RecordMetadata
from aiokprod.protocol import ProduceRequest
from support.kafka_cluster import KafkaCluster, SecurityOptions
from support.reader import read_back

OLDER = ("3.9.1", "4.1.1")
# what our producer negotiates with each: the protocol paths these tests exercise
PRODUCE_VERSION = {"3.9.1": 11, "4.1.1": 13}
TRANSACTION_VERSION = {"3.9.1": 1, "4.1.1": 2}


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("kafka_release", OLDER, indirect=True)
async def test_idempotent_produce_reads_back_in_order(kafka_release: KafkaCluster) -> None:
    version = kafka_release.jars.version
    topic = topic_name("versions")
    await asyncio.to_thread(kafka_release.create_topic, topic, 3)
    count = 3000
    async with Producer(bootstrap_servers=kafka_release.bootstrap, linger_ms=2,
                        batch_size=4096) as producer:
        futures = [await producer.send(topic, f"{n}".encode(), key=f"key-{n % KEYS}".encode())
                   for n in range(count)]
        acked, failed = await collect(futures)
        connection = await producer._cluster.any_connection()
        negotiated = connection.version_for(ProduceRequest)
    log = [(r.partition, r.offset, int(r.value or b"-1"))
           for r in await asyncio.to_thread(read_back, kafka_release.bootstrap, topic,
                                            expected=count, timeout=60, settle=0.5)]
    assert negotiated == PRODUCE_VERSION[version], negotiated
    assert not failed
    check_exactly_once(log, acked, failed, count)


@pytest.mark.parametrize("version", OLDER)
async def test_leader_killed_mid_stream(kafka_factory: Callable[..., KafkaCluster],
                                        version: str) -> None:
    cluster = await asyncio.to_thread(kafka_factory, version=version, brokers=3)
    await leader_killed_mid_stream(cluster)


@pytest.mark.parametrize("kafka_release", OLDER, indirect=True)
async def test_committed_and_aborted_transactions(kafka_release: KafkaCluster) -> None:
    version = kafka_release.jars.version
    topic = topic_name("versions-txn")
    await asyncio.to_thread(kafka_release.create_topic, topic, 2)
    async with Producer(bootstrap_servers=kafka_release.bootstrap,
                        transactional_id=topic_name("txn"), linger_ms=2) as producer:
        async with producer.transaction():
            committed = [await producer.send(topic, f"c{n}".encode()) for n in range(100)]
        producer.begin_transaction()
        aborted = [await producer.send(topic, f"a{n}".encode()) for n in range(100)]
        await producer.flush()
        await producer.abort_transaction()
        async with producer.transaction():
            committed += [await producer.send(topic, f"c{n}".encode()) for n in range(100, 150)]
        assert producer._txn is not None
        transaction_version = producer._txn.transaction_version
    assert all(isinstance(f.result(), RecordMetadata) for f in committed)
    assert all(f.done() for f in aborted)
    visible = await asyncio.to_thread(read_back, kafka_release.bootstrap, topic, expected=150,
                                      timeout=60, settle=1.0)
    values = sorted(int((r.value or b"c-1")[1:]) for r in visible)
    assert values == list(range(150)), values[:10]
    assert transaction_version == TRANSACTION_VERSION[version]


@pytest.mark.parametrize("kafka_release", OLDER, indirect=True)
async def test_sasl_ssl_scram_handshake(kafka_release: KafkaCluster) -> None:
    # the release's shared node runs in the secure shape (support.kafka_fixtures.kafka_release)
    cluster = kafka_release
    assert cluster.tls is not None and cluster.security == SecurityOptions()
    topic = topic_name("versions-sec")
    await asyncio.to_thread(cluster.create_topic, topic, 1)
    async with Producer(bootstrap_servers=cluster.bootstrap_for("SASL_SSL"),
                        security_protocol="SASL_SSL", ssl_cafile=str(cluster.tls.ca_cert),
                        sasl_mechanism="SCRAM-SHA-512", sasl_username=USER,
                        sasl_password=PASSWORD, linger_ms=2) as producer:
        futures = [await producer.send(topic, f"{n}".encode()) for n in range(100)]
        await asyncio.gather(*futures)
    records = await asyncio.to_thread(read_back, cluster.bootstrap, topic, expected=100,
                                      timeout=30)
    assert sorted(int(r.value or b"-1") for r in records) == list(range(100))
