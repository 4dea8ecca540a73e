"""The built-in OAUTHBEARER login's pure parts: refresh timing, settings, JWT reading and signing.

The HTTP exchange and the broker's verdict are tested against Apache Kafka's OIDC validator in
tests/integration/test_kafka_oauth.py.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from aiokprod.config import ProducerConfig
from aiokprod.errors import ConfigError
from aiokprod.network.https_post import display_url
from aiokprod.network.jwt import AssertionSettings, make_assertion, read_claims
from aiokprod.network.oauth import refresh_at_ms

SECRET = "unit-test-client-secret-4411"
BASE: dict[str, Any] = dict(bootstrap_servers="localhost:9092", security_protocol="SASL_SSL",
                            sasl_mechanism="OAUTHBEARER",
                            sasl_oauthbearer_token_endpoint_url="https://idp.example/token",
                            sasl_oauthbearer_client_credentials_client_id="svc",
                            sasl_oauthbearer_client_credentials_client_secret=SECRET)
JAVA = dict(factor=0.8, jitter=0.05, min_period_s=60, buffer_s=300)


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# -- refresh timing (Java's ExpiringCredentialRefreshingLogin rule) -------------------------


def test_an_hour_token_is_refreshed_at_80_to_85_percent() -> None:
    start = 1_000_000
    for seed in range(20):
        at = refresh_at_ms(start, start + 3_600_000, start, rng=random.Random(seed), **JAVA)
        assert start + 0.80 * 3_600_000 <= at <= start + 0.85 * 3_600_000


def test_the_buffer_before_expiry_is_kept_when_the_lifetime_allows() -> None:
    # 10 min token: 80 % would be 2 min before expiry, the 5 min buffer moves it up
    start = 0
    at = refresh_at_ms(start, 600_000, start, rng=random.Random(1), **JAVA)
    assert at == 600_000 - 300_000


def test_the_minimum_period_is_kept_when_the_lifetime_allows() -> None:
    # a token that began long ago: 80 % of its life lies in the past, refresh waits 60 s
    at = refresh_at_ms(0, 10_000_000, 9_000_000, rng=random.Random(1), **JAVA)
    assert at == 9_000_000 + 60_000


def test_a_short_token_ignores_minimum_period_and_buffer() -> None:
    # 4 s lifetime < 60 s + 300 s: only the window factor applies, from now
    at = refresh_at_ms(0, 4000, 0, rng=random.Random(3), **JAVA)
    assert 3200 <= at <= 3400


# -- settings -------------------------------------------------------------------------------


def test_endpoint_and_client_credentials_are_enough() -> None:
    config = ProducerConfig(**BASE)
    assert config.sasl_oauthbearer_grant_type == "client_credentials"
    assert config.sasl_login_connect_timeout_ms == 10000  # bounded, unlike Java's default
    assert SECRET not in repr(config)
    assert config.to_java_names()["sasl.oauthbearer.client.credentials.client.secret"] == "***"


@pytest.mark.parametrize(("change", "message"), [
    (dict(sasl_oauthbearer_token_endpoint_url="http://idp.example/token"), "https://"),
    (dict(sasl_oauthbearer_token_endpoint_url="https://u:pw@idp.example/token"), "user info"),
    (dict(sasl_oauthbearer_client_credentials_client_id=None), "needs a client id"),
    (dict(sasl_oauthbearer_client_credentials_client_secret=None), "needs the client secret"),
    (dict(sasl_oauth_token_provider=lambda: None), "not both"),
    (dict(sasl_oauthbearer_grant_type="jwt_bearer"), "needs sasl_oauthbearer_assertion"),
    (dict(sasl_oauthbearer_grant_type="password"), "client_credentials, jwt_bearer"),
    (dict(sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p"), "sasl_mechanism is PLAIN"),
    (dict(sasl_login_refresh_window_factor=0.3), "[0.5, 1.0]"),
    (dict(sasl_login_read_timeout_ms=0), "sasl.login.read.timeout.ms"),
], ids=["http", "user-info", "no-client-id", "no-secret", "provider-too", "jwt-no-assertion",
        "unknown-grant", "not-oauthbearer", "window-factor", "read-timeout"])
def test_invalid_login_settings_fail_naming_the_setting_never_the_secret(
        change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig(**{**BASE, **change})
    assert message in str(info.value)
    assert SECRET not in str(info.value) and "pw@" not in str(info.value)


def test_login_settings_without_a_sasl_protocol_are_an_error() -> None:
    with pytest.raises(ConfigError, match="SASL options need"):
        ProducerConfig(bootstrap_servers="localhost:9092",
                       sasl_oauthbearer_client_credentials_client_secret=SECRET)


def test_java_property_names_and_retriever_classes_are_read() -> None:
    config = ProducerConfig.from_mapping({
        "bootstrap.servers": "localhost:9092", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.oauthbearer.jwt.retriever.class":
            "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever",
        "sasl.oauthbearer.assertion.file": "/run/secrets/assertion.jwt",
        "sasl.oauthbearer.scope": "",
        "sasl.login.refresh.window.jitter": "0.1",
        "sasl.login.refresh.buffer.seconds": "30",
        "sasl.oauthbearer.header.urlencode": "true",
    })
    assert config.sasl_oauthbearer_grant_type == "jwt_bearer"
    assert config.sasl_oauthbearer_scope is None  # blank reads as unset, as in Java
    assert config.sasl_login_refresh_window_jitter == 0.1
    assert config.sasl_login_refresh_buffer_seconds == 30
    assert config.sasl_oauthbearer_header_urlencode is True


def test_messages_show_the_endpoint_without_query_or_user_info() -> None:
    assert display_url("https://idp.example:8443/oauth2/token?x=secret") == \
        "https://idp.example:8443/oauth2/token"


# -- JWTs -----------------------------------------------------------------------------------


def test_claims_of_a_jws_are_read_and_an_opaque_token_has_none() -> None:
    payload = base64.urlsafe_b64encode(json.dumps({"sub": "a", "exp": 5}).encode()).decode()
    assert read_claims(f"e30.{payload.rstrip('=')}.sig") == {"sub": "a", "exp": 5}
    assert read_claims("opaque-token-value") is None


def _write_key(tmp_path: Path, key: Any, passphrase: bytes | None = None) -> Path:
    encryption: serialization.KeySerializationEncryption = \
        serialization.BestAvailableEncryption(passphrase) if passphrase \
        else serialization.NoEncryption()
    path = tmp_path / "key.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8, encryption))
    return path


def test_an_rs256_assertion_verifies_with_the_public_key(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    settings = AssertionSettings(private_key_file=str(_write_key(tmp_path, key, b"pw-1")),
                                 private_key_passphrase="pw-1", claim_iss="svc", claim_sub="svc",
                                 claim_aud="https://idp.example/token", claim_jti_include=True)
    jws = make_assertion(settings, now=1000)
    head, body, signature = jws.split(".")
    key.public_key().verify(_unb64(signature), f"{head}.{body}".encode(), padding.PKCS1v15(),
                            hashes.SHA256())
    assert json.loads(_unb64(head)) == {"alg": "RS256", "typ": "JWT"}
    claims = json.loads(_unb64(body))
    assert (claims["iat"], claims["exp"], claims["nbf"]) == (1000, 1300, 940)
    assert claims["iss"] == claims["sub"] == "svc" and claims["jti"]
    assert "pw-1" not in repr(settings)


def test_an_es256_assertion_is_r_and_s_as_jws_wants(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    template = tmp_path / "template.json"
    template.write_text(json.dumps({"header": {"kid": "k7"}, "payload": {"tenant": "t1"}}))
    settings = AssertionSettings(private_key_file=str(_write_key(tmp_path, key)),
                                 algorithm="ES256", claim_aud="aud", template_file=str(template))
    head, body, signature = make_assertion(settings).split(".")
    raw = _unb64(signature)
    assert len(raw) == 64
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    key.public_key().verify(der, f"{head}.{body}".encode(), ec.ECDSA(hashes.SHA256()))
    assert json.loads(_unb64(head))["kid"] == "k7"
    assert json.loads(_unb64(body))["tenant"] == "t1"


def test_a_key_of_the_wrong_kind_is_refused(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    settings = AssertionSettings(private_key_file=str(_write_key(tmp_path, key)))
    with pytest.raises(ValueError, match="RS256"):
        make_assertion(settings)
