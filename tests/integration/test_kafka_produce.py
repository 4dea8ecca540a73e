"""The producer and the raw protocol layer against Apache Kafka itself (KRaft, 1 and 3 nodes).

confluent-kafka reads everything back, at read_committed and read_uncommitted: Tansu does not
hide aborted records from read_committed readers, so only a real broker shows that our batches
sit correctly beside transaction markers written by another client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from confluent_kafka import Producer as ConfluentProducer
from test_raw_produce import check_read_back, produce_raw

from aiokprod import Producer
from aiokprod.errors import error_for_code
from aiokprod.network.cluster import Cluster
from aiokprod.protocol import InitProducerIdRequest, InitProducerIdResponse
from support.kafka_cluster import KAFKA_VERSION, KafkaCluster
from support.reader import read_back
from support.round_trip import CODECS, round_trip_varied_records

ISOLATION_LEVELS = ["read_committed", "read_uncommitted"]


def test_cluster_shapes(kafka: KafkaCluster, kafka3: KafkaCluster) -> None:
    """The fixtures are what they claim: KRaft nodes that all see each other, fresh topics
    with the shape's replication, and the version we resolved."""
    assert kafka.running_node_ids() == [1]
    assert kafka3.running_node_ids() == [1, 2, 3]
    assert (kafka3.startup_seconds or 0) > 0
    # ApiVersions lists InitProducerId v3+ (KIP-360) and Produce v9+ (flexible)
    assert kafka.api_versions[InitProducerIdRequest.API_KEY][1] >= 3
    assert kafka.api_versions[0][1] >= 9
    jar = [j.name for j in kafka.jars.jars if j.name.startswith("kafka_2.13-")]
    assert jar == [f"kafka_2.13-{KAFKA_VERSION}.jar"]


@pytest.mark.parametrize("codec", CODECS)
async def test_records_round_trip_read_back_by_confluent(
    kafka: KafkaCluster, kafka_topic: Callable[..., str], codec: str
) -> None:
    await round_trip_varied_records(kafka.bootstrap, kafka_topic(partitions=3), codec,
                                    isolation_levels=ISOLATION_LEVELS)


def _transaction(bootstrap: str, topic: str, values: list[bytes], *, commit: bool) -> None:
    """Write ``values`` to partition 0 in one confluent-kafka transaction, then end it."""
    txn = ConfluentProducer({"bootstrap.servers": bootstrap,
                             "transactional.id": f"txn-{topic}-{commit}",
                             "log_level": 3})
    txn.init_transactions(30)
    txn.begin_transaction()
    for value in values:
        txn.produce(topic, value=value, partition=0)
    txn.flush(30)
    if commit:
        txn.commit_transaction(30)
    else:
        txn.abort_transaction(30)


async def test_our_records_beside_aborted_and_committed_transactions(
    kafka: KafkaCluster, kafka_topic: Callable[..., str]
) -> None:
    """read_committed hides another client's aborted records and keeps ours; read_uncommitted
    shows everything (what Tansu cannot show: it serves aborted records to both)."""
    topic = kafka_topic(partitions=1)

    async def ours(tag: str) -> list[bytes]:
        values = [f"ours-{tag}-{i}".encode() for i in range(50)]
        async with Producer(bootstrap_servers=kafka.bootstrap, linger_ms=1) as producer:
            futures = [await producer.send(topic, v, partition=0) for v in values]
            await asyncio.gather(*futures)
        return values

    first = await ours("a")
    aborted = [f"aborted-{i}".encode() for i in range(20)]
    committed = [f"committed-{i}".encode() for i in range(20)]
    await asyncio.to_thread(_transaction, kafka.bootstrap, topic, aborted, commit=False)
    await asyncio.to_thread(_transaction, kafka.bootstrap, topic, committed, commit=True)
    second = await ours("b")

    visible = first + committed + second
    got = read_back(kafka.bootstrap, topic, expected=len(visible), settle=0.5,
                    isolation_level="read_committed")
    assert [r.value for r in got] == visible
    everything = first + aborted + committed + second
    got = read_back(kafka.bootstrap, topic, expected=len(everything), settle=0.5,
                    isolation_level="read_uncommitted")
    assert [r.value for r in got] == everything


async def test_acks_all_idempotent_on_three_replicas(
    kafka3: KafkaCluster, request: pytest.FixtureRequest
) -> None:
    """RF 3, min.insync.replicas=2: every acknowledged record is on every replica's log end
    (read back through each node as bootstrap), per-key order kept."""
    topic = f"acks-all-{request.node.name[-20:].strip('[]')}-{id(request) % 10_000}"
    parts = kafka3.create_topic(topic, 3)
    assert all(len(p.replicas) == 3 and set(p.isr) == {1, 2, 3} for p in parts), parts
    async with Producer(bootstrap_servers=kafka3.bootstrap, acks="all",
                        enable_idempotence=True, linger_ms=2) as producer:
        futures = [await producer.send(topic, f"{n}".encode(), key=f"key-{n % 12}".encode())
                   for n in range(1200)]
        metas = await asyncio.gather(*futures)
    assert all(m.offset >= 0 for m in metas)
    for node_id in kafka3.node_ids:
        got = read_back(f"127.0.0.1:{kafka3.port(node_id)}", topic, expected=1200)
        assert sorted(int(r.value or b"-1") for r in got) == list(range(1200)), node_id
        per_key: dict[bytes | None, list[int]] = {}
        for r in sorted(got, key=lambda r: (r.partition, r.offset)):
            per_key.setdefault(r.key, []).append(int(r.value or b"-1"))
        assert all(v == sorted(v) for v in per_key.values())


async def test_raw_produce_every_codec_kafka(
    kafka: KafkaCluster, kafka_topic: Callable[..., str]
) -> None:
    """The raw interop test (one RecordBatch per codec in raw Produce requests) on Kafka."""
    topic = kafka_topic(partitions=5)
    versions = await produce_raw(kafka.bootstrap, topic)
    # Kafka 4.x: the newest Produce we speak (capped at 12 by the test), Metadata 12+
    assert versions["Produce"] == min(12, kafka.api_versions[0][1])
    assert versions["Metadata"] >= 12 and versions["ApiVersions"] >= 3
    check_read_back(kafka.bootstrap, topic)


async def test_init_producer_id_with_current_pair_gives_a_fresh_id_on_kafka(
    kafka: KafkaCluster,
) -> None:
    """What the producer's KIP-360 path gets from Kafka when it has no transactional id.

    InitProducerId (v3+) carrying the current producer id and epoch succeeds (Tansu answers
    UNKNOWN_SERVER_ERROR), but Kafka's TransactionCoordinator hands a non-transactional caller
    a *new* producer id at epoch 0 every time: the epoch is bumped only for transactional ids.
    An idempotent producer that "bumps via the broker" therefore really restarts under a
    fresh producer id, which is safe (every partition restarts at sequence 0 either way).
    """
    cluster = Cluster(kafka.bootstrap)
    cluster.start()
    try:
        # A broker's own connection, not the bootstrap one: the cluster closes that once the
        # first metadata names the brokers, which under load came between the two requests
        await cluster.refresh_now(30_000)
        conn = await cluster.connection(next(iter(cluster.view.brokers)), 30_000)
        version = conn.version_for(InitProducerIdRequest)
        assert version >= 3

        async def init(producer_id: int, producer_epoch: int) -> InitProducerIdResponse:
            # a broker just started answers COORDINATOR_LOAD_IN_PROGRESS (retriable) until its
            # transaction coordinator has loaded: ask again, as the producer does
            deadline = asyncio.get_running_loop().time() + 60
            while True:
                answer = await conn.request(InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=60_000,
                    producer_id=producer_id, producer_epoch=producer_epoch), version=version)
                if not error_for_code(answer.error_code).retriable or \
                        asyncio.get_running_loop().time() > deadline:
                    return answer
                await asyncio.sleep(0.1)

        first = await init(-1, -1)
        assert first.error_code == 0
        await cluster.refresh_now(30_000)  # a refresh between the two leaves it open
        again = await init(first.producer_id, first.producer_epoch)
        assert again.error_code == 0
        assert again.producer_id != first.producer_id
        assert again.producer_epoch == 0
    finally:
        await cluster.close()
