# Included by _speedups.pyx (one extension module, its source in files of one job each).
# -- a flat Avro record (aiokprod.schema_registry.avro_flat's generated encoder's twin) --------

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.float cimport FLT_MAX
from libc.math cimport isfinite

cdef extern from "Python.h":
    PyObject* PyDict_GetItemWithError(object d, object key) except? NULL
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    long long PyLong_AsLongLongAndOverflow(object v, int* overflow) except? -1

# the field kinds, as avro_flat names them
cdef enum:
    _K_NULL = 0
    _K_BOOLEAN = 1
    _K_INT = 2
    _K_LONG = 3
    _K_FLOAT = 4
    _K_DOUBLE = 5
    _K_STRING = 6
    _K_BYTES = 7

_AVRO_KINDS = {"null": _K_NULL, "boolean": _K_BOOLEAN, "int": _K_INT, "long": _K_LONG,
              "float": _K_FLOAT, "double": _K_DOUBLE, "string": _K_STRING, "bytes": _K_BYTES}

import struct as _struct
_pack_f = _struct.Struct("<f").pack
_pack_d = _struct.Struct("<d").pack


cdef struct _Out:
    char* data  # the caller's stack buffer until it is outgrown, then PyMem's
    Py_ssize_t size
    Py_ssize_t cap
    bint on_heap


cdef int _reserve(_Out* out, Py_ssize_t more) except -1:
    cdef Py_ssize_t want = out.size + more
    cdef Py_ssize_t cap
    cdef char* grown
    if want <= out.cap:
        return 0
    cap = out.cap * 2
    if cap < want:
        cap = want
    if out.on_heap:
        grown = <char*>PyMem_Realloc(out.data, cap)
    else:
        grown = <char*>PyMem_Malloc(cap)
        if grown != NULL:
            memcpy(grown, out.data, out.size)
    if grown == NULL:
        raise MemoryError()
    out.data = grown
    out.cap = cap
    out.on_heap = True
    return 0


cdef inline int _put(_Out* out, const char* data, Py_ssize_t n) except -1:
    if out.size + n > out.cap:
        _reserve(out, n)
    memcpy(out.data + out.size, data, n)
    out.size += n
    return 0


cdef inline int _put_varint(_Out* out, uint64_t n) except -1:
    if out.size + 10 > out.cap:
        _reserve(out, 10)
    while n > 0x7F:
        out.data[out.size] = <char>((n & 0x7F) | 0x80)
        out.size += 1
        n >>= 7
    out.data[out.size] = <char>n
    out.size += 1
    return 0


cdef int _put_integer(_Out* out, object value, bint is_int) except -1:
    cdef int overflow = 0
    cdef long long v
    if not isinstance(value, int):
        raise TypeError(f"{value!r} is not an Avro {'int' if is_int else 'long'}")
    v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or (is_int and (v < -2147483648LL or v > 2147483647LL)):
        raise ValueError(f"{value} is out of range for an Avro {'int' if is_int else 'long'}")
    _put_varint(out, (<uint64_t>v << 1) ^ <uint64_t>(v >> 63))
    return 0


cdef int _put_value(_Out* out, int kind, object value) except -1:
    cdef const char* text
    cdef Py_ssize_t n
    cdef double d
    cdef float f
    cdef bytes data
    if kind == _K_STRING:
        if not isinstance(value, str):
            raise TypeError(f"{value!r} is not an Avro string")
        text = PyUnicode_AsUTF8AndSize(value, &n)
        _put_varint(out, <uint64_t>n << 1)
        _put(out, text, n)
    elif kind == _K_LONG or kind == _K_INT:
        _put_integer(out, value, kind == _K_INT)
    elif kind == _K_DOUBLE:
        if type(value) is float:
            d = PyFloat_AS_DOUBLE(value)
            _put(out, <const char*>&d, 8)  # little-endian machines only (x86-64, aarch64)
        else:
            data = _pack_d(value)
            _put(out, PyBytes_AS_STRING(data), 8)
    elif kind == _K_FLOAT:
        if type(value) is float and (not isfinite(PyFloat_AS_DOUBLE(value))
                                     or -FLT_MAX <= PyFloat_AS_DOUBLE(value) <= FLT_MAX):
            f = <float>PyFloat_AS_DOUBLE(value)
            _put(out, <const char*>&f, 4)
        else:  # struct's rounding and its errors, as the pure encoder
            data = _pack_f(value)
            _put(out, PyBytes_AS_STRING(data), 4)
    elif kind == _K_BOOLEAN:
        _put(out, b"\x01" if value else b"\x00", 1)
    elif kind == _K_BYTES:
        data = value if type(value) is bytes else bytes(value)
        n = PyBytes_GET_SIZE(data)
        _put_varint(out, <uint64_t>n << 1)
        _put(out, PyBytes_AS_STRING(data), n)
    elif kind == _K_NULL:
        if value is not None:
            raise TypeError(f"{value!r} is not an Avro null")
    return 0


cdef class FlatAvroEncoder:
    """``encode(record, header=b"")`` for one flat record schema, as avro_flat's generated
    function: ``fields`` is a tuple of (name, kind, union, default) per field, ``kind`` the
    primitive type's name, ``union`` -1 (not a union), 0 (``["null", T]``) or 1 (``[T, "null"]``),
    ``default`` the schema's default or ``missing``."""

    cdef tuple _names
    cdef tuple _defaults
    cdef bytes _kinds
    cdef bytes _unions
    cdef object _missing
    cdef Py_ssize_t _count

    def __init__(self, fields: tuple, missing: object) -> None:
        self._names = tuple(f[0] for f in fields)
        self._kinds = bytes(_AVRO_KINDS[f[1]] for f in fields)
        self._unions = bytes(f[2] + 1 for f in fields)
        self._defaults = tuple(f[3] for f in fields)
        self._missing = missing
        self._count = len(fields)

    def __call__(self, record: object, bytes header not None = b"") -> bytes:
        cdef char stack[512]
        cdef _Out out
        cdef Py_ssize_t i
        cdef int kind, union
        cdef object name, value
        cdef PyObject* found
        cdef const uint8_t* kinds = <const uint8_t*>PyBytes_AS_STRING(self._kinds)
        cdef const uint8_t* unions = <const uint8_t*>PyBytes_AS_STRING(self._unions)
        cdef bint is_dict = type(record) is dict
        out.data = stack
        out.size = 0
        out.cap = sizeof(stack)
        out.on_heap = False
        try:
            _put(&out, PyBytes_AS_STRING(header), PyBytes_GET_SIZE(header))
            for i in range(self._count):
                name = self._names[i]
                if is_dict:
                    found = PyDict_GetItemWithError(record, name)
                    value = self._defaults[i] if found == NULL else <object>found
                else:
                    value = record.get(name, self._defaults[i])
                if value is self._missing:
                    raise ValueError("no value for field " + repr(name))
                kind = kinds[i]
                union = <int>unions[i] - 1
                if union >= 0:
                    if value is None:
                        _put(&out, b"\x00" if union == 0 else b"\x02", 1)
                        continue
                    _put(&out, b"\x02" if union == 0 else b"\x00", 1)
                _put_value(&out, kind, value)
            return PyBytes_FromStringAndSize(out.data, out.size)
        finally:
            if out.on_heap:
                PyMem_Free(out.data)
