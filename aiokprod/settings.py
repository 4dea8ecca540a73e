"""The producer's settings as types, so a type checker and an editor see them at the call site.

``ProducerConfig`` validates and resolves the settings at run time; a ``**config: Any``
signature in front of it would leave every misspelt name or wrong value to surface only then.
``ProducerSettings`` gives the same settings as a ``TypedDict`` that ``Producer(...)`` and
``producer_lifespan(...)`` take as ``**settings: Unpack[ProducerSettings]`` (PEP 692): an editor
completes the names, mypy or pyright reports ``linger_msec=5`` or ``acks="al"`` before anything
runs. Run-time validation is unchanged: it still catches what a type checker cannot (ranges,
combinations, values built at run time).

Why it stays in step with ``ProducerConfig``:

* the closed sets of values are the ``Literal`` aliases below, and ``aiokprod.config`` takes its
  run-time choices from them (``typing.get_args``), so the type and the check cannot disagree;
* ``Producer`` passes ``ProducerSettings`` on to ``ProducerConfig(...)``, so mypy rejects a key
  ``ProducerConfig`` does not take or a type it does not accept;
* ``tests/unit/test_typed_settings.py`` fails when ``ProducerConfig.__init__`` has a setting this
  module lacks, or the two declare a setting with different types.

``bootstrap_servers`` is not among the keys: it is the one required setting and ``Producer``
takes it as its first (positional or keyword) parameter, which PEP 692 does not let a
``TypedDict`` key repeat.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict

from aiokprod.hooks import Partitioner, ProducerInterceptor, Serializer

__all__ = [
    "Acks",
    "CompressionCodec",
    "DnsLookup",
    "EndpointIdentification",
    "MetadataRecoveryStrategy",
    "OAuthAssertionAlgorithm",
    "OAuthGrantType",
    "PlainSettings",
    "ProducerSettings",
    "RecordingLevel",
    "SaslMechanism",
    "SecurityProtocol",
]

# ``acks`` as given: Java's strings, or the ints. Stored as the int (-1 for "all").
Acks = Literal["all", "-1", "0", "1", -1, 0, 1]
CompressionCodec = Literal["none", "gzip", "snappy", "lz4", "zstd"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
RecordingLevel = Literal["INFO", "DEBUG", "TRACE"]
DnsLookup = Literal["use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"]
# "rebootstrap": forget the known brokers and start over from bootstrap_servers (KIP-899);
# "none": keep trying the brokers last known.
MetadataRecoveryStrategy = Literal["rebootstrap", "none"]
# "https" checks that the broker's certificate names the host dialled; "" does not.
EndpointIdentification = Literal["https", ""]
# The built-in OAUTHBEARER login's grants (KIP-768, KIP-1139) and assertion signatures.
OAuthGrantType = Literal["client_credentials", "jwt_bearer"]
OAuthAssertionAlgorithm = Literal["RS256", "ES256"]


class PlainSettings(TypedDict, total=False):
    """The settings whose values are plain data (numbers, strings, booleans), without
    ``transactional_id``: what a string option can carry, so what the PySpark sink takes
    (``aiokprod.spark.sink_options``). ``ProducerSettings`` adds the rest.

    Each key means what the ``ProducerConfig`` field of the same name means; the table in the
    API reference (docs/api/config.md) gives its Java name and default.
    """

    client_id: str
    acks: Acks
    enable_idempotence: bool | None
    linger_ms: int
    batch_size: int
    buffer_memory: int
    max_block_ms: int
    request_timeout_ms: int
    delivery_timeout_ms: int | None
    retries: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    max_in_flight_requests_per_connection: int
    max_request_size: int
    metadata_max_age_ms: int
    metadata_max_idle_ms: int
    compression_type: CompressionCodec
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    partitioner_ignore_keys: bool
    partitioner_adaptive_partitioning_enable: bool
    partitioner_availability_timeout_ms: int
    transaction_timeout_ms: int
    connections_max_idle_ms: int
    send_buffer_bytes: int
    receive_buffer_bytes: int
    security_protocol: SecurityProtocol
    ssl_cafile: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_password: str | None
    ssl_endpoint_identification_algorithm: EndpointIdentification
    sasl_mechanism: SaslMechanism | None
    sasl_username: str | None
    sasl_password: str | None
    sasl_oauthbearer_token_endpoint_url: str | None
    sasl_oauthbearer_grant_type: OAuthGrantType
    sasl_oauthbearer_client_credentials_client_id: str | None
    sasl_oauthbearer_client_credentials_client_secret: str | None
    sasl_oauthbearer_scope: str | None
    sasl_oauthbearer_header_urlencode: bool
    https_cafile: str | None
    sasl_login_connect_timeout_ms: int
    sasl_login_read_timeout_ms: int
    sasl_login_retry_backoff_ms: int
    sasl_login_retry_backoff_max_ms: int
    sasl_login_refresh_window_factor: float
    sasl_login_refresh_window_jitter: float
    sasl_login_refresh_min_period_seconds: int
    sasl_login_refresh_buffer_seconds: int
    sasl_oauthbearer_assertion_file: str | None
    sasl_oauthbearer_assertion_private_key_file: str | None
    sasl_oauthbearer_assertion_private_key_passphrase: str | None
    sasl_oauthbearer_assertion_algorithm: OAuthAssertionAlgorithm
    sasl_oauthbearer_assertion_claim_aud: str | None
    sasl_oauthbearer_assertion_claim_iss: str | None
    sasl_oauthbearer_assertion_claim_sub: str | None
    sasl_oauthbearer_assertion_claim_exp_seconds: int
    sasl_oauthbearer_assertion_claim_nbf_seconds: int
    sasl_oauthbearer_assertion_claim_jti_include: bool
    sasl_oauthbearer_assertion_template_file: str | None
    socket_connection_setup_timeout_ms: int
    socket_connection_setup_timeout_max_ms: int
    metrics_sample_window_ms: int
    metrics_num_samples: int
    metrics_recording_level: RecordingLevel
    enable_metrics_push: bool
    client_dns_lookup: DnsLookup
    metadata_recovery_strategy: MetadataRecoveryStrategy
    metadata_recovery_rebootstrap_trigger_ms: int


class ProducerSettings(PlainSettings, total=False):
    """Every setting ``Producer(bootstrap_servers, **settings)`` takes besides
    ``bootstrap_servers``; all optional, defaults as in ``ProducerConfig``."""

    transactional_id: str | None
    partitioner: Partitioner | None
    key_serializer: Serializer | None
    value_serializer: Serializer | None
    interceptors: Sequence[ProducerInterceptor]
    ssl_context: ssl.SSLContext | None
    sasl_oauth_token_provider: Callable[..., Any] | None
