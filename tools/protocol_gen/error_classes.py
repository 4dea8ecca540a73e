"""``aiokprod/_broker_errors.py``: one exception class per broker error code.

The classes derive from ``BrokerResponseError`` (hand-written in ``aiokprod/_error_base.py``)
and are re-exported by the hand-written ``aiokprod/errors.py``, which is their public home.
Their names are derived mechanically from the error names (``NOT_LEADER_OR_FOLLOWER`` →
``NotLeaderOrFollowerError``); one that collides with a hand-written class fails the generator.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from .emitter import Emitter, banner
from .error_codes import (
    CategoryRow,
    ErrorRow,
    category_of,
    load_error_categories,
    load_error_codes,
    render_error_codes,
)
from .model import SpecError
from .paths import BROKER_ERRORS_FILE, ERROR_CODES_FILE, HAND_WRITTEN_ERROR_FILES


def render_broker_errors(rows: list[ErrorRow], hand_written: set[str], source: str,
                         categories: dict[str, CategoryRow] | None = None,
                         categories_source: str | None = None) -> str:
    names: list[str] = []
    for r in rows:
        if r.code == 0:
            continue
        if r.class_name in hand_written or r.class_name in names:
            raise SpecError(f"error class name {r.class_name} for {r.name} collides")
        names.append(r.class_name)
    table = categories or {}
    em = Emitter()
    for line in banner([source], [categories_source] if categories_source else []):
        em(line)
    em()
    em('"""One exception class per Kafka error code, each a ``BrokerResponseError``.')
    em()
    em("Import them from :mod:`aiokprod.errors`, which re-exports every name here and is their")
    em("public home (``__module__`` says so, for tracebacks and pickles).")
    em('"""')
    em()
    em("from __future__ import annotations")
    em()
    em("from aiokprod._error_base import BrokerResponseError, ErrorCategory")
    em("from aiokprod._error_codes import ErrorCode")
    em()
    em("__all__ = [")
    with em.indent():
        for n in sorted([*names, "BROKER_ERRORS_BY_CODE"]):
            em(f'"{n}",')
    em("]")
    for r in rows:
        if r.code == 0:
            continue
        em()
        em()
        em(f"class {r.class_name}(BrokerResponseError):")
        with em.indent():
            java = f" (Java {r.java})" if r.java else ""
            flag = "retriable" if r.retriable else "not retriable"
            cat = category_of(r, table)
            why = f": {cat.why}" if cat.why else ""
            doc = f"{r.name}, code {r.code}{java}; {flag}; category {cat.category}{why}."
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
            em(f"category = ErrorCategory.{cat.category.upper()}")
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
    em("for _cls in BROKER_ERRORS_BY_CODE.values():")
    with em.indent():
        em('_cls.__module__ = "aiokprod.errors"')
    em("del _cls")
    return em.text()


def hand_written_classes(root: Path) -> set[str]:
    """Class names defined in the hand-written error modules, which generated names must avoid."""
    names: set[str] = set()
    for rel in HAND_WRITTEN_ERROR_FILES:
        path = root / rel
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            names.update(re.findall(r"^class (\w+)", text, flags=re.MULTILINE))
    return names


def generate_errors(tsv: Path, root: Path, categories: Path | None = None) -> dict[Path, str]:
    rows = load_error_codes(tsv)
    table = load_error_categories(categories, rows) if categories is not None else {}
    return {
        ERROR_CODES_FILE: render_error_codes(rows, tsv.name),
        BROKER_ERRORS_FILE: render_broker_errors(
            rows, hand_written_classes(root), tsv.name, table,
            categories.name if categories is not None else None),
    }
