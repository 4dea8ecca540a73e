"""Avro values and keys in the Confluent wire format, encoded by fastavro (``aiokprod[avro]``).

A record is a ``dict``; its bytes are the 5-byte header and Avro's binary encoding. A record
schema of primitive fields (and nullable ones) gets its own generated encoder
(``avro_flat``). Any other schema goes through fastavro: its ``schemaless_writer`` costs ~11 us
for a record of ten fields, ~40% of it in the file-object wrapping around fastavro's compiled
``write_data``, which appends to a ``bytearray`` (~6.5 us): the serializer calls that directly,
and ``schemaless_writer`` where a fastavro release lacks it (``tests/unit/
test_schema_registry_formats.py`` checks all three give the same bytes).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from io import BytesIO
from typing import Any

from aiokprod.schema_registry.avro_flat import flat_record_encoder
from aiokprod.schema_registry.client import SchemaRegistryClient
from aiokprod.schema_registry.schema import Schema
from aiokprod.schema_registry.serializer import RegistrySerializer, SerializerConfig

try:
    from fastavro import parse_schema, schemaless_writer
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("aiokprod.schema_registry.avro needs fastavro: "
                      "pip install 'aiokprod[avro]'") from exc

def _compiled_write_data() -> Any:
    """fastavro's compiled encoder under ``schemaless_writer`` (not a public name), or None."""
    try:
        module = importlib.import_module("fastavro._write")
    except ImportError:  # pragma: no cover - a fastavro without its compiled part
        return None
    return getattr(module, "write_data", None)


_write_data = _compiled_write_data()

__all__ = ["AvroFormat", "AvroSerializer"]


class AvroFormat:
    """Avro's part of a registry serializer (``SchemaFormat``): the parsed schema and the
    encoder, the flat one where the schema allows it."""

    message_indexes = b""

    def __init__(self, schema: str | Mapping[str, Any]) -> None:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        self.record_name = _full_name(json.loads(text))
        self.use_schema(Schema(text, "AVRO"))

    @property
    def schema(self) -> Schema:
        return self._schema

    def use_schema(self, schema: Schema) -> None:
        document = json.loads(schema.schema_str)
        self._schema = schema
        self._named: dict[str, Any] = {}
        self._parsed = parse_schema(document, named_schemas=self._named)
        self._options: dict[str, Any] = {}
        # a record of primitive fields: its flat encoder (aiokprod.schema_registry.avro_flat,
        # native or generated); else fastavro's
        self.flat = flat_record_encoder(document)
        self.encoder: Callable[[Any, bytes], bytes] = self.flat if self.flat is not None \
            else self._fastavro

    async def schema_to_register(self, client: SchemaRegistryClient, normalize: bool
                                 ) -> Schema:
        return self._schema

    def _fastavro(self, obj: Any, header: bytes) -> bytes:
        if _write_data is not None:
            out = bytearray(header)
            _write_data(out, obj, self._parsed, self._named, "", self._options)
            return bytes(out)
        stream = BytesIO(header)
        stream.seek(len(header))
        schemaless_writer(stream, self._parsed, obj)
        return stream.getvalue()


class AvroSerializer(RegistrySerializer):
    """Serializes records with an Avro schema registered in a Schema Registry.

    ``schema`` is the Avro schema as JSON text or as a parsed ``dict``. ``options`` takes Java's
    serializer option names (``auto.register.schemas``, ``use.latest.version``,
    ``value.subject.name.strategy``...); ``config`` the same as a ``SerializerConfig``.
    """

    def __init__(self, client: SchemaRegistryClient, schema: str | Mapping[str, Any], *,
                 is_key: bool = False, config: SerializerConfig | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        super().__init__(client, AvroFormat(schema), is_key=is_key, config=config,
                         options=options)


def _full_name(schema: Any) -> str | None:
    """A named schema's full name (``namespace.name``), what the record strategies use."""
    if not isinstance(schema, dict) or "name" not in schema:
        return None
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"
