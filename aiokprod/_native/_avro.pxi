# Included by _speedups.pyx (one extension module, its source in files of one job each).
# Avro's binary format: a flat record from a dict (aiokprod.schema_registry.avro_flat's
# generated encoder's twin), and records a column at a time from Arrow buffers
# (aiokprod.schema_registry.avro_columns' NumPy encoder's twin).
# -- a flat Avro record ------------------------------------------------------------------------

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.float cimport FLT_MAX
from libc.math cimport isfinite
from libc.stdint cimport int8_t, int16_t

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


# -- Avro records a column at a time from Arrow (aiokprod.schema_registry.avro_columns' twin) ----

cdef struct _AvroField:
    int kind            # the kind numbers above
    bint nullable       # the union ["null", T]: its branch byte before the value
    int width           # bytes per value of an int/long column (1, 2, 4 or 8)
    const uint8_t* valid  # the field's validity bits (NULL: no nulls)
    const uint8_t* data   # values (booleans: bits), or the string/bytes data
    _Bin bin            # string/bytes: offsets and data
    Py_ssize_t off      # the field's row offset into its buffers


cdef inline bint _bit(const uint8_t* bits, Py_ssize_t i) noexcept nogil:
    return (bits[i >> 3] >> (i & 7)) & 1


cdef inline int64_t _field_int(const _AvroField* f, Py_ssize_t i) noexcept nogil:
    if f.width == 8:
        return (<const int64_t*>f.data)[i]
    if f.width == 4:
        return (<const int32_t*>f.data)[i]
    if f.width == 2:
        return (<const int16_t*>f.data)[i]
    return (<const int8_t*>f.data)[i]


cdef inline Py_ssize_t _varint_size(uint64_t n) noexcept nogil:
    cdef Py_ssize_t size = 1
    while n > 0x7F:
        n >>= 7
        size += 1
    return size


cdef inline uint8_t* _write_varint(uint8_t* p, uint64_t n) noexcept nogil:
    while n > 0x7F:
        p[0] = <uint8_t>((n & 0x7F) | 0x80)
        p += 1
        n >>= 7
    p[0] = <uint8_t>n
    return p + 1


cdef inline uint64_t _zig(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


def encode_avro_columns(Py_ssize_t rows, object row_validity, Py_ssize_t row_offset,
                        bytes header not None, list fields):
    """Each of ``rows`` struct rows as ``header`` + its Avro record, from the children's Arrow
    buffers: returns (offsets, data, validity, large) for an Arrow binary array, a null struct
    row staying null (a tombstone, zero bytes). ``row_validity``/``row_offset``: the struct's
    own bits (None: no null row). ``fields``: per field (name, kind, nullable, width, validity,
    data, offsets, offset, large) — ``offsets`` and ``large`` for string/bytes only."""
    cdef list refs = []
    cdef Py_ssize_t count = len(fields)
    cdef _AvroField* specs = <_AvroField*>PyMem_Malloc(max(count, 1) * sizeof(_AvroField))
    cdef _AvroField* f
    cdef Py_ssize_t i, j, r, size, total, n, hlen = PyBytes_GET_SIZE(header)
    cdef const uint8_t* rvalid = NULL
    cdef const uint8_t* hdata = <const uint8_t*>PyBytes_AS_STRING(header)
    cdef const uint8_t* text
    cdef int64_t nulls
    cdef uint8_t* p
    cdef bytearray data, offsets_out, validity_out
    cdef int64_t* o64
    cdef int32_t* o32
    cdef uint8_t* vbits
    cdef bint large, any_null = False
    cdef double d
    cdef float fl
    if specs == NULL:
        raise MemoryError()
    try:
        if rows < 0 or row_offset < 0:
            raise ValueError("negative row count or offset")
        if row_validity is not None:
            rvalid = _pointer(row_validity, refs, (row_offset + rows + 7) >> 3)
        for j in range(count):
            name, kind_name, nullable, width, validity, values, offsets, off, large_bin = \
                fields[j]
            f = &specs[j]
            f.kind = _AVRO_KINDS[kind_name]
            f.nullable = nullable
            f.width = width
            f.off = off
            f.valid = NULL
            if validity is not None:
                f.valid = _pointer(validity, refs, (f.off + rows + 7) >> 3)
            if f.kind == _K_STRING or f.kind == _K_BYTES:
                _bin_init(&f.bin, (offsets, values, None, off, large_bin), rows, refs)
                f.data = NULL
            elif f.kind == _K_BOOLEAN:
                f.data = _pointer(values, refs, (off + rows + 7) >> 3)
            elif f.kind == _K_INT or f.kind == _K_LONG or f.kind == _K_DOUBLE \
                    or f.kind == _K_FLOAT:
                if f.kind == _K_DOUBLE:
                    f.width = 8
                elif f.kind == _K_FLOAT:
                    f.width = 4
                elif f.width not in (1, 2, 4, 8):
                    raise ValueError(f"field {name!r}: integers of {f.width} bytes")
                text = _pointer(values, refs, (off + rows) * f.width)
                f.data = text + f.off * f.width
            else:
                raise ValueError(f"field {name!r}: kind {kind_name!r} is not encoded here")
            if f.valid != NULL and not f.nullable:  # nulls in rows that are not null
                nulls = 0
                for r in range(rows):
                    if (rvalid == NULL or _bit(rvalid, row_offset + r)) and \
                            not _bit(f.valid, off + r):
                        nulls += 1
                if nulls:
                    raise ValueError(f"field {name!r} is not nullable but holds {nulls} nulls")
        # the size of every row, then each row written in place
        total = 0
        offsets_out = bytearray((rows + 1) * 8)
        o64 = <int64_t*>PyByteArray_AS_STRING(offsets_out)
        o64[0] = 0
        for r in range(rows):
            if rvalid != NULL and not _bit(rvalid, row_offset + r):
                any_null = True
                o64[r + 1] = total
                continue
            size = hlen
            for j in range(count):
                f = &specs[j]
                if f.valid != NULL and not _bit(f.valid, f.off + r):
                    size += 1  # the null branch
                    continue
                if f.nullable:
                    size += 1
                if f.kind == _K_INT or f.kind == _K_LONG:
                    size += _varint_size(_zig(_field_int(f, r)))
                elif f.kind == _K_STRING or f.kind == _K_BYTES:
                    n = _bin_get(&f.bin, r, &text)
                    size += _varint_size(_zig(n)) + n
                elif f.kind == _K_BOOLEAN:
                    size += 1
                else:
                    size += f.width
            total += size
            o64[r + 1] = total
        data = bytearray(total)
        p = <uint8_t*>PyByteArray_AS_STRING(data)
        for r in range(rows):
            if o64[r + 1] == o64[r]:
                continue
            memcpy(p, hdata, hlen)
            p += hlen
            for j in range(count):
                f = &specs[j]
                if f.valid != NULL and not _bit(f.valid, f.off + r):
                    p[0] = 0
                    p += 1
                    continue
                if f.nullable:
                    p[0] = 2
                    p += 1
                if f.kind == _K_INT or f.kind == _K_LONG:
                    p = _write_varint(p, _zig(_field_int(f, r)))
                elif f.kind == _K_STRING or f.kind == _K_BYTES:
                    n = _bin_get(&f.bin, r, &text)
                    p = _write_varint(p, _zig(n))
                    memcpy(p, text, n)
                    p += n
                elif f.kind == _K_BOOLEAN:
                    p[0] = _bit(f.data, f.off + r)
                    p += 1
                else:
                    memcpy(p, f.data + r * f.width, f.width)
                    p += f.width
        validity_out = None
        if any_null:
            validity_out = bytearray((rows + 7) >> 3)
            vbits = <uint8_t*>PyByteArray_AS_STRING(validity_out)
            for r in range(rows):
                if rvalid == NULL or _bit(rvalid, row_offset + r):
                    vbits[r >> 3] |= <uint8_t>(1 << (r & 7))
        large = total >= 2147483648
        if not large:  # int32 offsets, in place
            o32 = <int32_t*>o64
            for r in range(rows + 1):
                o32[r] = <int32_t>o64[r]
            PyByteArray_Resize(offsets_out, (rows + 1) * 4)
        return offsets_out, data, validity_out, large
    finally:
        PyMem_Free(specs)
