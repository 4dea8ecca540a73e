"""The sink's Schema Registry path: a struct ``value`` (or ``key``) column written as Avro in
the Confluent wire format (docs/spark.md, "Schema Registry").

Options come with the column's prefix: ``value.schema.registry.url`` and the rest of the
registry client's options (``value.basic.auth.user.info``, ``value.schema.registry.ssl.ca.
location``...; ``aiokprod.schema_registry.client``), the serializer's (``value.auto.register.
schemas``, ``value.subject.name.strategy``), and the record's name (``value.avro.record.name``,
``value.avro.namespace``; Spark's ``to_avro`` calls it ``topLevelRecord``). The Avro schema is
the column's struct type (``avro_schema_for``), registered (or looked up) once per topic per
executor worker on the worker's event loop; the rows are then encoded a column at a time from
the Arrow buffers (``AvroColumnEncoder``), with no Python object per row or field.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import pyarrow as pa

from aiokprod.schema_registry.avro import AvroSerializer
from aiokprod.schema_registry.avro_columns import AvroColumnEncoder, avro_schema_for
from aiokprod.schema_registry.client import SchemaRegistryClient
from aiokprod.schema_registry.serializer import SerializerConfig

__all__ = ["RegistryColumn", "check_registry_options", "registry_column"]

_SERIALIZER_OPTIONS = frozenset({"auto.register.schemas", "use.latest.version",
                                 "normalize.schemas", "subject.name.strategy",
                                 "key.subject.name.strategy", "value.subject.name.strategy"})
_RECORD_NAME = "avro.record.name"
_NAMESPACE = "avro.namespace"

Run = Callable[[Coroutine[Any, Any, int]], int]


def _split(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    client = {k: v for k, v in options.items()
              if k not in _SERIALIZER_OPTIONS and k not in (_RECORD_NAME, _NAMESPACE)}
    serializer = {k: v for k, v in options.items() if k in _SERIALIZER_OPTIONS}
    return client, serializer


def check_registry_options(options: Mapping[str, str], *, is_key: bool) -> None:
    """``ValueError`` naming a bad option (nothing is contacted)."""
    client, serializer = _split(options)
    SchemaRegistryClient.from_config(client)
    config = SerializerConfig.from_options(serializer, is_key=is_key)
    if config.use_latest_version:
        raise ValueError("use.latest.version is not supported by the sink: the schema written "
                         "is the column's struct type")


class RegistryColumn:
    """One column's registry set-up in this worker: its client and, per struct type, the
    serializer that holds the schema ids and the encoder of that type."""

    def __init__(self, options: Mapping[str, str], *, is_key: bool) -> None:
        client, serializer = _split(options)
        self._client = SchemaRegistryClient.from_config(client)
        self._config = SerializerConfig.from_options(serializer, is_key=is_key)
        self._is_key = is_key
        self._name = options.get(_RECORD_NAME, "topLevelRecord")
        self._namespace = options.get(_NAMESPACE)
        self._types: dict[pa.DataType, tuple[AvroSerializer, AvroColumnEncoder]] = {}

    def encode(self, topic: str, column: pa.Array, run: Run) -> pa.Array:
        """``column`` as a binary column of framed Avro; ``run`` runs a coroutine on the
        worker's event loop (to register the schema on a topic's first batch)."""
        found = self._types.get(column.type)
        if found is None:
            schema = avro_schema_for(column.type, name=self._name, namespace=self._namespace)
            found = (AvroSerializer(self._client, schema, is_key=self._is_key,
                                    config=self._config), AvroColumnEncoder(column.type))
            self._types[column.type] = found
        serializer, encoder = found
        header = serializer.header(topic)
        if header is None:
            run(serializer.prepare(topic))
            header = serializer.header(topic)
            assert header is not None
        return encoder.encode(column, header)


_columns: dict[tuple[tuple[str, str], ...], RegistryColumn] = {}
_lock = threading.Lock()


def registry_column(options: tuple[tuple[str, str], ...], *, is_key: bool) -> RegistryColumn:
    """The worker's ``RegistryColumn`` for these options: tasks share its schema ids."""
    key = (*options, ("", "key" if is_key else "value"))
    with _lock:
        found = _columns.get(key)
        if found is None:
            found = _columns[key] = RegistryColumn(dict(options), is_key=is_key)
        return found
