"""Which versions of a struct share a wire layout (one encoder/decoder pair per group), and the
names and Python types the emitted code uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .model import FIXED, INT_RANGES, FieldSpec, MessageSpec, StructSpec


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


class Layout:
    """Naming, wire-layout grouping and Python types for one generated module.

    The base of :class:`~protocol_gen.messages.ModuleGen`: everything the class and codec
    emitters ask about a struct at a version, without emitting anything itself.
    """

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

    def flexible_capable(self, msg: MessageSpec) -> bool:
        return msg.first_flexible() is not None

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
