"""TLS context and SASL mechanisms without a broker: the messages, the SCRAM exchange against
scramp's server side (which checks our proof, as the broker does), and the failure messages."""

from __future__ import annotations

import random
import ssl
from typing import Any

import pytest
import scramp

from aiokprod.errors import AuthenticationError
from aiokprod.network.oauth import OAuthToken
from aiokprod.network.security import (
    OAuthBearerMechanism,
    PlainMechanism,
    ScramMechanism,
    SecurityOptions,
    authenticate,
    build_ssl_context,
    reauthentication_delay,
)
from aiokprod.protocol import SaslAuthenticateRequest, SaslHandshakeRequest

SECRET = "s3cr3t-pa55"


async def test_plain_sends_authzid_user_password_in_one_round() -> None:
    mech = PlainMechanism("alice", SECRET)
    assert await mech.first_message() == b"\x00alice\x00" + SECRET.encode()
    assert mech.respond(b"") is None and mech.done
    assert SECRET not in repr(mech)


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_scram_completes_against_a_real_server_side_and_checks_its_signature(
    name: str,
) -> None:
    server_mech = scramp.ScramMechanism(name)
    salt, stored, server_key, iterations = server_mech.make_auth_info(SECRET, iteration_count=4096)

    def lookup(username: str) -> tuple[Any, ...]:
        assert username == "alice"
        return salt, stored, server_key, iterations

    server = server_mech.make_server(lookup)
    client = ScramMechanism(name, "alice", SECRET)
    server.set_client_first((await client.first_message()).decode())
    final = client.respond(server.get_server_first().encode())
    assert final is not None
    server.set_client_final(final.decode())
    assert client.respond(server.get_server_final().encode()) is None
    assert client.done
    assert SECRET not in repr(client)


async def test_scram_refuses_a_server_that_does_not_know_the_password() -> None:
    server_mech = scramp.ScramMechanism("SCRAM-SHA-256")
    info = server_mech.make_auth_info("another-password", iteration_count=4096)
    server = server_mech.make_server(lambda _user: info)
    client = ScramMechanism("SCRAM-SHA-256", "alice", SECRET)
    server.set_client_first((await client.first_message()).decode())
    final = client.respond(server.get_server_first().encode())
    assert final is not None
    with pytest.raises(scramp.ScramException):
        server.set_client_final(final.decode())  # the broker side rejects the proof
    # and a forged server-final (wrong signature) is caught on our side
    with pytest.raises(AuthenticationError, match="SCRAM") as info_exc:
        client.respond(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    assert SECRET not in str(info_exc.value)


async def test_oauthbearer_message_carries_the_providers_token_and_extensions() -> None:
    async def provider() -> OAuthToken:
        return OAuthToken("tok.en.value", expires_at_ms=2_000_000_000_000,
                          extensions={"logicalCluster": "lkc-1"})

    mech = OAuthBearerMechanism(provider)
    msg = await mech.first_message()
    assert msg == b"n,,\x01auth=Bearer tok.en.value\x01logicalCluster=lkc-1\x01\x01"
    assert mech.token_expires_at_ms == 2_000_000_000_000
    assert mech.respond(b"") is None and mech.done
    with pytest.raises(AuthenticationError, match="invalid_token"):
        OAuthBearerMechanism(provider).respond(b'{"status":"invalid_token"}')


def test_reauthentication_happens_at_85_to_95_percent_of_the_session() -> None:
    rng = random.Random(1)
    delays = [reauthentication_delay(10_000, rng=rng) for _ in range(200)]
    assert all(d is not None and 8.5 <= d <= 9.5 for d in delays)
    assert reauthentication_delay(0) is None


class _ScriptedBroker:
    """Answers SaslHandshake / SaslAuthenticate the way a broker does."""

    def __init__(self, enabled: list[str], auth_error: str | None = None) -> None:
        self.enabled = enabled
        self.auth_error = auth_error
        self.seen: list[tuple[str, int]] = []

    async def request(self, message: Any, version: int) -> Any:
        self.seen.append((type(message).__name__, version))
        if isinstance(message, SaslHandshakeRequest):
            code = 0 if message.mechanism in self.enabled else 33
            return SaslHandshakeRequest.RESPONSE_TYPE(error_code=code, mechanisms=self.enabled)
        assert isinstance(message, SaslAuthenticateRequest)
        if self.auth_error is not None:
            return SaslAuthenticateRequest.RESPONSE_TYPE(
                error_code=58, error_message=self.auth_error)
        return SaslAuthenticateRequest.RESPONSE_TYPE(session_lifetime_ms=30_000)


VERSIONS = {SaslHandshakeRequest.API_KEY: (0, 1), SaslAuthenticateRequest.API_KEY: (0, 2)}


async def test_authenticate_plain_returns_the_session_lifetime() -> None:
    broker = _ScriptedBroker(["PLAIN"])
    options = SecurityOptions("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="alice",
                              sasl_password=SECRET)
    assert await authenticate(broker.request, VERSIONS, options, broker="node 1") == 30_000
    assert broker.seen == [("SaslHandshakeRequest", 1), ("SaslAuthenticateRequest", 2)]


async def test_a_mechanism_the_broker_does_not_enable_is_named_with_what_it_offers() -> None:
    broker = _ScriptedBroker(["SCRAM-SHA-512"])
    options = SecurityOptions("SASL_SSL", sasl_mechanism="PLAIN", sasl_username="alice",
                              sasl_password=SECRET)
    with pytest.raises(AuthenticationError, match=r"node 1.*PLAIN.*offers: SCRAM-SHA-512"):
        await authenticate(broker.request, VERSIONS, options, broker="node 1")


async def test_a_refused_password_fails_with_broker_mechanism_and_cause_but_no_secret() -> None:
    broker = _ScriptedBroker(["PLAIN"], auth_error="Authentication failed: Invalid username "
                                                   "or password")
    options = SecurityOptions("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="alice",
                              sasl_password=SECRET)
    with pytest.raises(AuthenticationError, match=r"node 7.*PLAIN.*Invalid username") as info:
        await authenticate(broker.request, VERSIONS, options, broker="node 7")
    assert SECRET not in str(info.value)
    assert SECRET not in repr(options)


def test_the_ssl_context_verifies_by_default_and_can_skip_only_the_host_name() -> None:
    context = build_ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    relaxed = build_ssl_context(check_hostname=False)
    assert relaxed.verify_mode == ssl.CERT_REQUIRED and not relaxed.check_hostname
    with pytest.raises(AuthenticationError, match="client certificate"):
        build_ssl_context(certfile="/nonexistent.pem", keyfile="/nonexistent.key",
                          password=SECRET)
