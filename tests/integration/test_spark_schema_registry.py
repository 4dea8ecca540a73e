"""The PySpark sink's Schema Registry path: struct ``value``/``key`` columns written as Avro in
the Confluent wire format, under a real local Spark, to Tansu, through the test's Apicurio
Registry; read back with confluent-kafka's consumer and its ``AvroDeserializer``."""

from __future__ import annotations

import io
from collections.abc import Callable

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from aiokprod.devbroker import TansuBroker
from aiokprod.errors import ConfigError
from aiokprod.schema_registry.avro_columns import AvroColumnEncoder, avro_schema_for
from aiokprod.spark._options import settings_from
from support.reader import read_back
from support.schema_registry_server import RegistryServer


def test_struct_values_and_keys_through_the_registry(
        spark: SparkSession, tansu: TansuBroker, new_topic: Callable[..., str],
        schema_registry: RegistryServer) -> None:
    topic = new_topic(partitions=2)
    rows = 2_000
    # one task: Tansu can lose one of two producers' first batches to a new partition
    # (test_spark_sink.py's docstring)
    df = spark.range(0, rows, 1, 1).selectExpr(
        "named_struct('id', id) as key",
        "named_struct('id', id, 'name', concat('n', cast(id as string)), "
        "'amount', cast(id as double) / 4, 'paid', id % 2 = 0, "
        "'note', case when id % 3 = 0 then null else 'x' end) as value")
    (df.write.format("aiokprod").option("kafka.bootstrap.servers", tansu.bootstrap)
     .option("topic", topic)
     .option("value.schema.registry.url", schema_registry.url)
     .option("value.basic.auth.user.info", schema_registry.user_info)
     .option("value.avro.record.name", "Order").option("value.avro.namespace", "shop")
     .option("key.schema.registry.url", schema_registry.url)
     .option("key.basic.auth.user.info", schema_registry.user_info)
     .mode("append").save())
    registry = ConfluentRegistry({"url": schema_registry.url,
                                  "basic.auth.user.info": schema_registry.user_info})
    decode = AvroDeserializer(registry)
    records = read_back(tansu.bootstrap, topic, expected=rows)
    got = sorted((decode(r.key, SerializationContext(topic, MessageField.KEY))["id"],
                  decode(r.value, SerializationContext(topic, MessageField.VALUE)))
                 for r in records)
    assert len(got) == rows
    assert [k for k, _ in got] == list(range(rows))
    for i, value in got:
        assert value == {"id": i, "name": f"n{i}", "amount": i / 4, "paid": i % 2 == 0,
                         "note": None if i % 3 == 0 else "x"}
    latest = registry.get_latest_version(f"{topic}-value")
    assert '"name":"Order"' in latest.schema.schema_str.replace(" ", "")


def test_registry_options_are_checked_on_the_driver() -> None:
    schema = StructType([StructField("value", StructType([StructField("id", LongType())]))])
    base = {"kafka.bootstrap.servers": "h:1", "topic": "t"}
    settings = settings_from({**base, "value.schema.registry.url": "http://r:8081",
                              "value.auto.register.schemas": "false"}, schema)
    assert settings.value_registry == (("auto.register.schemas", "false"),
                                       ("schema.registry.url", "http://r:8081"))
    with pytest.raises(ConfigError, match="need 'value.schema.registry.url'"):
        settings_from({**base, "value.auto.register.schemas": "false"}, schema)
    with pytest.raises(ConfigError, match="unknown schema registry client option"):
        settings_from({**base, "value.schema.registry.url": "http://r",
                       "value.schema.registry.colour": "blue"}, schema)
    with pytest.raises(ConfigError, match="use.latest.version is not supported"):
        settings_from({**base, "value.schema.registry.url": "http://r",
                       "value.use.latest.version": "true"}, schema)
    with pytest.raises(ValueError, match="expected binary or string"):
        settings_from(base, schema)  # a struct without the registry options
    nested = StructType([StructField("value", StructType([
        StructField("tags", StructType([StructField("a", StringType())]))]))])
    with pytest.raises(ValueError, match="field value.tags has type struct"):
        settings_from({**base, "value.schema.registry.url": "http://r"}, nested)
    binary = StructType([StructField("value", BinaryType())])
    with pytest.raises(ValueError, match="expected struct"):
        settings_from({**base, "value.schema.registry.url": "http://r"}, binary)


def test_column_encoding_is_fastavros_row_by_row() -> None:
    """Every supported type, nulls at both levels, a sliced column: the same bytes as
    fastavro's per-row encoder."""
    n = 3_000
    fields = [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("big", pa.int64(), nullable=False),
        pa.field("small", pa.int32(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64(), nullable=False),
        pa.field("score", pa.float32()),
        pa.field("paid", pa.bool_()),
        pa.field("blob", pa.binary(), nullable=False),
        pa.field("maybe", pa.int64()),
    ]
    arrays = [
        pa.array(range(n), pa.int64()),
        pa.array([(-1) ** i * (i * 1_000_003) ** 2 for i in range(n)], pa.int64()),
        pa.array([i % 300 - 150 for i in range(n)], pa.int32()),
        pa.array([None if i % 5 == 0 else f"name-{i}-ä" for i in range(n)], pa.string()),
        pa.array([i * 0.25 for i in range(n)], pa.float64()),
        pa.array([None if i % 4 == 0 else 0.5 for i in range(n)], pa.float32()),
        pa.array([None if i % 7 == 0 else i % 2 == 0 for i in range(n)], pa.bool_()),
        pa.array([bytes([i % 256]) * (i % 3) for i in range(n)], pa.binary()),
        pa.array([None if i % 2 else -i for i in range(n)], pa.int64()),
    ]
    column = pa.StructArray.from_arrays(arrays, fields=fields,
                                        mask=pa.array([i % 11 == 0 for i in range(n)]))
    column = column.slice(7, n - 20)
    header = b"\x00\x00\x00\x01\x02"
    encoded = AvroColumnEncoder(column.type).encode(column, header).to_pylist()
    parsed = fastavro.parse_schema(avro_schema_for(column.type))
    for row, got in zip(column.to_pylist(), encoded, strict=True):
        if row is None:
            assert got is None
            continue
        expected = io.BytesIO()
        fastavro.schemaless_writer(expected, parsed, row)
        assert got == header + expected.getvalue(), row
