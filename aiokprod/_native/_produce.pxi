# Included by _speedups.pyx: a Produce request's body straight from the drained batches.

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int32_t, uint16_t


cdef inline Py_ssize_t _put_uvarint(unsigned char* buf, Py_ssize_t pos, uint64_t value) noexcept:
    while value >= 0x80:
        buf[pos] = <unsigned char>((value & 0x7F) | 0x80)
        value >>= 7
        pos += 1
    buf[pos] = <unsigned char>value
    return pos + 1


cdef inline Py_ssize_t _put_i32(unsigned char* buf, Py_ssize_t pos, int32_t value) noexcept:
    cdef uint32_t bits = <uint32_t>value
    buf[pos] = <unsigned char>(bits >> 24)
    buf[pos + 1] = <unsigned char>(bits >> 16)
    buf[pos + 2] = <unsigned char>(bits >> 8)
    buf[pos + 3] = <unsigned char>bits
    return pos + 4


def write_produce(list out, int version, object transactional_id, int16_t acks,
                  int32_t timeout_ms, list topics):
    """Append Produce v9-v14's body to ``out`` as chunks, each records buffer appended
    uncopied: the bytes the generated encoder writes for the same request (its twin is
    ``aiokprod.protocol.produce_body.write_generated``). ``topics`` holds ``(topic,
    [(partition, records), ...])`` with the topic's name up to v12 and its ``uuid.UUID`` from
    v13. The numbers between two variable-length pieces go out as one small chunk, where the
    generated encoder builds three objects and a chunk per field."""
    if version < 9 or version > 14:
        raise ValueError(f"write_produce: Produce v{version} is not a flexible version 9-14")
    cdef unsigned char buf[64]
    cdef Py_ssize_t n = 0
    cdef bint by_id = version >= 13
    cdef bytes piece
    cdef list parts
    cdef int32_t index
    if transactional_id is None:
        buf[0] = 0
        n = 1
    else:
        piece = (<str?>transactional_id).encode("utf-8")
        n = _put_uvarint(buf, 0, <uint64_t>len(piece) + 1)
        out.append(PyBytes_FromStringAndSize(<char*>buf, n))
        out.append(piece)
        n = 0
    buf[n] = <unsigned char>((<uint16_t>acks) >> 8)
    buf[n + 1] = <unsigned char>acks
    n = _put_i32(buf, n + 2, timeout_ms)
    n = _put_uvarint(buf, n, <uint64_t>len(topics) + 1)
    for topic, parts in topics:
        if n > 24:  # room for the topic's fixed part (at most 22 bytes)
            out.append(PyBytes_FromStringAndSize(<char*>buf, n))
            n = 0
        if by_id:
            piece = topic.bytes
            if len(piece) != 16:
                raise ValueError(f"write_produce: topic id {topic!r} is not 16 bytes")
            memcpy(&buf[n], PyBytes_AS_STRING(piece), 16)
            n += 16
        else:
            piece = (<str?>topic).encode("utf-8")
            n = _put_uvarint(buf, n, <uint64_t>len(piece) + 1)
            out.append(PyBytes_FromStringAndSize(<char*>buf, n))
            out.append(piece)
            n = 0
        n = _put_uvarint(buf, n, <uint64_t>len(parts) + 1)
        for index, records in parts:
            if n > 24:  # room for a partition's fixed part (at most 10 bytes) and two tags
                out.append(PyBytes_FromStringAndSize(<char*>buf, n))
                n = 0
            n = _put_i32(buf, n, index)
            if records is None:
                buf[n] = 0
                n += 1
            else:
                n = _put_uvarint(buf, n, <uint64_t>len(records) + 1)
                out.append(PyBytes_FromStringAndSize(<char*>buf, n))
                out.append(records)
                n = 0
            buf[n] = 0  # the partition's tagged fields: none
            n += 1
        buf[n] = 0  # the topic's tagged fields: none
        n += 1
    buf[n] = 0  # the request's tagged fields: none
    out.append(PyBytes_FromStringAndSize(<char*>buf, n + 1))
