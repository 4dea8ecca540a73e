"""Java settings accepted with Java's values and meaning: metrics.recording.level and
client.dns.lookup (both were refused as unknown names)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aiokprod import ConfigError, Producer
from aiokprod.devbroker import TansuBroker
from aiokprod.metrics import MetricsRegistry


def test_java_names_are_accepted_and_checked() -> None:
    producer = Producer.from_config({"bootstrap.servers": "127.0.0.1:9092",
                                     "metrics.recording.level": "debug",
                                     "client.dns.lookup":
                                         "resolve_canonical_bootstrap_servers_only"})
    assert producer.config.metrics_recording_level == "DEBUG"
    assert producer.config.client_dns_lookup == "resolve_canonical_bootstrap_servers_only"
    assert Producer(bootstrap_servers="h:1").config.metrics_recording_level == "INFO"
    with pytest.raises(ConfigError, match="metrics.recording.level"):
        Producer(bootstrap_servers="h:1", metrics_recording_level="VERBOSE")
    with pytest.raises(ConfigError, match="client.dns.lookup"):
        Producer(bootstrap_servers="h:1", client_dns_lookup="default")  # removed in Kafka 3.0


@pytest.mark.parametrize(("level", "recorded"), [("INFO", False), ("DEBUG", True),
                                                 ("TRACE", True)])
def test_a_debug_sensor_records_only_at_debug_or_trace(level: str, recorded: bool) -> None:
    registry = MetricsRegistry(recording_level=level)
    detail = registry.sensor("detail", level="DEBUG")
    always = registry.sensor("always")
    detail.record(5.0)
    always.record(5.0)
    assert always.total == 5.0
    assert detail.total == (5.0 if recorded else 0.0)


async def test_canonical_bootstrap_names_reach_the_broker(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    """``localhost`` resolves to 127.0.0.1 whose canonical (reverse) name is used instead;
    the producer still reaches the broker through it."""
    port = tansu.bootstrap.rsplit(":", 1)[1]
    async with Producer(bootstrap_servers=f"localhost:{port}",
                        client_dns_lookup="resolve_canonical_bootstrap_servers_only"
                        ) as producer:
        assert producer._cluster is not None
        bootstrap = [addr for node, addr in producer._cluster.links().items() if node < 0]
        assert bootstrap and all(p == int(port) for _h, p in bootstrap)
        assert all(h != "" for h, _p in bootstrap)
        metadata = await producer.send_and_wait(new_topic(), b"v")
    assert metadata.offset == 0
