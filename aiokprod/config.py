"""Producer configuration: one validated frozen object, Java's names and defaults.

Fields are Java's producer configs with dots turned into underscores (``linger.ms`` ->
``linger_ms``; ``partitioner.class`` -> ``partitioner``, ``interceptor.classes`` ->
``interceptors``), with Java's (Kafka 4.x) defaults and ranges, so what people know about tuning
a Java producer carries over. :meth:`ProducerConfig.from_mapping` reads Java property maps.

The constructor is hand-written rather than generated because inputs and stored values differ:
``acks="all"`` is stored as ``-1``, a comma-separated ``bootstrap_servers`` as a tuple, and two
keys must know whether the user set them at all, as Java's ``originals().containsKey`` does:

* ``enable_idempotence``: Java's default is on, but when it was *not* set and ``acks`` or
  ``retries`` conflict with it, Java silently turns it off; set explicitly, the conflict is an
  error. ``idempotence_disabled_reason`` says why it was turned off, for the producer to log.
* ``delivery_timeout_ms``: must be >= ``linger_ms + request_timeout_ms``; set explicitly too
  small it is an error, left at its default it is raised to that sum.

Stored values are always resolved (``enable_idempotence`` is a bool, ``delivery_timeout_ms`` an
int). ``dataclasses.replace`` passes every field back in, so in a replaced config every field
counts as set explicitly: ``replace(ProducerConfig(...), acks=0)`` raises, asking for
``enable_idempotence=False`` too, rather than silently dropping idempotence.
"""

from __future__ import annotations

import difflib
import inspect
import itertools
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from aiokprod.errors import ConfigError
from aiokprod.hooks import Partitioner, ProducerInterceptor, Serializer
from aiokprod.settings import (
    Acks,
    CompressionCodec,
    DnsLookup,
    EndpointIdentification,
    MetadataRecoveryStrategy,
    OAuthAssertionAlgorithm,
    OAuthGrantType,
    RecordingLevel,
    SaslMechanism,
    SecurityProtocol,
)

__all__ = ["COMPRESSION_TYPES", "SASL_MECHANISMS", "ProducerConfig", "java_name"]

# The closed sets come from the Literal types a type checker sees (aiokprod.settings), so the
# run-time check and the static one accept the same values.
COMPRESSION_TYPES: tuple[str, ...] = get_args(CompressionCodec)
_SECURITY_PROTOCOLS: tuple[str, ...] = get_args(SecurityProtocol)
SASL_MECHANISMS: tuple[str, ...] = get_args(SaslMechanism)
# Settings whose values are secrets: never in repr(), logs or to_java_names().
_SECRETS = ("sasl_password", "ssl_password", "sasl_oauthbearer_client_credentials_client_secret",
            "sasl_oauthbearer_assertion_private_key_passphrase")
# Other clients' names for our settings (confluent-kafka / librdkafka), read by from_mapping.
_ALIASES = {"sasl.mechanisms": "sasl_mechanism"}
_RECORDING_LEVELS: tuple[str, ...] = get_args(RecordingLevel)
_DNS_LOOKUPS: tuple[str, ...] = get_args(DnsLookup)
_GRANT_TYPES: tuple[str, ...] = get_args(OAuthGrantType)
_ASSERTION_ALGORITHMS: tuple[str, ...] = get_args(OAuthAssertionAlgorithm)
# Java's sasl.oauthbearer.jwt.retriever.class values, read by from_mapping as grant types.
_JWT_RETRIEVERS = {
    "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever": "client_credentials",
    "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever":
        "client_credentials",
    "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever": "jwt_bearer",
}
# The built-in OAuth login's settings that say *who* logs in where: any of them set means the
# login is wanted (the tuning ones below have defaults and cannot tell).
_OAUTH_LOGIN = ("sasl_oauthbearer_token_endpoint_url",
                "sasl_oauthbearer_client_credentials_client_id",
                "sasl_oauthbearer_client_credentials_client_secret", "sasl_oauthbearer_scope",
                "sasl_oauthbearer_assertion_file", "sasl_oauthbearer_assertion_private_key_file",
                "sasl_oauthbearer_assertion_private_key_passphrase",
                "sasl_oauthbearer_assertion_template_file", "sasl_oauthbearer_assertion_claim_aud",
                "sasl_oauthbearer_assertion_claim_iss", "sasl_oauthbearer_assertion_claim_sub",
                "https_cafile")
# Float settings with Java's ranges.
_FLOAT_RANGES: dict[str, tuple[float, float]] = {
    "sasl_login_refresh_window_factor": (0.5, 1.0),
    "sasl_login_refresh_window_jitter": (0.0, 0.25),
}
_RECOVERY_STRATEGIES: tuple[str, ...] = get_args(MetadataRecoveryStrategy)
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
# Java's ZSTD level bounds (Zstd.minCompressionLevel() is -(1 << 17)).
_ZSTD_MIN, _ZSTD_MAX = -131072, 22
_client_ids = itertools.count(1)

# Python names whose Java name is not just "dots for underscores".
_JAVA_OVERRIDES = {
    "partitioner": "partitioner.class",
    "interceptors": "interceptor.classes",
    # PEM files: Java reads keystores; these are the names confluent-kafka / librdkafka use
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    # librdkafka's name for the CAs that verify HTTPS endpoints such as the token endpoint
    "https_cafile": "https.ca.location",
    # Java picks the grant by retriever class; the short names are accepted too
    "sasl_oauthbearer_grant_type": "sasl.oauthbearer.jwt.retriever.class",
}

# Integer keys whose only rule is a range: name -> (lowest, highest), Java's validators.
_INT_RANGES: dict[str, tuple[int, int]] = {
    "linger_ms": (0, _LONG_MAX),
    "batch_size": (0, _INT_MAX),
    "buffer_memory": (0, _LONG_MAX),
    "max_block_ms": (0, _LONG_MAX),
    "request_timeout_ms": (0, _INT_MAX),
    "retries": (0, _INT_MAX),
    "retry_backoff_ms": (0, _LONG_MAX),
    "retry_backoff_max_ms": (0, _LONG_MAX),
    "reconnect_backoff_ms": (0, _LONG_MAX),
    "reconnect_backoff_max_ms": (0, _LONG_MAX),
    "max_in_flight_requests_per_connection": (1, _INT_MAX),
    "max_request_size": (0, _INT_MAX),
    "metadata_max_age_ms": (0, _LONG_MAX),
    "metadata_max_idle_ms": (5000, _LONG_MAX),
    "compression_lz4_level": (1, 17),
    "compression_zstd_level": (_ZSTD_MIN, _ZSTD_MAX),
    "partitioner_availability_timeout_ms": (0, _LONG_MAX),
    "transaction_timeout_ms": (0, _INT_MAX),
    "connections_max_idle_ms": (-1, _LONG_MAX),
    "send_buffer_bytes": (-1, _INT_MAX),
    "receive_buffer_bytes": (-1, _INT_MAX),
    "socket_connection_setup_timeout_ms": (0, _LONG_MAX),
    "socket_connection_setup_timeout_max_ms": (0, _LONG_MAX),
    # Java allows a 0 ms window; a rate over a 0 ms window is undefined, so 1 ms is the floor.
    "metrics_sample_window_ms": (1, _LONG_MAX),
    "metrics_num_samples": (1, _INT_MAX),
    # Java leaves the two endpoint timeouts unset (unbounded); here they have bounds.
    "sasl_login_connect_timeout_ms": (1, _INT_MAX),
    "sasl_login_read_timeout_ms": (1, _INT_MAX),
    "sasl_login_retry_backoff_ms": (0, _LONG_MAX),
    "sasl_login_retry_backoff_max_ms": (0, _LONG_MAX),
    "sasl_login_refresh_min_period_seconds": (0, 900),
    "sasl_login_refresh_buffer_seconds": (0, 3600),
    "sasl_oauthbearer_assertion_claim_exp_seconds": (1, 86400),
    "sasl_oauthbearer_assertion_claim_nbf_seconds": (0, 3600),
    "metadata_recovery_rebootstrap_trigger_ms": (0, _LONG_MAX),
}
_BOOLS = ("partitioner_ignore_keys", "partitioner_adaptive_partitioning_enable",
          "sasl_oauthbearer_header_urlencode", "sasl_oauthbearer_assertion_claim_jti_include",
          "enable_metrics_push")
_CALLABLES = ("partitioner", "key_serializer", "value_serializer")


def java_name(python_name: str) -> str:
    """The Java config key for a field name (``linger_ms`` -> ``linger.ms``)."""
    return _JAVA_OVERRIDES.get(python_name, python_name.replace("_", "."))


def _fail(name: str, value: object, allowed: str) -> ConfigError:
    return ConfigError(
        f"Invalid value {value!r} for configuration {java_name(name)} ({name}): {allowed}"
    )


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, value, f"expected an integer in [{low}, {high}]")
    if not low <= value <= high:
        raise _fail(name, value, f"must be in [{low}, {high}]")
    return value


def _check_float(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, value, f"expected a number in [{low}, {high}]")
    if not low <= value <= high:
        raise _fail(name, value, f"must be in [{low}, {high}]")
    return float(value)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _fail(name, value, "expected True or False")
    return value


def _parse_acks(value: object) -> int:
    text = str(value).strip().lower() if not isinstance(value, bool) else ""
    mapping = {"all": -1, "-1": -1, "0": 0, "1": 1}
    if text not in mapping:
        raise _fail("acks", value, 'must be one of "all", "-1", "0", "1" (or the ints -1, 0, 1)')
    return mapping[text]


def _parse_address(entry: str, given: object) -> str:
    if entry.startswith("["):
        host, sep, port = entry[1:].partition("]:")
    else:
        host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise _fail("bootstrap_servers", given, f'entry {entry!r} is not "host:port"')
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_bootstrap_servers(value: object) -> tuple[str, ...]:
    """``bootstrap.servers`` as a string or a list → normalised ``"host:port"`` entries."""
    if isinstance(value, str):
        entries: list[object] = list(value.split(","))
    elif isinstance(value, Sequence):
        entries = list(value)
    else:
        raise _fail("bootstrap_servers", value, 'expected "host:port[,host:port...]" or a list')
    servers: list[str] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise _fail("bootstrap_servers", value, f"entry {entry!r} is not a string")
        if entry.strip():
            servers.append(_parse_address(entry.strip(), value))
    if not servers:
        raise _fail("bootstrap_servers", value, "at least one host:port is required")
    return tuple(servers)


def _parse_choice(name: str, value: object, choices: Sequence[str], upper: bool) -> str:
    if isinstance(value, str):
        text = value.strip().upper() if upper else value.strip().lower()
        if text in choices:
            return text
    raise _fail(name, value, f"must be one of {', '.join(choices)}")


def _no_oauth_login(given: Mapping[str, Any], why: str) -> None:
    """The built-in login's settings are an error when it is not used: a secret configured
    for nothing is a mistake worth reporting."""
    for name in _OAUTH_LOGIN:
        if given[name] is not None:
            raise _fail(name, "***" if name in _SECRETS else given[name],
                        f"belongs to the built-in OAUTHBEARER login "
                        f"(sasl_oauthbearer_token_endpoint_url), but {why}")


def _check_oauth_login(given: Mapping[str, Any]) -> None:
    """The built-in login (KIP-768, KIP-1139): a usable URL and what its grant needs.

    Files are not opened here (a config is data); ``options_from_config`` reads them at
    ``start()`` and names the setting when one cannot be read.
    """
    from urllib.parse import urlsplit

    url = given["sasl_oauthbearer_token_endpoint_url"]
    parts = urlsplit(url)
    if parts.scheme not in ("https", "file"):
        raise _fail("sasl_oauthbearer_token_endpoint_url", url,
                    "expected an https:// URL (the client secret or assertion must not travel "
                    "unencrypted) or a file: URL")
    if parts.scheme == "https" and (not parts.hostname or parts.username or parts.password):
        shown = f"https://{parts.hostname or ''}{parts.path}"
        raise _fail("sasl_oauthbearer_token_endpoint_url", shown,
                    "expected https://host[:port]/path, without user info in the URL")
    grant = given["sasl_oauthbearer_grant_type"]
    secret = given["sasl_oauthbearer_client_credentials_client_secret"]
    assertion = given["sasl_oauthbearer_assertion_file"] or \
        given["sasl_oauthbearer_assertion_private_key_file"]
    if parts.scheme == "file":
        for name in _OAUTH_LOGIN[1:-1]:
            if given[name] is not None:
                raise _fail(name, "***" if name in _SECRETS else given[name],
                            "not used when sasl_oauthbearer_token_endpoint_url is a file: URL")
        return
    if grant == "jwt_bearer":
        if not assertion:
            raise _fail("sasl_oauthbearer_assertion_private_key_file", None,
                        "the jwt_bearer grant needs sasl_oauthbearer_assertion_private_key_file "
                        "or sasl_oauthbearer_assertion_file")
        if secret is not None:
            raise _fail("sasl_oauthbearer_client_credentials_client_secret", "***",
                        "not used by the jwt_bearer grant")
        return
    if given["sasl_oauthbearer_client_credentials_client_id"] is None:
        raise _fail("sasl_oauthbearer_client_credentials_client_id", None,
                    "the client_credentials grant needs a client id")
    if secret is None and not assertion:
        raise _fail("sasl_oauthbearer_client_credentials_client_secret", None,
                    "the client_credentials grant needs the client secret, or an assertion "
                    "(sasl_oauthbearer_assertion_private_key_file or _assertion_file)")
    if secret is not None and assertion:
        raise _fail("sasl_oauthbearer_client_credentials_client_secret", "***",
                    "give either the client secret or an assertion, not both")


@dataclass(frozen=True, init=False)
class ProducerConfig:
    """The producer's whole configuration; see the module docstring for the rules."""

    # Brokers to ask for metadata first; only a bootstrap, the cluster tells us the rest.
    bootstrap_servers: tuple[str, ...]
    # Names this client in broker logs and quotas; "" becomes aiokprod-producer-N like Java.
    client_id: str
    # Replicas that must have a record before it counts as written: -1 (all), 0 or 1.
    acks: Literal[-1, 0, 1]
    # Exactly-once per partition via producer id + sequences. Left unset (None) it is on, or off
    # when acks or retries conflict with it (Java's rule); set to True, a conflict is an error.
    enable_idempotence: bool
    # How long a partition's batch may wait for more records before it is sendable.
    linger_ms: int
    # Target batch size in bytes: the pool's poolable buffer size and the sticky switch point.
    batch_size: int
    # Bound on all memory held by unsent batches; send() waits when it is used up.
    buffer_memory: int
    # Bound on how long send() may wait for metadata or memory.
    max_block_ms: int
    # Bound on the wait for one request's response.
    request_timeout_ms: int
    # Bound from send() to success or failure, retries included. Unset (None): 120000, or
    # linger_ms + request_timeout_ms when that is more; set, it must be at least that sum.
    delivery_timeout_ms: int
    # Bound on retries of a failed batch (delivery_timeout_ms usually bounds first).
    retries: int
    # First wait before retrying a failed request.
    retry_backoff_ms: int
    # Cap on the exponentially growing retry wait.
    retry_backoff_max_ms: int
    # First wait before reconnecting to a broker.
    reconnect_backoff_ms: int
    # Cap on the exponentially growing reconnect wait.
    reconnect_backoff_max_ms: int
    # Bound on unanswered requests per connection. Not capped at 5 with idempotence: KIP-1269
    # moves the dedup-window limit to a separate per-partition in-flight check.
    max_in_flight_requests_per_connection: int
    # Bound on one produce request's size, and so on the largest record.
    max_request_size: int
    # Metadata is refreshed at least this often even without errors.
    metadata_max_age_ms: int
    # Metadata of a topic not produced to for this long is dropped.
    metadata_max_idle_ms: int
    # Codec for batches: none, gzip, snappy, lz4, zstd.
    compression_type: CompressionCodec
    # gzip level: 1..9, or -1 for the codec default (KIP-390).
    compression_gzip_level: int
    # lz4 level 1..17 (KIP-390).
    compression_lz4_level: int
    # zstd level -131072..22 (KIP-390).
    compression_zstd_level: int
    # User partitioner (topic, key, all_partitions, available_partitions) -> partition, or None.
    partitioner: Partitioner | None
    # Treat keyed records like unkeyed ones (sticky) instead of hashing the key.
    partitioner_ignore_keys: bool
    # Weight the sticky choice away from partitions with long queues (KIP-794).
    partitioner_adaptive_partitioning_enable: bool
    # Leave out partitions whose leader could not take data for this long; 0 disables.
    partitioner_availability_timeout_ms: int
    # Turns keys into bytes; None means keys must already be bytes.
    key_serializer: Serializer | None
    # Turns values into bytes; None means values must already be bytes.
    value_serializer: Serializer | None
    # Objects seeing each record before send and each acknowledgement after.
    interceptors: tuple[ProducerInterceptor, ...]
    # Identity surviving restarts, for transactions and zombie fencing; needs idempotence.
    transactional_id: str | None
    # Bound the coordinator puts on an open transaction.
    transaction_timeout_ms: int
    # Idle connections are closed after this long; -1 never.
    connections_max_idle_ms: int
    # SO_SNDBUF for broker sockets; -1 keeps the OS default.
    send_buffer_bytes: int
    # SO_RCVBUF for broker sockets; -1 keeps the OS default.
    receive_buffer_bytes: int
    # PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (docs/security.md).
    security_protocol: SecurityProtocol
    # A TLS context the caller built; excludes the ssl_*file options.
    ssl_context: ssl.SSLContext | None
    # PEM file of CAs to trust; None uses the system trust store.
    ssl_cafile: str | None
    # PEM client certificate (mutual TLS), with its key in ssl_keyfile (or in the same file).
    ssl_certfile: str | None
    # PEM private key of the client certificate.
    ssl_keyfile: str | None
    # Password of an encrypted ssl_keyfile (a secret: never shown).
    ssl_password: str | None
    # "https": the broker's certificate must name the host dialled; "" skips only that check.
    ssl_endpoint_identification_algorithm: EndpointIdentification
    # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER; required with a SASL protocol.
    sasl_mechanism: SaslMechanism | None
    # User for PLAIN and SCRAM.
    sasl_username: str | None
    # Password for PLAIN and SCRAM (a secret: never shown).
    sasl_password: str | None
    # OAUTHBEARER: async callable returning an OAuthToken (token and expiry). Excludes the
    # built-in login (sasl_oauthbearer_token_endpoint_url).
    sasl_oauth_token_provider: Callable[..., Any] | None
    # OAUTHBEARER without a provider of your own: the identity provider's token endpoint
    # (https://), or a file: URL of a file holding the token (KIP-768).
    sasl_oauthbearer_token_endpoint_url: str | None
    # client_credentials (client id + secret or assertion) or jwt_bearer (a signed JWT is the
    # grant, KIP-1139); dotted name sasl.oauthbearer.jwt.retriever.class takes Java's classes.
    sasl_oauthbearer_grant_type: OAuthGrantType
    # The client id the identity provider knows (client_credentials).
    sasl_oauthbearer_client_credentials_client_id: str | None
    # The client secret (client_credentials; a secret: never shown).
    sasl_oauthbearer_client_credentials_client_secret: str | None
    # Scope requested with the token, as the identity provider names it.
    sasl_oauthbearer_scope: str | None
    # URL-encode client id and secret before the Basic header (RFC 6749 2.3.1, KIP-1082).
    sasl_oauthbearer_header_urlencode: bool
    # PEM CAs that verify the token endpoint's certificate; None: ssl_cafile plus the system
    # trust store.
    https_cafile: str | None
    # Bound on connecting to the token endpoint (TCP and TLS).
    sasl_login_connect_timeout_ms: int
    # Bound on sending the token request and reading the whole answer.
    sasl_login_read_timeout_ms: int
    # First wait before asking the token endpoint again after a failure.
    sasl_login_retry_backoff_ms: int
    # Bound on one token fetch, its retries included (Java's meaning).
    sasl_login_retry_backoff_max_ms: int
    # Refresh a token at this fraction of its lifetime (0.5-1.0)...
    sasl_login_refresh_window_factor: float
    # ... plus up to this much more, at random (0-0.25), so clients do not refresh together.
    sasl_login_refresh_window_jitter: float
    # Refresh no sooner than this after a token's start, if its lifetime allows.
    sasl_login_refresh_min_period_seconds: int
    # Refresh at least this long before expiry, if the token's lifetime allows.
    sasl_login_refresh_buffer_seconds: int
    # A file with a ready-signed JWT assertion, read for every request; the other assertion
    # settings are then ignored.
    sasl_oauthbearer_assertion_file: str | None
    # PEM private key signing the assertion (needs the oauth extra: cryptography).
    sasl_oauthbearer_assertion_private_key_file: str | None
    # Passphrase of an encrypted assertion key (a secret: never shown).
    sasl_oauthbearer_assertion_private_key_passphrase: str | None
    # RS256 or ES256.
    sasl_oauthbearer_assertion_algorithm: OAuthAssertionAlgorithm
    # The assertion's aud claim (usually the token endpoint or the provider's issuer).
    sasl_oauthbearer_assertion_claim_aud: str | None
    # The assertion's iss claim (usually the client id).
    sasl_oauthbearer_assertion_claim_iss: str | None
    # The assertion's sub claim (the client id, or the user the client acts for).
    sasl_oauthbearer_assertion_claim_sub: str | None
    # The assertion expires this many seconds after it is made.
    sasl_oauthbearer_assertion_claim_exp_seconds: int
    # The assertion is valid from this many seconds before it is made (clock skew).
    sasl_oauthbearer_assertion_claim_nbf_seconds: int
    # Put a random jti in every assertion (providers that refuse replays want it).
    sasl_oauthbearer_assertion_claim_jti_include: bool
    # JSON {"header": {...}, "payload": {...}} of static values under the configured claims.
    sasl_oauthbearer_assertion_template_file: str | None
    # First bound on establishing a connection.
    socket_connection_setup_timeout_ms: int
    # Cap on the exponentially growing connection setup bound.
    socket_connection_setup_timeout_max_ms: int
    # Length of one metrics sample window.
    metrics_sample_window_ms: int
    # Sample windows kept for rates and averages.
    metrics_num_samples: int
    # INFO, DEBUG or TRACE: sensors declared above it record nothing (Java's meaning).
    metrics_recording_level: RecordingLevel
    # Push the producer's metrics to the broker when a client-metrics subscription asks for them
    # (KIP-714; docs/observability.md); nothing is sent while no subscription matches this client.
    enable_metrics_push: bool
    # use_all_dns_ips: try every address a host name resolves to, in turn;
    # resolve_canonical_bootstrap_servers_only: bootstrap names become their canonical names.
    client_dns_lookup: DnsLookup
    # rebootstrap: when no known broker can be reached, or none gave metadata for
    # metadata_recovery_rebootstrap_trigger_ms, or a broker answers REBOOTSTRAP_REQUIRED, forget
    # the known brokers and start over from bootstrap_servers (KIP-899, KIP-1102); none: keep
    # trying the brokers last known.
    metadata_recovery_strategy: MetadataRecoveryStrategy
    # With the rebootstrap strategy: how long metadata may keep failing before rebootstrapping.
    metadata_recovery_rebootstrap_trigger_ms: int
    # Why idempotence was turned off although not disabled explicitly; None when it was not.
    idempotence_disabled_reason: str | None = field(default=None, init=False)

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str],
        client_id: str = "",
        acks: Acks = "all",
        enable_idempotence: bool | None = None,
        linger_ms: int = 5,
        batch_size: int = 16384,
        buffer_memory: int = 33554432,
        max_block_ms: int = 60000,
        request_timeout_ms: int = 30000,
        delivery_timeout_ms: int | None = None,
        retries: int = _INT_MAX,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        max_in_flight_requests_per_connection: int = 5,
        max_request_size: int = 1048576,
        metadata_max_age_ms: int = 300000,
        metadata_max_idle_ms: int = 300000,
        compression_type: CompressionCodec = "none",
        compression_gzip_level: int = -1,
        compression_lz4_level: int = 9,
        compression_zstd_level: int = 3,
        partitioner: Partitioner | None = None,
        partitioner_ignore_keys: bool = False,
        partitioner_adaptive_partitioning_enable: bool = True,
        partitioner_availability_timeout_ms: int = 0,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        interceptors: Sequence[ProducerInterceptor] = (),
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
        connections_max_idle_ms: int = 540000,
        send_buffer_bytes: int = 131072,
        receive_buffer_bytes: int = 32768,
        security_protocol: SecurityProtocol = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        ssl_endpoint_identification_algorithm: EndpointIdentification = "https",
        sasl_mechanism: SaslMechanism | None = None,
        sasl_username: str | None = None,
        sasl_password: str | None = None,
        sasl_oauth_token_provider: Callable[..., Any] | None = None,
        sasl_oauthbearer_token_endpoint_url: str | None = None,
        sasl_oauthbearer_grant_type: OAuthGrantType = "client_credentials",
        sasl_oauthbearer_client_credentials_client_id: str | None = None,
        sasl_oauthbearer_client_credentials_client_secret: str | None = None,
        sasl_oauthbearer_scope: str | None = None,
        sasl_oauthbearer_header_urlencode: bool = False,
        https_cafile: str | None = None,
        sasl_login_connect_timeout_ms: int = 10000,
        sasl_login_read_timeout_ms: int = 10000,
        sasl_login_retry_backoff_ms: int = 100,
        sasl_login_retry_backoff_max_ms: int = 10000,
        sasl_login_refresh_window_factor: float = 0.8,
        sasl_login_refresh_window_jitter: float = 0.05,
        sasl_login_refresh_min_period_seconds: int = 60,
        sasl_login_refresh_buffer_seconds: int = 300,
        sasl_oauthbearer_assertion_file: str | None = None,
        sasl_oauthbearer_assertion_private_key_file: str | None = None,
        sasl_oauthbearer_assertion_private_key_passphrase: str | None = None,
        sasl_oauthbearer_assertion_algorithm: OAuthAssertionAlgorithm = "RS256",
        sasl_oauthbearer_assertion_claim_aud: str | None = None,
        sasl_oauthbearer_assertion_claim_iss: str | None = None,
        sasl_oauthbearer_assertion_claim_sub: str | None = None,
        sasl_oauthbearer_assertion_claim_exp_seconds: int = 300,
        sasl_oauthbearer_assertion_claim_nbf_seconds: int = 60,
        sasl_oauthbearer_assertion_claim_jti_include: bool = False,
        sasl_oauthbearer_assertion_template_file: str | None = None,
        socket_connection_setup_timeout_ms: int = 10000,
        socket_connection_setup_timeout_max_ms: int = 30000,
        metrics_sample_window_ms: int = 30000,
        metrics_num_samples: int = 2,
        metrics_recording_level: RecordingLevel = "INFO",
        enable_metrics_push: bool = True,
        client_dns_lookup: DnsLookup = "use_all_dns_ips",
        metadata_recovery_strategy: MetadataRecoveryStrategy = "rebootstrap",
        metadata_recovery_rebootstrap_trigger_ms: int = 300000,
    ) -> None:
        given: dict[str, Any] = {k: v for k, v in locals().items() if k != "self"}
        for name, (low, high) in _INT_RANGES.items():
            _check_int(name, given[name], low, high)
        for name in _BOOLS:
            _check_bool(name, given[name])
        for name, (flow, fhigh) in _FLOAT_RANGES.items():
            given[name] = _check_float(name, given[name], flow, fhigh)
        for name in _CALLABLES:
            if given[name] is not None and not callable(given[name]):
                raise _fail(name, given[name], "expected a callable or None")
        if not isinstance(interceptors, Sequence) or isinstance(interceptors, str):
            raise _fail("interceptors", interceptors, "expected a sequence of interceptor objects")
        given["interceptors"] = tuple(interceptors)
        given["bootstrap_servers"] = parse_bootstrap_servers(bootstrap_servers)
        given["acks"] = _parse_acks(acks)
        given["compression_type"] = _parse_choice(
            "compression_type", compression_type, COMPRESSION_TYPES, upper=False
        )
        if compression_gzip_level != -1:
            _check_int("compression_gzip_level", compression_gzip_level, 1, 9)
        given["security_protocol"] = self._security(security_protocol)
        given["metrics_recording_level"] = _parse_choice(
            "metrics_recording_level", metrics_recording_level, _RECORDING_LEVELS, upper=True)
        given["client_dns_lookup"] = _parse_choice(
            "client_dns_lookup", client_dns_lookup, _DNS_LOOKUPS, upper=False)
        given["metadata_recovery_strategy"] = _parse_choice(
            "metadata_recovery_strategy", metadata_recovery_strategy, _RECOVERY_STRATEGIES,
            upper=False)
        self._check_security(given)
        if transactional_id is not None and (
            not isinstance(transactional_id, str) or not transactional_id
        ):
            raise _fail("transactional_id", transactional_id, "expected a non-empty string or None")
        if not isinstance(client_id, str):
            raise _fail("client_id", client_id, "expected a string")
        if not client_id:
            suffix = transactional_id if transactional_id else str(next(_client_ids))
            given["client_id"] = f"aiokprod-producer-{suffix}"
        given["delivery_timeout_ms"] = self._delivery_timeout(given)
        given["enable_idempotence"], reason = self._idempotence(given)
        given["idempotence_disabled_reason"] = reason
        for name, value in given.items():
            object.__setattr__(self, name, value)

    @staticmethod
    def _security(value: object) -> str:
        return _parse_choice("security_protocol", value, _SECURITY_PROTOCOLS, upper=True)

    @staticmethod
    def _check_security(given: dict[str, Any]) -> None:
        """TLS and SASL options must fit the protocol: a setting the protocol would ignore is
        an error, so a typo in security_protocol cannot silently send credentials in clear."""
        import ssl

        protocol = given["security_protocol"]
        tls = protocol in ("SSL", "SASL_SSL")
        sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        files = [n for n in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")
                 if given[n] is not None]
        for name in files:
            if not isinstance(given[name], str) or not given[name]:
                raise _fail(name, "***" if name in _SECRETS else given[name],
                            "expected a non-empty string or None")
        context = given["ssl_context"]
        if context is not None and not isinstance(context, ssl.SSLContext):
            raise _fail("ssl_context", context, "expected an ssl.SSLContext or None")
        if not tls and (context is not None or files):
            name = "ssl_context" if context is not None else files[0]
            raise _fail(name, "***" if name in _SECRETS else given[name],
                        f"TLS options need security_protocol SSL or SASL_SSL, not {protocol}")
        if context is not None and files:
            raise _fail(files[0], "***" if files[0] in _SECRETS else given[files[0]],
                        "give either ssl_context or the ssl_*file options, not both")
        if given["ssl_keyfile"] is not None and given["ssl_certfile"] is None:
            raise _fail("ssl_keyfile", given["ssl_keyfile"], "needs ssl_certfile too")
        algorithm = given["ssl_endpoint_identification_algorithm"]
        if algorithm not in ("https", ""):
            raise _fail("ssl_endpoint_identification_algorithm", algorithm,
                        'expected "https" (check the host name) or "" (do not)')
        mechanism = given["sasl_mechanism"]
        given["sasl_oauthbearer_grant_type"] = _parse_choice(
            "sasl_oauthbearer_grant_type", given["sasl_oauthbearer_grant_type"], _GRANT_TYPES,
            upper=False)
        given["sasl_oauthbearer_assertion_algorithm"] = _parse_choice(
            "sasl_oauthbearer_assertion_algorithm", given["sasl_oauthbearer_assertion_algorithm"],
            _ASSERTION_ALGORITHMS, upper=True)
        for name in _OAUTH_LOGIN:
            if given[name] is not None and (not isinstance(given[name], str) or not given[name]):
                raise _fail(name, "***" if name in _SECRETS else given[name],
                            "expected a non-empty string or None")
        credentials = [n for n in ("sasl_username", "sasl_password",
                                   "sasl_oauth_token_provider", *_OAUTH_LOGIN)
                       if given[n] is not None]
        if not sasl:
            if mechanism is not None or credentials:
                name = "sasl_mechanism" if mechanism is not None else credentials[0]
                raise _fail(name, "***" if name in _SECRETS else given[name],
                            f"SASL options need security_protocol SASL_PLAINTEXT or SASL_SSL, "
                            f"not {protocol}")
            return
        if mechanism is None:
            raise _fail("sasl_mechanism", None,
                        f"required with security_protocol={protocol}: one of "
                        f"{', '.join(SASL_MECHANISMS)}")
        mechanism = _parse_choice("sasl_mechanism", mechanism, SASL_MECHANISMS, upper=True)
        given["sasl_mechanism"] = mechanism
        if mechanism == "OAUTHBEARER":
            provider = given["sasl_oauth_token_provider"]
            if provider is not None and given["sasl_oauthbearer_token_endpoint_url"] is not None:
                raise _fail("sasl_oauth_token_provider", provider,
                            "give either a token provider or sasl_oauthbearer_token_endpoint_url "
                            "(the built-in login), not both")
            if provider is None and given["sasl_oauthbearer_token_endpoint_url"] is not None:
                _check_oauth_login(given)
            elif provider is None or not callable(provider):
                raise _fail("sasl_oauth_token_provider", provider,
                            "OAUTHBEARER needs an async callable returning an OAuthToken, or "
                            "sasl_oauthbearer_token_endpoint_url for the built-in login")
            else:
                _no_oauth_login(given, "a token provider of your own is given")
        else:
            for name in ("sasl_username", "sasl_password"):
                if not isinstance(given[name], str) or not given[name]:
                    raise _fail(name, "***" if name in _SECRETS else given[name],
                                f"{mechanism} needs sasl_username and sasl_password")
            _no_oauth_login(given, f"sasl_mechanism is {mechanism}")

    def __repr__(self) -> str:
        def shown(name: str) -> str:
            value = getattr(self, name)
            return "'***'" if name in _SECRETS and value is not None else repr(value)

        return "ProducerConfig(" + ", ".join(f"{f.name}={shown(f.name)}" for f in fields(self)) \
            + ")"

    @staticmethod
    def _delivery_timeout(given: Mapping[str, Any]) -> int:
        """Java's ``configureDeliveryTimeout``: a batch must get at least one full linger and one
        full request before it may expire."""
        floor: int = min(given["linger_ms"] + given["request_timeout_ms"], _INT_MAX)
        if given["delivery_timeout_ms"] is None:
            return max(120000, floor)
        value = _check_int("delivery_timeout_ms", given["delivery_timeout_ms"], 0, _INT_MAX)
        if value < floor:
            raise _fail(
                "delivery_timeout_ms",
                value,
                f"must be >= linger.ms + request.timeout.ms (linger_ms + request_timeout_ms) "
                f"= {given['linger_ms']} + {given['request_timeout_ms']} = {floor}",
            )
        return value

    @staticmethod
    def _idempotence(given: Mapping[str, Any]) -> tuple[bool, str | None]:
        """Java's ``postProcessAndValidateIdempotenceConfigs``, minus the in-flight cap
        (KIP-1269)."""
        requested = given["enable_idempotence"]
        if requested is not None:
            _check_bool("enable_idempotence", requested)
        explicit = requested is not None
        enabled = bool(requested) if explicit else True
        reason: str | None = None
        if enabled:
            conflicts: list[tuple[str, object, str]] = []
            if given["retries"] == 0:
                conflicts.append(("retries", 0, "must be > 0 for the idempotent producer"))
            if given["acks"] != -1:
                conflicts.append(
                    ("acks", given["acks"], 'must be "all" (-1) for the idempotent producer')
                )
            if conflicts and explicit:
                name, value, allowed = conflicts[0]
                raise _fail(
                    name,
                    value,
                    f"{allowed}; enable.idempotence (enable_idempotence) is True (set it to "
                    f"False to use {java_name(name)}={value})",
                )
            if conflicts:
                enabled = False
                reason = (
                    "; ".join(f"{java_name(n)}={v!r} ({n})" for n, v, _ in conflicts)
                    + " cannot be used with idempotence, and enable.idempotence was not set"
                )
        if given["transactional_id"] is not None and not enabled:
            raise _fail(
                "transactional_id",
                given["transactional_id"],
                "cannot be set without idempotence; "
                + (reason or "enable.idempotence (enable_idempotence) is False"),
            )
        return enabled, reason

    # -- Java names ---------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object]) -> ProducerConfig:
        """Build from Java property names (``"linger.ms": "5"``) and/or field names.

        Strings are converted the way a Java properties file is read: ``"5"`` -> 5,
        ``"true"``/``"false"`` -> bool. Unknown keys fail with the closest known name.
        """
        params = inspect.signature(cls.__init__).parameters
        names = [n for n in params if n != "self"]
        by_java = {java_name(n): n for n in names}
        kwargs: dict[str, object] = {}
        for key, value in mapping.items():
            name = by_java.get(key) or _ALIASES.get(key) or (
                key if key in params and key != "self" else None)
            if name is None:
                known = list(by_java) + names
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"Unknown configuration {key!r}{hint}")
            if name in kwargs:
                raise ConfigError(
                    f"Configuration {java_name(name)} ({name}) given twice, as {key!r} and "
                    "under its other name"
                )
            kwargs[name] = _from_text(name, value, params[name].default)
        return cls(**kwargs)  # type: ignore[arg-type]

    def to_java_names(self) -> dict[str, object]:
        """Every setting under its Java name, resolved, for display and logs."""
        out: dict[str, object] = {}
        for f in fields(self):
            if f.init:
                value = getattr(self, f.name)
                if f.name == "bootstrap_servers":
                    value = ",".join(value)
                elif f.name in _SECRETS and value is not None:
                    value = "***"
                out[java_name(f.name)] = value
        return out

    def compression_level(self) -> int | None:
        """The level configured for the chosen codec; None for codecs without levels and for
        gzip's -1, Java's "the codec's own default" (KIP-390)."""
        level = {
            "gzip": self.compression_gzip_level,
            "lz4": self.compression_lz4_level,
            "zstd": self.compression_zstd_level,
        }.get(self.compression_type)
        if self.compression_type == "gzip" and level == -1:
            return None
        return level


def _from_text(name: str, value: object, default: object) -> object:
    """Convert a property-file string to the type the field's default has."""
    if not isinstance(value, str) or name in ("bootstrap_servers", "acks"):
        return value
    text = value.strip()
    if name in _BOOLS or name == "enable_idempotence":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise _fail(name, value, 'expected "true" or "false"')
    if name == "sasl_oauthbearer_grant_type":
        return _JWT_RETRIEVERS.get(text, text)
    if name in _FLOAT_RANGES:
        try:
            return float(text)
        except ValueError:
            raise _fail(name, value, "expected a number") from None
    if name in _INT_RANGES or name in ("delivery_timeout_ms", "compression_gzip_level"):
        try:
            return int(text)
        except ValueError:
            raise _fail(name, value, "expected an integer") from None
    if name in _CALLABLES or name == "interceptors":
        raise _fail(
            name, value, "expected a Python callable/object; class names cannot be loaded"
        )
    if name in _OAUTH_LOGIN and not text and default is None:
        return None  # Java reads a blank OAuth setting as unset
    if name == "transactional_id" and not text and default is None:
        return None
    return value
