"""The same FastAPI app with aiokprod, aiokafka and confluent-kafka's AIOProducer, under load.

Each app answers ``POST /events/{topic}`` once the record is acknowledged (as
examples/fastapi_app.py does). For each client: an embedded Tansu broker is started with a
fresh topic (3 partitions), the app runs in one uvicorn worker (uvloop, ``--app-dir
benchmarks fastapi_app_bench:create_app --factory``, client chosen by ``BENCH_CLIENT``), and an
``httpx.AsyncClient`` load generator (connections spread over pools of 5) sends N requests at a
fixed concurrency, after a warm-up. It prints requests/s, p50/p99 latency and the app
process's CPU per request for each client.

All three use linger 5 ms and acks=all; idempotence is on for aiokprod and confluent, off for
aiokafka (its InitProducerId fails against Tansu); confluent's AIOProducer also buffers in
Python before librdkafka, so its ``buffer_timeout`` is set to the same 5 ms (its 1 s default
would cap it at concurrency/1 s requests per second).

Usage: ``python benchmarks/fastapi_app_bench.py [N] [CONCURRENCY] [clients...]``.
The load generator shares the machine with the app and the broker: compare rows, not absolutes.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Header, Request

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLIENTS = ("aiokprod", "aiokafka", "confluent")
LINGER_MS = 5

Send = Callable[[str, bytes, bytes | None], Awaitable[tuple[int, int]]]


# ---- the apps ---------------------------------------------------------------------------------


@asynccontextmanager
async def _aiokprod(bootstrap: str) -> AsyncIterator[Send]:
    from aiokprod import Producer

    async with Producer(bootstrap, linger_ms=LINGER_MS, client_id="bench") as producer:

        async def send(topic: str, value: bytes, key: bytes | None) -> tuple[int, int]:
            md = await producer.send_and_wait(topic, value, key=key)
            return md.partition, md.offset

        yield send


@asynccontextmanager
async def _aiokafka(bootstrap: str) -> AsyncIterator[Send]:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    # idempotence off: aiokafka's InitProducerId fails against Tansu (UnknownError -1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=LINGER_MS,
                                enable_idempotence=False, acks="all")
    await producer.start()
    try:

        async def send(topic: str, value: bytes, key: bytes | None) -> tuple[int, int]:
            md = await producer.send_and_wait(topic, value, key=key)
            return md.partition, md.offset

        yield send
    finally:
        await producer.stop()


@asynccontextmanager
async def _confluent(bootstrap: str) -> AsyncIterator[Send]:
    from confluent_kafka.aio import AIOProducer

    producer = AIOProducer({"bootstrap.servers": bootstrap, "linger.ms": LINGER_MS,
                            "enable.idempotence": True},
                           buffer_timeout=LINGER_MS / 1000)
    try:

        async def send(topic: str, value: bytes, key: bytes | None) -> tuple[int, int]:
            pending: Any = producer.produce(topic, value=value, key=key)
            if inspect.isawaitable(pending) and not isinstance(pending, asyncio.Future):
                pending = await pending
            msg = await pending
            return msg.partition(), msg.offset()

        yield send
    finally:
        await producer.flush()
        await producer.close()


def create_app() -> Any:
    """The app for ``BENCH_CLIENT`` (uvicorn ``--factory``)."""
    client = os.environ["BENCH_CLIENT"]
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    factory = {"aiokprod": _aiokprod, "aiokafka": _aiokafka, "confluent": _confluent}[client]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with factory(bootstrap) as send:
            app.state.send = send
            yield

    app = FastAPI(lifespan=lifespan)

    @app.post("/events/{topic}")
    async def post_event(topic: str, request: Request,
                         x_key: str | None = Header(default=None)) -> dict[str, Any]:
        partition, offset = await request.app.state.send(
            topic, await request.body(), None if x_key is None else x_key.encode())
        return {"topic": topic, "partition": partition, "offset": offset}

    return app


# ---- the load ---------------------------------------------------------------------------------


async def _load(url: str, topic: str, n: int, concurrency: int) -> tuple[float, list[float], int]:
    import httpx

    latencies: list[float] = []
    errors = 0
    next_i = iter(range(n))
    per_client = 5
    limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
    clients = [httpx.AsyncClient(base_url=url, limits=limits, timeout=60)
               for _ in range(-(-concurrency // per_client))]

    async def worker(client: Any) -> None:
        nonlocal errors
        for i in next_i:
            t0 = time.perf_counter()
            try:
                r = await client.post(f"/events/{topic}", content=b"v%08d" % i,
                                      headers={"X-Key": str(i % 97)})
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                latencies.append(time.perf_counter() - t0)
            else:
                errors += 1

    start = time.perf_counter()
    try:
        await asyncio.gather(*(worker(clients[w % len(clients)]) for w in range(concurrency)))
    finally:
        for c in clients:
            await c.aclose()
    return time.perf_counter() - start, latencies, errors


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def bench(client: str, n: int, concurrency: int) -> dict[str, float]:
    import httpx

    from aiokprod.devbroker import TansuBroker

    with TansuBroker() as broker:
        topic = f"bench-{client}"
        broker.create_topic(topic, partitions=3)
        port = _free_port()
        env = dict(os.environ, BENCH_CLIENT=client, KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap,
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(HERE),
             "fastapi_app_bench:create_app", "--factory", "--port", str(port),
             "--loop", "uvloop", "--no-access-log", "--log-level", "warning"], env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.post(f"{url}/events/{topic}", content=b"warm",
                                  timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{client} app did not come up")
                time.sleep(0.1)
            asyncio.run(_load(url, topic, min(1000, n), concurrency))  # warm-up
            cpu0 = _cpu_seconds(process.pid)
            elapsed, latencies, errors = asyncio.run(_load(url, topic, n, concurrency))
            app_cpu = _cpu_seconds(process.pid) - cpu0
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {"rps": len(latencies) / elapsed, "p50": q[49] * 1000, "p99": q[98] * 1000,
            "errors": float(errors), "cpu_us": app_cpu / n * 1e6}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of the app process (the column that the load generator, sharing
    the cores, does not blur)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    clients = sys.argv[3:] or list(CLIENTS)
    print(f"FastAPI app, 1 uvicorn worker (uvloop), {n} requests at concurrency {concurrency}, "
          f"Tansu, linger {LINGER_MS} ms")
    print(f"{'client':10s} {'req/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'errors':>7s} "
          f"{'app CPU µs/req':>15s}")
    for client in clients:
        try:
            r = bench(client, n, concurrency)
        except Exception as exc:  # one client failing must not hide the others' rows
            print(f"{client:10s} failed: {type(exc).__name__}: {exc}")
            continue
        print(f"{client:10s} {r['rps']:8.0f} {r['p50']:8.1f} {r['p99']:8.1f} "
              f"{int(r['errors']):7d} {r['cpu_us']:15.0f}")


if __name__ == "__main__":
    main()
