"""One exception class per broker error code (the generated part of the exception tree).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from .emitter import Emitter
from .error_codes import ErrorRow, load_error_codes, render_error_codes
from .model import SpecError
from .paths import BEGIN_MARK, END_MARK, ERROR_CODES_FILE, ERRORS_FILE


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
