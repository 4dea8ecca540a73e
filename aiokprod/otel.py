"""OpenTelemetry (extra ``aiokprod[otel]``): PRODUCER spans that cross Kafka, metrics to scrape.

Opt-in and free when off: nothing here is imported by the producer, and a plain ``Producer``
runs exactly the code it runs without this module. Tracing is a wrapper, not an interceptor,
because an interceptor's ``on_acknowledgement(metadata, error)`` cannot tell which record (and
so which span) it acknowledges, and ``send_many`` refuses interceptors; the wrapper holds the
span in a done-callback of the record's own delivery future instead.

Tracing — ``instrument(producer)`` returns a ``TracedProducer`` with the same ``send`` /
``send_and_wait`` / ``send_many`` signatures (everything else is delegated):

* one span per ``send()``, kind PRODUCER, named ``send {topic}``, with the OpenTelemetry
  messaging semantic conventions: ``messaging.system=kafka``, ``messaging.operation.type=send``,
  ``messaging.destination.name``, ``messaging.kafka.message.key`` (if any),
  ``messaging.destination.partition.id`` and ``messaging.kafka.offset`` on acknowledgement,
  ``error.type`` (and status ERROR) on failure; ended when the record is acknowledged or fails;
* the W3C ``traceparent`` (and ``tracestate``) injected into the record headers by the
  configured propagator, so a consumer extracts it and continues the trace;
* ``send_many``: one span per call with ``messaging.batch.message_count``; every record of the
  call carries that span's ``traceparent``.

Metrics — ``instrument_metrics(producer)`` registers the producer's Java-named metrics as
observable gauges (names in docs/observability.md): ``kafka.producer.<name>`` for
``producer-metrics``, ``kafka.producer.topic.<name>`` and ``kafka.producer.node.<name>`` for the
per-topic and per-node groups, dashes turned into underscores; the Java group and name ride
along as the attributes ``kafka.metric.group`` / ``kafka.metric.name``, the topic as
``messaging.destination.name`` and the node as ``kafka.node.id``. All gauges of one collection
read one ``Producer.metrics()`` snapshot.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from aiokprod._version import __version__
from aiokprod.producer.batch import RecordMetadata
from aiokprod.producer.bulk import SendManyResult
from aiokprod.producer.producer import Producer

__all__ = [
    "MetricsRegistration",
    "TracedProducer",
    "instrument",
    "instrument_metrics",
    "metric_instrument_name",
]

Headers = Sequence[tuple[str, bytes | None]]

_SCOPE = "aiokprod"


def _key_attribute(key: Any) -> str | None:
    """``messaging.kafka.message.key``: semconv asks for a string form when it is not one."""
    if key is None:
        return None
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key).decode("utf-8", "replace")
    return str(key)


def _end_on_delivery(span: Span, future: asyncio.Future[Any]) -> None:
    """Done-callback of a delivery future: record the outcome on the span and end it."""
    if future.cancelled():
        span.set_attribute("error.type", "cancelled")
        span.set_status(Status(StatusCode.ERROR, "the delivery future was cancelled"))
    else:
        error = future.exception()
        if error is not None:
            _record_error(span, error)
        else:
            md = future.result()
            if isinstance(md, RecordMetadata):
                span.set_attribute("messaging.destination.partition.id", str(md.partition))
                span.set_attribute("messaging.kafka.offset", md.offset)
            elif isinstance(md, SendManyResult) and len(md):
                span.set_attribute("messaging.kafka.offset", md[0].offset)
    span.end()


def _record_error(span: Span, error: BaseException) -> None:
    span.set_attribute("error.type", type(error).__qualname__)
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, str(error)))


class TracedProducer:
    """A ``Producer`` whose sends make PRODUCER spans and carry ``traceparent`` headers.

    Build it with ``instrument(producer)``; attribute access other than the sending methods
    goes to the wrapped producer (``start``, ``flush``, ``close``, ``health``, ``metrics``...).
    """

    def __init__(self, producer: Producer, tracer_provider: TracerProvider | None = None,
                 propagator: TextMapPropagator | None = None) -> None:
        self._producer = producer
        self._tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider)
        self._propagator = propagator

    @property
    def producer(self) -> Producer:
        """The wrapped producer."""
        return self._producer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    async def __aenter__(self) -> TracedProducer:
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.close()

    def _start_span(self, topic: str, key: Any, partition: int | None,
                    count: int | None) -> Span:
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": topic,
        }
        key_text = _key_attribute(key)
        if key_text is not None:
            attributes["messaging.kafka.message.key"] = key_text
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        if count is not None:
            attributes["messaging.batch.message_count"] = count
        return self._tracer.start_span(f"send {topic}", kind=SpanKind.PRODUCER,
                                       attributes=attributes)

    def _with_trace_headers(self, span: Span, headers: Headers | None) -> Headers | None:
        carrier: dict[str, str] = {}
        propagator = self._propagator or propagate.get_global_textmap()
        propagator.inject(carrier, context=trace.set_span_in_context(span, Context()))
        if not carrier:  # a non-recording span with no parent: nothing to propagate
            return headers
        injected = [(name, value.encode()) for name, value in carrier.items()]
        if not headers:
            return injected
        # a header the caller set under the same name is replaced, not duplicated
        return [h for h in headers if h[0] not in carrier] + injected

    async def send(self, topic: str, value: Any = None, key: Any = None,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Headers | None = None) -> asyncio.Future[RecordMetadata]:
        """``Producer.send`` inside a PRODUCER span that ends at acknowledgement."""
        span = self._start_span(topic, key, partition, None)
        try:
            future = await self._producer.send(topic, value, key, partition, timestamp_ms,
                                               self._with_trace_headers(span, headers))
        except BaseException as exc:
            _record_error(span, exc)
            span.end()
            raise
        if span.is_recording():  # a no-op tracer's span needs no ending
            future.add_done_callback(lambda f: _end_on_delivery(span, f))
        return future

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Headers | None = None) -> RecordMetadata:
        """``send`` then wait for the acknowledgement (the span ends there)."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def send_many(self, topic: str, values: Iterable[Any],
                        keys: Iterable[Any] | None = None, *, partition: int | None = None,
                        timestamp_ms: int | None = None, headers: Headers | None = None
                        ) -> asyncio.Future[SendManyResult]:
        """``Producer.send_many`` inside one PRODUCER span with the record count."""
        vals = values if isinstance(values, Sequence) else list(values)
        span = self._start_span(topic, None, partition, len(vals))
        try:
            future = await self._producer.send_many(
                topic, vals, keys, partition=partition, timestamp_ms=timestamp_ms,
                headers=self._with_trace_headers(span, headers))
        except BaseException as exc:
            _record_error(span, exc)
            span.end()
            raise
        future.add_done_callback(lambda f: _end_on_delivery(span, f))
        return future

    def __repr__(self) -> str:
        return f"<TracedProducer {self._producer!r}>"


def instrument(producer: Producer, *, tracer_provider: TracerProvider | None = None,
               propagator: TextMapPropagator | None = None) -> TracedProducer:
    """Wrap ``producer`` so its sends are traced (the global tracer provider by default)."""
    return TracedProducer(producer, tracer_provider, propagator)


# ---- metrics ---------------------------------------------------------------------------------

# Java's per-topic and per-node metric names (``producer-topic-metrics``,
# ``producer-node-metrics``): declared here because those series appear only once a topic or a
# node is first used, while instruments must exist before the first collection.
TOPIC_METRICS = (
    "record-send-rate", "record-send-total", "byte-rate", "byte-total", "compression-rate",
    "record-retry-rate", "record-retry-total", "record-error-rate", "record-error-total",
)
NODE_METRICS = (
    "request-latency-avg", "request-latency-max", "request-rate", "request-total",
    "request-size-avg", "request-size-max", "outgoing-byte-rate", "outgoing-byte-total",
    "response-rate", "response-total", "incoming-byte-rate", "incoming-byte-total",
)
_GROUP_PREFIX = {
    "producer-metrics": "kafka.producer.",
    "producer-topic-metrics": "kafka.producer.topic.",
    "producer-node-metrics": "kafka.producer.node.",
}
_TAG_ATTRIBUTE = {"topic": "messaging.destination.name", "node-id": "kafka.node.id"}


def metric_instrument_name(group: str, name: str) -> str:
    """The OpenTelemetry instrument name of a Java producer metric (docs/observability.md)."""
    prefix = _GROUP_PREFIX.get(group, f"kafka.{group.replace('-', '_')}.")
    return prefix + name.replace("-", "_")


def _parse_flat(flat: str) -> tuple[str, str, dict[str, str]]:
    """``group:name{k=v,...}`` (``Producer.metrics()`` keys) -> (group, name, tags)."""
    head, _, rest = flat.partition("{")
    group, _, name = head.partition(":")
    tags: dict[str, str] = {}
    if rest:
        for pair in rest.rstrip("}").split(","):
            k, _, v = pair.partition("=")
            tags[k] = v
    return group, name, tags


class MetricsRegistration:
    """The gauges ``instrument_metrics`` registered; one ``metrics()`` snapshot per collection."""

    def __init__(self, producer: Producer, meter_provider: MeterProvider | None,
                 snapshot_ttl_s: float) -> None:
        self._producer = producer
        self._ttl = snapshot_ttl_s
        self._taken = -1.0e18
        self._by_instrument: dict[str, list[Observation]] = {}
        meter = metrics.get_meter(_SCOPE, __version__, meter_provider)
        names = {(g, n) for g, n, _ in map(_parse_flat, producer.metrics())}
        names.update(("producer-topic-metrics", n) for n in TOPIC_METRICS)
        names.update(("producer-node-metrics", n) for n in NODE_METRICS)
        self.instrument_names = sorted(metric_instrument_name(g, n) for g, n in names)
        for instrument in self.instrument_names:
            meter.create_observable_gauge(instrument, callbacks=[self._callback(instrument)],
                                          description=f"Kafka producer metric {instrument}")

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._taken < self._ttl:
            return
        self._taken = now
        grouped: dict[str, list[Observation]] = {}
        client_id = self._producer.config.client_id
        for flat, value in self._producer.metrics().items():
            if math.isnan(value):  # a gauge not bound yet
                continue
            group, name, tags = _parse_flat(flat)
            attributes: dict[str, str] = {"kafka.metric.group": group, "kafka.metric.name": name,
                                          "messaging.client.id": client_id}
            for k, v in tags.items():
                attributes[_TAG_ATTRIBUTE.get(k, f"kafka.{k}")] = v
            grouped.setdefault(metric_instrument_name(group, name), []).append(
                Observation(value, attributes))
        self._by_instrument = grouped

    def _callback(self, instrument: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            self._refresh()
            return self._by_instrument.get(instrument, ())
        return observe


def instrument_metrics(producer: Producer | TracedProducer, *,
                       meter_provider: MeterProvider | None = None,
                       snapshot_ttl_s: float = 0.5) -> MetricsRegistration:
    """Expose ``producer.metrics()`` as observable gauges (call it after ``start()``).

    Nothing is computed until a reader collects (a Prometheus scrape, an OTLP export): each
    collection takes one snapshot, shared by all gauges for ``snapshot_ttl_s``.
    """
    target = producer.producer if isinstance(producer, TracedProducer) else producer
    return MetricsRegistration(target, meter_provider, snapshot_ttl_s)
