"""The built-in OAUTHBEARER login: tokens from an OAuth token endpoint, refreshed before expiry.

With ``sasl_oauthbearer_token_endpoint_url`` set, the producer needs no token provider of the
user's: ``OAuthBearerLogin`` is that provider, one per producer, shared by all its broker
connections (Java's ``OAuthBearerLoginCallbackHandler`` with its ``JwtRetriever``). Three ways
to get a token, as in Java (KIP-768, KIP-1139):

* ``client_credentials`` (RFC 6749 section 4.4): the client id and secret in a Basic
  ``Authorization`` header (url-encoded first with ``sasl_oauthbearer_header_urlencode``,
  KIP-1082) or, when an assertion is configured, a signed JWT as ``client_assertion``
  (RFC 7523 section 2.2) instead of the secret;
* ``jwt_bearer`` (RFC 7523 section 2.1): the signed JWT is the grant itself;
* a ``file:`` URL: the token is read from that file (a sidecar keeps it fresh).

Refresh. A token is cached and handed to every (re-)authentication until its refresh point,
computed like Java's ``ExpiringCredentialRefreshingLogin``: ``sasl_login_refresh_window_factor``
(+ up to ``_jitter``) of the lifetime, but no sooner than ``_min_period_seconds`` after it began
and no later than ``_buffer_seconds`` before it ends — both ignored when the token is too short
for them. The broker ends a session when its token expires (or after
``connections.max.reauth.ms``) and the connection re-authenticates at 85-95 % of the session
(KIP-368), which is after the refresh point, so each renewal carries a token fetched for it. A
failed refresh while the cached token is still valid keeps that token (the broker still accepts
it) and tries again after ``sasl_login_retry_backoff_max_ms``, with a warning; once it is expired,
the failure is the caller's ``AuthenticationError``.

Retries. One fetch tries until it succeeds, fails for good (a 4xx answer, an untrusted
certificate) or ``sasl_login_retry_backoff_max_ms`` has passed since it began, waiting
``sasl_login_retry_backoff_ms`` doubled after each attempt (Java's ``Retry``). Each attempt is
bounded by ``sasl_login_connect_timeout_ms`` and ``sasl_login_read_timeout_ms``. The whole
first fetch happens inside a connection's set-up, so ``socket_connection_setup_timeout_ms``
bounds it too.

Secrets — the client secret, the key passphrase, the assertion and the token itself — never
reach a message, a log line or a ``repr``: messages name the endpoint (without query or user
info), the grant, the client id and the endpoint's own error code and description (RFC 6749
section 5.2 says an error answer carries no secret).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import quote, unquote, urlencode, urlsplit

from aiokprod.errors import AuthenticationError
from aiokprod.network.https_post import EndpointError, display_url, is_final_status, post_form
from aiokprod.network.jwt import AssertionSettings, make_assertion, read_claims

__all__ = ["GrantType", "OAuthBearerLogin", "OAuthLoginSettings", "OAuthToken", "refresh_at_ms"]

log = logging.getLogger(__name__)

GrantType = Literal["client_credentials", "jwt_bearer"]
_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


@dataclass(frozen=True)
class OAuthToken:
    """What an OAUTHBEARER token provider returns: the token and when it stops being valid.

    Defined here, where the built-in login makes it, rather than beside the SASL mechanism that
    reads it (``security.py``): that module builds the login, so this one may not import it.
    """

    token: str
    expires_at_ms: int  # wall-clock ms since the epoch, like a JWT's ``exp`` * 1000
    principal: str | None = None  # informative only
    extensions: dict[str, str] = field(default_factory=dict)  # SASL extensions (KIP-342)


@dataclass(frozen=True, repr=False)
class OAuthLoginSettings:
    """What the login needs, taken from the producer config once (``options_from_config``)."""

    token_endpoint_url: str
    grant_type: GrantType = "client_credentials"
    client_id: str | None = None
    client_secret: str | None = None  # a secret: never shown
    scope: str | None = None
    header_urlencode: bool = False
    # Trust for the endpoint's certificate (https only).
    ssl_context: ssl.SSLContext | None = None
    connect_timeout_ms: int = 10000
    read_timeout_ms: int = 10000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 10000
    refresh_window_factor: float = 0.8
    refresh_window_jitter: float = 0.05
    refresh_min_period_seconds: int = 60
    refresh_buffer_seconds: int = 300
    # The JWT assertion (jwt_bearer, or client_credentials with a client assertion).
    assertion: AssertionSettings | None = None
    # Who the client is, for messages: "client id x", never the secret.
    client_label: str = ""

    def __repr__(self) -> str:
        return (f"<OAuthLoginSettings {self.grant_type} {display_url(self.token_endpoint_url)}"
                f"{f' client_id={self.client_id!r}' if self.client_id else ''}>")


def refresh_at_ms(start_ms: int, expires_ms: int, now_ms: int, *, factor: float, jitter: float,
                  min_period_s: int, buffer_s: int, rng: random.Random | None = None) -> int:
    """When to fetch the next token (wall-clock ms), Java's ``ExpiringCredentialRefreshingLogin``
    rule: at ``factor`` + up to ``jitter`` of the lifetime, kept ``min_period_s`` after now and
    ``buffer_s`` before expiry unless the remaining lifetime is too short for both."""
    fraction = factor + jitter * (rng or random).random()
    if now_ms + 1000 * (min_period_s + buffer_s) > expires_ms:
        return now_ms + int((expires_ms - now_ms) * fraction)
    proposed = start_ms + int((expires_ms - start_ms) * fraction)
    proposed = max(proposed, now_ms + 1000 * min_period_s)
    return min(proposed, expires_ms - 1000 * buffer_s)


class OAuthBearerLogin:
    """A token provider (``sasl_oauth_token_provider``'s shape) that fetches, caches and refreshes
    tokens from the configured endpoint. Concurrent callers share one fetch."""

    def __init__(self, settings: OAuthLoginSettings, *,
                 clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self._settings = settings
        self._clock = clock  # wall clock, seconds: token expiries are wall-clock times
        self._rng = rng or random.Random()
        self._lock = asyncio.Lock()
        self._token: OAuthToken | None = None
        self._refresh_at_ms = 0
        self._where = f"OAUTHBEARER token endpoint {display_url(settings.token_endpoint_url)}"
        # Counters for statistics() and tests.
        self.fetches = 0  # tokens obtained
        self.failed_attempts = 0  # attempts that failed (retried or not)

    @property
    def settings(self) -> OAuthLoginSettings:
        return self._settings

    async def __call__(self) -> OAuthToken:
        """The current token, fetched first if there is none or its refresh point passed.

        Cancelling the caller cancels a fetch it started; the next caller starts again.
        """
        async with self._lock:
            now_ms = self._now_ms()
            token = self._token
            if token is not None and now_ms < self._refresh_at_ms:
                return token
            try:
                fresh = await self._fetch()
            except AuthenticationError as exc:
                if token is not None and now_ms < token.expires_at_ms:
                    self._refresh_at_ms = min(now_ms + self._settings.retry_backoff_max_ms,
                                              token.expires_at_ms)
                    log.warning("%s: refreshing the token failed, keeping the current one "
                                "(valid %d ms more): %s", self._where,
                                token.expires_at_ms - now_ms, exc)
                    return token
                raise
            s = self._settings
            start_ms = min(fresh.start_ms, now_ms) if fresh.start_ms else now_ms
            self._refresh_at_ms = refresh_at_ms(
                start_ms, fresh.token.expires_at_ms, self._now_ms(),
                factor=s.refresh_window_factor, jitter=s.refresh_window_jitter,
                min_period_s=s.refresh_min_period_seconds, buffer_s=s.refresh_buffer_seconds,
                rng=self._rng)
            self._token = fresh.token
            self.fetches += 1
            log.debug("%s: new token for %s, expires in %d ms, refresh in %d ms", self._where,
                      fresh.token.principal or s.client_label or "the client",
                      fresh.token.expires_at_ms - self._now_ms(),
                      self._refresh_at_ms - self._now_ms())
            return fresh.token

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def _fetch(self) -> _Fetched:
        """One token, with Java's retry rule (see the module docstring)."""
        s = self._settings
        started = time.monotonic()
        deadline = started + s.retry_backoff_max_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._attempt()
            except EndpointError as exc:
                self.failed_attempts += 1
                now = time.monotonic()
                if not exc.retriable or now >= deadline:
                    tail = "" if not exc.retriable else \
                        (f" (gave up after {attempt} attempt{'s' if attempt > 1 else ''} in "
                         f"sasl.login.retry.backoff.max.ms={s.retry_backoff_max_ms})")
                    raise AuthenticationError(f"{self._where}: {s.grant_type} login"
                                              f"{s.client_label} failed: {exc}{tail}") from None
                wait = min(s.retry_backoff_ms * 2 ** (attempt - 1) / 1000, deadline - now)
                log.debug("%s: attempt %d failed (%s); retrying in %.3f s", self._where,
                          attempt, exc, wait)
                await asyncio.sleep(wait)

    async def _attempt(self) -> _Fetched:
        s = self._settings
        url = s.token_endpoint_url
        if urlsplit(url).scheme == "file":
            return self._parse_token(_read_token_file(url), None)
        body, headers = self._request()
        assert s.ssl_context is not None
        response = await post_form(url, body, headers, ssl_context=s.ssl_context,
                                   connect_timeout_ms=s.connect_timeout_ms,
                                   read_timeout_ms=s.read_timeout_ms)
        if response.status not in (200, 201):
            raise EndpointError(f"HTTP {response.status} {_error_detail(response.body)}",
                                retriable=not is_final_status(response.status))
        try:
            answer = json.loads(response.body)
        except (ValueError, UnicodeDecodeError):
            raise EndpointError(f"HTTP {response.status} with a body that is not JSON",
                                retriable=True) from None
        if not isinstance(answer, dict):
            raise EndpointError("the answer is not a JSON object", retriable=False)
        token = answer.get("access_token") or answer.get("id_token")
        if not isinstance(token, str) or not token.strip():
            raise EndpointError("the answer carries no access_token", retriable=False)
        expires_in = answer.get("expires_in")
        return self._parse_token(token.strip(),
                                 expires_in if isinstance(expires_in, (int, float)) else None)

    def _request(self) -> tuple[bytes, dict[str, str]]:
        """The form body and headers for the configured grant."""
        s = self._settings
        headers = {"Accept": "application/json", "Cache-Control": "no-cache"}
        form: dict[str, str] = {}
        if s.grant_type == "jwt_bearer":
            form.update(grant_type=_JWT_BEARER, assertion=self._assertion())
        elif s.assertion is not None:
            form.update(client_assertion_type=_CLIENT_ASSERTION_TYPE,
                        client_assertion=self._assertion(), grant_type="client_credentials")
            if s.client_id:
                form["client_id"] = s.client_id
        else:
            client_id, secret = s.client_id or "", s.client_secret or ""
            if s.header_urlencode:
                client_id, secret = quote(client_id, safe=""), quote(secret, safe="")
            basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode("ascii")
            headers["Authorization"] = f"Basic {basic}"
            form["grant_type"] = "client_credentials"
        if s.scope and s.scope.strip():
            form["scope"] = s.scope.strip()
        return urlencode(form).encode("ascii"), headers

    def _assertion(self) -> str:
        assert self._settings.assertion is not None
        try:
            return make_assertion(self._settings.assertion, now=self._clock())
        except OSError as exc:
            raise EndpointError(f"cannot read the assertion material {exc.filename!r}: "
                                f"{exc.strerror}", retriable=False) from None
        except ImportError:
            raise EndpointError("signing the assertion needs the cryptography package "
                                "(pip install 'aiokprod[oauth]')", retriable=False) from None
        except ValueError as exc:
            raise EndpointError(f"cannot make the assertion: {exc}", retriable=False) from None

    def _parse_token(self, token: str, expires_in: float | None) -> _Fetched:
        """Expiry from the JWT's ``exp`` (Java requires it), else the answer's ``expires_in``."""
        if not token or any(c in token for c in " \x01\r\n"):
            raise EndpointError("the token is empty or holds characters a bearer token "
                                "cannot", retriable=False)
        claims = read_claims(token) or {}
        now_ms = self._now_ms()
        exp = claims.get("exp")
        if isinstance(exp, (int, float)) and not isinstance(exp, bool):
            expires_ms = int(exp * 1000)
        elif expires_in is not None and expires_in > 0:
            expires_ms = now_ms + int(expires_in * 1000)
        else:
            raise EndpointError("the token has no exp claim and the answer no expires_in: "
                                "its expiry is unknown", retriable=False)
        if expires_ms <= now_ms:
            raise EndpointError("the endpoint issued a token that has already expired (check "
                                "the clocks)", retriable=False)
        iat = claims.get("iat")
        start_ms = int(iat * 1000) if isinstance(iat, (int, float)) and \
            not isinstance(iat, bool) else 0
        sub = claims.get("sub")
        return _Fetched(OAuthToken(token, expires_ms,
                                   principal=sub if isinstance(sub, str) else None), start_ms)

    def statistics(self) -> dict[str, int]:
        """Tokens obtained and attempts failed; when the cached token is to be refreshed."""
        token = self._token
        return {"fetches": self.fetches, "failed_attempts": self.failed_attempts,
                "refresh_at_ms": self._refresh_at_ms,
                "expires_at_ms": token.expires_at_ms if token is not None else 0}

    def __repr__(self) -> str:
        return (f"<OAuthBearerLogin {self._settings.grant_type} "
                f"{display_url(self._settings.token_endpoint_url)}{self._settings.client_label}"
                f" fetches={self.fetches}>")


@dataclass(frozen=True)
class _Fetched:
    token: OAuthToken
    start_ms: int  # the token's iat in ms, 0 when it has none


def _read_token_file(url: str) -> str:
    """The token a ``file:`` URL names (Java's ``FileJwtRetriever``): a small local file, read
    at each refresh so a sidecar's rewrite is picked up."""
    try:
        return Path(unquote(urlsplit(url).path)).read_text().strip()
    except OSError as exc:
        raise EndpointError(f"cannot read the token file: {exc.strerror}",
                            retriable=True) from None


def _error_detail(body: bytes) -> str:
    """RFC 6749 section 5.2's ``error`` and ``error_description`` (no secrets by definition);
    anything else is cut short, since an unknown body might echo the request."""
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "(no OAuth error in the answer)"
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        description = answer.get("error_description")
        text = answer["error"] + (f" - {description}" if isinstance(description, str) else "")
        return f"({text[:200]})"
    return "(no OAuth error in the answer)"
