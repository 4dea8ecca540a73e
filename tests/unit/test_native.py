"""The native per-record path (aiokprod/_native) against its pure-Python twins.

``make test`` runs the whole suite twice, with the extension and with
``AIOKPROD_NO_EXTENSIONS=1``; these tests pin down that each run uses what it says, and that
the twins agree bit for bit on random input (the suite then checks behaviour end to end).
"""

from __future__ import annotations

import asyncio
import gc
import os
import pickle
import shutil
import sys
import sysconfig
import weakref
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod import _murmur2 as murmur2_module
from aiokprod import _native
from aiokprod.producer import batch as batch_module
from aiokprod.producer.partition import PartitionProducer
from aiokprod.protocol import produce_body
from aiokprod.record_metadata import RecordMetadata
from aiokprod.records import builder, record_encoding
from aiokprod.schema_registry import avro_flat
from support.examples import examples

DISABLED = os.environ.get("AIOKPROD_NO_EXTENSIONS", "") not in ("", "0")
native = _native.speedups
needs_native = pytest.mark.skipif(native is None, reason="the native extension is not in use")

INT64 = st.integers(-(2**63), 2**63 - 1)
BYTES_OR_NONE = st.none() | st.binary(max_size=300)


def test_the_extension_is_used_unless_disabled() -> None:
    """A silently failed build must fail here, not pass the suite in pure Python."""
    if DISABLED:
        assert not _native.NATIVE
        assert murmur2_module._murmur2_u32 is murmur2_module._murmur2_u32_py
        assert record_encoding._append_record is record_encoding._append_record_py
        assert batch_module._complete_deliveries is batch_module._complete_deliveries_py
        assert batch_module.append_open is batch_module.append_open_py
        assert murmur2_module.group_keys is murmur2_module.group_keys_py
        assert record_encoding.append_values is record_encoding.append_values_py
        assert record_encoding.longest_bytes is record_encoding.longest_bytes_py
        assert produce_body._write_flexible is produce_body.write_generated
        return
    compiler = sysconfig.get_config_var("CC") or "cc"
    if shutil.which(compiler.split()[0]) is None:
        pytest.skip(f"no C compiler ({compiler}) here: the pure-Python install is expected")
    assert _native.NATIVE, ("the native extension was not built or did not import; "
                            f"{sys.executable} -m pip install -e . shows why")
    assert murmur2_module._murmur2_u32 is native.murmur2_u32  # type: ignore[union-attr]
    assert record_encoding._append_record is native.append_record  # type: ignore[union-attr]
    assert batch_module.append_open is native.append_open  # type: ignore[union-attr]
    assert murmur2_module.group_keys is native.group_keys  # type: ignore[union-attr]
    assert record_encoding.append_values is native.append_values  # type: ignore[union-attr]
    assert record_encoding.longest_bytes is native.longest_bytes  # type: ignore[union-attr]
    assert produce_body._write_flexible is native.write_produce  # type: ignore[union-attr]


@needs_native
@settings(max_examples=examples(500), deadline=None)
@given(st.binary(max_size=200))
def test_murmur2_twins_agree(data: bytes) -> None:
    assert native is not None
    expected = murmur2_module._murmur2_u32_py(data)
    assert native.murmur2_u32(data) == expected
    assert native.murmur2_u32(bytearray(data)) == expected
    assert native.murmur2_u32(memoryview(data)) == expected


@needs_native
def test_murmur2_matches_java_for_known_keys() -> None:
    """Values from Java's Utils.murmur2 (the Kafka client's own partitioner test)."""
    assert native is not None
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}
    for key, java in cases.items():
        assert murmur2_module.murmur2(key) == java, key
        value = native.murmur2_u32(key)
        assert (value - (1 << 32) if value & 0x80000000 else value) == java, key


@needs_native
@settings(max_examples=examples(500), deadline=None)
@given(prefix=st.binary(max_size=20), delta=INT64, offset=st.integers(0, 2**31 - 1),
       key=BYTES_OR_NONE, value=BYTES_OR_NONE,
       headers=st.none() | st.lists(st.tuples(st.text(max_size=10), BYTES_OR_NONE),
                                    min_size=1, max_size=4))
def test_record_encoding_twins_agree(prefix: bytes, delta: int, offset: int,
                                     key: bytes | None, value: bytes | None,
                                     headers: list[tuple[str, bytes | None]] | None) -> None:
    assert native is not None
    encoded = record_encoding.encode_headers(headers) if headers else None
    ours, theirs = bytearray(prefix), bytearray(prefix)
    size = native.append_record(ours, delta, offset, key, value, encoded)
    assert size == record_encoding._append_record_py(theirs, delta, offset, key, value, encoded)
    assert ours == theirs
    assert len(ours) == len(prefix) + size


@needs_native
def test_record_encoding_refuses_what_python_refuses() -> None:
    assert native is not None
    for twin in (native.append_record, record_encoding._append_record_py):
        with pytest.raises(ValueError, match="signed 64-bit"):
            twin(bytearray(), 2**63, 0, None, b"v", None)
        with pytest.raises(TypeError):
            twin(bytearray(), 0, 0, "not bytes", b"v", None)  # type: ignore[arg-type]
    # bytes-like values are taken as their bytes, as b"".join takes them
    a, b = bytearray(), bytearray()
    native.append_record(a, 0, 0, bytearray(b"k"), memoryview(b"v"), None)
    record_encoding._append_record_py(b, 0, 0, bytearray(b"k"), memoryview(b"v"), None)  # type: ignore[arg-type]
    assert a == b


@needs_native
async def test_batch_completion_twins_agree() -> None:
    assert native is not None
    loop = asyncio.get_running_loop()
    seen: list[tuple[object, object]] = []

    def on_ack(md: RecordMetadata | None, error: BaseException | None) -> None:
        seen.append((md, error))

    for base_offset, append_time in ((100, -1), (-1, -1), (7, 123456)):
        results = []
        for twin in (native.complete_deliveries, batch_module._complete_deliveries_py):
            futures = [loop.create_future() for _ in range(4)]
            futures[2].cancel()  # a cancelled delivery is left alone
            deliveries: list[object] = []
            for i, f in enumerate(futures):  # timestamps relative to 1_700_000_000_000
                deliveries += [f, i, i * 300 - 1, -1 if i == 1 else 3, 10 * i]
            twin(deliveries, "t", 5, base_offset, append_time, 1_700_000_000_000, on_ack,
                 RecordMetadata, batch_module._call_interceptor)
            assert futures[2].cancelled()
            results.append([f.result() for i, f in enumerate(futures) if i != 2])
        assert results[0] == results[1]
        assert all(type(md) is RecordMetadata for md in results[0])
        assert [md.timestamp for md in results[0]] == (
            [123456] * 3 if append_time >= 0 else
            [1_700_000_000_000 - 1, 1_700_000_000_000 + 299, 1_700_000_000_000 + 899])
    assert len(seen) == 3 * 2 * 4


@needs_native
async def test_native_completion_leaves_record_metadata_to_reference_counting() -> None:
    """A RecordMetadata (a str and ints) cannot be in a cycle; the native path untracks it so
    full collections do not walk every result a caller keeps. It stays an ordinary,
    comparable, picklable NamedTuple."""
    assert native is not None
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    native.complete_deliveries([future, 2, 1000, 3, 10], "t", 5, 40, -1, 0, None,
                               RecordMetadata, batch_module._call_interceptor)
    md = future.result()
    assert not gc.is_tracked(md)
    assert md == RecordMetadata("t", 5, 42, 1000, 3, 10)
    assert pickle.loads(pickle.dumps(md)) == md and md._replace(offset=1).offset == 1
    assert gc.is_tracked(RecordMetadata("t", 5, 42, 1000, 3, 10))  # Python's own are tracked


RECORDS = st.lists(st.tuples(st.integers(1_600_000_000_000, 1_800_000_000_000), BYTES_OR_NONE,
                             BYTES_OR_NONE), min_size=1, max_size=40)


@needs_native
@settings(max_examples=examples(300), deadline=None)
@given(records=RECORDS, write_limit=st.integers(61, 2000), covered=st.integers(0, 30),
       ts_base=st.integers(1_600_000_000_000, 1_800_000_000_000))
async def test_open_batch_append_twins_agree(records: list[tuple[int, bytes | None,
                                                                 bytes | None]],
                                             write_limit: int, covered: int,
                                             ts_base: int) -> None:
    """send()'s append into the open batch: the same answer for every record, the same bytes,
    builder fields and delivery slots, whether the batch fills, runs out of charged
    bookkeeping or is sealed."""
    assert native is not None
    loop = asyncio.get_running_loop()

    def open_batch() -> batch_module.ProducerBatch:
        buffer = bytearray()
        made = batch_module.ProducerBatch(
            PartitionProducer("t", 0), buffer, 0,
            builder.RecordBatchBuilder(buffer, write_limit=write_limit), 0.0, ts_base)
        made.covered_slots = covered * batch_module.DELIVERY_STRIDE
        return made

    ours, theirs = open_batch(), open_batch()
    for timestamp, key, value in records:
        a = native.append_open(ours, timestamp, key, value, loop.create_future)
        b = batch_module.append_open_py(theirs, timestamp, key, value, loop.create_future)
        assert (a is None) == (b is None)
    for made in (ours, theirs):
        assert all(isinstance(f, asyncio.Future) and not f.done()
                   for f in made.deliveries[::batch_module.DELIVERY_STRIDE])
        del made.deliveries[::batch_module.DELIVERY_STRIDE]
    assert ours.deliveries == theirs.deliveries
    fields = ("record_count", "base_timestamp", "full", "max_record_size", "max_timestamp")
    assert [getattr(ours.builder, f) for f in fields] == \
        [getattr(theirs.builder, f) for f in fields]
    assert ours.buffer == theirs.buffer
    if not ours.builder.record_count:
        return  # nothing was charged for: an empty batch is never sealed
    ours.seal()
    theirs.seal()
    assert bytes(ours.sealed or b"") == bytes(theirs.sealed or b"")
    for made in (ours, theirs):  # a sealed batch takes nothing more
        assert native.append_open(made, ts_base, None, b"v", loop.create_future) is None
        assert batch_module.append_open_py(made, ts_base, None, b"v", loop.create_future) is None


@needs_native
async def test_native_completion_makes_no_result_no_one_can_see() -> None:
    """A delivery future only the batch holds, with no callback (fire-and-forget), gets no
    RecordMetadata: it is dropped pending, and a weak reference sees it gone. One a caller
    keeps, or one with a callback, is resolved as always."""
    assert native is not None
    loop = asyncio.get_running_loop()
    kept = loop.create_future()
    called: list[RecordMetadata] = []
    with_callback = loop.create_future()
    with_callback.add_done_callback(lambda f: called.append(f.result()))
    deliveries: list[object] = [kept, 0, 0, 1, 1, with_callback, 1, 0, 1, 1]
    del with_callback
    dropped = loop.create_future()
    gone = weakref.ref(dropped)
    deliveries += [dropped, 2, 0, 1, 1]
    del dropped
    native.complete_deliveries(deliveries, "t", 0, 10, -1, 0, None, RecordMetadata,
                               batch_module._call_interceptor)
    assert gone() is None and deliveries[10] is None
    assert kept.result().offset == 10
    await asyncio.sleep(0)
    assert [md.offset for md in called] == [11]


@needs_native
@settings(max_examples=examples(300), deadline=None)
@given(keys=st.lists(st.binary(max_size=12), max_size=60), num_partitions=st.integers(1, 9),
       none_at=st.none() | st.integers(0, 59))
def test_key_grouping_twins_agree(keys: list[bytes], num_partitions: int,
                                  none_at: int | None) -> None:
    """send_many's keyed records by partition: the same order, runs and reordered lists, each
    record on the partition the partitioner gives its key; a None key makes both decline."""
    assert native is not None
    with_none: list[bytes | None] = list(keys)
    if none_at is not None and none_at < len(with_none):
        with_none[none_at] = None
    values: list[bytes | None] = [b"v%d" % i for i in range(len(with_none))]
    ours = native.group_keys(with_none, values, num_partitions)
    assert ours == murmur2_module.group_keys_py(with_none, values, num_partitions)
    if ours is None:
        assert None in with_none
        return
    order, runs, ordered_keys, ordered_values = ours
    assert sorted(order) == list(range(len(keys)))
    assert ordered_keys == [keys[i] for i in order]
    assert ordered_values == [values[i] for i in order]
    assert sum(stop - start for _p, start, stop in runs) == len(keys)
    assert len({p for p, _start, _stop in runs}) == len(runs)  # one run per partition
    for p, start, stop in runs:
        assert all(murmur2_module.partition_for_key(keys[i], num_partitions) == p
                   for i in order[start:stop])


@needs_native
def test_key_grouping_refuses_what_python_refuses() -> None:
    assert native is not None
    for twin in (native.group_keys, murmur2_module.group_keys_py):
        with pytest.raises(ValueError, match="no partitions"):
            twin([b"k"], [b"v"], 0)
        with pytest.raises(ValueError, match="1 keys for 2 values"):
            twin([b"k"], [b"v", b"w"], 3)
        assert twin([b"k", bytearray(b"k")], [b"v", b"w"], 3) is None  # type: ignore[list-item]


ITEMS = st.lists(st.none() | st.binary(max_size=40) | st.sampled_from(
    [bytearray(b"ba"), "str", 7]), max_size=30)


@needs_native
@settings(max_examples=examples(300), deadline=None)
@given(items=ITEMS)
def test_longest_bytes_twins_agree(items: list[object]) -> None:
    assert native is not None
    expected = record_encoding.longest_bytes_py(items)
    assert native.longest_bytes(items) == expected
    if all(i is None or type(i) is bytes for i in items):
        assert expected == max((len(i) for i in items if isinstance(i, bytes)), default=0)
    else:
        assert expected == -1


@needs_native
@settings(max_examples=examples(300), deadline=None)
@given(values=st.lists(BYTES_OR_NONE, min_size=1, max_size=30), keyed=st.booleans(),
       prefix=st.integers(0, 3), start=st.integers(0, 5), limit=st.integers(61, 1500),
       delta=st.integers(0, 2**40))
def test_run_append_twins_agree(values: list[bytes | None], keyed: bool, prefix: int,
                                start: int, limit: int, delta: int) -> None:
    """send_many's append loop: the same records taken, bytes and largest size, whether the
    run fits, stops at the limit, or starts in an empty batch (which takes one record)."""
    assert native is not None
    keys: list[bytes | None] | None = [b"k%d" % i for i in range(len(values))] if keyed else None
    start = min(start, len(values))
    ours, theirs = bytearray(b"h" * 61), bytearray(b"h" * 61)
    for buf in (ours, theirs):  # ``prefix`` records already in the batch
        for i in range(prefix):
            record_encoding._append_record_py(buf, 0, i, None, b"p", None)
    got = native.append_values(ours, delta, prefix, keys, values, start, len(values), limit)
    assert got == record_encoding.append_values_py(theirs, delta, prefix, keys, values, start,
                                                   len(values), limit)
    assert ours == theirs
    if prefix == 0 and start < len(values):
        assert got[0] >= 1  # an empty batch takes its first record whatever its size


# one field of each primitive type, nullable both ways round, and one with a default
_FLAT_AVRO = [("l", "long", -1, avro_flat._MISSING), ("i", "int", -1, avro_flat._MISSING),
              ("s", "string", -1, avro_flat._MISSING), ("b", "bytes", -1, avro_flat._MISSING),
              ("d", "double", -1, avro_flat._MISSING), ("f", "float", -1, avro_flat._MISSING),
              ("t", "boolean", -1, avro_flat._MISSING), ("n", "null", -1, avro_flat._MISSING),
              ("ns", "string", 0, avro_flat._MISSING), ("ln", "long", 1, avro_flat._MISSING),
              ("dflt", "int", -1, 7)]
# right values, and wrong ones of every kind each twin must refuse alike
_AVRO_VALUE = (st.integers(-(2**64), 2**64) | st.floats(allow_nan=False, width=64)
               | st.text(max_size=40) | st.binary(max_size=40) | st.booleans() | st.none()
               | st.just(bytearray(b"ba")))


@needs_native
@settings(max_examples=examples(500), deadline=None)
@given(record=st.fixed_dictionaries(
    {"l": INT64 | _AVRO_VALUE, "i": st.integers(-(2**31), 2**31 - 1) | _AVRO_VALUE,
     "s": st.text(max_size=700) | _AVRO_VALUE, "b": st.binary(max_size=700) | _AVRO_VALUE,
     "d": st.floats() | _AVRO_VALUE, "f": st.floats(width=32) | _AVRO_VALUE,
     "t": _AVRO_VALUE, "n": st.none() | _AVRO_VALUE, "ns": st.none() | st.text(max_size=9),
     "ln": st.none() | INT64},
    optional={"dflt": st.integers(-5, 5), "unknown": st.integers()}),
    header=st.binary(max_size=8), as_mapping=st.booleans())
def test_flat_avro_twins_agree(record: dict[str, Any], header: bytes, as_mapping: bool) -> None:
    """The native flat Avro encoder writes the generated function's bytes, refuses what it
    refuses with the same exception type, and grows past its stack buffer (700-byte fields)."""
    assert native is not None
    ours = native.FlatAvroEncoder(tuple(_FLAT_AVRO), avro_flat._MISSING)
    theirs = avro_flat._generated_encoder(_FLAT_AVRO)
    given_record: Mapping[str, Any] = MappingProxyType(record) if as_mapping else record
    try:
        expected: bytes | type[BaseException] = theirs(given_record, header)
    except Exception as exc:  # the type is what must agree
        expected = type(exc)
    if isinstance(expected, bytes):
        assert ours(given_record, header) == expected
    else:
        with pytest.raises(expected):
            ours(given_record, header)


_ARROW_KINDS = {  # an Arrow type of each kind the column encoder takes, and its values
    "bool_": st.booleans(), "int8": st.integers(-128, 127),
    "int16": st.integers(-(2**15), 2**15 - 1), "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": INT64,
    "float32": st.floats(width=32, allow_nan=False), "float64": st.floats(allow_nan=False),
    "string": st.text(max_size=300), "large_string": st.text(max_size=20),
    "binary": st.binary(max_size=300),
}


@st.composite
def _struct_columns(draw: st.DrawFn) -> tuple[Any, int, int]:
    import pyarrow as pa

    rows = draw(st.integers(0, 30))
    types = draw(st.lists(st.sampled_from(sorted(_ARROW_KINDS)), min_size=1, max_size=6))
    arrays, fields = [], []
    for i, name in enumerate(types):
        nullable = draw(st.booleans())
        values = draw(st.lists(_ARROW_KINDS[name] | st.none() if nullable else
                               _ARROW_KINDS[name], min_size=rows, max_size=rows))
        arrays.append(pa.array(values, getattr(pa, name)()))
        fields.append(pa.field(f"f{i}", getattr(pa, name)(), nullable))
    mask = draw(st.none() | st.lists(st.booleans(), min_size=rows, max_size=rows))
    column = pa.StructArray.from_arrays(arrays, fields=fields,
                                        mask=None if mask is None else pa.array(mask, pa.bool_()))
    start = draw(st.integers(0, rows))
    return column, start, draw(st.integers(0, rows - start))


@needs_native
@settings(max_examples=examples(300), deadline=None)
@given(struct=_struct_columns(), header=st.binary(max_size=6))
def test_avro_column_twins_agree(struct: tuple[Any, int, int], header: bytes) -> None:
    """The native column encoder writes the NumPy encoder's rows for every field type, null
    values and null rows, and a sliced column (Arrow offsets in the struct and its children)."""
    from aiokprod.schema_registry.avro_columns import AvroColumnEncoder

    assert native is not None
    column, start, length = struct
    encoder = AvroColumnEncoder(column.type)
    for part in (column, column.slice(start, length)):
        ours = encoder.encode(part, header)
        assert ours.to_pylist() == encoder.encode_numpy(part, header).to_pylist()
        assert ours.null_count == part.null_count


@needs_native
def test_avro_column_twins_refuse_nulls_in_a_field_that_is_not_nullable() -> None:
    import pyarrow as pa

    from aiokprod.schema_registry.avro_columns import AvroColumnEncoder

    values = pa.array([1, None, 3, None], pa.int64())
    # the struct's own null rows do not count: row 3 is null as a whole
    column = pa.StructArray.from_arrays([values], fields=[pa.field("n", pa.int64(), False)],
                                        mask=pa.array([False, False, False, True]))
    encoder = AvroColumnEncoder(column.type)
    for encode in (encoder.encode, encoder.encode_numpy):
        with pytest.raises(ValueError, match="field 'n' is not nullable but holds 1 nulls"):
            encode(column, b"")


# -- a Produce request's body ----------------------------------------------------------------

_RECORDS = st.none() | st.binary(max_size=40) | st.binary(max_size=40).map(
    lambda b: memoryview(bytearray(b)))  # the sealed batches are memoryviews
_PARTITIONS = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), _RECORDS), max_size=4)
_NAMES = st.text(min_size=1, max_size=300)  # past one varint byte, non-ASCII included


@needs_native
@settings(max_examples=examples(500), deadline=None)
@given(version=st.integers(9, 14), transactional_id=st.none() | st.text(max_size=200),
       acks=st.sampled_from([-1, 0, 1]), timeout_ms=st.integers(0, 2**31 - 1),
       names=st.lists(st.tuples(_NAMES, st.uuids(), _PARTITIONS), max_size=25))
def test_produce_body_twins_agree(version: int, transactional_id: str | None, acks: int,
                                  timeout_ms: int,
                                  names: list[tuple[str, Any, list[tuple[int, Any]]]]) -> None:
    """The native body is the generated encoder's, byte for byte: topics by name (v9-12) and
    by id (v13-14), null and empty records, many topics (the native side's buffer is flushed
    between them)."""
    assert native is not None
    topics: Any = [(topic_id if version > 12 else name, parts) for name, topic_id, parts in names]
    ours: list[Any] = []
    native.write_produce(ours, version, transactional_id, acks, timeout_ms, topics)
    theirs: list[Any] = []
    produce_body.write_generated(theirs, version, transactional_id, acks, timeout_ms, topics)
    assert b"".join(ours) == b"".join(theirs)
    # each records buffer is handed on, not copied
    records = [r for _, parts in topics for _, r in parts if r is not None]
    assert all(any(chunk is r for chunk in ours) for r in records)


@needs_native
def test_produce_body_native_refuses_what_it_cannot_write() -> None:
    assert native is not None
    with pytest.raises(ValueError, match="Produce v8 is not a flexible version"):
        native.write_produce([], 8, None, -1, 1000, [])
    with pytest.raises(OverflowError):
        native.write_produce([], 12, None, -1, 1000, [("t", [(2**31, b"")])])
    with pytest.raises(TypeError):
        native.write_produce([], 12, None, -1, 1000, [(b"t", [])])


def _answers(version: int) -> Any:
    """Produce answers at ``version``: mostly the common shape, sometimes with what only
    the generated decoder reads (record errors, an error message, a leader hint, node
    endpoints, a KIP-1269 window)."""
    from aiokprod.protocol import ProduceResponse as R

    rare = st.integers(0, 9).map(lambda n: n == 0)
    partition = st.builds(
        lambda index, code, offsets, odd: R.PartitionProduceResponse(
            index=index, error_code=code, base_offset=offsets[0],
            log_append_time_ms=offsets[1], log_start_offset=offsets[2],
            **({"error_message": "not the leader", "record_errors": [
                R.BatchIndexAndErrorMessage(batch_index=3)],
                "current_leader": R.LeaderIdAndEpoch(leader_id=2, leader_epoch=7)}
               if odd else {})),
        st.integers(-(2**31), 2**31 - 1), st.integers(-(2**15), 2**15 - 1),
        st.tuples(INT64, INT64, INT64), rare)
    topic = st.builds(
        lambda name, topic_id, parts, odd: R.TopicProduceResponse(
            **({"topic_id": topic_id} if version > 12 else {"name": name}),
            partition_responses=parts,
            **({"producer_state_batches_to_retain": 9} if odd and version == 14 else {})),
        st.text(max_size=40), st.uuids(), st.lists(partition, max_size=4), rare)
    return st.builds(
        lambda topics, throttle, odd: R(
            responses=topics, throttle_time_ms=throttle,
            node_endpoints=[R.NodeEndpoint(node_id=2, host="b", port=9092)] if odd else []),
        st.lists(topic, max_size=4), st.integers(0, 2**31 - 1), rare)


@needs_native
@settings(max_examples=examples(500), deadline=None)
@given(data=st.data(), version=st.integers(10, 14), trailing=st.binary(max_size=3))
def test_produce_answer_twins_agree(data: Any, version: int, trailing: bytes) -> None:
    """The native reader's objects equal the generated decoder's for every answer it reads,
    and it reads every answer of the common shape; the rest it leaves to that decoder."""
    from aiokprod.protocol import ProduceResponse

    answer = data.draw(_answers(version))
    body = answer.encode(version) + trailing  # a broker's trailing bytes are tolerated
    read = produce_body._read_common
    assert read is not None
    ours = read(memoryview(body), version)
    theirs = ProduceResponse.decode(memoryview(body), version, strict=False)
    common = not answer.node_endpoints and all(
        t.producer_state_batches_to_retain == 5 and all(
            not p.record_errors and p.error_message is None and p.current_leader.leader_id == -1
            for p in t.partition_responses) for t in answer.responses)
    assert (ours is not None) == common
    if ours is not None:
        assert type(ours) is ProduceResponse and ours == theirs == answer
    assert produce_body.ProduceAnswer.decode(memoryview(body), version, strict=False) == theirs


@needs_native
def test_produce_answer_reader_leaves_what_is_wrong_to_the_generated_decoder() -> None:
    """A truncated answer, a null array, bad UTF-8, a version before v10: None, so the
    generated decoder raises its ProtocolError naming the field."""
    from aiokprod.errors import ProtocolError
    from aiokprod.protocol import ProduceResponse as R

    read = produce_body._read_common
    assert read is not None
    good = R(responses=[R.TopicProduceResponse(name="t", partition_responses=[
        R.PartitionProduceResponse(index=0)])]).encode(12)
    assert read(good, 12) is not None
    assert read(good, 9) is None  # v9 has no leader hints: the generated decoder's
    for bad in (good[:-3], b"\x00", good.replace(b"\x02t", b"\x02\xff")):
        assert read(bad, 12) is None
        with pytest.raises(ProtocolError):
            produce_body.ProduceAnswer.decode(bad, 12, strict=False)
