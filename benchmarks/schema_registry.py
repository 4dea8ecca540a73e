"""Avro through a Schema Registry, per record, beside confluent-kafka: ``python
benchmarks/schema_registry.py``.

What the serializer adds to a send: each client sends the same N records of ten fields twice to
one Tansu broker, once as bytes encoded beforehand and once as dicts through its registry
serializer (ours: ``AvroSerializer`` as ``value_serializer``; confluent-kafka's:
``AsyncAvroSerializer`` awaited per record, then ``AIOProducer.produce``), every delivery
confirmed (``gather``). The difference of the two is the serializer's cost inside a send; the
serializer alone is timed too. The registry is the tests' Apicurio Registry
(tests/support/schema_registry_server.py; built once into ~/.cache/aiokprod), schema ids
registered before timing, so no run asks the registry per record. Medians of ``--rounds``,
microseconds per record, wall-clock and the client process's CPU (the broker is a separate
process, so its share of the 2 cores does not count); "added" is the median of each round's
own difference.

Needs the ``test`` extra (confluent-kafka's schema_registry module, fastavro) and Java + Maven
for the registry. ``--quick``: a small N, one round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.schema_registry_server
sys.path.insert(0, str(ROOT))

from aiokprod import Producer  # noqa: E402
from aiokprod.devbroker import TansuBroker  # noqa: E402
from aiokprod.schema_registry import SchemaRegistryClient  # noqa: E402
from aiokprod.schema_registry.avro import AvroSerializer  # noqa: E402
from support.registry_jar import ensure_registry  # noqa: E402
from support.schema_registry_server import RegistryServer  # noqa: E402

SCHEMA = {"type": "record", "name": "Order", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "qty", "type": "int"},
    {"name": "paid", "type": "boolean"}, {"name": "country", "type": "string"},
    {"name": "ts", "type": "long"}, {"name": "score", "type": "float"},
    {"name": "sku", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": None}]}


def record(i: int) -> dict[str, Any]:
    return {"id": i, "user": f"user-{i % 1000}", "amount": i * 0.25, "qty": i % 7,
            "paid": i % 2 == 0, "country": "DE", "ts": 1_700_000_000_000 + i, "score": 0.5,
            "sku": f"SKU-{i % 100:04d}", "note": None if i % 3 else "gift"}


async def _timed(run: Callable[[], Awaitable[None]], n: int) -> tuple[float, float]:
    """Wall and this process's CPU (every thread: confluent-kafka's librdkafka threads too, not
    the broker's), in us per record."""
    started, cpu = time.perf_counter(), time.process_time()
    await run()
    return ((time.perf_counter() - started) / n * 1e6, (time.process_time() - cpu) / n * 1e6)


async def ours(bootstrap: str, url: str, user_info: str, n: int) -> dict[str, float]:
    client = SchemaRegistryClient(url, basic_auth_user_info=user_info)
    serializer = AvroSerializer(client, SCHEMA)
    topic = f"bench-ours-{uuid.uuid4().hex[:8]}"
    await serializer.prepare(topic)
    records = [record(i) for i in range(n)]
    encoded = [serializer.serialize_to_topic(topic, r) for r in records]
    result = {}
    encode = serializer.serialize_to_topic

    def serialize_only() -> None:
        for r in records:
            encode(topic, r)

    started = time.perf_counter()
    serialize_only()
    result["serializer alone"] = (time.perf_counter() - started) / n * 1e6
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as raw:
        async def send_raw() -> None:
            await asyncio.gather(*[await raw.send(topic, v) for v in encoded])
        await send_raw()  # warm: metadata, connections
        result["send() of bytes"], result["send() of bytes, CPU"] = await _timed(send_raw, n)
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5,
                        value_serializer=serializer) as producer:
        async def send_avro() -> None:
            await asyncio.gather(*[await producer.send(topic, r) for r in records])
        await send_avro()
        result["send() through the serializer"], result["send() through the serializer, CPU"] \
            = await _timed(send_avro, n)
    return result


async def confluent(bootstrap: str, url: str, user_info: str, n: int) -> dict[str, float]:
    import json

    from confluent_kafka.aio import AIOProducer
    from confluent_kafka.schema_registry import AsyncSchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AsyncAvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = AsyncSchemaRegistryClient({"url": url, "basic.auth.user.info": user_info})
    serializer = await AsyncAvroSerializer(client, json.dumps(SCHEMA))
    topic = f"bench-confluent-{uuid.uuid4().hex[:8]}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    records = [record(i) for i in range(n)]
    encoded = [await serializer(r, ctx) for r in records]  # registers, warms its caches
    result = {}
    started = time.perf_counter()
    for r in records:
        await serializer(r, ctx)
    result["serializer alone"] = (time.perf_counter() - started) / n * 1e6
    producer = AIOProducer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                            "enable.idempotence": True})
    try:
        async def send_raw() -> None:
            await asyncio.gather(*[await producer.produce(topic, value=v) for v in encoded])

        async def send_avro() -> None:
            await asyncio.gather(*[await producer.produce(topic, value=await serializer(r, ctx))
                                   for r in records])
        await send_raw()
        result["send() of bytes"], result["send() of bytes, CPU"] = await _timed(send_raw, n)
        await send_avro()
        result["send() through the serializer"], result["send() through the serializer, CPU"] \
            = await _timed(send_avro, n)
    finally:
        await producer.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.records, args.rounds = 2_000, 1
    runner = ensure_registry()
    if isinstance(runner, str):
        sys.exit(runner)
    with tempfile.TemporaryDirectory() as tmp, TansuBroker() as broker:
        registry = RegistryServer(runner, Path(tmp))
        registry.start()
        try:
            rows: dict[str, dict[str, list[float]]] = {}
            for _ in range(args.rounds):
                for name, run in (("aiokprod", ours), ("confluent-kafka aio", confluent)):
                    got = asyncio.run(run(broker.bootstrap, registry.url, registry.user_info,
                                          args.records))
                    for what, us in got.items():
                        rows.setdefault(name, {}).setdefault(what, []).append(us)
        finally:
            registry.stop()
    print(f"Avro, 10 fields, {args.records} records, median of {args.rounds} rounds, "
          f"us per record (wall, and CPU of the client's process):")
    print(f"{'':40}" + "".join(f"{name:>22}" for name in rows))
    for what in ("serializer alone", "send() of bytes", "send() through the serializer",
                 "send() of bytes, CPU", "send() through the serializer, CPU"):
        print(f"{what:40}" + "".join(f"{statistics.median(rows[n][what]):22.2f}"
                                     for n in rows))
    for unit in ("", ", CPU"):  # the median of each round's own difference
        added = {n: statistics.median(
            t - b for t, b in zip(rows[n][f"send() through the serializer{unit}"],
                                  rows[n][f"send() of bytes{unit}"], strict=True))
            for n in rows}
        print(f"{'added by the serializer' + unit:40}" + "".join(
            f"{added[n]:22.2f}" for n in rows))

if __name__ == "__main__":
    main()
