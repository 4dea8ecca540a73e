"""JSON Web Tokens as the built-in OAuth login needs them: read a token's claims, make a signed
assertion (KIP-1139).

Reading. An access token from the endpoint is only *read* here, never verified: the broker
verifies it against the identity provider's keys. The client needs its ``exp`` (when to refresh),
``iat`` (when its lifetime began) and ``sub`` (the principal, for log lines).

Signing. The jwt-bearer grant (RFC 7523 section 2.1) and client-assertion authentication (RFC
7523 section 2.2) send a JWT the client signs with its own private key: RS256 (RSA PKCS#1 v1.5)
or ES256 (ECDSA P-256), as Java's ``DefaultAssertionCreator`` does. Signing needs the
``cryptography`` package, an optional extra (``pip install aiokprod[oauth]``) so the base
install stays light; it is imported only when an assertion is signed. The key file is read again
for every assertion, so a key rotated on disk is picked up without a restart (Java re-reads it
when the file changes).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["AssertionSettings", "b64url", "load_private_key", "make_assertion", "read_claims"]

AssertionAlgorithm = Literal["RS256", "ES256"]


def b64url(data: bytes) -> str:
    """Base64url without padding, as JWS segments are written."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def read_claims(token: str) -> dict[str, Any] | None:
    """The payload of a compact JWS, or None if ``token`` is not one (an opaque token)."""
    segments = token.split(".")
    if len(segments) != 3:
        return None
    try:
        claims = json.loads(_b64url_decode(segments[1]))
    except (ValueError, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


@dataclass(frozen=True, repr=False)
class AssertionSettings:
    """How to make the JWT assertion: a ready-made file, or claims signed with a key file.

    Mirrors Java's ``sasl.oauthbearer.assertion.*`` settings; with ``file`` set, the others
    are ignored, as in Java.
    """

    # A file holding a pre-signed assertion, read again for every request (rotation on disk).
    file: str | None = None
    # PEM private key (PKCS#8 or traditional) that signs the assertion.
    private_key_file: str | None = None
    # Passphrase of an encrypted private key (a secret: never shown).
    private_key_passphrase: str | None = None
    algorithm: AssertionAlgorithm = "RS256"
    claim_aud: str | None = None
    claim_iss: str | None = None
    claim_sub: str | None = None
    # exp = now + this; nbf = now - claim_nbf_seconds.
    claim_exp_seconds: int = 300
    claim_nbf_seconds: int = 60
    # A fresh random jti per assertion (some providers refuse a replayed one).
    claim_jti_include: bool = False
    # JSON file {"header": {...}, "payload": {...}}: static values the configured claims and
    # the time claims are layered over.
    template_file: str | None = None

    def __repr__(self) -> str:
        source = f"file={self.file!r}" if self.file else \
            f"key={self.private_key_file!r} alg={self.algorithm}"
        return f"<AssertionSettings {source}>"


def load_private_key(settings: AssertionSettings) -> Any:
    """The signing key from ``private_key_file``; raises ``ValueError`` saying what is wrong
    with the file (never the passphrase), ``ImportError`` without ``cryptography``."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    assert settings.private_key_file is not None
    data = Path(settings.private_key_file).read_bytes()
    passphrase = settings.private_key_passphrase
    try:
        key = load_pem_private_key(data, passphrase.encode() if passphrase else None)
    except (ValueError, TypeError) as exc:
        # cryptography's messages name the problem (bad decrypt, not PEM), never the passphrase
        raise ValueError(f"cannot load the private key: {exc}") from None
    wanted = rsa.RSAPrivateKey if settings.algorithm == "RS256" else ec.EllipticCurvePrivateKey
    if not isinstance(key, wanted):
        raise ValueError(f"the key does not fit algorithm {settings.algorithm} "
                         f"(an {'RSA' if settings.algorithm == 'RS256' else 'EC P-256'} key "
                         f"is needed)")
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name != "secp256r1":
        raise ValueError("ES256 needs a key on the P-256 curve")
    return key


def make_assertion(settings: AssertionSettings, *, now: float | None = None) -> str:
    """A compact JWS for the token request: the ``file``'s content, or a freshly signed one.

    Raises ``OSError`` when a file cannot be read, ``ValueError`` for a bad key or template,
    ``ImportError`` without ``cryptography``.
    """
    if settings.file is not None:
        assertion = Path(settings.file).read_text().strip()
        if assertion.count(".") != 2:
            raise ValueError("the assertion file does not hold a compact JWS (three "
                             "dot-separated parts)")
        return assertion
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    key = load_private_key(settings)
    header: dict[str, Any] = {}
    payload: dict[str, Any] = {}
    if settings.template_file is not None:
        template = json.loads(Path(settings.template_file).read_text())
        if not isinstance(template, dict):
            raise ValueError("the assertion template must be a JSON object")
        header.update(template.get("header") or {})
        payload.update(template.get("payload") or {})
    header.update(alg=settings.algorithm, typ="JWT")
    for name, value in (("aud", settings.claim_aud), ("iss", settings.claim_iss),
                        ("sub", settings.claim_sub)):
        if value is not None:
            payload[name] = value
    issued = int(time.time() if now is None else now)
    payload.update(iat=issued, exp=issued + settings.claim_exp_seconds,
                   nbf=issued - settings.claim_nbf_seconds)
    if settings.claim_jti_include:
        payload["jti"] = str(uuid.uuid4())
    signing_input = (b64url(json.dumps(header, separators=(",", ":")).encode()) + "." +
                     b64url(json.dumps(payload, separators=(",", ":")).encode())).encode()
    if settings.algorithm == "RS256":
        signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    else:
        # JWS wants r || s, 32 bytes each, not the DER sequence cryptography returns
        r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return signing_input.decode() + "." + b64url(signature)
