"""A registry-backed serializer: the subject, the schema id's cache and the Confluent wire
format's header, given one format (``SchemaFormat``) that writes the payload.

The wire format: a magic byte 0, the schema's global id as 4 bytes big-endian, then the
payload (Protobuf puts its message indexes before it). The header of a topic is computed once,
when its schema id is known, and kept per topic: ``serialize_to_topic`` is a dict look-up and
the format's encoder, never a registry call.

The first record of a topic finds no header: the serializer starts the registry work (register,
look up, or fetch the latest version, by ``auto.register.schemas`` and ``use.latest.version``)
as one task per topic, and raises ``SerializerNotReady`` carrying it; ``Producer.send()``
awaits it and calls again (aiokprod.hooks). Concurrent first sends share the task. A task that
fails fails the sends that awaited it, with the registry's answer, and is forgotten, so the
next send asks again; nothing already accepted is touched. ``await prepare(topic)`` does the
same work ahead of time (at a service's start, say).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiokprod.hooks import SerializerNotReady
from aiokprod.schema_registry.client import SchemaRegistryClient
from aiokprod.schema_registry.schema import Schema
from aiokprod.schema_registry.subjects import SubjectNameStrategy, parse_strategy, subject_name

__all__ = ["MAGIC_BYTE", "RegistrySerializer", "SchemaFormat", "SerializerConfig", "wire_header"]

MAGIC_BYTE = 0
_HEADER = struct.Struct(">bI")

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def wire_header(schema_id: int) -> bytes:
    """The 5 bytes every record of schema ``schema_id`` starts with."""
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name} must be true or false, got {value!r}")


@dataclass(frozen=True)
class SerializerConfig:
    """How a serializer finds its schema id (Java's serializer settings)."""

    #: ``auto.register.schemas``: register the schema on its first use; else look it up
    auto_register_schemas: bool = True
    #: ``use.latest.version``: serialize with the subject's newest version (implies no
    #: registration)
    use_latest_version: bool = False
    #: ``normalize.schemas``: ask the registry to normalize before comparing
    normalize_schemas: bool = False
    #: ``key.subject.name.strategy`` / ``value.subject.name.strategy``
    subject_name_strategy: SubjectNameStrategy = "topic"

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, is_key: bool = False
                     ) -> SerializerConfig:
        """From Java's (and confluent-kafka's) option names: ``auto.register.schemas``,
        ``use.latest.version``, ``normalize.schemas``, ``key.subject.name.strategy`` or
        ``value.subject.name.strategy`` (``subject.name.strategy`` for either)."""
        kwargs: dict[str, Any] = {}
        strategy_name = "key.subject.name.strategy" if is_key else "value.subject.name.strategy"
        other = "value.subject.name.strategy" if is_key else "key.subject.name.strategy"
        for name, value in options.items():
            if name == "auto.register.schemas":
                kwargs["auto_register_schemas"] = _flag(name, value)
            elif name == "use.latest.version":
                kwargs["use_latest_version"] = _flag(name, value)
            elif name == "normalize.schemas":
                kwargs["normalize_schemas"] = _flag(name, value)
            elif name in (strategy_name, "subject.name.strategy"):
                kwargs["subject_name_strategy"] = parse_strategy(str(value))
            elif name != other:
                raise ValueError(f"unknown serializer option {name!r}")
        return cls(**kwargs)


class SchemaFormat(Protocol):
    """One format's part of a registry serializer: its schema and how a record is written.

    ``AvroFormat``, ``JsonSchemaFormat`` and ``ProtobufFormat`` (one module each, each needing
    only its own extra) are the three; ``RegistrySerializer`` is given one and keeps the rest
    (subjects, schema ids, the per-topic header, the first record's wait) in one place.
    """

    #: the record name the record strategies use (Avro's full name, JSON Schema's title,
    #: Protobuf's message full name), or None
    record_name: str | None
    #: what follows the 5-byte header before the payload (Protobuf's message indexes)
    message_indexes: bytes
    #: ``encoder(obj, header)``: ``header`` then ``obj``'s payload; the per-record call
    encoder: Callable[[Any, bytes], bytes]

    @property
    def schema(self) -> Schema:
        """The schema this serializer writes with (and registers)."""

    def use_schema(self, schema: Schema) -> None:
        """Write with ``schema`` from now on (the subject's latest, ``use.latest.version``);
        ``encoder`` may change."""

    async def schema_to_register(self, client: SchemaRegistryClient, normalize: bool
                                 ) -> Schema:
        """``schema`` as registered or looked up: Protobuf registers its imports first and
        names them as references; the others return ``schema``."""


class RegistrySerializer:
    """A registry-backed serializer for ``Producer(key_serializer=..., value_serializer=...)``,
    given its ``SchemaFormat``. ``AvroSerializer``, ``JsonSchemaSerializer`` and
    ``ProtobufSerializer`` make one with their format; the rest is here.
    """

    def __init__(self, client: SchemaRegistryClient, schema_format: SchemaFormat, *,
                 is_key: bool = False, config: SerializerConfig | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        if config is not None and options:
            raise ValueError("give config or options, not both")
        self._client = client
        self._format = schema_format
        # the per-record call, read from the format once (and again after use_schema)
        self._encode = schema_format.encoder
        self._is_key = is_key
        self._config = config if config is not None else \
            SerializerConfig.from_options(options or {}, is_key=is_key)
        # topic -> the header of its records: the only thing the per-record path reads
        self._headers: dict[str, bytes] = {}
        self._pending: dict[str, asyncio.Future[int]] = {}

    @property
    def schema(self) -> Schema:
        return self._format.schema

    @property
    def format(self) -> SchemaFormat:
        return self._format

    @property
    def config(self) -> SerializerConfig:
        return self._config

    def header(self, topic: str) -> bytes | None:
        """What every record of ``topic`` starts with (the wire header, then any message
        indexes), once its schema id is known; else ``None``."""
        return self._headers.get(topic)

    def subject(self, topic: str) -> str:
        """The registry subject of this serializer's records in ``topic``."""
        return subject_name(self._config.subject_name_strategy, topic, self._is_key,
                            self._format.record_name)

    def __call__(self, obj: Any, /) -> bytes | None:
        """Refused: the subject is named after the topic, which ``serialize_to_topic`` gets
        (the producer calls that)."""
        raise TypeError(f"{type(self).__name__} needs the topic: call serialize_to_topic(topic, "
                        f"obj), as Producer does")

    def serialize_to_topic(self, topic: str, obj: Any, /) -> bytes | None:
        """``obj`` in the wire format, or ``SerializerNotReady`` for a topic whose schema id is
        not known yet (``None`` stays ``None``: a tombstone)."""
        header = self._headers.get(topic)
        if header is None or obj is None:
            if obj is None:
                return None
            raise self._not_ready(topic)
        return self._encode(obj, header)

    async def prepare(self, topic: str) -> int:
        """Find (or register) this serializer's schema id for ``topic`` now; the id."""
        header = self._headers.get(topic)
        if header is not None:
            return int(_HEADER.unpack_from(header)[1])
        return await asyncio.shield(self._resolving(topic))

    def _not_ready(self, topic: str) -> SerializerNotReady:
        return SerializerNotReady(
            f"the schema of subject {self.subject(topic)!r} is not registered yet",
            self._resolving(topic))

    def _resolving(self, topic: str) -> asyncio.Future[int]:
        future = self._pending.get(topic)
        if future is None:
            future = asyncio.ensure_future(self._resolve(topic))
            self._pending[topic] = future
            future.add_done_callback(lambda done: self._resolved(topic, done))
        return future

    def _resolved(self, topic: str, future: asyncio.Future[int]) -> None:
        if self._pending.get(topic) is future:
            del self._pending[topic]
        if not future.cancelled():
            future.exception()  # retrieved: every awaiting send reports it

    async def _resolve(self, topic: str) -> int:
        subject = self.subject(topic)
        cfg = self._config
        client = self._client
        if cfg.use_latest_version:
            latest = await client.latest_version(subject)
            self._format.use_schema(latest.schema)
            self._encode = self._format.encoder
            schema_id = latest.schema_id
        else:
            schema = await self._format.schema_to_register(client, cfg.normalize_schemas)
            if cfg.auto_register_schemas:
                schema_id = await client.register(subject, schema,
                                                  normalize=cfg.normalize_schemas)
            else:
                schema_id = (await client.lookup(subject, schema,
                                                 normalize=cfg.normalize_schemas)).schema_id
        self._headers[topic] = wire_header(schema_id) + self._format.message_indexes
        return schema_id
