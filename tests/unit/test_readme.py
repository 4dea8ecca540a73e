"""README's quickstart runs as written, against a real broker (Tansu)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path

from aiokprod.devbroker import TansuBroker
from support.reader import read_back

README = Path(__file__).resolve().parents[2] / "README.md"


def _quickstart() -> str:
    section = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_quickstart_writes_a_json_value_with_a_string_key(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    source = _quickstart().replace('"localhost:9092"', repr(tansu.bootstrap))
    source = source.replace('"orders"', repr(topic))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "README.md", "exec"), {"__name__": "__main__"})
    assert out.getvalue().startswith(f"written to {topic}[")
    [record] = read_back(tansu.bootstrap, topic, expected=1)
    assert record.key == b"customer-3"
    assert json.loads(record.value) == {"id": 17, "total": 42.5}
