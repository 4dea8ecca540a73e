# Included by _speedups.pyx (one extension module, its source in files of one job each).
# -- send()'s append into the open batch (aiokprod.producer.batch.append_open's twin) ----------

from cpython.list cimport PyList_GET_SIZE
from cpython.object cimport PyObject_GetAttr, PyObject_SetAttr

# attribute names, interned once: the builder and the batch are Python objects with slots
cdef str _SEALED = "sealed"
cdef str _DELIVERIES = "deliveries"
cdef str _COVERED = "covered_slots"
cdef str _BUILDER = "builder"
cdef str _TS_BASE = "ts_base"
cdef str _TARGET = "_target"
cdef str _COUNT = "record_count"
cdef str _BASE_TS = "base_timestamp"
cdef str _LIMIT = "_limit"
cdef str _FULL = "full"
cdef str _MAX_SIZE = "max_record_size"
cdef str _MAX_TS = "max_timestamp"


def append_open(object batch, object timestamp, object key, object value,
                object create_future):
    """One record without headers into ``batch``, the partition's open batch, in one call.

    What ``RecordAccumulator.try_append`` and ``RecordBatchBuilder.try_append`` do for the
    common record, without the two Python frames: the same bytes, the same builder fields, the
    same five delivery slots (see the pure-Python twin for the rules). Returns the record's
    future, or None when the batch cannot take it this way (sealed, its charged bookkeeping
    used up, or full: then ``builder.full`` is set and nothing is written); the caller then
    takes the general path.
    """
    if PyObject_GetAttr(batch, _SEALED) is not None:
        return None
    cdef list deliveries = PyObject_GetAttr(batch, _DELIVERIES)
    if PyList_GET_SIZE(deliveries) >= <Py_ssize_t>PyObject_GetAttr(batch, _COVERED):
        return None
    builder = PyObject_GetAttr(batch, _BUILDER)
    target = PyObject_GetAttr(builder, _TARGET)
    if type(target) is not bytearray:
        return None  # sealed meanwhile: the general path says so
    cdef bytearray buf = <bytearray>target
    cdef int64_t ts = _as_int64(timestamp)
    base = PyObject_GetAttr(builder, _BASE_TS)
    if base is None:
        PyObject_SetAttr(builder, _BASE_TS, timestamp)
        base = timestamp
    cdef int64_t count = <int64_t>PyObject_GetAttr(builder, _COUNT)
    cdef Py_ssize_t mark = PyByteArray_GET_SIZE(buf)
    cdef Py_ssize_t size = _append_record(buf, ts - _as_int64(base), count, key, value, None)
    cdef Py_ssize_t end = mark + size
    cdef Py_ssize_t limit = <Py_ssize_t>PyObject_GetAttr(builder, _LIMIT)
    if end > limit and count:
        PyByteArray_Resize(buf, mark)
        PyObject_SetAttr(builder, _FULL, True)
        return None
    PyObject_SetAttr(builder, _COUNT, count + 1)
    if end + size > limit:
        PyObject_SetAttr(builder, _FULL, True)
    if size > <Py_ssize_t>PyObject_GetAttr(builder, _MAX_SIZE):
        PyObject_SetAttr(builder, _MAX_SIZE, size)
    if ts > <int64_t>PyObject_GetAttr(builder, _MAX_TS):
        PyObject_SetAttr(builder, _MAX_TS, timestamp)
    future = create_future()
    deliveries.append(future)
    deliveries.append(count)
    deliveries.append(timestamp - PyObject_GetAttr(batch, _TS_BASE))
    deliveries.append(-1 if key is None else PyBytes_GET_SIZE(key))
    deliveries.append(-1 if value is None else PyBytes_GET_SIZE(value))
    return future
