"""Avro values and keys in the Confluent wire format, encoded by fastavro (``aiokprod[avro]``).

A record is a ``dict`` (or anything fastavro's ``schemaless_writer`` takes); its bytes are the
5-byte header and Avro's binary encoding, written into one ``BytesIO``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from io import BytesIO
from typing import Any

from aiokprod.schema_registry.client import SchemaRegistryClient
from aiokprod.schema_registry.schema import Schema
from aiokprod.schema_registry.serializer import RegistrySerializer, SerializerConfig

try:
    from fastavro import parse_schema, schemaless_writer
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("aiokprod.schema_registry.avro needs fastavro: "
                      "pip install 'aiokprod[avro]'") from exc

__all__ = ["AvroSerializer"]


class AvroSerializer(RegistrySerializer):
    """Serializes records with an Avro schema registered in a Schema Registry.

    ``schema`` is the Avro schema as JSON text or as a parsed ``dict``. ``options`` takes Java's
    serializer option names (``auto.register.schemas``, ``use.latest.version``,
    ``value.subject.name.strategy``...); ``config`` the same as a ``SerializerConfig``.
    """

    def __init__(self, client: SchemaRegistryClient, schema: str | Mapping[str, Any], *,
                 is_key: bool = False, config: SerializerConfig | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        parsed_json = json.loads(text)
        super().__init__(client, Schema(text, "AVRO"), _full_name(parsed_json),
                         is_key=is_key, config=config, options=options)
        self._parsed = parse_schema(parsed_json)

    def _use_schema(self, schema: Schema) -> None:
        self._parsed = parse_schema(json.loads(schema.schema_str))

    def serialize_to_topic(self, topic: str, obj: Any, /) -> bytes | None:
        header = self._headers.get(topic)
        if header is None or obj is None:
            return super().serialize_to_topic(topic, obj)
        out = BytesIO(header)
        out.seek(5)
        schemaless_writer(out, self._parsed, obj)
        return out.getvalue()

    def _encode(self, header: bytes, obj: Any) -> bytes:
        out = BytesIO(header)
        out.seek(len(header))
        schemaless_writer(out, self._parsed, obj)
        return out.getvalue()


def _full_name(schema: Any) -> str | None:
    """A named schema's full name (``namespace.name``), what the record strategies use."""
    if not isinstance(schema, dict) or "name" not in schema:
        return None
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"
