"""Reading Kafka's JSON message specs (JSON with ``//`` comments) and the overlays on them.

Parsing is strict: a key the generator does not know fails it with the file and key named,
because silently ignoring a spec feature would produce wrong bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .model import (
    COMMON_STRUCT_KEYS,
    FIELD_KEYS,
    FIELD_OP_KEYS,
    INT_RANGES,
    NULLABLE_KINDS,
    OVERLAY_KEYS,
    PATCH_KEYS,
    PRIMITIVES,
    RESERVED_ATTRS,
    TOP_KEYS,
    FieldSpec,
    MessageSpec,
    SpecError,
    StructSpec,
    TypeRef,
    Versions,
    snake,
)


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
