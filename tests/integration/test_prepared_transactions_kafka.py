"""Two-phase commit against Apache Kafka: one producer prepares, another ends the transaction.

``prepare_transaction()`` flushes and leaves the transaction open; ``close()`` keeps it open;
``complete_prepared_transaction()`` on a different producer (not transactional) commits or
aborts it by producer id and epoch, with consumer offsets added on commit. confluent-kafka reads
back: nothing is visible at read_committed before the completion, everything (and the offsets)
after a commit, nothing after an abort. Both transaction versions (KIP-98 and KIP-890, which
bumps the epoch at every EndTxn) and a repeated completion (a lost answer retried) are covered;
a transaction fenced by a newer producer with its id, or timed out, refuses the commit.
"""

from __future__ import annotations

import asyncio
import pickle
import uuid
from collections.abc import Callable

import pytest

from aiokprod import PreparedTransaction, Producer
from aiokprod.errors import IllegalStateError, TransactionAbortedError
from aiokprod.producer.transactional import transaction_manager
from aiokprod.producer.transactional.transactions import TransactionState
from support.kafka_cluster import KafkaCluster
from support.reader import read_back


@pytest.fixture(params=[1, 2], ids=["txn-v1", "txn-v2"])
def transaction_version(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(transaction_manager, "MAX_TRANSACTION_VERSION", request.param)
    return int(request.param)


def _txn_id() -> str:
    return f"aiokprod-2pc-{uuid.uuid4().hex[:8]}"


async def _prepare(kafka: KafkaCluster, topic: str, values: list[bytes],
                   **config: object) -> PreparedTransaction:
    """Write ``values`` in a transaction, prepare it, close the producer."""
    async with Producer(bootstrap_servers=kafka.bootstrap, transactional_id=_txn_id(),
                        linger_ms=2, max_block_ms=20000, **config) as producer:
        producer.begin_transaction()
        await producer.send_many(topic, values)
        prepared = await producer.prepare_transaction()
        assert producer._txn is not None and producer._txn.state is TransactionState.PREPARED
        with pytest.raises(IllegalStateError, match="state PREPARED"):
            await producer.send(topic, b"late")
    return pickle.loads(pickle.dumps(prepared))  # it travels between processes


def _committed_offset(kafka: KafkaCluster, group: str, topic: str) -> int | None:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=20)
        return None if tp.offset < 0 else int(tp.offset)
    finally:
        consumer.close()


async def test_a_transaction_prepared_here_is_committed_there_with_offsets(
        kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int) -> None:
    topic = kafka_topic(partitions=2)
    values = [f"v{i}".encode() for i in range(50)]
    prepared = await _prepare(kafka, topic, values)
    assert prepared.started and prepared.transaction_version == transaction_version
    # open, not aborted by close(): read_uncommitted sees the records, read_committed nothing
    assert len(read_back(kafka.bootstrap, topic, expected=50, timeout=20, settle=0.3,
                         isolation_level="read_uncommitted")) == 50
    assert read_back(kafka.bootstrap, topic, expected=1, timeout=2, settle=0.3) == []
    group = f"marker-{uuid.uuid4().hex[:6]}"
    async with Producer(bootstrap_servers=kafka.bootstrap, max_block_ms=20000) as driver:
        await driver.complete_prepared_transaction(prepared, commit=True,
                                                   offsets={(topic, 0): 7}, group=group)
        # a retry after a lost answer: the coordinator answers the same commit as done
        await driver.complete_prepared_transaction(prepared, commit=True)
    records = read_back(kafka.bootstrap, topic, expected=50, timeout=20, settle=0.5)
    assert sorted(r.value for r in records) == sorted(values)
    assert _committed_offset(kafka, group, topic) == 7


async def test_an_aborted_prepared_transaction_stays_invisible(
        kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int) -> None:
    topic = kafka_topic()
    prepared = await _prepare(kafka, topic, [b"a", b"b"])
    async with Producer(bootstrap_servers=kafka.bootstrap, max_block_ms=20000) as driver:
        await driver.complete_prepared_transaction(prepared, commit=False)
        # once aborted, it can never commit
        with pytest.raises(TransactionAbortedError, match="can no longer commit"):
            await driver.complete_prepared_transaction(prepared, commit=True)
    async with Producer(bootstrap_servers=kafka.bootstrap, transactional_id=_txn_id(),
                        linger_ms=2) as later, later.transaction():
        await later.send(topic, b"later")
    records = read_back(kafka.bootstrap, topic, expected=1, timeout=20, settle=0.5)
    assert [r.value for r in records] == [b"later"]


async def test_a_prepared_transaction_fenced_by_a_newer_producer_refuses_the_commit(
        kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int) -> None:
    topic = kafka_topic()
    prepared = await _prepare(kafka, topic, [b"zombie"])
    async with Producer(bootstrap_servers=kafka.bootstrap, max_block_ms=20000,
                        transactional_id=prepared.transactional_id):
        pass  # InitProducerId with the same id aborts the prepared transaction
    async with Producer(bootstrap_servers=kafka.bootstrap, max_block_ms=20000) as driver:
        with pytest.raises(TransactionAbortedError, match="can no longer commit"):
            await driver.complete_prepared_transaction(prepared, commit=True)
    assert read_back(kafka.bootstrap, topic, expected=1, timeout=2, settle=0.5) == []


async def test_a_prepared_transaction_past_its_timeout_refuses_the_commit(
        kafka: KafkaCluster, kafka_topic: Callable[..., str]) -> None:
    """The coordinator aborts it after transaction.timeout.ms (the test nodes check every
    second): a read_committed reader then gets past it to a later record, and the late commit
    is refused."""
    topic = kafka_topic()
    prepared = await _prepare(kafka, topic, [b"slow"], transaction_timeout_ms=1000)
    async with Producer(bootstrap_servers=kafka.bootstrap, transactional_id=_txn_id(),
                        linger_ms=2) as later, later.transaction():
        await later.send(topic, b"later")
    records = read_back(kafka.bootstrap, topic, expected=1, timeout=30, settle=0.3)
    assert [r.value for r in records] == [b"later"]  # the prepared one was aborted
    async with Producer(bootstrap_servers=kafka.bootstrap, max_block_ms=20000) as driver:
        with pytest.raises(TransactionAbortedError, match="can no longer commit"):
            await driver.complete_prepared_transaction(prepared, commit=True)


async def test_complete_checks_its_arguments(kafka: KafkaCluster) -> None:
    async with Producer(bootstrap_servers=kafka.bootstrap) as driver:
        with pytest.raises(TypeError, match="PreparedTransaction"):
            await driver.complete_prepared_transaction("t", commit=True)  # type: ignore[arg-type]
        prepared = PreparedTransaction("t", 1, 0, 2, True)
        with pytest.raises(ValueError, match="offsets need a non-empty group id"):
            await driver.complete_prepared_transaction(prepared, commit=True,
                                                       offsets={("t", 0): 1})
    await asyncio.sleep(0)
