"""A small OAuth identity provider on loopback HTTPS: a token endpoint and a JWKS endpoint.

Why our own: the producer's built-in OAUTHBEARER login must be tested against a real token
endpoint, and Apache Kafka's OIDC validator (``OAuthBearerValidatorCallbackHandler``) against a
real JWKS endpoint, without a container or a network. A thread runs ``http.server`` with TLS
(the fixtures and the broker's JVM reach it from outside any event loop); the RSA key that signs
the access tokens and the TLS certificate are made at start, nothing is checked in.

Grants served, as a provider checks them:

* ``client_credentials`` with a Basic header (client id and secret), or with a
  ``client_assertion`` JWT signed by a key registered for the client (RFC 7523 section 2.2);
* ``urn:ietf:params:oauth:grant-type:jwt-bearer`` with an ``assertion`` JWT signed by a
  registered key (RFC 7523 section 2.1); the token's subject is the assertion's ``sub``.

Assertions must name the token endpoint as ``aud`` and be unexpired. Every answer is counted in
``issued``/``refused`` so tests can tell how many tokens the producer asked for.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from support.kafka_security import issue_certificate, make_ca

__all__ = ["AUDIENCE", "IdentityProvider", "IssuedToken"]

AUDIENCE = "kafka"
_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_CLIENT_ASSERTION = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class IssuedToken:
    subject: str
    grant: str
    issued_at: float
    expires_at: int


@dataclass
class IdentityProvider:
    directory: Path
    # client id -> secret (client_credentials with a Basic header)
    clients: dict[str, str] = field(default_factory=dict)
    # assertion issuer -> public key (RSA or EC) that must have signed its assertions
    assertion_keys: dict[str, Any] = field(default_factory=dict)
    # lifetime of the access tokens handed out now (tests shorten it)
    token_lifetime_s: int = 60
    issued: list[IssuedToken] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ca = make_ca(self.directory, "test identity provider CA", filename="idp-ca.pem")
        chain, key = issue_certificate(self.ca, self.directory, "idp")
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.load_cert_chain(chain, key)
        self._signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- addresses --------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def issuer(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    @property
    def ca_path(self) -> Path:
        return self.ca.cert_path

    def tokens_for(self, subject: str) -> list[IssuedToken]:
        with self._lock:
            return [t for t in self.issued if t.subject == subject]

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> IdentityProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: pytest shows failures, not every request

            def do_GET(self) -> None:
                if self.path != "/jwks":
                    self._answer(404, {"error": "not_found"})
                    return
                self._answer(200, provider._jwks())

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if self.path != "/token":
                    self._answer(404, {"error": "not_found"})
                    return
                status, body = provider._token(form, self.headers.get("Authorization"))
                self._answer(status, body)

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.socket = self._tls.wrap_socket(server.socket, server_side=True)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="test-idp", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    # -- the endpoints ----------------------------------------------------------------------

    def _jwks(self) -> dict[str, Any]:
        numbers = self._signing_key.public_key().public_numbers()

        def uint(value: int) -> str:
            return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))

        return {"keys": [{"kty": "RSA", "kid": "idp-key-1", "use": "sig", "alg": "RS256",
                          "n": uint(numbers.n), "e": uint(numbers.e)}]}

    def _token(self, form: dict[str, str], authorization: str | None
               ) -> tuple[int, dict[str, Any]]:
        grant = form.get("grant_type", "")
        if grant == "client_credentials" and form.get("client_assertion_type") == \
                _CLIENT_ASSERTION:
            subject = self._verified_assertion(form.get("client_assertion", ""))
        elif grant == "client_credentials":
            subject = self._basic_client(authorization)
        elif grant == _JWT_BEARER:
            subject = self._verified_assertion(form.get("assertion", ""))
        else:
            return 400, {"error": "unsupported_grant_type"}
        if subject is None:
            with self._lock:
                self.refused.append(grant)
            return 401, {"error": "invalid_client",
                         "error_description": "client authentication failed"}
        now = int(time.time())
        lifetime = self.token_lifetime_s
        claims: dict[str, Any] = {"iss": self.issuer, "aud": AUDIENCE, "sub": subject,
                                  "iat": now, "exp": now + lifetime}
        if form.get("scope"):
            claims["scope"] = form["scope"]  # Kafka refuses an empty scope claim
        header = {"alg": "RS256", "typ": "JWT", "kid": "idp-key-1"}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self._signing_key.sign(signing_input.encode(), padding.PKCS1v15(),
                                           hashes.SHA256())
        with self._lock:
            self.issued.append(IssuedToken(subject, grant, time.time(), now + lifetime))
        return 200, {"access_token": f"{signing_input}.{_b64(signature)}",
                     "token_type": "Bearer", "expires_in": lifetime}

    def _basic_client(self, authorization: str | None) -> str | None:
        if not authorization or not authorization.startswith("Basic "):
            return None
        decoded = base64.b64decode(authorization[6:]).decode()
        client_id, _, secret = decoded.partition(":")
        client_id, secret = unquote(client_id), unquote(secret)
        return client_id if self.clients.get(client_id) == secret else None

    def _verified_assertion(self, assertion: str) -> str | None:
        try:
            head, body, signature = assertion.split(".")
            header = json.loads(_unb64(head))
            claims = json.loads(_unb64(body))
        except ValueError:
            return None
        key = self.assertion_keys.get(claims.get("iss", ""))
        if key is None or claims.get("aud") != self.token_url:
            return None
        now = time.time()
        if not claims.get("exp", 0) > now or claims.get("nbf", 0) > now + 5:
            return None
        data, raw = f"{head}.{body}".encode(), _unb64(signature)
        try:
            if header.get("alg") == "RS256" and isinstance(key, rsa.RSAPublicKey):
                key.verify(raw, data, padding.PKCS1v15(), hashes.SHA256())
            elif header.get("alg") == "ES256" and isinstance(key, ec.EllipticCurvePublicKey):
                der = encode_dss_signature(int.from_bytes(raw[:32], "big"),
                                           int.from_bytes(raw[32:], "big"))
                key.verify(der, data, ec.ECDSA(hashes.SHA256()))
            else:
                return None
        except InvalidSignature:
            return None
        subject = claims.get("sub")
        return subject if isinstance(subject, str) else None
