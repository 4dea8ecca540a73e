"""TLS and SASL for broker connections: what ``security_protocol`` asks of a new connection.

Four protocols, as Kafka names them: ``PLAINTEXT``, ``SSL`` (TLS), ``SASL_PLAINTEXT`` (SASL over
TCP) and ``SASL_SSL`` (SASL over TLS). TLS is asyncio's own (an ``ssl.SSLContext`` given to
``create_connection``); SASL runs right after the ApiVersions handshake, as two Kafka requests:

1. ``SaslHandshake`` names the mechanism; the broker answers with the ones it enables, or
   UNSUPPORTED_SASL_MECHANISM.
2. ``SaslAuthenticate`` carries the mechanism's messages (one round for PLAIN and OAUTHBEARER,
   two for SCRAM) until the mechanism is done. From v1 the last answer carries
   ``session_lifetime_ms``: the broker closes the connection when the session expires unless the
   client authenticates again on the same connection first (KIP-368), which
   the connection's ``Session`` (session.py) schedules with ``reauthentication_delay``.

Mechanisms are small classes with no I/O, so they are tested without a broker; SCRAM's messages
and the check of the server's signature come from ``scramp``. Secrets never reach a message, a
log line or a ``repr``.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, overload

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import AuthenticationError
from aiokprod.network.oauth import OAuthBearerLogin, OAuthLoginSettings, OAuthToken

if TYPE_CHECKING:
    from aiokprod.protocol import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

__all__ = [
    "MECHANISMS",
    "PLAINTEXT",
    "OAuthBearerMechanism",
    "PlainMechanism",
    "SaslMechanism",
    "ScramMechanism",
    "SecurityOptions",
    "authenticate",
    "build_ssl_context",
    "oauth_login_from_config",
    "options_from_config",
    "reauthentication_delay",
]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


#: The OAUTHBEARER callback: an async callable returning the current token.
TokenProvider = Callable[[], Awaitable[OAuthToken]]


class SaslMechanism(Protocol):
    """One client side of a SASL exchange. ``first_message`` starts it; each broker answer goes
    to ``respond``, which returns the next message or None when the client has nothing more to
    say; ``done`` tells whether the exchange is complete (and verified, for SCRAM)."""

    name: str

    async def first_message(self) -> bytes: ...

    def respond(self, challenge: bytes) -> bytes | None: ...

    @property
    def done(self) -> bool: ...


class PlainMechanism:
    """SASL/PLAIN (RFC 4616): authzid NUL user NUL password, one round."""

    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password
        self._sent = False

    async def first_message(self) -> bytes:
        self._sent = True
        return b"\x00" + self._username.encode() + b"\x00" + self._password.encode()

    def respond(self, challenge: bytes) -> bytes | None:
        return None  # the broker's empty answer ends it

    @property
    def done(self) -> bool:
        return self._sent

    def __repr__(self) -> str:
        return f"<PlainMechanism user={self._username!r}>"


class ScramMechanism:
    """SASL/SCRAM-SHA-256 and -512 (RFC 5802, 7677) through ``scramp``: client-first,
    client-final, and the server's signature checked before the exchange counts as done."""

    def __init__(self, name: str, username: str, password: str) -> None:
        if name not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ValueError(f"not a SCRAM mechanism: {name!r}")
        import scramp  # type: ignore[import-untyped]  # no stubs; the four calls below are typed here

        self.name = name
        self._username = username
        self._client = scramp.ScramClient([name], username, password)
        self._step = 0  # 0: nothing sent; 1: client-first sent; 2: client-final sent; 3: done

    async def first_message(self) -> bytes:
        self._step = 1
        first: str = self._client.get_client_first()
        return first.encode()

    def respond(self, challenge: bytes) -> bytes | None:
        from scramp import ScramException

        try:
            if self._step == 1:
                self._client.set_server_first(challenge.decode())
                self._step = 2
                final: str = self._client.get_client_final()
                return final.encode()
            if self._step == 2:
                self._client.set_server_final(challenge.decode())  # checks the signature
                self._step = 3
                return None
        except (ScramException, UnicodeDecodeError) as exc:
            raise AuthenticationError(f"{self.name}: the broker's answer failed the SCRAM "
                                      f"exchange: {_no_secret(exc)}") from None
        raise AuthenticationError(f"{self.name}: unexpected message after the exchange ended")

    @property
    def done(self) -> bool:
        return self._step == 3

    def __repr__(self) -> str:
        return f"<ScramMechanism {self.name} user={self._username!r} step={self._step}>"


class OAuthBearerMechanism:
    """SASL/OAUTHBEARER (RFC 7628, KIP-255): the GS2 header with the bearer token, one round.

    The token comes from the user's async provider on every (re-)authentication, so a token
    refreshed by the provider is what the broker sees next time.
    """

    name = "OAUTHBEARER"

    def __init__(self, provider: TokenProvider) -> None:
        self._provider = provider
        self._sent = False
        self.token_expires_at_ms: int | None = None  # the last token's expiry, for re-auth

    async def first_message(self) -> bytes:
        token = await self._provider()
        if not isinstance(token, OAuthToken) or not token.token:
            raise AuthenticationError("OAUTHBEARER: the token provider returned no token "
                                      "(expected an aiokprod.OAuthToken)")
        self.token_expires_at_ms = token.expires_at_ms
        ext = "".join(f"{k}={v}\x01" for k, v in sorted(token.extensions.items()))
        self._sent = True
        return f"n,,\x01auth=Bearer {token.token}\x01{ext}\x01".encode()

    def respond(self, challenge: bytes) -> bytes | None:
        if challenge:
            # RFC 7628: an error is a JSON challenge; answer %x01 so the broker fails the
            # exchange with its error (the challenge names the status, never our token)
            raise AuthenticationError(f"OAUTHBEARER: the broker refused the token: "
                                      f"{challenge.decode(errors='replace')[:200]}")
        return None

    @property
    def done(self) -> bool:
        return self._sent

    def __repr__(self) -> str:
        return "<OAuthBearerMechanism>"


@dataclass(frozen=True, repr=False)
class SecurityOptions:
    """Everything a connection needs to secure itself; built once from the producer config."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    sasl_oauth_token_provider: TokenProvider | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def new_mechanism(self) -> SaslMechanism:
        """A fresh mechanism for one exchange (authentication or re-authentication)."""
        name = self.sasl_mechanism or "PLAIN"
        if name == "OAUTHBEARER":
            if self.sasl_oauth_token_provider is None:
                raise AuthenticationError("OAUTHBEARER needs sasl_oauth_token_provider")
            return OAuthBearerMechanism(self.sasl_oauth_token_provider)
        if self.sasl_username is None or self.sasl_password is None:
            raise AuthenticationError(f"{name} needs sasl_username and sasl_password")
        if name == "PLAIN":
            return PlainMechanism(self.sasl_username, self.sasl_password)
        return ScramMechanism(name, self.sasl_username, self.sasl_password)

    def __repr__(self) -> str:
        user = f" user={self.sasl_username!r}" if self.sasl_username else ""
        mech = f" {self.sasl_mechanism}" if self.uses_sasl else ""
        return f"<SecurityOptions {self.protocol}{mech}{user}>"


#: No TLS, no SASL: what a connection uses unless told otherwise.
PLAINTEXT = SecurityOptions()


def options_from_config(config: Any) -> SecurityOptions:
    """The ``SecurityOptions`` a ``ProducerConfig`` asks for, TLS context built once.

    Raises ``ConfigError`` naming the setting when a CA, certificate or key file cannot be read,
    so a typo fails at ``start()`` rather than as a connection error per broker later.
    """
    from aiokprod.errors import ConfigError

    protocol = config.security_protocol
    context: ssl.SSLContext | None = None
    if protocol in ("SSL", "SASL_SSL"):
        context = config.ssl_context
        if context is None:
            if config.ssl_cafile is not None:
                try:
                    with open(config.ssl_cafile, "rb"):
                        pass
                except OSError as exc:
                    raise ConfigError(f"Invalid value {config.ssl_cafile!r} for configuration "
                                      f"ssl.ca.location (ssl_cafile): {exc.strerror}") from None
            try:
                context = build_ssl_context(
                    cafile=config.ssl_cafile, certfile=config.ssl_certfile,
                    keyfile=config.ssl_keyfile, password=config.ssl_password,
                    check_hostname=config.ssl_endpoint_identification_algorithm == "https")
            except (AuthenticationError, ssl.SSLError) as exc:
                raise ConfigError(f"TLS settings (ssl_cafile/ssl_certfile/ssl_keyfile): "
                                  f"{exc}") from None
    provider = config.sasl_oauth_token_provider
    if config.sasl_mechanism == "OAUTHBEARER" and config.sasl_oauthbearer_token_endpoint_url:
        provider = oauth_login_from_config(config)
    return SecurityOptions(
        protocol=protocol, ssl_context=context, sasl_mechanism=config.sasl_mechanism,
        sasl_username=config.sasl_username, sasl_password=config.sasl_password,
        sasl_oauth_token_provider=provider)


def oauth_login_from_config(config: Any) -> OAuthBearerLogin:
    """The built-in OAUTHBEARER login a ``ProducerConfig`` asks for (docs/security.md).

    Reads what the config names — the CA file, the assertion key — once here, so a missing
    file, a wrong passphrase or a missing ``cryptography`` fails ``start()`` with
    ``ConfigError`` naming the setting (never the passphrase), not every connection later.
    """
    from urllib.parse import urlsplit

    from aiokprod.errors import ConfigError
    from aiokprod.network.jwt import AssertionSettings, load_private_key

    def fail(name: str, why: str) -> ConfigError:
        return ConfigError(f"Invalid value for configuration {name}: {why}")

    url = config.sasl_oauthbearer_token_endpoint_url
    https = urlsplit(url).scheme == "https"
    endpoint_context: ssl.SSLContext | None = None
    if https:
        # the endpoint's own CAs replace the system store; else the brokers' CA file is
        # trusted beside it (one private CA often signs both)
        endpoint_context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        cafile, name = (config.https_cafile, "https.ca.location (https_cafile)") \
            if config.https_cafile else (config.ssl_cafile, "ssl.ca.location (ssl_cafile)")
        if config.https_cafile:
            endpoint_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if cafile:
            try:
                endpoint_context.load_verify_locations(cafile)
            except (OSError, ssl.SSLError) as exc:
                raise fail(name, f"{cafile!r}: {getattr(exc, 'strerror', None) or exc}") \
                    from None
    assertion: AssertionSettings | None = None
    if config.sasl_oauthbearer_assertion_file or \
            config.sasl_oauthbearer_assertion_private_key_file:
        assertion = AssertionSettings(
            file=config.sasl_oauthbearer_assertion_file,
            private_key_file=config.sasl_oauthbearer_assertion_private_key_file,
            private_key_passphrase=config.sasl_oauthbearer_assertion_private_key_passphrase,
            algorithm=config.sasl_oauthbearer_assertion_algorithm,
            claim_aud=config.sasl_oauthbearer_assertion_claim_aud,
            claim_iss=config.sasl_oauthbearer_assertion_claim_iss,
            claim_sub=config.sasl_oauthbearer_assertion_claim_sub,
            claim_exp_seconds=config.sasl_oauthbearer_assertion_claim_exp_seconds,
            claim_nbf_seconds=config.sasl_oauthbearer_assertion_claim_nbf_seconds,
            claim_jti_include=config.sasl_oauthbearer_assertion_claim_jti_include,
            template_file=config.sasl_oauthbearer_assertion_template_file)
        checks = [("sasl.oauthbearer.assertion.file", assertion.file),
                  ("sasl.oauthbearer.assertion.template.file", assertion.template_file)]
        for name, path in checks:
            if path is not None:
                try:
                    with open(path, "rb"):
                        pass
                except OSError as exc:
                    raise fail(name, f"{path!r}: {exc.strerror}") from None
        if assertion.file is None:
            name = "sasl.oauthbearer.assertion.private.key.file"
            try:
                load_private_key(assertion)
            except ImportError:
                raise fail(name, "signing the assertion needs the cryptography package: "
                                 "pip install 'aiokprod[oauth]'") from None
            except OSError as exc:
                raise fail(name, f"{assertion.private_key_file!r}: {exc.strerror}") from None
            except ValueError as exc:
                raise fail(name, f"{assertion.private_key_file!r}: {exc}") from None
    client_id = config.sasl_oauthbearer_client_credentials_client_id
    return OAuthBearerLogin(OAuthLoginSettings(
        token_endpoint_url=url, grant_type=config.sasl_oauthbearer_grant_type,
        client_id=client_id,
        client_secret=config.sasl_oauthbearer_client_credentials_client_secret,
        scope=config.sasl_oauthbearer_scope,
        header_urlencode=config.sasl_oauthbearer_header_urlencode,
        ssl_context=endpoint_context,
        connect_timeout_ms=config.sasl_login_connect_timeout_ms,
        read_timeout_ms=config.sasl_login_read_timeout_ms,
        retry_backoff_ms=config.sasl_login_retry_backoff_ms,
        retry_backoff_max_ms=config.sasl_login_retry_backoff_max_ms,
        refresh_window_factor=config.sasl_login_refresh_window_factor,
        refresh_window_jitter=config.sasl_login_refresh_window_jitter,
        refresh_min_period_seconds=config.sasl_login_refresh_min_period_seconds,
        refresh_buffer_seconds=config.sasl_login_refresh_buffer_seconds,
        assertion=assertion,
        client_label=f" for client id {client_id!r}" if client_id else ""))


def build_ssl_context(
    *,
    cafile: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    password: str | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client TLS context: verification on, the system trust store unless ``cafile`` is given,
    a client certificate for mutual TLS if ``certfile`` is given.

    ``check_hostname=False`` (Java's empty ``ssl.endpoint.identification.algorithm``) still
    verifies the chain but accepts a certificate issued for another host: only for development
    clusters whose certificates name no usable host.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if certfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile, password)
        except (OSError, ssl.SSLError) as exc:
            raise AuthenticationError(
                f"cannot load the client certificate {certfile!r} / key {keyfile!r}: "
                f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}") from None
    return context


def reauthentication_delay(session_lifetime_ms: int, *, rng: random.Random | None = None
                           ) -> float | None:
    """Seconds after authentication to authenticate again, or None if the session never ends.

    Like the Java client (KIP-368): at 85-95% of the session lifetime, drawn at random so the
    connections of a large fleet do not all re-authenticate at the same instant.
    """
    if session_lifetime_ms <= 0:
        return None
    fraction = (rng or random).uniform(0.85, 0.95)
    return session_lifetime_ms * fraction / 1000


class SaslRequester(Protocol):
    """How ``authenticate`` sends (``Session._request_now``: past the hold that
    re-authentication puts on every other request), typed per SASL request."""

    @overload
    def __call__(self, request: SaslHandshakeRequest, version: int, /
                 ) -> Awaitable[SaslHandshakeResponse]: ...

    @overload
    def __call__(self, request: SaslAuthenticateRequest, version: int, /
                 ) -> Awaitable[SaslAuthenticateResponse]: ...


async def authenticate(
    request: SaslRequester,
    versions: dict[int, tuple[int, int]],
    options: SecurityOptions,
    *,
    broker: str,
) -> int:
    """Run SaslHandshake + SaslAuthenticate through ``request(message, version)``.

    Returns the session lifetime in ms (0: no expiry). Raises ``AuthenticationError`` naming the
    broker, the mechanism and the cause — never the secret.
    """
    from aiokprod.protocol import SaslAuthenticateRequest, SaslHandshakeRequest

    mechanism = options.new_mechanism()
    name = mechanism.name
    hs_range = versions.get(SaslHandshakeRequest.API_KEY)
    auth_range = versions.get(SaslAuthenticateRequest.API_KEY)
    if hs_range is None or auth_range is None or hs_range[1] < 1:
        raise AuthenticationError(f"{broker}: the broker does not offer SASL authentication "
                                  f"through SaslAuthenticate (needs SaslHandshake v1+)")
    hs_version = min(SaslHandshakeRequest.MAX_VERSION, hs_range[1])
    auth_version = min(SaslAuthenticateRequest.MAX_VERSION, auth_range[1])
    handshake = await request(SaslHandshakeRequest(mechanism=name), hs_version)
    if handshake.error_code != ErrorCode.NONE:
        offered = ", ".join(handshake.mechanisms) or "none"
        raise AuthenticationError(f"{broker}: the broker does not enable SASL mechanism {name} "
                                  f"(it offers: {offered})")
    message: bytes | None = await mechanism.first_message()
    lifetime = 0
    while message is not None:
        response = await request(SaslAuthenticateRequest(auth_bytes=message), auth_version)
        if response.error_code != ErrorCode.NONE:
            detail = response.error_message or f"error code {response.error_code}"
            raise AuthenticationError(f"{broker}: SASL {name} authentication failed: "
                                      f"{_no_secret(detail)}")
        lifetime = response.session_lifetime_ms  # 0 below v1: no re-authentication
        message = mechanism.respond(response.auth_bytes or b"")
    if not mechanism.done:
        raise AuthenticationError(f"{broker}: SASL {name} ended before the exchange completed")
    return int(lifetime)


def _no_secret(detail: object) -> str:
    """Broker and library messages name the user at most; cut them short all the same."""
    return str(detail)[:300]
