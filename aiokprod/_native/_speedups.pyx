# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The per-record hot path in C (Cython): murmur2, one record's encoding, batch completion.

Each function here has a pure-Python twin with the same behaviour where it is used
(``aiokprod.producer.partitioner``, ``aiokprod.records.builder``, ``aiokprod.producer.batch``);
``aiokprod._native`` picks one set at import time. The tests run the whole suite both ways
(``AIOKPROD_NO_EXTENSIONS=1`` selects Python) and compare the twins on random input.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void *op)

cdef uint32_t _M = 0x5BD1E995
cdef uint32_t _SEED = 0x9747B28C


cdef inline uint32_t _murmur(const uint8_t* data, Py_ssize_t length) noexcept nogil:
    cdef uint32_t h = _SEED ^ <uint32_t>length
    cdef uint32_t k
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t words = length >> 2
    while i < words:
        k = (<uint32_t>data[4 * i] | (<uint32_t>data[4 * i + 1] << 8)
             | (<uint32_t>data[4 * i + 2] << 16) | (<uint32_t>data[4 * i + 3] << 24))
        k *= _M
        k ^= k >> 24
        k *= _M
        h *= _M
        h ^= k
        i += 1
    cdef Py_ssize_t tail = length & 3
    cdef Py_ssize_t base = length - tail
    if tail == 3:
        h ^= <uint32_t>data[base + 2] << 16
    if tail >= 2:
        h ^= <uint32_t>data[base + 1] << 8
    if tail >= 1:
        h ^= <uint32_t>data[base]
        h *= _M
    h ^= h >> 13
    h *= _M
    h ^= h >> 15
    return h


def murmur2_u32(data):
    """MurmurHash2 (32-bit, seed 0x9747b28c) of ``data`` as an unsigned int (Java's bits)."""
    cdef const uint8_t[::1] view
    if type(data) is bytes:
        return _murmur(<const uint8_t*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return _murmur(<const uint8_t*>b"", 0)
    return _murmur(&view[0], view.shape[0])


cdef inline int _zigzag_into(char* out, int64_t value) noexcept nogil:
    """Write ``value``'s zigzag varint at ``out``; returns its length (1-10)."""
    cdef uint64_t z = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int n = 0
    while z > 0x7F:
        out[n] = <char>((z & 0x7F) | 0x80)
        z >>= 7
        n += 1
    out[n] = <char>z
    return n + 1


cdef inline Py_ssize_t _field_into(char* out, const void* data, Py_ssize_t length) noexcept nogil:
    """A record's key, value, header key or header value: its length as a zigzag varint (-1
    for null), then its bytes; returns what it wrote."""
    cdef Py_ssize_t w = _zigzag_into(out, length)
    if length > 0:
        memcpy(out + w, data, length)
        w += length
    return w


cdef inline int _zigzag_size(int64_t value) noexcept nogil:
    cdef uint64_t z = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int n = 1
    while z > 0x7F:
        z >>= 7
        n += 1
    return n


cdef int64_t _as_int64(object value) except? -1:
    try:
        return value
    except OverflowError:
        raise ValueError(f"{value} does not fit in a signed 64-bit varlong") from None


def append_record(bytearray buf, object timestamp_delta, object offset_delta, object key,
                  object value, object headers):
    """Append one v2 record (length prefix included) to ``buf``; returns its size in bytes.

    ``headers`` is the encoded header section (count and entries) or None for no headers.
    ``key``/``value`` are bytes or None (null). The layout is Kafka's DefaultRecord.
    """
    cdef int64_t delta = _as_int64(timestamp_delta)
    cdef int64_t count = _as_int64(offset_delta)
    cdef Py_ssize_t klen = -1, vlen = -1, hlen = 1
    cdef const char* kptr = NULL
    cdef const char* vptr = NULL
    cdef const char* hptr = b"\x00"
    # bytes as they are; other bytes-like objects copied once (a str raises TypeError)
    if key is not None:
        if type(key) is not bytes:
            key = bytes(memoryview(key))
        kptr = PyBytes_AS_STRING(key)
        klen = PyBytes_GET_SIZE(key)
    if value is not None:
        if type(value) is not bytes:
            value = bytes(memoryview(value))
        vptr = PyBytes_AS_STRING(value)
        vlen = PyBytes_GET_SIZE(value)
    if headers is not None:
        if type(headers) is not bytes:
            headers = bytes(memoryview(headers))
        hptr = PyBytes_AS_STRING(headers)
        hlen = PyBytes_GET_SIZE(headers)
    # the body: attributes, timestamp delta, offset delta, key, value, headers
    cdef Py_ssize_t body = (1 + _zigzag_size(delta) + _zigzag_size(count)
                            + _zigzag_size(klen) + (klen if klen > 0 else 0)
                            + _zigzag_size(vlen) + (vlen if vlen > 0 else 0) + hlen)
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(buf)
    cdef Py_ssize_t total = _zigzag_size(body) + body
    PyByteArray_Resize(buf, start + total)
    cdef char* out = PyByteArray_AS_STRING(buf) + start
    cdef Py_ssize_t pos = _zigzag_into(out, body)
    out[pos] = 0
    pos += 1
    pos += _zigzag_into(out + pos, delta)
    pos += _zigzag_into(out + pos, count)
    pos += _field_into(out + pos, kptr, klen)
    pos += _field_into(out + pos, vptr, vlen)
    memcpy(out + pos, hptr, hlen)
    return total


def complete_deliveries(list deliveries, str topic, object partition, object base_offset,
                        object log_append_time, object ts_base, object on_ack,
                        object metadata_type, object call_interceptor):
    """Resolve a completed batch's futures (``ProducerBatch.complete``'s loop).

    ``deliveries`` holds five slots per record: future, offset delta, timestamp - ``ts_base``,
    key size, value size. Offsets follow ``base_offset`` (-1 when unknown); the timestamp is
    the log append time when one is given (>= 0), else the record's create time.
    """
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t n = len(deliveries)
    cdef bint known = base_offset >= 0
    cdef bint append_time = log_append_time >= 0
    cdef long long base = base_offset
    cdef long long tsb = ts_base
    new = tuple.__new__
    while i + 4 < n:
        future = deliveries[i]
        md = new(metadata_type, (
            topic, partition,
            base + <long long>deliveries[i + 1] if known else -1,
            log_append_time if append_time else tsb + <long long>deliveries[i + 2],
            deliveries[i + 3], deliveries[i + 4]))
        # a RecordMetadata holds a str and ints: it cannot be part of a reference cycle, so
        # the cyclic GC need not watch it. CPython untracks plain tuples like this itself, but
        # never a tuple subclass; left tracked, every one a caller keeps (gather's results)
        # is walked by each full collection (measured: 1 µs per confirmed record)
        PyObject_GC_UnTrack(<void *>md)
        if on_ack is not None:
            call_interceptor(on_ack, md, None)
        if not future.done():
            future.set_result(md)
        i += 5


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
