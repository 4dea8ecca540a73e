"""The producer's metrics under KIP-714's names, as the OTLP points one push carries.

Naming follows Java's ``TelemetryMetricNamingConvention``, so a broker-side pipeline sees the
same names from us as from the Java producer: ``org.apache.kafka.`` + the group with dashes as
dots and ``.metrics`` dropped + the metric name with dashes as dots. ``producer-metrics:
record-queue-time-avg`` becomes ``org.apache.kafka.producer.record.queue.time.avg``,
``producer-node-metrics:request-latency-avg{node-id=node-1}`` becomes
``org.apache.kafka.producer.node.request.latency.avg`` with the attribute ``node_id=node-1``.
Tag keys take underscores; ``client-id`` is left out (the broker knows the client already).

Running totals (``*-total``) are OTLP monotonic sums, as deltas since the last push when the
subscription asks for delta temporality (Kafka's brokers do), else cumulative from the moment
the metric first appeared; everything else is a gauge. A value that is NaN (an average over an
empty window, a gauge nobody bound) is left out of the push.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

from aiokprod._sensors import MetricKey, MetricsRegistry
from aiokprod.telemetry.otlp import MetricKind, OtlpMetric, Temporality

__all__ = ["DOMAIN", "TelemetryCollector", "telemetry_attributes", "telemetry_name"]

DOMAIN = "org.apache.kafka"
# Java's TelemetryMetricNamingConvention.GROUP_PATTERN, applied after dashes became dots.
_GROUP_SUFFIX = re.compile(r"\.(metrics)")
_EXCLUDED_TAGS = frozenset({"client_id"})


def telemetry_name(key: MetricKey) -> str:
    """The KIP-714 name of ``key`` (``org.apache.kafka.producer.record.queue.time.avg``)."""
    group = _GROUP_SUFFIX.sub("", key.group.lower().replace("-", "."))
    return f"{DOMAIN}.{group}.{key.name.lower().replace('-', '.')}"


def telemetry_attributes(key: MetricKey) -> tuple[tuple[str, str], ...]:
    """The tags of ``key`` as OTLP attributes: ``node-id`` -> ``node_id``, no ``client_id``."""
    out = []
    for k, v in key.tags:
        name = k.lower().replace("-", "_")
        if name not in _EXCLUDED_TAGS:
            out.append((name, v))
    return tuple(sorted(out))


class TelemetryCollector:
    """Reads the registry at push time and turns the selected metrics into OTLP points.

    Keeps, per counter, the value and time of the last push (for deltas) and when the counter
    was first seen (the start of a cumulative sum). ``clock_ns`` is wall-clock nanoseconds:
    OTLP timestamps are Unix times.
    """

    def __init__(self, registry: MetricsRegistry, *,
                 clock_ns: Callable[[], int] = time.time_ns) -> None:
        self._registry = registry
        self._clock_ns = clock_ns
        # counter -> (value, time) at the last push, the base of the next delta
        self._last: dict[MetricKey, tuple[float, int]] = {}
        # counter -> when it was first collected, the start of its cumulative sum
        self._first_seen: dict[MetricKey, int] = {}

    def reset(self) -> None:
        """The subscription switched temporality: start every counter afresh (as Java does)."""
        self._last.clear()
        self._first_seen.clear()

    def collect(self, selects: Callable[[str], bool], *, delta: bool,
                now_ns: int | None = None) -> list[OtlpMetric]:
        """The metrics whose KIP-714 name ``selects`` accepts, measured now."""
        now_ns = self._clock_ns() if now_ns is None else now_ns
        registry = self._registry
        out: list[OtlpMetric] = []
        seen: set[MetricKey] = set()
        for key, value in registry.snapshot().items():
            name = telemetry_name(key)
            if not selects(name):
                continue
            attributes = telemetry_attributes(key)
            if not registry.is_cumulative(key):
                if not math.isnan(value):
                    out.append(OtlpMetric(name, "", MetricKind.GAUGE, value, attributes, now_ns))
                continue
            seen.add(key)
            first = self._first_seen.setdefault(key, now_ns)
            if delta:
                last_value, last_ns = self._last.get(key, (0.0, first))
                self._last[key] = (value, now_ns)
                out.append(OtlpMetric(name, "", MetricKind.SUM, value - last_value, attributes,
                                      now_ns, last_ns, Temporality.DELTA))
            else:
                out.append(OtlpMetric(name, "", MetricKind.SUM, value, attributes, now_ns,
                                      first, Temporality.CUMULATIVE))
        # counters that went away (an expired topic's): forget them, as Java's metricRemoval
        for gone in [k for k in self._first_seen if k not in seen]:
            self._first_seen.pop(gone, None)
            self._last.pop(gone, None)
        return out
