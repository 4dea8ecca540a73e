"""Records encoded straight from columnar (Arrow) buffers: no Python object per row.

``Producer.send_columns`` takes its records as **buffers in Arrow's layout** rather than lists
of ``bytes``: a binary or string column is an offsets buffer (int32, or int64 for
``large_binary``), a data buffer, an optional validity bitmap (bit *i* set = row *i* not null)
and an offset into them (a sliced array). ``append_columns`` writes a run of rows into an open
record batch's ``bytearray`` in Kafka's v2 record layout (the same bytes
``RecordBatchBuilder.append_many`` writes), reading keys, values, per-row timestamps and headers
from those buffers; ``partition_rows`` hashes the keys with murmur2 (Java's default partitioner,
bit for bit) and groups the rows by partition, keeping their order within each partition.

Both have a native twin in ``aiokprod._native._speedups`` (C loops over the buffers) that gives
the same bytes; ``aiokprod._native`` picks one at import. pyarrow is not needed here: any object
with the buffer protocol will do, and ``BinaryColumn.from_arrow`` is a convenience for callers
that have pyarrow.

The buffers are checked once when prepared (sizes, offsets in order and inside the data, no
negative timestamp), so a malformed column raises ``ValueError`` instead of reading past a
buffer. Header keys must not be null (``HeaderColumn.from_arrow`` refuses them); a null key in
raw buffers is written as an empty key.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any, overload

from aiokprod import _native
from aiokprod._murmur2 import _murmur2_u32_py
from aiokprod.records._varint import ZIGZAG_TABLE, ZIGZAG_TABLE_SIZE, encode_varint

if TYPE_CHECKING:
    from aiokprod.records.builder import RecordBatchBuilder

__all__ = ["BinaryColumn", "ColumnarRows", "Columns", "HeaderColumn", "append_columns",
           "partition_rows",
           "prepare_columns"]

# (offsets, data, validity or None, offset, large)
_BinSpec = tuple[Any, Any, Any, int, bool]
# (list offsets, list validity or None, list offset, key column, value column)
_HeaderSpec = tuple[Any, Any, int, _BinSpec, _BinSpec]


@dataclass(frozen=True)
class BinaryColumn:
    """A binary/string column as Arrow lays it out (``pa.binary()``, ``pa.string()`` and their
    ``large_`` forms): row *i* is ``data[offsets[offset + i] : offsets[offset + i + 1]]``."""

    offsets: Any  # buffer protocol: int32 (int64 when ``large``) row boundaries
    data: Any  # buffer protocol, or None when every row is empty or null
    validity: Any = None  # buffer protocol bitmap, LSB first; None: no nulls
    offset: int = 0  # first row's position in the buffers (an Arrow slice's offset)
    large: bool = False

    @classmethod
    def from_arrow(cls, array_: Any) -> BinaryColumn:
        """The buffers of a pyarrow binary/string (or large_) array, no copy."""
        import pyarrow as pa

        kind = array_.type
        if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
            array_ = array_.cast(pa.binary())
            kind = array_.type
        if not (pa.types.is_binary(kind) or pa.types.is_string(kind)
                or pa.types.is_large_binary(kind) or pa.types.is_large_string(kind)):
            raise TypeError(f"a binary or string column is needed, not {kind}")
        validity, offsets, data = array_.buffers()[:3]
        return cls(offsets, data, validity if array_.null_count else None, array_.offset,
                   pa.types.is_large_binary(kind) or pa.types.is_large_string(kind))

    def spec(self) -> _BinSpec:
        return (self.offsets, self.data, self.validity, self.offset, self.large)


@dataclass(frozen=True)
class HeaderColumn:
    """Per-row headers as Arrow's ``list<struct<key: string, value: binary>>`` (Spark's
    ``headers`` column): row *i* holds entries ``offsets[offset + i] .. offsets[offset + i + 1]``
    of ``keys``/``values``; a null list or an empty one is a record without headers."""

    offsets: Any  # buffer protocol: int32 list offsets
    keys: BinaryColumn  # one row per entry; never null
    values: BinaryColumn  # one row per entry; null = a header with a null value
    validity: Any = None
    offset: int = 0

    @classmethod
    def from_arrow(cls, array_: Any) -> HeaderColumn:
        """The buffers of a pyarrow ``list<struct<key, value>>`` array, no copy."""
        import pyarrow as pa

        if not pa.types.is_list(array_.type) or not pa.types.is_struct(array_.type.value_type):
            raise TypeError(f"headers must be list<struct<key, value>>, not {array_.type}")
        entries = array_.values
        keys, values = entries.field(0), entries.field(1)
        if keys.null_count:
            raise ValueError("a header key is null; Kafka header keys are strings")
        validity, list_offsets = array_.buffers()[:2]
        return cls(list_offsets, BinaryColumn.from_arrow(keys), BinaryColumn.from_arrow(values),
                   validity if array_.null_count else None, array_.offset)

    def spec(self) -> _HeaderSpec:
        return (self.offsets, self.validity, self.offset, self.keys.spec(), self.values.spec())


# -- the pure-Python twin -------------------------------------------------------------------


class _Bin:
    """Python's view of one column spec (the twin of the native ``_Bin``): the row offsets as
    a list (``offs[r]``, rows counted from the slice's start) and the data as ``bytes``."""

    __slots__ = ("_rows", "data", "off", "offs", "valid")

    def __init__(self, spec: _BinSpec, rows: int) -> None:
        offsets, data, validity, off, large = spec
        if off < 0 or rows < 0:
            raise ValueError("negative offset or length")
        width = 8 if large else 4
        self.off = off  # for the validity bitmap, which is not sliced
        self.valid = None if validity is None else _view(validity, (off + rows + 7) >> 3)
        raw = _view(offsets, (off + rows + 1) * width)
        offs = raw[:len(raw) // width * width].cast("q" if large else "i")
        if sys.byteorder != "little":  # pragma: no cover - big-endian hosts only
            offs = _swapped(offs)
        self.offs: list[int] = offs[off:off + rows + 1].tolist()
        if self.offs[0] < 0:
            raise ValueError(f"offset {self.offs[0]} is negative")
        if self.offs != sorted(self.offs):  # C speed; linear on sorted input
            raise ValueError("offsets decrease")
        view = _view(data, 0) if data is not None else memoryview(b"")
        if self.offs[-1] > len(view):
            raise ValueError(f"offset {self.offs[-1]} is past the {len(view)}-byte data buffer")
        self.data = bytes(view[:self.offs[-1]])
        self._rows: list[bytes | None] | None = None

    def rows(self) -> list[bytes | None]:
        """Every row as ``bytes`` or None, made once (the twin's loops index this list)."""
        if self._rows is None:
            data, offs = self.data, self.offs
            out: list[bytes | None] = [data[s:e] for s, e in pairwise(offs)]
            valid = self.valid
            if valid is not None:
                off = self.off
                for row in range(len(out)):
                    i = row + off
                    if not (valid[i >> 3] >> (i & 7)) & 1:
                        out[row] = None
            self._rows = out
        return self._rows

    def get(self, row: int) -> bytes | None:
        valid = self.valid
        if valid is not None:
            i = row + self.off
            if not (valid[i >> 3] >> (i & 7)) & 1:
                return None
        offs = self.offs
        return self.data[offs[row]:offs[row + 1]]


def _view(buffer: Any, need: int) -> memoryview:
    if buffer is None:
        if need > 0:
            raise ValueError(f"a buffer of {need} bytes is missing")
        return memoryview(b"")
    view = memoryview(buffer).cast("B")
    if len(view) < need:
        raise ValueError(f"buffer of {len(view)} bytes, {need} needed")
    return view


def _swapped(offs: memoryview) -> memoryview:  # pragma: no cover - big-endian hosts only
    fixed = array(offs.format, offs.tolist())
    fixed.byteswap()
    return memoryview(fixed)


class _PyColumns:
    """The twin of the native ``Columns``: the buffers of one ``send_columns`` call."""

    def __init__(self, length: int, values: _BinSpec, keys: _BinSpec | None,
                 timestamps: tuple[Any, int] | None, headers: _HeaderSpec | None) -> None:
        self.length = length
        self.order: memoryview | None = None
        self.values = _Bin(values, length)
        self.keys = None if keys is None else _Bin(keys, length)
        self.ts: memoryview | None = None
        if timestamps is not None:
            buffer, toff = timestamps
            raw = _view(buffer, (toff + length) * 8)
            self.ts = raw[toff * 8:(toff + length) * 8].cast("q")
            if length and min(self.ts) < 0:
                i = self.ts.tolist().index(min(self.ts))
                raise ValueError(f"timestamps_ms[{i}] is {self.ts[i]}; must be >= 0")
        self.headers: tuple[memoryview | None, int, memoryview, _Bin, _Bin] | None = None
        if headers is not None:
            list_offsets, list_validity, hoff, hkeys, hvals = headers
            hvalid = None if list_validity is None else \
                _view(list_validity, (hoff + length + 7) >> 3)
            raw = _view(list_offsets, (hoff + length + 1) * 4)
            hoffs = raw[:len(raw) // 4 * 4].cast("i")
            listed = hoffs[hoff:hoff + length + 1].tolist()
            if listed != sorted(listed):
                raise ValueError("header list offsets decrease")
            if hoffs[hoff] < 0:
                raise ValueError("negative header list offset")
            last = hoffs[hoff + length]
            self.headers = (hvalid, hoff, hoffs, _Bin(hkeys, last), _Bin(hvals, last))

    def set_order(self, order: Any) -> None:
        view = _view(order, self.length * 8)[:self.length * 8].cast("q")
        if self.length and not 0 <= min(view) <= max(view) < self.length:
            raise ValueError("order holds a number that is not a row")
        self.order = view

    def max_row_bytes(self) -> int:
        """The twin of the native ``Columns.max_row_bytes``."""
        largest = 0
        for row in range(self.length):
            key = None if self.keys is None else self.keys.get(row)
            value = self.values.get(row)
            size = len(key or b"") + len(value or b"") + \
                (1 if self.headers is None else len(self.header_section(row)))
            largest = max(largest, size)
        return largest

    def header_section(self, row: int) -> bytes:
        assert self.headers is not None
        hvalid, hoff, hoffs, hkeys, hvals = self.headers
        i = row + hoff
        if hvalid is not None and not (hvalid[i >> 3] >> (i & 7)) & 1:
            return b"\x00"
        s, e = hoffs[i], hoffs[i + 1]
        if s == e:
            return b"\x00"
        parts = [encode_varint(e - s)]
        for j in range(s, e):
            key = hkeys.get(j) or b""
            value = hvals.get(j)
            parts += (encode_varint(len(key)), key)
            parts += (b"\x01",) if value is None else (encode_varint(len(value)), value)
        return b"".join(parts)


def _append_columns_py(buf: bytearray, cols: _PyColumns, start: int, stop: int, limit: int,
                       base_timestamp: int, count: int, timestamp: int
                       ) -> tuple[int, int, int, bool]:
    """The twin of ``_speedups.append_columns`` (see ``append_columns``)."""
    if start < 0 or stop > cols.length or start > stop:
        raise ValueError(f"rows {start}:{stop} outside 0:{cols.length}")
    used = len(buf)
    records: list[bytes] = []
    total = n = largest = 0
    max_ts = -(1 << 63)
    full = False
    rec = 0
    order, stamps = cols.order, cols.ts
    keys = None if cols.keys is None else cols.keys.rows()
    values = cols.values.rows()
    headers = cols.headers
    zz, size = ZIGZAG_TABLE, ZIGZAG_TABLE_SIZE
    for pos in range(start, stop):
        row = order[pos] if order is not None else pos
        ts = stamps[row] if stamps is not None else timestamp
        key = None if keys is None else keys[row]
        value = values[row]
        delta, offset = ts - base_timestamp, count + n
        body = b"".join((
            b"\x00", zz[delta] if 0 <= delta < size else encode_varint(delta),
            zz[offset] if offset < size else encode_varint(offset),
            b"\x01" if key is None else
            (zz[len(key)] if len(key) < size else encode_varint(len(key))) + key,
            b"\x01" if value is None else
            (zz[len(value)] if len(value) < size else encode_varint(len(value))) + value,
            b"\x00" if headers is None else cols.header_section(row)))
        length = len(body)
        prefix = zz[length] if length < size else encode_varint(length)
        rec = len(prefix) + length
        if used + total + rec > limit and count + n > 0:
            full = True
            break
        records.append(prefix)
        records.append(body)
        total += rec
        n += 1
        if rec > largest:  # noqa: PLR1730 - an if is cheaper than max() per row
            largest = rec
        if ts > max_ts:  # noqa: PLR1730
            max_ts = ts
    if n and used + total + rec > limit:
        full = True
    buf += b"".join(records)
    return n, max_ts, largest, full


def _partition_rows_py(cols: _PyColumns, order: Any, num_partitions: int,
                       null_partition: int) -> list[int]:
    """The twin of ``_speedups.partition_rows`` (see ``partition_rows``)."""
    keys = cols.keys
    if keys is None:
        raise ValueError("partition_rows needs a key column")
    if num_partitions <= 0:
        raise ValueError("no partitions to choose from")
    if null_partition >= num_partitions:
        raise ValueError(f"null_partition {null_partition} is not a partition")
    if null_partition < 0:
        null_partition = num_partitions
    out = _view(order, 0).cast("q")
    if len(out) < cols.length:
        raise ValueError(f"order has {len(out)} slots for {cols.length} rows")
    groups: list[list[int]] = [[] for _ in range(num_partitions + 1)]
    for row, key in enumerate(keys.rows()):
        part = null_partition if key is None else \
            (_murmur2_u32_py(key) & 0x7FFFFFFF) % num_partitions
        groups[part].append(row)
    pos = 0
    for group in groups:
        for row in group:
            out[pos] = row
            pos += 1
    cols.set_order(order)
    return [len(group) for group in groups]


# -- the public face ----------------------------------------------------------------------------

Columns = Any  # a native ``_speedups.Columns`` or a ``_PyColumns``: opaque to callers

_Prepare = Callable[[int, _BinSpec, "_BinSpec | None", "tuple[Any, int] | None",
                     "_HeaderSpec | None"], Any]
_prepare: _Prepare = _PyColumns if _native.speedups is None else _native.speedups.Columns
_append: Callable[..., tuple[int, int, int, bool]] = \
    _append_columns_py if _native.speedups is None else _native.speedups.append_columns
_partition: Callable[[Any, Any, int, int], list[int]] = \
    _partition_rows_py if _native.speedups is None else _native.speedups.partition_rows


def prepare_columns(length: int, values: BinaryColumn, keys: BinaryColumn | None = None,
                    timestamps_ms: tuple[Any, int] | None = None,
                    headers: HeaderColumn | None = None) -> Columns:
    """Check the buffers of ``length`` rows once and keep them for the calls below.

    ``timestamps_ms`` is (an int64 buffer, the first row's index in it): one create time per
    row, epoch milliseconds.
    """
    return _prepare(length, values.spec(), None if keys is None else keys.spec(),
                    timestamps_ms, None if headers is None else headers.spec())


def append_columns(buf: bytearray, cols: Columns, start: int, stop: int, limit: int,
                   base_timestamp: int, count: int, timestamp: int
                   ) -> tuple[int, int, int, bool]:
    """Append rows ``start:stop`` (in ``partition_rows``' order, if it ran) to ``buf``.

    A row is taken while ``len(buf)`` stays within ``limit``, or when it is the batch's first
    record (``count``: records already in the batch, the next offset delta). Each row's
    timestamp is its own, or ``timestamp`` without a timestamp column; deltas are from
    ``base_timestamp``. Returns (rows taken, largest timestamp, largest record, full).
    """
    return _append(buf, cols, start, stop, limit, base_timestamp, count, timestamp)


def partition_rows(cols: Columns, num_partitions: int, null_partition: int = -1
                   ) -> tuple[array[int], list[int]]:
    """Group the rows by ``(murmur2(key) & 0x7fffffff) % num_partitions``, keeping their order
    within a group; rows with a null key form a last group, or join ``null_partition``'s when
    it is >= 0. Returns (row numbers in that order, group sizes)."""
    order = array("q", bytes(8 * cols.length))
    return order, _partition(cols, order, num_partitions, null_partition)


class ColumnarRows(Sequence[bytes | None]):
    """One ``send_columns`` call's rows, as the accumulator's bulk path takes them.

    It stands where ``send_many`` passes its list of values: the accumulator hands it a run of
    positions and an open batch (``append_to``), and ``SendManyResult`` indexes it (row *i*'s
    value, as ``bytes``) only to report sizes of the records someone looks at.
    """

    __slots__ = ("_lookup", "_specs", "_stamps", "cols", "length", "order", "timestamp")

    def __init__(self, length: int, values: BinaryColumn, keys: BinaryColumn | None,
                 timestamps_ms: tuple[Any, int] | None, headers: HeaderColumn | None,
                 timestamp: int) -> None:
        self.cols = prepare_columns(length, values, keys, timestamps_ms, headers)
        self.length = length
        self.timestamp = timestamp  # every row's create time without a timestamp column
        self.order: array[int] | None = None  # position → row, once grouped by partition
        # Python's view of the keys and values, made only if a result is looked at (its
        # checks loop over the rows in Python)
        self._specs = (values.spec(), None if keys is None else keys.spec())
        self._lookup: _PyColumns | None = None
        self._stamps: memoryview | None = None
        if timestamps_ms is not None:
            buffer, toff = timestamps_ms
            self._stamps = _view(buffer, 0)[toff * 8:(toff + length) * 8].cast("q")

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> bytes | None: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes | None]: ...

    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes | None] | None:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.length))]
        if not 0 <= index < self.length:
            raise IndexError(index)
        return self._columns().values.get(index)

    def key(self, row: int) -> bytes | None:
        """Row ``row``'s key (bytes, or None)."""
        keys = self._columns().keys
        return None if keys is None else keys.get(row)

    def _columns(self) -> _PyColumns:
        if self._lookup is None:
            self._lookup = _PyColumns(self.length, self._specs[0], self._specs[1], None, None)
        return self._lookup

    def timestamp_of(self, row: int) -> int:
        """Row ``row``'s create time."""
        return self.timestamp if self._stamps is None else self._stamps[row]

    def row(self, position: int) -> int:
        """The row at ``position`` (they differ once ``group`` ran)."""
        return position if self.order is None else self.order[position]

    def group(self, num_partitions: int, null_partition: int = -1) -> list[int]:
        """Order the rows by their keys' partition (see ``partition_rows``); group sizes."""
        self.order, counts = partition_rows(self.cols, num_partitions, null_partition)
        return counts

    def use_order(self, order: array[int]) -> None:
        """Take the rows in ``order`` (a custom partitioner grouped them)."""
        self.cols.set_order(order)
        self.order = order

    def record_size(self, position: int) -> int:
        """The encoded size of the record at ``position`` (sizing a new batch for it)."""
        scratch = bytearray()
        append_columns(scratch, self.cols, position, position + 1, 0, 0, 0, self.timestamp)
        return len(scratch)

    def max_row_bytes(self) -> int:
        """The largest key + value + header section of any row."""
        return int(self.cols.max_row_bytes())

    def append_to(self, builder: RecordBatchBuilder, start: int, stop: int) -> int:
        """Append positions ``start:stop`` to an open batch until one does not fit; returns
        how many were taken (what ``RecordBatchBuilder.append_many`` does for lists)."""
        buf = builder._target  # a sealed batch's target raises on len()
        len(buf)
        if start >= stop:
            return 0
        base = builder.base_timestamp
        if base is None:
            base = builder.base_timestamp = self.timestamp_of(self.row(start))
        taken, max_ts, largest, full = append_columns(
            buf, self.cols, start, stop, builder._limit, base, builder.record_count,
            self.timestamp)
        if taken:
            builder.record_count += taken
            builder.max_timestamp = max(builder.max_timestamp, max_ts)
            builder.max_record_size = max(builder.max_record_size, largest)
        if full:
            builder.full = True
        return taken
