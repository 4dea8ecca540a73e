"""The rules of the producer configuration: value tables, checks and derived settings.

``aiokprod.config.ProducerConfig`` is the option table (one field per setting, its comment
and default) and the entry points; this module is what those entry points apply: Java's
ranges and closed sets, the TLS/SASL consistency rules, and the two settings derived from
others (``delivery_timeout_ms``'s floor and whether idempotence is on). Kept apart so the
table reads as a table and the rules can be read (and changed) without scrolling past it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from aiokprod.errors import ConfigError
from aiokprod.settings import (
    CompressionCodec,
    DnsLookup,
    MetadataRecoveryStrategy,
    OAuthAssertionAlgorithm,
    OAuthGrantType,
    RecordingLevel,
    SaslMechanism,
    SecurityProtocol,
)

# The closed sets come from the Literal types a type checker sees (aiokprod.settings), so the
# run-time check and the static one accept the same values.
COMPRESSION_TYPES: tuple[str, ...] = get_args(CompressionCodec)
_SECURITY_PROTOCOLS: tuple[str, ...] = get_args(SecurityProtocol)
SASL_MECHANISMS: tuple[str, ...] = get_args(SaslMechanism)
# Settings whose values are secrets: never in repr(), logs or to_java_names().
SECRETS = ("sasl_password", "ssl_password", "sasl_oauthbearer_client_credentials_client_secret",
            "sasl_oauthbearer_assertion_private_key_passphrase")
# Other clients' names for our settings (confluent-kafka / librdkafka), read by from_mapping.
ALIASES = {"sasl.mechanisms": "sasl_mechanism"}
# Java settings with no counterpart here, and what to give instead: the closest known name
# would mislead (ssl.truststore.location is nearest to ssl.certificate.location, the client's
# own certificate, not the CAs a trust store holds).
_TRUSTSTORE = ("Java trust stores (JKS, PKCS12) are not supported: give the CA certificates "
               "as a PEM file with ssl.ca.location")
_KEYSTORE = ("Java key stores (JKS, PKCS12) are not supported: give the client certificate "
             "and its key as PEM files with ssl.certificate.location and ssl.key.location "
             "(ssl.key.password for an encrypted key)")
JAVA_ONLY = {
    "ssl.truststore.location": _TRUSTSTORE,
    "ssl.truststore.password": _TRUSTSTORE,
    "ssl.truststore.type": _TRUSTSTORE,
    "ssl.truststore.certificates": _TRUSTSTORE,
    "ssl.keystore.location": _KEYSTORE,
    "ssl.keystore.password": _KEYSTORE,
    "ssl.keystore.type": _KEYSTORE,
    "ssl.keystore.key": _KEYSTORE,
    "ssl.keystore.certificate.chain": _KEYSTORE,
}
RECORDING_LEVELS: tuple[str, ...] = get_args(RecordingLevel)
DNS_LOOKUPS: tuple[str, ...] = get_args(DnsLookup)
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
FLOAT_RANGES: dict[str, tuple[float, float]] = {
    "sasl_login_refresh_window_factor": (0.5, 1.0),
    "sasl_login_refresh_window_jitter": (0.0, 0.25),
}
RECOVERY_STRATEGIES: tuple[str, ...] = get_args(MetadataRecoveryStrategy)
INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
# Java's ZSTD level bounds (Zstd.minCompressionLevel() is -(1 << 17)).
_ZSTD_MIN, _ZSTD_MAX = -131072, 22
client_ids = itertools.count(1)

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
INT_RANGES: dict[str, tuple[int, int]] = {
    "linger_ms": (0, _LONG_MAX),
    "batch_size": (0, INT_MAX),
    "buffer_memory": (0, _LONG_MAX),
    "max_block_ms": (0, _LONG_MAX),
    "request_timeout_ms": (0, INT_MAX),
    "retries": (0, INT_MAX),
    "retry_backoff_ms": (0, _LONG_MAX),
    "retry_backoff_max_ms": (0, _LONG_MAX),
    "reconnect_backoff_ms": (0, _LONG_MAX),
    "reconnect_backoff_max_ms": (0, _LONG_MAX),
    "max_in_flight_requests_per_connection": (1, INT_MAX),
    "max_request_size": (0, INT_MAX),
    "metadata_max_age_ms": (0, _LONG_MAX),
    "metadata_max_idle_ms": (5000, _LONG_MAX),
    "compression_lz4_level": (1, 17),
    "compression_zstd_level": (_ZSTD_MIN, _ZSTD_MAX),
    "partitioner_availability_timeout_ms": (0, _LONG_MAX),
    "transaction_timeout_ms": (0, INT_MAX),
    "connections_max_idle_ms": (-1, _LONG_MAX),
    "send_buffer_bytes": (-1, INT_MAX),
    "receive_buffer_bytes": (-1, INT_MAX),
    "socket_connection_setup_timeout_ms": (0, _LONG_MAX),
    "socket_connection_setup_timeout_max_ms": (0, _LONG_MAX),
    # Java allows a 0 ms window; a rate over a 0 ms window is undefined, so 1 ms is the floor.
    "metrics_sample_window_ms": (1, _LONG_MAX),
    "metrics_num_samples": (1, INT_MAX),
    # Java leaves the two endpoint timeouts unset (unbounded); here they have bounds.
    "sasl_login_connect_timeout_ms": (1, INT_MAX),
    "sasl_login_read_timeout_ms": (1, INT_MAX),
    "sasl_login_retry_backoff_ms": (0, _LONG_MAX),
    "sasl_login_retry_backoff_max_ms": (0, _LONG_MAX),
    "sasl_login_refresh_min_period_seconds": (0, 900),
    "sasl_login_refresh_buffer_seconds": (0, 3600),
    "sasl_oauthbearer_assertion_claim_exp_seconds": (1, 86400),
    "sasl_oauthbearer_assertion_claim_nbf_seconds": (0, 3600),
    "metadata_recovery_rebootstrap_trigger_ms": (0, _LONG_MAX),
}
BOOLS = ("partitioner_ignore_keys", "partitioner_adaptive_partitioning_enable",
          "sasl_oauthbearer_header_urlencode", "sasl_oauthbearer_assertion_claim_jti_include",
          "enable_metrics_push")
CALLABLES = ("partitioner", "key_serializer", "value_serializer")


def java_name(python_name: str) -> str:
    """The Java config key for a field name (``linger_ms`` -> ``linger.ms``)."""
    return _JAVA_OVERRIDES.get(python_name, python_name.replace("_", "."))


def fail(name: str, value: object, allowed: str) -> ConfigError:
    return ConfigError(
        f"Invalid value {value!r} for configuration {java_name(name)} ({name}): {allowed}"
    )


def check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(name, value, f"expected an integer in [{low}, {high}]")
    if not low <= value <= high:
        raise fail(name, value, f"must be in [{low}, {high}]")
    return value


def check_float(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(name, value, f"expected a number in [{low}, {high}]")
    if not low <= value <= high:
        raise fail(name, value, f"must be in [{low}, {high}]")
    return float(value)


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise fail(name, value, "expected True or False")
    return value


def parse_acks(value: object) -> int:
    text = str(value).strip().lower() if not isinstance(value, bool) else ""
    mapping = {"all": -1, "-1": -1, "0": 0, "1": 1}
    if text not in mapping:
        raise fail("acks", value, 'must be one of "all", "-1", "0", "1" (or the ints -1, 0, 1)')
    return mapping[text]


def parse_choice(name: str, value: object, choices: Sequence[str], upper: bool) -> str:
    if isinstance(value, str):
        text = value.strip().upper() if upper else value.strip().lower()
        if text in choices:
            return text
    raise fail(name, value, f"must be one of {', '.join(choices)}")


def _no_oauth_login(given: Mapping[str, Any], why: str) -> None:
    """The built-in login's settings are an error when it is not used: a secret configured
    for nothing is a mistake worth reporting."""
    for name in _OAUTH_LOGIN:
        if given[name] is not None:
            raise fail(name, "***" if name in SECRETS else given[name],
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
        raise fail("sasl_oauthbearer_token_endpoint_url", url,
                    "expected an https:// URL (the client secret or assertion must not travel "
                    "unencrypted) or a file: URL")
    if parts.scheme == "https" and (not parts.hostname or parts.username or parts.password):
        shown = f"https://{parts.hostname or ''}{parts.path}"
        raise fail("sasl_oauthbearer_token_endpoint_url", shown,
                    "expected https://host[:port]/path, without user info in the URL")
    grant = given["sasl_oauthbearer_grant_type"]
    secret = given["sasl_oauthbearer_client_credentials_client_secret"]
    assertion = given["sasl_oauthbearer_assertion_file"] or \
        given["sasl_oauthbearer_assertion_private_key_file"]
    if parts.scheme == "file":
        for name in _OAUTH_LOGIN[1:-1]:
            if given[name] is not None:
                raise fail(name, "***" if name in SECRETS else given[name],
                            "not used when sasl_oauthbearer_token_endpoint_url is a file: URL")
        return
    if grant == "jwt_bearer":
        if not assertion:
            raise fail("sasl_oauthbearer_assertion_private_key_file", None,
                        "the jwt_bearer grant needs sasl_oauthbearer_assertion_private_key_file "
                        "or sasl_oauthbearer_assertion_file")
        if secret is not None:
            raise fail("sasl_oauthbearer_client_credentials_client_secret", "***",
                        "not used by the jwt_bearer grant")
        return
    if given["sasl_oauthbearer_client_credentials_client_id"] is None:
        raise fail("sasl_oauthbearer_client_credentials_client_id", None,
                    "the client_credentials grant needs a client id")
    if secret is None and not assertion:
        raise fail("sasl_oauthbearer_client_credentials_client_secret", None,
                    "the client_credentials grant needs the client secret, or an assertion "
                    "(sasl_oauthbearer_assertion_private_key_file or _assertion_file)")
    if secret is not None and assertion:
        raise fail("sasl_oauthbearer_client_credentials_client_secret", "***",
                    "give either the client secret or an assertion, not both")


def parse_security_protocol(value: object) -> str:
    return parse_choice("security_protocol", value, _SECURITY_PROTOCOLS, upper=True)

def check_security(given: dict[str, Any]) -> None:
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
            raise fail(name, "***" if name in SECRETS else given[name],
                        "expected a non-empty string or None")
    context = given["ssl_context"]
    if context is not None and not isinstance(context, ssl.SSLContext):
        raise fail("ssl_context", context, "expected an ssl.SSLContext or None")
    if not tls and (context is not None or files):
        name = "ssl_context" if context is not None else files[0]
        raise fail(name, "***" if name in SECRETS else given[name],
                    f"TLS options need security_protocol SSL or SASL_SSL, not {protocol}")
    if context is not None and files:
        raise fail(files[0], "***" if files[0] in SECRETS else given[files[0]],
                    "give either ssl_context or the ssl_*file options, not both")
    if given["ssl_keyfile"] is not None and given["ssl_certfile"] is None:
        raise fail("ssl_keyfile", given["ssl_keyfile"], "needs ssl_certfile too")
    algorithm = given["ssl_endpoint_identification_algorithm"]
    if algorithm not in ("https", ""):
        raise fail("ssl_endpoint_identification_algorithm", algorithm,
                    'expected "https" (check the host name) or "" (do not)')
    mechanism = given["sasl_mechanism"]
    given["sasl_oauthbearer_grant_type"] = parse_choice(
        "sasl_oauthbearer_grant_type", given["sasl_oauthbearer_grant_type"], _GRANT_TYPES,
        upper=False)
    given["sasl_oauthbearer_assertion_algorithm"] = parse_choice(
        "sasl_oauthbearer_assertion_algorithm", given["sasl_oauthbearer_assertion_algorithm"],
        _ASSERTION_ALGORITHMS, upper=True)
    for name in _OAUTH_LOGIN:
        if given[name] is not None and (not isinstance(given[name], str) or not given[name]):
            raise fail(name, "***" if name in SECRETS else given[name],
                        "expected a non-empty string or None")
    credentials = [n for n in ("sasl_username", "sasl_password",
                               "sasl_oauth_token_provider", *_OAUTH_LOGIN)
                   if given[n] is not None]
    if not sasl:
        if mechanism is not None or credentials:
            name = "sasl_mechanism" if mechanism is not None else credentials[0]
            raise fail(name, "***" if name in SECRETS else given[name],
                        f"SASL options need security_protocol SASL_PLAINTEXT or SASL_SSL, "
                        f"not {protocol}")
        return
    if mechanism is None:
        raise fail("sasl_mechanism", None,
                    f"required with security_protocol={protocol}: one of "
                    f"{', '.join(SASL_MECHANISMS)}")
    mechanism = parse_choice("sasl_mechanism", mechanism, SASL_MECHANISMS, upper=True)
    given["sasl_mechanism"] = mechanism
    if mechanism == "OAUTHBEARER":
        provider = given["sasl_oauth_token_provider"]
        if provider is not None and given["sasl_oauthbearer_token_endpoint_url"] is not None:
            raise fail("sasl_oauth_token_provider", provider,
                        "give either a token provider or sasl_oauthbearer_token_endpoint_url "
                        "(the built-in login), not both")
        if provider is None and given["sasl_oauthbearer_token_endpoint_url"] is not None:
            _check_oauth_login(given)
        elif provider is None or not callable(provider):
            raise fail("sasl_oauth_token_provider", provider,
                        "OAUTHBEARER needs an async callable returning an OAuthToken, or "
                        "sasl_oauthbearer_token_endpoint_url for the built-in login")
        else:
            _no_oauth_login(given, "a token provider of your own is given")
    else:
        for name in ("sasl_username", "sasl_password"):
            if not isinstance(given[name], str) or not given[name]:
                raise fail(name, "***" if name in SECRETS else given[name],
                            f"{mechanism} needs sasl_username and sasl_password")
        _no_oauth_login(given, f"sasl_mechanism is {mechanism}")


def delivery_timeout(given: Mapping[str, Any]) -> int:
    """Java's ``configureDeliveryTimeout``: a batch must get at least one full linger and one
    full request before it may expire."""
    floor: int = min(given["linger_ms"] + given["request_timeout_ms"], INT_MAX)
    if given["delivery_timeout_ms"] is None:
        return max(120000, floor)
    value = check_int("delivery_timeout_ms", given["delivery_timeout_ms"], 0, INT_MAX)
    if value < floor:
        raise fail(
            "delivery_timeout_ms",
            value,
            f"must be >= linger.ms + request.timeout.ms (linger_ms + request_timeout_ms) "
            f"= {given['linger_ms']} + {given['request_timeout_ms']} = {floor}",
        )
    return value

def idempotence(given: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Java's ``postProcessAndValidateIdempotenceConfigs``, minus the in-flight cap
    (KIP-1269)."""
    requested = given["enable_idempotence"]
    if requested is not None:
        check_bool("enable_idempotence", requested)
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
            raise fail(
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
        raise fail(
            "transactional_id",
            given["transactional_id"],
            "cannot be set without idempotence; "
            + (reason or "enable.idempotence (enable_idempotence) is False"),
        )
    return enabled, reason

def from_text(name: str, value: object, default: object) -> object:
    """Convert a property-file string to the type the field's default has."""
    if not isinstance(value, str) or name in ("bootstrap_servers", "acks"):
        return value
    text = value.strip()
    if name in BOOLS or name == "enable_idempotence":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise fail(name, value, 'expected "true" or "false"')
    if name == "sasl_oauthbearer_grant_type":
        return _JWT_RETRIEVERS.get(text, text)
    if name in FLOAT_RANGES:
        try:
            return float(text)
        except ValueError:
            raise fail(name, value, "expected a number") from None
    if name in INT_RANGES or name in ("delivery_timeout_ms", "compression_gzip_level"):
        try:
            return int(text)
        except ValueError:
            raise fail(name, value, "expected an integer") from None
    if name in CALLABLES or name == "interceptors":
        raise fail(
            name, value, "expected a Python callable/object; class names cannot be loaded"
        )
    if name in _OAUTH_LOGIN and not text and default is None:
        return None  # Java reads a blank OAuth setting as unset
    if name == "transactional_id" and not text and default is None:
        return None
    return value
