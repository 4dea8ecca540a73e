"""KIP-1269 for real: a broker that advertises a larger dedup window gets more in flight.

No released broker speaks Produce v14 yet, so a proxy in front of Apache Kafka (which stops at
v13) speaks it as the KIP says: it advertises v14, forwards v14 requests as v13 (the same bytes)
and answers them as v14 with ``ProducerStateBatchesToRetain`` (TopicProduceResponse, tag 1),
with 50 ms of RTT so that in-flight depth matters. The producer must negotiate v14, raise the
partition's window to what the broker says, never exceed it, and stay exactly-once; without the
field (Tansu, Produce v11) it must keep the classic 5.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

from aiokprod import Producer
from aiokprod.network.metadata import TopicPartition
from support.kafka_cluster import KafkaCluster
from support.kafka_fixtures import kafka_behind_proxy
from support.proxy import set_batches_to_retain, tansu_behind_proxy
from support.reader import read_back


async def produce_and_watch(bootstrap: str, topic: str, count: int, max_in_flight: int
                            ) -> tuple[int, int]:
    """Send ``count`` records; return (most batches of the partition seen on the wire at once,
    the partition's learned in-flight limit)."""
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0, batch_size=2048,
                        max_in_flight_requests_per_connection=max_in_flight,
                        request_timeout_ms=10_000) as producer:
        sender = producer._sender
        assert sender is not None and sender._idem is not None
        idem = sender._idem
        tp = TopicPartition(topic, 0)
        deepest = 0
        futures = []
        for n in range(count):
            futures.append(await producer.send(topic, f"{n:06d}".encode() + b"x" * 94))
            if n % 20 == 19:
                await asyncio.sleep(0)
                deepest = max(deepest, idem.partition_state(tp).on_wire_count)
        while not all(f.done() for f in futures):
            deepest = max(deepest, idem.partition_state(tp).on_wire_count)
            await asyncio.sleep(0.002)
        limit = idem.partition_state(tp).in_flight_limit
        await asyncio.gather(*futures)
    return deepest, limit


@pytest.mark.parametrize("window", [20])
def test_window_learned_from_broker_is_used_and_respected(
        kafka_factory: Callable[..., KafkaCluster], window: int) -> None:
    with kafka_behind_proxy(kafka_factory, seed=7) as node:
        cluster, proxy = node.cluster, node.proxy
        cluster.create_topic("kip1269", 1)
        proxy.proxy.speak_produce_v14 = True
        proxy.faults.rtt_ms = 50
        proxy.faults.rewrite_produce_responses(set_batches_to_retain(window))
        deepest, limit = asyncio.run(produce_and_watch(proxy.bootstrap, "kip1269", 3000, 25))
        stats = proxy.statistics()
        records = read_back(cluster.bootstrap, "kip1269", expected=3000, settle=0.5)
    print(f"window={window} deepest={deepest} limit={limit} "
          f"produce_requests={stats.produce_requests} versions={dict(stats.produce_versions)}")
    assert set(stats.produce_versions) == {14}  # negotiated v14 (topic ids + the field)
    assert limit == window
    assert 5 < deepest <= window
    counts = Counter(r.value for r in records)
    assert len(counts) == 3000 and max(counts.values()) == 1
    numbers = [int((r.value or b"")[:6]) for r in sorted(records, key=lambda r: r.offset)]
    assert numbers == sorted(numbers)


def test_without_the_field_the_window_stays_five() -> None:
    with tansu_behind_proxy(seed=7) as (broker, proxy):
        broker.create_topic("classic", 1)
        proxy.faults.rtt_ms = 50
        deepest, limit = asyncio.run(produce_and_watch(proxy.bootstrap, "classic", 1500, 25))
        versions = dict(proxy.statistics().produce_versions)
    print(f"no field: deepest={deepest} limit={limit} versions={versions}")
    assert set(versions) == {11}  # Tansu stops at Produce v11: no v14, no field
    assert limit == 5
    assert deepest <= 5


def test_a_leader_change_resets_the_window_to_five(
        kafka_factory: Callable[..., KafkaCluster]) -> None:
    """Also for a partition with nothing in flight when the leaders move (KIP-1269: the new
    leader may be an old broker with the hard-coded window of 5)."""

    async def scenario(bootstrap: str) -> tuple[int, int]:
        async with Producer(bootstrap_servers=bootstrap, linger_ms=0,
                            max_in_flight_requests_per_connection=25) as producer:
            await producer.send_and_wait("moves", b"learn the window")
            sender, cluster = producer._sender, producer._cluster
            assert sender is not None and sender._idem is not None and cluster is not None
            state = sender._idem.partition_state(TopicPartition("moves", 0))
            learned = state.in_flight_limit
            assert state.on_wire_count == 0  # nothing in flight when the leaders move
            for callback in cluster.on_leaders_moved:
                callback(["moves"])
            return learned, sender._idem.partition_state(TopicPartition("moves", 0)).in_flight_limit

    with kafka_behind_proxy(kafka_factory, seed=7) as node:
        cluster, proxy = node.cluster, node.proxy
        cluster.create_topic("moves", 1)
        proxy.proxy.speak_produce_v14 = True
        proxy.faults.rewrite_produce_responses(set_batches_to_retain(20))
        learned, after = asyncio.run(scenario(proxy.bootstrap))
    assert (learned, after) == (20, 5)
