"""Metrics: Java SampledStat windows on an injected clock, registry names, lazy sensors."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from aiokprod.config import ProducerConfig
from aiokprod.metrics import (
    NODE_GROUP,
    PRODUCER_GROUP,
    TOPIC_GROUP,
    MetricKey,
    MetricsRegistry,
    ProducerMetrics,
    Sensor,
    Stat,
)
from aiokprod.producer.batching.buffer_pool import BufferPool


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sensor(clock: FakeClock, window_ms: float = 1000, samples: int = 2) -> Sensor:
    return Sensor("s", sample_window_ms=window_ms, num_samples=samples, clock=clock)


# -- Sensor ---------------------------------------------------------------------------------------


def test_rate_divides_by_at_least_num_samples_minus_one_windows() -> None:
    clock = FakeClock()
    s = sensor(clock)
    s.record(10)
    clock.now += 0.5
    s.record(10)
    # Oldest sample started 0.5 s ago; Java pads to (2 - 1) full windows: 0.5 + 1.0 s.
    assert s.rate() == pytest.approx(20 / 1.5)
    clock.now += 1.0  # 1.5 s after the first sample: one full window, no padding
    assert s.rate() == pytest.approx(20 / 1.5)
    s.record(30)  # opens a second sample
    assert s.rate() == pytest.approx(50 / 1.5)


def test_samples_roll_and_expire() -> None:
    clock = FakeClock()
    s = sensor(clock)
    s.record(1)  # sample A at t0
    clock.now += 1.0
    s.record(2)  # sample B at t0+1
    clock.now += 1.0
    s.record(4)  # sample C at t0+2; A is dropped (2 samples kept)
    assert s.windowed_sum() == 6
    assert s.total == 7 and s.count_total == 3
    clock.now += 1.5  # B is 2.5 s old (> 2 windows): ignored; C is 1.5 s old
    assert s.windowed_sum() == 4
    clock.now += 10
    assert s.windowed_sum() == 0 and s.rate() == 0.0
    assert math.isnan(s.avg()) and math.isnan(s.max()) and math.isnan(s.min())
    assert s.total == 7  # cumulative values never expire


def test_avg_max_min_and_batched_events() -> None:
    clock = FakeClock()
    s = sensor(clock)
    s.record(300, n=3)  # three events totalling 300 (e.g. one batch of 3 records)
    s.record(50)
    assert s.avg() == pytest.approx(350 / 4)
    assert s.max() == 300 and s.min() == 50
    assert s.windowed_count() == 4 and s.count_total == 4
    assert s.count_rate() == pytest.approx(4 / 1.0)  # 0 s elapsed, padded to one window


def test_explicit_now_skips_the_clock() -> None:
    calls = 0

    def counting_clock() -> float:
        nonlocal calls
        calls += 1
        return 5.0

    s = Sensor("s", clock=counting_clock)
    s.record(1, 1, 5.0)
    assert calls == 0
    s.record(1)
    assert calls == 1


def test_rate_floor_is_one_millisecond_with_one_sample() -> None:
    clock = FakeClock()
    s = sensor(clock, samples=1)
    s.record(2)
    assert s.rate() == pytest.approx(2 / 0.001)


def test_sensor_rejects_bad_windows() -> None:
    with pytest.raises(ValueError, match="window"):
        Sensor("s", sample_window_ms=0)
    with pytest.raises(ValueError, match="num samples"):
        Sensor("s", num_samples=0)


# -- registry ---------------------------------------------------------------------------------


def test_registry_shares_sensors_and_rejects_duplicate_keys() -> None:
    clock = FakeClock()
    reg = MetricsRegistry(clock=clock, sample_window_ms=1000)
    a = reg.sensor("x")
    assert reg.sensor("x") is a
    key = reg.add_stat("x-total", "g", a, Stat.TOTAL, tags={"b": "2", "a": "1"})
    assert key.tags == (("a", "1"), ("b", "2"))
    with pytest.raises(ValueError, match="already registered"):
        reg.add_stat("x-total", "g", a, Stat.TOTAL, tags={"a": "1", "b": "2"})
    a.record(3)
    assert reg.snapshot()[key] == 3
    reg.remove(key)
    assert key not in reg.snapshot()


def test_ratio_stat_turns_nanoseconds_per_second_into_a_fraction() -> None:
    clock = FakeClock()
    reg = MetricsRegistry(clock=clock, sample_window_ms=1000, num_samples=2)
    s = reg.sensor("wait")
    key = reg.add_stat("wait-ratio", "g", s, Stat.RATIO)
    s.record(750_000_000)  # 0.75 s waited
    clock.now += 1.5
    assert reg.snapshot()[key] == pytest.approx(0.5)


class RecordingReporter:
    def __init__(self) -> None:
        self.added: list[MetricKey] = []
        self.reports: list[Mapping[MetricKey, float]] = []

    def metric_added(self, key: MetricKey, description: str) -> None:
        assert description
        self.added.append(key)

    def report(self, snapshot: Mapping[MetricKey, float]) -> None:
        self.reports.append(snapshot)


def test_reporter_hears_existing_and_lazily_created_metrics() -> None:
    clock = FakeClock()
    metrics = ProducerMetrics(MetricsRegistry(clock=clock), "cid")
    reporter = RecordingReporter()
    metrics.registry.add_reporter(reporter)
    before = len(reporter.added)
    assert before == len(metrics.registry.keys())
    metrics.topic("orders")
    new = reporter.added[before:]
    assert {k.group for k in new} == {TOPIC_GROUP}
    assert all(k.tag("topic") == "orders" and k.tag("client-id") == "cid" for k in new)
    snap = metrics.registry.report()
    assert reporter.reports == [snap]


# -- producer metrics under Java names -------------------------------------------------------------

# Every metric the Java producer documents, plus the ones the producer core records.
PRODUCER_METRIC_NAMES = {
    "batch-size-avg", "batch-size-max", "batch-split-rate", "batch-split-total",
    "bufferpool-wait-time-ns-total", "bufferpool-wait-ratio", "buffer-exhausted-rate",
    "buffer-exhausted-total", "buffer-available-bytes", "buffer-total-bytes", "waiting-threads",
    "compression-rate-avg", "record-error-rate", "record-error-total", "record-queue-time-avg",
    "record-queue-time-max", "record-retry-rate", "record-retry-total", "record-send-rate",
    "record-send-total", "record-size-avg", "record-size-max", "records-per-request-avg",
    "request-latency-avg", "request-latency-max", "request-rate", "request-total",
    "response-rate", "outgoing-byte-rate", "outgoing-byte-total", "incoming-byte-rate",
    "requests-in-flight", "produce-throttle-time-avg", "produce-throttle-time-max",
    "metadata-age", "connection-count", "flush-time-ns-total", "metadata-wait-time-ns-total",
    "txn-init-time-ns-total", "txn-begin-time-ns-total", "txn-send-offsets-time-ns-total",
    "txn-prepare-time-ns-total", "txn-commit-time-ns-total", "txn-abort-time-ns-total",
}
TOPIC_METRIC_NAMES = {
    "record-send-rate", "record-send-total", "byte-rate", "byte-total", "compression-rate",
    "record-retry-rate", "record-retry-total", "record-error-rate", "record-error-total",
}
NODE_METRIC_NAMES = {
    "request-latency-avg", "request-latency-max", "request-rate", "request-total",
    "outgoing-byte-rate", "outgoing-byte-total", "incoming-byte-rate", "response-rate",
}


def names(snapshot: Mapping[MetricKey, float], group: str) -> set[str]:
    return {k.name for k in snapshot if k.group == group}


def test_snapshot_has_every_java_producer_metric() -> None:
    metrics = ProducerMetrics(MetricsRegistry(clock=FakeClock()), "cid")
    snap = metrics.snapshot()
    assert names(snap, PRODUCER_GROUP) >= PRODUCER_METRIC_NAMES
    # Per-topic and per-node metrics appear only once a topic / node is used.
    assert names(snap, TOPIC_GROUP) == set() and names(snap, NODE_GROUP) == set()
    assert all(k.tag("client-id") == "cid" for k in snap)


def test_topic_and_node_sensors_are_created_once_per_topic_and_node() -> None:
    clock = FakeClock()
    metrics = ProducerMetrics(MetricsRegistry(clock=clock), "cid")
    assert metrics.topic("a") is metrics.topic("a")
    metrics.topic("b")
    metrics.node(1)
    assert metrics.node(1) is metrics.node(1)
    snap = metrics.snapshot()
    for topic in ("a", "b"):
        got = {k.name for k in snap if k.group == TOPIC_GROUP and k.tag("topic") == topic}
        assert got == TOPIC_METRIC_NAMES
    node = {k.name for k in snap if k.group == NODE_GROUP and k.tag("node-id") == "node-1"}
    assert node >= NODE_METRIC_NAMES


def test_per_batch_and_per_request_recording_feeds_java_metrics() -> None:
    clock = FakeClock()
    metrics = ProducerMetrics(MetricsRegistry(clock=clock, sample_window_ms=1000), "cid")
    now = clock.now
    metrics.record_batch_sent("t", record_count=10, size_bytes=1000, compression_ratio=0.5,
                              max_record_bytes=120, queue_time_ms=7, now=now)
    metrics.record_batch_sent("t", record_count=30, size_bytes=3000, compression_ratio=0.7,
                              max_record_bytes=200, queue_time_ms=3, now=now)
    metrics.record_request(2, record_count=40, size_bytes=4100, now=now)
    metrics.record_response(2, latency_ms=12, size_bytes=80, throttle_ms=0, now=now)
    metrics.on_records_retried("t", 10)
    metrics.on_records_failed("t", 30)
    flat = metrics.registry.snapshot_flat()
    p = PRODUCER_GROUP
    assert flat[f"{p}:batch-size-avg"] == 2000 and flat[f"{p}:batch-size-max"] == 3000
    assert flat[f"{p}:compression-rate-avg"] == pytest.approx(0.6)
    assert flat[f"{p}:record-size-max"] == 200
    assert flat[f"{p}:record-queue-time-max"] == 7
    assert flat[f"{p}:record-send-total"] == 40
    assert flat[f"{p}:records-per-request-avg"] == 40
    assert flat[f"{p}:request-total"] == 1 and flat[f"{p}:outgoing-byte-total"] == 4100
    assert flat[f"{p}:request-latency-avg"] == 12
    assert flat[f"{p}:record-retry-total"] == 10 and flat[f"{p}:record-error-total"] == 30
    assert flat[f"{TOPIC_GROUP}:record-send-total{{topic=t}}"] == 40
    assert flat[f"{TOPIC_GROUP}:byte-total{{topic=t}}"] == 4000
    assert flat[f"{TOPIC_GROUP}:record-error-total{{topic=t}}"] == 30
    assert flat[f"{NODE_GROUP}:request-latency-max{{node-id=node-2}}"] == 12
    assert flat[f"{NODE_GROUP}:outgoing-byte-total{{node-id=node-2}}"] == 4100
    # Window is 1 s and both samples are at t0: rates divide by the padded 1 s window.
    assert flat[f"{p}:record-send-rate"] == pytest.approx(40.0)


def test_declared_gauges_read_their_owner_and_are_nan_until_bound() -> None:
    metrics = ProducerMetrics(MetricsRegistry(clock=FakeClock()), "cid")
    flat = metrics.registry.snapshot_flat()
    assert math.isnan(flat[f"{PRODUCER_GROUP}:requests-in-flight"])
    in_flight = [3]
    metrics.bind_gauge("requests-in-flight", lambda: in_flight[0])
    in_flight[0] = 4
    assert metrics.registry.snapshot_flat()[f"{PRODUCER_GROUP}:requests-in-flight"] == 4
    with pytest.raises(ValueError, match="not a declared gauge"):
        metrics.bind_gauge("made-up", lambda: 1)
    extra = metrics.gauge("my-gauge", lambda: 9, "test gauge")
    assert metrics.snapshot()[extra] == 9


def test_buffer_pool_binds_its_gauges() -> None:
    metrics = ProducerMetrics(MetricsRegistry(clock=FakeClock()), "cid")
    pool = BufferPool(1000, 100, metrics=metrics)
    pool.try_allocate(300)
    flat = metrics.registry.snapshot_flat()
    assert flat[f"{PRODUCER_GROUP}:buffer-total-bytes"] == 1000
    assert flat[f"{PRODUCER_GROUP}:buffer-available-bytes"] == 700
    assert flat[f"{PRODUCER_GROUP}:waiting-threads"] == 0


def test_for_config_uses_window_settings_and_client_id() -> None:
    cfg = ProducerConfig(
        bootstrap_servers="h:1", client_id="me", metrics_sample_window_ms=500,
        metrics_num_samples=3,
    )
    clock = FakeClock()
    metrics = ProducerMetrics.for_config(cfg, clock=clock)
    assert metrics.client_id == "me"
    metrics.batch_split.record(1)
    clock.now += 0.4
    # 3 samples of 0.5 s: 0.4 s elapsed padded to 2 full windows = 1.4 s.
    rate = metrics.registry.snapshot_flat()[f"{PRODUCER_GROUP}:batch-split-rate"]
    assert rate == pytest.approx(1 / 1.4)
    assert "client_id='me'" in repr(metrics)


def test_forget_topic_drops_its_series_and_sensors_but_keeps_others() -> None:
    metrics = ProducerMetrics.for_config(ProducerConfig(bootstrap_servers="h:1"),
                                         clock=lambda: 1.0)
    for topic in ("a", "b"):
        metrics.record_batch_sent(topic, record_count=2, size_bytes=10, compression_ratio=1.0,
                                  max_record_bytes=5, queue_time_ms=1.0, now=1.0)
    names = metrics.registry.snapshot_flat()
    assert any("topic=a" in k for k in names) and any("topic=b" in k for k in names)
    metrics.forget_topic("a")
    names = metrics.registry.snapshot_flat()
    assert not any("topic=a" in k for k in names)
    assert any("topic=b" in k for k in names)
    metrics.forget_topic("a")  # twice is harmless
    # the topic comes back as new if it is used again
    metrics.on_records_failed("a", 1, now=2.0)
    assert metrics.registry.snapshot_flat()[
        next(k for k in metrics.registry.snapshot_flat()
             if "record-error-total" in k and "topic=a" in k)] == 1
