"""Windowed sensors and a registry of metrics keyed by Java's names: the generic half of
``aiokprod.metrics``, which builds the producer's own metrics on it.

Why this shape:

* The producer records **per batch or per request**, not per record, so a ``record`` call may
  stand for many events: ``record(value, n)`` adds ``value`` to the sums and ``n`` to the event
  counts. Rates are "sum of recorded values per second" (Java's ``Rate``), counting rates are
  "events per second" (Java's ``Meter`` over a ``WindowedCount``).
* Windows follow Java's ``SampledStat``: ``metrics_num_samples`` samples of
  ``metrics_sample_window_ms`` each; a sample starts at the first record that does not fit the
  previous one, samples older than ``num_samples * window`` are ignored when measuring, and a
  rate divides by at least ``(num_samples - 1)`` full windows so that a rate read just after a
  window rolled over is not inflated by a tiny denominator.
* Measuring is lazy: nothing is computed until :meth:`MetricsRegistry.snapshot`, so the cost sits
  with whoever reads metrics, not with the send path.
* No dependency: Prometheus / OpenTelemetry adapters implement :class:`MetricsReporter`.

Clocks are injected (seconds, like :func:`time.monotonic`) so tests drive windows by hand.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from typing import NamedTuple, Protocol

__all__ = [
    "RECORDING_LEVELS",
    "MetricKey",
    "MetricsRegistry",
    "MetricsReporter",
    "Sensor",
    "Stat",
]

_NAN = math.nan
_INF = math.inf


class MetricKey(NamedTuple):
    """Identity of one metric, as Java's ``MetricName`` (name, group, tags)."""

    name: str
    group: str
    # Sorted (key, value) pairs so that equal tag sets hash equally.
    tags: tuple[tuple[str, str], ...] = ()

    def tag(self, key: str) -> str | None:
        for k, v in self.tags:
            if k == key:
                return v
        return None

    def flat(self) -> str:
        """``group:name`` plus tags other than client-id: ``producer-topic-metrics:byte-rate
        {topic=t}``; one string key per metric for ``Producer.metrics()``."""
        extra = ",".join(f"{k}={v}" for k, v in self.tags if k != "client-id")
        return f"{self.group}:{self.name}" + (f"{{{extra}}}" if extra else "")


def _tags(tags: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(tags.items())) if tags else ()


class Sensor:
    """Sum/count/max/min over sliding sample windows plus cumulative totals.

    One sensor backs several metrics (e.g. ``batch-size-avg`` and ``batch-size-max``), so one
    ``record`` call updates them all. The current sample lives in plain slots and completed
    samples in a bounded deque: the common call is a clock read, a comparison and four
    additions/comparisons.
    """

    __slots__ = (
        "_clock",
        "_cur_count",
        "_cur_max",
        "_cur_min",
        "_cur_start",
        "_cur_sum",
        "_done",
        "_num_samples",
        "_rolled_count",
        "_rolled_sum",
        "_window_s",
        "name",
    )

    def __init__(
        self,
        name: str,
        *,
        sample_window_ms: float = 30000,
        num_samples: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if sample_window_ms <= 0 or num_samples < 1:
            raise ValueError(
                f"sensor {name!r}: sample window must be > 0 ms and num samples >= 1, got "
                f"{sample_window_ms} ms x {num_samples}"
            )
        self.name = name
        self._clock = clock
        self._window_s = sample_window_ms / 1000.0
        self._num_samples = num_samples
        # Sum and count of every sample already rolled over; with the current sample they give
        # the cumulative totals without a second pair of additions per record.
        self._rolled_sum = 0.0
        self._rolled_count = 0
        # Start of the current sample; -inf means "no sample yet", so the first record opens one
        # at its own timestamp, as Java's SampledStat does.
        self._cur_start = -_INF
        self._cur_sum = 0.0
        self._cur_count = 0
        self._cur_max = -_INF
        self._cur_min = _INF
        # Completed samples, newest last: (start, sum, count, max, min). The current sample is
        # one of the num_samples, so only num_samples - 1 completed ones are kept.
        self._done: deque[tuple[float, float, int, float, float]] = deque(
            maxlen=num_samples - 1
        )

    def record(self, value: float = 1.0, n: int = 1, now: float | None = None) -> None:
        """Record ``n`` events whose values sum to ``value``.

        ``max``/``min`` compare ``value`` itself (per call), which matches Java for metrics
        recorded once per batch such as ``record-size-max``. Pass ``now`` when the caller already
        read the clock (e.g. once per drained batch list) to skip another read.
        """
        if now is None:
            now = self._clock()
        if now - self._cur_start >= self._window_s:
            self._roll(now)
        self._cur_sum += value
        self._cur_count += n
        # Plain comparisons, not max()/min(): this is the hot path and a builtin call costs more.
        if value > self._cur_max:  # noqa: PLR1730
            self._cur_max = value
        if value < self._cur_min:  # noqa: PLR1730
            self._cur_min = value

    @property
    def total(self) -> float:
        """Cumulative sum of recorded values since creation (Java's ``CumulativeSum``)."""
        return self._rolled_sum + self._cur_sum

    @property
    def count_total(self) -> int:
        """Cumulative number of events since creation (Java's ``CumulativeCount``)."""
        return self._rolled_count + self._cur_count

    def _roll(self, now: float) -> None:
        self._rolled_sum += self._cur_sum
        self._rolled_count += self._cur_count
        if self._cur_start != -_INF:
            self._done.append(
                (self._cur_start, self._cur_sum, self._cur_count, self._cur_max, self._cur_min)
            )
        self._cur_start = now
        self._cur_sum = 0.0
        self._cur_count = 0
        self._cur_max = -_INF
        self._cur_min = _INF

    def _live(self, now: float) -> Iterator[tuple[float, float, int, float, float]]:
        """Samples still inside ``num_samples * window`` of ``now`` (Java purges the others)."""
        expire = self._num_samples * self._window_s
        for sample in self._done:
            if now - sample[0] < expire:
                yield sample
        if self._cur_start != -_INF and now - self._cur_start < expire:
            yield (self._cur_start, self._cur_sum, self._cur_count, self._cur_max, self._cur_min)

    def _now(self, now: float | None) -> float:
        return self._clock() if now is None else now

    def windowed_sum(self, now: float | None = None) -> float:
        now = self._now(now)
        return sum(s[1] for s in self._live(now))

    def windowed_count(self, now: float | None = None) -> int:
        now = self._now(now)
        return sum(s[2] for s in self._live(now))

    def _elapsed_s(self, now: float) -> float:
        oldest = min((s[0] for s in self._live(now)), default=now)
        elapsed = now - oldest
        full_windows = int(elapsed // self._window_s)
        min_full = self._num_samples - 1
        if full_windows < min_full:
            elapsed += (min_full - full_windows) * self._window_s
        # Java floors the window at 1 ms so a rate read at a window's first instant is defined.
        return max(elapsed, 0.001)

    def rate(self, now: float | None = None, *, scale: float = 1.0) -> float:
        """Sum of values per second over the window, times ``scale``.

        ``scale=1e-9`` turns nanoseconds-per-second into a ratio (``bufferpool-wait-ratio``).
        """
        now = self._now(now)
        return sum(s[1] for s in self._live(now)) / self._elapsed_s(now) * scale

    def count_rate(self, now: float | None = None) -> float:
        """Events per second over the window (Java's ``Meter`` over ``WindowedCount``)."""
        now = self._now(now)
        return sum(s[2] for s in self._live(now)) / self._elapsed_s(now)

    def avg(self, now: float | None = None) -> float:
        """Windowed sum / windowed count; NaN when no event is in the window (as Java)."""
        now = self._now(now)
        total = 0.0
        count = 0
        for s in self._live(now):
            total += s[1]
            count += s[2]
        return total / count if count else _NAN

    def max(self, now: float | None = None) -> float:
        now = self._now(now)
        best = -_INF
        count = 0
        for s in self._live(now):
            count += s[2]
            if s[2] and s[3] > best:
                best = s[3]
        return best if count else _NAN

    def min(self, now: float | None = None) -> float:
        now = self._now(now)
        best = _INF
        count = 0
        for s in self._live(now):
            count += s[2]
            if s[2] and s[4] < best:
                best = s[4]
        return best if count else _NAN

    def __repr__(self) -> str:
        return f"Sensor({self.name!r}, total={self.total}, count_total={self.count_total})"


class Stat(Enum):
    """Which measurement of a sensor a metric exposes."""

    TOTAL = "total"  # cumulative sum of values
    COUNT_TOTAL = "count_total"  # cumulative number of events
    RATE = "rate"  # windowed sum per second
    COUNT_RATE = "count_rate"  # windowed events per second
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    RATIO = "ratio"  # windowed sum of nanoseconds per elapsed nanosecond


def _measure(sensor: Sensor, stat: Stat) -> Callable[[float], float]:
    if stat is Stat.TOTAL:
        return lambda now: sensor.total
    if stat is Stat.COUNT_TOTAL:
        return lambda now: float(sensor.count_total)
    if stat is Stat.RATE:
        return sensor.rate
    if stat is Stat.COUNT_RATE:
        return sensor.count_rate
    if stat is Stat.AVG:
        return sensor.avg
    if stat is Stat.MAX:
        return sensor.max
    if stat is Stat.MIN:
        return sensor.min
    return lambda now: sensor.rate(now, scale=1e-9)


class MetricsReporter(Protocol):
    """Hook for exporters (Prometheus, OpenTelemetry, logs).

    ``metric_added`` lets an exporter declare series as they appear (per-topic and per-node
    metrics are created lazily); ``report`` receives a full snapshot whenever the owner calls
    :meth:`MetricsRegistry.report`.
    """

    def metric_added(self, key: MetricKey, description: str) -> None: ...

    def report(self, snapshot: Mapping[MetricKey, float]) -> None: ...


#: Java's ``metrics.recording.level`` values, least detailed first.
RECORDING_LEVELS = ("INFO", "DEBUG", "TRACE")


class _MutedSensor(Sensor):
    """A sensor above the configured recording level: its metrics exist and stay empty."""

    __slots__ = ()

    def record(self, value: float = 1.0, n: int = 1, now: float | None = None) -> None:
        return None


class MetricsRegistry:
    """All metrics of one producer: sensors by name and measurable metrics by key.

    ``recording_level`` is Java's ``metrics.recording.level``: a sensor declared at a more
    detailed level (``sensor(name, level="DEBUG")``) is registered but records nothing unless
    the level allows it, so costly detail is paid for only when asked. Every sensor the
    producer declares today is INFO, as are the Java producer's documented metrics.
    """

    def __init__(
        self,
        *,
        sample_window_ms: float = 30000,
        num_samples: int = 2,
        clock: Callable[[], float] = time.monotonic,
        recording_level: str = "INFO",
    ) -> None:
        if recording_level not in RECORDING_LEVELS:
            raise ValueError(f"recording level must be one of {RECORDING_LEVELS}, got "
                             f"{recording_level!r}")
        self._level = RECORDING_LEVELS.index(recording_level)
        self._sample_window_ms = sample_window_ms
        self._num_samples = num_samples
        self._clock = clock
        # Sensors by name, so components asking for the same sensor share it.
        self._sensors: dict[str, Sensor] = {}
        # Metric key -> (description, measure(now)); insertion-ordered for stable output.
        self._metrics: dict[MetricKey, tuple[str, Callable[[float], float]]] = {}
        # Keys of the metrics that are running totals (Stat.TOTAL / COUNT_TOTAL): an exporter
        # that distinguishes counters from gauges (KIP-714's OTLP sums) asks is_cumulative.
        self._cumulative: set[MetricKey] = set()
        self._reporters: list[MetricsReporter] = []

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    def sensor(self, name: str, level: str = "INFO") -> Sensor:
        """The sensor called ``name``, created on first use; muted above the recording level."""
        sensor = self._sensors.get(name)
        if sensor is None:
            muted = RECORDING_LEVELS.index(level) > self._level
            sensor = (_MutedSensor if muted else Sensor)(
                name,
                sample_window_ms=self._sample_window_ms,
                num_samples=self._num_samples,
                clock=self._clock,
            )
            self._sensors[name] = sensor
        return sensor

    def add(
        self,
        name: str,
        group: str,
        measure: Callable[[float], float],
        *,
        tags: Mapping[str, str] | None = None,
        description: str = "",
    ) -> MetricKey:
        """Register a metric measured by ``measure(now)``; re-registering a key is an error."""
        key = MetricKey(name, group, _tags(tags))
        if key in self._metrics:
            raise ValueError(f"metric {key} is already registered")
        self._metrics[key] = (description, measure)
        for reporter in self._reporters:
            reporter.metric_added(key, description)
        return key

    def add_stat(
        self,
        name: str,
        group: str,
        sensor: Sensor,
        stat: Stat,
        *,
        tags: Mapping[str, str] | None = None,
        description: str = "",
    ) -> MetricKey:
        key = self.add(name, group, _measure(sensor, stat), tags=tags, description=description)
        if stat is Stat.TOTAL or stat is Stat.COUNT_TOTAL:
            self._cumulative.add(key)
        return key

    def is_cumulative(self, key: MetricKey) -> bool:
        """Whether ``key`` is a running total that only grows (a counter), not a gauge."""
        return key in self._cumulative

    def gauge(
        self,
        name: str,
        group: str,
        value: Callable[[], float],
        *,
        tags: Mapping[str, str] | None = None,
        description: str = "",
    ) -> MetricKey:
        """A metric read from live state at snapshot time (pool bytes, in-flight requests)."""
        return self.add(name, group, lambda now: float(value()), tags=tags, description=description)

    def remove(self, key: MetricKey) -> None:
        self._metrics.pop(key, None)
        self._cumulative.discard(key)

    def remove_sensor(self, name: str) -> None:
        """Forget a sensor (its metrics must be removed too, or they keep reading it)."""
        self._sensors.pop(name, None)

    def remove_tagged(self, group: str, tag: str, value: str) -> int:
        """Remove every metric of ``group`` whose ``tag`` is ``value``; returns how many."""
        doomed = [k for k in self._metrics if k.group == group and k.tag(tag) == value]
        for key in doomed:
            del self._metrics[key]
            self._cumulative.discard(key)
        return len(doomed)

    def description(self, key: MetricKey) -> str:
        return self._metrics[key][0]

    def keys(self) -> list[MetricKey]:
        return list(self._metrics)

    def snapshot(self, now: float | None = None) -> dict[MetricKey, float]:
        """Every metric measured at one instant."""
        if now is None:
            now = self._clock()
        return {key: measure(now) for key, (_, measure) in self._metrics.items()}

    def snapshot_flat(self, now: float | None = None) -> dict[str, float]:
        """:meth:`snapshot` keyed by :meth:`MetricKey.flat` strings."""
        return {key.flat(): value for key, value in self.snapshot(now).items()}

    def add_reporter(self, reporter: MetricsReporter) -> None:
        """Attach an exporter; it is told about every metric already registered."""
        self._reporters.append(reporter)
        for key, (description, _) in self._metrics.items():
            reporter.metric_added(key, description)

    def report(self, now: float | None = None) -> dict[MetricKey, float]:
        """Snapshot once and hand it to every reporter."""
        snap = self.snapshot(now)
        for reporter in self._reporters:
            reporter.report(snap)
        return snap

    def __repr__(self) -> str:
        return (
            f"MetricsRegistry(metrics={len(self._metrics)}, sensors={len(self._sensors)}, "
            f"window={self._sample_window_ms}ms x {self._num_samples})"
        )
