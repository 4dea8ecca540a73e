"""Transactions against Tansu, the second implementation, with its measured quirks.

Tansu writes COMMIT/ABORT control records and fences (it bumps the epoch and answers
PRODUCER_FENCED where Kafka answers INVALID_PRODUCER_EPOCH), but it does not hide aborted
records from read_committed readers, so visibility is checked on Apache Kafka
(test_transactions_kafka.py); here the protocol exchanges must work and a fenced producer must
stop at once, every abort bounded (Tansu closes the connection instead of answering a fenced
producer's EndTxn).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest

from aiokprod import Producer
from aiokprod.devbroker import TansuBroker
from aiokprod.errors import KafkaTimeoutError, ProducerFencedError
from aiokprod.producer.transactional.transactions import TransactionState
from support.reader import read_back
from support.waits import topic_known


def _producer(tansu: TansuBroker, transactional_id: str, **config: object) -> Producer:
    config.setdefault("linger_ms", 2)
    config.setdefault("max_block_ms", 10000)
    return Producer(bootstrap_servers=tansu.bootstrap, transactional_id=transactional_id,
                    **config)


async def test_commit_and_abort_complete_on_tansu(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    txn_id = f"tansu-{uuid.uuid4().hex[:8]}"
    async with _producer(tansu, txn_id) as producer:
        assert producer._txn is not None
        async with producer.transaction():
            await producer.send_many(topic, [f"c-{i}".encode() for i in range(20)])
        producer.begin_transaction()
        futures = [await producer.send(topic, f"a-{i}".encode()) for i in range(5)]
        await asyncio.gather(*futures)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"c-last")
        assert producer._txn.transactions_committed == 2
        assert producer._txn.transactions_aborted == 1
        assert producer._txn.state is TransactionState.READY
    # Tansu does not hide the aborted ones: only count that everything committed arrived
    records = read_back(tansu.bootstrap, topic, expected=26, timeout=60,
                        isolation_level="read_uncommitted")
    values = {r.value for r in records}
    assert {f"c-{i}".encode() for i in range(20)} | {b"c-last"} <= values


async def test_a_fenced_producer_learns_it_from_produce_and_stops_at_once(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    txn_id = f"tansu-{uuid.uuid4().hex[:8]}"
    first = _producer(tansu, txn_id)
    await first.start()
    try:
        first.begin_transaction()
        await (await first.send(topic, b"zombie"))
        async with _producer(tansu, txn_id) as second:
            async with second.transaction():
                await second.send(topic, b"second")
            # Tansu answers the zombie's Produce with PRODUCER_FENCED (Kafka: 47 or 90)
            late = await first.send(topic, b"zombie-late")
            with pytest.raises(ProducerFencedError):
                await late
            started = time.monotonic()
            with pytest.raises(ProducerFencedError, match="create a new one"):
                await first.commit_transaction()
            with pytest.raises(ProducerFencedError):
                await first.abort_transaction()  # known fenced: no EndTxn, at once
            with pytest.raises(ProducerFencedError):
                await first.send(topic, b"after")
            # at once: no request goes out (an EndTxn would wait for request.timeout.ms, 30 s)
            assert time.monotonic() - started < 10.0
            assert first._txn is not None and first._txn.state is TransactionState.FATAL_ERROR
    finally:
        await first.close(timeout=5)


async def test_end_txn_of_a_fenced_producer_is_bounded_although_tansu_never_answers_it(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    txn_id = f"tansu-{uuid.uuid4().hex[:8]}"
    first = _producer(tansu, txn_id, max_block_ms=1500)
    await first.start()
    try:
        await topic_known(first, topic)  # its first metadata is not what is tested
        first.begin_transaction()
        await (await first.send(topic, b"zombie"))
        async with _producer(tansu, txn_id):
            started = time.monotonic()
            # Tansu closes the connection instead of answering: all the zombie can see is
            # that no answer came within max.block.ms (Kafka answers PRODUCER_FENCED)
            with pytest.raises(KafkaTimeoutError, match="max.block.ms"):
                await first.commit_transaction()
            # max.block.ms (1.5 s), not request.timeout.ms (30 s)
            assert time.monotonic() - started < 10
    finally:
        started = time.monotonic()
        await first.close(timeout=5)
        assert time.monotonic() - started < 15  # its 5 s, not a 30 s request timeout


async def test_a_fenced_producer_leaves_its_transaction_block_with_producer_fenced_at_once(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    # transaction version 1: the fence shows first in AddPartitionsToTxn, which no batch
    # waits on; the batch held back for it must fail with it, not wait for max.block.ms
    topic = new_topic()
    txn_id = f"tansu-{uuid.uuid4().hex[:8]}"
    first = _producer(tansu, txn_id, max_block_ms=60_000)
    await first.start()
    try:
        assert first._txn is not None and first._txn.transaction_version == 1
        async with first.transaction():
            await first.send(topic, b"committed")
        async with _producer(tansu, txn_id):  # fences the first
            started = time.monotonic()
            with pytest.raises(ProducerFencedError, match="Close this producer"):
                async with first.transaction():
                    late = await first.send(topic, b"zombie")
            assert time.monotonic() - started < 20  # not max.block.ms (60 s)
            assert late.done()
            assert isinstance(late.exception(), ProducerFencedError), late.exception()
            assert first._txn.state is TransactionState.FATAL_ERROR
    finally:
        await first.close(timeout=5)
