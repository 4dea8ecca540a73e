"""A deliberately tiny, hand-written Kafka client for pinning broker behaviour.

Some facts about the test brokers can only be shown by sending exactly the bytes we choose:
e.g. "Tansu rejects a re-sent idempotent batch with DUPLICATE_SEQUENCE_NUMBER" or "the mock
cluster appends it twice". librdkafka never re-sends on purpose, and our own producer is the
thing under test, so this module speaks the wire format itself. It knows InitProducerId v4
and Produce v3 with one uncompressed RecordBatch — nothing more.
"""

from __future__ import annotations

import socket
import struct
from types import TracebackType

import crc32c

__all__ = ["WireClient", "encode_batch"]

_PRODUCE = 0
_INIT_PRODUCER_ID = 22


def _zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        low = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def encode_batch(
    values: list[bytes], *, producer_id: int, producer_epoch: int, base_sequence: int
) -> bytes:
    """A magic-2 RecordBatch of null-key records with the given idempotence fields."""
    records = bytearray()
    for offset_delta, value in enumerate(values):
        body = (
            b"\x00"  # record attributes
            + _zigzag_varint(0)  # timestamp delta
            + _zigzag_varint(offset_delta)
            + _zigzag_varint(-1)  # null key
            + _zigzag_varint(len(value))
            + value
            + _zigzag_varint(0)  # no headers
        )
        records += _zigzag_varint(len(body)) + body
    timestamp = 1_700_000_000_000
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            0,  # attributes: no compression, CreateTime, not transactional
            len(values) - 1,
            timestamp,
            timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(values),
        )
        + records
    )
    after_length = struct.pack(">ibI", 0, 2, crc32c.crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


class WireClient:
    """One blocking connection to one broker; requests are sent and answered one at a time."""

    def __init__(self, host: str, port: int, *, timeout: float = 5.0) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.settimeout(timeout)
        self._correlation_id = 0

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _recv_exact(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self._sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            data += chunk
        return bytes(data)

    def _request(self, api_key: int, version: int, body: bytes, *, flexible: bool) -> bytes:
        self._correlation_id += 1
        client_id = b"aiokprod-wire"
        header = struct.pack(">hhih", api_key, version, self._correlation_id, len(client_id))
        header += client_id + (b"\x00" if flexible else b"")  # header v2 adds tagged fields
        frame = header + body
        self._sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        payload = self._recv_exact(size)
        (correlation_id,) = struct.unpack_from(">i", payload)
        if correlation_id != self._correlation_id:
            raise ConnectionError(f"correlation id {correlation_id} != {self._correlation_id}")
        # Response header v1 (flexible) has an empty tagged-field section after the id.
        return payload[5:] if flexible else payload[4:]

    def init_producer_id(self) -> tuple[int, int, int]:
        """InitProducerId v4 (non-transactional): (error_code, producer_id, producer_epoch).

        v4 because Tansu answers v0-v2 with UNKNOWN_SERVER_ERROR and producer id -1.
        """
        body = b"\x00" + struct.pack(">iqh", 60_000, -1, -1) + b"\x00"
        response = self._request(_INIT_PRODUCER_ID, 4, body, flexible=True)
        _throttle, error_code, producer_id, epoch = struct.unpack_from(">ihqh", response)
        return error_code, producer_id, epoch

    def produce(
        self,
        topic: str,
        partition: int,
        values: list[bytes],
        *,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
    ) -> tuple[int, int]:
        """Produce v3, acks=all, one batch to one partition: (error_code, base_offset)."""
        batch = encode_batch(
            values,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
        name = topic.encode()
        body = (
            struct.pack(">hhi", -1, -1, 10_000)  # null transactional id, acks=all, timeout
            + struct.pack(">ih", 1, len(name))
            + name
            + struct.pack(">iii", 1, partition, len(batch))
            + batch
        )
        response = self._request(_PRODUCE, 3, body, flexible=False)
        offset = 4  # topics array length
        (name_length,) = struct.unpack_from(">h", response, offset)
        offset += 2 + name_length + 4  # topic name, partitions array length
        _index, error_code, base_offset = struct.unpack_from(">ihq", response, offset)
        return error_code, base_offset
