"""The engine of ``aiokprod perf``: a producer load generator in the manner of Kafka's
``kafka-producer-perf-test``.

What is measured, and how cheaply:

* **Throughput** — records (and payload bytes) from the first ``send`` until ``flush()`` returns,
  i.e. until every record is acknowledged. Producer start-up and one warm-up record (sent and
  acknowledged: connections, metadata, producer id) happen before the clock starts.
* **Latency** — from just before ``send`` to the moment the record's delivery future is done,
  for every ``latency_every``-th record (default 16; Kafka's perf test also keeps only a
  sample). A measured record costs one ``time.perf_counter()`` call, one ``functools.partial``
  and one ``add_done_callback`` and, when its batch is acknowledged, one ``call_soon`` handle
  and a small Python callback. Measured on the benchmark machine that is ~2-4 µs per record
  (much of it extra garbage-collector work), as much as ``send`` itself, so measuring every
  record would halve the throughput being measured; one in 16 costs ~0.2 µs per record.
  Sampling by record count is unbiased: every record of a batch is acknowledged at the same
  instant, and the sample takes records at every position in the batches.
* **Errors** — the producer's own ``record-error-total`` metric (it counts failed records),
  plus the first error seen among the sampled records for the message.
* **CPU** — ``time.process_time()`` over the same span, so ``cpu_us_per_record`` is the CPU the
  whole client process (all threads) spent per record.

This module has no command-line code (see ``aiokprod.cli``) and no broker management, so tests
and ``benchmarks/`` drive it directly.
"""

from __future__ import annotations

import asyncio
import math
import random
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TextIO

__all__ = [
    "KEY_METRICS",
    "LatencyRecorder",
    "LatencyStats",
    "PerfResult",
    "PerfSettings",
    "Progress",
    "Throttle",
    "format_report",
    "make_payloads",
    "parse_producer_config",
    "percentile",
    "run_perf",
    "select_key_metrics",
]

#: The producer-level metrics (group ``producer-metrics``) a perf run reports, by name.
KEY_METRICS = (
    "record-send-rate",
    "record-send-total",
    "record-error-total",
    "record-retry-total",
    "batch-size-avg",
    "records-per-request-avg",
    "record-queue-time-avg",
    "record-queue-time-max",
    "request-latency-avg",
    "request-latency-max",
    "request-rate",
    "compression-rate-avg",
    "bufferpool-wait-time-total",
    "buffer-available-bytes",
)
_PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9))


def parse_producer_config(items: Sequence[str]) -> dict[str, str]:
    """``["linger.ms=5", "acks=all"]`` -> ``{"linger.ms": "5", "acks": "all"}``.

    Values stay strings: ``Producer.from_config`` converts them the way Java reads a properties
    file, and its errors name the key. Errors raised here name the offending item's key too.
    """
    config: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--producer-config {key!r}: expected key=value (e.g. linger.ms=5)")
        if not key:
            raise ValueError(f"--producer-config {item!r}: the key before '=' is empty")
        if key in config and config[key] != value.strip():
            raise ValueError(f"--producer-config {key!r} given twice with different values "
                             f"({config[key]!r} and {value.strip()!r})")
        config[key] = value.strip()
    return config


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of already sorted values.

    The smallest value such that at least ``q`` percent of the values are <= it; ``nan`` for
    no values. Nearest rank never interpolates, so every reported latency was observed.
    """
    if not 0 < q <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {q}")
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = math.ceil(q / 100.0 * n)
    return sorted_values[min(max(rank, 1), n) - 1]


@dataclass(frozen=True)
class LatencyStats:
    """Send-to-acknowledgement latency in milliseconds over ``count`` acknowledged records."""

    count: int
    avg: float
    p50: float
    p95: float
    p99: float
    p999: float
    max: float

    @classmethod
    def of(cls, seconds: list[float]) -> LatencyStats:
        """Statistics of latencies given in seconds (the list is sorted in place)."""
        seconds.sort()
        ms = 1000.0
        if not seconds:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan, nan)
        points = {name: percentile(seconds, q) * ms for name, q in _PERCENTILES}
        return cls(count=len(seconds), avg=math.fsum(seconds) / len(seconds) * ms,
                   max=seconds[-1] * ms, **points)

    def as_dict(self) -> dict[str, float]:
        return {"avg": self.avg, "p50": self.p50, "p95": self.p95, "p99": self.p99,
                "p999": self.p999, "max": self.max}


class LatencyRecorder:
    """Collects send-to-ack latencies from delivery futures (any ``concurrent``/``asyncio``-style
    future with ``add_done_callback``, ``cancelled`` and ``exception``).

    The caller decides which records to measure (see the module docstring on sampling).
    """

    __slots__ = ("acked", "errors", "first_error", "latencies")

    def __init__(self) -> None:
        # Seconds from send to acknowledgement, one per successfully acknowledged record.
        self.latencies: list[float] = []
        # Records whose delivery failed (or was cancelled).
        self.errors = 0
        # The first failure seen, for the report.
        self.first_error: BaseException | None = None
        # Records whose future is done, successful or not (for the progress bar).
        self.acked = 0

    def track(self, future: Any, sent_at: float) -> None:
        """Measure ``future`` from ``sent_at`` (a ``time.perf_counter()`` reading)."""
        future.add_done_callback(partial(self._done, sent_at))

    def _done(self, sent_at: float, future: Any) -> None:
        now = time.perf_counter()
        self.acked += 1
        error = None if not future.cancelled() else asyncio.CancelledError()
        if error is None:
            error = future.exception()
        if error is None:
            self.latencies.append(now - sent_at)
            return
        self.errors += 1
        if self.first_error is None:
            self.first_error = error

    def record(self, latency_s: float, count: int = 1) -> None:
        """Add ``count`` acknowledgements that took ``latency_s`` (clients with their own
        callbacks, or one completion covering many records)."""
        self.acked += count
        self.latencies.extend([latency_s] * count)

    def fail(self, error: BaseException, count: int = 1) -> None:
        self.acked += count
        self.errors += count
        if self.first_error is None:
            self.first_error = error


class Throttle:
    """Holds a sender to ``rate`` records per second on average since ``start()``.

    ``delay(sent)`` says how long to sleep before sending record number ``sent``; delays below
    one millisecond are reported as 0, since asyncio cannot sleep that precisely anyway; the
    loop catches up in the next millisecond.
    """

    def __init__(self, rate: float, clock: Callable[[], float] = time.perf_counter) -> None:
        if rate <= 0:
            raise ValueError(f"throughput cap must be > 0 records/s, got {rate}")
        self.rate = rate
        self._clock = clock
        self._start = clock()

    def start(self) -> None:
        self._start = self._clock()

    def delay(self, sent: int) -> float:
        ahead = self._start + sent / self.rate - self._clock()
        return ahead if ahead >= 0.001 else 0.0


class Progress:
    """A one-line progress bar redrawn in place on ``stream`` at most every ``interval`` s."""

    def __init__(self, total: int, stream: TextIO, interval: float = 0.2, width: int = 30) -> None:
        self.total = total
        self._stream = stream
        self._interval = interval
        self._width = width
        self._start = time.perf_counter()
        self._last_draw = 0.0

    def update(self, sent: int, acked: int, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last_draw < self._interval:
            return
        self._last_draw = now
        elapsed = max(now - self._start, 1e-9)
        done = acked / self.total if self.total else 1.0
        filled = int(done * self._width)
        bar = "#" * filled + "." * (self._width - filled)
        self._stream.write(f"\r[{bar}] {done:6.1%}  sent {sent:,}  acked {acked:,}/{self.total:,}"
                           f"  {acked / elapsed:,.0f} rec/s ")
        self._stream.flush()

    def close(self, sent: int, acked: int) -> None:
        self.update(sent, acked, force=True)
        self._stream.write("\n")
        self._stream.flush()


def make_payloads(record_size: int | None, payload_file: str | None,
                  delimiter: str = "\n", seed: int = 0) -> list[bytes]:
    """The payloads to send: one random record of ``record_size`` bytes (uppercase letters, as
    Kafka's perf test does), or the non-empty delimited records of ``payload_file``."""
    if (record_size is None) == (payload_file is None):
        raise ValueError("give exactly one of record_size and payload_file")
    if record_size is not None:
        if record_size < 0:
            raise ValueError(f"record size must be >= 0, got {record_size}")
        rng = random.Random(seed)
        return [bytes(rng.randrange(65, 91) for _ in range(record_size))]
    assert payload_file is not None
    with open(payload_file, "rb") as fh:
        data = fh.read()
    payloads = [p for p in data.split(delimiter.encode()) if p]
    if not payloads:
        raise ValueError(f"payload file {payload_file!r} holds no records "
                         f"(delimiter {delimiter!r})")
    return payloads


@dataclass(frozen=True)
class PerfSettings:
    """One perf run: what to send and how the producer is configured."""

    topic: str
    num_records: int
    # Record values; with one payload every record carries it, otherwise a seeded random choice.
    payloads: list[bytes]
    # Measure the latency of every n-th record (1: all); see the module docstring for why.
    latency_every: int = 16
    # Records per second; None sends as fast as possible.
    throughput: float | None = None
    # Java-named producer settings; ``bootstrap.servers`` is added by run_perf.
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    # Where to draw the progress bar (None: no bar).
    progress: TextIO | None = None
    seed: int = 0
    # Send (and wait for) one record before the clock starts, so start-up is not measured.
    warmup: bool = True


@dataclass(frozen=True)
class PerfResult:
    """What a run measured; ``as_dict`` is the ``--json`` document."""

    topic: str
    bootstrap_servers: str
    records: int
    errors: int
    first_error: str | None
    payload_bytes: int
    elapsed_s: float
    cpu_s: float
    max_rss_kib: int
    latency: LatencyStats
    config: dict[str, Any]
    metrics: dict[str, float]

    @property
    def records_per_sec(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else math.nan

    @property
    def mb_per_sec(self) -> float:
        return self.payload_bytes / 1e6 / self.elapsed_s if self.elapsed_s > 0 else math.nan

    @property
    def cpu_us_per_record(self) -> float:
        return self.cpu_s * 1e6 / self.records if self.records else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "bootstrap_servers": self.bootstrap_servers,
            "records": self.records,
            "acked": self.records - self.errors,
            "latency_samples": self.latency.count,
            "errors": self.errors,
            "first_error": self.first_error,
            "payload_bytes": self.payload_bytes,
            "elapsed_s": self.elapsed_s,
            "records_per_sec": self.records_per_sec,
            "mb_per_sec": self.mb_per_sec,
            "cpu_s": self.cpu_s,
            "cpu_us_per_record": self.cpu_us_per_record,
            "max_rss_kib": self.max_rss_kib,
            "latency_ms": self.latency.as_dict(),
            "config": self.config,
            "metrics": self.metrics,
        }


def select_key_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """The ``producer-metrics`` group entries named in ``KEY_METRICS``, keys unchanged."""
    wanted = set(KEY_METRICS)
    selected: dict[str, float] = {}
    for key, value in metrics.items():
        group, _, rest = key.partition(":")
        name = rest.split("{", 1)[0]
        if group == "producer-metrics" and name in wanted:
            selected[key] = value
    return dict(sorted(selected.items(), key=lambda kv: KEY_METRICS.index(
        kv[0].partition(":")[2].split("{", 1)[0])))


async def run_perf(settings: PerfSettings, bootstrap_servers: str) -> PerfResult:
    """Produce ``settings.num_records`` records with ``await producer.send()`` per record."""
    from aiokprod import Producer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers,
                              **settings.producer_config}
    producer = Producer.from_config(config)
    n = settings.num_records
    topic = settings.topic
    payloads = settings.payloads
    if len(payloads) == 1:
        values: Sequence[bytes] = payloads * n
    else:
        values = random.Random(settings.seed).choices(payloads, k=n)
    recorder = LatencyRecorder()
    progress = Progress(n, settings.progress) if settings.progress is not None else None
    throttle = Throttle(settings.throughput) if settings.throughput else None
    every = settings.latency_every
    if every < 1:
        raise ValueError(f"latency_every must be >= 1, got {every}")
    send = producer.send
    track = recorder.track
    clock = time.perf_counter
    sent = 0
    countdown = 0  # records until the next measured one
    async with producer:
        if settings.warmup:
            await producer.send_and_wait(topic, payloads[0])
        else:
            await producer.partitions_for(topic)
        cpu0 = time.process_time()
        start = clock()
        if throttle is not None:
            throttle.start()
        for value in values:
            if throttle is not None:
                pause = throttle.delay(sent)
                if pause:
                    await asyncio.sleep(pause)
            if countdown:
                countdown -= 1
                await send(topic, value)
            else:
                countdown = every - 1
                sent_at = clock()
                track(await send(topic, value), sent_at)
            sent += 1
            if progress is not None and not sent & 1023:
                progress.update(sent, min(recorder.acked * every, sent))
        await producer.flush()
        elapsed = clock() - start
        cpu = time.process_time() - cpu0
        all_metrics = producer.metrics()
        metrics = select_key_metrics(all_metrics)
        java_config = producer.config.to_java_names()
    if progress is not None:
        progress.close(sent, sent)
    errors = max(recorder.errors, int(sum(
        v for k, v in all_metrics.items()
        if k.startswith("producer-metrics:record-error-total"))))
    shown = {k: v for k, v in java_config.items() if isinstance(v, (int, float, str, bool))
             or v is None}
    return PerfResult(
        topic=topic, bootstrap_servers=bootstrap_servers, records=n, errors=errors,
        first_error=None if recorder.first_error is None else repr(recorder.first_error),
        payload_bytes=sum(len(v) for v in values), elapsed_s=elapsed, cpu_s=cpu,
        max_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        latency=LatencyStats.of(recorder.latencies), config=shown, metrics=metrics)


def format_report(result: PerfResult) -> str:
    """The human-readable summary (Kafka perf-test style first line, then details)."""
    lat = result.latency
    lines = [
        f"{result.records:,} records sent, {result.records_per_sec:,.1f} records/sec "
        f"({result.mb_per_sec:.2f} MB/sec), {lat.avg:.2f} ms avg latency, "
        f"{lat.max:.2f} ms max latency.",
        f"latency ms: avg {lat.avg:.2f}  p50 {lat.p50:.2f}  p95 {lat.p95:.2f}  "
        f"p99 {lat.p99:.2f}  p99.9 {lat.p999:.2f}  max {lat.max:.2f}",
        f"acked {result.records - result.errors:,}, errors {result.errors:,}, latency measured "
        f"on {lat.count:,} sampled records"
        + (f" (first: {result.first_error})" if result.first_error else ""),
        f"elapsed {result.elapsed_s:.3f} s, CPU {result.cpu_s:.3f} s "
        f"({result.cpu_us_per_record:.2f} µs/record), peak RSS {result.max_rss_kib / 1024:.1f} MiB",
        "producer metrics:",
    ]
    width = max((len(k) for k in result.metrics), default=0)
    for key, value in result.metrics.items():
        lines.append(f"  {key:<{width}}  {value:,.3f}")
    window = _rate_window_s(result.config)
    rates = [k for k in result.metrics if k.partition("{")[0].endswith("-rate")]
    if rates and result.elapsed_s < window:
        # Java's rates divide by at least (num.samples - 1) whole windows, 30 s by default:
        # after a run of a fraction of a second record-send-rate reads a few thousand while
        # the run sent hundreds of thousands per second. Say so next to the number.
        lines.append(
            f"  (the *-rate metrics are per second over the last {window:g} s at least, as "
            f"Java's: metrics.sample.window.ms x (metrics.num.samples - 1); this "
            f"{result.elapsed_s:.2f} s run sent {result.records_per_sec:,.0f} records/sec)")
    return "\n".join(lines)


def _rate_window_s(config: Mapping[str, Any]) -> float:
    """The shortest span a windowed ``-rate`` metric divides by (``_sensors``: Java's
    ``SampledStat`` rule), from the run's producer settings (Java names)."""
    window_ms = float(config.get("metrics.sample.window.ms", 30000))
    samples = int(config.get("metrics.num.samples", 2))
    return max(window_ms * (samples - 1), 1.0) / 1000


def default_progress_stream(enabled: bool | None) -> TextIO | None:
    """stderr when ``enabled`` is True, or when it is None and stderr is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return sys.stderr if enabled else None
