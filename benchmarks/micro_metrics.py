"""Micro-benchmarks of the per-record / per-batch primitives of the producer core.

Why: ``Sensor.record`` runs per batch (several calls per drained batch), ``murmur2`` and
``BuiltinPartitioner.partition`` run per record, ``BufferPool.try_allocate``/``deallocate`` per
batch. Their cost in nanoseconds tells whether they matter next to encoding a record.

Run: ``.venv/bin/python benchmarks/micro_metrics.py``. Numbers are best-of-N wall time per call,
including a small call overhead from ``timeit``.
"""

from __future__ import annotations

import random
import time
import timeit
from collections.abc import Callable
from functools import partial

from aiokprod._murmur2 import murmur2, partition_for_key
from aiokprod.metrics import MetricsRegistry, ProducerMetrics, Sensor
from aiokprod.producer.batching.buffer_pool import BufferPool
from aiokprod.producer.batching.partitioner import BuiltinPartitioner


def ns_per_call(fn: Callable[[], object], number: int = 200_000, repeat: int = 5) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def main() -> None:
    rng = random.Random(1)
    results: list[tuple[str, float]] = []

    sensor = Sensor("bench", clock=time.monotonic)
    now = time.monotonic()
    results.append(("Sensor.record(v) (reads clock)", ns_per_call(lambda: sensor.record(100.0))))
    results.append(("Sensor.record(v, 1, now)", ns_per_call(lambda: sensor.record(100.0, 1, now))))
    metrics = ProducerMetrics(MetricsRegistry(), "bench")
    metrics.topic("t")
    results.append((
        "ProducerMetrics.record_batch_sent (7 sensors)",
        ns_per_call(lambda: metrics.record_batch_sent(
            "t", record_count=100, size_bytes=16000, compression_ratio=0.5,
            max_record_bytes=200, queue_time_ms=3.0, now=now), number=50_000),
    ))
    results.append(("MetricsRegistry.snapshot (~85 metrics)",
                    ns_per_call(metrics.snapshot, number=2_000)))

    for size in (10, 36, 100):
        key = rng.randbytes(size)
        results.append((f"murmur2 {size}-byte key", ns_per_call(partial(murmur2, key))))
    key10 = rng.randbytes(10)
    results.append(("partition_for_key 10-byte key, 12 partitions",
                    ns_per_call(lambda: partition_for_key(key10, 12))))

    part = BuiltinPartitioner(batch_size=16384, rng=rng)
    parts = list(range(12))
    results.append(("BuiltinPartitioner.partition keyed (10 B)",
                    ns_per_call(lambda: part.partition("t", key10, b"v", parts, parts))))
    results.append(("BuiltinPartitioner.partition unkeyed (sticky)",
                    ns_per_call(lambda: part.partition("t", None, b"v", parts, parts))))

    def append_cycle() -> None:
        p = part.partition("t", None, b"v", parts, parts)
        part.on_append("t", p, 100)

    results.append(("partition + on_append unkeyed", ns_per_call(append_cycle)))

    pool = BufferPool(32 * 1024 * 1024, 16384)

    def alloc_free() -> None:
        buf = pool.try_allocate(16384)
        assert buf is not None
        pool.deallocate(buf)

    results.append(("BufferPool try_allocate+deallocate (pooled)", ns_per_call(alloc_free)))

    width = max(len(name) for name, _ in results)
    for name, ns in results:
        print(f"{name:<{width}}  {ns:10.0f} ns")


if __name__ == "__main__":
    main()
