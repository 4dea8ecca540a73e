"""Records from Arrow buffers (aiokprod.records.columnar): the C encoder, its Python twin, and
the v2 layout the rest of the producer writes.

On random columns — nulls, empty values, sliced arrays, ``large_binary``, per-row timestamps
and headers, runs cut by the batch limit, rows reordered by partition — the native
``append_columns`` and ``partition_rows`` must give exactly the twin's bytes and groups, and
both must equal what ``RecordBatchBuilder.try_append`` writes record by record. Malformed
buffers must raise instead of being read past their end.
"""

from __future__ import annotations

from array import array
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod import _native
from aiokprod._murmur2 import _murmur2_u32_py
from aiokprod.records import columnar
from aiokprod.records.builder import RecordBatchBuilder
from support.examples import examples

native = _native.speedups
needs_native = pytest.mark.skipif(native is None, reason="the native extension is not in use")
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
BYTES_OR_NONE = st.none() | st.binary(max_size=40)
HEADER_KEYS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=5)
HEADERS = st.none() | st.lists(st.tuples(HEADER_KEYS, BYTES_OR_NONE), max_size=3)


@st.composite
def frames(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 30))
    skip = draw(st.integers(0, 3))  # rows before the slice: the buffers' offset
    total = n + skip
    values = draw(st.lists(BYTES_OR_NONE, min_size=total, max_size=total))
    keyed = draw(st.booleans())
    keys = draw(st.lists(BYTES_OR_NONE, min_size=total, max_size=total)) if keyed else None
    stamped = draw(st.booleans())
    stamps = draw(st.lists(st.integers(0, 2**45), min_size=total, max_size=total)) \
        if stamped else None
    with_headers = draw(st.booleans())
    headers = draw(st.lists(HEADERS, min_size=total, max_size=total)) if with_headers else None
    return {"n": n, "skip": skip, "values": values, "keys": keys, "stamps": stamps,
            "headers": headers, "large": draw(st.booleans()),
            "partitions": draw(st.integers(1, 7)), "limit": draw(st.integers(0, 400)),
            "base": draw(st.integers(0, 2**45)), "count": draw(st.integers(0, 3)),
            "timestamp": draw(st.integers(0, 2**45))}


def _arrays(frame: dict[str, Any]) -> tuple[Any, ...]:
    binary = pa.large_binary() if frame["large"] else pa.binary()
    skip = frame["skip"]
    values = pa.array(frame["values"], binary).slice(skip)
    keys = None if frame["keys"] is None else pa.array(frame["keys"], binary).slice(skip)
    stamps = None if frame["stamps"] is None else \
        pa.array(frame["stamps"], pa.int64()).slice(skip)
    headers = None
    if frame["headers"] is not None:
        headers = pa.array([None if h is None else [{"key": k, "value": v} for k, v in h]
                            for h in frame["headers"]], HEADER_TYPE).slice(skip)
    return values, keys, stamps, headers


def _specs(frame: dict[str, Any]) -> tuple[Any, ...]:
    values, keys, stamps, headers = _arrays(frame)
    return (frame["n"], columnar.BinaryColumn.from_arrow(values).spec(),
            None if keys is None else columnar.BinaryColumn.from_arrow(keys).spec(),
            None if stamps is None else (stamps.buffers()[1], stamps.offset),
            None if headers is None else columnar.HeaderColumn.from_arrow(headers).spec())


def _encode(prepare: Any, append: Any, partition: Any, frame: dict[str, Any],
            grouped: bool) -> tuple[bytes, Any, list[int] | None, list[int] | None]:
    cols = prepare(*_specs(frame))
    order = counts = None
    if grouped and frame["keys"] is not None:
        order = array("q", bytes(8 * frame["n"]))
        counts = partition(cols, order, frame["partitions"], -1)
    buf = bytearray(b"head")
    result = append(buf, cols, 0, frame["n"], frame["limit"], frame["base"], frame["count"],
                    frame["timestamp"])
    return bytes(buf), result, None if order is None else list(order), counts


@needs_native
@settings(max_examples=examples(400), deadline=None)
@given(frames(), st.booleans())
def test_native_and_python_twins_write_the_same_bytes(frame: dict[str, Any],
                                                      grouped: bool) -> None:
    assert native is not None
    expected = _encode(columnar._PyColumns, columnar._append_columns_py,
                       columnar._partition_rows_py, frame, grouped)
    got = _encode(native.Columns, native.append_columns, native.partition_rows, frame, grouped)
    assert got == expected
    py_cols = columnar._PyColumns(*_specs(frame))
    assert native.Columns(*_specs(frame)).max_row_bytes() == py_cols.max_row_bytes()


@settings(max_examples=examples(300), deadline=None)
@given(frames())
def test_columns_write_what_try_append_writes(frame: dict[str, Any]) -> None:
    """In the active implementation, the rows a batch takes are the bytes ``try_append`` writes
    for the same records, and it stops where ``try_append`` would refuse."""
    n, skip = frame["n"], frame["skip"]
    values, keys, stamps, headers = _arrays(frame)
    cols = columnar.prepare_columns(
        n, columnar.BinaryColumn.from_arrow(values),
        None if keys is None else columnar.BinaryColumn.from_arrow(keys),
        None if stamps is None else (stamps.buffers()[1], stamps.offset),
        None if headers is None else columnar.HeaderColumn.from_arrow(headers))
    ours = bytearray()
    taken, max_ts, _largest, _full = columnar.append_columns(
        ours, cols, 0, n, frame["limit"], frame["base"], 0, frame["timestamp"])
    builder = RecordBatchBuilder(bytearray(), write_limit=max(frame["limit"] + 61, 61),
                                 base_timestamp=frame["base"])
    accepted = 0
    for i in range(n):
        row = i + skip
        stamp = frame["timestamp"] if frame["stamps"] is None else frame["stamps"][row]
        record_headers = None if frame["headers"] is None else frame["headers"][row]
        if not builder.try_append(stamp, None if frame["keys"] is None else frame["keys"][row],
                                  frame["values"][row], record_headers):
            break
        accepted += 1
    assert taken == accepted
    assert bytes(ours) == bytes(builder.buffer[61:])
    if taken:
        assert max_ts == builder.max_timestamp


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.none() | st.binary(max_size=20), max_size=40), st.integers(1, 9))
def test_partition_rows_is_java_murmur2_grouping(keys: list[bytes | None], n: int) -> None:
    cols = columnar.prepare_columns(len(keys),
                                    columnar.BinaryColumn.from_arrow(pa.array(keys, pa.binary())),
                                    columnar.BinaryColumn.from_arrow(pa.array(keys, pa.binary())))
    order, counts = columnar.partition_rows(cols, n)
    want: list[list[int]] = [[] for _ in range(n + 1)]
    for row, key in enumerate(keys):
        want[n if key is None else (_murmur2_u32_py(key) & 0x7FFFFFFF) % n].append(row)
    assert counts == [len(g) for g in want]
    assert list(order) == [row for group in want for row in group]


@pytest.mark.parametrize("spec", [
    # offsets past the data buffer
    (array("i", [0, 5]).tobytes(), b"abc", None, 0, False),
    # decreasing offsets
    (array("i", [0, 3, 1]).tobytes(), b"abc", None, 0, False),
    # too few offsets for the rows and offset asked
    (array("i", [0, 1]).tobytes(), b"abc", None, 1, False),
    # a validity bitmap too short
    (array("i", [0] * 20).tobytes(), b"", b"", 0, False),
], ids=["past-data", "decreasing", "short-offsets", "short-validity"])
def test_malformed_buffers_raise(spec: tuple[Any, ...]) -> None:
    rows = 2 if spec[2] is None else 12
    with pytest.raises(ValueError):
        columnar._prepare(rows, spec, None, None, None)
    with pytest.raises(ValueError):
        columnar._PyColumns(rows, spec, None, None, None)


def test_negative_timestamps_and_header_null_keys_are_refused() -> None:
    values = columnar.BinaryColumn.from_arrow(pa.array([b"a"]))
    with pytest.raises(ValueError, match="must be >= 0"):
        columnar.prepare_columns(1, values, timestamps_ms=(array("q", [-1]).tobytes(), 0))
    bad = pa.array([[{"key": None, "value": b"v"}]], HEADER_TYPE)
    with pytest.raises(ValueError, match="header key is null"):
        columnar.HeaderColumn.from_arrow(bad)
