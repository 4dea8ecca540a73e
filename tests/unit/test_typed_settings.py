"""The settings are typed where users call them: mypy (strict, as a user would run it) reports a
misspelt setting, a wrong type or a value outside a closed set at ``Producer(...)``,
``ProducerConfig(...)``, ``producer_lifespan(...)`` and ``sink_options(...)`` — each naming the
setting — and reports nothing for right calls. And ``ProducerSettings`` cannot drift from
``ProducerConfig``: the same names with the same types."""

from __future__ import annotations

import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from aiokprod import Producer, ProducerConfig, ProducerSettings
from aiokprod.settings import PlainSettings

# a check of the source tree, the same on every Python and encoder: `make test` runs it once
pytestmark = pytest.mark.static

REPO = Path(__file__).resolve().parents[2]

_HEADER = """\
from aiokprod import Producer, ProducerConfig, ProducerSettings
from aiokprod.fastapi import producer_lifespan
from aiokprod.spark import sink_options

BS = "localhost:9092"
"""

# (a wrong call, the setting mypy's message must name)
WRONG_CALLS = [
    ('Producer(BS, linger_msec=5)', "linger_msec"),
    ('Producer(bootstrap_servers=BS, acks="al")', "acks"),
    ('Producer(BS, linger_ms="5")', "linger_ms"),
    ('Producer(BS, enable_idempotence="true")', "enable_idempotence"),
    ('Producer(BS, compression_type="brotli")', "compression_type"),
    ('Producer(BS, security_protocol="TLS")', "security_protocol"),
    ('Producer(BS, sasl_mechanism="SCRAM-SHA-1")', "sasl_mechanism"),
    ('Producer(BS, metrics_recording_level="WARN")', "metrics_recording_level"),
    ('Producer(BS, key_serializer=42)', "key_serializer"),
    ('Producer(linger_ms=5)', "bootstrap_servers"),
    ('ProducerConfig(bootstrap_servers=BS, acks=2)', "acks"),
    ('ProducerConfig(bootstrap_servers=BS, client_dns_lookup="default")', "client_dns_lookup"),
    ('producer_lifespan(bootstrap_servers=BS, batch_sise=1)', "batch_sise"),
    ('producer_lifespan(bootstrap_servers=BS, retries=None)', "retries"),
    ('sink_options(BS, topic="t", lingerms=5)', "lingerms"),
    ('sink_options(BS, key_serializer=str.encode)', "key_serializer"),
    ('sink_options(BS, partitioner_ignore_keys="yes")', "partitioner_ignore_keys"),
    ('bad: ProducerSettings = {"lingr_ms": 5}', "lingr_ms"),
]

RIGHT_CALLS = _HEADER + """\
import ssl
from collections.abc import Sequence


def by_first_byte(topic: str, key: bytes | None, all_partitions: Sequence[int],
                  available: Sequence[int], /) -> int:
    return key[0] % len(all_partitions) if key else all_partitions[0]


def to_bytes(value: str, /) -> bytes:
    return value.encode()


Producer(BS)
Producer(["h1:9092", "h2:9092"], linger_ms=5, acks="all", compression_type="zstd")
Producer(bootstrap_servers=BS, acks=-1, enable_idempotence=None, delivery_timeout_ms=None)
Producer(BS, acks="1", enable_idempotence=False, retries=0, client_id="app")
Producer(BS, transactional_id="tx-1", transaction_timeout_ms=30_000)
Producer(BS, partitioner=by_first_byte, key_serializer=to_bytes, value_serializer=to_bytes)
Producer(BS, security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
         sasl_username="u", sasl_password="p", ssl_cafile="/ca.pem")
Producer(BS, security_protocol="SSL", ssl_context=ssl.create_default_context(),
         ssl_endpoint_identification_algorithm="")
settings: ProducerSettings = {"linger_ms": 20, "batch_size": 65536, "acks": 0,
                              "enable_idempotence": False}
Producer(BS, **settings)
Producer.from_config({"bootstrap.servers": BS, "linger.ms": "5"})
config = ProducerConfig(bootstrap_servers=BS, compression_type="lz4", compression_lz4_level=3)
codec: str = config.compression_type
producer_lifespan(bootstrap_servers=BS, close_timeout=5.0, linger_ms=5,
                  metrics_recording_level="DEBUG")
options: dict[str, str] = sink_options(BS, topic="t", linger_ms=5, acks="all",
                                       client_dns_lookup="use_all_dns_ips")
"""

_ERROR = re.compile(r"^(?P<file>[^:]+\.py):(?P<line>\d+): error: (?P<message>.*)$")


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, list[str]]]:
    """One mypy run over both files, as ``make test`` runs it (the repository's strict config,
    Python 3.10 semantics); errors by file stem and line. The cache lives in the temporary
    directory: a cold run is a few seconds."""
    root = tmp_path_factory.mktemp("typed_settings")
    (root / "wrong_calls.py").write_text(
        _HEADER + "".join(f"{code}\n" for code, _ in WRONG_CALLS), encoding="utf-8")
    (root / "right_calls.py").write_text(RIGHT_CALLS, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
         "--cache-dir", str(root / "mypy_cache"), "--no-pretty", "--no-color-output",
         str(root / "wrong_calls.py"), str(root / "right_calls.py")],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    # 1: type errors found (expected, in wrong_calls); 2 would be a crash or a usage error
    assert result.returncode == 1, result.stdout + result.stderr
    errors: dict[str, dict[int, list[str]]] = {"wrong_calls": {}, "right_calls": {}}
    for line in result.stdout.splitlines():
        match = _ERROR.match(line)
        if match:
            stem = Path(match["file"]).stem
            errors[stem].setdefault(int(match["line"]), []).append(match["message"])
    return errors


def test_each_wrong_call_is_reported_naming_the_setting(
        mypy_errors: dict[str, dict[int, list[str]]]) -> None:
    first = _HEADER.count("\n") + 1
    reported = mypy_errors["wrong_calls"]
    for offset, (code, name) in enumerate(WRONG_CALLS):
        messages = reported.get(first + offset, [])
        assert any(f'"{name}"' in m for m in messages), (code, messages)
    assert set(reported) == set(range(first, first + len(WRONG_CALLS))), reported


def test_right_calls_are_not_reported(mypy_errors: dict[str, dict[int, list[str]]]) -> None:
    assert mypy_errors["right_calls"] == {}


def test_producer_settings_match_producer_config() -> None:
    """Every ``ProducerConfig`` setting is a key of ``ProducerSettings`` (bootstrap_servers
    aside: ``Producer`` takes it by name) with the same type, and no key is extra."""
    config = typing.get_type_hints(ProducerConfig.__init__)
    config.pop("return")
    config.pop("bootstrap_servers")
    assert typing.get_type_hints(ProducerSettings) == config
    producer = typing.get_type_hints(Producer.__init__)
    assert producer["bootstrap_servers"] == typing.get_type_hints(
        ProducerConfig.__init__)["bootstrap_servers"]


def test_plain_settings_leave_out_only_python_objects_and_the_transactional_id() -> None:
    extra = set(ProducerSettings.__annotations__) - set(PlainSettings.__annotations__)
    assert extra == {"transactional_id", "partitioner", "key_serializer", "value_serializer",
                     "interceptors", "ssl_context", "sasl_oauth_token_provider"}


def test_sink_options_are_what_the_sink_accepts() -> None:
    """``sink_options`` writes settings the way the sink reads them back: the producer config
    the sink builds equals the one ``ProducerConfig`` builds from the same typed settings."""
    pytest.importorskip("pyspark")
    from pyspark.sql.types import BinaryType, StructField, StructType

    from aiokprod.spark import sink_options
    from aiokprod.spark._options import SINK_BATCH_SIZE, SINK_SEND_BUFFER_BYTES, settings_from

    settings: ProducerSettings = {
        "linger_ms": 7, "acks": "1", "enable_idempotence": False, "compression_type": "zstd",
        "partitioner_ignore_keys": True, "client_id": "job", "delivery_timeout_ms": None,
        "ssl_endpoint_identification_algorithm": "",
    }
    options = sink_options(["h1:9092", "h2:9092"], topic="t", **settings)
    assert options["kafka.bootstrap.servers"] == "h1:9092,h2:9092"
    assert options["kafka.enable.idempotence"] == "false"
    assert "kafka.delivery.timeout.ms" not in options
    schema = StructType([StructField("value", BinaryType())])
    sink = settings_from(options, schema)
    assert sink.topic == "t"
    from_sink = ProducerConfig.from_mapping(dict(sink.producer_config))
    # the sink's two defaults of its own: batch.size, send.buffer.bytes (docs/spark.md, Options)
    direct = ProducerConfig(bootstrap_servers="h1:9092,h2:9092", batch_size=SINK_BATCH_SIZE,
                            send_buffer_bytes=SINK_SEND_BUFFER_BYTES, **settings)
    assert from_sink.to_java_names() == direct.to_java_names()
