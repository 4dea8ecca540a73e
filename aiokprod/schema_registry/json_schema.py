"""JSON Schema values and keys in the Confluent wire format (``aiokprod[jsonschema]``).

A record is anything ``json.dumps`` takes; it is checked against the schema first
(``validate=True``, as Java's ``json.fail.invalid.schema``), by the ``jsonschema`` package's
validator for the schema's ``$schema`` draft, compiled once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiokprod.schema_registry.client import SchemaRegistryClient
from aiokprod.schema_registry.schema import Schema
from aiokprod.schema_registry.serializer import RegistrySerializer, SerializerConfig

try:
    from jsonschema.validators import validator_for
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("aiokprod.schema_registry.json_schema needs jsonschema: "
                      "pip install 'aiokprod[jsonschema]'") from exc

__all__ = ["JsonSchemaSerializer"]

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class JsonSchemaSerializer(RegistrySerializer):
    """Serializes JSON documents with a JSON Schema registered in a Schema Registry.

    The record name the record strategies use is the schema's ``title``.
    """

    def __init__(self, client: SchemaRegistryClient, schema: str | Mapping[str, Any], *,
                 is_key: bool = False, validate: bool = True,
                 config: SerializerConfig | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        document = json.loads(text)
        title = document.get("title") if isinstance(document, dict) else None
        super().__init__(client, Schema(text, "JSON"), None if title is None else str(title),
                         is_key=is_key, config=config, options=options)
        self._validate = validate
        self._validator = self._compile(document)

    @staticmethod
    def _compile(document: Any) -> Any:
        cls = validator_for(document)
        cls.check_schema(document)
        return cls(document)

    def _use_schema(self, schema: Schema) -> None:
        self._validator = self._compile(json.loads(schema.schema_str))

    def _encode(self, header: bytes, obj: Any) -> bytes:
        if self._validate:
            self._validator.validate(obj)
        return header + _encoder.encode(obj).encode()
