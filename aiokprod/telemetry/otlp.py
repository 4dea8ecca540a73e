"""OTLP ``MetricsData`` encoding of the metrics a KIP-714 push carries.

KIP-714 fixes the payload of ``PushTelemetry`` as an OpenTelemetry ``MetricsData`` v1 message
(``opentelemetry/proto/metrics/v1/metrics.proto``). A push needs only a sliver of it: one
resource with string attributes, one instrumentation scope, and per metric one number data point
that is either a gauge or a monotonic sum (delta or cumulative). Field numbers below are the
proto's; ``aiokprod._protobuf`` does the wire encoding.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NamedTuple

from aiokprod._protobuf import ProtoWriter

__all__ = ["MetricKind", "OtlpMetric", "Temporality", "encode_metrics_data"]


class MetricKind(enum.Enum):
    GAUGE = "gauge"  # a value read now (averages, maxima, rates, live state)
    SUM = "sum"  # a monotonic counter (Java's CumulativeSum / CumulativeCount metrics)


class Temporality(enum.IntEnum):
    """OTLP's ``AggregationTemporality`` (a sum's points are deltas or running totals)."""

    DELTA = 1
    CUMULATIVE = 2


class OtlpMetric(NamedTuple):
    """One metric with its single data point."""

    name: str  # KIP-714 name, e.g. org.apache.kafka.producer.record.queue.time.avg
    description: str
    kind: MetricKind
    value: float
    # the point's attributes (Java's metric tags minus client_id), sorted
    attributes: tuple[tuple[str, str], ...]
    time_unix_nano: int  # when the value was read
    # sums: start of the interval the value covers (the previous push for deltas, the metric's
    # creation for cumulative); ignored for gauges
    start_time_unix_nano: int = 0
    temporality: Temporality = Temporality.CUMULATIVE  # sums only


# metrics.proto / common.proto / resource.proto field numbers
_METRICS_DATA_RESOURCE_METRICS = 1
_RESOURCE_METRICS_RESOURCE = 1
_RESOURCE_METRICS_SCOPE_METRICS = 2
_RESOURCE_ATTRIBUTES = 1
_SCOPE_METRICS_SCOPE = 1
_SCOPE_METRICS_METRICS = 2
_SCOPE_NAME = 1
_SCOPE_VERSION = 2
_KEY_VALUE_KEY = 1
_KEY_VALUE_VALUE = 2
_ANY_VALUE_STRING = 1
_METRIC_NAME = 1
_METRIC_DESCRIPTION = 2
_METRIC_GAUGE = 5
_METRIC_SUM = 7
_GAUGE_DATA_POINTS = 1
_SUM_DATA_POINTS = 1
_SUM_TEMPORALITY = 2
_SUM_MONOTONIC = 3
_POINT_START_TIME = 2
_POINT_TIME = 3
_POINT_AS_DOUBLE = 4
_POINT_ATTRIBUTES = 7


def _attribute(field: int, key: str, value: str, out: ProtoWriter) -> None:
    any_value = ProtoWriter()
    any_value.string(_ANY_VALUE_STRING, value)
    kv = ProtoWriter()
    kv.string(_KEY_VALUE_KEY, key)
    kv.message(_KEY_VALUE_VALUE, any_value)
    out.message(field, kv)


def _metric(metric: OtlpMetric) -> ProtoWriter:
    point = ProtoWriter()
    if metric.kind is MetricKind.SUM:
        point.fixed64(_POINT_START_TIME, metric.start_time_unix_nano)
    point.fixed64(_POINT_TIME, metric.time_unix_nano)
    point.double(_POINT_AS_DOUBLE, metric.value)
    for key, value in metric.attributes:
        _attribute(_POINT_ATTRIBUTES, key, value, point)
    body = ProtoWriter()
    out = ProtoWriter()
    out.string(_METRIC_NAME, metric.name)
    if metric.description:
        out.string(_METRIC_DESCRIPTION, metric.description)
    if metric.kind is MetricKind.SUM:
        body.message(_SUM_DATA_POINTS, point)
        body.uint(_SUM_TEMPORALITY, int(metric.temporality))
        body.bool(_SUM_MONOTONIC, True)
        out.message(_METRIC_SUM, body)
    else:
        body.message(_GAUGE_DATA_POINTS, point)
        out.message(_METRIC_GAUGE, body)
    return out


def encode_metrics_data(
    metrics: Sequence[OtlpMetric],
    *,
    resource: Sequence[tuple[str, str]] = (),
    scope_name: str = "",
    scope_version: str = "",
) -> bytes:
    """One ``MetricsData`` with one resource and one scope holding ``metrics``.

    (Java's reporter wraps every metric in a ResourceMetrics of its own; one resource for all
    is the same information in fewer bytes.)
    """
    scope = ProtoWriter()
    if scope_name:
        scope.string(_SCOPE_NAME, scope_name)
    if scope_version:
        scope.string(_SCOPE_VERSION, scope_version)
    scope_metrics = ProtoWriter()
    scope_metrics.message(_SCOPE_METRICS_SCOPE, scope)
    for metric in metrics:
        scope_metrics.message(_SCOPE_METRICS_METRICS, _metric(metric))
    res = ProtoWriter()
    for key, value in resource:
        _attribute(_RESOURCE_ATTRIBUTES, key, value, res)
    resource_metrics = ProtoWriter()
    resource_metrics.message(_RESOURCE_METRICS_RESOURCE, res)
    resource_metrics.message(_RESOURCE_METRICS_SCOPE_METRICS, scope_metrics)
    data = ProtoWriter()
    data.message(_METRICS_DATA_RESOURCE_METRICS, resource_metrics)
    return data.getvalue()
