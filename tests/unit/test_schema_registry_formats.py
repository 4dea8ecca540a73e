"""The Schema Registry serializers' pure parts: the wire header, option names, subject names,
and each format's encoding (a registry is not needed once the header is known)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from aiokprod.schema_registry import (
    SchemaRegistryClient,
    SerializerConfig,
    parse_strategy,
    wire_header,
)
from aiokprod.schema_registry.subjects import subject_name

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "note", "type": ["null", "string"]}]}


def test_wire_header_is_magic_zero_and_a_big_endian_id() -> None:
    assert wire_header(1) == b"\x00\x00\x00\x00\x01"
    assert wire_header(0x01020304) == b"\x00\x01\x02\x03\x04"


@pytest.mark.parametrize(("name", "strategy"), [
    ("io.confluent.kafka.serializers.subject.TopicNameStrategy", "topic"),
    ("RecordNameStrategy", "record"),
    ("io.confluent.kafka.serializers.subject.TopicRecordNameStrategy", "topic_record"),
    ("topic_record", "topic_record"),
])
def test_strategies_by_java_class_name_or_short_name(name: str, strategy: str) -> None:
    assert parse_strategy(name) == strategy


def test_subject_names() -> None:
    assert subject_name("topic", "orders", False, "shop.Order") == "orders-value"
    assert subject_name("topic", "orders", True, None) == "orders-key"
    assert subject_name("record", "orders", False, "shop.Order") == "shop.Order"
    assert subject_name("topic_record", "orders", False, "shop.Order") == "orders-shop.Order"
    with pytest.raises(ValueError, match="named record"):
        subject_name("record", "orders", False, None)
    with pytest.raises(ValueError, match="unknown subject name strategy"):
        parse_strategy("io.confluent.Whatever")


def test_serializer_options_take_javas_names() -> None:
    cfg = SerializerConfig.from_options({
        "auto.register.schemas": "false", "use.latest.version": "true",
        "normalize.schemas": True,
        "key.subject.name.strategy": "io.confluent.kafka.serializers.subject."
                                     "RecordNameStrategy",
        "value.subject.name.strategy": "TopicRecordNameStrategy"}, is_key=True)
    assert cfg == SerializerConfig(auto_register_schemas=False, use_latest_version=True,
                                   normalize_schemas=True, subject_name_strategy="record")
    with pytest.raises(ValueError, match="unknown serializer option"):
        SerializerConfig.from_options({"auto.register.schema": "true"})
    with pytest.raises(ValueError, match="true or false"):
        SerializerConfig.from_options({"use.latest.version": "maybe"})


def test_client_options_take_confluent_and_java_names() -> None:
    client = SchemaRegistryClient.from_config({
        "schema.registry.url": "http://127.0.0.1:1,http://127.0.0.1:2",
        "basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": "u:p",
        "max.retries": "1", "retries.wait.ms": 5, "timeout": 2.5})
    assert client._urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert client._headers["Authorization"] == "Basic dTpw"
    assert (client._timeout_ms, client._max_retries, client._wait_ms) == (2500, 1, 5)
    bearer = SchemaRegistryClient.from_config({
        "url": "https://r", "bearer.auth.credentials.source": "STATIC_TOKEN",
        "bearer.auth.token": "t0k"})
    assert bearer._headers["Authorization"] == "Bearer t0k"
    with pytest.raises(ValueError, match="not both"):
        SchemaRegistryClient("http://r", basic_auth_user_info="u:p", bearer_token="t")
    with pytest.raises(ValueError, match="unknown schema registry client option"):
        SchemaRegistryClient.from_config({"url": "http://x", "ssl.keystore.location": "k"})
    with pytest.raises(ValueError, match="only USER_INFO"):
        SchemaRegistryClient.from_config({"url": "http://x",
                                          "basic.auth.credentials.source": "SASL_INHERIT"})
    with pytest.raises(ValueError, match="http:// or https://"):
        SchemaRegistryClient("127.0.0.1:8081")


def _ready(serializer: Any, topic: str, schema_id: int) -> None:
    serializer._headers[topic] = wire_header(schema_id) + serializer.format.message_indexes


def test_avro_encodes_as_fastavro_reads_and_needs_the_topic() -> None:
    fastavro = pytest.importorskip("fastavro")
    from aiokprod.schema_registry import avro

    serializer = avro.AvroSerializer(SchemaRegistryClient("http://127.0.0.1:1"), ORDER)
    record = {"id": -5, "customer": "ä", "amount": 1.5, "note": None}
    _ready(serializer, "t", 7)
    fast = serializer.serialize_to_topic("t", record)
    assert fast is not None and fast[:5] == wire_header(7)
    assert serializer.format.encoder(record, wire_header(7)) == fast
    parsed = fastavro.parse_schema(ORDER)
    assert fastavro.schemaless_reader(io.BytesIO(fast[5:]), parsed) == record
    assert serializer.serialize_to_topic("t", None) is None
    with pytest.raises(TypeError, match="needs the topic"):
        serializer(record)
    assert serializer.subject("t") == "t-value"


NESTED = {"type": "record", "name": "Basket", "fields": [
    {"name": "id", "type": "long"},
    {"name": "items", "type": {"type": "array", "items": "string"}}]}


def test_avro_fallback_is_schemaless_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    # a schema the flat encoder does not take goes through fastavro's compiled write_data, and
    # through schemaless_writer where that is missing: the same bytes
    pytest.importorskip("fastavro")
    from aiokprod.schema_registry import avro

    serializer = avro.AvroSerializer(SchemaRegistryClient("http://127.0.0.1:1"), NESTED)
    assert serializer.format.flat is None
    _ready(serializer, "t", 3)
    record = {"id": 1, "items": ["a", "ä"]}
    compiled = serializer.serialize_to_topic("t", record)
    assert avro._write_data is not None  # fastavro's compiled encoder is what runs here
    monkeypatch.setattr(avro, "_write_data", None)
    assert serializer.serialize_to_topic("t", record) == compiled


FLAT = {"type": "record", "name": "Flat", "fields": [
    {"name": "l", "type": "long"}, {"name": "i", "type": "int"},
    {"name": "s", "type": "string"}, {"name": "b", "type": "bytes"},
    {"name": "d", "type": "double"}, {"name": "f", "type": "float"},
    {"name": "t", "type": "boolean"}, {"name": "n", "type": "null"},
    {"name": "ns", "type": ["null", "string"]}, {"name": "ln", "type": ["long", "null"]},
    {"name": "dflt", "type": "int", "default": 7},
]}


def _flat_records(count: int) -> list[dict[str, Any]]:
    import random

    rng = random.Random(37)
    edges = [0, 1, -1, 63, -64, 64, 8191, -8192, 8192, 2**31 - 1, -(2**31)]
    records = []
    for k in range(count):
        records.append({
            "l": rng.choice([*edges, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1)]),
            "i": rng.choice([*edges, rng.randint(-(2**31), 2**31 - 1)]),
            "s": rng.choice(["", "a", "ä€𝄞", "x" * rng.randint(0, 9000)]),
            "b": bytes(rng.randrange(256) for _ in range(rng.randint(0, 20))),
            "d": rng.choice([0.0, -1.5, 1e300, float("inf"), rng.random()]),
            "f": rng.choice([0.0, 0.5, -2.25]), "t": k % 2 == 0, "n": None,
            "ns": None if k % 3 == 0 else f"v{k}", "ln": None if k % 4 == 0 else -k * 99991,
            **({} if k % 5 else {"dflt": -k}),
        })
    return records


def test_flat_encoder_writes_fastavros_bytes() -> None:
    fastavro = pytest.importorskip("fastavro")
    from aiokprod.schema_registry.avro_flat import flat_record_encoder

    encode = flat_record_encoder(FLAT)
    assert encode is not None
    parsed = fastavro.parse_schema(FLAT)
    for record in _flat_records(500):
        expected = io.BytesIO()
        fastavro.schemaless_writer(expected, parsed, record)
        assert encode(record) == expected.getvalue(), record
        assert encode(record, wire_header(5)) == wire_header(5) + expected.getvalue()
    assert flat_record_encoder(NESTED) is None
    assert flat_record_encoder({"type": "record", "name": "U", "fields": [
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}}]}) is None


@pytest.mark.parametrize(("change", "error", "fastavro_refuses"), [
    ({"l": 2**63}, ValueError, True), ({"l": "1"}, TypeError, True),
    ({"s": b"bytes"}, TypeError, True), ({"d": "x"}, Exception, True),
    # stricter than fastavro, which writes these (an int of 33 bits, a null that is 0)
    ({"i": 2**31}, ValueError, False), ({"n": 0}, TypeError, False),
])
def test_flat_encoder_refuses_what_fastavro_refuses(change: dict[str, Any],
                                                    error: type[Exception],
                                                    fastavro_refuses: bool) -> None:
    fastavro = pytest.importorskip("fastavro")
    from aiokprod.schema_registry.avro_flat import flat_record_encoder

    encode = flat_record_encoder(FLAT)
    assert encode is not None
    record = {**_flat_records(1)[0], **change}
    with pytest.raises(error):
        encode(record)
    if fastavro_refuses:
        with pytest.raises(Exception):  # noqa: B017 -- fastavro's own types vary
            fastavro.schemaless_writer(io.BytesIO(), fastavro.parse_schema(FLAT), record)
    missing = dict(record)
    del missing["l"]
    with pytest.raises(ValueError, match="no value for field 'l'"):
        encode(missing)


def test_json_schema_validates_then_writes_compact_json() -> None:
    pytest.importorskip("jsonschema")
    from aiokprod.schema_registry.json_schema import JsonSchemaSerializer

    schema = {"title": "Click", "type": "object", "required": ["page"],
              "properties": {"page": {"type": "string"}}}
    serializer = JsonSchemaSerializer(SchemaRegistryClient("http://127.0.0.1:1"), schema,
                                      options={"value.subject.name.strategy": "record"})
    assert serializer.subject("t") == "Click"
    _ready(serializer, "t", 9)
    assert serializer.serialize_to_topic("t", {"page": "/ä"}) == \
        wire_header(9) + json.dumps({"page": "/ä"}, separators=(",", ":"),
                                    ensure_ascii=False).encode()
    with pytest.raises(Exception, match="'page' is a required property"):
        serializer.serialize_to_topic("t", {})


def test_protobuf_message_indexes() -> None:
    pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool

    from aiokprod.schema_registry.protobuf import message_indexes

    file = descriptor_pb2.FileDescriptorProto(name="idx.proto", package="p", syntax="proto3")
    file.message_type.add(name="A")
    b = file.message_type.add(name="B")
    b.nested_type.add(name="X")
    b.nested_type.add(name="Y")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    assert message_indexes(pool.FindMessageTypeByName("p.A")) == b"\x00"
    # [1] -> count 1, index 1 (zig-zag: 2, 2); [1, 1] -> count 2, then 1, 1
    assert message_indexes(pool.FindMessageTypeByName("p.B")) == b"\x02\x02"
    assert message_indexes(pool.FindMessageTypeByName("p.B.Y")) == b"\x04\x02\x02"


def test_column_encoder_keeps_a_batch_of_only_null_rows_null() -> None:
    # a Spark batch whose struct values are all null (tombstones): the NumPy encoder used to
    # fail taking row 0 of an empty result
    pa = pytest.importorskip("pyarrow")
    from aiokprod.schema_registry.avro_columns import AvroColumnEncoder

    column = pa.StructArray.from_arrays(
        [pa.array([1, 2], pa.int64()), pa.array(["a", "b"])],
        fields=[pa.field("id", pa.int64(), False), pa.field("s", pa.string())],
        mask=pa.array([True, True]))
    encoder = AvroColumnEncoder(column.type)
    for encode in (encoder.encode, encoder.encode_numpy):
        encoded = encode(column, wire_header(3))
        assert encoded.to_pylist() == [None, None]
        assert encode(column.slice(1, 0), wire_header(3)).to_pylist() == []
