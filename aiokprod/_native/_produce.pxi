# Included by _speedups.pyx (after _avro.pxi, whose _write_varint it uses): a Produce
# request's body straight from the drained batches, and the common answer read back.

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, uint16_t


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
    cdef uint8_t buf[64]
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
        n = _write_varint(buf, <uint64_t>len(piece) + 1) - buf
        out.append(PyBytes_FromStringAndSize(<char*>buf, n))
        out.append(piece)
        n = 0
    buf[n] = <unsigned char>((<uint16_t>acks) >> 8)
    buf[n + 1] = <unsigned char>acks
    n = _put_i32(buf, n + 2, timeout_ms)
    n = _write_varint(buf + n, <uint64_t>len(topics) + 1) - buf
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
            n = _write_varint(buf + n, <uint64_t>len(piece) + 1) - buf
            out.append(PyBytes_FromStringAndSize(<char*>buf, n))
            out.append(piece)
            n = 0
        n = _write_varint(buf + n, <uint64_t>len(parts) + 1) - buf
        for index, records in parts:
            if n > 24:  # room for a partition's fixed part (at most 10 bytes) and two tags
                out.append(PyBytes_FromStringAndSize(<char*>buf, n))
                n = 0
            n = _put_i32(buf, n, index)
            if records is None:
                buf[n] = 0
                n += 1
            else:
                n = _write_varint(buf + n, <uint64_t>len(records) + 1) - buf
                out.append(PyBytes_FromStringAndSize(<char*>buf, n))
                out.append(records)
                n = 0
            buf[n] = 0  # the partition's tagged fields: none
            n += 1
        buf[n] = 0  # the topic's tagged fields: none
        n += 1
    buf[n] = 0  # the request's tagged fields: none
    out.append(PyBytes_FromStringAndSize(<char*>buf, n + 1))


cdef inline bint _read_uvarint(const unsigned char* data, Py_ssize_t* pos, Py_ssize_t end,
                               uint64_t* value) noexcept:
    """False where the varint runs past ``end`` or beyond 5 bytes (a length, a count)."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char byte
    while pos[0] < end and shift <= 28:
        byte = data[pos[0]]
        pos[0] += 1
        result |= <uint64_t>(byte & 0x7F) << shift
        if not (byte & 0x80):
            value[0] = result
            return True
        shift += 7
    return False


cdef inline int64_t _get_i64(const unsigned char* p) noexcept:
    cdef uint64_t bits = 0
    cdef int i
    for i in range(8):
        bits = (bits << 8) | p[i]
    return <int64_t>bits


cdef inline int32_t _get_i32(const unsigned char* p) noexcept:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
                     | <uint32_t>p[3])


cdef class ProduceAnswerReader:
    """Reads the common Produce answer (v10-v14: every partition answered without record
    errors, error message or tagged fields; no node endpoints) into the generated classes'
    objects, equal to what their decoder builds; None for anything else, which the caller
    then gives to that decoder (``aiokprod.protocol.produce_body.ProduceAnswer``)."""

    cdef object _response, _topic, _partition, _leader, _uuid, _zero_uuid
    cdef dict _ids  # a topic id's 16 bytes → its uuid.UUID (topics are few; bounded anyway)

    def __init__(self, response, topic, partition, leader, uuid_type, zero_uuid):
        self._zero_uuid = zero_uuid  # the generated decoder's topic id of a v10-12 answer
        self._response = response
        self._topic = topic
        self._partition = partition
        self._leader = leader
        self._uuid = uuid_type
        self._ids = {}

    cdef object _topic_id(self, const unsigned char* p):
        key = PyBytes_FromStringAndSize(<const char*>p, 16)
        found = self._ids.get(key)
        if found is None:
            if len(self._ids) >= 4096:
                self._ids.clear()
            found = self._uuid(bytes=key)
            self._ids[key] = found
        return found

    def read(self, data, int version):
        if version < 10 or version > 14:
            return None
        cdef const unsigned char[::1] view = data
        cdef const unsigned char* d = &view[0] if view.shape[0] else NULL
        cdef Py_ssize_t end = view.shape[0]
        cdef Py_ssize_t pos = 0
        cdef uint64_t count, parts, size
        cdef Py_ssize_t t, i
        cdef bint by_id = version >= 13
        cdef list topics, answers
        if not _read_uvarint(d, &pos, end, &count) or count == 0:
            return None  # a null array: the generated decoder says what is wrong
        topics = []
        new = object.__new__
        for t in range(<Py_ssize_t>count - 1):
            topic = new(self._topic)
            if by_id:
                if end - pos < 16:
                    return None
                topic.name = ""
                topic.topic_id = self._topic_id(d + pos)
                pos += 16
            else:
                if not _read_uvarint(d, &pos, end, &size) or size == 0 or \
                        <uint64_t>(end - pos) < size - 1:
                    return None
                topic.topic_id = self._zero_uuid
                try:
                    topic.name = PyUnicode_DecodeUTF8(<const char*>(d + pos), size - 1, NULL)
                except UnicodeDecodeError:
                    return None
                pos += size - 1
            if not _read_uvarint(d, &pos, end, &parts) or parts == 0:
                return None
            answers = []
            for i in range(<Py_ssize_t>parts - 1):
                # index, error code, base offset, log append time, log start offset; then
                # no record errors (1), a null error message (0), no tagged fields (0)
                if end - pos < 33 or d[pos + 30] != 1 or d[pos + 31] != 0 or d[pos + 32] != 0:
                    return None
                answer = new(self._partition)
                answer.index = _get_i32(d + pos)
                answer.error_code = <int16_t>((<uint16_t>d[pos + 4] << 8) | d[pos + 5])
                answer.base_offset = _get_i64(d + pos + 6)
                answer.log_append_time_ms = _get_i64(d + pos + 14)
                answer.log_start_offset = _get_i64(d + pos + 22)
                answer.record_errors = []
                answer.error_message = None
                leader = new(self._leader)
                leader.leader_id = -1
                leader.leader_epoch = -1
                leader.unknown_tagged_fields = {}
                answer.current_leader = leader
                answer.unknown_tagged_fields = {}
                answers.append(answer)
                pos += 33
            if pos >= end or d[pos] != 0:
                return None  # the topic has tagged fields
            pos += 1
            topic.partition_responses = answers
            topic.producer_state_batches_to_retain = 5
            topic.unknown_tagged_fields = {}
            topics.append(topic)
        if end - pos < 5 or d[pos + 4] != 0:
            return None  # throttle time, then tagged fields (node endpoints): not the common case
        response = new(self._response)
        response.responses = topics
        response.throttle_time_ms = _get_i32(d + pos)
        response.node_endpoints = []
        response.unknown_tagged_fields = {}
        return response
