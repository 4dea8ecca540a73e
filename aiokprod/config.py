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

The option table is this module (``tools/gen_config_docs.py`` reads the field comments from
it); the checks, Java's ranges and the derived settings are ``aiokprod._config_rules``.
"""

from __future__ import annotations

import difflib
import inspect
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from aiokprod._config_rules import (
    ALIASES,
    BOOLS,
    CALLABLES,
    COMPRESSION_TYPES,
    DNS_LOOKUPS,
    FLOAT_RANGES,
    INT_MAX,
    INT_RANGES,
    JAVA_ONLY,
    RECORDING_LEVELS,
    RECOVERY_STRATEGIES,
    SASL_MECHANISMS,
    SECRETS,
    check_bool,
    check_float,
    check_int,
    check_security,
    client_ids,
    delivery_timeout,
    fail,
    from_text,
    idempotence,
    java_name,
    parse_acks,
    parse_choice,
    parse_security_protocol,
)
from aiokprod.errors import ConfigError
from aiokprod.hooks import Partitioner, ProducerInterceptor, Serializer
from aiokprod.network.addresses import parse_bootstrap_servers
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
        retries: int = INT_MAX,
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
        for name, (low, high) in INT_RANGES.items():
            check_int(name, given[name], low, high)
        for name in BOOLS:
            check_bool(name, given[name])
        for name, (flow, fhigh) in FLOAT_RANGES.items():
            given[name] = check_float(name, given[name], flow, fhigh)
        for name in CALLABLES:
            if given[name] is not None and not callable(given[name]):
                raise fail(name, given[name], "expected a callable or None")
        if not isinstance(interceptors, Sequence) or isinstance(interceptors, str):
            raise fail("interceptors", interceptors, "expected a sequence of interceptor objects")
        given["interceptors"] = tuple(interceptors)
        given["bootstrap_servers"] = parse_bootstrap_servers(bootstrap_servers)
        given["acks"] = parse_acks(acks)
        given["compression_type"] = parse_choice(
            "compression_type", compression_type, COMPRESSION_TYPES, upper=False
        )
        if compression_gzip_level != -1:
            check_int("compression_gzip_level", compression_gzip_level, 1, 9)
        given["security_protocol"] = parse_security_protocol(security_protocol)
        given["metrics_recording_level"] = parse_choice(
            "metrics_recording_level", metrics_recording_level, RECORDING_LEVELS, upper=True)
        given["client_dns_lookup"] = parse_choice(
            "client_dns_lookup", client_dns_lookup, DNS_LOOKUPS, upper=False)
        given["metadata_recovery_strategy"] = parse_choice(
            "metadata_recovery_strategy", metadata_recovery_strategy, RECOVERY_STRATEGIES,
            upper=False)
        check_security(given)
        if transactional_id is not None and (
            not isinstance(transactional_id, str) or not transactional_id
        ):
            raise fail("transactional_id", transactional_id, "expected a non-empty string or None")
        if not isinstance(client_id, str):
            raise fail("client_id", client_id, "expected a string")
        if not client_id:
            suffix = transactional_id if transactional_id else str(next(client_ids))
            given["client_id"] = f"aiokprod-producer-{suffix}"
        given["delivery_timeout_ms"] = delivery_timeout(given)
        given["enable_idempotence"], reason = idempotence(given)
        given["idempotence_disabled_reason"] = reason
        for name, value in given.items():
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        def shown(name: str) -> str:
            value = getattr(self, name)
            return "'***'" if name in SECRETS and value is not None else repr(value)

        return "ProducerConfig(" + ", ".join(f"{f.name}={shown(f.name)}" for f in fields(self)) \
            + ")"

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
            name = by_java.get(key) or ALIASES.get(key) or (
                key if key in params and key != "self" else None)
            if name is None:
                if key in JAVA_ONLY:
                    raise ConfigError(f"Unsupported configuration {key!r}: {JAVA_ONLY[key]}")
                known = list(by_java) + names
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"Unknown configuration {key!r}{hint}")
            if name in kwargs:
                raise ConfigError(
                    f"Configuration {java_name(name)} ({name}) given twice, as {key!r} and "
                    "under its other name"
                )
            kwargs[name] = from_text(name, value, params[name].default)
        return cls(**kwargs)  # type: ignore[arg-type]

    def to_java_names(self) -> dict[str, object]:
        """Every setting under its Java name, resolved, for display and logs."""
        out: dict[str, object] = {}
        for f in fields(self):
            if f.init:
                value = getattr(self, f.name)
                if f.name == "bootstrap_servers":
                    value = ",".join(value)
                elif f.name in SECRETS and value is not None:
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
