"""The parsed form of a message spec: version ranges, types, fields, structs, messages.

Also the vocabulary of the spec format (the keys the parser accepts, the primitive types and
their sizes), so that both the parser and the emitters read it from one place.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from typing import Any

MAX_VERSION = 0x7FFF
TOP_KEYS = frozenset(
    {
        "apiKey",
        "type",
        "listeners",
        "name",
        "validVersions",
        "flexibleVersions",
        "deprecatedVersions",
        "latestVersionUnstable",
        "fields",
        "commonStructs",
    }
)
FIELD_KEYS = frozenset(
    {
        "name",
        "type",
        "versions",
        "nullableVersions",
        "taggedVersions",
        "tag",
        "default",
        "ignorable",
        "flexibleVersions",
        "about",
        "fields",
        "mapKey",
        "entityType",
        "zeroCopy",
    }
)
COMMON_STRUCT_KEYS = frozenset({"name", "versions", "fields"})
OVERLAY_KEYS = frozenset({"description", "patches"})
PATCH_KEYS = frozenset({"set", "fieldOps"})
FIELD_OP_KEYS = frozenset({"op", "path", "set", "field"})

# Fixed-size primitives: struct format code and size.
FIXED: dict[str, tuple[str, int]] = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
}
INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
PRIMITIVES = frozenset(FIXED) | {"string", "bytes", "records", "uuid"}
NULLABLE_KINDS = frozenset({"string", "bytes", "records"})
RESERVED_ATTRS = frozenset(
    {"unknown_tagged_fields", "encode", "decode", "write", "header_version"}
)


class SpecError(Exception):
    """A spec (or overlay) the generator refuses; the message names the file and the key."""


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; ``lo > hi`` is the empty range ("none")."""

    lo: int
    hi: int

    @staticmethod
    def parse(text: object, where: str) -> Versions:
        if not isinstance(text, str):
            raise SpecError(f"{where}: version range must be a string, got {text!r}")
        s = text.strip()
        if s == "none":
            return Versions(1, 0)
        m = re.fullmatch(r"(\d+)\+", s)
        if m:
            return Versions(int(m.group(1)), MAX_VERSION)
        m = re.fullmatch(r"(\d+)-(\d+)", s)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise SpecError(f"{where}: empty version range {text!r}")
            return Versions(lo, hi)
        m = re.fullmatch(r"\d+", s)
        if m:
            return Versions(int(s), int(s))
        raise SpecError(f"{where}: cannot parse version range {text!r}")

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def describe(self) -> str:
        if self.empty:
            return "none"
        if self.hi == MAX_VERSION:
            return f"{self.lo}+"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"

    def subset_of(self, other: Versions) -> bool:
        return self.empty or (other.lo <= self.lo and self.hi <= other.hi)


NO_VERSIONS = Versions(1, 0)


@dataclass
class TypeRef:
    """``kind`` is "prim", "struct" or "array"; arrays hold their element in ``elem``."""

    kind: str
    name: str
    elem: TypeRef | None = None

    def describe(self) -> str:
        return f"[]{self.elem.describe()}" if self.elem else self.name


@dataclass
class FieldSpec:
    name: str
    attr: str
    type: TypeRef
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: Any
    default_raw: Any
    ignorable: bool
    flexible_override: Versions | None
    about: str
    struct: StructSpec | None = None  # for struct and []struct types

    def is_present(self, v: int) -> bool:
        return v in self.versions

    def is_nullable(self, v: int) -> bool:
        return v in self.nullable


@dataclass
class StructSpec:
    name: str
    versions: Versions
    fields: list[FieldSpec] = field(default_factory=list)
    is_common: bool = False


@dataclass
class MessageSpec:
    name: str
    kind: str  # request, response, header
    api_key: int | None
    valid: Versions
    flexible: Versions
    deprecated: Versions
    latest_unstable: bool
    top: StructSpec
    structs: dict[str, StructSpec]
    source: str
    overlays: list[str]

    @property
    def api_name(self) -> str:
        for suffix in ("Request", "Response"):
            if self.kind != "header" and self.name.endswith(suffix):
                return self.name[: -len(suffix)]
        return self.name

    def versions(self) -> range:
        return range(self.valid.lo, self.valid.hi + 1)

    def first_flexible(self) -> int | None:
        for v in self.versions():
            if v in self.flexible:
                return v
        return None


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = s.lower()
    if keyword.iskeyword(s):
        s += "_"
    return s
