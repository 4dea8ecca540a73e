"""Emitting the message modules: ``aiokprod/protocol/_generated/<api>.py`` (one versionless
class per message, its structs nested as attributes), ``_support.py`` and ``__init__.py``.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from .codecs import CodecGen
from .emitter import Emitter, banner
from .model import MessageSpec, SpecError, StructSpec, snake
from .paths import GENERATED_DIR, OVERLAY_DIR
from .specs import load_message, load_overlays

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
    "IncrementalAlterConfigs",
    "GetTelemetrySubscriptions",
    "PushTelemetry",
    "OffsetFetch",
)
HEADERS: tuple[str, ...] = ("RequestHeader", "ResponseHeader")


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


class ModuleGen(CodecGen):
    """Generates one module (a request/response pair, or one header)."""

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
