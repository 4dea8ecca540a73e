"""The secure Apache Kafka fixture serves what it promises: SSL, SASL_PLAINTEXT and SASL_SSL
with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and unsecured OAUTHBEARER, checked with librdkafka
(confluent-kafka) so the fixture is proved by a client we did not write; wrong credentials are
refused, so authentication is really on."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from confluent_kafka import Producer as ConfluentProducer

from support.kafka_cluster import SASL_MECHANISMS, KafkaCluster
from support.reader import read_back

CASES = [("SSL", None)] + [(listener, mechanism) for listener in ("SASL_PLAINTEXT", "SASL_SSL")
                           for mechanism in SASL_MECHANISMS]


def client_config(cluster: KafkaCluster, listener: str, mechanism: str | None,
                  *, password: str | None = None) -> dict[str, Any]:
    """librdkafka settings for one listener and mechanism of the secure fixture."""
    assert cluster.security is not None and cluster.tls is not None
    user = cluster.security.users[0]
    config: dict[str, Any] = {
        "bootstrap.servers": cluster.bootstrap_for(listener),
        "security.protocol": listener,
        "log_level": 2,
        "message.timeout.ms": 10_000,
    }
    if listener.endswith("SSL"):
        config["ssl.ca.location"] = str(cluster.tls.ca_cert)
        config["ssl.endpoint.identification.algorithm"] = "https"  # the cert names 127.0.0.1
    if mechanism == "OAUTHBEARER":
        config.update({"sasl.mechanism": mechanism,
                       "enable.sasl.oauthbearer.unsecure.jwt": True,
                       "sasl.oauthbearer.config":
                           f"principal={cluster.security.oauth_subject}"})
    elif mechanism is not None:
        config.update({"sasl.mechanism": mechanism, "sasl.username": user.name,
                       "sasl.password": password if password is not None else user.password})
    return config


def produce_one(config: dict[str, Any], topic: str, value: bytes, *,
                stop_on_auth_error: bool = False) -> list[str]:
    """Produce one record and wait for its outcome; the errors seen (delivery and client-level).

    ``stop_on_auth_error`` returns as soon as librdkafka reports an authentication failure
    instead of waiting for the record's message.timeout.ms.
    """
    errors: list[str] = []
    lock = threading.Lock()
    delivered = threading.Event()

    def on_error(error: KafkaError) -> None:
        with lock:
            errors.append(f"{error.name()}: {error.str()}")

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            on_error(error)
        delivered.set()

    producer = ConfluentProducer({**config, "error_cb": on_error})
    producer.produce(topic, value=value, on_delivery=on_delivery)
    deadline = time.monotonic() + 15
    while not delivered.is_set() and time.monotonic() < deadline:
        producer.poll(0.05)
        with lock:
            if stop_on_auth_error and any("AUTHENTICATION" in e for e in errors):
                break
    if not delivered.is_set():
        producer.purge()
        producer.flush(1)
        if not stop_on_auth_error:
            errors.append("the record was not delivered within 15 s")
    return errors


@pytest.mark.parametrize(("listener", "mechanism"), CASES,
                         ids=[f"{listener}-{mechanism or 'TLS'}" for listener, mechanism in CASES])
def test_secure_listener_accepts_librdkafka(kafka_secure: KafkaCluster, listener: str,
                                            mechanism: str | None) -> None:
    topic = f"secure-{listener}-{mechanism or 'tls'}".lower()
    kafka_secure.create_topic(topic, 1)
    value = f"over {listener} {mechanism}".encode()
    assert produce_one(client_config(kafka_secure, listener, mechanism), topic, value) == []
    got = read_back(kafka_secure.bootstrap, topic, expected=1)
    assert [r.value for r in got] == [value]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_refused(kafka_secure: KafkaCluster, mechanism: str) -> None:
    config = client_config(kafka_secure, "SASL_PLAINTEXT", mechanism, password="wrong")
    errors = produce_one(config, "never-written", b"x", stop_on_auth_error=True)
    assert any("AUTHENTICATION" in e for e in errors), errors
