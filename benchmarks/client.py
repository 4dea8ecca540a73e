"""One benchmark client run, in its own process: ``python benchmarks/client.py '<json spec>'``.

``benchmarks/run.py`` starts this once per (client, workload, round), so the CPU time read here
(``time.process_time()``, all threads of this process: librdkafka's included) belongs to one
client only, and one client's garbage cannot slow another. It prints one JSON object on stdout.

Every client runs the same loop shape: warm up with one acknowledged record, start the clocks,
send ``num_records`` values as fast as the API allows, measure send-to-ack latency of every
``latency_every``-th record (the rest carry no callback at all), wait until everything is
acknowledged, stop the clocks. Settings common to all: acks=all, idempotence on, linger 5 ms;
everything else is each client's default (see docs/performance.md).

Clients:

* ``aiokprod-send``  — ``await producer.send()`` per record (this is ``aiokprod perf``'s loop);
* ``aiokprod-bulk``  — ``await producer.send_many()`` per chunk of ``chunk`` records; latency is
  per chunk (from the call to the chunk's future), i.e. the last record's of each chunk;
* ``aiokafka``       — ``await AIOKafkaProducer.send()`` per record;
* ``confluent``      — ``confluent_kafka.Producer.produce()`` per record, ``poll(0)`` every 1,000
  records and ``poll(0.001)`` on ``BufferError`` (queue full), then ``flush()``;
* ``confluent-aio``  — ``await confluent_kafka.aio.AIOProducer.produce()`` per record.

And one special run, ``aiokprod-fill`` (the memory section): it starts its own mock cluster in
this process (so it can stall it mid-run), warms up, sets a 60 s RTT on every broker, then sends
1 KiB records until ``send`` blocks for ``max.block.ms`` (1 s) because ``buffer.memory`` is
used up, and reports the peak RSS. Its JSON line is printed before the process exits hard
(``os._exit``): the stalled requests are abandoned on purpose.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aiokprod._perf import LatencyRecorder, LatencyStats, PerfSettings, run_perf  # noqa: E402

CLIENTS = ("aiokprod-send", "aiokprod-bulk", "aiokafka", "confluent", "confluent-aio")


def _rss_kib() -> int:
    """Peak resident set size of this process so far (KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _current_rss_kib() -> int:
    """Resident set size right now (KiB), from /proc; the peak where /proc is missing."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except OSError:
        return _rss_kib()


def _result(spec: dict[str, Any], elapsed: float, cpu: float, rec: LatencyRecorder,
            baseline_rss: int, errors: int | None = None) -> dict[str, Any]:
    n = spec["num_records"]
    lat = LatencyStats.of(rec.latencies)
    return {
        "client": spec["client"], "records": n,
        "errors": rec.errors if errors is None else errors,
        "first_error": None if rec.first_error is None else repr(rec.first_error),
        "elapsed_s": elapsed, "records_per_sec": n / elapsed, "cpu_s": cpu,
        "cpu_us_per_record": cpu * 1e6 / n, "latency_ms": lat.as_dict(),
        "latency_samples": lat.count, "baseline_rss_kib": baseline_rss,
        "max_rss_kib": _rss_kib(),
    }


async def _aiokprod_send(spec: dict[str, Any]) -> dict[str, Any]:
    settings = PerfSettings(
        topic=spec["topic"], num_records=spec["num_records"],
        payloads=[b"x" * spec["record_size"]], latency_every=spec["latency_every"],
        throughput=spec.get("throughput"), producer_config=spec["aiokprod_config"])
    baseline = _rss_kib()
    result = await run_perf(settings, spec["bootstrap"])
    out = _result(spec, result.elapsed_s, result.cpu_s, LatencyRecorder(), baseline,
                  errors=result.errors)
    out["latency_ms"] = result.latency.as_dict()
    out["latency_samples"] = result.latency.count
    out["first_error"] = result.first_error
    out["max_rss_kib"] = result.max_rss_kib
    out["metrics"] = result.metrics
    return out


async def _aiokprod_bulk(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokprod import Producer

    topic, n, chunk = spec["topic"], spec["num_records"], spec["chunk"]
    value = b"x" * spec["record_size"]
    values = [value] * chunk
    rec = LatencyRecorder()
    producer = Producer.from_config({"bootstrap.servers": spec["bootstrap"],
                                     **spec["aiokprod_config"]})
    async with producer:
        await producer.send_and_wait(topic, value)
        baseline = _rss_kib()
        cpu0, t0 = time.process_time(), time.perf_counter()
        left = n
        while left:
            part = values if left >= chunk else values[:left]
            sent_at = time.perf_counter()
            rec.track(await producer.send_many(topic, part), sent_at)
            left -= len(part)
        await producer.flush()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return _result(spec, elapsed, cpu, rec, baseline)


async def _aiokafka(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    topic, n, every = spec["topic"], spec["num_records"], spec["latency_every"]
    value = b"x" * spec["record_size"]
    rec = LatencyRecorder()
    producer = AIOKafkaProducer(bootstrap_servers=spec["bootstrap"], acks="all",
                                enable_idempotence=spec.get("idempotence", True),
                                linger_ms=spec["linger_ms"])
    await producer.start()
    try:
        await (await producer.send(topic, value))
        baseline = _rss_kib()
        send, track, clock = producer.send, rec.track, time.perf_counter
        cpu0, t0 = time.process_time(), clock()
        countdown = 0
        for _ in range(n):
            if countdown:
                countdown -= 1
                await send(topic, value)
            else:
                countdown = every - 1
                sent_at = clock()
                track(await send(topic, value), sent_at)
        await producer.flush()
        elapsed, cpu = clock() - t0, time.process_time() - cpu0
    finally:
        await producer.stop()
    return _result(spec, elapsed, cpu, rec, baseline)


def _confluent_config(spec: dict[str, Any]) -> dict[str, Any]:
    return {"bootstrap.servers": spec["bootstrap"], "acks": "all", "enable.idempotence": True,
            "linger.ms": spec["linger_ms"]}


def _confluent(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import KafkaException, Producer

    topic, n, every = spec["topic"], spec["num_records"], spec["latency_every"]
    value = b"x" * spec["record_size"]
    rec = LatencyRecorder()
    clock = time.perf_counter

    def on_delivery(sent_at: float, err: Any, _msg: Any) -> None:
        if err is None:
            rec.record(clock() - sent_at)
        else:
            rec.fail(KafkaException(err))

    producer = Producer(_confluent_config(spec))
    producer.produce(topic, value)
    producer.flush()
    baseline = _rss_kib()
    produce, poll = producer.produce, producer.poll
    cpu0, t0 = time.process_time(), clock()
    countdown = 0
    for i in range(n):
        if countdown:
            countdown -= 1
            callback: Callable[[Any, Any], None] | None = None
        else:
            countdown = every - 1
            callback = partial(on_delivery, clock())
        while True:
            try:
                if callback is None:
                    produce(topic, value)
                else:
                    produce(topic, value, on_delivery=callback)
                break
            except BufferError:
                poll(0.001)
        if not i % 1000:
            poll(0)
    producer.flush()
    elapsed, cpu = clock() - t0, time.process_time() - cpu0
    return _result(spec, elapsed, cpu, rec, baseline)


async def _confluent_aio(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka.aio import AIOProducer

    topic, n, every = spec["topic"], spec["num_records"], spec["latency_every"]
    value = b"x" * spec["record_size"]
    rec = LatencyRecorder()
    producer = AIOProducer(_confluent_config(spec))
    try:
        await (await producer.produce(topic, value))
        await producer.flush()
        baseline = _rss_kib()
        produce, track, clock = producer.produce, rec.track, time.perf_counter
        cpu0, t0 = time.process_time(), clock()
        countdown = 0
        for _ in range(n):
            if countdown:
                countdown -= 1
                await produce(topic, value)
            else:
                countdown = every - 1
                sent_at = clock()
                track(await produce(topic, value), sent_at)
        await producer.flush()
        elapsed, cpu = clock() - t0, time.process_time() - cpu0
    finally:
        await producer.close()
    return _result(spec, elapsed, cpu, rec, baseline)


async def _aiokprod_fill(spec: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests"))
    from aiokprod import Producer
    from aiokprod.errors import KafkaTimeoutError
    from support.mock_cluster import MockCluster  # type: ignore[import-not-found]

    cluster = MockCluster(3)
    topic = spec["topic"]
    cluster.create_topic(topic, 6, 3)
    value = b"x" * spec["record_size"]
    producer = Producer.from_config({"bootstrap.servers": cluster.bootstrap,
                                     **spec["aiokprod_config"], "max.block.ms": "1000"})
    await producer.start()
    await producer.send_and_wait(topic, value)
    baseline = _current_rss_kib()
    for broker_id in cluster.broker_ids:
        cluster.broker_set_rtt(broker_id, 60_000)
    sent = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    try:
        while True:
            await producer.send(topic, value)
            sent += 1
    except KafkaTimeoutError:
        pass
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    pool = producer._pool  # statistics only, for the report
    return {"client": "aiokprod-fill", "records": sent, "errors": 0, "elapsed_s": elapsed,
            "records_per_sec": sent / elapsed, "cpu_s": cpu,
            "cpu_us_per_record": cpu * 1e6 / max(sent, 1), "baseline_rss_kib": baseline,
            "max_rss_kib": _rss_kib(), "buffered_bytes": sent * len(value),
            "pool": repr(pool), "latency_ms": LatencyStats.of([]).as_dict()}


def run_client(spec: dict[str, Any]) -> dict[str, Any]:
    client = spec["client"]
    if client == "aiokprod-fill":
        result = asyncio.run(_aiokprod_fill(spec))
        print(json.dumps(result), flush=True)
        os._exit(0)
    if client == "aiokprod-send":
        return asyncio.run(_aiokprod_send(spec))
    if client == "aiokprod-bulk":
        return asyncio.run(_aiokprod_bulk(spec))
    if client == "aiokafka":
        return asyncio.run(_aiokafka(spec))
    if client == "confluent":
        return _confluent(spec)
    if client == "confluent-aio":
        return asyncio.run(_confluent_aio(spec))
    raise SystemExit(f"unknown client {client!r}; known: {', '.join(CLIENTS)}")


def main() -> None:
    spec = json.loads(sys.argv[1])
    print(json.dumps(run_client(spec)), flush=True)


if __name__ == "__main__":
    main()
