"""The byte stream of one connection cut into response frames, and the requests awaiting them.

Why an ``asyncio.Protocol`` and not streams: the sender pipelines several Produce requests per
connection and the broker answers them strictly in order, so a response is matched to the head
of a FIFO of :class:`Pending` requests as each frame arrives in ``data_received``. That costs
no coroutine, task or timer per response; a reader coroutine awaiting ``readexactly`` twice per
frame would. :class:`WireProtocol` holds only the partial frame and hands whole ones to its
:class:`FrameSink` (the ``BrokerConnection``), which matches, decodes and fails.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any, Protocol, cast

__all__ = ["MAX_FRAME", "FrameSink", "Pending", "WireProtocol"]

_SIZE = struct.Struct(">i")
MAX_FRAME = 512 * 1024 * 1024  # a size beyond this is corruption, not a response


class FrameSink(Protocol):
    """What the wire protocol reports to: the connection."""

    def transport_made(self, transport: asyncio.Transport) -> None: ...

    def frame_received(self, frame: bytes) -> bool:
        """Handle one response frame (without its size); False if the connection failed."""
        ...

    def frame_size_invalid(self, size: int) -> None: ...

    def transport_lost(self, exc: Exception | None) -> None: ...

    def writing_paused(self) -> None: ...

    def writing_resumed(self) -> None: ...


class WireProtocol(asyncio.Protocol):
    """Adapts asyncio's transport callbacks to the connection; holds only the partial frame."""

    def __init__(self, sink: FrameSink) -> None:
        self._sink = sink
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._sink.transport_made(cast(asyncio.Transport, transport))

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        pos = 0
        end = len(buf)
        sink = self._sink
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 4 or size > MAX_FRAME:
                sink.frame_size_invalid(size)
                return
            if end - pos - 4 < size:
                break
            frame = bytes(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            if not sink.frame_received(frame):
                return
        if pos:
            del buf[:pos]

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost reports it

    def connection_lost(self, exc: Exception | None) -> None:
        self._sink.transport_lost(exc)

    def pause_writing(self) -> None:
        self._sink.writing_paused()

    def resume_writing(self) -> None:
        self._sink.writing_resumed()


class Pending:
    """A request written to the socket whose response has not been matched yet."""

    __slots__ = ("api_name", "correlation_id", "deadline", "future", "header_version",
                 "response_type", "sent_at", "version")

    def __init__(
        self,
        correlation_id: int,
        future: asyncio.Future[Any],
        response_type: type[Any],
        version: int,
        header_version: int,
        deadline: float,
        api_name: str,
        sent_at: float,
    ) -> None:
        self.correlation_id = correlation_id  # matched against the response header
        self.future = future  # resolved with the decoded response body
        self.response_type = response_type  # decodes the body
        self.version = version  # the version the request was encoded with
        self.header_version = header_version  # response header layout to expect
        self.deadline = deadline  # monotonic time after which the connection is given up
        self.api_name = api_name  # for error messages
        self.sent_at = sent_at  # latency measurement

