"""aiokprod.hooks: the typed Protocols for serializers, partitioners and interceptors accept the
hooks the producer can call and make a type checker reject the ones it cannot; the package root
exports them; ProducerConfig takes conforming hooks as they are."""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import aiokprod
from aiokprod import Partitioner, ProducerConfig, ProducerInterceptor, RecordMetadata, Serializer
from aiokprod.hooks import Headers, SendArgs

REPO = Path(__file__).resolve().parents[2]

SNIPPET = '''
from collections.abc import Sequence
from typing import Any

from aiokprod import Partitioner, ProducerConfig, ProducerInterceptor, RecordMetadata, Serializer
from aiokprod.hooks import Headers, SendArgs


def utf8(value: str) -> bytes:
    return value.encode()


def by_length(topic: str, key: bytes | None, everything: Sequence[int],
              available: Sequence[int]) -> int:
    return len(key or b"") % len(everything)


class Tagger:
    def on_send(self, topic: str, value: Any, key: Any, partition: int | None,
                timestamp_ms: int | None, headers: Headers | None) -> SendArgs | None:
        return None

    def on_acknowledgement(self, metadata: RecordMetadata | None,
                           error: BaseException | None) -> None:
        pass


ok_serializer: Serializer = utf8
ok_partitioner: Partitioner = by_length
ok_interceptor: ProducerInterceptor = Tagger()
ProducerConfig(bootstrap_servers="b:9092", key_serializer=utf8, value_serializer=utf8,
               partitioner=by_length, interceptors=[Tagger()])


def to_text(value: str) -> str:  # returns str, not bytes
    return value


def two_args(topic: str, key: bytes | None) -> int:  # misses the partition lists
    return 0


class OnlySend:  # no on_acknowledgement
    def on_send(self, topic: str, value: Any, key: Any, partition: int | None,
                timestamp_ms: int | None, headers: Headers | None) -> SendArgs | None:
        return None


bad_serializer: Serializer = to_text  # line BAD_SERIALIZER
bad_partitioner: Partitioner = two_args  # line BAD_PARTITIONER
bad_interceptor: ProducerInterceptor = OnlySend()  # line BAD_INTERCEPTOR
'''


@pytest.mark.static  # mypy on a snippet: the same on every Python and encoder
def test_the_protocols_accept_fitting_hooks_and_reject_the_others(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    source = tmp_path / "hooks_user.py"
    source.write_text(textwrap.dedent(SNIPPET))
    env_path = os.environ.get("MYPYPATH")
    os.environ["MYPYPATH"] = str(REPO)
    try:
        out, err, status = api.run([
            "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
            "--follow-imports=silent", str(source),
        ])
    finally:
        if env_path is None:
            del os.environ["MYPYPATH"]
        else:
            os.environ["MYPYPATH"] = env_path
    lines = source.read_text().splitlines()
    marked = {name: i + 1 for i, line in enumerate(lines)
              for name in ("BAD_SERIALIZER", "BAD_PARTITIONER", "BAD_INTERCEPTOR")
              if f"# line {name}" in line}
    errors = [line for line in out.splitlines() if ": error:" in line]
    flagged = {int(m.group(1)) for line in errors
               if (m := re.match(r".*hooks_user\.py:(\d+): error:", line))}
    assert flagged == set(marked.values()), (out, err, status)
    assert status == 1


def test_the_package_root_exports_the_protocols() -> None:
    for name in ("Serializer", "Partitioner", "ProducerInterceptor"):
        assert name in aiokprod.__all__
        assert getattr(aiokprod, name).__module__ == "aiokprod.hooks"


def test_producer_config_keeps_conforming_hooks() -> None:
    def utf8(value: str) -> bytes:
        return value.encode()

    def first(topic: str, key: bytes | None, everything: Sequence[int],
              available: Sequence[int]) -> int:
        return 0

    class Counter:
        def __init__(self) -> None:
            self.acks = 0

        def on_send(self, topic: str, value: Any, key: Any, partition: int | None,
                    timestamp_ms: int | None, headers: Headers | None) -> SendArgs | None:
            return None

        def on_acknowledgement(self, metadata: RecordMetadata | None,
                               error: BaseException | None) -> None:
            self.acks += 1

    counter = Counter()
    serializer: Serializer = utf8
    partitioner: Partitioner = first
    interceptor: ProducerInterceptor = counter
    cfg = ProducerConfig(bootstrap_servers="b:9092", value_serializer=serializer,
                         partitioner=partitioner, interceptors=[interceptor])
    assert cfg.value_serializer is utf8 and cfg.partitioner is first
    assert cfg.interceptors == (counter,)
