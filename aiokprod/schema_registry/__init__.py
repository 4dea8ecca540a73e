"""Schema Registry serializers: Avro, JSON Schema and Protobuf in the Confluent wire format.

``SchemaRegistryClient`` talks to the registry over asyncio; ``AvroSerializer``
(``aiokprod.schema_registry.avro``, extra ``avro``), ``JsonSchemaSerializer``
(``.json_schema``, extra ``jsonschema``) and ``ProtobufSerializer`` (``.protobuf``, extra
``protobuf``) plug into ``Producer(key_serializer=..., value_serializer=...)``. The format
modules are imported from their own modules so each needs only its own extra;
docs/serialization.md shows them.
"""

from aiokprod.schema_registry.client import SchemaRegistryClient
from aiokprod.schema_registry.errors import SchemaRegistryError
from aiokprod.schema_registry.schema import RegisteredSchema, Schema, SchemaReference
from aiokprod.schema_registry.serializer import RegistrySerializer, SerializerConfig, wire_header
from aiokprod.schema_registry.subjects import SubjectNameStrategy, parse_strategy

__all__ = ["RegisteredSchema", "RegistrySerializer", "Schema", "SchemaReference",
           "SchemaRegistryClient", "SchemaRegistryError", "SerializerConfig",
           "SubjectNameStrategy", "parse_strategy", "wire_header"]
