"""Hypothesis strategies that build version-valid instances of any generated message class.

Driven by the ``FIELDS`` metadata the generator writes on every class, so a new spec field is
covered without touching the tests: fields absent in a version stay at their defaults, None
appears only where the version allows null, and unknown tagged fields only in flexible versions
and never on a tag the version knows.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from aiokprod.protocol import API_BY_KEY, RequestHeader, ResponseHeader
from aiokprod.protocol.primitives import FieldInfo

INT_BOUNDS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

MESSAGE_CLASSES: list[type[Any]] = [
    cls for pair in sorted(API_BY_KEY.items()) for cls in pair[1]
] + [RequestHeader, ResponseHeader]

RESPONSE_CLASSES: list[type[Any]] = [pair[1] for _, pair in sorted(API_BY_KEY.items())] + [
    ResponseHeader
]


def class_versions(classes: list[type[Any]]) -> list[tuple[type[Any], int]]:
    return [
        (cls, v) for cls in classes for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)
    ]


def case_id(case: tuple[type[Any], int]) -> str:
    return f"{case[0].__name__}-v{case[1]}"


def _scalar(type_name: str) -> st.SearchStrategy[Any]:
    if type_name in INT_BOUNDS:
        lo, hi = INT_BOUNDS[type_name]
        return st.integers(lo, hi)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "string":
        return st.text(max_size=12)
    if type_name in ("bytes", "records"):
        return st.binary(max_size=24)
    if type_name == "uuid":
        return st.uuids()
    raise AssertionError(type_name)


def is_flexible(top: type[Any], version: int) -> bool:
    first = top.FIRST_FLEXIBLE_VERSION
    return first is not None and version >= first


def struct_strategy(top: type[Any], cls: type[Any], version: int) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` (``top`` or one of its nested structs) valid at ``version``."""
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    fields: tuple[FieldInfo, ...] = cls.FIELDS
    for f in fields:
        if not f.present_in(version):
            continue
        kwargs[f.name] = _field_strategy(top, f, version)
    flexible = is_flexible(top, version)
    if flexible:
        known = {f.tag for f in fields if f.tag is not None and f.tagged_in(version)}
        kwargs["unknown_tagged_fields"] = st.dictionaries(
            st.integers(0, 40).filter(lambda t: t not in known),
            st.binary(max_size=6),
            max_size=2,
        )
    return st.builds(cls, **kwargs)


def _field_strategy(top: type[Any], f: FieldInfo, version: int) -> st.SearchStrategy[Any]:
    type_name = f.type
    if type_name.startswith("[]"):
        elem = type_name[2:]
        if elem[0].isupper():
            inner = struct_strategy(top, getattr(top, elem), version)
        else:
            inner = _scalar(elem)
        base: st.SearchStrategy[Any] = st.lists(inner, max_size=3)
    elif type_name[0].isupper():
        base = struct_strategy(top, getattr(top, type_name), version)
    else:
        base = _scalar(type_name)
    if f.nullable_in(version):
        return st.one_of(st.none(), base)
    return base
