"""Transactions against Apache Kafka, the reference (KIP-98, KIP-447).

confluent-kafka reads back at read_committed and read_uncommitted: committed records visible
exactly once, aborted ones never to read_committed (but to read_uncommitted, which proves they
were written and hidden by the markers), a fenced producer's open transaction never visible;
offsets sent to the transaction are what the group has committed afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition

from aiokprod import Producer
from aiokprod.errors import (
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
)
from aiokprod.producer.transactional import transaction_manager
from aiokprod.producer.transactional.transactions import ConsumerGroupMetadata, TransactionState
from support.kafka_cluster import KafkaCluster
from support.reader import read_back


@pytest.fixture(params=[1, 2], ids=["txn-v1", "txn-v2"])
def transaction_version(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Run with the KIP-98 protocol and with KIP-890's transaction version 2 (Kafka 4.1.1
    finalizes transaction.version=2 and still serves version 1)."""
    monkeypatch.setattr(transaction_manager, "MAX_TRANSACTION_VERSION", request.param)
    return int(request.param)


def _txn_id() -> str:
    return f"aiokprod-test-{uuid.uuid4().hex[:8]}"


def _producer(kafka: KafkaCluster, transactional_id: str, **config: object) -> Producer:
    config.setdefault("linger_ms", 2)
    config.setdefault("max_block_ms", 20000)
    return Producer(bootstrap_servers=kafka.bootstrap, transactional_id=transactional_id,
                    **config)


def _values(records: list[object]) -> list[bytes]:
    return sorted(r.value for r in records)  # type: ignore[attr-defined]


async def test_committed_records_are_visible_exactly_once_and_aborted_ones_only_uncommitted(
    kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int
) -> None:
    topic = kafka_topic(partitions=3)
    async with _producer(kafka, _txn_id()) as producer:
        assert producer._txn is not None
        assert producer._txn.state is TransactionState.READY
        assert producer._txn.transaction_version == transaction_version
        epoch = producer._txn._idem.producer_epoch
        async with producer.transaction():
            for i in range(30):
                await producer.send(topic, f"c1-{i}".encode(), key=str(i).encode())
        producer.begin_transaction()
        futures = [await producer.send(topic, f"a-{i}".encode(), key=str(i).encode())
                   for i in range(20)]
        await asyncio.gather(*futures)  # written to the log, then aborted
        await producer.abort_transaction()
        with pytest.raises(RuntimeError, match="boom"):
            async with producer.transaction():
                await producer.send_many(topic, [f"x-{i}".encode() for i in range(10)])
                raise RuntimeError("boom")
        async with producer.transaction():
            await producer.send_many(topic, [f"c2-{i}".encode() for i in range(10)])
        assert producer._txn.transactions_committed == 2
        assert producer._txn.transactions_aborted == 2
        # version 2 bumps the epoch at every EndTxn (KIP-890; 3 or 4 were sent: the "boom"
        # abort needs none if nothing of it left the client); version 1 only when an abort
        # left sequences the broker cannot continue
        bumps = producer._txn._idem.producer_epoch - epoch
        assert bumps >= 3 if transaction_version == 2 else bumps <= 2
        metrics = producer.metrics()
    committed = {f"c1-{i}".encode() for i in range(30)} | {f"c2-{i}".encode()
                                                            for i in range(10)}
    records = read_back(kafka.bootstrap, topic, expected=40, settle=1.0,
                        isolation_level="read_committed")
    assert _values(records) == sorted(committed)  # exactly once, no aborted record
    # the "boom" transaction's records may or may not have left before the abort failed them
    uncommitted = read_back(kafka.bootstrap, topic, expected=60, settle=0.5, timeout=60,
                            isolation_level="read_uncommitted")
    aborted = {f"a-{i}".encode() for i in range(20)}
    assert aborted <= {r.value for r in uncommitted}
    assert metrics["producer-metrics:txn-commit-time-ns-total"] > 0
    assert metrics["producer-metrics:txn-abort-time-ns-total"] > 0
    assert metrics["producer-metrics:txn-init-time-ns-total"] > 0


async def test_send_outside_a_transaction_raises_at_once(
    kafka: KafkaCluster, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic()
    async with _producer(kafka, _txn_id()) as producer:
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send(topic, b"x")
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send_many(topic, [b"x"])
        with pytest.raises(IllegalStateError, match="commit_transaction"):
            await producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            producer.begin_transaction()
        await producer.abort_transaction()  # nothing was added: no EndTxn needed
        assert producer._acc is not None and not producer._acc.has_incomplete()


async def test_a_second_producer_with_the_same_id_fences_the_first(
    kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int
) -> None:
    topic = kafka_topic(partitions=2)
    txn_id = _txn_id()
    first = _producer(kafka, txn_id)
    await first.start()
    try:
        first.begin_transaction()
        delivered = [await first.send(topic, f"zombie-{i}".encode()) for i in range(10)]
        await asyncio.gather(*delivered)  # written, in an open transaction
        async with _producer(kafka, txn_id) as second:  # fences the first, aborts its txn
            async with second.transaction():
                await second.send(topic, b"from-the-second")
            with pytest.raises(ProducerFencedError, match="Close this producer and create a new"):
                await first.commit_transaction()
            assert first._txn is not None
            assert first._txn.state is TransactionState.FATAL_ERROR
            with pytest.raises(ProducerFencedError):
                await first.send(topic, b"after")
            with pytest.raises(ProducerFencedError):
                await first.abort_transaction()  # final: no request, at once
            async with second.transaction():
                await second.send(topic, b"second-again")
    finally:
        await first.close(timeout=5)
    records = read_back(kafka.bootstrap, topic, expected=2, settle=1.0,
                        isolation_level="read_committed")
    assert _values(records) == [b"from-the-second", b"second-again"]
    uncommitted = read_back(kafka.bootstrap, topic, expected=12, settle=0.5,
                            isolation_level="read_uncommitted")
    assert len([r for r in uncommitted if r.value.startswith(b"zombie-")]) == 10


async def test_offsets_sent_to_the_transaction_are_committed_with_it(
    kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int
) -> None:
    source, sink = kafka_topic(partitions=2), kafka_topic()
    group = f"aiokprod-group-{uuid.uuid4().hex[:8]}"
    async with _producer(kafka, _txn_id()) as producer:
        async with producer.transaction():
            await producer.send(sink, b"out-1")
            await producer.send_offsets_to_transaction({(source, 0): 5, (source, 1): 7}, group)
        producer.begin_transaction()
        await producer.send(sink, b"aborted")
        await producer.send_offsets_to_transaction({(source, 0): 99},
                                                   ConsumerGroupMetadata(group))
        await producer.abort_transaction()
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "log_level": 3})
    try:
        committed = consumer.committed([CTopicPartition(source, 0), CTopicPartition(source, 1)],
                                       timeout=10)
    finally:
        consumer.close()
    assert sorted((tp.partition, tp.offset) for tp in committed) == [(0, 5), (1, 7)]
    records = read_back(kafka.bootstrap, sink, expected=1, settle=0.5)
    assert _values(records) == [b"out-1"]


async def test_send_offsets_outside_a_transaction_is_illegal(kafka: KafkaCluster) -> None:
    async with _producer(kafka, _txn_id()) as producer:
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send_offsets_to_transaction({("t", 0): 1}, "g")
        with pytest.raises(ValueError, match="group"):
            producer.begin_transaction()
            await producer.send_offsets_to_transaction({("t", 0): 1}, "")
        await producer.abort_transaction()
    assert issubclass(ProducerFencedError, KafkaError)


async def test_a_failed_record_makes_the_transaction_abortable_and_abort_recovers(
    kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int
) -> None:
    topic = kafka_topic(config={"max.message.bytes": "2000"})
    async with _producer(kafka, _txn_id()) as producer:
        assert producer._txn is not None
        producer.begin_transaction()
        ok = await producer.send(topic, b"small")
        await ok  # alone in its batch: a 2-record batch over max.message.bytes re-splits
        too_big = await producer.send(topic, b"x" * 5000)  # the broker refuses it
        with pytest.raises(KafkaError):
            await too_big
        assert producer._txn.state is TransactionState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError, match="abort"):
            await producer.send(topic, b"more")
        with pytest.raises(TransactionAbortableError, match="abort"):
            await producer.commit_transaction()
        await producer.abort_transaction()
        assert producer._txn.state is TransactionState.READY
        async with producer.transaction():  # usable again
            await producer.send(topic, b"after-abort")
    records = read_back(kafka.bootstrap, topic, expected=1, settle=0.5)
    assert _values(records) == [b"after-abort"]


async def test_abort_fails_queued_records_with_a_clear_error(
    kafka: KafkaCluster, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic()
    async with _producer(kafka, _txn_id(), linger_ms=60000) as producer:
        producer.begin_transaction()
        queued = [await producer.send(topic, f"q-{i}".encode()) for i in range(5)]
        await producer.abort_transaction()
        for future in queued:
            with pytest.raises(KafkaError, match="transaction aborted"):
                await future


async def test_close_with_an_open_transaction_aborts_it(
    kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int
) -> None:
    topic = kafka_topic()
    first = _producer(kafka, _txn_id(), transaction_timeout_ms=300_000)
    await first.start()
    first.begin_transaction()
    await (await first.send(topic, b"left-open"))  # written in an open transaction
    await first.close(timeout=60)
    async with _producer(kafka, _txn_id()) as second, second.transaction():
        await second.send(topic, b"committed")
    # left open, the first transaction would hold read_committed readers back until
    # transaction.timeout.ms (300 s): the committed record would not be readable within the
    # reader's 120 s
    records = read_back(kafka.bootstrap, topic, expected=1, timeout=120, settle=0.3)
    assert _values(records) == [b"committed"]


@pytest.mark.parametrize(
    ("kafka_release", "txn_version"),
    [("3.9.1", 1), ("4.1.1", 1), ("4.1.1", 2), ("4.4.0", 2)],
    indirect=["kafka_release"], ids=["3.9.1-txn-v1", "4.1.1-txn-v1", "4.1.1-txn-v2",
                                     "4.4.0-txn-v2"])
async def test_a_fenced_producer_leaves_its_transaction_block_with_producer_fenced_at_once(
    kafka_release: KafkaCluster, txn_version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A commits, B starts with the same transactional id (fencing A), A opens another
    # transaction: its first record fails and leaving the block raises ProducerFencedError
    # within a second or two, not KafkaTimeoutError after max.block.ms
    monkeypatch.setattr(transaction_manager, "MAX_TRANSACTION_VERSION", txn_version)
    kafka = kafka_release
    topic = f"fenced-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1)
    txn_id = _txn_id()
    first = _producer(kafka, txn_id, max_block_ms=60_000)
    await first.start()
    try:
        assert first._txn is not None
        assert first._txn.transaction_version == txn_version
        async with first.transaction():
            await first.send(topic, b"committed")
        async with _producer(kafka, txn_id):  # fences the first
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(ProducerFencedError, match="Close this producer") as raised:
                async with first.transaction():
                    late = await first.send(topic, b"zombie")
            elapsed = loop.time() - started
            assert elapsed < 20, elapsed  # a second or two, not max.block.ms (60 s)
            assert late.done()
            if txn_version == 1:
                # held back for AddPartitionsToTxn, which found the fence: it fails with it
                assert isinstance(late.exception(), ProducerFencedError), late.exception()
            else:
                # sent (partitions are added by the leader) and refused: KIP-588 makes that
                # abortable; the abort's EndTxn then says PRODUCER_FENCED
                assert isinstance(late.exception(), InvalidProducerEpochError), late.exception()
                assert isinstance(raised.value.__cause__, TransactionAbortableError)
            assert first._txn.state is TransactionState.FATAL_ERROR
            with pytest.raises(ProducerFencedError):
                first.begin_transaction()
    finally:
        await first.close(timeout=5)
    records = read_back(kafka.bootstrap, topic, expected=1, settle=0.5,
                        isolation_level="read_committed")
    assert _values(records) == [b"committed"]


async def test_committed_offsets_reads_what_committed_transactions_recorded(
    kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int
) -> None:
    """``committed_offsets``: the last committed transaction's offsets, never an aborted
    one's; an offset pending in an open transaction is waited for, not reported."""
    sink = kafka_topic()
    group = f"aiokprod-group-{uuid.uuid4().hex[:8]}"
    marker = (sink, 0)  # Kafka refuses offsets of a topic it does not have
    async with _producer(kafka, _txn_id()) as writer, \
            Producer(bootstrap_servers=kafka.bootstrap, max_block_ms=10000) as reader:
        assert await reader.committed_offsets(group, [marker, (sink, 1)]) == {
            marker: None, (sink, 1): None}
        async with writer.transaction():
            await writer.send(sink, b"one")
            await writer.send_offsets_to_transaction({marker: 5}, group)
        assert await reader.committed_offsets(group, [marker]) == {marker: 5}
        writer.begin_transaction()
        await writer.send_offsets_to_transaction({marker: 9}, group)
        await writer.abort_transaction()
        assert await writer.committed_offsets(group, [marker]) == {marker: 5}
        # a pending offset: the read waits for the transaction's outcome
        writer.begin_transaction()
        await writer.send(sink, b"two")
        await writer.send_offsets_to_transaction({marker: 7}, group)
        pending = asyncio.ensure_future(reader.committed_offsets(group, [marker]))
        await asyncio.sleep(0.5)
        assert not pending.done()
        await writer.commit_transaction()
        assert await asyncio.wait_for(pending, 10) == {marker: 7}
        with pytest.raises(ValueError, match="group_id"):
            await reader.committed_offsets("", [marker])


async def test_committed_offsets_before_offset_fetch_v8(
    kafka: KafkaCluster, kafka_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """OffsetFetch v7 (one group per request, before KIP-709's list of groups) reads the same."""
    from aiokprod.protocol import OffsetFetchRequest
    monkeypatch.setattr(OffsetFetchRequest, "MAX_VERSION", 7)
    sink = kafka_topic(partitions=2)
    group = f"aiokprod-group-{uuid.uuid4().hex[:8]}"
    async with _producer(kafka, _txn_id()) as writer:
        async with writer.transaction():
            await writer.send(sink, b"one")
            await writer.send_offsets_to_transaction({(sink, 1): 11}, group)
        assert await writer.committed_offsets(group, [(sink, 0), (sink, 1)]) == {
            (sink, 0): None, (sink, 1): 11}
    monkeypatch.setattr(OffsetFetchRequest, "MAX_VERSION", 6)
    async with Producer(bootstrap_servers=kafka.bootstrap, max_block_ms=5000) as reader:
        with pytest.raises(KafkaError, match="require_stable"):
            await reader.committed_offsets(group, [(sink, 1)])
