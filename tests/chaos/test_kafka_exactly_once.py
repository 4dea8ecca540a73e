"""Exactly-once per partition under proxy faults, with Apache Kafka behind the proxy.

The same scenario as ``test_exactly_once.py`` (dropped Produce responses after the append,
stalls past request.timeout.ms, connection resets), but the broker is Kafka: it answers a
re-sent batch with success and its original offset (Tansu: DUPLICATE_SEQUENCE_NUMBER) and it
serves InitProducerId with the current producer id and epoch (Tansu refuses it). The node
advertises the proxy's port on its PLAINTEXT listener, so every client connection crosses the
proxy; replication and our probes use the INTERNAL listener, which does not.

``test_bump_through_init_producer_id_on_kafka`` forces the path Tansu cannot take: batches
that expire after ambiguous attempts leave the partition with unresolved sequences, the
producer asks the broker for a bump (InitProducerId with its current id and epoch, KIP-360)
and must not fall back to "bump unsupported". Kafka answers a non-transactional caller with a
fresh producer id at epoch 0 (its TransactionCoordinator bumps epochs for transactional ids
only), which DescribeProducers on the leader confirms.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

import pytest
from test_exactly_once import PARTITIONS, Outcome, assert_exactly_once, run_through_proxy

from aiokprod import Producer, RecordMetadata
from aiokprod.protocol import InitProducerIdRequest
from support.kafka_cluster import KafkaCluster
from support.kafka_fixtures import kafka_behind_proxy
from support.reader import read_back

INIT_PRODUCER_ID = InitProducerIdRequest.API_KEY
# what the sender logs when the broker refuses the KIP-360 bump and it takes a fresh id instead
FALLBACK_MESSAGE = "epoch bump refused"


def run_scenario_kafka(kafka_factory: Callable[..., KafkaCluster], seed: int, count: int, *,
                       idempotent: bool) -> tuple[Outcome, int]:
    """``test_exactly_once.run_scenario`` on Kafka; also returns InitProducerId requests seen."""
    topic = f"eos-kafka-{seed}-{'idem' if idempotent else 'plain'}"
    with kafka_behind_proxy(kafka_factory, seed=seed) as node:
        node.cluster.create_topic(topic, PARTITIONS)
        outcome, stats = run_through_proxy(node.proxy, node.cluster.bootstrap, topic, seed,
                                           count, idempotent=idempotent)
    return outcome, stats.requests_by_api_key.get(INIT_PRODUCER_ID, 0)


def test_exactly_once_under_proxy_faults_kafka(
    kafka_factory: Callable[..., KafkaCluster], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiokprod")
    outcome, inits = run_scenario_kafka(kafka_factory, 1, 6000, idempotent=True)
    print(f"InitProducerId requests: {inits}")
    assert outcome.faults["responses_dropped"] > 0, outcome.faults
    assert_exactly_once(outcome)
    assert FALLBACK_MESSAGE not in caplog.text


def test_same_faults_without_idempotence_find_duplicates_kafka(
    kafka_factory: Callable[..., KafkaCluster],
) -> None:
    """The faults bite on Kafka too: without idempotence they leave duplicates in its log."""
    outcome, _ = run_scenario_kafka(kafka_factory, 1, 6000, idempotent=False)
    print(f"without idempotence: duplicates={outcome.duplicates} faults={outcome.faults}")
    assert outcome.faults["responses_dropped"] > 0, outcome.faults
    assert outcome.duplicates > 0, ("the faults produced no duplicates without idempotence: "
                                    "this test could not fail", outcome.faults)


async def _send(producer: Producer, topic: str, numbers: range,
                ) -> list[asyncio.Future[RecordMetadata]]:
    futures = []
    for n in numbers:
        futures.append(await producer.send(topic, f"{n}".encode(), key=f"key-{n % 48}".encode()))
        if n % 10 == 9:
            await asyncio.sleep(0.002)
    return futures


async def _until_no_produce_in_flight(producer: Producer, timeout: float) -> None:
    """Wait until the producer has no Produce request awaiting its answer (or its
    connection's end)."""
    sender = producer._sender
    assert sender is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while sender.statistics().in_flight_requests:
        assert loop.time() < deadline, f"Produce requests still in flight after {timeout} s"
        await asyncio.sleep(0.01)


# InitProducerId: what our producer negotiates with each release (v6, KIP-939's two-phase
# commit, is still marked unstable in 4.4 and not advertised); the KIP-360 bump of a producer
# without a transactional id is answered with a new producer id on each
INIT_PRODUCER_ID_VERSION = {"4.4.0": 5, "4.1.1": 5, "3.9.1": 5}


@pytest.mark.parametrize("version", list(INIT_PRODUCER_ID_VERSION))
async def test_bump_through_init_producer_id_on_kafka(
    kafka_factory: Callable[..., KafkaCluster], caplog: pytest.LogCaptureFixture, version: str
) -> None:
    caplog.set_level(logging.INFO, logger="aiokprod")
    topic = "bump-kafka"
    with kafka_behind_proxy(kafka_factory, seed=7, version=version) as node:
        cluster, proxy = node.cluster, node.proxy
        await asyncio.to_thread(cluster.create_topic, topic, 2)
        async with Producer(bootstrap_servers=proxy.bootstrap, enable_idempotence=True,
                            linger_ms=1, batch_size=2048, request_timeout_ms=3000,
                            # room for a just-started JVM on a busy machine in the healthy
                            # phases (every record there must be acknowledged); the
                            # swallowed batches expire after it all the same
                            delivery_timeout_ms=10_000, retry_backoff_ms=20,
                            retry_backoff_max_ms=200, reconnect_backoff_ms=20,
                            reconnect_backoff_max_ms=200) as producer:
            before = await asyncio.gather(*await _send(producer, topic, range(0, 1000)))
            idem = producer._idempotence
            assert idem is not None
            first_id = idem.statistics().producer_id
            connection = await producer._cluster.any_connection()
            init_version = connection.version_for(InitProducerIdRequest)
            # Every Produce request is now swallowed (the connection reset): the batches
            # expire after ambiguous attempts, their sequences stay unresolved, and only a
            # bump can let the partitions go on.
            rule = proxy.faults.reset_on_produce_request(every=1)
            lost = await asyncio.gather(*await _send(producer, topic, range(1000, 1200)),
                                        return_exceptions=True)
            # A batch failed by delivery.timeout.ms while its request is unanswered may still
            # be written (Kafka's contract; the Java client's TimeoutException says the same):
            # its request can sit in a socket the proxy has not read yet. Only once every
            # Produce request sent under the fault has ended were the lost records refused.
            await _until_no_produce_in_flight(producer, timeout=60.0)
            proxy.faults.remove(rule)
            after = await asyncio.gather(*await _send(producer, topic, range(1200, 2200)))
            stats = idem.statistics()
        inits = proxy.statistics().requests_by_api_key.get(INIT_PRODUCER_ID, 0)
        producers = {p: await asyncio.to_thread(cluster.active_producers, topic, p)
                     for p in range(2)}
        log = [(r.partition, r.offset, int(r.value or b"-1"))
               for r in await asyncio.to_thread(read_back, cluster.bootstrap, topic,
                                                expected=2000, timeout=30, settle=1.0)]
    print(f"first producer id {first_id}; after the faults {stats}; InitProducerId requests "
          f"{inits}; the broker's producers per partition {producers}")
    print("\n".join(r.getMessage() for r in caplog.records
                    if "producer id" in r.getMessage() or "InitProducerId" in r.getMessage()))

    assert init_version == INIT_PRODUCER_ID_VERSION[version], init_version
    assert all(isinstance(r, BaseException) for r in lost), "a swallowed batch was acknowledged"
    assert FALLBACK_MESSAGE not in caplog.text, "the producer gave up on the KIP-360 bump"
    # the bump was asked of the broker (one InitProducerId more than at start) and answered
    assert inits >= 2, inits
    # one "bump" per partition whose batches expired apart from the other's (1 or 2), and
    # each answered with a fresh producer id, never an epoch: Kafka's non-transactional rule
    assert stats.producer_id_resets >= 1 and stats.epoch_bumps == 0, stats
    assert stats.producer_id != first_id and stats.producer_epoch == 0
    for partition, states in producers.items():
        assert stats.producer_id in {pid for pid, _epoch, _seq in states}, (partition, states)
    # exactly once for everything acknowledged; nothing swallowed reached the log
    counts = Counter(n for _p, _o, n in log)
    assert max(counts.values()) == 1
    acked = dict(enumerate(before)) | {1200 + i: md for i, md in enumerate(after)}
    assert sorted(counts) == sorted(acked)
    where = {n: (p, o) for p, o, n in log}
    assert all(where[n] == (md.partition, md.offset) for n, md in acked.items())


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 7))
def test_exactly_once_long_kafka(kafka_factory: Callable[..., KafkaCluster], seed: int,
                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aiokprod")
    outcome, inits = run_scenario_kafka(kafka_factory, seed, 40_000, idempotent=True)
    print(f"InitProducerId requests: {inits}")
    assert_exactly_once(outcome)
    assert FALLBACK_MESSAGE not in caplog.text
