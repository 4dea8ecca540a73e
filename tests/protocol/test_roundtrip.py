"""decode(encode(x)) == x for every generated message class at every version it supports."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import (
    MESSAGE_CLASSES,
    case_id,
    class_versions,
    is_flexible,
    struct_strategy,
)

from aiokprod.protocol.primitives import uvarint
from support.examples import examples

CASES = class_versions(MESSAGE_CLASSES)
FAST = settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_every_api_and_version_is_covered() -> None:
    # 17 APIs x (request, response) + 2 headers; each contributes every version it supports.
    assert len(MESSAGE_CLASSES) == 36
    assert len(CASES) == sum(c.MAX_VERSION - c.MIN_VERSION + 1 for c in MESSAGE_CLASSES)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@FAST
@given(data=st.data())
def test_round_trip(case: tuple[type[Any], int], data: st.DataObject) -> None:
    cls, version = case
    obj = data.draw(struct_strategy(cls, cls, version))
    encoded = obj.encode(version)
    decoded = cls.decode(encoded, version)
    assert decoded == obj
    # Encoding is a function of the value: the decoded copy re-encodes to the same bytes.
    assert decoded.encode(version) == encoded
    assert cls.decode(memoryview(encoded), version) == obj
    assert cls.decode(bytearray(encoded), version) == obj


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if is_flexible(c[0], c[1])],
    ids=case_id,
)
def test_unknown_tagged_fields_survive_a_round_trip(case: tuple[type[Any], int]) -> None:
    cls, version = case
    known = {f.tag for f in cls.FIELDS if f.tag is not None and f.tagged_in(version)}
    tags = [t for t in (7, 3, 120, 20000) if t not in known]
    obj = cls(unknown_tagged_fields={t: bytes([t % 256]) * (t % 5 + 1) for t in tags})
    encoded = obj.encode(version)
    decoded = cls.decode(encoded, version)
    assert decoded.unknown_tagged_fields == obj.unknown_tagged_fields
    assert decoded == obj
    # The top-level tagged section closes the body, in ascending tag order whatever the
    # dict's order.
    expected = uvarint(len(tags)) + b"".join(
        uvarint(t) + uvarint(t % 5 + 1) + bytes([t % 256]) * (t % 5 + 1) for t in sorted(tags)
    )
    assert encoded.endswith(expected)
