"""The built-in OAUTHBEARER login (KIP-768, KIP-1139) against Apache Kafka's OIDC validator.

One secure KRaft node whose SASL_SSL listener validates tokens with
``OAuthBearerValidatorCallbackHandler``: signature against the JWKS of a test identity provider
(``support.oauth_idp``, HTTPS on loopback, its own CA and RSA key), audience ``kafka``, issuer
that provider. Kafka 4.x fetches a JWKS URL only if the JVM's
``org.apache.kafka.sasl.oauthbearer.allowed.urls`` lists it, so the node gets that property.
The producer is given only the token endpoint and its credentials: no token provider of its
own. Records are read back through the PLAINTEXT listener.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from aiokprod import AuthenticationError, Producer
from aiokprod.network.oauth import OAuthBearerLogin
from support.kafka_cluster import DEFAULT_JVM_OPTIONS, KafkaCluster, KafkaJars, SecurityOptions
from support.oauth_idp import AUDIENCE, IdentityProvider
from support.reader import read_back

CLIENT_ID, CLIENT_SECRET = "aiokprod-oauth-client", "s3cret-oauth-value-9f2c"
WRONG_SECRET = "wrong-oauth-secret-77aa"
REAUTH_MS = 30_000  # sessions end at token expiry first in the refresh test
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


@dataclass(frozen=True)
class AssertionKeys:
    rsa_key: Path  # signs jwt-bearer assertions, issuer "aiokprod-jwt-bearer"
    ec_key: Path  # signs client assertions (ES256), issuer CLIENT_ID


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdentityProvider]:
    provider = IdentityProvider(tmp_path_factory.mktemp("idp"), clients={CLIENT_ID: CLIENT_SECRET})
    provider.start()
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture(scope="module")
def assertion_keys(idp: IdentityProvider, tmp_path_factory: pytest.TempPathFactory
                   ) -> AssertionKeys:
    directory = tmp_path_factory.mktemp("assertion-keys")
    pem, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_path = directory / "jwt-bearer.pem"
    rsa_path.write_bytes(rsa_key.private_bytes(
        pem, pkcs8, serialization.BestAvailableEncryption(b"key-passphrase-31")))
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ec_path = directory / "client-assertion.pem"
    ec_path.write_bytes(ec_key.private_bytes(pem, pkcs8, serialization.NoEncryption()))
    idp.assertion_keys.update({"aiokprod-jwt-bearer": rsa_key.public_key(),
                               CLIENT_ID: ec_key.public_key()})
    return AssertionKeys(rsa_path, ec_path)


@pytest.fixture(scope="module")
def oidc(kafka_jars: KafkaJars, idp: IdentityProvider,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    # the broker's own login on this listener stays the unsecured one (it needs a subject);
    # the ssl.* options are the trust its JWKS fetch uses
    jaas = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker" '
            f'ssl.truststore.type="PEM" ssl.truststore.location="{idp.ca_path}";')
    cluster = KafkaCluster(
        kafka_jars, work_dir=tmp_path_factory.mktemp("kafka-oauth"),
        security=SecurityOptions(),
        jvm_options=(*DEFAULT_JVM_OPTIONS,
                     f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={idp.jwks_url}"),
        broker_config={
            "connections.max.reauth.ms": str(REAUTH_MS),
            "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": jaas,
            "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": idp.issuer,
        })
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def settings(cluster: KafkaCluster, idp: IdentityProvider, **overrides: Any) -> dict[str, Any]:
    """SASL_SSL with nothing but the endpoint and the client's credentials."""
    assert cluster.tls is not None
    config: dict[str, Any] = dict(
        bootstrap_servers=cluster.bootstrap_for("SASL_SSL"), security_protocol="SASL_SSL",
        ssl_cafile=str(cluster.tls.ca_cert), sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_endpoint_url=idp.token_url,
        sasl_oauthbearer_client_credentials_client_id=CLIENT_ID,
        sasl_oauthbearer_client_credentials_client_secret=CLIENT_SECRET,
        https_cafile=str(idp.ca_path))
    config.update(overrides)
    return {k: v for k, v in config.items() if v is not None}


def login_of(producer: Producer) -> OAuthBearerLogin:
    assert producer._cluster is not None
    login = producer._cluster.pool.security.sasl_oauth_token_provider
    assert isinstance(login, OAuthBearerLogin)
    return login


async def send_and_read_back(cluster: KafkaCluster, producer: Producer, prefix: str,
                             count: int = 100) -> None:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2)
    futures = [await producer.send(topic, f"{i}".encode(), key=f"k{i % 4}".encode())
               for i in range(count)]
    await asyncio.gather(*futures)
    records = read_back(cluster.bootstrap, topic, expected=count, timeout=30)
    assert sorted(int(r.value or b"-1") for r in records) == list(range(count))


async def test_client_credentials_alone_authenticate_send_and_read_back(
        oidc: KafkaCluster, idp: IdentityProvider) -> None:
    before = len(idp.tokens_for(CLIENT_ID))
    async with Producer(**settings(oidc, idp, sasl_oauthbearer_scope="kafka.produce"),
                        linger_ms=2) as producer:
        await send_and_read_back(oidc, producer, "oauth-cc")
        login = login_of(producer)
        # one token serves every connection (bootstrap and the broker's own)
        assert login.fetches == 1
    assert len(idp.tokens_for(CLIENT_ID)) == before + 1


async def test_tokens_are_refreshed_before_expiry_and_sessions_renewed_on_the_same_connection(
        oidc: KafkaCluster, idp: IdentityProvider) -> None:
    """Short-lived tokens: the broker ends each session when its token expires; the producer
    fetches a new token before that and re-authenticates on the same socket (KIP-368),
    with produce requests in flight and none lost or repeated."""
    # renewed at 85-95 % of a 20 s session: 1-3 s for the token fetch (from the IdP's thread
    # in this process) and the renewal before the broker closes the connection. 10 s sessions
    # left 0.5-1.5 s, and a loaded pair of suites once took longer: the broker closed the
    # connection and the producer opened another (nothing lost, the assertion below failed)
    lifetime_s = 20
    idp.token_lifetime_s = lifetime_s
    topic = f"oauth-refresh-{uuid.uuid4().hex[:8]}"
    oidc.create_topic(topic, 3)
    sent = 0
    try:
        async with Producer(**settings(oidc, idp), linger_ms=1) as producer:
            futures = []
            first_connections: dict[int, int] = {}
            started = time.monotonic()

            def broker_connections() -> dict[int, Any]:
                """The live connection to each broker (not the bootstrap address), by id."""
                assert producer._cluster is not None
                return {n: link.connection for n, link in producer._cluster.pool._links.items()
                        if n >= 0 and link.connection is not None}

            def renewed() -> int:
                return max((conn.reauthentications for conn in broker_connections().values()),
                           default=0)

            # until two renewals (the second at 1.7-1.9 lifetimes), bounded far above that
            while renewed() < 2 and time.monotonic() - started < 2.6 * lifetime_s + 20:
                for _ in range(20):
                    futures.append(await producer.send(topic, f"{sent}".encode(),
                                                       key=f"k{sent % 6}".encode()))
                    sent += 1
                await asyncio.sleep(0.01)
                if not first_connections:
                    first_connections = {n: id(conn)
                                         for n, conn in broker_connections().items()}
            results = await asyncio.gather(*futures, return_exceptions=True)
            assert producer._cluster is not None
            links = broker_connections()
            renewals = {n: conn.reauthentications for n, conn in links.items()}
            lifetimes = {n: conn.session_lifetime_ms for n, conn in links.items()}
            failed_connects = producer._cluster.statistics().failed_connects
            fetches = login_of(producer).fetches
    finally:
        idp.token_lifetime_s = 60
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    assert failed_connects == 0
    broker = next(iter(first_connections))
    # the broker's connection is the one it was: renewed in place, never replaced
    assert id(links[broker]) == first_connections[broker]
    # sessions end at token expiry (well before connections.max.reauth.ms)
    assert 0 < lifetimes[broker] <= lifetime_s * 1000, lifetimes
    # two renewals at least, each with a token fetched for it
    assert renewals[broker] >= 2, renewals
    assert fetches >= 1 + renewals[broker], (fetches, renewals)
    records = read_back(oidc.bootstrap, topic, expected=sent, timeout=60)
    assert len(records) == sent
    per_key: dict[bytes, list[int]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        per_key.setdefault(r.key or b"", []).append(int(r.value or b"-1"))
    for key, values in per_key.items():
        assert values == sorted(values), f"order broken for {key!r}"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


FAILURES = [
    pytest.param(dict(sasl_oauthbearer_client_credentials_client_secret=WRONG_SECRET),
                 ("HTTP 401", "invalid_client"), 10.0, id="wrong-secret"),
    pytest.param(dict(sasl_login_retry_backoff_max_ms=1500),
                 ("cannot connect", "gave up after"), 10.0, id="endpoint-unreachable"),
]


@pytest.mark.parametrize(("overrides", "expected", "within"), FAILURES)
async def test_login_failures_are_authentication_errors_naming_the_endpoint_not_the_secret(
        oidc: KafkaCluster, idp: IdentityProvider, overrides: dict[str, Any],
        expected: tuple[str, ...], within: float, caplog: pytest.LogCaptureFixture) -> None:
    config = settings(oidc, idp, **overrides)
    if "sasl_login_retry_backoff_max_ms" in overrides:
        config["sasl_oauthbearer_token_endpoint_url"] = \
            f"https://127.0.0.1:{closed_port()}/token"
    url = config["sasl_oauthbearer_token_endpoint_url"]
    caplog.set_level(logging.DEBUG, logger="aiokprod")
    producer = Producer(**config, max_block_ms=20_000)
    await producer.start()
    try:
        started = time.monotonic()
        with pytest.raises(AuthenticationError) as info:
            await producer.send("never-created", b"x")
        elapsed = time.monotonic() - started
        views = [repr(producer), repr(producer.config), repr(producer.config.to_java_names()),
                 repr(login_of(producer)), repr(login_of(producer).settings)]
    finally:
        await producer.close(timeout=5)
    text = str(info.value)
    assert url in text
    for part in expected:
        assert part in text, text
    # one token request (401) or 1.5 s of retries, not max.block.ms (20 s)
    assert elapsed < within, elapsed
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (CLIENT_SECRET, WRONG_SECRET):
        assert secret not in text and secret not in logged
        for view in views:
            assert secret not in view


async def test_jwt_bearer_grant_signs_its_assertion_with_the_key_file(
        oidc: KafkaCluster, idp: IdentityProvider, assertion_keys: AssertionKeys) -> None:
    """KIP-1139: no client secret; a JWT signed with an (encrypted) RSA key is the grant."""
    config = settings(
        oidc, idp, sasl_oauthbearer_client_credentials_client_id=None,
        sasl_oauthbearer_client_credentials_client_secret=None,
        sasl_oauthbearer_grant_type="jwt_bearer",
        sasl_oauthbearer_assertion_private_key_file=str(assertion_keys.rsa_key),
        sasl_oauthbearer_assertion_private_key_passphrase="key-passphrase-31",
        sasl_oauthbearer_assertion_claim_iss="aiokprod-jwt-bearer",
        sasl_oauthbearer_assertion_claim_sub="aiokprod-service-account",
        sasl_oauthbearer_assertion_claim_aud=idp.token_url,
        sasl_oauthbearer_assertion_claim_jti_include=True)
    async with Producer(**config, linger_ms=2) as producer:
        await send_and_read_back(oidc, producer, "oauth-jwt-bearer", count=50)
        assert "key-passphrase-31" not in repr(producer.config)
    issued = idp.tokens_for("aiokprod-service-account")
    assert issued and issued[-1].grant.endswith("jwt-bearer")


async def test_client_credentials_with_a_signed_client_assertion(
        oidc: KafkaCluster, idp: IdentityProvider, assertion_keys: AssertionKeys) -> None:
    """RFC 7523 section 2.2 (ES256 here): the client proves itself with a signed JWT instead
    of a secret."""
    config = settings(
        oidc, idp, sasl_oauthbearer_client_credentials_client_secret=None,
        sasl_oauthbearer_assertion_private_key_file=str(assertion_keys.ec_key),
        sasl_oauthbearer_assertion_algorithm="ES256",
        sasl_oauthbearer_assertion_claim_iss=CLIENT_ID,
        sasl_oauthbearer_assertion_claim_sub=CLIENT_ID,
        sasl_oauthbearer_assertion_claim_aud=idp.token_url)
    before = len(idp.tokens_for(CLIENT_ID))
    async with Producer(**config, linger_ms=2) as producer:
        await send_and_read_back(oidc, producer, "oauth-client-assertion", count=50)
    assert len(idp.tokens_for(CLIENT_ID)) == before + 1


def test_java_names_configure_the_built_in_login(oidc: KafkaCluster,
                                                 idp: IdentityProvider) -> None:
    """What a Java client's properties file says, as ``Producer.from_config`` reads it."""
    assert oidc.tls is not None
    producer = Producer.from_config({
        "bootstrap.servers": oidc.bootstrap_for("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(oidc.tls.ca_cert),
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": idp.token_url,
        "sasl.oauthbearer.jwt.retriever.class":
            "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever",
        "sasl.oauthbearer.client.credentials.client.id": CLIENT_ID,
        "sasl.oauthbearer.client.credentials.client.secret": CLIENT_SECRET,
        "sasl.oauthbearer.scope": "kafka.produce",
        "sasl.login.connect.timeout.ms": "5000",
        "sasl.login.read.timeout.ms": "5000",
        "sasl.login.retry.backoff.ms": "50",
        "sasl.login.retry.backoff.max.ms": "2000",
        "sasl.login.refresh.window.factor": "0.75",
        "https.ca.location": str(idp.ca_path),
    })
    config = producer.config
    assert config.sasl_oauthbearer_grant_type == "client_credentials"
    assert config.sasl_login_refresh_window_factor == 0.75
    assert config.to_java_names()["sasl.oauthbearer.client.credentials.client.secret"] == "***"
    assert CLIENT_SECRET not in repr(config)
