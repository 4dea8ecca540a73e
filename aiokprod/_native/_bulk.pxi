# Included by _speedups.pyx (one extension module, its source in files of one job each).
# -- send_many()'s runs: the type scan and the append loop (aiokprod.records.record_encoding's
#    longest_bytes_py and append_values_py are the twins) -------------------------------------


def longest_bytes(list items):
    """The length of the longest item when every item is ``bytes`` or None (None counts 0);
    -1 as soon as one is anything else (the caller converts or refuses, item by item)."""
    cdef Py_ssize_t longest = 0, size
    cdef object item
    for item in items:
        if type(item) is bytes:
            size = PyBytes_GET_SIZE(item)
            if size > longest:
                longest = size
        elif item is not None:
            return -1
    return longest


def append_values(bytearray buf, object delta, object count, object keys, list values,
                  Py_ssize_t start, Py_ssize_t stop, Py_ssize_t limit):
    """``values[start:stop]`` (with ``keys``' items, or no keys) appended as records sharing
    one timestamp delta, numbered from ``count``, until one would pass ``limit`` (a record
    always goes into an empty batch). Returns ``(records taken, largest record's size)``."""
    cdef int64_t d = _as_int64(delta)
    cdef int64_t first = _as_int64(count)
    cdef int64_t c = first
    cdef Py_ssize_t mark = PyByteArray_GET_SIZE(buf)
    cdef Py_ssize_t size, largest = 0, index
    cdef list key_list = None
    if keys is not None:
        key_list = <list?>keys
        if len(key_list) < stop:
            raise ValueError(f"{len(key_list)} keys for a run up to {stop}")
    if len(values) < stop or start < 0 or start > stop:
        raise ValueError(f"run {start}..{stop} outside the {len(values)} values")
    for index in range(start, stop):
        size = _append_record(buf, d, c, None if key_list is None else key_list[index],
                              values[index], None)
        if mark + size > limit and c != 0:
            PyByteArray_Resize(buf, mark)
            break
        mark += size
        c += 1
        if size > largest:
            largest = size
    return c - first, largest
