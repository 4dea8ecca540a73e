"""max.in.flight.requests.per.connection=1 keeps records in order without idempotence, across a
leader move (Java's guaranteeMessageOrder: a partition with a batch on the wire is muted).

On librdkafka's mock cluster: the old leader answers the first batch late, with
NOT_LEADER_OR_FOLLOWER (nothing written), after the leader moved. A second batch sent meanwhile
goes to the new leader, whose connection has nothing in flight — the per-connection limit does
not hold it back. Without muting it is written first and the first batch's retry lands after it.
"""

from __future__ import annotations

import asyncio

from aiokprod import Producer
from support.mock_cluster import MockCluster
from support.reader import read_back
from support.waits import eventually

PRODUCE = 0
NOT_LEADER_OR_FOLLOWER = 6


async def test_a_later_batch_does_not_overtake_one_answered_late_by_the_old_leader(
        mock_cluster: MockCluster, topic_name: str) -> None:
    mock_cluster.create_topic(topic_name, 1)
    mock_cluster.set_partition_leader(topic_name, 0, 1)
    # a topic led by broker 2, so that the producer holds a connection to it: the metadata
    # refresh below then goes to the least loaded broker, 2, not to broker 1, whose answers
    # (that one's too) take 30 s
    elsewhere = f"{topic_name}-2"
    mock_cluster.create_topic(elsewhere, 1)
    mock_cluster.set_partition_leader(elsewhere, 0, 2)
    async with Producer(bootstrap_servers=mock_cluster.bootstrap, enable_idempotence=False,
                        acks=1, max_in_flight_requests_per_connection=1, linger_ms=0,
                        retry_backoff_ms=10, request_timeout_ms=60_000) as producer:
        await producer.send_and_wait(topic_name, b"warm-up")
        await producer.send_and_wait(elsewhere, b"warm-up")
        assert producer._cluster is not None
        assert producer._sender is not None
        sender, cluster = producer._sender, producer._cluster
        mock_cluster.broker_set_rtt(1, 30_000)
        mock_cluster.push_request_errors(PRODUCE, NOT_LEADER_OR_FOLLOWER)
        first = await producer.send(topic_name, b"first")
        # on the wire to broker 1, answered in 30 s
        await eventually(lambda: sender.statistics().in_flight_batches == 1)
        mock_cluster.set_partition_leader(topic_name, 0, 2)
        cluster.request_update()

        def new_leader_known() -> bool:
            meta = cluster.view.topics.get(topic_name)
            return meta is not None and meta.leader(0) == 2

        await eventually(new_leader_known, 20)  # ms, well before the late answer (30 s)
        assert not first.done()  # else "second" could not overtake it: nothing proved
        second = await producer.send(topic_name, b"second")
        first_md, second_md = await asyncio.wait_for(asyncio.gather(first, second), 120)
        mock_cluster.broker_set_rtt(1, 0)
    assert first_md.offset < second_md.offset, (first_md.offset, second_md.offset)
    values = [r.value for r in read_back(mock_cluster.bootstrap, topic_name, expected=3)]
    assert values == [b"warm-up", b"first", b"second"]
