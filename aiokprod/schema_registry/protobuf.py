"""Protobuf values and keys in the Confluent wire format (``aiokprod[protobuf]``).

A record is an instance of the serializer's message class. After the 5-byte header come the
message indexes (the message's path in its ``.proto`` file, zig-zag varints; ``[0]``, the
file's first message, is the single byte 0), then ``SerializeToString()``.

The schema registered is the ``.proto`` text given, or else the file's descriptor as base64
(``FileDescriptorProto``), the form confluent-kafka registers and Confluent's registry reads.
Files that import others (references) are not supported yet: give one self-contained file.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from aiokprod.schema_registry.client import SchemaRegistryClient
from aiokprod.schema_registry.schema import Schema
from aiokprod.schema_registry.serializer import RegistrySerializer, SerializerConfig

try:
    from google.protobuf.descriptor import Descriptor
    from google.protobuf.descriptor_pb2 import FileDescriptorProto
    from google.protobuf.message import Message
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("aiokprod.schema_registry.protobuf needs protobuf: "
                      "pip install 'aiokprod[protobuf]'") from exc

__all__ = ["ProtobufSerializer", "message_indexes"]


def _zigzag_varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


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
    return _zigzag_varint(len(path)) + b"".join(_zigzag_varint(i) for i in path)


class ProtobufSerializer(RegistrySerializer):
    """Serializes instances of ``message_type`` with its ``.proto`` registered in a Schema
    Registry; the record name the record strategies use is the message's full name."""

    def __init__(self, client: SchemaRegistryClient, message_type: type[Message], *,
                 schema: str | None = None, is_key: bool = False,
                 config: SerializerConfig | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        descriptor: Descriptor = message_type.DESCRIPTOR
        file = descriptor.file
        if file.dependencies:
            raise ValueError(f"{file.name} imports {[d.name for d in file.dependencies]}: "
                             f"schema references are not supported yet")
        if schema is None:
            proto = FileDescriptorProto()
            file.CopyToProto(proto)
            schema = base64.standard_b64encode(proto.SerializeToString()).decode("ascii")
        super().__init__(client, Schema(schema, "PROTOBUF"), descriptor.full_name,
                         is_key=is_key, config=config, options=options)
        self._type = message_type
        self._indexes = message_indexes(descriptor)

    def _message_indexes(self) -> bytes:
        return self._indexes

    def _encode(self, header: bytes, obj: Any) -> bytes:
        if type(obj) is not self._type:
            raise TypeError(f"expected a {self._type.__name__} message, got "
                            f"{type(obj).__name__}")
        payload: bytes = obj.SerializeToString()
        return header + payload
