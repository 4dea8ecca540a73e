"""Transaction error paths against librdkafka's mock cluster, which injects any error code per
API (it neither fences nor applies TxnOffsetCommit: those are proved on Apache Kafka).

Coordinator hiccups are retried and end in a commit; fatal answers stop the producer with an
error that says why; an abortable one leaves it usable after ``abort_transaction()``.
"""

from __future__ import annotations

import uuid

import pytest

from aiokprod import Producer
from aiokprod.errors import (
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
)
from aiokprod.producer.transactional.transactions import TransactionState
from support.mock_cluster import MockCluster

PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 10, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 24, 25, 26
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS = 47, 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTION_ABORTABLE = 53, 120


def _producer(cluster: MockCluster, **config: object) -> Producer:
    config.setdefault("linger_ms", 5)
    config.setdefault("max_block_ms", 10000)
    config.setdefault("retry_backoff_ms", 10)
    return Producer(bootstrap_servers=cluster.bootstrap,
                    transactional_id=f"mock-{uuid.uuid4().hex[:8]}", **config)


async def test_coordinator_errors_are_retried_and_the_commit_goes_through(
    mock_cluster: MockCluster
) -> None:
    mock_cluster.create_topic("t", partitions=3)
    mock_cluster.start_request_tracking()
    mock_cluster.push_request_errors(FIND_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
                                     COORDINATOR_LOAD_IN_PROGRESS)
    mock_cluster.push_request_errors(INIT_PRODUCER_ID, CONCURRENT_TRANSACTIONS, NOT_COORDINATOR)
    mock_cluster.push_request_errors(ADD_PARTITIONS, CONCURRENT_TRANSACTIONS,
                                     COORDINATOR_LOAD_IN_PROGRESS)
    mock_cluster.push_request_errors(END_TXN, CONCURRENT_TRANSACTIONS, NOT_COORDINATOR)
    async with _producer(mock_cluster) as producer:
        async with producer.transaction():
            futures = [await producer.send("t", f"v{i}".encode(), partition=i % 3)
                       for i in range(30)]
        assert all(f.done() and f.exception() is None for f in futures)
        assert producer._txn is not None
        assert producer._txn.transactions_committed == 1
        assert producer._txn.state is TransactionState.READY
    finds = mock_cluster.get_requests(FIND_COORDINATOR)
    # 2 failed + the first lookup, and one more after each NOT_COORDINATOR
    assert len(finds) >= 5
    assert len(mock_cluster.get_requests(INIT_PRODUCER_ID)) == 3
    assert len(mock_cluster.get_requests(END_TXN)) == 3
    adds = mock_cluster.get_requests(ADD_PARTITIONS)
    produces = mock_cluster.get_requests(PRODUCE)
    # one request per sender wake-up, not per record (30 records, 3 partitions): two refused,
    # then at most one per partition (leaders on three brokers may become ready apart); no
    # Produce left before the first accepted one
    assert 3 <= len(adds) <= 5
    assert min(p.timestamp_us for p in produces) > adds[2].timestamp_us


async def test_an_unauthorized_transactional_id_is_fatal_at_start(
    mock_cluster: MockCluster
) -> None:
    mock_cluster.create_topic("t")
    mock_cluster.push_request_errors(INIT_PRODUCER_ID, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    producer = _producer(mock_cluster)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            await producer.start()
        assert producer._txn is not None
        assert producer._txn.state is TransactionState.FATAL_ERROR
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.begin_transaction()
        with pytest.raises(KafkaError):
            await producer.send("t", b"x")
    finally:
        await producer.close(timeout=5)


async def test_invalid_producer_epoch_from_the_coordinator_means_fenced(
    mock_cluster: MockCluster
) -> None:
    mock_cluster.create_topic("t")
    async with _producer(mock_cluster) as producer:
        producer.begin_transaction()
        await (await producer.send("t", b"x"))
        mock_cluster.push_request_errors(END_TXN, INVALID_PRODUCER_EPOCH)
        with pytest.raises(ProducerFencedError, match="INVALID_PRODUCER_EPOCH.*create a new"):
            await producer.commit_transaction()
        with pytest.raises(ProducerFencedError):
            await producer.send("t", b"y")
        health = producer.health()
        assert health.state == "fatal" and "fenced" in (health.reason or "")


async def test_transaction_abortable_on_commit_leaves_the_producer_usable_after_abort(
    mock_cluster: MockCluster
) -> None:
    mock_cluster.create_topic("t")
    async with _producer(mock_cluster) as producer:
        assert producer._txn is not None
        producer.begin_transaction()
        await (await producer.send("t", b"x"))
        mock_cluster.push_request_errors(END_TXN, TRANSACTION_ABORTABLE)
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        assert producer._txn.state is TransactionState.ABORTABLE_ERROR
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send("t", b"y")
        assert producer._txn.transactions_committed == 1
        assert producer._txn.transactions_aborted == 1


async def test_a_failed_start_in_async_with_leaves_no_task_behind(
    mock_cluster: MockCluster
) -> None:
    mock_cluster.push_request_errors(INIT_PRODUCER_ID, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    producer = _producer(mock_cluster)
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        async with producer:
            pytest.fail("the block must not run")
    assert producer._supervisor is not None
    assert producer.health().state == "fatal"
    sender_task = producer._sender._task if producer._sender is not None else None
    assert sender_task is not None and sender_task.done()
