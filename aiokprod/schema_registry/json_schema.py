"""JSON Schema values and keys in the Confluent wire format (``aiokprod[jsonschema]``).

A record is anything ``json.dumps`` takes; it is checked against the schema first
(``validate=True``, as Java's ``json.fail.invalid.schema``), by the ``jsonschema`` package's
validator for the schema's ``$schema`` draft, compiled once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from aiokprod.schema_registry.client import SchemaRegistryClient
from aiokprod.schema_registry.schema import Schema
from aiokprod.schema_registry.serializer import RegistrySerializer, SerializerConfig

try:
    from jsonschema.validators import validator_for
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("aiokprod.schema_registry.json_schema needs jsonschema: "
                      "pip install 'aiokprod[jsonschema]'") from exc

__all__ = ["JsonSchemaFormat", "JsonSchemaSerializer"]

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class JsonSchemaFormat:
    """JSON Schema's part of a registry serializer (``SchemaFormat``): the compiled validator
    and compact JSON. The record name the record strategies use is the schema's ``title``."""

    message_indexes = b""

    def __init__(self, schema: str | Mapping[str, Any], *, validate: bool = True) -> None:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        document = json.loads(text)
        title = document.get("title") if isinstance(document, dict) else None
        self.record_name = None if title is None else str(title)
        self._validate = validate
        self.encoder: Callable[[Any, bytes], bytes] = self._encode
        self.use_schema(Schema(text, "JSON"))

    @property
    def schema(self) -> Schema:
        return self._schema

    def use_schema(self, schema: Schema) -> None:
        document = json.loads(schema.schema_str)
        cls = validator_for(document)
        cls.check_schema(document)
        self._schema = schema
        self._validator = cls(document)

    async def schema_to_register(self, client: SchemaRegistryClient, normalize: bool
                                 ) -> Schema:
        return self._schema

    def _encode(self, obj: Any, header: bytes) -> bytes:
        if self._validate:
            self._validator.validate(obj)
        return header + _encoder.encode(obj).encode()


class JsonSchemaSerializer(RegistrySerializer):
    """Serializes JSON documents with a JSON Schema registered in a Schema Registry
    (``validate=False`` skips the check against the schema)."""

    def __init__(self, client: SchemaRegistryClient, schema: str | Mapping[str, Any], *,
                 is_key: bool = False, validate: bool = True,
                 config: SerializerConfig | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        super().__init__(client, JsonSchemaFormat(schema, validate=validate), is_key=is_key,
                         config=config, options=options)
