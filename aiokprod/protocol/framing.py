"""Request frames and response headers: the bytes around a message body.

A request on the wire is ``int32 size | request header | body``; a response is
``int32 size | response header | body``. The header version depends on the API and version
(``header_version`` on every generated class), so framing lives here, once, instead of in
every caller. Correlation ids are chosen by the connection; this module only writes and reads
them.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from aiokprod.errors import ProtocolError
from aiokprod.protocol._generated import RequestHeader
from aiokprod.protocol.messages import KafkaRequest, KafkaResponse
from aiokprod.protocol.primitives import INT32, Chunk, read_unknown_tags, truncated

__all__ = [
    "decode_response",
    "decode_response_header",
    "encode_request",
    "encode_request_pieces",
]


def encode_request(
    request: KafkaRequest[Any], version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """The complete frame for ``request``: size prefix, request header (v1 or v2), body.

    The body's chunks (including pre-built records) are joined once, so each records buffer
    is copied exactly one time, into the returned frame. Of the header only the api key,
    version and correlation id change from one request to the next: the rest is encoded once
    per client id (``_header_tail``), not for every request.
    """
    return b"".join(_chunks(request, version, correlation_id, client_id))


#: A chunk of a frame at least this long (a batch's records) is handed to the transport as it
#: is, not copied into a joined frame first; the rest (a few bytes each) are joined around it.
WRITE_APART_BYTES = 65_536


def encode_request_pieces(
    request: KafkaRequest[Any], version: int, correlation_id: int, client_id: str | None
) -> list[Chunk]:
    """``encode_request``'s frame as pieces for the transport, in order: the records buffers
    of ``WRITE_APART_BYTES`` or more as they are, the bytes between them joined.

    A frame of big batches (the PySpark sink's 1 MiB requests of 256 KiB batches) was copied
    whole into a fresh allocation before the socket copied it again; in pieces, what the
    socket takes at once is copied only by the kernel. Small requests stay one piece, one write.
    """
    out = _chunks(request, version, correlation_id, client_id)
    if all(len(c) < WRITE_APART_BYTES for c in out):
        return [b"".join(out)]
    pieces: list[Chunk] = []
    small: list[Chunk] = []
    for chunk in out:
        if len(chunk) >= WRITE_APART_BYTES:
            if small:
                pieces.append(b"".join(small))
                small = []
            pieces.append(chunk)
        else:
            small.append(chunk)
    if small:
        pieces.append(b"".join(small))
    return pieces


def _chunks(request: KafkaRequest[Any], version: int, correlation_id: int,
            client_id: str | None) -> list[Chunk]:
    out: list[Chunk] = [b"", _header_tail(client_id, request.header_version(version))]
    request.write(out, version)
    out[0] = _SIZE_AND_HEADER_START.pack(
        _HEADER_START_SIZE + sum(map(len, out)), request.API_KEY, version, correlation_id)
    return out


# size prefix, then the header's api key, api version and correlation id
_SIZE_AND_HEADER_START = struct.Struct(">ihhi")
_HEADER_START_SIZE = 8


@functools.lru_cache(maxsize=64)
def _header_tail(client_id: str | None, header_version: int) -> bytes:
    """The request header's bytes after the correlation id (client id, tagged fields), as the
    generated encoder writes them."""
    out: list[Chunk] = []
    RequestHeader(request_api_key=0, request_api_version=0, correlation_id=0,
                  client_id=client_id).write(out, header_version)
    return b"".join(out)[_HEADER_START_SIZE:]


def decode_response_header(frame: memoryview | bytes, header_version: int) -> tuple[int, int]:
    """Read a response header from ``frame`` (the response without its 4-byte size prefix).

    Returns ``(correlation_id, offset of the body)``. Header v1 carries a tagged-field
    section, which is skipped (no response-header tags are defined yet).
    """
    end = len(frame)
    if header_version not in (0, 1):
        raise ValueError(f"unknown response header version {header_version}")
    if end < 4:
        raise truncated("ResponseHeader.correlation_id", 4, end)
    (correlation_id,) = INT32.unpack_from(frame, 0)
    if header_version == 0:
        return correlation_id, 4
    _, pos = read_unknown_tags(frame, 4, end, "ResponseHeader tagged fields")
    return correlation_id, pos


def decode_response(
    frame: memoryview | bytes, response_type: KafkaResponse, version: int
) -> tuple[int, Any]:
    """Decode a whole response frame (without size prefix) into ``(correlation_id, body)``."""
    correlation_id, offset = decode_response_header(frame, response_type.header_version(version))
    view = memoryview(frame)[offset:]
    try:
        return correlation_id, response_type.decode(view, version)
    except ProtocolError as exc:
        raise ProtocolError(f"{exc} (correlation id {correlation_id})") from exc
