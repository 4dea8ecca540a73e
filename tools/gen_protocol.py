#!/usr/bin/env python3
"""Generate aiokprod's wire-protocol classes from Kafka's JSON message specs.

Reads the vendored ``tools/kafka-specs/*.json`` (``--specs DIR``) and
``tools/kafka-specs/kafka-error-codes.tsv`` (``--error-codes FILE``), merges the overlays in
``tools/protocol_overlays/`` and writes:

* ``aiokprod/protocol/_generated/<api>.py``: one versionless class per message, its structs
  nested as attributes, with straight-line encoders/decoders per group of versions sharing a
  wire layout (no per-field interpreter at run time);
* ``aiokprod/protocol/_generated/__init__.py``: re-exports and ``API_BY_KEY``;
* ``aiokprod/_error_codes.py``: the ``ErrorCode`` enum;
* the marked section of ``aiokprod/errors.py``: one exception class per error code.

``--check`` regenerates in memory and exits 1 listing every file that would change (and stale
files in ``_generated/``). Parsing is strict: a key the generator does not know fails it with
the file and key named, because silently ignoring a spec feature would produce wrong bytes.
"""

from __future__ import annotations

import argparse
import csv
import json
import keyword
import re
import sys
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Apache Kafka's own message definitions, vendored (tools/kafka-specs/README.md says from where)
DEFAULT_SPECS = REPO / "tools" / "kafka-specs"
DEFAULT_ERROR_CODES = DEFAULT_SPECS / "kafka-error-codes.tsv"
OVERLAY_DIR = Path(__file__).resolve().parent / "protocol_overlays"
GENERATED_DIR = Path("aiokprod/protocol/_generated")
ERROR_CODES_FILE = Path("aiokprod/_error_codes.py")
ERRORS_FILE = Path("aiokprod/errors.py")
BEGIN_MARK = "# --- BEGIN GENERATED BROKER ERRORS (tools/gen_protocol.py; do not edit) ---"
END_MARK = "# --- END GENERATED BROKER ERRORS ---"

# (request spec, response spec) per API, in API-key order of the generated registry.
APIS: tuple[str, ...] = (
    "ApiVersions",
    "Metadata",
    "Produce",
    "InitProducerId",
    "FindCoordinator",
    "AddPartitionsToTxn",
    "AddOffsetsToTxn",
    "EndTxn",
    "TxnOffsetCommit",
    "SaslHandshake",
    "SaslAuthenticate",
    "CreateTopics",
    "DescribeProducers",
)
HEADERS: tuple[str, ...] = ("RequestHeader", "ResponseHeader")

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


SUPPORT_NAMES = (
    "_field_unsupported",
    "_new",
    "_no_decoder",
    "_no_encoder",
    "_unsupported_version",
)
PRIMITIVE_NAMES = (
    "Buf",
    "Chunk",
    "FieldInfo",
    "MISSING",
    "ZERO_UUID",
    "_Missing",
    "enc_array_len",
    "enc_bytes_len",
    "enc_compact_array_len",
    "enc_compact_bytes_len",
    "enc_compact_nullable_array_len",
    "enc_compact_nullable_bytes_len",
    "enc_compact_nullable_string",
    "enc_compact_string",
    "enc_nullable_array_len",
    "enc_nullable_bytes_len",
    "enc_nullable_string",
    "enc_string",
    "enc_uuid",
    "read_array_len",
    "read_bytes",
    "read_compact_array_len",
    "read_compact_bytes",
    "read_compact_nullable_array_len",
    "read_compact_nullable_bytes",
    "read_compact_nullable_string",
    "read_compact_string",
    "read_fixed_array",
    "read_nullable_array_len",
    "read_nullable_bytes",
    "read_nullable_string",
    "read_string",
    "read_unknown_tags",
    "read_uuid",
    "read_uvarint",
    "null_not_allowed",
    "records_repr",
    "truncated",
    "write_tagged_fields",
)


class SpecError(Exception):
    """A spec (or overlay) the generator refuses; the message names the file and the key."""


# --------------------------------------------------------------------------- spec reading


def strip_comments(text: str) -> str:
    """Drop ``//`` comments outside JSON strings (Kafka's specs are JSON plus comments)."""
    out: list[str] = []
    i = 0
    n = len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
            continue
        if c == '"':
            in_string = True
            out.append(c)
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            while i < n and text[i] != "\n":
                i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def load_json(path: Path) -> Any:
    try:
        return json.loads(strip_comments(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path.name}: invalid JSON: {exc}") from exc


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


def check_keys(obj: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise SpecError(f"{where}: unknown key {key!r}")


def parse_type(text: object, where: str) -> TypeRef:
    if not isinstance(text, str) or not text:
        raise SpecError(f"{where}: bad type {text!r}")
    if text.startswith("[]"):
        return TypeRef("array", text, parse_type(text[2:], where))
    if text in PRIMITIVES:
        return TypeRef("prim", text)
    if text[0].isupper() and text.isidentifier():
        return TypeRef("struct", text)
    raise SpecError(f"{where}: unknown type {text!r}")


def parse_default(f: FieldSpec, raw: Any, where: str) -> Any:
    """Turn a spec default into the Python value used by ``__init__`` and default checks."""
    t = f.type
    nullable_any = not f.nullable.empty
    if t.kind == "array":
        if raw is None:
            return []
        if raw == "null":
            if not nullable_any:
                raise SpecError(f"{where}: default null on a non-nullable array")
            return None
        raise SpecError(f"{where}: arrays only take the default 'null', got {raw!r}")
    if t.kind == "struct":
        if raw is not None:
            raise SpecError(f"{where}: struct fields take no default, got {raw!r}")
        return None
    name = t.name
    if name in INT_RANGES:
        if raw is None:
            return 0
        if isinstance(raw, bool):
            raise SpecError(f"{where}: boolean default for {name}")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str):
            s = raw.strip()
            try:
                neg = s.startswith("-")
                body = s[1:] if neg else s
                value = int(body, 16) if body.lower().startswith("0x") else int(body, 10)
                value = -value if neg else value
            except ValueError as exc:
                raise SpecError(f"{where}: bad integer default {raw!r}") from exc
        else:
            raise SpecError(f"{where}: bad integer default {raw!r}")
        lo, hi = INT_RANGES[name]
        if not lo <= value <= hi:
            raise SpecError(f"{where}: default {value} out of range for {name}")
        return value
    if name == "bool":
        if raw is None:
            return False
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise SpecError(f"{where}: bad bool default {raw!r}")
    if name == "float64":
        if raw is None:
            return 0.0
        try:
            return float(raw)
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{where}: bad float64 default {raw!r}") from exc
    if name == "string":
        if raw is None:
            return ""
        if raw == "null":
            if not nullable_any:
                raise SpecError(f"{where}: default null on a non-nullable string")
            return None
        if not isinstance(raw, str):
            raise SpecError(f"{where}: bad string default {raw!r}")
        return raw
    if name in ("bytes", "records"):
        if raw == "null" or (raw is None and name == "records" and nullable_any):
            if not nullable_any:
                raise SpecError(f"{where}: default null on a non-nullable {name}")
            return None
        if raw is None:
            return b""
        raise SpecError(f"{where}: {name} fields only take the default 'null', got {raw!r}")
    if name == "uuid":
        if raw is None:
            return "ZERO"
        raise SpecError(f"{where}: uuid defaults are not supported, got {raw!r}")
    raise SpecError(f"{where}: no default rule for {name}")


class SpecParser:
    """Builds a :class:`MessageSpec` from one JSON document, failing on anything unknown."""

    def __init__(self, doc: dict[str, Any], source: str, overlays: list[str]) -> None:
        self.doc = doc
        self.source = source
        self.overlays = overlays
        self.structs: dict[str, StructSpec] = {}
        self.common: dict[str, dict[str, Any]] = {}

    def parse(self) -> MessageSpec:
        doc = self.doc
        where = self.source
        if not isinstance(doc, dict):
            raise SpecError(f"{where}: top level must be an object")
        check_keys(doc, TOP_KEYS, where)
        for required in ("name", "type", "validVersions", "fields"):
            if required not in doc:
                raise SpecError(f"{where}: missing key {required!r}")
        kind = doc["type"]
        if kind not in ("request", "response", "header"):
            raise SpecError(f"{where}: unsupported message type {kind!r}")
        api_key = doc.get("apiKey")
        if kind != "header" and not isinstance(api_key, int):
            raise SpecError(f"{where}: apiKey must be an integer")
        for key in ("listeners",):
            if key in doc and not isinstance(doc[key], list):
                raise SpecError(f"{where}: {key} must be a list")
        unstable = doc.get("latestVersionUnstable", False)
        if not isinstance(unstable, bool):
            raise SpecError(f"{where}: latestVersionUnstable must be a boolean")
        valid = Versions.parse(doc["validVersions"], f"{where}: validVersions")
        flexible = Versions.parse(doc.get("flexibleVersions", "none"), f"{where}: flexibleVersions")
        deprecated = Versions.parse(
            doc.get("deprecatedVersions", "none"), f"{where}: deprecatedVersions"
        )
        for cs in doc.get("commonStructs", []):
            if not isinstance(cs, dict):
                raise SpecError(f"{where}: commonStructs entries must be objects")
            check_keys(cs, COMMON_STRUCT_KEYS, f"{where}: commonStructs")
            name = cs.get("name")
            if not isinstance(name, str) or name in self.common:
                raise SpecError(f"{where}: bad or duplicate common struct name {name!r}")
            self.common[name] = cs
        self.valid = valid
        self.flexible = flexible
        top = StructSpec(doc["name"], valid)
        top.fields = self.parse_fields(doc["fields"], top, f"{where}: {doc['name']}")
        for name in self.common:
            if name not in self.structs:
                raise SpecError(f"{where}: common struct {name!r} is never used")
        return MessageSpec(
            name=doc["name"],
            kind=kind,
            api_key=api_key,
            valid=valid,
            flexible=flexible,
            deprecated=deprecated,
            latest_unstable=unstable,
            top=top,
            structs=self.structs,
            source=self.source,
            overlays=self.overlays,
        )

    def parse_fields(self, raw: Any, owner: StructSpec, where: str) -> list[FieldSpec]:
        if not isinstance(raw, list):
            raise SpecError(f"{where}: fields must be a list")
        fields: list[FieldSpec] = []
        for item in raw:
            fields.append(self.parse_field(item, owner, where))
        attrs: set[str] = set()
        for f in fields:
            if f.attr in attrs:
                raise SpecError(f"{where}: duplicate field {f.name!r}")
            attrs.add(f.attr)
        tagged = [f for f in fields if f.tag is not None]
        for i, a in enumerate(tagged):
            for b in tagged[i + 1 :]:
                overlap = max(a.tagged.lo, b.tagged.lo) <= min(a.tagged.hi, b.tagged.hi)
                if a.tag == b.tag and overlap:
                    raise SpecError(f"{where}: tag {a.tag} used by {a.name} and {b.name}")
        return fields

    def parse_field(self, raw: Any, owner: StructSpec, where: str) -> FieldSpec:
        if not isinstance(raw, dict):
            raise SpecError(f"{where}: field entries must be objects")
        name = raw.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            raise SpecError(f"{where}: bad field name {name!r}")
        fwhere = f"{where}.{name}"
        check_keys(raw, FIELD_KEYS, fwhere)
        if "type" not in raw or "versions" not in raw:
            raise SpecError(f"{fwhere}: fields need 'type' and 'versions'")
        ftype = parse_type(raw["type"], fwhere)
        versions = Versions.parse(raw["versions"], f"{fwhere}: versions")
        nullable = Versions.parse(
            raw.get("nullableVersions", "none"), f"{fwhere}: nullableVersions"
        )
        tagged = Versions.parse(raw.get("taggedVersions", "none"), f"{fwhere}: taggedVersions")
        tag = raw.get("tag")
        for flag in ("ignorable", "mapKey", "zeroCopy"):
            if flag in raw and not isinstance(raw[flag], bool):
                raise SpecError(f"{fwhere}: {flag} must be a boolean")
        for text_key in ("about", "entityType"):
            if text_key in raw and not isinstance(raw[text_key], str):
                raise SpecError(f"{fwhere}: {text_key} must be a string")
        if (tag is None) != tagged.empty:
            raise SpecError(f"{fwhere}: 'tag' and 'taggedVersions' must be given together")
        if tag is not None:
            if not isinstance(tag, int) or isinstance(tag, bool) or tag < 0:
                raise SpecError(f"{fwhere}: bad tag {tag!r}")
            if not tagged.subset_of(self.flexible):
                raise SpecError(f"{fwhere}: taggedVersions outside the flexible versions")
            if not tagged.subset_of(versions):
                raise SpecError(f"{fwhere}: taggedVersions outside the field's versions")
        if not nullable.empty:
            kind_ok = ftype.kind == "array" or ftype.name in NULLABLE_KINDS
            if not kind_ok:
                raise SpecError(f"{fwhere}: type {ftype.describe()} cannot be nullable")
        flex_override = None
        if "flexibleVersions" in raw:
            flex_override = Versions.parse(raw["flexibleVersions"], f"{fwhere}: flexibleVersions")
        f = FieldSpec(
            name=name,
            attr=snake(name),
            type=ftype,
            versions=versions,
            nullable=nullable,
            tagged=tagged,
            tag=tag,
            default=None,
            default_raw=raw.get("default"),
            ignorable=bool(raw.get("ignorable", False)),
            flexible_override=flex_override,
            about=str(raw.get("about", "")).strip(),
        )
        if f.attr in RESERVED_ATTRS:
            raise SpecError(f"{fwhere}: field name collides with a generated attribute")
        base = ftype.elem if ftype.kind == "array" else ftype
        assert base is not None
        if base.kind == "array":
            raise SpecError(f"{fwhere}: arrays of arrays are not supported")
        if base.kind == "struct":
            if ftype.kind == "struct" and not nullable.empty:
                raise SpecError(f"{fwhere}: nullable struct fields are not supported")
            f.struct = self.resolve_struct(base.name, raw.get("fields"), versions, fwhere)
        elif "fields" in raw:
            raise SpecError(f"{fwhere}: 'fields' given for non-struct type {ftype.describe()}")
        f.default = parse_default(f, f.default_raw, fwhere)
        return f

    def resolve_struct(
        self, name: str, fields: Any, versions: Versions, where: str
    ) -> StructSpec:
        if fields is not None:
            if name in self.common:
                raise SpecError(f"{where}: struct {name!r} shadows a common struct")
            if name in self.structs:
                raise SpecError(f"{where}: struct {name!r} defined twice")
            st = StructSpec(name, versions)
            self.structs[name] = st
            st.fields = self.parse_fields(fields, st, f"{where}")
            return st
        if name in self.common:
            existing = self.structs.get(name)
            if existing is not None:
                return existing
            cs = self.common[name]
            cver = Versions.parse(cs.get("versions"), f"{where}: common struct {name} versions")
            if not versions.subset_of(cver):
                raise SpecError(f"{where}: used in versions outside common struct {name}")
            st = StructSpec(name, cver, is_common=True)
            self.structs[name] = st
            st.fields = self.parse_fields(cs.get("fields"), st, f"{self.source}: {name}")
            return st
        raise SpecError(f"{where}: struct type {name!r} has no fields and is no common struct")


# --------------------------------------------------------------------------- overlays


def apply_overlay(doc: dict[str, Any], patch: dict[str, Any], where: str) -> None:
    """Merge one overlay patch into a spec document (in place)."""
    check_keys(patch, PATCH_KEYS, where)
    for key, value in patch.get("set", {}).items():
        if key not in TOP_KEYS:
            raise SpecError(f"{where}: 'set' names unknown top-level key {key!r}")
        doc[key] = value
    for op in patch.get("fieldOps", []):
        check_keys(op, FIELD_OP_KEYS, f"{where}: fieldOps")
        kind = op.get("op")
        path = op.get("path")
        if not isinstance(path, str) or not path:
            raise SpecError(f"{where}: fieldOps entries need a 'path' like 'TopicData/Name'")
        names = path.split("/")
        if kind == "update":
            target = _find_field(doc["fields"], names, where)
            for key, value in op.get("set", {}).items():
                if key not in FIELD_KEYS:
                    raise SpecError(f"{where}: update of {path} sets unknown key {key!r}")
                target[key] = value
        elif kind in ("insertAfter", "append"):
            new = op.get("field")
            if not isinstance(new, dict):
                raise SpecError(f"{where}: {kind} at {path} needs a 'field' object")
            if kind == "append":
                parent = _find_field(doc["fields"], names, where)
                if "fields" not in parent:
                    raise SpecError(f"{where}: append target {path} is not an inline struct")
                parent["fields"].append(new)
            else:
                siblings = (
                    doc["fields"]
                    if len(names) == 1
                    else _find_field(doc["fields"], names[:-1], where)["fields"]
                )
                idx = next(
                    (i for i, f in enumerate(siblings) if f.get("name") == names[-1]), None
                )
                if idx is None:
                    raise SpecError(f"{where}: no field {path}")
                siblings.insert(idx + 1, new)
        else:
            raise SpecError(f"{where}: unknown fieldOps op {kind!r}")


def _find_field(fields: list[dict[str, Any]], names: list[str], where: str) -> dict[str, Any]:
    current = fields
    found: dict[str, Any] | None = None
    for i, name in enumerate(names):
        found = next((f for f in current if f.get("name") == name), None)
        if found is None:
            raise SpecError(f"{where}: no field {'/'.join(names[: i + 1])}")
        current = found.get("fields", [])
    assert found is not None
    return found


def load_overlays(overlay_dir: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Overlay patches keyed by spec file name, in overlay file-name order."""
    result: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    if not overlay_dir.is_dir():
        return result
    for path in sorted(overlay_dir.glob("*.json")):
        doc = load_json(path)
        where = f"overlay {path.name}"
        if not isinstance(doc, dict):
            raise SpecError(f"{where}: top level must be an object")
        check_keys(doc, OVERLAY_KEYS, where)
        patches = doc.get("patches")
        if not isinstance(patches, dict) or not patches:
            raise SpecError(f"{where}: 'patches' must map spec files to patches")
        for spec_file, patch in patches.items():
            if not isinstance(patch, dict):
                raise SpecError(f"{where}: patch for {spec_file} must be an object")
            result.setdefault(spec_file, []).append((path.name, patch))
    return result


def load_message(
    specs: Path, name: str, overlays: dict[str, list[tuple[str, dict[str, Any]]]]
) -> MessageSpec:
    path = specs / f"{name}.json"
    if not path.is_file():
        raise SpecError(f"{path}: spec file not found")
    doc = load_json(path)
    applied: list[str] = []
    for overlay_name, patch in overlays.get(path.name, []):
        apply_overlay(doc, patch, f"overlay {overlay_name} on {path.name}")
        applied.append(overlay_name)
    return SpecParser(doc, path.name, applied).parse()


# --------------------------------------------------------------------------- code model


class Emitter:
    """Collects lines with indentation; generated code is built from these."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append(("    " * self.level + line) if line else "")

    def indent(self) -> _Indent:
        return _Indent(self)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, em: Emitter) -> None:
        self.em = em

    def __enter__(self) -> None:
        self.em.level += 1

    def __exit__(self, *exc: object) -> None:
        self.em.level -= 1


@dataclass
class Group:
    """Versions of one struct that share a wire layout, and so one encoder/decoder pair."""

    struct: StructSpec
    versions: list[int]
    key: tuple[Any, ...]

    @property
    def first(self) -> int:
        return self.versions[0]

    def describe(self) -> str:
        return describe_versions(self.versions)


def describe_versions(versions: list[int]) -> str:
    spans: list[list[int]] = []
    for v in versions:
        if spans and spans[-1][1] + 1 == v:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


class ModuleGen:
    """Generates one module (a request/response pair, or one header)."""

    def __init__(self, messages: list[MessageSpec], module: str) -> None:
        self.messages = messages
        self.module = module
        self.structs_fmt: dict[str, str] = {}  # struct format -> module-level name
        self.group_cache: dict[tuple[str, str, int], Group] = {}
        self.groups: dict[tuple[str, str], list[Group]] = {}
        self.defaults: dict[str, str] = {}  # struct class path -> module default instance name
        self.uses: set[str] = set()

    # ---- naming

    def cls_path(self, msg: MessageSpec, st: StructSpec) -> str:
        return msg.name if st is msg.top else f"{msg.name}.{st.name}"

    def alias(self, msg: MessageSpec, st: StructSpec) -> str:
        return f"_C_{msg.name}" if st is msg.top else f"_C_{msg.name}_{st.name}"

    def fn(self, kind: str, msg: MessageSpec, g: Group) -> str:
        base = msg.name if g.struct is msg.top else f"{msg.name}_{g.struct.name}"
        return f"_{kind}_{base}_v{g.first}"

    def fmt_name(self, fmt: str) -> str:
        name = self.structs_fmt.get(fmt)
        if name is None:
            name = "_S_" + fmt[1:].replace("?", "o")
            self.structs_fmt[fmt] = name
        return name

    # ---- layout

    def flex(self, msg: MessageSpec, f: FieldSpec | None, v: int) -> bool:
        if f is not None and f.flexible_override is not None:
            return v in f.flexible_override
        return v in msg.flexible

    def struct_versions(self, msg: MessageSpec, st: StructSpec) -> list[int]:
        if st is msg.top:
            return list(msg.versions())
        return [v for v in msg.versions() if v in st.versions]

    def group_of(self, msg: MessageSpec, st: StructSpec, v: int) -> Group:
        ck = (msg.name, st.name, v)
        cached = self.group_cache.get(ck)
        if cached is not None:
            return cached
        key = self.layout_key(msg, st, v)
        groups = self.groups.setdefault((msg.name, st.name), [])
        for g in groups:
            if g.key == key:
                g.versions.append(v)
                self.group_cache[ck] = g
                return g
        g = Group(st, [v], key)
        groups.append(g)
        self.group_cache[ck] = g
        return g

    def layout_key(self, msg: MessageSpec, st: StructSpec, v: int) -> tuple[Any, ...]:
        items: list[Any] = [("flex", v in msg.flexible)]
        for f in st.fields:
            if not f.is_present(v):
                items.append(("absent", f.attr, f.ignorable))
                continue
            child = None
            if f.struct is not None:
                child = self.group_of(msg, f.struct, v).first
            items.append(
                (
                    "tagged" if v in f.tagged and v in msg.flexible else "plain",
                    f.attr,
                    self.flex(msg, f, v),
                    f.is_nullable(v),
                    child,
                )
            )
        return tuple(items)

    def min_size(self, msg: MessageSpec, st: StructSpec, v: int) -> int:
        total = 1 if v in msg.flexible else 0
        for f in st.fields:
            if not f.is_present(v) or (v in f.tagged and v in msg.flexible):
                continue
            flex = self.flex(msg, f, v)
            t = f.type
            if t.kind == "array":
                total += 1 if flex else 4
            elif t.kind == "struct":
                assert f.struct is not None
                total += self.min_size(msg, f.struct, v)
            elif t.name in FIXED:
                total += FIXED[t.name][1]
            elif t.name == "uuid":
                total += 16
            elif t.name == "string":
                total += 1 if flex else 2
            else:
                total += 1 if flex else 4
        return total

    # ---- python types

    def py_type(self, msg: MessageSpec, f: FieldSpec, for_elem: bool = False) -> str:
        t = f.type.elem if for_elem else f.type
        assert t is not None
        if t.kind == "array":
            inner = self.py_type(msg, f, for_elem=True)
            base = f"list[{inner}]"
        elif t.kind == "struct":
            assert f.struct is not None
            base = self.cls_path(msg, f.struct)
        elif t.name == "bool":
            base = "bool"
        elif t.name == "float64":
            base = "float"
        elif t.name in INT_RANGES:
            base = "int"
        elif t.name == "string":
            base = "str"
        elif t.name == "bytes":
            base = "bytes"
        elif t.name == "records":
            base = "bytes | bytearray | memoryview"
        elif t.name == "uuid":
            base = "uuid.UUID"
        else:
            raise AssertionError(t.name)
        if not for_elem and not f.nullable.empty:
            base += " | None"
        return base

    def default_expr(self, msg: MessageSpec, f: FieldSpec) -> str:
        """An expression for a fresh default value (a new list or struct each time)."""
        if f.type.kind == "array":
            return "None" if f.default is None else "[]"
        if f.type.kind == "struct":
            assert f.struct is not None
            return f"{self.alias(msg, f.struct)}()"
        if f.type.name == "uuid":
            return "ZERO_UUID"
        return repr(f.default)

    def is_default_test(self, msg: MessageSpec, f: FieldSpec, expr: str) -> str:
        """An expression true when ``expr`` differs from the field's default."""
        if f.type.kind == "array":
            return f"{expr} is not None" if f.default is None else f"{expr} != []"
        if f.type.kind == "struct":
            assert f.struct is not None
            name = f"_D_{msg.name}_{f.struct.name}"
            self.defaults[name] = self.alias(msg, f.struct)
            return f"{expr} != {name}"
        if f.type.name == "uuid":
            return f"{expr} != ZERO_UUID"
        if f.default is None:
            return f"{expr} is not None"
        return f"{expr} != {f.default!r}"

    # ---- emission: classes

    def emit_doc(self, em: Emitter, lines: list[str]) -> None:
        em('"""' + lines[0])
        for line in lines[1:]:
            em(line)
        em('"""')

    def emit_classes(self, em: Emitter, msg: MessageSpec) -> None:
        em(f"class {msg.name}:")
        with em.indent():
            self.emit_doc(em, self.message_doc(msg))
            em()
            for st in msg.structs.values():
                self.emit_struct_class(em, msg, st)
                em()
            self.emit_struct_body(em, msg, msg.top)
            self.emit_message_api(em, msg)
        em()
        em()

    def message_doc(self, msg: MessageSpec) -> list[str]:
        head = f"Kafka {msg.api_name} {msg.kind}"
        if msg.api_key is not None:
            head += f" (API key {msg.api_key})"
        lines = [head + f", versions {msg.valid.describe()}.", ""]
        flex = msg.first_flexible()
        lines.append(
            f"Flexible (compact encodings, tagged fields) from version {flex}."
            if flex is not None
            else "Never flexible."
        )
        if not msg.deprecated.empty:
            lines.append(f"Deprecated versions: {msg.deprecated.describe()}.")
        if msg.latest_unstable:
            lines.append("The latest version is unstable (latestVersionUnstable).")
        lines.append("")
        lines.extend(self.field_docs(msg, msg.top))
        return lines

    def field_docs(self, msg: MessageSpec, st: StructSpec) -> list[str]:
        out = ["Fields:"]
        for f in st.fields:
            bits = [f"versions {f.versions.describe()}"]
            if not f.nullable.empty:
                bits.append(f"nullable {f.nullable.describe()}")
            if f.tag is not None:
                bits.append(f"tag {f.tag} in {f.tagged.describe()}")
            if f.ignorable:
                bits.append("ignorable")
            head = f"{f.attr} ({f.type.describe()}; {', '.join(bits)}):"
            body = f.about or "(no description in the spec)"
            if f.type.kind == "prim" and f.type.name == "records":
                body += " Encode takes bytes, bytearray or memoryview; decode gives bytes."
            wrapped = textwrap.wrap(f"{head} {body}", width=88, subsequent_indent="    ")
            out.extend("    " + w for w in wrapped)
        if not st.fields:
            out.append("    (none)")
        if self.flexible_capable(msg):
            out.append("    unknown_tagged_fields: tagged fields unknown to this spec, kept as raw")
            out.append("        bytes by tag and written back, in tag order, on encode.")
        return out

    def flexible_capable(self, msg: MessageSpec) -> bool:
        return msg.first_flexible() is not None

    def emit_struct_class(self, em: Emitter, msg: MessageSpec, st: StructSpec) -> None:
        em(f"class {st.name}:")
        with em.indent():
            kind = "Common struct" if st.is_common else "Struct"
            doc = [f"{kind} {st.name} of {msg.name}, versions {st.versions.describe()}.", ""]
            doc.extend(self.field_docs(msg, st))
            self.emit_doc(em, doc)
            em()
            self.emit_struct_body(em, msg, st)

    def emit_struct_body(self, em: Emitter, msg: MessageSpec, st: StructSpec) -> None:
        cls = self.cls_path(msg, st)
        attrs = [f.attr for f in st.fields]
        flexible = self.flexible_capable(msg)
        if flexible:
            attrs.append("unknown_tagged_fields")
        if len(attrs) == 1:
            em(f"__slots__ = ({attrs[0]!r},)")
        else:
            em(f"__slots__ = ({', '.join(repr(a) for a in attrs)})")
        em()
        em("FIELDS: ClassVar[tuple[FieldInfo, ...]] = (")
        with em.indent():
            for f in st.fields:
                em(
                    f"FieldInfo({f.attr!r}, {f.name!r}, {f.type.describe()!r}, "
                    f"{(f.versions.lo, min(f.versions.hi, msg.valid.hi))!r}, "
                    f"{(f.nullable.lo, min(f.nullable.hi, msg.valid.hi))!r}, {f.tag!r}, "
                    f"{(f.tagged.lo, min(f.tagged.hi, msg.valid.hi))!r}, {f.ignorable!r}),"
                )
        em(")")
        em()
        for f in st.fields:
            em(f"{f.attr}: {self.py_type(msg, f)}")
        if flexible:
            em("unknown_tagged_fields: dict[int, bytes]")
        if st.fields or flexible:
            em()
        params: list[str] = []
        body: list[str] = []
        for f in st.fields:
            ptype = self.py_type(msg, f)
            if f.type.kind in ("array", "struct"):
                self.uses.add("MISSING")
                params.append(f"{f.attr}: {ptype} | _Missing = MISSING")
                body.append(
                    f"self.{f.attr} = {self.default_expr(msg, f)} "
                    f"if {f.attr} is MISSING else {f.attr}"
                )
            else:
                if f.type.name == "uuid":
                    self.uses.add("ZERO_UUID")
                dflt = "ZERO_UUID" if f.type.name == "uuid" else repr(f.default)
                params.append(f"{f.attr}: {ptype} = {dflt}")
                body.append(f"self.{f.attr} = {f.attr}")
        if flexible:
            params.append("unknown_tagged_fields: dict[int, bytes] | None = None")
            body.append(
                "self.unknown_tagged_fields = {} if unknown_tagged_fields is None "
                "else unknown_tagged_fields"
            )
        if params:
            em("def __init__(")
            with em.indent():
                em("self,")
                em("*,")
                for p in params:
                    em(p + ",")
            em(") -> None:")
        else:
            em("def __init__(self) -> None:")
        with em.indent():
            if body:
                for b in body:
                    em(b)
            else:
                em("pass")
        em()
        em("def __eq__(self, other: object) -> bool:")
        with em.indent():
            em(f"if not isinstance(other, {cls}):")
            with em.indent():
                em("return NotImplemented")
            if attrs:
                em("return (")
                with em.indent():
                    for i, a in enumerate(attrs):
                        em(f"{'and ' if i else ''}self.{a} == other.{a}")
                em(")")
            else:
                em("return True")
        em()
        em("def __repr__(self) -> str:")
        with em.indent():
            parts: list[str] = []
            for f in st.fields:
                if f.type.kind == "prim" and f.type.name == "records":
                    self.uses.add("records_repr")
                    parts.append(f"{f.attr}={{records_repr(self.{f.attr})}}")
                else:
                    parts.append(f"{f.attr}={{self.{f.attr}!r}}")
            em("text = (")
            with em.indent():
                em(f'f"{cls}("')
                for i, p in enumerate(parts):
                    sep = ", " if i < len(parts) - 1 else ""
                    em(f'f"{p}{sep}"')
            em(")")
            if flexible:
                em("if self.unknown_tagged_fields:")
                with em.indent():
                    em(
                        'text += f"'
                        + (", " if parts else "")
                        + 'unknown_tagged_fields={self.unknown_tagged_fields!r}"'
                    )
            em('return text + ")"')
        em()

    def emit_message_api(self, em: Emitter, msg: MessageSpec) -> None:
        em()
        if msg.api_key is not None:
            em(f"API_KEY: ClassVar[int] = {msg.api_key}")
        em(f"API_NAME: ClassVar[str] = {msg.api_name!r}")
        em(f"MIN_VERSION: ClassVar[int] = {msg.valid.lo}")
        em(f"MAX_VERSION: ClassVar[int] = {msg.valid.hi}")
        em(f"FIRST_FLEXIBLE_VERSION: ClassVar[int | None] = {msg.first_flexible()!r}")
        deprecated = tuple(v for v in msg.versions() if v in msg.deprecated)
        em(f"DEPRECATED_VERSIONS: ClassVar[tuple[int, ...]] = {deprecated!r}")
        em(f"LATEST_VERSION_UNSTABLE: ClassVar[bool] = {msg.latest_unstable!r}")
        if msg.kind == "request":
            resp = msg.name[: -len("Request")] + "Response"
            em(f"RESPONSE_TYPE: ClassVar[type[{resp}]] = {resp}")
        if msg.kind != "header":
            flex = msg.first_flexible()
            em()
            em("@staticmethod")
            em("def header_version(version: int) -> int:")
            with em.indent():
                if msg.kind == "request":
                    em('"""Request header v2 for flexible versions, else v1."""')
                    if flex is None:
                        em("return 1")
                    else:
                        em(f"return 2 if version >= {flex} else 1")
                elif msg.name == "ApiVersionsResponse":
                    em('"""Always response header v0, so any client version can parse it."""')
                    em("return 0")
                else:
                    em('"""Response header v1 for flexible versions, else v0."""')
                    if flex is None:
                        em("return 0")
                    else:
                        em(f"return 1 if version >= {flex} else 0")
        em()
        em("def encode(self, version: int) -> bytes:")
        with em.indent():
            em('"""The message body at ``version``: no header, no size prefix."""')
            em("out: list[Chunk] = []")
            em("self.write(out, version)")
            em('return b"".join(out)')
        em()
        em("def write(self, out: list[Chunk], version: int) -> None:")
        with em.indent():
            em('"""Append the body\'s chunks to ``out`` (records are appended, not copied)."""')
            em(f"if version < {msg.valid.lo} or version > {msg.valid.hi}:")
            with em.indent():
                em(f"raise _unsupported_version({msg.api_name!r}, {msg.name!r}, version)")
            em("try:")
            with em.indent():
                em(f"_ENCODERS_{msg.name}[version](self, out)")
            em("except struct.error as exc:")
            with em.indent():
                em(f'raise ValueError(f"{msg.name} v{{version}}: {{exc}}") from exc')
        em()
        em("@classmethod")
        em(f"def decode(cls, data: Buf, version: int, *, strict: bool = True) -> {msg.name}:")
        with em.indent():
            em('"""Decode a whole body; missing bytes raise ProtocolError.')
            em()
            em("Trailing bytes raise too unless ``strict`` is false: a client reading a broker's")
            em("response tolerates them (as the Java client and librdkafka do), tests do not.")
            em('"""')
            em(f"if version < {msg.valid.lo} or version > {msg.valid.hi}:")
            with em.indent():
                em(f"raise _unsupported_version({msg.api_name!r}, {msg.name!r}, version)")
            em("end = len(data)")
            em("try:")
            with em.indent():
                em(f"obj, pos = _DECODERS_{msg.name}[version](data, 0, end)")
            em("except ProtocolError:")
            with em.indent():
                em("raise")
            em("except (struct.error, IndexError, ValueError, OverflowError) as exc:")
            with em.indent():
                em(
                    f'raise ProtocolError(f"{msg.name} v{{version}}: malformed input: '
                    f'{{exc}}") from exc'
                )
            em("if pos != end and strict:")
            with em.indent():
                em(
                    f'raise ProtocolError(f"{msg.name} v{{version}}: {{end - pos}} trailing '
                    f'bytes after the body")'
                )
            em("return obj")

    # ---- emission: encoders

    def emit_codecs(self, em: Emitter, msg: MessageSpec) -> None:
        order: list[StructSpec] = [msg.top, *msg.structs.values()]
        for v in msg.versions():
            self.group_of(msg, msg.top, v)
        for st in order:
            for g in self.groups.get((msg.name, st.name), []):
                self.emit_encoder(em, msg, g)
                self.emit_decoder(em, msg, g)
        em(f"_ENCODERS_{msg.name}: tuple[Callable[[{msg.name}, list[Chunk]], None], ...] = (")
        with em.indent():
            for v in range(msg.valid.hi + 1):
                if v < msg.valid.lo:
                    em("_no_encoder,")
                else:
                    em(f"{self.fn('enc', msg, self.group_of(msg, msg.top, v))},")
        em(")")
        em(
            f"_DECODERS_{msg.name}: tuple[Callable[[Buf, int, int], "
            f"tuple[{msg.name}, int]], ...] = ("
        )
        with em.indent():
            for v in range(msg.valid.hi + 1):
                if v < msg.valid.lo:
                    em("_no_decoder,")
                else:
                    em(f"{self.fn('dec', msg, self.group_of(msg, msg.top, v))},")
        em(")")
        em()
        em()

    def runs(
        self, msg: MessageSpec, st: StructSpec, v: int
    ) -> Iterator[tuple[str, list[FieldSpec]]]:
        """Plain fields in order, fixed-size neighbours merged into ("fixed", [...]) runs."""
        run: list[FieldSpec] = []
        for f in st.fields:
            if not f.is_present(v) or (v in f.tagged and v in msg.flexible):
                continue
            if f.type.kind == "prim" and f.type.name in FIXED:
                run.append(f)
                continue
            if run:
                yield "fixed", run
                run = []
            yield "single", [f]
        if run:
            yield "fixed", run

    def what(self, msg: MessageSpec, st: StructSpec, f: FieldSpec | None = None) -> str:
        base = self.cls_path(msg, st)
        return f"{base}.{f.attr}" if f is not None else base

    def emit_encoder(self, em: Emitter, msg: MessageSpec, g: Group) -> None:
        st = g.struct
        v = g.first
        cls = self.cls_path(msg, st)
        em(f"def {self.fn('enc', msg, g)}(o: {cls}, out: list[Chunk]) -> None:")
        with em.indent():
            em(f"# versions {g.describe()}")
            start = len(em.lines)
            for f in st.fields:
                if not f.is_present(v) and not f.ignorable:
                    test = self.is_default_test(msg, f, f"o.{f.attr}")
                    em(f"if {test}:")
                    with em.indent():
                        em(
                            f"raise _field_unsupported({self.what(msg, st, f)!r}, "
                            f"{g.describe()!r})"
                        )
            for kind, fields in self.runs(msg, st, v):
                if kind == "fixed":
                    fmt = ">" + "".join(FIXED[f.type.name][0] for f in fields)
                    sname = self.fmt_name(fmt)
                    args = ", ".join(f"o.{f.attr}" for f in fields)
                    em(f"out.append({sname}.pack({args}))")
                else:
                    self.emit_encode_field(
                        em, msg, st, fields[0], v=v, expr=f"o.{fields[0].attr}", out="out"
                    )
            if v in msg.flexible:
                tagged = [
                    f for f in st.fields if f.is_present(v) and v in f.tagged
                ]
                tagged.sort(key=lambda f: f.tag or 0)
                if not tagged:
                    em("if o.unknown_tagged_fields:")
                    with em.indent():
                        em(
                            f"write_tagged_fields(out, [], o.unknown_tagged_fields, "
                            f"frozenset(), {self.what(msg, st)!r})"
                        )
                    em("else:")
                    with em.indent():
                        em('out.append(b"\\x00")')
                else:
                    em("tags: list[tuple[int, bytes]] = []")
                    for f in tagged:
                        em(f"if {self.is_default_test(msg, f, f'o.{f.attr}')}:")
                        with em.indent():
                            em(f"t_{f.attr}: list[Chunk] = []")
                            self.emit_encode_field(
                                em, msg, st, f, v=v, expr=f"o.{f.attr}", out=f"t_{f.attr}"
                            )
                            em(f'tags.append(({f.tag}, b"".join(t_{f.attr})))')
                    known = ", ".join(str(f.tag) for f in tagged)
                    em(
                        f"write_tagged_fields(out, tags, o.unknown_tagged_fields, "
                        f"frozenset(({known},)), {self.what(msg, st)!r})"
                    )
            if len(em.lines) == start:
                em("return")
        em()
        em()

    def emit_encode_field(
        self, em: Emitter, msg: MessageSpec, st: StructSpec, f: FieldSpec, *, v: int, expr: str,
        out: str,
    ) -> None:
        flex = self.flex(msg, f, v)
        nullable = f.is_nullable(v)
        what = repr(self.what(msg, st, f))
        t = f.type
        if t.kind == "array":
            assert t.elem is not None
            fn = "enc_" + ("compact_" if flex else "") + ("nullable_" if nullable else "")
            fn += "array_len"
            self.uses.add(fn)
            arr = f"a_{f.attr}"
            em(f"{arr} = {expr}")
            if not nullable and not f.nullable.empty:
                em(f"if {arr} is None:")
                with em.indent():
                    em(f"raise null_not_allowed({what})")
            em(f"{out}.append({fn}({arr}, {what}))")
            guard = f"if {arr} is not None:" if nullable else None
            if guard:
                em(guard)
                em.level += 1
            el = t.elem
            if el.kind == "struct":
                assert f.struct is not None
                child = self.fn("enc", msg, self.group_of(msg, f.struct, v))
                em(f"for e_{f.attr} in {arr}:")
                with em.indent():
                    em(f"{child}(e_{f.attr}, {out})")
            elif el.name in FIXED:
                code = FIXED[el.name][0]
                em(f"if {arr}:")
                with em.indent():
                    em(f'{out}.append(struct.pack(f">{{len({arr})}}{code}", *{arr}))')
            else:
                em(f"for e_{f.attr} in {arr}:")
                with em.indent():
                    self.emit_encode_scalar(
                        em, el.name, flex=flex, nullable=False, expr=f"e_{f.attr}", out=out,
                        what=what,
                    )
            if guard:
                em.level -= 1
            return
        if t.kind == "struct":
            assert f.struct is not None
            child = self.fn("enc", msg, self.group_of(msg, f.struct, v))
            em(f"{child}({expr}, {out})")
            return
        if t.name in FIXED:
            sname = self.fmt_name(">" + FIXED[t.name][0])
            em(f"{out}.append({sname}.pack({expr}))")
            return
        self.emit_encode_scalar(
            em, t.name, flex=flex, nullable=nullable, expr=expr, out=out, what=what
        )

    def emit_encode_scalar(
        self, em: Emitter, name: str, *, flex: bool, nullable: bool, expr: str, out: str,
        what: str,
    ) -> None:
        if name in FIXED:
            sname = self.fmt_name(">" + FIXED[name][0])
            em(f"{out}.append({sname}.pack({expr}))")
        elif name == "string":
            fn = "enc_" + ("compact_" if flex else "") + ("nullable_" if nullable else "")
            fn += "string"
            self.uses.add(fn)
            em(f"{out}.append({fn}({expr}, {what}))")
        elif name == "uuid":
            self.uses.add("enc_uuid")
            em(f"{out}.append(enc_uuid({expr}, {what}))")
        elif name in ("bytes", "records"):
            fn = "enc_" + ("compact_" if flex else "") + ("nullable_" if nullable else "")
            fn += "bytes_len"
            self.uses.add(fn)
            var = "b_" + expr.replace("o.", "").replace(".", "_")
            em(f"{var} = {expr}")
            em(f"{out}.append({fn}({var}, {what}))")
            if nullable:
                em(f"if {var} is not None:")
                with em.indent():
                    em(f"{out}.append({var})")
            else:
                em(f"{out}.append({var})")
        else:
            raise AssertionError(name)

    # ---- emission: decoders

    def emit_decoder(self, em: Emitter, msg: MessageSpec, g: Group) -> None:
        st = g.struct
        v = g.first
        cls = self.cls_path(msg, st)
        em(
            f"def {self.fn('dec', msg, g)}(data: Buf, pos: int, end: int) "
            f"-> tuple[{cls}, int]:"
        )
        with em.indent():
            em(f"# versions {g.describe()}")
            em(f"o = _new({self.alias(msg, st)})")
            for f in st.fields:
                if not f.is_present(v):
                    if f.type.kind == "prim" and f.type.name == "uuid":
                        self.uses.add("ZERO_UUID")
                    em(f"o.{f.attr} = {self.default_expr(msg, f)}")
            for kind, fields in self.runs(msg, st, v):
                if kind == "fixed":
                    fmt = ">" + "".join(FIXED[f.type.name][0] for f in fields)
                    size = sum(FIXED[f.type.name][1] for f in fields)
                    sname = self.fmt_name(fmt)
                    names = (
                        fields[0].attr
                        if len(fields) == 1
                        else f"{fields[0].attr}..{fields[-1].attr}"
                    )
                    self.uses.add("truncated")
                    em(f"if end - pos < {size}:")
                    with em.indent():
                        label = f"{self.what(msg, st)}.{names}"
                        em(f"raise truncated({label!r}, {size}, end - pos)")
                    if len(fields) == 1:
                        em(f"o.{fields[0].attr} = {sname}.unpack_from(data, pos)[0]")
                    else:
                        targets = ", ".join(f"o.{f.attr}" for f in fields)
                        em(f"{targets} = {sname}.unpack_from(data, pos)")
                    em(f"pos += {size}")
                else:
                    self.emit_decode_field(
                        em, msg, st, fields[0], v=v, target=f"o.{fields[0].attr}", pos="pos",
                        end="end",
                    )
            if v in msg.flexible:
                tagged = [f for f in st.fields if f.is_present(v) and v in f.tagged]
                what = repr(self.what(msg, st) + " tagged fields")
                if not tagged:
                    self.uses.add("read_unknown_tags")
                    em(f"o.unknown_tagged_fields, pos = read_unknown_tags(data, pos, end, {what})")
                else:
                    for f in tagged:
                        em(f"o.{f.attr} = {self.default_expr(msg, f)}")
                    self.uses.add("read_uvarint")
                    self.uses.add("truncated")
                    em("unknown: dict[int, bytes] = {}")
                    em(f"count, pos = read_uvarint(data, pos, end, {what})")
                    em("for _ in range(count):")
                    with em.indent():
                        em(f"tag, pos = read_uvarint(data, pos, end, {what})")
                        em(f"size, pos = read_uvarint(data, pos, end, {what})")
                        em("if size > end - pos:")
                        with em.indent():
                            em(f"raise truncated({what}, size, end - pos)")
                        em("tend = pos + size")
                        for i, f in enumerate(sorted(tagged, key=lambda x: x.tag or 0)):
                            em(f"{'if' if i == 0 else 'elif'} tag == {f.tag}:")
                            with em.indent():
                                em("p = pos")
                                self.emit_decode_field(
                                    em, msg, st, f, v=v, target=f"o.{f.attr}", pos="p",
                                    end="tend",
                                )
                                em("if p != tend:")
                                with em.indent():
                                    em(
                                        "raise ProtocolError("
                                        f"{self.what(msg, st, f) + ': tagged size mismatch'!r})"
                                    )
                        em("else:")
                        with em.indent():
                            em("unknown[tag] = bytes(data[pos:tend])")
                        em("pos = tend")
                    em("o.unknown_tagged_fields = unknown")
            elif self.flexible_capable(msg):
                em("o.unknown_tagged_fields = {}")
            em("return o, pos")
        em()
        em()

    def emit_decode_field(
        self, em: Emitter, msg: MessageSpec, st: StructSpec, f: FieldSpec, *, v: int,
        target: str, pos: str, end: str,
    ) -> None:
        flex = self.flex(msg, f, v)
        nullable = f.is_nullable(v)
        what = repr(self.what(msg, st, f))
        t = f.type
        if t.kind == "array":
            el = t.elem
            assert el is not None
            fn = "read_" + ("compact_" if flex else "") + ("nullable_" if nullable else "")
            fn += "array_len"
            self.uses.add(fn)
            if el.kind == "struct":
                assert f.struct is not None
                min_elem = max(1, self.min_size(msg, f.struct, v))
            elif el.name in FIXED:
                min_elem = FIXED[el.name][1]
            elif el.name == "uuid":
                min_elem = 16
            else:
                min_elem = 1 if flex else 2
            em(f"n, {pos} = {fn}(data, {pos}, {end}, {min_elem}, {what})")
            if nullable:
                em("if n < 0:")
                with em.indent():
                    em(f"{target} = None")
                em("else:")
                em.level += 1
            if el.kind == "struct":
                assert f.struct is not None
                child = self.fn("dec", msg, self.group_of(msg, f.struct, v))
                em(f"items_{f.attr} = []")
                em("for _ in range(n):")
                with em.indent():
                    em(f"e_{f.attr}, {pos} = {child}(data, {pos}, {end})")
                    em(f"items_{f.attr}.append(e_{f.attr})")
                em(f"{target} = items_{f.attr}")
            elif el.name in FIXED:
                code, size = FIXED[el.name]
                self.uses.add("read_fixed_array")
                em(f"{target}, {pos} = read_fixed_array(data, {pos}, n, {code!r}, {size})")
            else:
                py = self.py_type(msg, f, for_elem=True)
                em(f"items_{f.attr}: list[{py}] = []")
                em("for _ in range(n):")
                with em.indent():
                    self.emit_decode_scalar(
                        em, el.name, flex=flex, nullable=False, target=f"e_{f.attr}",
                        pos=pos, end=end, what=what,
                    )
                    em(f"items_{f.attr}.append(e_{f.attr})")
                em(f"{target} = items_{f.attr}")
            if nullable:
                em.level -= 1
            return
        if t.kind == "struct":
            assert f.struct is not None
            child = self.fn("dec", msg, self.group_of(msg, f.struct, v))
            em(f"{target}, {pos} = {child}(data, {pos}, {end})")
            return
        self.emit_decode_scalar(
            em, t.name, flex=flex, nullable=nullable, target=target, pos=pos, end=end, what=what
        )

    def emit_decode_scalar(
        self, em: Emitter, name: str, *, flex: bool, nullable: bool, target: str, pos: str,
        end: str, what: str,
    ) -> None:
        if name in FIXED:
            code, size = FIXED[name]
            sname = self.fmt_name(">" + code)
            self.uses.add("truncated")
            em(f"if {end} - {pos} < {size}:")
            with em.indent():
                em(f"raise truncated({what}, {size}, {end} - {pos})")
            em(f"{target} = {sname}.unpack_from(data, {pos})[0]")
            em(f"{pos} += {size}")
            return
        if name == "string":
            fn = "read_" + ("compact_" if flex else "") + ("nullable_" if nullable else "")
            fn += "string"
        elif name in ("bytes", "records"):
            fn = "read_" + ("compact_" if flex else "") + ("nullable_" if nullable else "")
            fn += "bytes"
        elif name == "uuid":
            fn = "read_uuid"
        else:
            raise AssertionError(name)
        self.uses.add(fn)
        em(f"{target}, {pos} = {fn}(data, {pos}, {end}, {what})")

    # ---- module

    def render(self, header_lines: list[str]) -> str:
        body = Emitter()
        for msg in self.messages:
            self.emit_classes(body, msg)
        codecs = Emitter()
        for msg in self.messages:
            self.emit_codecs(codecs, msg)
        tail = Emitter()
        for msg in self.messages:
            tail(f"{self.alias(msg, msg.top)} = {msg.name}")
            for st in msg.structs.values():
                tail(f"{self.alias(msg, st)} = {self.cls_path(msg, st)}")
        for name in sorted(self.defaults):
            tail(f"{name} = {self.defaults[name]}()")

        code = body.text() + codecs.text() + tail.text()
        em = Emitter()
        for line in header_lines:
            em(line)
        em()
        em("from __future__ import annotations")
        em()
        em("import struct")
        if re.search(r"\buuid\.UUID\b", code):
            em("import uuid")
        em("from collections.abc import Callable")
        em("from typing import ClassVar")
        em()
        em("from aiokprod.errors import ProtocolError")
        support = [n for n in SUPPORT_NAMES if re.search(rf"\b{n}\b", code)]
        em("from aiokprod.protocol._generated._support import (")
        with em.indent():
            for name in sorted(support):
                em(f"{name},")
        em(")")
        prims = [n for n in PRIMITIVE_NAMES if re.search(rf"\b{n}\b", code)]
        em("from aiokprod.protocol.primitives import (")
        with em.indent():
            for name in sorted(prims):
                em(f"{name},")
        em(")")
        em()
        for fmt in sorted(self.structs_fmt):
            em(f"{self.structs_fmt[fmt]} = struct.Struct({fmt!r})")
        em()
        em()
        text = em.text() + code
        text = re.sub(r"\n{3,}", "\n\n\n", text)
        return text.rstrip("\n") + "\n"

    def _uses_type(self, msg: MessageSpec, name: str) -> bool:
        for st in [msg.top, *msg.structs.values()]:
            for f in st.fields:
                t = f.type.elem if f.type.kind == "array" else f.type
                if t is not None and t.kind == "prim" and t.name == name:
                    return True
        return False


# --------------------------------------------------------------------------- files


def banner(sources: list[str], overlays: list[str]) -> list[str]:
    lines = [
        "# DO NOT EDIT: generated by tools/gen_protocol.py from the Kafka message specs.",
        f"# Source: {', '.join(sources)}",
    ]
    if overlays:
        lines.append(f"# Overlays (tools/protocol_overlays): {', '.join(overlays)}")
    lines.append("# Regenerate with `python tools/gen_protocol.py`; check with `--check`.")
    return lines


def module_name(api: str) -> str:
    return snake(api)


SUPPORT_MODULE = '''\
"""Helpers shared by the generated message modules (errors and dispatch fillers)."""

from __future__ import annotations

from typing import Any, NoReturn

from aiokprod.errors import UnsupportedVersionError

_new = object.__new__


def _unsupported_version(api: str, cls: str, version: int) -> UnsupportedVersionError:
    return UnsupportedVersionError(f"{api}: version {version} is not supported by {cls}")


def _field_unsupported(what: str, versions: str) -> UnsupportedVersionError:
    return UnsupportedVersionError(
        f"{what} is set to a non-default value but versions {versions} do not have it"
    )


def _no_encoder(obj: Any, out: Any) -> NoReturn:
    raise AssertionError("version below MIN_VERSION reached the dispatch table")


def _no_decoder(data: Any, pos: int, end: int) -> NoReturn:
    raise AssertionError("version below MIN_VERSION reached the dispatch table")
'''


def generate_protocol(specs: Path) -> dict[Path, str]:
    overlays = load_overlays(OVERLAY_DIR)
    files: dict[Path, str] = {}
    exports: list[tuple[str, list[str]]] = []
    registry: list[tuple[int, str, str]] = []
    used_overlays: set[str] = set()
    for api in APIS:
        req = load_message(specs, f"{api}Request", overlays)
        resp = load_message(specs, f"{api}Response", overlays)
        if req.kind != "request" or resp.kind != "response":
            raise SpecError(f"{api}: expected a request and a response spec")
        if req.api_key != resp.api_key:
            raise SpecError(f"{api}: request and response apiKey differ")
        used_overlays.update(req.overlays + resp.overlays)
        gen = ModuleGen([resp, req], module_name(api))
        head = banner([req.source, resp.source], sorted(set(req.overlays + resp.overlays)))
        head = [*head, "", f'"""{api}: request and response classes (generated)."""']
        files[GENERATED_DIR / f"{module_name(api)}.py"] = gen.render(head)
        exports.append((module_name(api), [resp.name, req.name]))
        assert req.api_key is not None
        registry.append((req.api_key, req.name, resp.name))
    for hdr in HEADERS:
        msg = load_message(specs, hdr, overlays)
        if msg.kind != "header":
            raise SpecError(f"{hdr}: expected a header spec")
        used_overlays.update(msg.overlays)
        gen = ModuleGen([msg], module_name(hdr))
        head = [*banner([msg.source], msg.overlays), "", f'"""{hdr} (generated)."""']
        files[GENERATED_DIR / f"{module_name(hdr)}.py"] = gen.render(head)
        exports.append((module_name(hdr), [msg.name]))
    unused = sorted({name for pats in overlays.values() for name, _ in pats} - used_overlays)
    if unused:
        raise SpecError(f"overlays patch no generated spec: {', '.join(unused)}")
    support_banner = [
        "# DO NOT EDIT: generated by tools/gen_protocol.py (fixed text, no spec source).",
    ]
    files[GENERATED_DIR / "_support.py"] = "\n".join(support_banner) + "\n\n" + SUPPORT_MODULE
    files[GENERATED_DIR / "__init__.py"] = render_init(exports, registry)
    return files


def render_init(exports: list[tuple[str, list[str]]], registry: list[tuple[int, str, str]]) -> str:
    em = Emitter()
    for line in banner([f"{a}Request.json, {a}Response.json" for a in APIS] + list(
        f"{h}.json" for h in HEADERS
    ), []):
        em(line)
    em()
    em('"""Every generated message class, and ``API_BY_KEY`` (request, response) per API key."""')
    em()
    em("from __future__ import annotations")
    em()
    em("from typing import Any")
    em()
    names: list[str] = []
    for module, classes in sorted(exports):
        em(f"from aiokprod.protocol._generated.{module} import {', '.join(sorted(classes))}")
        names.extend(classes)
    em()
    em("API_BY_KEY: dict[int, tuple[type[Any], type[Any]]] = {")
    with em.indent():
        for key, req, resp in sorted(registry):
            em(f"{key}: ({req}, {resp}),")
    em("}")
    em()
    em("__all__ = [")
    with em.indent():
        for name in sorted([*names, "API_BY_KEY"]):
            em(f'"{name}",')
    em("]")
    return em.text()


# --------------------------------------------------------------------------- error codes


@dataclass
class ErrorRow:
    code: int
    name: str
    java: str | None
    retriable: bool
    message: str

    @property
    def class_name(self) -> str:
        base = self.name
        for suffix in ("_ERROR", "_EXCEPTION"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
        return "".join(p.capitalize() for p in base.split("_")) + "Error"


def load_error_codes(path: Path) -> list[ErrorRow]:
    rows: list[ErrorRow] = []
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header != ["code", "name", "java_exception", "retriable", "message"]:
            raise SpecError(f"{path.name}: unexpected header {header!r}")
        for lineno, rec in enumerate(reader, start=2):
            if not rec:
                continue
            if len(rec) != 5:
                raise SpecError(f"{path.name}:{lineno}: expected 5 columns, got {len(rec)}")
            code_s, name, java, retr, message = rec
            if retr not in ("true", "false"):
                raise SpecError(f"{path.name}:{lineno}: retriable must be true/false")
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
                raise SpecError(f"{path.name}:{lineno}: bad error name {name!r}")
            rows.append(
                ErrorRow(int(code_s), name, None if java in ("", "-") else java, retr == "true",
                         message.strip())
            )
    codes = [r.code for r in rows]
    if len(set(codes)) != len(codes) or len({r.name for r in rows}) != len(rows):
        raise SpecError(f"{path.name}: duplicate error code or name")
    if not any(r.code == 0 and r.name == "NONE" for r in rows):
        raise SpecError(f"{path.name}: no NONE (0) row")
    return sorted(rows, key=lambda r: r.code)


def render_error_codes(rows: list[ErrorRow], source: str) -> str:
    em = Emitter()
    for line in banner([source], []):
        em(line)
    em()
    em('"""Kafka error codes as an IntEnum carrying the broker\'s retriable flag and message.')
    em()
    em("``retriable`` is the broker's view (Java's RetriableException); the producer's retry")
    em("policy decides on its own. Codes newer than this table still decode: ``ErrorCode.of``")
    em("(and ``ErrorCode(n)``) return a pseudo-member named ``UNKNOWN_<n>`` instead of raising.")
    em('"""')
    em()
    em("from __future__ import annotations")
    em()
    em("from enum import IntEnum")
    em()
    em()
    em("class ErrorCode(IntEnum):")
    with em.indent():
        em('"""A Kafka error code with ``retriable``, ``message`` and ``java_exception``."""')
        em()
        em("retriable: bool")
        em("message: str")
        em("java_exception: str | None")
        em()
        em("def __new__(")
        with em.indent():
            em("cls, code: int, retriable: bool, message: str, java_exception: str | None")
        em(") -> ErrorCode:")
        with em.indent():
            em("member = int.__new__(cls, code)")
            em("member._value_ = code")
            em("member.retriable = retriable")
            em("member.message = message")
            em("member.java_exception = java_exception")
            em("return member")
        em()
        for r in rows:
            em(f"{r.name} = (")
            with em.indent():
                em(f"{r.code},")
                em(f"{r.retriable!r},")
                for chunk in _wrap_literal(r.message, 84):
                    em(chunk)
                em(f"{r.java!r},")
            em(")")
        em()
        em("@classmethod")
        em("def _missing_(cls, value: object) -> ErrorCode | None:")
        with em.indent():
            em("if not isinstance(value, int) or isinstance(value, bool):")
            with em.indent():
                em("return None")
            em("return cls._unknown(value)")
        em()
        em("@classmethod")
        em("def _unknown(cls, value: int) -> ErrorCode:")
        with em.indent():
            em('"""A pseudo-member for a code this table lacks, cached so identity holds."""')
            em("member = _UNKNOWN.get(value)")
            em("if member is None:")
            with em.indent():
                em("member = int.__new__(cls, value)")
                em("member._value_ = value")
                em('suffix = str(value) if value >= 0 else f"MINUS_{-value}"')
                em('member._name_ = f"UNKNOWN_{suffix}"')
                em("member.retriable = False")
                em('member.message = f"Unknown error code {value}."')
                em("member.java_exception = None")
                em("_UNKNOWN[value] = member")
            em("return member")
        em()
        em("@classmethod")
        em("def of(cls, code: int) -> ErrorCode:")
        with em.indent():
            em('"""The member for ``code``; never raises, unknown codes get a pseudo-member."""')
            em("known = _BY_CODE.get(code)")
            em("return known if known is not None else cls._unknown(code)")
    em()
    em()
    em("_BY_CODE: dict[int, ErrorCode] = {int(member): member for member in ErrorCode}")
    em("_UNKNOWN: dict[int, ErrorCode] = {}")
    return em.text()


def _wrap_literal(text: str, width: int) -> list[str]:
    """A string literal split over lines (implicit concatenation) to stay under 100 columns."""
    pieces = textwrap.wrap(text, width=width, drop_whitespace=False) or [""]
    if len(pieces) == 1:
        return [f"{text!r},"]
    return ["(", *(f"    {p!r}" for p in pieces), "),"]


def render_broker_errors(rows: list[ErrorRow], hand_written: set[str]) -> str:
    em = Emitter()
    em(BEGIN_MARK)
    names: list[str] = []
    for r in rows:
        if r.code == 0:
            continue
        cls = r.class_name
        if cls in hand_written or cls in names:
            raise SpecError(f"error class name {cls} for {r.name} collides")
        names.append(cls)
        em()
        em()
        em(f"class {cls}(BrokerResponseError):")
        with em.indent():
            java = f" (Java {r.java})" if r.java else ""
            flag = "retriable" if r.retriable else "not retriable"
            doc = f"{r.name}, code {r.code}{java}; {flag}."
            wrapped = textwrap.wrap(doc, width=88)
            if len(wrapped) == 1:
                em(f'"""{wrapped[0]}"""')
            else:
                em(f'"""{wrapped[0]}')
                for w in wrapped[1:]:
                    em(w)
                em('"""')
            em()
            em(f"code = {r.code}")
            em(f"retriable = {r.retriable!r}")
            em(f"error_code = ErrorCode.{r.name}")
            em(f"message = ErrorCode.{r.name}.message")
    em()
    em()
    em("BROKER_ERRORS_BY_CODE: dict[int, type[BrokerResponseError]] = {")
    with em.indent():
        for r in rows:
            if r.code != 0:
                em(f"{r.code}: {r.class_name},")
    em("}")
    em()
    em("__all__ += [")
    with em.indent():
        for n in sorted(names):
            em(f'"{n}",')
    em("]")
    em(END_MARK)
    return em.text()


def splice_errors(current: str, section: str) -> str:
    start = current.find(BEGIN_MARK)
    stop = current.find(END_MARK)
    if start < 0 or stop < start:
        raise SpecError(f"{ERRORS_FILE}: generated-section markers not found")
    return current[:start] + section + current[stop + len(END_MARK) + 1 :]


def generate_errors(tsv: Path, root: Path) -> dict[Path, str]:
    rows = load_error_codes(tsv)
    files = {ERROR_CODES_FILE: render_error_codes(rows, tsv.name)}
    errors_path = root / ERRORS_FILE
    current = errors_path.read_text(encoding="utf-8")
    hand = current[: current.find(BEGIN_MARK)]
    hand_written = set(re.findall(r"^class (\w+)", hand, flags=re.MULTILINE))
    files[ERRORS_FILE] = splice_errors(current, render_broker_errors(rows, hand_written))
    return files


# --------------------------------------------------------------------------- main


def generate_all(specs: Path, tsv: Path, root: Path) -> dict[Path, str]:
    files = generate_protocol(specs)
    files.update(generate_errors(tsv, root))
    return files


def stale_files(root: Path, files: Iterable[Path]) -> list[Path]:
    wanted = {p for p in files if p.parent == GENERATED_DIR}
    existing = {
        p.relative_to(root) for p in (root / GENERATED_DIR).glob("*.py")
    } if (root / GENERATED_DIR).is_dir() else set()
    return sorted(existing - wanted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--specs", type=Path, default=DEFAULT_SPECS)
    parser.add_argument("--error-codes", type=Path, default=DEFAULT_ERROR_CODES)
    parser.add_argument("--root", type=Path, default=REPO, help="repository root to write into")
    parser.add_argument("--check", action="store_true", help="fail if the output would change")
    args = parser.parse_args(argv)
    root: Path = args.root
    try:
        files = generate_all(args.specs, args.error_codes, root)
    except SpecError as exc:
        print(f"gen_protocol: {exc}", file=sys.stderr)
        return 2
    stale = stale_files(root, files)
    if args.check:
        differing = [
            p for p, text in sorted(files.items())
            if not (root / p).is_file() or (root / p).read_text(encoding="utf-8") != text
        ]
        for p in differing:
            print(f"gen_protocol --check: {p} would change", file=sys.stderr)
        for p in stale:
            print(f"gen_protocol --check: {p} is stale (no spec generates it)", file=sys.stderr)
        return 1 if differing or stale else 0
    (root / GENERATED_DIR).mkdir(parents=True, exist_ok=True)
    for p, text in sorted(files.items()):
        target = root / p
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    for p in stale:
        (root / p).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
