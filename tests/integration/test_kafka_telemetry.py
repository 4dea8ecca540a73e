"""Client metrics push (KIP-714) against Apache Kafka 4.4.0, read back from the broker's side.

The broker runs a telemetry exporter the test compiles from ``java/TelemetrySink.java`` (javac
against the cached Kafka jars, added to the broker's classpath, named in ``metric.reporters``):
it decodes every accepted push with the broker's own OTLP classes and writes one line per data
point. A CLIENT_METRICS subscription (IncrementalAlterConfigs) asks for the producer metrics
every second. What the broker received must carry our client instance id, KIP-714's names,
delta sums that add up to the records sent, and a last push flagged terminating on close.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from aiokprod import Producer
from aiokprod.network.cluster import Cluster
from aiokprod.telemetry.subscription import TelemetrySchedule
from support.kafka_cluster import KafkaCluster
from support.kafka_fixtures import KafkaFactory
from support.kafka_jars import QUICK_JVM
from support.waits import eventually

SINK = Path(__file__).resolve().parent / "java" / "TelemetrySink.java"
PREFIX = "org.apache.kafka.producer."


def _compile_sink(libs: Path, out: Path) -> Path:
    if shutil.which("javac") is None:
        pytest.skip("javac is not installed")
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", *(f"-J{option}" for option in QUICK_JVM), "-cp", f"{libs}/*",
                    "-d", str(out), str(SINK)], check=True,
                   capture_output=True, timeout=120)
    return out


def _lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split("\t") for line in path.read_text().splitlines()]


async def _wait_for(path: Path, predicate: object, timeout: float) -> list[list[str]]:
    deadline = time.monotonic() + timeout
    while True:
        lines = _lines(path)
        if predicate(lines):  # type: ignore[operator]
            return lines
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker did not receive the expected pushes within "
                                 f"{timeout}s: {lines[-20:]}")
        await asyncio.sleep(0.2)


@pytest.fixture
def telemetry_kafka(kafka_factory: KafkaFactory, kafka_jars: object, tmp_path: Path
                    ) -> tuple[KafkaCluster, Path]:
    classes = _compile_sink(kafka_jars.libs, tmp_path / "sink")  # type: ignore[attr-defined]
    received = tmp_path / "received.tsv"
    cluster = kafka_factory(extra_classpath=[classes], broker_config={
        "metric.reporters": "TelemetrySink", "aiokprod.telemetry.file": str(received)})
    return cluster, received


async def test_pushes_reach_the_broker_with_kip714_names(
        telemetry_kafka: tuple[KafkaCluster, Path]) -> None:
    cluster, received = telemetry_kafka
    await asyncio.to_thread(cluster.alter_client_metrics, "aiokprod-producers",
                            {"metrics": PREFIX, "interval.ms": "1000"})
    topic = "telemetry"
    await asyncio.to_thread(cluster.create_topic, topic, 1)
    producer = Producer(cluster.bootstrap, client_id="telemetry-test", linger_ms=0)
    await producer.start()
    try:
        futures = [await producer.send(topic, b"v%d" % i) for i in range(20)]
        await asyncio.gather(*futures)
        # the first push comes 0.5-1.5 intervals after the subscription
        lines = await _wait_for(received, lambda ls: any(
            row[0] == "push" and row[2] == "false" for row in ls), timeout=20)
        instance = producer.client_instance_id()
        assert instance is not None
        assert all(row[1] == instance for row in lines)
        more = [await producer.send(topic, b"late") for _ in range(5)]
        await asyncio.gather(*more)
    finally:
        await producer.close(timeout=10)
    lines = await _wait_for(received, lambda ls: any(
        row[0] == "push" and row[2] == "true" for row in ls), timeout=30)  # sent: not never
    assert not [row for row in lines if row[0] == "error"]
    pushes = [row for row in lines if row[0] == "push"]
    assert pushes[-1][2] == "true" and [p[2] for p in pushes].count("true") == 1
    assert all(p[3] == "1000" and p[4] for p in pushes)  # the interval; a content type
    points = [row for row in lines if row[0] == "point"]
    names = {row[4] for row in points}
    assert all(name.startswith(PREFIX) for name in names)
    # KIP-714's producer metrics (those we have) under Java's names
    for name in ("record.queue.time.avg", "record.queue.time.max", "node.request.latency.avg",
                 "node.request.latency.max", "produce.throttle.time.avg",
                 "produce.throttle.time.max", "connection.creation.rate",
                 "connection.creation.total"):
        assert PREFIX + name in names, name
    latency = [row for row in points if row[4] == PREFIX + "node.request.latency.avg"]
    assert all(row[7].startswith("node_id=node-") for row in latency)
    assert not any("client_id" in row[7] for row in points)
    # counters are delta sums (the broker asks for delta temporality): over every push,
    # including the terminating one, they add up to what was sent
    sent = [float(row[6]) for row in points if row[4] == PREFIX + "record.send.total"]
    assert all(row[5] == "sum" for row in points if row[4].endswith(".total"))
    assert sum(sent) == 25.0


async def test_no_subscription_no_push_and_disabled_sends_nothing(
        telemetry_kafka: tuple[KafkaCluster, Path]) -> None:
    cluster, received = telemetry_kafka
    topic = "quiet"
    await asyncio.to_thread(cluster.create_topic, topic, 1)
    async with Producer(cluster.bootstrap, client_id="no-sub") as producer:
        await (await producer.send(topic, b"x"))
        # subscribed with no metrics: the broker still assigns an instance id
        deadline = time.monotonic() + 30
        while producer.client_instance_id() is None and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        assert producer.client_instance_id() is not None
    async with Producer(cluster.bootstrap, client_id="off", enable_metrics_push=False) as off:
        await (await off.send(topic, b"y"))
        assert off.client_instance_id() is None
    await asyncio.sleep(0.5)
    assert _lines(received) == []


async def test_waiting_for_the_next_push_the_loop_sleeps_through_cluster_changes(
        telemetry_kafka: tuple[KafkaCluster, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster's on_change fires on every metadata refresh and every drained write (a
    large request pauses and resumes the transport). Telemetry listens to it only while it
    waits for a connection; waiting minutes for its next request, a wake-up per change cost
    a loop turn and a task each, several per request in a busy producer."""
    cluster, _ = telemetry_kafka
    turns = changes = 0
    time_to_next, notify_change = TelemetrySchedule.time_to_next, Cluster.notify_change

    def count_turn(self: TelemetrySchedule, now: float | None = None) -> float:
        nonlocal turns
        turns += 1
        return time_to_next(self, now)

    def count_change(self: Cluster) -> None:
        nonlocal changes
        changes += 1
        notify_change(self)

    monkeypatch.setattr(TelemetrySchedule, "time_to_next", count_turn)
    monkeypatch.setattr(Cluster, "notify_change", count_change)
    topic = "changes"
    await asyncio.to_thread(cluster.create_topic, topic, 1)
    # metadata every 100 ms: a cluster change each time, from the broker's answers
    async with Producer(cluster.bootstrap, client_id="changes",
                        metadata_max_age_ms=100) as producer:
        await (await producer.send(topic, b"x"))
        # the subscription's answer
        await eventually(lambda: producer.client_instance_id() is not None, 30)
        # no subscription matches this client: the next request is minutes away (the
        # broker's default interval), so no turn of the loop is due until then
        turns_before, changes_before = turns, changes
        await eventually(lambda: changes - changes_before >= 10, 60)
        assert turns == turns_before, f"{turns - turns_before} turns for " \
            f"{changes - changes_before} cluster changes"
