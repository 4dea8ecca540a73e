"""What the sink accepts: its options and the DataFrame's columns, checked on the driver.

Everything here runs when Spark builds the writer (``DataSource.writer`` / ``streamWriter``), in
the driver's Python worker, before any task starts: a wrong option or column fails the
``save()`` / ``start()`` call with a message naming it, not every task on every executor.

The shape follows Spark's built-in Kafka sink (``KafkaWriter`` in spark-sql-kafka), so a
pipeline moves over by changing ``format("kafka")`` to ``format("aiokprod")``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NullType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from aiokprod.config import ProducerConfig, java_name
from aiokprod.errors import ConfigError
from aiokprod.settings import PlainSettings

if sys.version_info >= (3, 12):
    from typing import Unpack
else:  # PEP 692's Unpack for **kwargs is in typing from 3.12
    from typing_extensions import Unpack

__all__ = ["COLUMNS", "SinkSettings", "settings_from", "sink_options"]

KAFKA_PREFIX = "kafka."
# The DataFrame columns the sink reads, as in Spark's Kafka sink.
COLUMNS = ("key", "value", "topic", "partition", "headers", "timestamp")

# Java producer settings that a string option cannot carry, or that the sink owns.
_UNSUPPORTED = {
    "key.serializer": "keys are written as the bytes of the key column (binary, or UTF-8 of a "
                      "string); cast the column instead",
    "value.serializer": "values are written as the bytes of the value column (binary, or UTF-8 "
                        "of a string); cast the column instead",
    "interceptor.classes": "interceptors are Python objects; they cannot be given as a string "
                           "option",
    "partitioner.class": "a partitioner is a Python callable; use the partition column for "
                         "explicit partitions",
    "ssl_context": "an SSLContext cannot be given as a string option; use kafka.ssl.ca.location, "
                   "kafka.ssl.certificate.location and kafka.ssl.key.location",
    "sasl.oauth.token.provider": "a token provider is a Python callable; it cannot be given as "
                                 "a string option",
    "transactional.id": "the sink derives a transactional id per task attempt itself; use the "
                        "option 'transactional' = 'true' (and 'transactional.id.prefix' for "
                        "prefixed ACLs)",
}

# Java's JAAS login modules whose username/password map onto sasl.username / sasl.password.
_JAAS_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                 "org.apache.kafka.common.security.scram.ScramLoginModule")
_JAAS = re.compile(r'^\s*(?P<module>[\w.$]+)\s+required\b(?P<options>.*?);?\s*$', re.DOTALL)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

# The transactional mode's own options (docs/spark.md, "Exactly-once").
TRANSACTIONAL = "transactional"
ID_PREFIX = "transactional.id.prefix"
MARKER_TOPIC = "transactional.marker.topic"
WRITE_ID = "transactional.write.id"
#: The transactional mode's transaction.timeout.ms unless ``kafka.transaction.timeout.ms`` is
#: given: a task's transaction lives until the driver commits the whole write, so the
#: producer's 60 s would fail any write of several waves of tasks; 15 minutes is the broker's
#: default transaction.max.timeout.ms.
SINK_TRANSACTION_TIMEOUT_MS = 900_000
DEFAULT_ID_PREFIX = "aiokprod-spark"
#: The sink's ``batch.size`` unless ``kafka.batch.size`` is given (the producer's is 16 KiB).
SINK_BATCH_SIZE = 262_144
#: The sink's ``send.buffer.bytes`` unless ``kafka.send.buffer.bytes`` is given: -1, the
#: operating system's own (on Linux autotuned up to ``net.ipv4.tcp_wmem``'s maximum). The
#: producer's 128 KiB (Java's) holds a quarter of one of the sink's requests (four 256 KiB
#: batches), so each request took several writes, each a wake-up of the loop and a copy of the
#: rest into asyncio's buffer: docs/spark.md, "Options".
SINK_SEND_BUFFER_BYTES = -1

# Options Spark itself passes to a streaming sink; they are Spark's, not ours.
_SPARK_OWNED = frozenset({"checkpointlocation", "queryname", "path"})


# Producer settings whose values never appear in a repr or a log line.
_SECRET_SETTINGS = frozenset({"sasl.password", "ssl.key.password"})


@dataclass(frozen=True, repr=False)
class SinkSettings:
    """Everything a task needs, checked on the driver and pickled to the executors."""

    # Java producer settings (the ``kafka.`` prefix removed), sorted: also the cache key that
    # lets tasks of one worker share a producer.
    producer_config: tuple[tuple[str, str], ...]
    # the ``topic`` option; it overrides a topic column, as in Spark's Kafka sink
    topic: str | None
    # which of COLUMNS the DataFrame has
    columns: tuple[str, ...]
    # option 'transactional': one Kafka transaction per task, exactly-once for read_committed
    # consumers (aiokprod.spark._transactional)
    transactional: bool = False
    # the transactional ids and marker groups start with it (prefixed ACLs)
    id_prefix: str = DEFAULT_ID_PREFIX
    # the topic whose partition 0 keys the commit markers: Kafka refuses offsets of a topic it
    # does not have, and the sink's own topic is one it has
    marker_topic: str | None = None
    # batch writes: made on the driver for one save() (or the 'transactional.write.id'
    # option, stable across re-runs of a job), naming its tasks' transactional ids and
    # markers; None for streaming, where the query id (kept in the checkpoint) does
    write_id: str | None = None
    # batch writes: made on the driver for each save(), even one with a write id: names the
    # marker by which the driver's abort() tells this run's late tasks to write nothing
    run_id: str | None = None
    # the 'value.' / 'key.' Schema Registry options (prefix removed), sorted; set when the
    # column is a struct written as Confluent-framed Avro (aiokprod.spark._registry)
    value_registry: tuple[tuple[str, str], ...] | None = None
    key_registry: tuple[tuple[str, str], ...] | None = None

    @property
    def transaction_timeout_ms(self) -> int:
        """The coordinator aborts a task's transaction this long after its first record."""
        return int(dict(self.producer_config).get("transaction.timeout.ms",
                                                  SINK_TRANSACTION_TIMEOUT_MS))

    def __repr__(self) -> str:
        shown = {k: "***" if k in _SECRET_SETTINGS else v for k, v in self.producer_config}
        mode = f", transactional={self.id_prefix!r}" if self.transactional else ""
        registry = "".join(f", {what}=avro via {dict(options).get('schema.registry.url')}"
                           for what, options in (("value", self.value_registry),
                                                 ("key", self.key_registry)) if options)
        return (f"SinkSettings(producer={shown}, topic={self.topic!r}, "
                f"columns={self.columns}{mode}{registry})")


def settings_from(options: Mapping[str, str], schema: StructType) -> SinkSettings:
    """Check the options and the schema; raise ``ConfigError`` / ``ValueError`` naming the culprit.

    Spark lower-cases option names (its options map is case-insensitive); Java's producer
    settings are lower-case already, so ``kafka.linger.ms`` arrives as written.
    """
    producer: dict[str, str] = {}
    jaas: dict[str, str] = {}
    topic: str | None = None
    transactional = False
    id_prefix, marker_topic, write_id = DEFAULT_ID_PREFIX, None, None
    registry: dict[str, dict[str, str]] = {"value": {}, "key": {}}
    for name, value in options.items():
        key = name.lower()
        column, _, rest = key.partition(".")
        if column in registry and rest:
            registry[column][rest] = value
        elif key.startswith(KAFKA_PREFIX):
            java = key[len(KAFKA_PREFIX):]
            reason = _UNSUPPORTED.get(java)
            if reason is not None:
                raise ConfigError(f"aiokprod sink: option {name!r} is not supported: {reason}")
            if java == "sasl.jaas.config":
                jaas = _from_jaas(value)
            else:
                producer[java] = value
        elif key == "topic":
            topic = value
        elif key == TRANSACTIONAL:
            if value.strip().lower() not in ("true", "false"):
                raise ConfigError(
                    f"aiokprod sink: option 'transactional' must be 'true' or 'false', got "
                    f"{value!r}")
            transactional = value.strip().lower() == "true"
        elif key == ID_PREFIX:
            id_prefix = value.strip()
            if not id_prefix:
                raise ConfigError(f"aiokprod sink: option {ID_PREFIX!r} must not be empty")
        elif key == MARKER_TOPIC:
            marker_topic = value.strip() or None
        elif key == WRITE_ID:
            write_id = value.strip()
            if not write_id:
                raise ConfigError(f"aiokprod sink: option {WRITE_ID!r} must not be empty")
        elif key not in _SPARK_OWNED:
            raise ConfigError(
                f"aiokprod sink: unknown option {name!r}; producer settings take the 'kafka.' "
                f"prefix (e.g. 'kafka.{key}'), Schema Registry options 'value.' or 'key.' "
                f"(e.g. 'value.schema.registry.url'), and the sink's own options are 'topic', "
                f"'transactional', {ID_PREFIX!r}, {MARKER_TOPIC!r} and {WRITE_ID!r}")
    if jaas:
        if "sasl.username" in producer or "sasl.password" in producer:
            raise ConfigError("aiokprod sink: give either 'kafka.sasl.jaas.config' or "
                              "'kafka.sasl.username' / 'kafka.sasl.password', not both")
        producer.update(jaas)
    if "bootstrap.servers" not in producer:
        raise ConfigError("aiokprod sink: option 'kafka.bootstrap.servers' is required")
    # a task writes whole Arrow batches: bigger record batches than the producer's 16 KiB
    # default cost less per row in the worker and the broker, and requests of such batches
    # want a socket buffer bigger than the producer's 128 KiB (docs/spark.md, "Options")
    producer.setdefault("batch.size", str(SINK_BATCH_SIZE))
    producer.setdefault("send.buffer.bytes", str(SINK_SEND_BUFFER_BYTES))
    if transactional:
        producer.setdefault("transaction.timeout.ms", str(SINK_TRANSACTION_TIMEOUT_MS))
    try:
        ProducerConfig.from_mapping(producer)
        if transactional:  # what each task's producer will be: e.g. idempotence switched off
            ProducerConfig.from_mapping({**producer, "transactional.id": id_prefix})
    except ConfigError as exc:
        raise ConfigError(f"aiokprod sink: bad producer option (given with the 'kafka.' "
                          f"prefix): {exc}") from exc
    value_registry = _registry_options("value", registry["value"])
    key_registry = _registry_options("key", registry["key"])
    columns = _check_schema(schema, topic, registered={
        name for name, given in (("value", value_registry), ("key", key_registry)) if given})
    if transactional:
        marker_topic = marker_topic or topic
        if marker_topic is None:
            raise ConfigError(
                f"aiokprod sink: option 'transactional'='true' needs a topic for its commit "
                f"markers: give the 'topic' option, or {MARKER_TOPIC!r} (an existing topic the "
                f"sink may commit a consumer group's offsets for) when rows name their topics")
    elif (id_prefix, marker_topic, write_id) != (DEFAULT_ID_PREFIX, None, None):
        raise ConfigError(f"aiokprod sink: options {ID_PREFIX!r}, {MARKER_TOPIC!r} and "
                          f"{WRITE_ID!r} need 'transactional'='true'")
    return SinkSettings(tuple(sorted(producer.items())), topic, columns, transactional,
                        id_prefix, marker_topic if transactional else None, write_id,
                        value_registry=value_registry, key_registry=key_registry)


def _registry_options(column: str, given: dict[str, str]
                      ) -> tuple[tuple[str, str], ...] | None:
    """The ``value.`` / ``key.`` options, checked here so a typo fails ``save()`` once."""
    if not given:
        return None
    from aiokprod.spark._registry import check_registry_options

    if "schema.registry.url" not in given:
        raise ConfigError(f"aiokprod sink: options {sorted(f'{column}.{k}' for k in given)} "
                          f"need '{column}.schema.registry.url'")
    try:
        check_registry_options(given, is_key=column == "key")
    except ValueError as exc:
        raise ConfigError(f"aiokprod sink: bad '{column}.' Schema Registry option: "
                          f"{exc}") from exc
    return tuple(sorted(given.items()))


def sink_options(bootstrap_servers: str | Sequence[str], *, topic: str | None = None,
                 **settings: Unpack[PlainSettings]) -> dict[str, str]:
    """The sink's options built from typed settings: ``.options(**sink_options(...))``.

    Spark options are strings looked up by name (``.option("kafka.linger.ms", "5")``), which no
    type checker can follow. This takes the settings ``Producer`` takes, typed the same way
    (``PlainSettings``: those a string can carry), so a misspelt setting or a value outside its
    set is a type error in the job's code, and writes each as ``kafka.<java name>`` the way a
    properties file holds it. ``None`` means the setting's default and is left out.
    """
    servers = bootstrap_servers if isinstance(bootstrap_servers, str) \
        else ",".join(bootstrap_servers)
    options = {f"{KAFKA_PREFIX}bootstrap.servers": servers}
    for name, value in settings.items():
        if value is not None:
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            options[KAFKA_PREFIX + java_name(name)] = text
    if topic is not None:
        options["topic"] = topic
    return options


def _from_jaas(config: str) -> dict[str, str]:
    """``kafka.sasl.jaas.config`` as Spark users write it, for PLAIN and SCRAM.

    Java configures SASL credentials through a JAAS line (``...PlainLoginModule required
    username="u" password="p";``); aiokprod takes ``sasl.username`` / ``sasl.password``. Error
    messages never repeat the line: it holds the password.
    """
    match = _JAAS.match(config)
    if match is None or match["module"] not in _JAAS_MODULES:
        module = match["module"] if match is not None else "an unreadable line"
        raise ConfigError(
            f"aiokprod sink: option 'kafka.sasl.jaas.config' names {module}; only "
            f"PlainLoginModule and ScramLoginModule (username and password) are supported")
    options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(match["options"])}
    if "username" not in options or "password" not in options:
        raise ConfigError("aiokprod sink: option 'kafka.sasl.jaas.config' needs "
                          'username="..." and password="..."')
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def _check_schema(schema: StructType, topic_option: str | None,
                  registered: frozenset[str] | set[str] = frozenset()) -> tuple[str, ...]:
    by_name = {f.name: f.dataType for f in schema.fields}
    extra = [name for name in by_name if name not in COLUMNS]
    if extra:
        raise ValueError(
            f"aiokprod sink: column(s) {extra} are not written to Kafka; select only "
            f"{list(COLUMNS)} (value is required)")
    if "value" not in by_name:
        raise ValueError("aiokprod sink: the DataFrame needs a 'value' column (binary or string)")
    for name in ("value", "key"):
        if name in registered:
            if name not in by_name or not isinstance(by_name[name], StructType):
                raise ValueError(_wrong_type(name, by_name.get(name, NullType()),
                                             "struct (written as Avro through the registry)"))
            _check_struct_fields(name, by_name[name])
        elif name in by_name and not isinstance(by_name[name], (BinaryType, StringType)):
            raise ValueError(_wrong_type(name, by_name[name], "binary or string"))
    if "topic" in by_name and not isinstance(by_name["topic"], StringType):
        raise ValueError(_wrong_type("topic", by_name["topic"], "string"))
    if "topic" not in by_name and topic_option is None:
        raise ValueError("aiokprod sink: no topic: give the 'topic' option or a 'topic' column")
    if "partition" in by_name and not isinstance(by_name["partition"], IntegerType):
        raise ValueError(_wrong_type("partition", by_name["partition"], "int"))
    if "timestamp" in by_name and not isinstance(by_name["timestamp"], TimestampType):
        raise ValueError(_wrong_type("timestamp", by_name["timestamp"], "timestamp"))
    if "headers" in by_name and not _is_headers_type(by_name["headers"]):
        raise ValueError(_wrong_type("headers", by_name["headers"],
                                     "array<struct<key: string, value: binary>>"))
    return tuple(name for name in COLUMNS if name in by_name)


_AVRO_FIELD_TYPES = (BooleanType, ByteType, ShortType, IntegerType, LongType, FloatType,
                     DoubleType, StringType, BinaryType)


def _check_struct_fields(column: str, struct: DataType) -> None:
    """The registry path encodes structs of primitive fields (aiokprod.schema_registry.
    avro_columns): anything else is named here, on the driver."""
    assert isinstance(struct, StructType)
    for field in struct.fields:
        if not isinstance(field.dataType, _AVRO_FIELD_TYPES):
            raise ValueError(
                f"aiokprod sink: field {column}.{field.name} has type "
                f"{field.dataType.simpleString()}; the Schema Registry path writes structs of "
                f"boolean, byte, short, int, long, float, double, string and binary fields")


def _is_headers_type(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in data_type.elementType.fields}
    return (set(fields) == {"key", "value"} and isinstance(fields["key"], StringType)
            and isinstance(fields["value"], BinaryType))


def _wrong_type(column: str, got: DataType, expected: str) -> str:
    return (f"aiokprod sink: column {column!r} has type {got.simpleString()}, expected "
            f"{expected}")
