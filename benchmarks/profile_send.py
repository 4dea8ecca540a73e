"""Profile the per-record ``await producer.send()`` path with pyinstrument.

Run: ``.venv/bin/python benchmarks/profile_send.py [--num-records N] [--html out.html]``.
It starts the embedded Tansu broker, warms up, then profiles the send loop plus the final
flush (so the sender task's encoding and I/O are in the profile too). The loop is the one
``aiokprod perf`` runs, without latency measurement, so only the producer is profiled.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinstrument import Profiler

from aiokprod import Producer
from aiokprod.devbroker import TansuBroker


async def _send_loop(bootstrap: str, topic: str, n: int, size: int, profiler: Profiler) -> None:
    value = b"x" * size
    async with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
        await producer.send_and_wait(topic, value)
        send = producer.send
        profiler.start()
        for _ in range(n):
            await send(topic, value)
        await producer.flush()
        profiler.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--html", type=Path, help="also write an HTML report here")
    args = parser.parse_args()
    profiler = Profiler(interval=0.0005, async_mode="disabled")
    with TansuBroker() as broker:
        broker.create_topic("profile", partitions=6)
        asyncio.run(_send_loop(broker.bootstrap, "profile", args.num_records,
                               args.record_size, profiler))
    print(profiler.output_text(unicode=True, color=False, show_all=False))
    if args.html:
        args.html.write_text(profiler.output_html())


if __name__ == "__main__":
    main()
