"""TLS and SASL against Apache Kafka's own listeners (Tansu cannot serve TLS or SCRAM).

One secure KRaft node for the module: SSL, SASL_PLAINTEXT and SASL_SSL listeners beside
PLAINTEXT, with ``connections.max.reauth.ms`` short enough (10 s) that KIP-368
re-authentication happens at least twice while a test streams. SASL_PLAINTEXT enables every
mechanism but SCRAM-SHA-512, so "the broker does not offer the mechanism" is a real answer, not
a script. Records are read back through the PLAINTEXT listener with confluent-kafka;
test_kafka_security_listeners.py cross-checks the broker set-up with librdkafka itself.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiokprod import AuthenticationError, OAuthToken, Producer
from aiokprod.network.connection import BrokerConnection
from aiokprod.network.security import SecurityOptions as ClientSecurity
from aiokprod.network.security import build_ssl_context
from support.kafka_cluster import KafkaCluster, KafkaJars, SecurityOptions
from support.kafka_security import CertificateAuthority, issue_certificate, make_ca
from support.reader import read_back

# a session of 10 s renewed at 85-95 % leaves 0.5-1.5 s for the renewal's round trips before
# the broker would close the connection: room for a loaded machine
REAUTH_MS = 10_000
USER, PASSWORD = "alice", "alice-secret"
SECRET_MARKERS = ("alice-secret", "bob-secret", "wrong-password-123")

COMBOS = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "OAUTHBEARER"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "OAUTHBEARER"),
]


@dataclass(frozen=True)
class ClientTls:
    """A client certificate (mutual TLS) from a CA only the SSL listener trusts."""

    chain: Path
    key: Path
    ca: CertificateAuthority


@pytest.fixture(scope="module")
def client_tls(tmp_path_factory: pytest.TempPathFactory) -> ClientTls:
    directory = tmp_path_factory.mktemp("client-tls")
    ca = make_ca(directory, "aiokprod client CA", filename="client-ca.pem")
    chain, key = issue_certificate(ca, directory, "client", hosts=("aiokprod-client",),
                                   client=True)
    return ClientTls(chain, key, ca)


@pytest.fixture(scope="module")
def secure(kafka_jars: KafkaJars, tmp_path_factory: pytest.TempPathFactory,
           client_tls: ClientTls) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(
        kafka_jars, work_dir=tmp_path_factory.mktemp("kafka-security"),
        security=SecurityOptions(),
        broker_config={
            "connections.max.reauth.ms": str(REAUTH_MS),
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms":
                "PLAIN,SCRAM-SHA-256,OAUTHBEARER",
            # the SSL listener wants a client certificate (mutual TLS); SASL_SSL does not
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.ssl.truststore.type": "PEM",
            "listener.name.ssl.ssl.truststore.certificates": client_tls.ca.pem,
        })
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def unsecured_jws(subject: str, lifetime_s: int) -> str:
    """An unsigned JWS (alg none) as Kafka's unsecured OAUTHBEARER validator accepts it."""
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + lifetime_s})}."


class TokenProvider:
    """Hands out a fresh short-lived token per call and counts the calls."""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        self.calls = 0

    async def __call__(self) -> OAuthToken:
        self.calls += 1
        return OAuthToken(unsecured_jws(self.subject, 60), int(time.time() * 1000) + 60_000,
                          principal=self.subject)


def settings(cluster: KafkaCluster, protocol: str, mechanism: str | None,
             client: ClientTls | None = None, **overrides: Any) -> dict[str, Any]:
    assert cluster.tls is not None and cluster.security is not None
    config: dict[str, Any] = {"bootstrap_servers": cluster.bootstrap_for(protocol),
                              "security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        config["ssl_cafile"] = str(cluster.tls.ca_cert)
    if client is not None:
        config.update(ssl_certfile=str(client.chain), ssl_keyfile=str(client.key))
    if mechanism == "OAUTHBEARER":
        config.update(sasl_mechanism=mechanism,
                      sasl_oauth_token_provider=TokenProvider(cluster.security.oauth_subject))
    elif mechanism is not None:
        config.update(sasl_mechanism=mechanism, sasl_username=USER, sasl_password=PASSWORD)
    config.update(overrides)
    return config


def new_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize(("protocol", "mechanism"), COMBOS,
                         ids=[f"{p}-{m or 'TLS'}" for p, m in COMBOS])
async def test_every_protocol_and_mechanism_sends_and_reads_back(
        secure: KafkaCluster, client_tls: ClientTls, protocol: str, mechanism: str | None
) -> None:
    """SSL here is mutual TLS: the listener refuses a client without a certificate."""
    topic = new_topic("sec")
    secure.create_topic(topic, 2)
    client = client_tls if protocol == "SSL" else None
    async with Producer(**settings(secure, protocol, mechanism, client),
                        linger_ms=2) as producer:
        assert producer.config.enable_idempotence
        futures = [await producer.send(topic, f"{i}".encode(), key=f"k{i % 4}".encode())
                   for i in range(200)]
        acked = await asyncio.gather(*futures)
    assert len(acked) == 200
    records = read_back(secure.bootstrap, topic, expected=200, timeout=30)
    assert sorted(int(r.value or b"-1") for r in records) == list(range(200))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "OAUTHBEARER"])
async def test_sessions_are_renewed_on_the_same_connection_without_losing_or_reordering(
        secure: KafkaCluster, mechanism: str) -> None:
    """KIP-368: the broker ends each session after connections.max.reauth.ms; the producer
    authenticates again on the same socket while produce requests are in flight."""
    topic = new_topic("reauth")
    secure.create_topic(topic, 3)
    config = settings(secure, "SASL_SSL", mechanism)
    sent = 0
    async with Producer(**config, linger_ms=1, max_in_flight_requests_per_connection=5
                        ) as producer:
        futures = []

        def connections() -> list[Any]:
            assert producer._cluster is not None
            return [link.connection for link in producer._cluster.pool._links.values()
                    if link.connection is not None]

        def renewed() -> int:
            return sum(conn.reauthentications for conn in connections())

        # 2.5 sessions, and on until two renewals (bounded) should a loaded machine slow them
        deadline = time.monotonic() + 2.5 * REAUTH_MS / 1000
        hard_deadline = deadline + 20
        while time.monotonic() < deadline or (renewed() < 2 and
                                               time.monotonic() < hard_deadline):
            for _ in range(20):
                futures.append(await producer.send(topic, f"{sent}".encode(),
                                                   key=f"k{sent % 6}".encode()))
                sent += 1
            await asyncio.sleep(0.01)
        results = await asyncio.gather(*futures, return_exceptions=True)
        renewals = renewed()
        sent_on = {conn.node_id: conn.requests_sent for conn in connections()}
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    # a session of 10 s renewed at 85-95 %: at least two renewals on the leader's connection
    # over 25 s, every one of them with produce requests around it
    assert renewals >= 2, (renewals, sent_on)
    if mechanism == "OAUTHBEARER":
        provider = config["sasl_oauth_token_provider"]
        assert provider.calls >= 1 + renewals  # a fresh token for every exchange
    records = read_back(secure.bootstrap, topic, expected=sent, timeout=60)
    assert len(records) == sent  # exactly once: no retry was needed, none duplicated
    per_key: dict[bytes, list[int]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        per_key.setdefault(r.key or b"", []).append(int(r.value or b"-1"))
    for key, values in per_key.items():
        assert values == sorted(values), f"order broken for {key!r}"


FAILURES = [
    pytest.param("SASL_PLAINTEXT", dict(sasl_mechanism="PLAIN", sasl_username=USER,
                                        sasl_password="wrong-password-123"),
                 "SASL PLAIN authentication failed", id="plain-wrong-password"),
    pytest.param("SASL_SSL", dict(sasl_mechanism="SCRAM-SHA-256", sasl_username=USER,
                                  sasl_password="wrong-password-123"),
                 "SASL SCRAM-SHA-256 authentication failed", id="scram-wrong-password"),
    pytest.param("SASL_PLAINTEXT", dict(sasl_mechanism="SCRAM-SHA-256",
                                        sasl_username="mallory",
                                        sasl_password="wrong-password-123"),
                 "SASL SCRAM-SHA-256 authentication failed", id="scram-unknown-user"),
    pytest.param("SASL_PLAINTEXT", dict(sasl_mechanism="SCRAM-SHA-512", sasl_username=USER,
                                        sasl_password=PASSWORD),
                 "does not enable SASL mechanism SCRAM-SHA-512", id="mechanism-not-offered"),
    pytest.param("SSL", dict(ssl_cafile=None), "TLS handshake failed",
                 id="untrusted-certificate"),
    pytest.param("SSL", {}, "TLS", id="no-client-certificate"),
]


@pytest.mark.parametrize(("protocol", "overrides", "message"), FAILURES)
async def test_authentication_failures_fail_the_send_fast_and_name_the_cause(
        secure: KafkaCluster, protocol: str, overrides: dict[str, Any], message: str,
        caplog: pytest.LogCaptureFixture) -> None:
    config = settings(secure, protocol, None, **overrides)
    config = {k: v for k, v in config.items() if v is not None}
    caplog.set_level(logging.DEBUG, logger="aiokprod")
    producer = Producer(**config, max_block_ms=20_000, request_timeout_ms=30_000)
    await producer.start()
    try:
        started = time.monotonic()
        with pytest.raises(AuthenticationError) as info:
            await producer.send("never-created", b"x")
        elapsed = time.monotonic() - started
        text = str(info.value)
        assert message in text
        assert secure.bootstrap_for(protocol).split(",")[0] in text  # names the broker
        # a handshake or two, well under max.block.ms (20 s) and request.timeout.ms (30 s)
        assert elapsed < 10.0, elapsed
        # the same credentials are not retried in a tight loop: reconnect.backoff.ms grows
        await asyncio.sleep(2.0)
        assert producer._cluster is not None
        attempts = producer._cluster.statistics().failed_connects
        assert 1 <= attempts <= 12, attempts
    finally:
        await producer.close(timeout=5)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in SECRET_MARKERS:
        assert secret not in text and secret not in logged
        assert secret not in repr(producer) and secret not in repr(producer.config)


def test_secrets_never_appear_in_config_views(secure: KafkaCluster) -> None:
    config = settings(secure, "SASL_SSL", "SCRAM-SHA-512")
    producer = Producer(**config)
    java = producer.config.to_java_names()
    assert java["sasl.password"] == "***"
    for view in (repr(producer), repr(producer.config), repr(java)):
        assert PASSWORD not in view


async def test_a_missing_ca_file_fails_start_with_the_setting_named(
        secure: KafkaCluster, tmp_path: Path) -> None:
    producer = Producer(**settings(secure, "SSL", None,
                                   ssl_cafile=str(tmp_path / "missing-ca.pem")))
    with pytest.raises(Exception, match="ssl_cafile"):
        await producer.start()
    await producer.close()


# -- host-name verification, through a TLS front whose certificate names another host --------


@dataclass(frozen=True)
class TlsFront:
    port: int
    ca: CertificateAuthority


@pytest.fixture
async def tls_front(secure: KafkaCluster, tmp_path: Path) -> AsyncIterator[TlsFront]:
    """A TLS server on loopback whose certificate (from its own CA) names only
    ``broker.example``, relaying to the broker's PLAINTEXT listener: the chain verifies with
    that CA, the host name 127.0.0.1 does not match."""
    ca = make_ca(tmp_path, "front CA", filename="front-ca.pem")
    chain, key = issue_certificate(ca, tmp_path, "front", hosts=("broker.example",))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain, key)
    target = secure.port(1, "PLAINTEXT")
    relays: set[asyncio.Task[None]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        for task in (pipe(reader, up_writer), pipe(up_reader, writer)):
            relay = asyncio.ensure_future(task)
            relays.add(relay)
            relay.add_done_callback(relays.discard)

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    try:
        yield TlsFront(server.sockets[0].getsockname()[1], ca)
    finally:
        server.close()
        for relay in list(relays):
            relay.cancel()
        await server.wait_closed()


async def test_a_certificate_for_another_host_is_refused(tls_front: TlsFront) -> None:
    options = ClientSecurity("SSL", ssl_context=build_ssl_context(
        cafile=str(tls_front.ca.cert_path)))
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match="TLS handshake failed.*(mismatch|match)"):
        await BrokerConnection.open("127.0.0.1", tls_front.port, security=options)
    assert time.monotonic() - started < 5.0  # one handshake, not the 10 s set-up timeout


async def test_turning_host_name_checks_off_still_verifies_the_chain(
        tls_front: TlsFront, secure: KafkaCluster) -> None:
    """``ssl_endpoint_identification_algorithm=""``: the host name is not checked, the chain
    still is (the broker's own CA does not vouch for the front's certificate)."""
    unchecked = ClientSecurity("SSL", ssl_context=build_ssl_context(
        cafile=str(tls_front.ca.cert_path), check_hostname=False))
    conn = await BrokerConnection.open("127.0.0.1", tls_front.port, security=unchecked)
    try:
        assert conn.broker_versions  # ApiVersions went through the TLS front to Kafka
    finally:
        conn.close()
    assert secure.tls is not None
    wrong_ca = ClientSecurity("SSL", ssl_context=build_ssl_context(
        cafile=str(secure.tls.ca_cert), check_hostname=False))
    with pytest.raises(AuthenticationError, match="TLS handshake failed"):
        await BrokerConnection.open("127.0.0.1", tls_front.port, security=wrong_ca)
