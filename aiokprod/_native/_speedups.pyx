# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The per-record hot path in C (Cython): murmur2, one record's encoding, batch completion;
the append into an open batch (``_open_batch.pxi``), send_many's keys by partition
(``_keys.pxi``) and its runs (``_bulk.pxi``), the Arrow encoder (``_columnar.pxi``), flat Avro records (``_avro.pxi``)
and a Produce request's body and its common answer (``_produce.pxi``).

Each function here has a pure-Python twin with the same behaviour where it is used
(``aiokprod.producer.batching.partitioner``, ``aiokprod.records.builder``, ``aiokprod.producer.batch``);
``aiokprod._native`` picks one set at import time. The tests run the whole suite both ways
(``AIOKPROD_NO_EXTENSIONS=1`` selects Python) and compare the twins on random input.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef extern from "Python.h":
    ctypedef struct PyObject
    void PyObject_GC_UnTrack(void *op)
    Py_ssize_t Py_REFCNT(PyObject* op)
    PyObject* PyList_GET_ITEM(object list, Py_ssize_t i)

from asyncio import Future as _AioFuture

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


cdef Py_ssize_t _append_record(bytearray buf, int64_t delta, int64_t count, object key,
                               object value, object headers) except -1:
    """``append_record``'s body, for the module's own callers (no Python call between)."""
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


def append_record(bytearray buf, object timestamp_delta, object offset_delta, object key,
                  object value, object headers):
    """Append one v2 record (length prefix included) to ``buf``; returns its size in bytes.

    ``headers`` is the encoded header section (count and entries) or None for no headers.
    ``key``/``value`` are bytes or None (null). The layout is Kafka's DefaultRecord.
    """
    return _append_record(buf, _as_int64(timestamp_delta), _as_int64(offset_delta), key, value,
                          headers)


def complete_deliveries(list deliveries, str topic, object partition, object base_offset,
                        object log_append_time, object ts_base, object on_ack,
                        object metadata_type, object call_interceptor):
    """Resolve a completed batch's futures (``ProducerBatch.complete``'s loop).

    ``deliveries`` holds five slots per record: future, offset delta, timestamp - ``ts_base``,
    key size, value size. Offsets follow ``base_offset`` (-1 when unknown); the timestamp is
    the log append time when one is given (>= 0), else the record's create time. A future no
    one else holds and nothing waits on is dropped instead of resolved (below): the twin
    resolves it, which no caller can tell apart.
    """
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t n = len(deliveries)
    cdef bint known = base_offset >= 0
    cdef bint append_time = log_append_time >= 0
    cdef long long base = base_offset
    cdef long long tsb = ts_base
    cdef PyObject* item
    new = tuple.__new__
    while i + 4 < n:
        item = PyList_GET_ITEM(deliveries, i)
        if Py_REFCNT(item) == 1 and on_ack is None and type(<object>item) is _AioFuture and \
                (<object>item)._callbacks is None:
            # only this list holds the future and nothing is to be called when it is done (a
            # fire-and-forget send): no one can ever see its result, so none is made. It is
            # dropped now, as it would be with the batch, and dies pending, as an unawaited
            # asyncio future may (a weak reference then sees it gone, never pending)
            deliveries[i] = None
            i += 5
            continue
        future = <object>item
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


include "_open_batch.pxi"
include "_keys.pxi"
include "_bulk.pxi"
include "_columnar.pxi"
include "_avro.pxi"
include "_produce.pxi"
