"""aiokprod.otel against a real broker: spans from the SDK's in-memory exporter, the
``traceparent`` header read back by an independent consumer, metrics through a real reader."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from aiokprod import Producer, RecordTooLargeError
from aiokprod.otel import instrument, instrument_metrics, metric_instrument_name
from support.reader import read_back


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_send_span_ended_at_ack_and_traceparent_read_back(tansu, new_topic, spans) -> None:
    provider, exporter = spans
    topic = new_topic(partitions=2)
    async with Producer(tansu.bootstrap, linger_ms=50) as raw:
        producer = instrument(raw, tracer_provider=provider)
        future = await producer.send(topic, b"v", key=b"k1", headers=[("h", b"1")])
        assert exporter.get_finished_spans() == ()  # not ended before the acknowledgement
        md = await future
    (span,) = exporter.get_finished_spans()
    assert span.name == f"send {topic}"
    assert span.kind is SpanKind.PRODUCER
    attrs = dict(span.attributes or {})
    assert attrs["messaging.system"] == "kafka"
    assert attrs["messaging.destination.name"] == topic
    assert attrs["messaging.kafka.message.key"] == "k1"
    assert attrs["messaging.destination.partition.id"] == str(md.partition)
    assert attrs["messaging.kafka.offset"] == md.offset
    assert "error.type" not in attrs
    (record,) = read_back(tansu.bootstrap, topic, expected=1, timeout=15)
    headers = dict(record.headers)
    assert headers["h"] == b"1"
    traceparent = headers["traceparent"]
    assert traceparent is not None
    # a consumer continues the trace: the extracted context is this span's
    ctx = TraceContextTextMapPropagator().extract({"traceparent": traceparent.decode()})
    remote = trace.get_current_span(ctx).get_span_context()
    assert remote.trace_id == span.context.trace_id
    assert remote.span_id == span.context.span_id


async def test_failed_send_records_error_type(tansu, new_topic, spans) -> None:
    provider, exporter = spans
    topic = new_topic()
    async with Producer(tansu.bootstrap, max_request_size=1024) as raw:
        producer = instrument(raw, tracer_provider=provider)
        with pytest.raises(RecordTooLargeError):
            await producer.send_and_wait(topic, b"x" * 4096)
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["error.type"] == "RecordTooLargeError"
    assert span.status.status_code is StatusCode.ERROR


async def test_send_many_one_span_with_count(tansu, new_topic, spans) -> None:
    provider, exporter = spans
    topic = new_topic()
    async with Producer(tansu.bootstrap) as raw:
        producer = instrument(raw, tracer_provider=provider)
        result = await (await producer.send_many(topic, (b"m%d" % i for i in range(10))))
    assert len(result) == 10
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["messaging.batch.message_count"] == 10
    records = read_back(tansu.bootstrap, topic, expected=10, timeout=15)
    parents = {dict(r.headers)["traceparent"] for r in records}
    assert len(parents) == 1
    assert f"{span.context.span_id:016x}".encode() in parents.pop()


async def test_metrics_as_observable_gauges(tansu, new_topic) -> None:
    topic = new_topic()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    async with Producer(tansu.bootstrap, client_id="otel-test") as producer:
        registration = instrument_metrics(producer, meter_provider=provider)
        for i in range(7):
            await producer.send_and_wait(topic, b"%d" % i)
        data = reader.get_metrics_data()
    provider.shutdown()
    assert data is not None
    points: dict[str, list[tuple[dict[str, object], float]]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points[metric.name] = [(dict(p.attributes or {}), p.value)
                                       for p in metric.data.data_points]
    name = metric_instrument_name("producer-topic-metrics", "record-send-total")
    assert name == "kafka.producer.topic.record_send_total"
    assert name in registration.instrument_names
    (attrs, value) = next((a, v) for a, v in points[name]
                          if a["messaging.destination.name"] == topic)
    assert value == 7
    assert attrs["kafka.metric.name"] == "record-send-total"
    assert attrs["messaging.client.id"] == "otel-test"
    assert "kafka.producer.record_send_total" in points
