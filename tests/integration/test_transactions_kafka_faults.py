"""Transactions under proxy faults, Apache Kafka behind the proxy: the outcome is still
all-or-nothing, without a duplicate.

A lost Produce response inside the transaction makes the sender re-send the batch (Kafka
answers the duplicate with its original offset); an EndTxn answer held past request.timeout.ms
(the broker has already committed) makes the client look the coordinator up again and re-send
EndTxn(commit), which the coordinator answers as done (or CONCURRENT_TRANSACTIONS until it is).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from aiokprod import Producer
from aiokprod.producer.transactional import transaction_manager
from aiokprod.protocol import AddPartitionsToTxnRequest, EndTxnRequest
from support.kafka_cluster import KafkaCluster
from support.kafka_fixtures import kafka_behind_proxy
from support.reader import read_back


@pytest.mark.parametrize("transaction_version", [1, 2], ids=["txn-v1", "txn-v2"])
def test_lost_produce_and_end_txn_answers_still_commit_exactly_once(
    kafka_factory: Callable[..., KafkaCluster], transaction_version: int,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transaction_manager, "MAX_TRANSACTION_VERSION", transaction_version)
    with kafka_behind_proxy(kafka_factory, seed=13) as node:
        cluster, proxy = node.cluster, node.proxy
        topic = "txn-faults"
        cluster.create_topic(topic, 3)

        async def run() -> tuple[int, int]:
            async with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=2,
                                transactional_id=f"faults-{uuid.uuid4().hex[:8]}",
                                request_timeout_ms=1500, max_block_ms=20000) as producer:
                assert producer._txn is not None
                assert producer._txn.transaction_version == transaction_version
                # first transaction: one Produce answer lost after the append
                proxy.faults.drop_produce_response(times=1)
                async with producer.transaction():
                    for i in range(300):
                        await producer.send(topic, f"a-{i}".encode(), key=str(i).encode())
                # second: the EndTxn(commit) answer held past request.timeout.ms
                proxy.faults.stall_responses(3.0, api_key=EndTxnRequest.API_KEY, times=1)
                async with producer.transaction():
                    for i in range(300):
                        await producer.send(topic, f"b-{i}".encode(), key=str(i).encode())
                # third: aborted, with a Produce answer lost too
                proxy.faults.drop_produce_response(times=1)
                producer.begin_transaction()
                futures = [await producer.send(topic, f"x-{i}".encode()) for i in range(50)]
                await asyncio.wait(futures)
                await producer.abort_transaction()
                return producer._txn.transactions_committed, producer._txn.transactions_aborted

        committed, aborted = asyncio.run(run())
        stats = proxy.statistics()
        assert (committed, aborted) == (2, 1)
        assert stats.produce_responses_dropped == 2
        assert stats.responses_stalled >= 1
        # two commits, one abort, and the commit re-sent after the held answer
        assert stats.requests_by_api_key.get(EndTxnRequest.API_KEY, 0) >= 4
        adds = stats.requests_by_api_key.get(AddPartitionsToTxnRequest.API_KEY, 0)
        # version 2 adds partitions implicitly with Produce v12 (KIP-890)
        assert adds == 0 if transaction_version == 2 else adds >= 3
        records = read_back(cluster.bootstrap, topic, expected=600, timeout=30, settle=1.0)
    values = [r.value for r in records]
    assert len(values) == len(set(values)) == 600  # all of both commits, once each
    assert {v for v in values if v is not None and v.startswith(b"x-")} == set()
