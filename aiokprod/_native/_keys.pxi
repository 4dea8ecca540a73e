# Included by _speedups.pyx (one extension module, its source in files of one job each).
# -- send_many()'s keyed records by partition (aiokprod.producer.murmur2.group_keys_py's twin) --

from libc.stdlib cimport free, malloc


def group_keys(list keys, list values, Py_ssize_t num_partitions):
    """The records of a keyed ``send_many`` by partition, by Kafka's rule for keys
    (murmur2 of the key, positive, modulo ``num_partitions``), in one C pass.

    Returns ``(order, runs, ordered_keys, ordered_values)``: the record indices grouped by
    partition, partitions in the order of their first record and records in call order within
    each; one ``(partition, start, stop)`` run over ``order`` per partition; the keys and
    values in that order. None when a key is None or not ``bytes`` (the caller asks the
    partitioner record by record then).
    """
    cdef Py_ssize_t n = len(keys)
    cdef Py_ssize_t i, p, pos, at
    if len(values) != n:
        raise ValueError(f"{n} keys for {len(values)} values")
    if num_partitions <= 0:
        raise ValueError(f"no partitions to choose from ({num_partitions})")
    for i in range(n):
        if type(keys[i]) is not bytes:
            return None
    cdef Py_ssize_t* part = <Py_ssize_t*>malloc((n + 3 * num_partitions + 1)
                                                 * sizeof(Py_ssize_t))
    if part == NULL:
        raise MemoryError()
    cdef Py_ssize_t* count = part + n
    cdef Py_ssize_t* first_seen = count + num_partitions  # partitions, in order of first record
    cdef Py_ssize_t* fill = first_seen + num_partitions
    cdef Py_ssize_t seen = 0
    cdef object key
    try:
        for p in range(num_partitions):
            count[p] = 0
        for i in range(n):
            key = keys[i]
            p = (_murmur(<const uint8_t*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
                 & 0x7FFFFFFF) % num_partitions
            part[i] = p
            if count[p] == 0:
                first_seen[seen] = p
                seen += 1
            count[p] += 1
        runs = []
        pos = 0
        for i in range(seen):
            p = first_seen[i]
            fill[p] = pos
            runs.append((p, pos, pos + count[p]))
            pos += count[p]
        order = [0] * n
        ordered_keys = [None] * n
        ordered_values = [None] * n
        for i in range(n):
            p = part[i]
            at = fill[p]
            order[at] = i
            ordered_keys[at] = keys[i]
            ordered_values[at] = values[i]
            fill[p] = at + 1
        return order, runs, ordered_keys, ordered_values
    finally:
        free(part)
