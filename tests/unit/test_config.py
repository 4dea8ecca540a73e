"""ProducerConfig: Java defaults, ranges, the idempotence/delivery-timeout rules, Java names."""

from __future__ import annotations

import dataclasses

import pytest

from aiokprod.config import ProducerConfig, java_name
from aiokprod.errors import ConfigError

BOOT = "localhost:9092"

# Java (Kafka 4.x) defaults, written out independently of the implementation.
JAVA_DEFAULTS: dict[str, object] = {
    "acks": -1,
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 16384,
    "buffer.memory": 33554432,
    "max.block.ms": 60000,
    "request.timeout.ms": 30000,
    "delivery.timeout.ms": 120000,
    "retries": 2147483647,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "max.in.flight.requests.per.connection": 5,
    "max.request.size": 1048576,
    "metadata.max.age.ms": 300000,
    "metadata.max.idle.ms": 300000,
    "compression.type": "none",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "partitioner.class": None,
    "partitioner.ignore.keys": False,
    "partitioner.adaptive.partitioning.enable": True,
    "partitioner.availability.timeout.ms": 0,
    "key.serializer": None,
    "value.serializer": None,
    "interceptor.classes": (),
    "transactional.id": None,
    "transaction.timeout.ms": 60000,
    "connections.max.idle.ms": 540000,
    "send.buffer.bytes": 131072,
    "receive.buffer.bytes": 32768,
    "security.protocol": "PLAINTEXT",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.ca.location": None,
    "ssl.certificate.location": None,
    "ssl.key.location": None,
    "ssl.key.password": None,
    "ssl.context": None,
    "sasl.mechanism": None,  # Java's GSSAPI (Kerberos) is not offered: it must be chosen
    "sasl.username": None,
    "sasl.password": None,
    "sasl.oauth.token.provider": None,
    "sasl.oauthbearer.token.endpoint.url": None,
    # Java's DefaultJwtRetriever: client credentials for an https:// endpoint
    "sasl.oauthbearer.jwt.retriever.class": "client_credentials",
    "sasl.oauthbearer.client.credentials.client.id": None,
    "sasl.oauthbearer.client.credentials.client.secret": None,
    "sasl.oauthbearer.scope": None,
    "sasl.oauthbearer.header.urlencode": False,
    "https.ca.location": None,  # librdkafka's name; Java reads the JAAS ssl options
    # Java leaves these two unset (no bound); every wait here has one
    "sasl.login.connect.timeout.ms": 10000,
    "sasl.login.read.timeout.ms": 10000,
    "sasl.login.retry.backoff.ms": 100,
    "sasl.login.retry.backoff.max.ms": 10000,
    "sasl.login.refresh.window.factor": 0.8,
    "sasl.login.refresh.window.jitter": 0.05,
    "sasl.login.refresh.min.period.seconds": 60,
    "sasl.login.refresh.buffer.seconds": 300,
    "sasl.oauthbearer.assertion.file": None,
    "sasl.oauthbearer.assertion.private.key.file": None,
    "sasl.oauthbearer.assertion.private.key.passphrase": None,
    "sasl.oauthbearer.assertion.algorithm": "RS256",
    "sasl.oauthbearer.assertion.claim.aud": None,
    "sasl.oauthbearer.assertion.claim.iss": None,
    "sasl.oauthbearer.assertion.claim.sub": None,
    "sasl.oauthbearer.assertion.claim.exp.seconds": 300,
    "sasl.oauthbearer.assertion.claim.nbf.seconds": 60,
    "sasl.oauthbearer.assertion.claim.jti.include": False,
    "sasl.oauthbearer.assertion.template.file": None,
    "socket.connection.setup.timeout.ms": 10000,
    "socket.connection.setup.timeout.max.ms": 30000,
    "metrics.sample.window.ms": 30000,
    "metrics.num.samples": 2,
    "metrics.recording.level": "INFO",
    "enable.metrics.push": True,
    "client.dns.lookup": "use_all_dns_ips",
    "metadata.recovery.strategy": "rebootstrap",  # Java's default since 4.0 (KIP-1102)
    "metadata.recovery.rebootstrap.trigger.ms": 300000,
}


def test_defaults_equal_javas() -> None:
    shown = ProducerConfig(bootstrap_servers=BOOT).to_java_names()
    for key, expected in JAVA_DEFAULTS.items():
        assert shown[key] == expected, key
    # Nothing configurable is missing from the table above (bootstrap/client id aside).
    assert set(shown) - set(JAVA_DEFAULTS) == {"bootstrap.servers", "client.id"}


def test_generated_client_ids_are_distinct_and_javas_shape() -> None:
    a = ProducerConfig(bootstrap_servers=BOOT).client_id
    b = ProducerConfig(bootstrap_servers=BOOT).client_id
    assert a != b
    assert a.startswith("aiokprod-producer-") and a.removeprefix("aiokprod-producer-").isdigit()
    assert ProducerConfig(bootstrap_servers=BOOT, client_id="me").client_id == "me"
    tx = ProducerConfig(bootstrap_servers=BOOT, transactional_id="tx-1")
    assert tx.client_id == "aiokprod-producer-tx-1"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("h1:1", ("h1:1",)),
        (" h1:1 , h2:2,", ("h1:1", "h2:2")),
        (["h1:1", "h2:2"], ("h1:1", "h2:2")),
        ("[::1]:9092", ("[::1]:9092",)),
        ("::1:9092", ("[::1]:9092",)),
    ],
)
def test_bootstrap_servers_normalised(given: str | list[str], expected: tuple[str, ...]) -> None:
    assert ProducerConfig(bootstrap_servers=given).bootstrap_servers == expected


@pytest.mark.parametrize("given", ["", " , ", "host", "host:", ":9092", "host:99999", "h:x1"])
def test_bad_bootstrap_servers_name_the_key(given: str) -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers \(bootstrap_servers\)"):
        ProducerConfig(bootstrap_servers=given)


@pytest.mark.parametrize(
    ("given", "expected"),
    [("all", -1), ("ALL", -1), ("-1", -1), (-1, -1), (0, 0), ("0", 0), (1, 1), ("1", 1)],
)
def test_acks_normalised(given: int | str, expected: int) -> None:
    cfg = ProducerConfig(bootstrap_servers=BOOT, acks=given, enable_idempotence=expected == -1)
    assert cfg.acks == expected


@pytest.mark.parametrize("given", [2, -2, "2", "some", True])
def test_bad_acks(given: object) -> None:
    with pytest.raises(ConfigError, match=r"acks \(acks\).*\"all\""):
        ProducerConfig(bootstrap_servers=BOOT, acks=given)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "bad", "allowed"),
    [
        ("batch_size", -1, "[0, "),
        ("linger_ms", -1, "[0, "),
        ("buffer_memory", -5, "[0, "),
        ("max_in_flight_requests_per_connection", 0, "[1, "),
        ("retries", -1, "[0, "),
        ("retries", 2**31, "2147483647]"),
        ("metadata_max_idle_ms", 4999, "[5000, "),
        ("compression_lz4_level", 18, "[1, 17]"),
        ("compression_zstd_level", 23, "[-131072, 22]"),
        ("compression_gzip_level", 0, "[1, 9]"),
        ("send_buffer_bytes", -2, "[-1, "),
        ("metrics_num_samples", 0, "[1, "),
        ("linger_ms", "5", "expected an integer"),
        ("linger_ms", 5.0, "expected an integer"),
        ("batch_size", True, "expected an integer"),
        ("partitioner_ignore_keys", 1, "True or False"),
        ("compression_type", "brotli", "none, gzip, snappy, lz4, zstd"),
        ("partitioner", "my.Partitioner", "callable"),
        ("key_serializer", 3, "callable"),
    ],
)
def test_out_of_range_values_name_key_value_and_rule(name: str, bad: object, allowed: str) -> None:
    with pytest.raises(ConfigError) as err:
        ProducerConfig(bootstrap_servers=BOOT, **{name: bad})  # type: ignore[arg-type]
    text = str(err.value)
    assert f"{java_name(name)} ({name})" in text
    assert repr(bad) in text
    assert allowed in text
    assert isinstance(err.value, ValueError)


def test_range_edges_are_accepted() -> None:
    cfg = ProducerConfig(
        bootstrap_servers=BOOT,
        batch_size=0,
        linger_ms=0,
        metadata_max_idle_ms=5000,
        compression_gzip_level=9,
        compression_lz4_level=1,
        compression_zstd_level=-131072,
        send_buffer_bytes=-1,
        connections_max_idle_ms=-1,
    )
    assert cfg.batch_size == 0 and cfg.compression_zstd_level == -131072


def test_compression_type_case_and_level_lookup() -> None:
    cfg = ProducerConfig(bootstrap_servers=BOOT, compression_type="ZSTD", compression_zstd_level=7)
    assert cfg.compression_type == "zstd"
    assert cfg.compression_level() == 7
    snappy = ProducerConfig(bootstrap_servers=BOOT, compression_type="snappy")
    assert snappy.compression_level() is None
    gzip = ProducerConfig(bootstrap_servers=BOOT, compression_type="gzip")
    assert gzip.compression_level() is None  # -1: the codec default (KIP-390)


def test_security_options_must_fit_the_protocol() -> None:
    ok = ProducerConfig(bootstrap_servers=BOOT, security_protocol="sasl_ssl",
                        sasl_mechanism="scram-sha-512", sasl_username="u", sasl_password="pw")
    assert ok.security_protocol == "SASL_SSL" and ok.sasl_mechanism == "SCRAM-SHA-512"
    with pytest.raises(ConfigError, match="sasl_mechanism.*required"):
        ProducerConfig(bootstrap_servers=BOOT, security_protocol="SASL_PLAINTEXT")
    with pytest.raises(ConfigError, match="sasl_password"):
        ProducerConfig(bootstrap_servers=BOOT, security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="PLAIN", sasl_username="u")
    with pytest.raises(ConfigError, match="SASL options need"):
        ProducerConfig(bootstrap_servers=BOOT, security_protocol="SSL",
                       sasl_mechanism="PLAIN", sasl_username="u", sasl_password="pw")
    with pytest.raises(ConfigError, match="TLS options need"):
        ProducerConfig(bootstrap_servers=BOOT, ssl_cafile="/ca.pem")
    with pytest.raises(ConfigError, match="needs ssl_certfile"):
        ProducerConfig(bootstrap_servers=BOOT, security_protocol="SSL", ssl_keyfile="/k.pem")
    with pytest.raises(ConfigError, match="OAUTHBEARER needs"):
        ProducerConfig(bootstrap_servers=BOOT, security_protocol="SASL_SSL",
                       sasl_mechanism="OAUTHBEARER")


def test_secrets_never_show_in_repr_or_java_names() -> None:
    config = ProducerConfig.from_mapping({
        "bootstrap.servers": BOOT, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.username": "alice", "sasl.password": "hunter2-secret",
        "ssl.ca.location": "/etc/ca.pem"})
    assert config.ssl_cafile == "/etc/ca.pem"  # confluent's name maps to ours
    assert "hunter2-secret" not in repr(config)
    assert "hunter2-secret" not in str(config.to_java_names())
    assert config.sasl_password == "hunter2-secret"


def test_unknown_security_protocol_lists_allowed() -> None:
    with pytest.raises(ConfigError, match="PLAINTEXT, SSL"):
        ProducerConfig(bootstrap_servers=BOOT, security_protocol="TLS")
    lower = ProducerConfig(bootstrap_servers=BOOT, security_protocol="plaintext")
    assert lower.security_protocol == "PLAINTEXT"


# -- idempotence (Java's postProcessAndValidateIdempotenceConfigs) ----------------------------


@pytest.mark.parametrize(("acks", "retries"), [(0, 5), (1, 5), ("all", 0)])
def test_explicit_idempotence_rejects_conflicts(acks: int | str, retries: int) -> None:
    with pytest.raises(ConfigError, match="enable_idempotence"):
        ProducerConfig(bootstrap_servers=BOOT, enable_idempotence=True, acks=acks, retries=retries)


@pytest.mark.parametrize(
    ("acks", "retries", "culprit"),
    [(0, 5, "acks=0"), (1, 5, "acks=1"), ("all", 0, "retries=0")],
)
def test_implicit_idempotence_is_disabled_silently_with_reason(
    acks: int | str, retries: int, culprit: str
) -> None:
    cfg = ProducerConfig(bootstrap_servers=BOOT, acks=acks, retries=retries)
    assert cfg.enable_idempotence is False
    assert cfg.idempotence_disabled_reason is not None
    assert culprit in cfg.idempotence_disabled_reason


def test_idempotence_default_on_without_reason() -> None:
    cfg = ProducerConfig(bootstrap_servers=BOOT)
    assert cfg.enable_idempotence is True and cfg.idempotence_disabled_reason is None
    off = ProducerConfig(bootstrap_servers=BOOT, enable_idempotence=False, acks=1)
    assert off.enable_idempotence is False and off.idempotence_disabled_reason is None


def test_in_flight_above_five_allowed_with_idempotence_kip_1269() -> None:
    # Java < KIP-1269 raises here; KIP-1269 moves the limit to a per-partition check.
    cfg = ProducerConfig(
        bootstrap_servers=BOOT, enable_idempotence=True, max_in_flight_requests_per_connection=20
    )
    assert cfg.enable_idempotence and cfg.max_in_flight_requests_per_connection == 20


def test_transactional_id_requires_idempotence() -> None:
    with pytest.raises(ConfigError, match=r"transactional\.id \(transactional_id\)"):
        ProducerConfig(bootstrap_servers=BOOT, transactional_id="t", enable_idempotence=False)
    with pytest.raises(ConfigError, match="acks=1"):
        ProducerConfig(bootstrap_servers=BOOT, transactional_id="t", acks=1)
    assert ProducerConfig(bootstrap_servers=BOOT, transactional_id="t").transactional_id == "t"


# -- delivery.timeout.ms (Java's configureDeliveryTimeout) -----------------------------------


def test_default_delivery_timeout_is_raised_to_linger_plus_request() -> None:
    cfg = ProducerConfig(bootstrap_servers=BOOT, linger_ms=1000, request_timeout_ms=200000)
    assert cfg.delivery_timeout_ms == 201000


def test_explicit_delivery_timeout_too_small_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"delivery\.timeout\.ms.*>= linger\.ms \+ request"):
        ProducerConfig(bootstrap_servers=BOOT, delivery_timeout_ms=30004)
    ok = ProducerConfig(bootstrap_servers=BOOT, delivery_timeout_ms=30005)
    assert ok.delivery_timeout_ms == 30005


# -- replace, equality --------------------------------------------------------------------------


def test_replace_keeps_everything_else_and_revalidates() -> None:
    cfg = ProducerConfig(bootstrap_servers="a:1,b:2", acks="all", client_id="c")
    new = dataclasses.replace(cfg, linger_ms=50)
    assert new.linger_ms == 50
    assert new.bootstrap_servers == ("a:1", "b:2") and new.client_id == "c" and new.acks == -1
    assert dataclasses.replace(new, linger_ms=5) == cfg
    with pytest.raises(ConfigError, match="linger"):
        dataclasses.replace(cfg, linger_ms=-1)


def test_replace_treats_carried_values_as_explicit() -> None:
    # Documented: replace passes enable_idempotence=True back in, so a conflict is loud.
    cfg = ProducerConfig(bootstrap_servers=BOOT)
    with pytest.raises(ConfigError, match="enable_idempotence"):
        dataclasses.replace(cfg, acks=0)
    assert dataclasses.replace(cfg, acks=0, enable_idempotence=False).acks == 0


def test_kwargs_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        ProducerConfig(BOOT)  # type: ignore[call-arg]
    cfg = ProducerConfig(bootstrap_servers=BOOT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.linger_ms = 1  # type: ignore[misc]


def test_interceptors_become_a_tuple() -> None:
    marker = object()
    cfg = ProducerConfig(bootstrap_servers=BOOT, interceptors=[marker])
    assert cfg.interceptors == (marker,)


# -- from_mapping ---------------------------------------------------------------------------------


def test_from_mapping_reads_java_property_strings() -> None:
    cfg = ProducerConfig.from_mapping(
        {
            "bootstrap.servers": "h1:1,h2:2",
            "linger.ms": "20",
            "batch.size": " 32768 ",
            "enable.idempotence": "false",
            "acks": "1",
            "partitioner.ignore.keys": "TRUE",
            "compression.type": "lz4",
            "max.in.flight.requests.per.connection": "10",
            "delivery.timeout.ms": "60000",
        }
    )
    assert cfg.bootstrap_servers == ("h1:1", "h2:2")
    assert (cfg.linger_ms, cfg.batch_size, cfg.acks) == (20, 32768, 1)
    assert cfg.enable_idempotence is False and cfg.partitioner_ignore_keys is True
    assert cfg.compression_type == "lz4" and cfg.max_in_flight_requests_per_connection == 10
    assert cfg.delivery_timeout_ms == 60000


def test_from_mapping_accepts_python_names_and_objects() -> None:
    def part(topic: str, key: bytes | None, parts: object, avail: object) -> int:
        return 0

    cfg = ProducerConfig.from_mapping(
        {"bootstrap_servers": ["h:1"], "linger_ms": 7, "partitioner.class": part}
    )
    assert cfg.linger_ms == 7 and cfg.partitioner is part


def test_from_mapping_round_trips_to_java_names() -> None:
    cfg = ProducerConfig(bootstrap_servers="h:1", linger_ms=9, acks=1, enable_idempotence=False)
    assert ProducerConfig.from_mapping(cfg.to_java_names()) == cfg


def test_from_mapping_unknown_key_suggests_closest() -> None:
    with pytest.raises(ConfigError, match=r"'linger\.mss'.*did you mean 'linger\.ms'"):
        ProducerConfig.from_mapping({"bootstrap.servers": BOOT, "linger.mss": "5"})
    with pytest.raises(ConfigError, match="Unknown configuration 'zzz'$"):
        ProducerConfig.from_mapping({"bootstrap.servers": BOOT, "zzz": "5"})


def test_from_mapping_bad_strings_and_duplicates() -> None:
    with pytest.raises(ConfigError, match=r"linger\.ms \(linger_ms\).*integer"):
        ProducerConfig.from_mapping({"bootstrap.servers": BOOT, "linger.ms": "soon"})
    with pytest.raises(ConfigError, match=r"enable\.idempotence.*\"true\" or \"false\""):
        ProducerConfig.from_mapping({"bootstrap.servers": BOOT, "enable.idempotence": "yes"})
    with pytest.raises(ConfigError, match="class names cannot be loaded"):
        ProducerConfig.from_mapping(
            {"bootstrap.servers": BOOT, "key.serializer": "org.apache.kafka.StringSerializer"}
        )
    with pytest.raises(ConfigError, match="given twice"):
        ProducerConfig.from_mapping({"bootstrap.servers": BOOT, "linger.ms": 1, "linger_ms": 2})


def test_metadata_recovery_settings() -> None:
    cfg = ProducerConfig(bootstrap_servers=BOOT, metadata_recovery_strategy=" NONE ",
                         metadata_recovery_rebootstrap_trigger_ms=0)
    assert cfg.metadata_recovery_strategy == "none"
    assert cfg.metadata_recovery_rebootstrap_trigger_ms == 0
    with pytest.raises(ConfigError, match=r"metadata\.recovery\.strategy"):
        ProducerConfig(bootstrap_servers=BOOT, metadata_recovery_strategy="rebootstrap_now")
    with pytest.raises(ConfigError, match=r"metadata\.recovery\.rebootstrap\.trigger\.ms"):
        ProducerConfig(bootstrap_servers=BOOT, metadata_recovery_rebootstrap_trigger_ms=-1)
    java = ProducerConfig.from_mapping({"bootstrap.servers": BOOT,
                                        "metadata.recovery.strategy": "none"})
    assert java.metadata_recovery_strategy == "none"


@pytest.mark.parametrize(("key", "instead"), [
    ("ssl.truststore.location", "ssl.ca.location"),
    ("ssl.truststore.password", "ssl.ca.location"),
    ("ssl.keystore.location", "ssl.certificate.location and ssl.key.location"),
])
def test_java_key_stores_are_refused_with_what_to_give_instead(key: str, instead: str) -> None:
    # the closest known name to ssl.truststore.location is ssl.certificate.location, the
    # client's own certificate: suggesting it sent users to the wrong setting
    with pytest.raises(ConfigError) as err:
        ProducerConfig.from_mapping({"bootstrap.servers": BOOT, key: "/etc/kafka/x.jks"})
    text = str(err.value)
    assert f"{key!r}" in text and "not supported" in text and "PEM" in text
    assert instead in text
    assert "did you mean" not in text
    if "truststore" in key:
        assert "ssl.certificate.location" not in text


def test_an_unknown_name_still_gets_the_closest_known_one() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'linger\.ms'\?"):
        ProducerConfig.from_mapping({"bootstrap.servers": BOOT, "linger.msx": "5"})
