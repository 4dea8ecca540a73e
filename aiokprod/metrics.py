"""The producer's metrics under Java's names: producer-, topic- and node-level sensors.

The sensor and registry machinery (windows, rates, lazy measuring, reporters) is in
``aiokprod._sensors`` and re-exported here; this module declares what the producer measures and
gives its components the sensors they record into.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokprod._sensors import (
    RECORDING_LEVELS,
    MetricKey,
    MetricsRegistry,
    MetricsReporter,
    Sensor,
    Stat,
)

if TYPE_CHECKING:
    from aiokprod.config import ProducerConfig

__all__ = [
    "GAUGES",
    "NODE_GROUP",
    "PRODUCER_GROUP",
    "RECORDING_LEVELS",
    "TOPIC_GROUP",
    "MetricKey",
    "MetricsRegistry",
    "MetricsReporter",
    "NodeSensors",
    "ProducerMetrics",
    "Sensor",
    "Stat",
    "TopicSensors",
]

PRODUCER_GROUP = "producer-metrics"
TOPIC_GROUP = "producer-topic-metrics"
NODE_GROUP = "producer-node-metrics"

_NAN = math.nan


class TopicSensors:
    """Sensors of one topic (``producer-topic-metrics``), created on the topic's first batch."""

    __slots__ = ("bytes", "compression", "errors", "records", "retries")

    def __init__(self, registry: MetricsRegistry, topic: str, client_id: str) -> None:
        tags = {"client-id": client_id, "topic": topic}
        g = TOPIC_GROUP
        prefix = f"topic.{topic}"
        # Sensor names follow Java's (topic.{topic}.records-per-batch, ...), so they are unique.
        self.records = registry.sensor(f"{prefix}.records-per-batch")
        self.bytes = registry.sensor(f"{prefix}.bytes")
        self.compression = registry.sensor(f"{prefix}.compression-rate")
        self.retries = registry.sensor(f"{prefix}.record-retries")
        self.errors = registry.sensor(f"{prefix}.record-errors")
        add = registry.add_stat
        add("record-send-rate", g, self.records, Stat.RATE, tags=tags,
            description=f"records per second sent to topic {topic}")
        add("record-send-total", g, self.records, Stat.TOTAL, tags=tags,
            description=f"records sent to topic {topic}")
        add("byte-rate", g, self.bytes, Stat.RATE, tags=tags,
            description=f"bytes per second sent to topic {topic}")
        add("byte-total", g, self.bytes, Stat.TOTAL, tags=tags,
            description=f"bytes sent to topic {topic}")
        add("compression-rate", g, self.compression, Stat.AVG, tags=tags,
            description=f"average compression ratio of batches to topic {topic}")
        add("record-retry-rate", g, self.retries, Stat.RATE, tags=tags,
            description=f"record retries per second for topic {topic}")
        add("record-retry-total", g, self.retries, Stat.TOTAL, tags=tags,
            description=f"record retries for topic {topic}")
        add("record-error-rate", g, self.errors, Stat.RATE, tags=tags,
            description=f"record send errors per second for topic {topic}")
        add("record-error-total", g, self.errors, Stat.TOTAL, tags=tags,
            description=f"record send errors for topic {topic}")


class NodeSensors:
    """Sensors of one broker connection (``producer-node-metrics``)."""

    __slots__ = ("latency", "requests", "responses")

    def __init__(self, registry: MetricsRegistry, node_id: int, client_id: str) -> None:
        node = f"node-{node_id}"
        tags = {"client-id": client_id, "node-id": node}
        g = NODE_GROUP
        # node-{id}.latency: produce request round trip in ms (Java's "node-{node}.latency" sensor).
        self.latency = registry.sensor(f"{node}.latency")
        # Request size in bytes, one event per request sent.
        self.requests = registry.sensor(f"{node}.bytes-sent")
        # Response size in bytes, one event per response received.
        self.responses = registry.sensor(f"{node}.bytes-received")
        add = registry.add_stat
        add("request-latency-avg", g, self.latency, Stat.AVG, tags=tags,
            description=f"average produce request latency to {node} in ms")
        add("request-latency-max", g, self.latency, Stat.MAX, tags=tags,
            description=f"maximum produce request latency to {node} in ms")
        add("request-rate", g, self.requests, Stat.COUNT_RATE, tags=tags,
            description=f"requests per second sent to {node}")
        add("request-total", g, self.requests, Stat.COUNT_TOTAL, tags=tags,
            description=f"requests sent to {node}")
        add("request-size-avg", g, self.requests, Stat.AVG, tags=tags,
            description=f"average request size to {node} in bytes")
        add("request-size-max", g, self.requests, Stat.MAX, tags=tags,
            description=f"maximum request size to {node} in bytes")
        add("outgoing-byte-rate", g, self.requests, Stat.RATE, tags=tags,
            description=f"bytes per second sent to {node}")
        add("outgoing-byte-total", g, self.requests, Stat.TOTAL, tags=tags,
            description=f"bytes sent to {node}")
        add("response-rate", g, self.responses, Stat.COUNT_RATE, tags=tags,
            description=f"responses per second received from {node}")
        add("response-total", g, self.responses, Stat.COUNT_TOTAL, tags=tags,
            description=f"responses received from {node}")
        add("incoming-byte-rate", g, self.responses, Stat.RATE, tags=tags,
            description=f"bytes per second received from {node}")
        add("incoming-byte-total", g, self.responses, Stat.TOTAL, tags=tags,
            description=f"bytes received from {node}")


# Live-state metrics of producer-metrics, declared up front so a snapshot always has them; their
# owners bind a reader with ProducerMetrics.bind_gauge (NaN until bound).
GAUGES = (
    ("requests-in-flight", "produce requests sent and not yet answered"),
    ("metadata-age", "seconds since the metadata was last refreshed"),
    ("connection-count", "open broker connections"),
    ("buffer-total-bytes", "buffer.memory: bytes the buffer pool may hand out"),
    ("buffer-available-bytes", "bytes of buffer memory not in use"),
    ("waiting-threads", "send() calls waiting for buffer memory"),
)
_GAUGE_NAMES = frozenset(name for name, _ in GAUGES)

# Operations timed by the producer: Java's "{operation}-time-ns-total".
_OPERATIONS = (
    ("flush", "time spent in flush()"),
    ("metadata-wait", "time spent waiting for topic metadata"),
    ("txn-init", "time spent in init_transactions()"),
    ("txn-begin", "time spent in begin_transaction()"),
    ("txn-send-offsets", "time spent in send_offsets_to_transaction()"),
    ("txn-prepare", "time spent in prepare_transaction() (KIP-939's first phase; not in Java "
                    "releases yet)"),
    ("txn-commit", "time spent in commit_transaction()"),
    ("txn-abort", "time spent in abort_transaction()"),
)


class ProducerMetrics:
    """The producer's metrics under Java's names, with sensors the components record into.

    Components hold on to the sensors they need (the sender keeps ``batch_size``, the pool keeps
    ``bufferpool_wait_time``, ...) so recording is one attribute load and one call. Per-topic and
    per-node sensors are created on first use by :meth:`topic` / :meth:`node`. The gauges in
    :data:`GAUGES` are always present; their owners give them readers via :meth:`bind_gauge`.
    """

    def __init__(self, registry: MetricsRegistry, client_id: str) -> None:
        self.registry = registry
        self.client_id = client_id
        self._tags = {"client-id": client_id}
        self._topics: dict[str, TopicSensors] = {}
        self._nodes: dict[int, NodeSensors] = {}
        s = registry.sensor
        g = PRODUCER_GROUP

        def add(name: str, sensor: Sensor, stat: Stat, description: str) -> None:
            registry.add_stat(name, g, sensor, stat, tags=self._tags, description=description)

        # Batch size in bytes after compression, one event per batch sent.
        self.batch_size = s("batch-size")
        add("batch-size-avg", self.batch_size, Stat.AVG, "average bytes per batch sent")
        add("batch-size-max", self.batch_size, Stat.MAX, "largest batch sent in bytes")
        # Compressed size / uncompressed size per batch.
        self.compression_rate = s("compression-rate")
        add("compression-rate-avg", self.compression_rate, Stat.AVG,
            "average compression ratio of batches sent")
        # Time a batch waited in the accumulator before being drained, ms.
        self.queue_time = s("queue-time")
        add("record-queue-time-avg", self.queue_time, Stat.AVG,
            "average ms batches spent in the accumulator")
        add("record-queue-time-max", self.queue_time, Stat.MAX,
            "maximum ms a batch spent in the accumulator")
        # Produce request round trip, ms, all nodes.
        self.request_latency = s("request-latency")
        add("request-latency-avg", self.request_latency, Stat.AVG,
            "average produce request latency in ms")
        add("request-latency-max", self.request_latency, Stat.MAX,
            "maximum produce request latency in ms")
        # Broker-requested throttle time from produce responses, ms.
        self.produce_throttle_time = s("produce-throttle-time")
        add("produce-throttle-time-avg", self.produce_throttle_time, Stat.AVG,
            "average throttle time requested by brokers in ms")
        add("produce-throttle-time-max", self.produce_throttle_time, Stat.MAX,
            "maximum throttle time requested by brokers in ms")
        # Records per produce request: value = record count, one event per request.
        self.records_per_request = s("records-per-request")
        add("record-send-rate", self.records_per_request, Stat.RATE, "records sent per second")
        add("record-send-total", self.records_per_request, Stat.TOTAL, "records sent")
        add("records-per-request-avg", self.records_per_request, Stat.AVG,
            "average records per produce request")
        # Records re-enqueued for retry (batch splits excluded, as in Java).
        self.record_retries = s("record-retries")
        add("record-retry-rate", self.record_retries, Stat.RATE, "record retries per second")
        add("record-retry-total", self.record_retries, Stat.TOTAL, "record retries")
        # Records whose send failed.
        self.record_errors = s("errors")
        add("record-error-rate", self.record_errors, Stat.RATE, "record send errors per second")
        add("record-error-total", self.record_errors, Stat.TOTAL, "record send errors")
        # Size of the largest record in each batch (Java records it per batch:
        # ProducerBatch.maxRecordSize).
        self.record_size = s("record-size")
        add("record-size-avg", self.record_size, Stat.AVG,
            "average of the largest record size per batch")
        add("record-size-max", self.record_size, Stat.MAX, "largest record size in bytes")
        # Batches split after MESSAGE_TOO_LARGE.
        self.batch_split = s("batch-split")
        add("batch-split-rate", self.batch_split, Stat.RATE, "batch splits per second")
        add("batch-split-total", self.batch_split, Stat.TOTAL, "batch splits")
        # Produce request size in bytes, one event per request, all nodes.
        self.requests = s("bytes-sent")
        add("request-rate", self.requests, Stat.COUNT_RATE, "requests sent per second")
        add("request-total", self.requests, Stat.COUNT_TOTAL, "requests sent")
        add("request-size-avg", self.requests, Stat.AVG, "average request size in bytes")
        add("request-size-max", self.requests, Stat.MAX, "largest request size in bytes")
        add("outgoing-byte-rate", self.requests, Stat.RATE, "bytes sent per second")
        add("outgoing-byte-total", self.requests, Stat.TOTAL, "bytes sent")
        # Response size in bytes, one event per response, all nodes.
        self.responses = s("bytes-received")
        add("response-rate", self.responses, Stat.COUNT_RATE, "responses received per second")
        add("response-total", self.responses, Stat.COUNT_TOTAL, "responses received")
        add("incoming-byte-rate", self.responses, Stat.RATE, "bytes received per second")
        add("incoming-byte-total", self.responses, Stat.TOTAL, "bytes received")
        # Connections opened / closed.
        self.connections_created = s("connections-created")
        add("connection-creation-rate", self.connections_created, Stat.RATE,
            "connections opened per second")
        add("connection-creation-total", self.connections_created, Stat.TOTAL,
            "connections opened")
        self.connections_closed = s("connections-closed")
        add("connection-close-rate", self.connections_closed, Stat.RATE,
            "connections closed per second")
        add("connection-close-total", self.connections_closed, Stat.TOTAL, "connections closed")
        # Nanoseconds send() spent waiting for buffer memory.
        self.bufferpool_wait_time = s("bufferpool-wait-time")
        add("bufferpool-wait-time-ns-total", self.bufferpool_wait_time, Stat.TOTAL,
            "total ns spent waiting for buffer memory")
        add("bufferpool-wait-ratio", self.bufferpool_wait_time, Stat.RATIO,
            "fraction of time spent waiting for buffer memory")
        # Allocations that gave up after max.block.ms.
        self.buffer_exhausted = s("buffer-exhausted-records")
        add("buffer-exhausted-rate", self.buffer_exhausted, Stat.RATE,
            "allocations per second that failed after max.block.ms")
        add("buffer-exhausted-total", self.buffer_exhausted, Stat.TOTAL,
            "allocations that failed after max.block.ms")
        # Declared gauges, read from whatever reader their owner bound.
        self._gauge_sources: dict[str, Callable[[], float]] = {}
        for name, description in GAUGES:
            registry.add(name, g, self._read_gauge(name), tags=self._tags,
                         description=description)
        # {operation}-time-ns-total: one sensor per timed public operation.
        self.operation_time: dict[str, Sensor] = {}
        for op, what in _OPERATIONS:
            sensor = s(f"{op}-time")
            self.operation_time[op] = sensor
            add(f"{op}-time-ns-total", sensor, Stat.TOTAL, f"total ns of {what}")

    @classmethod
    def for_config(
        cls, config: ProducerConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> ProducerMetrics:
        """A fresh registry windowed by ``metrics_sample_window_ms`` x ``metrics_num_samples``."""
        registry = MetricsRegistry(
            sample_window_ms=config.metrics_sample_window_ms,
            num_samples=config.metrics_num_samples,
            clock=clock,
            recording_level=config.metrics_recording_level,
        )
        return cls(registry, config.client_id)

    def bind_gauge(self, name: str, value: Callable[[], float]) -> None:
        """Give one of the declared :data:`GAUGES` its reader (the component owning the state
        calls this: the pool for ``buffer-*``/``waiting-threads``, the sender for
        ``requests-in-flight``, the cluster for ``metadata-age``/``connection-count``)."""
        if name not in _GAUGE_NAMES:
            raise ValueError(f"{name!r} is not a declared gauge: {sorted(_GAUGE_NAMES)}")
        self._gauge_sources[name] = value

    def gauge(self, name: str, value: Callable[[], float], description: str = "") -> MetricKey:
        """Add a live-state metric to ``producer-metrics`` beyond the declared ones."""
        return self.registry.gauge(
            name, PRODUCER_GROUP, value, tags=self._tags, description=description
        )

    def _read_gauge(self, name: str) -> Callable[[float], float]:
        def read(now: float) -> float:
            source = self._gauge_sources.get(name)
            return _NAN if source is None else float(source())

        return read

    def topic(self, topic: str) -> TopicSensors:
        sensors = self._topics.get(topic)
        if sensors is None:
            sensors = TopicSensors(self.registry, topic, self.client_id)
            self._topics[topic] = sensors
        return sensors

    def forget_topic(self, topic: str) -> None:
        """The topic expired from metadata (metadata.max.idle.ms): drop its series, as Java
        removes a topic's sensors, so a producer that wrote to many topics does not grow."""
        if self._topics.pop(topic, None) is None:
            return
        self.registry.remove_tagged(TOPIC_GROUP, "topic", topic)
        prefix = f"topic.{topic}"
        for suffix in ("records-per-batch", "bytes", "compression-rate", "record-retries",
                       "record-errors"):
            self.registry.remove_sensor(f"{prefix}.{suffix}")

    def node(self, node_id: int) -> NodeSensors:
        sensors = self._nodes.get(node_id)
        if sensors is None:
            sensors = NodeSensors(self.registry, node_id, self.client_id)
            self._nodes[node_id] = sensors
        return sensors

    def record_batch_sent(
        self,
        topic: str,
        *,
        record_count: int,
        size_bytes: int,
        compression_ratio: float,
        max_record_bytes: int,
        queue_time_ms: float,
        now: float,
    ) -> None:
        """One drained batch (Java's per-batch update in the sender): 7 sensor updates, no
        per-record work."""
        t = self.topic(topic)
        t.records.record(record_count, record_count, now)
        t.bytes.record(size_bytes, 1, now)
        t.compression.record(compression_ratio, 1, now)
        self.batch_size.record(size_bytes, 1, now)
        self.compression_rate.record(compression_ratio, 1, now)
        self.record_size.record(max_record_bytes, 1, now)
        self.queue_time.record(queue_time_ms, 1, now)

    def record_request(
        self, node_id: int, *, record_count: int, size_bytes: int, now: float
    ) -> None:
        """One produce request written to ``node_id``."""
        self.records_per_request.record(record_count, 1, now)
        self.requests.record(size_bytes, 1, now)
        self.node(node_id).requests.record(size_bytes, 1, now)

    def record_response(
        self, node_id: int, *, latency_ms: float, size_bytes: int, throttle_ms: float, now: float
    ) -> None:
        """One produce response read from ``node_id``."""
        self.request_latency.record(latency_ms, 1, now)
        self.responses.record(size_bytes, 1, now)
        self.produce_throttle_time.record(throttle_ms, 1, now)
        node = self.node(node_id)
        node.latency.record(latency_ms, 1, now)
        node.responses.record(size_bytes, 1, now)

    def on_records_retried(self, topic: str, records: int, now: float | None = None) -> None:
        """A batch of ``records`` records of ``topic`` was re-enqueued for another attempt."""
        self.record_retries.record(records, records, now)
        self.topic(topic).retries.record(records, records, now)

    def on_records_failed(self, topic: str, records: int, now: float | None = None) -> None:
        """``records`` records of ``topic`` completed with an error."""
        self.record_errors.record(records, records, now)
        self.topic(topic).errors.record(records, records, now)

    def snapshot(self, now: float | None = None) -> dict[MetricKey, float]:
        return self.registry.snapshot(now)

    def __repr__(self) -> str:
        return (
            f"ProducerMetrics(client_id={self.client_id!r}, topics={len(self._topics)}, "
            f"nodes={len(self._nodes)}, {self.registry!r})"
        )
