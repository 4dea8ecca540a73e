"""A schema as the registry keeps it: its text, type and references."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["RegisteredSchema", "Schema", "SchemaReference", "SchemaType"]

SchemaType = Literal["AVRO", "JSON", "PROTOBUF"]


@dataclass(frozen=True)
class SchemaReference:
    """A schema another one imports (``references`` of the registry's API)."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class Schema:
    """Schema text in the registry's form: Avro and JSON Schema as JSON, Protobuf as ``.proto``
    text (or a base64 ``FileDescriptorProto``)."""

    schema_str: str
    schema_type: SchemaType = "AVRO"
    references: Sequence[SchemaReference] = field(default_factory=tuple)

    def request_body(self) -> dict[str, Any]:
        """The JSON body of a register or look-up request (Avro is the registry's default
        type, so it is left out, as the Java client does)."""
        body: dict[str, Any] = {"schema": self.schema_str}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [ref.to_json() for ref in self.references]
        return body


@dataclass(frozen=True)
class RegisteredSchema:
    """A subject's version of a schema, with its global id (what the wire format carries)."""

    schema_id: int
    subject: str
    version: int | None
    schema: Schema
