"""Emitting encoders and decoders: one function pair per group of versions sharing a layout.
"""

from __future__ import annotations

from .emitter import Emitter
from .layout import Group, Layout
from .model import FIXED, FieldSpec, MessageSpec, StructSpec


class CodecGen(Layout):
    """Emits the straight-line encoder and decoder functions and the per-version dispatch
    tables of each message (no per-field interpreter at run time)."""

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
                    em("if pos < end and data[pos] == 0:  # no tagged field, the common case")
                    with em.indent():
                        em("pos += 1")
                    em("else:")
                    with em.indent():
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
