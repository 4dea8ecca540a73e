# Included by _speedups.pyx (one extension module, its source in files of one job each).
# -- records straight from Arrow buffers (aiokprod.records.columnar's twin) --------------------

from libc.stdint cimport int32_t, INT64_MIN
from libc.stdlib cimport free, malloc

cdef const uint8_t* _EMPTY = <const uint8_t*>b""


cdef struct _Bin:
    # one Arrow binary/string column: row r is data[offs[r + off] : offs[r + off + 1]], null when
    # its validity bit is 0 (valid == NULL: no nulls); o32 or o64 is set (large_binary: o64)
    const uint8_t* data
    const int32_t* o32
    const int64_t* o64
    const uint8_t* valid
    Py_ssize_t off


cdef inline Py_ssize_t _bin_get(const _Bin* c, Py_ssize_t row,
                                const uint8_t** ptr) noexcept nogil:
    """Row ``row``'s length (-1 for null), its bytes at ``ptr[0]``."""
    cdef Py_ssize_t i = row + c.off
    cdef int64_t s, e
    if c.valid != NULL and not ((c.valid[i >> 3] >> (i & 7)) & 1):
        return -1
    if c.o32 != NULL:
        s = c.o32[i]
        e = c.o32[i + 1]
    else:
        s = c.o64[i]
        e = c.o64[i + 1]
    ptr[0] = c.data + s
    return <Py_ssize_t>(e - s)


cdef const uint8_t* _pointer(object buffer, list refs, Py_ssize_t need) except? NULL:
    """The first byte of a buffer-protocol object (kept alive in ``refs``), at least ``need``
    bytes long; None stands for an empty buffer."""
    cdef const uint8_t[::1] view
    if buffer is None:
        if need > 0:
            raise ValueError(f"a buffer of {need} bytes is missing")
        return _EMPTY
    view = memoryview(buffer).cast("B")
    if view.shape[0] < need:
        raise ValueError(f"buffer of {view.shape[0]} bytes, {need} needed")
    refs.append(view)
    if view.shape[0] == 0:
        return _EMPTY
    return &view[0]


cdef int _bin_init(_Bin* c, object spec, Py_ssize_t rows, list refs) except -1:
    """Point ``c`` at a column spec: (offsets, data, validity or None, offset, large) covering
    ``rows`` rows; checks that every offset is in order and inside the data buffer."""
    offsets, data, validity, offset, large = spec
    cdef Py_ssize_t off = offset
    cdef Py_ssize_t width = 8 if large else 4
    cdef Py_ssize_t i
    cdef int64_t prev, cur, size
    if off < 0 or rows < 0:
        raise ValueError("negative offset or length")
    c.off = off
    c.valid = NULL
    if validity is not None:
        c.valid = _pointer(validity, refs, (off + rows + 7) >> 3)
    cdef const uint8_t* o = _pointer(offsets, refs, (off + rows + 1) * width)
    c.o32 = NULL
    c.o64 = NULL
    if large:
        c.o64 = <const int64_t*>o
    else:
        c.o32 = <const int32_t*>o
    size = 0 if data is None else memoryview(data).nbytes
    c.data = _pointer(data, refs, 0)
    prev = c.o64[off] if large else c.o32[off]
    if prev < 0:
        raise ValueError(f"offset {prev} is negative")
    for i in range(off + 1, off + rows + 1):
        cur = c.o64[i] if large else c.o32[i]
        if cur < prev:
            raise ValueError(f"offsets decrease at {i} ({prev} then {cur})")
        prev = cur
    if prev > size:
        raise ValueError(f"offset {prev} is past the {size}-byte data buffer")
    return 0


cdef class Columns:
    """Arrow buffers prepared for ``append_columns`` (see aiokprod.records.columnar)."""

    cdef _Bin values
    cdef _Bin keys
    cdef bint has_keys
    cdef const int64_t* ts
    cdef const int32_t* hoffs
    cdef const uint8_t* hvalid
    cdef Py_ssize_t hoff
    cdef _Bin hkeys
    cdef _Bin hvals
    cdef bint has_headers
    cdef const int64_t* order
    cdef list refs
    cdef readonly Py_ssize_t length

    def __init__(self, Py_ssize_t length, values, keys, timestamps, headers):
        cdef Py_ssize_t i, first, last, toff
        self.refs = []
        self.length = length
        self.order = NULL
        _bin_init(&self.values, values, length, self.refs)
        self.has_keys = keys is not None
        if keys is not None:
            _bin_init(&self.keys, keys, length, self.refs)
        self.ts = NULL
        if timestamps is not None:
            buffer, toff = timestamps
            self.ts = (<const int64_t*>_pointer(buffer, self.refs, (toff + length) * 8)) + toff
            for i in range(length):
                if self.ts[i] < 0:
                    raise ValueError(f"timestamps_ms[{i}] is {self.ts[i]}; must be >= 0")
        self.has_headers = headers is not None
        if headers is not None:
            list_offsets, list_validity, list_offset, header_keys, header_values = headers
            self.hoff = list_offset
            self.hvalid = NULL
            if list_validity is not None:
                self.hvalid = _pointer(list_validity, self.refs, (self.hoff + length + 7) >> 3)
            self.hoffs = <const int32_t*>_pointer(list_offsets, self.refs,
                                                  (self.hoff + length + 1) * 4)
            first = self.hoffs[self.hoff]
            last = self.hoffs[self.hoff + length]
            for i in range(self.hoff + 1, self.hoff + length + 1):
                if self.hoffs[i] < self.hoffs[i - 1]:
                    raise ValueError(f"header list offsets decrease at {i}")
            if first < 0:
                raise ValueError("negative header list offset")
            # the entries' columns are checked over every entry the rows reach
            _bin_init(&self.hkeys, header_keys, last, self.refs)
            _bin_init(&self.hvals, header_values, last, self.refs)

    def max_row_bytes(self):
        """The largest key + value + header section of any row (the record-size check)."""
        cdef Py_ssize_t row, klen, vlen, size, largest = 0
        cdef const uint8_t* p
        with nogil:
            for row in range(self.length):
                klen = _bin_get(&self.keys, row, &p) if self.has_keys else 0
                vlen = _bin_get(&self.values, row, &p)
                size = (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0)
                size += _headers_size(self, row) if self.has_headers else 1
                if size > largest:
                    largest = size
        return largest

    def set_order(self, order):
        """Rows are taken in this order (an int64 buffer of ``length`` row numbers)."""
        cdef const int64_t* o = <const int64_t*>_pointer(order, self.refs, self.length * 8)
        cdef Py_ssize_t i
        for i in range(self.length):
            if not 0 <= o[i] < self.length:
                raise ValueError(f"order[{i}] = {o[i]} is not a row")
        self.order = o


cdef inline Py_ssize_t _headers_size(Columns c, Py_ssize_t row) noexcept nogil:
    cdef Py_ssize_t i = row + c.hoff
    cdef Py_ssize_t j, s, e, klen, vlen, size
    cdef const uint8_t* p
    if c.hvalid != NULL and not ((c.hvalid[i >> 3] >> (i & 7)) & 1):
        return 1
    s = c.hoffs[i]
    e = c.hoffs[i + 1]
    if s == e:
        return 1
    size = _zigzag_size(e - s)
    for j in range(s, e):
        klen = _bin_get(&c.hkeys, j, &p)
        if klen < 0:
            klen = 0  # a header key is never null (Columns' callers refuse null keys)
        vlen = _bin_get(&c.hvals, j, &p)
        size += _zigzag_size(klen) + klen + _zigzag_size(vlen) + (vlen if vlen > 0 else 0)
    return size


cdef inline Py_ssize_t _headers_into(Columns c, Py_ssize_t row, char* out) noexcept nogil:
    cdef Py_ssize_t i = row + c.hoff
    cdef Py_ssize_t j, s, e, klen, vlen, pos
    cdef const uint8_t* p
    if c.hvalid != NULL and not ((c.hvalid[i >> 3] >> (i & 7)) & 1):
        out[0] = 0
        return 1
    s = c.hoffs[i]
    e = c.hoffs[i + 1]
    if s == e:
        out[0] = 0
        return 1
    pos = _zigzag_into(out, e - s)
    for j in range(s, e):
        klen = _bin_get(&c.hkeys, j, &p)
        if klen < 0:
            klen = 0
        pos += _field_into(out + pos, p, klen)
        vlen = _bin_get(&c.hvals, j, &p)
        pos += _field_into(out + pos, p, vlen)
    return pos


def append_columns(bytearray buf, Columns cols, Py_ssize_t start, Py_ssize_t stop,
                   Py_ssize_t limit, int64_t base_timestamp, int64_t count,
                   int64_t timestamp):
    """Append rows ``start:stop`` (through the order, if set) to an open batch's ``buf``.

    A row is taken while ``buf`` stays within ``limit`` bytes, or when it is the batch's first
    record (``count`` = records already in the batch). Timestamps are the rows' own, or
    ``timestamp`` for every row. Returns (rows taken, largest timestamp, largest record, full):
    ``full`` when a row was refused or another like the last would not fit.
    """
    cdef Py_ssize_t used = PyByteArray_GET_SIZE(buf)
    cdef Py_ssize_t total = 0, n = 0, pos, row, klen, vlen, hlen, body, rec, largest = 0, w
    cdef Py_ssize_t span = stop - start
    cdef int64_t ts, max_ts = INT64_MIN
    cdef const uint8_t* kp = NULL
    cdef const uint8_t* vp = NULL
    cdef bint full = False
    cdef char* out
    if start < 0 or stop > cols.length or start > stop:
        raise ValueError(f"rows {start}:{stop} outside 0:{cols.length}")
    # the rows' sizes first: the buffer then grows once, and nothing is written to roll back
    cdef Py_ssize_t* sizes = <Py_ssize_t*>malloc((span if span > 0 else 1) * sizeof(Py_ssize_t))
    if sizes == NULL:
        raise MemoryError()
    try:
        with nogil:
            for pos in range(start, stop):
                row = cols.order[pos] if cols.order != NULL else pos
                ts = cols.ts[row] if cols.ts != NULL else timestamp
                klen = _bin_get(&cols.keys, row, &kp) if cols.has_keys else -1
                vlen = _bin_get(&cols.values, row, &vp)
                hlen = _headers_size(cols, row) if cols.has_headers else 1
                body = (1 + _zigzag_size(ts - base_timestamp) + _zigzag_size(count + n)
                        + _zigzag_size(klen) + (klen if klen > 0 else 0)
                        + _zigzag_size(vlen) + (vlen if vlen > 0 else 0) + hlen)
                rec = _zigzag_size(body) + body
                if used + total + rec > limit and count + n > 0:
                    full = True
                    break
                sizes[n] = body
                total += rec
                n += 1
                if rec > largest:
                    largest = rec
                if ts > max_ts:
                    max_ts = ts
            if n and used + total + rec > limit:
                full = True  # another record like the last one would not fit: send it now
        PyByteArray_Resize(buf, used + total)
        out = PyByteArray_AS_STRING(buf) + used
        with nogil:
            w = 0
            for pos in range(start, start + n):
                row = cols.order[pos] if cols.order != NULL else pos
                ts = cols.ts[row] if cols.ts != NULL else timestamp
                w += _zigzag_into(out + w, sizes[pos - start])
                out[w] = 0
                w += 1
                w += _zigzag_into(out + w, ts - base_timestamp)
                w += _zigzag_into(out + w, count + (pos - start))
                klen = _bin_get(&cols.keys, row, &kp) if cols.has_keys else -1
                w += _field_into(out + w, kp, klen)
                vlen = _bin_get(&cols.values, row, &vp)
                w += _field_into(out + w, vp, vlen)
                if cols.has_headers:
                    w += _headers_into(cols, row, out + w)
                else:
                    out[w] = 0
                    w += 1
    finally:
        free(sizes)
    return n, max_ts, largest, full


def partition_rows(Columns cols, object order, int num_partitions, int null_partition):
    """Each keyed row's partition, Java's way (``(murmur2(key) & 0x7fffffff) % n``), as a
    stable grouping: fills ``order`` (an int64 buffer of ``length`` slots) with the row numbers
    of partition 0, then 1, ..., then the null-key rows; returns the group sizes (the last one
    the null-key rows). Null-key rows join ``null_partition``'s group instead when it is a
    partition (>= 0). The rows are taken in this order from then on."""
    cdef Py_ssize_t n = cols.length, row, i
    cdef int64_t[::1] out = memoryview(order).cast("B").cast("q")
    cdef const uint8_t* p
    cdef Py_ssize_t klen
    cdef int32_t part
    if not cols.has_keys:
        raise ValueError("partition_rows needs a key column")
    if num_partitions <= 0:
        raise ValueError("no partitions to choose from")
    if null_partition >= num_partitions:
        raise ValueError(f"null_partition {null_partition} is not a partition")
    if null_partition < 0:
        null_partition = num_partitions
    if out.shape[0] < n:
        raise ValueError(f"order has {out.shape[0]} slots for {n} rows")
    cdef int32_t* parts = <int32_t*>malloc((n if n > 0 else 1) * sizeof(int32_t))
    cdef Py_ssize_t* starts = <Py_ssize_t*>malloc((num_partitions + 2) * sizeof(Py_ssize_t))
    if parts == NULL or starts == NULL:
        free(parts)
        free(starts)
        raise MemoryError()
    try:
        with nogil:
            for i in range(num_partitions + 2):
                starts[i] = 0
            for row in range(n):
                klen = _bin_get(&cols.keys, row, &p)
                if klen < 0:
                    part = null_partition
                else:
                    part = <int32_t>((_murmur(p if klen else _EMPTY, klen) & 0x7FFFFFFF)
                                     % <uint32_t>num_partitions)
                parts[row] = part
                starts[part + 1] += 1
        counts = [starts[i + 1] for i in range(num_partitions + 1)]
        with nogil:
            for i in range(1, num_partitions + 2):
                starts[i] += starts[i - 1]
            for row in range(n):
                out[starts[parts[row]]] = row
                starts[parts[row]] += 1
    finally:
        free(parts)
        free(starts)
    cols.set_order(order)
    return counts
