"""The hand-written OTLP encoder, read back by opentelemetry-proto (an independent decoder),
and the KIP-714 names and points the collector makes from the producer's metrics."""

from __future__ import annotations

import math

import pytest

from aiokprod._protobuf import ProtoWriter
from aiokprod._sensors import MetricKey, MetricsRegistry
from aiokprod.metrics import ProducerMetrics
from aiokprod.telemetry.collector import TelemetryCollector, telemetry_attributes, telemetry_name
from aiokprod.telemetry.otlp import MetricKind, OtlpMetric, Temporality, encode_metrics_data

metrics_pb2 = pytest.importorskip("opentelemetry.proto.metrics.v1.metrics_pb2")


def _decode(data: bytes) -> object:
    msg = metrics_pb2.MetricsData()
    msg.ParseFromString(data)
    return msg


def test_varints_and_negative_ints_match_protobuf() -> None:
    w = ProtoWriter()
    w.uint(1, 300)
    assert w.getvalue() == bytes([0x08, 0xAC, 0x02])
    w = ProtoWriter()
    w.uint(2, -1)  # int64 -1: ten bytes of two's complement
    assert w.getvalue() == bytes([0x10]) + b"\xff" * 9 + b"\x01"
    with pytest.raises(ValueError, match="field numbers"):
        ProtoWriter().uint(0, 1)


def test_gauge_and_sums_decode_with_opentelemetry_proto() -> None:
    gauge = OtlpMetric("org.apache.kafka.producer.record.queue.time.avg", "avg queue ms",
                       MetricKind.GAUGE, 1.5, (("node_id", "node-1"),), 1_700_000_000_000_000_000)
    delta = OtlpMetric("org.apache.kafka.producer.record.send.total", "", MetricKind.SUM, 42.0,
                       (), 2_000, 1_000, Temporality.DELTA)
    cumulative = OtlpMetric("x.total", "", MetricKind.SUM, 7.0, (("topic", "t"),), 5, 3,
                            Temporality.CUMULATIVE)
    data = encode_metrics_data([gauge, delta, cumulative],
                               resource=[("transactional_id", "tx-1")],
                               scope_name="aiokprod", scope_version="0.1.0")
    decoded = _decode(data)
    (rm,) = decoded.resource_metrics
    assert [(a.key, a.value.string_value) for a in rm.resource.attributes] == [
        ("transactional_id", "tx-1")]
    (sm,) = rm.scope_metrics
    assert (sm.scope.name, sm.scope.version) == ("aiokprod", "0.1.0")
    g, d, c = sm.metrics
    assert g.name == gauge.name and g.description == "avg queue ms"
    assert g.WhichOneof("data") == "gauge"
    (gp,) = g.gauge.data_points
    assert gp.as_double == 1.5 and gp.time_unix_nano == 1_700_000_000_000_000_000
    assert [(a.key, a.value.string_value) for a in gp.attributes] == [("node_id", "node-1")]
    assert d.WhichOneof("data") == "sum"
    assert d.sum.is_monotonic
    assert d.sum.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
    (dp,) = d.sum.data_points
    assert (dp.as_double, dp.start_time_unix_nano, dp.time_unix_nano) == (42.0, 1_000, 2_000)
    assert c.sum.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
    assert c.sum.data_points[0].attributes[0].value.string_value == "t"
    # protobuf re-encodes our message to the same bytes: field order and framing are canonical
    assert decoded.SerializeToString() == data


def test_empty_payload_and_unicode_names() -> None:
    decoded = _decode(encode_metrics_data([]))
    assert len(decoded.resource_metrics) == 1
    assert len(decoded.resource_metrics[0].scope_metrics[0].metrics) == 0
    m = OtlpMetric("naïve.ünïcode", "", MetricKind.GAUGE, -0.25, (("k", "välue"),), 1)
    point = _decode(encode_metrics_data([m])).resource_metrics[0].scope_metrics[0].metrics[0]
    assert point.name == "naïve.ünïcode"
    assert point.gauge.data_points[0].attributes[0].value.string_value == "välue"


@pytest.mark.parametrize(("group", "name", "expected"), [
    ("producer-metrics", "record-queue-time-avg",
     "org.apache.kafka.producer.record.queue.time.avg"),
    ("producer-node-metrics", "request-latency-max",
     "org.apache.kafka.producer.node.request.latency.max"),
    ("producer-metrics", "connection-creation-rate",
     "org.apache.kafka.producer.connection.creation.rate"),
    ("producer-metrics", "produce-throttle-time-avg",
     "org.apache.kafka.producer.produce.throttle.time.avg"),
    ("producer-topic-metrics", "byte-total", "org.apache.kafka.producer.topic.byte.total"),
])
def test_kip714_names(group: str, name: str, expected: str) -> None:
    assert telemetry_name(MetricKey(name, group)) == expected


def test_attributes_drop_client_id_and_use_underscores() -> None:
    key = MetricKey("x", "producer-node-metrics", (("client-id", "c"), ("node-id", "node-2")))
    assert telemetry_attributes(key) == (("node_id", "node-2"),)


def test_collector_sums_gauges_deltas_and_nan() -> None:
    now = [100.0]
    registry = MetricsRegistry(clock=lambda: now[0])
    metrics = ProducerMetrics(registry, "c1")
    metrics.connections_created.record(1, 1)
    metrics.queue_time.record(4.0, 1)
    collector = TelemetryCollector(registry)
    wanted = ("org.apache.kafka.producer.connection.creation.total",
              "org.apache.kafka.producer.record.queue.time.avg",
              "org.apache.kafka.producer.batch.size.avg")  # no batch yet: NaN, left out
    points = collector.collect(lambda n: n in wanted, delta=True, now_ns=10)
    by_name = {p.name: p for p in points}
    assert set(by_name) == set(wanted[:2])
    total = by_name[wanted[0]]
    assert (total.kind, total.value, total.temporality) == (MetricKind.SUM, 1.0,
                                                            Temporality.DELTA)
    assert by_name[wanted[1]].kind is MetricKind.GAUGE and by_name[wanted[1]].value == 4.0
    metrics.connections_created.record(2, 1)
    later = {p.name: p for p in collector.collect(lambda n: n in wanted, delta=True, now_ns=20)}
    assert later[wanted[0]].value == 2.0  # the delta since the last push
    assert later[wanted[0]].start_time_unix_nano == 10
    cumulative = {p.name: p for p in collector.collect(lambda n: n in wanted, delta=False,
                                                       now_ns=30)}
    assert cumulative[wanted[0]].value == 3.0
    assert cumulative[wanted[0]].start_time_unix_nano == 10  # first seen
    assert not any(math.isnan(p.value) for p in points)
