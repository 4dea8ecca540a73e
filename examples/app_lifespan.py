"""One producer for an application's lifetime (the pattern FastAPI's lifespan uses).

Start it once, share it, close it with a bound on shutdown: ``close(timeout=...)`` returns in
time even if a broker stalls, and fails what it could not deliver.
"""

from __future__ import annotations

import asyncio
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


async def handle_request(producer: Producer, order_id: int) -> int:
    """What a request handler does: send and wait for the acknowledgement."""
    md = await producer.send_and_wait("orders", f"order {order_id}".encode(),
                                      key=str(order_id).encode())
    return md.offset


async def main(bootstrap: str) -> None:
    async with lifespan(bootstrap) as producer:
        offsets = await asyncio.gather(*(handle_request(producer, i) for i in range(10)))
        print(sorted(offsets))


if __name__ == "__main__":
    from aiokprod.devbroker import TansuBroker

    with TansuBroker() as broker:
        broker.create_topic("orders", partitions=3)
        asyncio.run(main(broker.bootstrap))
