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

__all__ = ["SCRAM_MECHANISMS", "CertificateAuthority", "SaslUser", "TlsMaterial",
           "issue_certificate", "make_ca", "make_tls_material"]

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


@dataclass(frozen=True)
class CertificateAuthority:
    """A throw-away CA: its key stays in memory, its certificate is written as PEM."""

    name: x509.Name
    key: rsa.RSAPrivateKey
    certificate: x509.Certificate
    cert_path: Path

    @property
    def pem(self) -> str:
        return self.cert_path.read_text()


def make_ca(directory: Path, common_name: str = "aiokprod test CA", *, filename: str = "ca.pem",
            days: int = 7) -> CertificateAuthority:
    """A fresh self-signed CA, its certificate written to ``directory/filename``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate a little clock skew
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / filename
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return CertificateAuthority(name, key, cert, path)


def issue_certificate(ca: CertificateAuthority, directory: Path, stem: str, *,
                      hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
                      client: bool = False, days: int = 7) -> tuple[Path, Path]:
    """A leaf certificate signed by ``ca`` for ``hosts`` (DNS names or IP addresses); a
    client certificate (mutual TLS) with ``client=True``. Returns (chain PEM, key PEM): the
    chain is the leaf then the CA, the key unencrypted PKCS#8."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client \
        else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0] if hosts else stem))
        .issuer_name(ca.name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                       critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    pem = serialization.Encoding.PEM
    chain, key_path = directory / f"{stem}-chain.pem", directory / f"{stem}-key.pem"
    chain.write_bytes(cert.public_bytes(pem) + ca.certificate.public_bytes(pem))
    key_path.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return chain, key_path


def make_tls_material(directory: Path, *, days: int = 7) -> TlsMaterial:
    """A fresh CA and a server certificate for 127.0.0.1 and localhost, written to ``directory``.

    RSA 2048 because every TLS stack under test (Java's, OpenSSL through librdkafka and
    Python's ``ssl``) accepts it without extra configuration.
    """
    ca = make_ca(directory, days=days)
    chain, key = issue_certificate(ca, directory, "server", days=days)
    return TlsMaterial(ca_cert=ca.cert_path, server_chain=chain, server_key=key)
