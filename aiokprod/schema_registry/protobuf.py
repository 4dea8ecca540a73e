"""Protobuf values and keys in the Confluent wire format (``aiokprod[protobuf]``).

A record is an instance of the serializer's message class. After the 5-byte header come the
message indexes (the message's path in its ``.proto`` file, zig-zag varints; ``[0]``, the
file's first message, is the single byte 0), then ``SerializeToString()``.

The schema registered is the ``.proto`` text given, or else the file's descriptor as base64
(``FileDescriptorProto``), the form confluent-kafka registers and Confluent's registry reads.
A file that imports others registers each of them first, under a subject named after the
imported file (Java's ``DefaultReferenceSubjectNameStrategy``), and refers to it by name,
subject and version; Google's and Confluent's own files (``google/protobuf/``,
``google/type/``, ``confluent/``) are the registry's built-ins and are not registered
(confluent-kafka's ``skip.known.types``). References need the descriptor form: with a
``.proto`` text given, the file must import nothing but built-ins.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from aiokprod.records._varint import encode_varint
from aiokprod.schema_registry.client import SchemaRegistryClient
from aiokprod.schema_registry.schema import Schema, SchemaReference
from aiokprod.schema_registry.serializer import RegistrySerializer, SerializerConfig

try:
    from google.protobuf.descriptor import Descriptor
    from google.protobuf.descriptor_pb2 import FileDescriptorProto
    from google.protobuf.message import Message
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("aiokprod.schema_registry.protobuf needs protobuf: "
                      "pip install 'aiokprod[protobuf]'") from exc

__all__ = ["ProtobufFormat", "ProtobufSerializer", "is_builtin", "message_indexes"]

_BUILTIN_PREFIXES = ("google/protobuf/", "google/type/", "confluent/")


def is_builtin(file_name: str) -> bool:
    """A ``.proto`` file every registry knows: never registered as a reference."""
    return file_name.startswith(_BUILTIN_PREFIXES)


def _descriptor_text(file: Any) -> str:
    proto = FileDescriptorProto()
    file.CopyToProto(proto)
    return base64.standard_b64encode(proto.SerializeToString()).decode("ascii")


def message_indexes(descriptor: Descriptor) -> bytes:
    """The wire format's message indexes of ``descriptor`` in its file."""
    path: list[int] = []
    current = descriptor
    while current.containing_type is not None:
        parent = current.containing_type
        path.append(list(parent.nested_types).index(current))
        current = parent
    path.append(list(current.file.message_types_by_name.values()).index(current))
    path.reverse()
    if path == [0]:
        return b"\x00"
    return encode_varint(len(path)) + b"".join(encode_varint(i) for i in path)


class ProtobufFormat:
    """Protobuf's part of a registry serializer (``SchemaFormat``): the message class, its
    message indexes and the imported files to register as references; the record name the
    record strategies use is the message's full name."""

    def __init__(self, message_type: type[Message], *, schema: str | None = None) -> None:
        descriptor: Descriptor = message_type.DESCRIPTOR
        file = descriptor.file
        imported = [d.name for d in file.dependencies if not is_builtin(d.name)]
        if schema is not None and imported:
            raise ValueError(f"{file.name} imports {imported}: give no schema text, so that "
                             f"they are registered from the descriptors as references")
        self._schema = Schema(schema or _descriptor_text(file), "PROTOBUF")
        self.record_name: str | None = descriptor.full_name
        self.message_indexes = message_indexes(descriptor)
        self.encoder: Callable[[Any, bytes], bytes] = self._encode
        self._type = message_type
        self._file = file
        self._references_done = not imported

    @property
    def schema(self) -> Schema:
        return self._schema

    def use_schema(self, schema: Schema) -> None:
        """The message class writes itself: the latest version's text changes nothing here."""

    async def schema_to_register(self, client: SchemaRegistryClient, normalize: bool
                                 ) -> Schema:
        if not self._references_done:
            references = [await self._register_file(client, d, normalize)
                          for d in self._file.dependencies if not is_builtin(d.name)]
            self._schema = Schema(self._schema.schema_str, "PROTOBUF", tuple(references))
            self._references_done = True
        return self._schema

    async def _register_file(self, client: SchemaRegistryClient, file: Any, normalize: bool
                             ) -> SchemaReference:
        """Register an imported file (its own imports first) under its name; the reference."""
        references = tuple([await self._register_file(client, d, normalize)
                            for d in file.dependencies if not is_builtin(d.name)])
        schema = Schema(_descriptor_text(file), "PROTOBUF", references)
        await client.register(file.name, schema, normalize=normalize)
        found = await client.lookup(file.name, schema)
        assert found.version is not None
        return SchemaReference(file.name, file.name, found.version)

    def _encode(self, obj: Any, header: bytes) -> bytes:
        if type(obj) is not self._type:
            raise TypeError(f"expected a {self._type.__name__} message, got "
                            f"{type(obj).__name__}")
        payload: bytes = obj.SerializeToString()
        return header + payload


class ProtobufSerializer(RegistrySerializer):
    """Serializes instances of ``message_type`` with its ``.proto`` registered in a Schema
    Registry (``schema``: the ``.proto`` text to register instead of the descriptor)."""

    def __init__(self, client: SchemaRegistryClient, message_type: type[Message], *,
                 schema: str | None = None, is_key: bool = False,
                 config: SerializerConfig | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        super().__init__(client, ProtobufFormat(message_type, schema=schema), is_key=is_key,
                         config=config, options=options)
