"""Per-record CPU of ``send()`` with and without aiokprod.otel (the A/B in docs/observability.md).

Runs against an embedded Tansu broker, in one process, rounds interleaved so drift hits every
variant alike:

* ``plain``      — a ``Producer`` as today (instrumentation off: aiokprod.otel is not involved);
* ``plain-again``— the same again after ``import aiokprod.otel``: the A/B of "free when off";
* ``traced-noop``— ``instrument(producer)`` with no SDK configured (the API's no-op tracer);
* ``traced-sdk`` — ``instrument(producer)`` with the SDK, a BatchSpanProcessor and an exporter
  that drops spans (what tracing costs the producing process).

Rounds rotate the order of the variants. CPU is ``time.process_time()`` over N sends plus
the flush (so it includes the sender task and
the span ends), divided by N. Usage: ``python benchmarks/otel_cost.py [N] [ROUNDS]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from aiokprod import Producer
from aiokprod.devbroker import TansuBroker


async def _run(bootstrap: str, topic: str, n: int, variant: str) -> float:
    async with Producer(bootstrap, linger_ms=5) as raw:
        producer: Any = raw
        if variant.startswith("traced"):
            from aiokprod.otel import instrument

            provider = None
            if variant == "traced-sdk":
                from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
                from opentelemetry.sdk.trace.export import (
                    BatchSpanProcessor,
                    SpanExporter,
                    SpanExportResult,
                )

                class Drop(SpanExporter):
                    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                        return SpanExportResult.SUCCESS

                provider = TracerProvider()
                provider.add_span_processor(BatchSpanProcessor(Drop()))
            producer = instrument(raw, tracer_provider=provider)
        value = b"x" * 100
        await producer.send_and_wait(topic, value)  # metadata, connection: not measured
        start = time.process_time()
        for i in range(n):
            await producer.send(topic, value, key=b"%d" % (i % 64))
        await producer.flush()
        cpu = time.process_time() - start
        if variant == "traced-sdk":
            provider.shutdown()  # type: ignore[union-attr]
    return cpu / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    variants = ["plain", "plain-again", "traced-noop", "traced-sdk"]
    results: dict[str, list[float]] = {v: [] for v in variants}
    with TansuBroker() as broker:
        broker.create_topic("otel-cost", partitions=3)
        for r in range(rounds):
            # rotate the order each round: a variant's position (a warmer process, a longer
            # log on the broker) must not pass for its cost
            for variant in variants[r % 4:] + variants[:r % 4]:
                if variant == "plain-again":
                    import aiokprod.otel  # noqa: F401 - the module loaded, nothing instrumented
                results[variant].append(asyncio.run(_run(broker.bootstrap, "otel-cost", n,
                                                         variant)))
    print(f"{n} records x {rounds} rounds, CPU µs/record (median, min, max)")
    base = statistics.median(results["plain"])
    for variant in variants:
        xs = results[variant]
        med = statistics.median(xs)
        print(f"{variant:12s} {med:7.2f} {min(xs):7.2f} {max(xs):7.2f}   "
              f"{med - base:+6.2f} vs plain")


if __name__ == "__main__":
    main()
