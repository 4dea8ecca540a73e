"""TLS material and SASL credentials for the Apache Kafka test broker's security listeners.

Why generate instead of committing a keystore: a certificate in the repository expires, and a
private key in the repository is a bad habit even for tests. The ``cryptography`` package makes
a throw-away CA and a server certificate for ``127.0.0.1``/``localhost`` in a few milliseconds;
Kafka reads PEM directly (``ssl.keystore.type=PEM``), so no ``keytool`` or JKS is involved.

The key goes inline (``ssl.keystore.key``) rather than as a ``ssl.keystore.location`` file on
purpose: for a PEM *file* Kafka insists on an encrypted key plus ``ssl.key.password``, while an
inline key may be unencrypted, which keeps the material readable by every client under test.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

__all__ = ["SCRAM_MECHANISMS", "SaslUser", "TlsMaterial", "make_tls_material"]

#: The SCRAM mechanisms the secure broker serves; users get credentials for each at format time.
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class SaslUser:
    """A user the secure broker knows, for PLAIN (JAAS ``user_<name>``) and SCRAM (format time)."""

    name: str
    password: str


@dataclass(frozen=True)
class TlsMaterial:
    """Where the PEM files are, and the PEM text Kafka's config gets inline."""

    # The CA certificate clients trust (``ssl.ca.location`` / ``ssl.cafile``).
    ca_cert: Path
    # The server certificate (leaf first, then the CA), and its unencrypted PKCS#8 key.
    server_chain: Path
    server_key: Path

    @property
    def server_chain_pem(self) -> str:
        return self.server_chain.read_text()

    @property
    def server_key_pem(self) -> str:
        return self.server_key.read_text()


def _name(common_name: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aiokprod tests"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])


def make_tls_material(directory: Path, *, days: int = 7) -> TlsMaterial:
    """A fresh CA and a server certificate for 127.0.0.1 and localhost, written to ``directory``.

    RSA 2048 because every TLS stack under test (Java's, OpenSSL through librdkafka and
    Python's ``ssl``) accepts it without extra configuration.
    """
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start = now - datetime.timedelta(minutes=5)  # tolerate a little clock skew
    end = now + datetime.timedelta(days=days)

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = _name("aiokprod test CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    server_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
            ]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    pem = serialization.Encoding.PEM
    material = TlsMaterial(
        ca_cert=directory / "ca.pem",
        server_chain=directory / "server-chain.pem",
        server_key=directory / "server-key.pem",
    )
    material.ca_cert.write_bytes(ca_cert.public_bytes(pem))
    material.server_chain.write_bytes(server_cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    material.server_key.write_bytes(server_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    material.server_key.chmod(0o600)
    return material
