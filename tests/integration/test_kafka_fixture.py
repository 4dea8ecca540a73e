"""The Apache Kafka fixture itself: what it does when the loopback port it picked is gone."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from support import kafka_cluster
from support.kafka_cluster import KafkaCluster, KafkaJars


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another process (here: this one) is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("brokers", [1, 3])
def test_a_port_taken_before_the_node_binds_it_is_retried(
    kafka_jars: KafkaJars, taken_port: int,
    monkeypatch: pytest.MonkeyPatch, brokers: int,
) -> None:
    """The first pick hands the last node a port someone else holds (the race between
    picking a free port and the JVM binding it); the start is retried on fresh ports and
    succeeds. With 3 nodes the others are alive, waiting to see the one that exited: that
    exit must end the attempt (it once waited out the whole bound, then failed)."""
    real = kafka_cluster.free_ports
    picks: list[list[int]] = []

    def first_pick_taken(count: int) -> list[int]:
        ports = real(count)
        if not picks:
            ports[3 * (brokers - 1) + 2] = taken_port  # the last node's PLAINTEXT listener
        picks.append(ports)
        return ports

    monkeypatch.setattr(kafka_cluster, "free_ports", first_pick_taken)
    cluster = KafkaCluster(kafka_jars, brokers=brokers)
    try:
        cluster.start()
        assert len(picks) == 2, picks
        assert taken_port not in {cluster.port(n) for n in range(1, brokers + 1)}
        assert cluster.running_node_ids() == list(range(1, brokers + 1))
    finally:
        cluster.stop()
