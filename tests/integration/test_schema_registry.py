"""Schema Registry serializers against a real registry (Apicurio Registry's Confluent API).

Records go through the producer to a real broker (Tansu) and are read back with
confluent-kafka's consumer and decoded by confluent-kafka's own Schema Registry deserializers,
asking the same registry: an implementation we did not write reads our wire format. The
registry runs once per session (support/schema_registry_server.py), on HTTP and HTTPS, both
behind basic auth.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from aiokprod import Producer, SerializationError
from aiokprod.devbroker import TansuBroker
from aiokprod.schema_registry import SchemaRegistryClient, SchemaRegistryError
from aiokprod.schema_registry.avro import AvroSerializer
from aiokprod.schema_registry.json_schema import JsonSchemaSerializer
from aiokprod.schema_registry.protobuf import ProtobufSerializer
from support.processes import frozen
from support.reader import read_back
from support.schema_registry_server import RegistryServer

ORDER = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "paid", "type": "boolean"},
    ],
}
ORDER_KEY = {"type": "record", "name": "OrderKey", "namespace": "shop",
             "fields": [{"name": "id", "type": "long"}]}


def _client(registry: RegistryServer, **kwargs: Any) -> SchemaRegistryClient:
    return SchemaRegistryClient(registry.url, basic_auth_user_info=registry.user_info, **kwargs)


def _confluent(registry: RegistryServer) -> ConfluentRegistry:
    return ConfluentRegistry({"url": registry.url, "basic.auth.user.info": registry.user_info})


def _order(i: int) -> dict[str, Any]:
    return {"id": i, "customer": f"c{i}", "amount": i * 1.5, "paid": i % 2 == 0}


async def test_avro_keys_and_values_read_back_by_confluent_kafka(
        tansu: TansuBroker, new_topic: Callable[..., str], schema_registry: RegistryServer
) -> None:
    topic = new_topic()
    client = _client(schema_registry)
    values = AvroSerializer(client, ORDER)
    keys = AvroSerializer(client, ORDER_KEY, is_key=True)
    async with Producer(bootstrap_servers=tansu.bootstrap, value_serializer=values,
                        key_serializer=keys) as producer:
        # the first send awaits the key's and the value's registration; the rest are hits
        first = await asyncio.gather(*[
            await producer.send(topic, _order(i), key={"id": i}) for i in range(3)])
        after_first = client.requests
        rest = [await producer.send(topic, _order(i), key={"id": i}) for i in range(3, 50)]
        await asyncio.gather(*rest)
        assert client.requests == after_first == 2  # one registration per subject, ever
    assert first[0].offset == 0
    records = read_back(tansu.bootstrap, topic, expected=50)
    registry = _confluent(schema_registry)
    decode_value = AvroDeserializer(registry)
    decode_key = AvroDeserializer(registry)
    got = [(decode_key(r.key, SerializationContext(topic, MessageField.KEY)),
            decode_value(r.value, SerializationContext(topic, MessageField.VALUE)))
           for r in records]
    assert got == [({"id": i}, _order(i)) for i in range(50)]
    subjects = schema_registry.call("GET", "/subjects")
    assert {f"{topic}-key", f"{topic}-value"} <= set(subjects)  # type: ignore[arg-type]


async def test_json_schema_values_read_back_by_confluent_kafka(
        tansu: TansuBroker, new_topic: Callable[..., str], schema_registry: RegistryServer
) -> None:
    topic = new_topic()
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Click",
              "type": "object", "properties": {"page": {"type": "string"},
                                               "ms": {"type": "integer"}},
              "required": ["page", "ms"]}
    values = JsonSchemaSerializer(_client(schema_registry), schema)
    async with Producer(bootstrap_servers=tansu.bootstrap,
                        value_serializer=values) as producer:
        for i in range(5):
            await producer.send(topic, {"page": f"/p{i}", "ms": i})
        with pytest.raises(SerializationError, match="'ms' is a required property"):
            await producer.send(topic, {"page": "/no-ms"})
    decode = JSONDeserializer(None, schema_registry_client=_confluent(schema_registry))
    records = read_back(tansu.bootstrap, topic, expected=5)
    assert [decode(r.value, SerializationContext(topic, MessageField.VALUE))
            for r in records] == [{"page": f"/p{i}", "ms": i} for i in range(5)]


def _protobuf_types() -> tuple[Any, Any]:
    """Two message classes from a descriptor built here (no protoc needed): ``Outer`` (the
    file's second message) and its nested ``Outer.Inner``, so the message indexes are not the
    one-byte ``[0]``."""
    file = descriptor_pb2.FileDescriptorProto(name="aiokprod_test_sr.proto",
                                              package="aiokprod.test", syntax="proto3")
    first = file.message_type.add(name="First")
    first.field.add(name="x", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                    label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    outer = file.message_type.add(name="Outer")
    outer.field.add(name="name", number=1,
                    type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                    label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    inner = outer.nested_type.add(name="Inner")
    inner.field.add(name="n", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                    label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("aiokprod.test.Outer")),
            message_factory.GetMessageClass(
                pool.FindMessageTypeByName("aiokprod.test.Outer.Inner")))


async def test_protobuf_values_read_back_by_confluent_kafka(
        tansu: TansuBroker, new_topic: Callable[..., str], schema_registry: RegistryServer
) -> None:
    outer_type, inner_type = _protobuf_types()
    for message_type, make in ((outer_type, lambda i: outer_type(name=f"o{i}")),
                               (inner_type, lambda i: inner_type(n=i))):
        topic = new_topic()
        values = ProtobufSerializer(_client(schema_registry), message_type)
        async with Producer(bootstrap_servers=tansu.bootstrap,
                            value_serializer=values) as producer:
            for i in range(5):
                await producer.send(topic, make(i))
        decode = ProtobufDeserializer(message_type, {"use.deprecated.format": False})
        records = read_back(tansu.bootstrap, topic, expected=5)
        assert [decode(r.value, SerializationContext(topic, MessageField.VALUE))
                for r in records] == [make(i) for i in range(5)]


async def test_schema_evolution_gets_the_registrys_answer(
        tansu: TansuBroker, new_topic: Callable[..., str], schema_registry: RegistryServer
) -> None:
    topic = new_topic()
    schema_registry.call("PUT", f"/config/{topic}-value", {"compatibility": "BACKWARD"})
    client = _client(schema_registry)
    compatible = {**ORDER, "fields": [*ORDER["fields"],  # type: ignore[list-item]
                                      {"name": "note", "type": "string", "default": ""}]}
    incompatible = {**ORDER, "fields": [{"name": "id", "type": "string"},
                                        *ORDER["fields"][1:]]}  # type: ignore[index]
    ids = []
    for schema, value in ((ORDER, _order(1)), (compatible, {**_order(2), "note": "n"})):
        serializer = AvroSerializer(client, schema)
        async with Producer(bootstrap_servers=tansu.bootstrap,
                            value_serializer=serializer) as producer:
            await (await producer.send(topic, value))
            ids.append(await serializer.prepare(topic))
    assert ids[0] != ids[1]
    async with Producer(bootstrap_servers=tansu.bootstrap,
                        value_serializer=AvroSerializer(client, incompatible)) as producer:
        with pytest.raises(SerializationError) as refused:
            await producer.send(topic, {**_order(3), "id": "three"})
    cause = refused.value.__cause__
    assert isinstance(cause, SchemaRegistryError)
    assert cause.status == 409
    assert "Incompatible" in str(cause) and f"{topic}-value" in str(cause)
    decode = AvroDeserializer(_confluent(schema_registry))
    values = [decode(r.value, SerializationContext(topic, MessageField.VALUE))
              for r in read_back(tansu.bootstrap, topic, expected=2)]
    assert values == [_order(1), {**_order(2), "note": "n"}]


async def _send_once_answered(producer: Producer, topic: str, value: dict[str, Any]
                              ) -> asyncio.Future[Any]:
    """``send`` until the registry answers the serializer within its bound, for at most 60 s:
    a send the serializer refuses accepts nothing, so asking again writes the record once."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return await producer.send(topic, value)
        except SerializationError:
            assert time.monotonic() < deadline, "the registry did not answer in 60 s"
            await asyncio.sleep(0.2)


async def test_a_stalled_registry_fails_new_schemas_in_bound_and_keeps_known_ones(
        tansu: TansuBroker, new_topic: Callable[..., str], schema_registry: RegistryServer
) -> None:
    known, fresh = new_topic(), new_topic()
    client = _client(schema_registry, request_timeout_ms=500, max_retries=1,
                     retries_wait_ms=100, retries_max_wait_ms=100)
    serializer = AvroSerializer(client, ORDER)
    async with Producer(bootstrap_servers=tansu.bootstrap,
                        value_serializer=serializer) as producer:
        # the known topic's schema registered while the registry runs: asked until it answers
        # within the client's own 500 ms (a loaded pair of suites once took longer twice)
        accepted = [await _send_once_answered(producer, known, _order(0))]
        await accepted[0]
        with frozen(schema_registry.pid):
            started = time.monotonic()
            with pytest.raises(SerializationError) as stalled:
                await producer.send(fresh, _order(1))
            took = time.monotonic() - started
            # the cached topic's sends never ask the registry: they go on
            accepted += [await producer.send(known, _order(i)) for i in range(1, 20)]
            await asyncio.gather(*accepted)
        # bound: 2 attempts of 0.5 s and one wait of ~0.1 s, with room for a loaded machine
        assert 0.9 < took < 10.0, took
        cause = stalled.value.__cause__
        assert isinstance(cause, SchemaRegistryError) and cause.status is None
        assert "request.timeout.ms=500" in str(cause) and "max.retries=1" in str(cause)
        # the registry back: the topic that failed is asked again, and works (a loaded run's
        # first two answers after SIGCONT took longer than the client's 500 ms)
        await (await _send_once_answered(producer, fresh, _order(99)))
    decode = AvroDeserializer(_confluent(schema_registry))
    values = [decode(r.value, SerializationContext(known, MessageField.VALUE))
              for r in read_back(tansu.bootstrap, known, expected=20)]
    assert values == [_order(i) for i in range(20)]


async def test_tls_and_basic_auth(schema_registry: RegistryServer) -> None:
    assert schema_registry.tls is not None
    ca = str(schema_registry.tls.ca_cert)
    good = SchemaRegistryClient(schema_registry.tls_url, ssl_ca_location=ca,
                                basic_auth_user_info=schema_registry.user_info)
    serializer = AvroSerializer(good, ORDER_KEY, options={
        "value.subject.name.strategy": "io.confluent.kafka.serializers.subject."
                                       "RecordNameStrategy"})
    schema_id = await serializer.prepare("any-topic")
    assert serializer.subject("any-topic") == "shop.OrderKey"
    assert (await good.latest_version("shop.OrderKey")).schema_id == schema_id
    wrong = SchemaRegistryClient(schema_registry.tls_url, ssl_ca_location=ca,
                                 basic_auth_user_info=f"{schema_registry.user}:wrong")
    with pytest.raises(SchemaRegistryError, match="answered 401") as refused:
        await wrong.latest_version("shop.OrderKey")
    assert refused.value.status == 401 and wrong.requests == 1  # final: not retried
    untrusted = SchemaRegistryClient(schema_registry.tls_url,
                                     basic_auth_user_info=schema_registry.user_info)
    with pytest.raises(SchemaRegistryError, match="TLS handshake failed"):
        await untrusted.latest_version("shop.OrderKey")


async def test_lookup_only_and_latest_version(schema_registry: RegistryServer,
                                              topic_name: str) -> None:
    client = _client(schema_registry)
    lookup_only = AvroSerializer(client, ORDER, options={"auto.register.schemas": "false"})
    with pytest.raises(SchemaRegistryError, match="answered 404"):
        await lookup_only.prepare(topic_name)
    registered = await AvroSerializer(client, ORDER).prepare(topic_name)
    assert await AvroSerializer(client, ORDER, options={
        "auto.register.schemas": False}).prepare(topic_name) == registered
    # use.latest.version serializes with the subject's newest schema, whatever it was given
    latest = AvroSerializer(client, ORDER_KEY, options={"use.latest.version": "true"})
    assert await latest.prepare(topic_name) == registered
    encoded = latest.serialize_to_topic(topic_name, _order(7))
    assert encoded is not None and encoded[1:5] == registered.to_bytes(4, "big")


async def test_concurrent_first_registrations_of_a_subject_get_one_id(
        schema_registry: RegistryServer, topic_name: str) -> None:
    # Apicurio answers the loser of the race to create a subject 409 "already exists" (Spark
    # workers registering at once met it): the client then looks the schema up
    # (two at once, as two Spark workers; more at once make Apicurio 2.4 fail some with a 500
    # from its own storage)
    for attempt in range(10):
        subject_topic = f"{topic_name}-{attempt}"
        ids = await asyncio.gather(*[
            AvroSerializer(_client(schema_registry), ORDER).prepare(subject_topic)
            for _ in range(2)])
        assert len(set(ids)) == 1


def _protobuf_with_imports() -> Any:
    """``Order`` in a file importing another of ours (``Money``) and google's Timestamp."""
    from google.protobuf import timestamp_pb2

    label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    money = descriptor_pb2.FileDescriptorProto(name="aiokprod_test/money.proto",
                                               package="aiokprod.money", syntax="proto3")
    amount = money.message_type.add(name="Money")
    amount.field.add(name="cents", number=1, label=label,
                     type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64)
    order = descriptor_pb2.FileDescriptorProto(
        name="aiokprod_test/order.proto", package="aiokprod.order", syntax="proto3",
        dependency=["aiokprod_test/money.proto", "google/protobuf/timestamp.proto"])
    message = order.message_type.add(name="Order")
    message.field.add(name="total", number=1, label=label, type_name=".aiokprod.money.Money",
                      type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
    message.field.add(name="at", number=2, label=label, type_name=".google.protobuf.Timestamp",
                      type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(money)
    pool.Add(order)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("aiokprod.order.Order"))


async def test_protobuf_imports_are_registered_as_references(
        tansu: TansuBroker, new_topic: Callable[..., str], schema_registry: RegistryServer
) -> None:
    order_type = _protobuf_with_imports()
    topic = new_topic()
    async with Producer(bootstrap_servers=tansu.bootstrap, value_serializer=ProtobufSerializer(
            _client(schema_registry), order_type)) as producer:
        for i in range(3):
            order = order_type()
            order.total.cents = 100 * i
            order.at.seconds = 1_700_000_000 + i
            await producer.send(topic, order)
    latest = schema_registry.call("GET", f"/subjects/{topic}-value/versions/latest")
    assert isinstance(latest, dict)
    assert [r["name"] for r in latest["references"]] == ["aiokprod_test/money.proto"]
    decode = ProtobufDeserializer(order_type, {"use.deprecated.format": False})
    got = [decode(r.value, SerializationContext(topic, MessageField.VALUE))
           for r in read_back(tansu.bootstrap, topic, expected=3)]
    assert [(o.total.cents, o.at.seconds) for o in got] == \
        [(100 * i, 1_700_000_000 + i) for i in range(3)]
