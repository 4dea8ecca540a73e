"""KIP-1050's categories steer a transactional application, against Apache Kafka 4.4.0.

Each test runs the loop an application would write: one ``async with producer.transaction()``
per unit of work, and on failure a decision made from ``exc.category`` alone — ABORTABLE: the
block has aborted, run the next transaction on the same producer; APPLICATION_RECOVERABLE:
close this producer and start a new one with the same transactional id; INVALID_CONFIGURATION:
fix the setting. The conditions are real: the broker's own retriable refusal held until
delivery.timeout.ms (through a proxy in front of the node), a record over the topic's
max.message.bytes, a second producer fencing the first, a transaction timeout above the
broker's limit. read_committed shows only what the application committed.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator

import pytest

from aiokprod import Producer
from aiokprod._error_codes import ErrorCode
from aiokprod.errors import (
    ErrorCategory,
    InvalidTransactionTimeoutError,
    KafkaError,
    KafkaTimeoutError,
    NotEnoughReplicasError,
    ProducerFencedError,
    TransactionAbortableError,
)
from aiokprod.producer.transactional import transaction_manager
from support.kafka_fixtures import KafkaBehindProxy, kafka_behind_proxy, start_kafka
from support.kafka_jars import KafkaJars
from support.reader import read_back


@pytest.fixture(scope="module")
def proxied_kafka(kafka_jars: KafkaJars,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBehindProxy]:
    """One Kafka node advertising a proxy's port: every client connection crosses it."""
    start = functools.partial(start_kafka, kafka_jars,
                              work_dir=tmp_path_factory.mktemp("kafka-categories"))
    with kafka_behind_proxy(start, seed=7) as node:
        yield node


@pytest.fixture
def proxy(proxied_kafka: KafkaBehindProxy) -> Iterator[KafkaBehindProxy]:
    proxied_kafka.faults.clear()
    yield proxied_kafka
    proxied_kafka.faults.clear()


@pytest.fixture(params=[1, 2], ids=["txn-v1", "txn-v2"])
def transaction_version(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(transaction_manager, "MAX_TRANSACTION_VERSION", request.param)
    return int(request.param)


def new_topic(proxy: KafkaBehindProxy, **config: str) -> str:
    topic = f"categories-{uuid.uuid4().hex[:8]}"
    proxy.cluster.create_topic(topic, 1, config=config)
    return topic


def producer(proxy: KafkaBehindProxy, txn_id: str, **settings: object) -> Producer:
    settings.setdefault("linger_ms", 2)
    settings.setdefault("max_block_ms", 20000)
    return Producer(proxy.bootstrap, transactional_id=txn_id,
                    **settings)  # type: ignore[arg-type]


async def unit_of_work(p: Producer, topic: str, values: list[bytes]) -> KafkaError | None:
    """One transaction; the error that ended it, if any (the application's view)."""
    try:
        async with p.transaction():
            futures = [await p.send(topic, v) for v in values]
        assert all(f.done() and f.exception() is None for f in futures)
        return None
    except KafkaError as exc:
        return exc


def committed(proxy: KafkaBehindProxy, topic: str, expected: int) -> list[bytes]:
    records = read_back(proxy.cluster.bootstrap, topic, expected=expected, settle=0.5,
                        isolation_level="read_committed")
    return sorted(r.value for r in records if r.value is not None)


async def test_a_retriable_error_out_of_time_surfaces_as_abortable(
    proxy: KafkaBehindProxy, transaction_version: int
) -> None:
    """The broker refuses every Produce with NOT_ENOUGH_REPLICAS (retriable) until
    delivery.timeout.ms: the record fails with KafkaTimeoutError (retriable), but the
    transaction block reports TransactionAbortableError — do not resend, abort — and the same
    producer commits the next transaction."""
    topic = new_topic(proxy)
    async with producer(proxy, f"retriable-{uuid.uuid4().hex[:8]}", request_timeout_ms=5000,
                        delivery_timeout_ms=15_000) as p:
        refusal = proxy.faults.refuse_produce_request(ErrorCode.NOT_ENOUGH_REPLICAS)
        error = await unit_of_work(p, topic, [b"refused"])
        assert refusal.hits >= 2  # retried, not failed at the first answer
        assert isinstance(error, TransactionAbortableError), repr(error)
        assert error.category is ErrorCategory.ABORTABLE
        cause = error.__cause__
        assert isinstance(cause, KafkaTimeoutError), repr(cause)
        assert cause.category is ErrorCategory.RETRIABLE
        assert "delivery.timeout.ms" in str(cause)
        assert NotEnoughReplicasError.category is ErrorCategory.RETRIABLE
        proxy.faults.clear()
        assert await unit_of_work(p, topic, [b"next"]) is None
    assert committed(proxy, topic, 1) == [b"next"]


async def test_an_abortable_error_aborts_the_block_and_the_producer_carries_on(
    proxy: KafkaBehindProxy, transaction_version: int
) -> None:
    """A record over the topic's max.message.bytes: MESSAGE_TOO_LARGE from the broker."""
    topic = new_topic(proxy, **{"max.message.bytes": "2000"})
    async with producer(proxy, f"abortable-{uuid.uuid4().hex[:8]}") as p:
        error = await unit_of_work(p, topic, [b"x" * 5000])
        assert isinstance(error, TransactionAbortableError), repr(error)
        assert error.category is ErrorCategory.ABORTABLE
        assert await unit_of_work(p, topic, [b"after-abort"]) is None
    assert committed(proxy, topic, 1) == [b"after-abort"]


async def test_an_application_recoverable_error_needs_a_new_producer(
    proxy: KafkaBehindProxy, transaction_version: int
) -> None:
    """Fenced by a second instance: the block raises ProducerFencedError, the producer refuses
    every further transaction, and a new producer with the same transactional id (the
    application's recovery) commits."""
    topic = new_topic(proxy)
    txn_id = f"recoverable-{uuid.uuid4().hex[:8]}"
    first = producer(proxy, txn_id)
    await first.start()
    try:
        assert await unit_of_work(first, topic, [b"one"]) is None
        async with producer(proxy, txn_id):  # a second instance fences the first
            error = await unit_of_work(first, topic, [b"zombie"])
        assert isinstance(error, ProducerFencedError), repr(error)
        assert error.category is ErrorCategory.APPLICATION_RECOVERABLE
        again = await unit_of_work(first, topic, [b"refused"])
        assert isinstance(again, ProducerFencedError)  # refused at once, nothing sent
        with pytest.raises(ProducerFencedError):
            first.begin_transaction()
    finally:
        await first.close(timeout=5)
    async with producer(proxy, txn_id) as recovered:
        assert await unit_of_work(recovered, topic, [b"two"]) is None
    assert committed(proxy, topic, 2) == [b"one", b"two"]


async def test_an_invalid_configuration_error_says_fix_the_setting(proxy: KafkaBehindProxy) -> None:
    """transaction_timeout_ms above the broker's transaction.max.timeout.ms (900000)."""
    p = producer(proxy, f"config-{uuid.uuid4().hex[:8]}", transaction_timeout_ms=1_000_000)
    try:
        with pytest.raises(InvalidTransactionTimeoutError) as raised:
            await p.start()
        assert raised.value.category is ErrorCategory.INVALID_CONFIGURATION
    finally:
        await p.close(timeout=5)
