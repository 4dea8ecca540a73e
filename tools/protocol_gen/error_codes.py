"""The error-code table (``kafka-error-codes.tsv``) and the ``aiokprod/_error_codes.py`` enum.
"""

from __future__ import annotations

import csv
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from .emitter import Emitter, banner
from .model import SpecError


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


#: KIP-1050's categories, as ``aiokprod.errors.ErrorCategory`` names them (lower case here).
CATEGORIES = ("retriable", "abortable", "application_recoverable", "invalid_configuration",
              "fatal")


@dataclass
class CategoryRow:
    category: str
    why: str


def load_error_categories(path: Path, rows: list[ErrorRow]) -> dict[str, CategoryRow]:
    """The overrides table: error name -> category and why (every entry says why).

    A code not listed is ``retriable`` when the broker's flag says so, else ``abortable``: it
    fails the operation that got it and the producer carries on (inside a transaction, the
    transaction must be aborted). The table may not call a code the broker deems not retriable
    ``retriable``: then ``category`` and ``retriable`` would contradict each other.
    """
    known = {r.name: r for r in rows}
    found: dict[str, CategoryRow] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header != ["name", "category", "why"]:
            raise SpecError(f"{path.name}: unexpected header {header!r}")
        for lineno, rec in enumerate(reader, start=2):
            if not rec:
                continue
            if len(rec) != 3:
                raise SpecError(f"{path.name}:{lineno}: expected 3 columns, got {len(rec)}")
            name, category, why = rec
            row = known.get(name)
            if row is None:
                raise SpecError(f"{path.name}:{lineno}: no error code named {name!r}")
            if category not in CATEGORIES:
                raise SpecError(f"{path.name}:{lineno}: category must be one of "
                                f"{', '.join(CATEGORIES)}, not {category!r}")
            if category == "retriable" and not row.retriable:
                raise SpecError(f"{path.name}:{lineno}: {name} is not retriable for the broker")
            if not why.strip():
                raise SpecError(f"{path.name}:{lineno}: {name}: say why")
            if name in found:
                raise SpecError(f"{path.name}:{lineno}: {name} listed twice")
            found[name] = CategoryRow(category, why.strip())
    return found


def category_of(row: ErrorRow, table: dict[str, CategoryRow]) -> CategoryRow:
    """The category of one code: the table's, else the default rule."""
    listed = table.get(row.name)
    if listed is not None:
        return listed
    if row.retriable:
        return CategoryRow("retriable", "")
    return CategoryRow("abortable", "")


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
