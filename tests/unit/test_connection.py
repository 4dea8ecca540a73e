"""BrokerConnection over a real loopback socket against a scripted Kafka-speaking server."""

from __future__ import annotations

import asyncio
import struct

import pytest

from aiokprod.errors import (
    KafkaConnectionError,
    ProtocolError,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from aiokprod.network.connection import BrokerConnection
from aiokprod.protocol import MetadataRequest, MetadataResponse, ProduceRequest
from support.scripted_broker import ScriptedBroker, ScriptedRequest
from support.waits import eventually


def metadata_answer(req: ScriptedRequest) -> bytes:
    return req.respond(MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=1)],
        topics=[]))


async def open_conn(broker: ScriptedBroker, **kwargs: object) -> BrokerConnection:
    return await BrokerConnection.open("127.0.0.1", broker.port, node_id=1, **kwargs)  # type: ignore[arg-type]


async def test_handshake_negotiates_highest_common_version() -> None:
    async with ScriptedBroker(versions={18: (0, 3), 3: (0, 7), 0: (3, 8)}) as broker:
        conn = await open_conn(broker)
        try:
            assert broker.received[0].api_version == 3
            assert broker.received[0].body.client_software_name == "aiokprod"
            assert conn.version_for(MetadataRequest) == 7
            assert conn.version_for(ProduceRequest) == 8
        finally:
            conn.close()


async def test_api_versions_falls_back_when_broker_rejects_v3() -> None:
    async with ScriptedBroker(reject_api_versions_above=2) as broker:
        broker.versions = None
        conn = await open_conn(broker)
        try:
            assert [r.api_version for r in broker.received] == [3, 2]
        finally:
            conn.close()


async def test_no_common_version_names_the_api() -> None:
    async with ScriptedBroker(versions={18: (0, 3), 3: (50, 60)}) as broker:
        conn = await open_conn(broker)
        try:
            with pytest.raises(UnsupportedVersionError, match="Metadata"):
                conn.version_for(MetadataRequest)
            with pytest.raises(UnsupportedVersionError, match="Produce"):
                conn.version_for(ProduceRequest)
        finally:
            conn.close()


async def test_pipelined_requests_are_matched_in_order() -> None:
    gate = asyncio.Event()

    async def slow_first(req: ScriptedRequest) -> bytes:
        if len(broker.received) == 2:  # the first Metadata waits until all are sent
            await gate.wait()
        return metadata_answer(req)

    async with ScriptedBroker(handler=slow_first) as broker:
        conn = await open_conn(broker)
        try:
            futures = [conn.send(MetadataRequest(topics=[])) for _ in range(5)]
            # the first Metadata reached the broker (ApiVersions, then it) and is held there
            await eventually(lambda: len(broker.received) >= 2)
            assert conn.in_flight == 5
            gate.set()
            responses = await asyncio.gather(*futures)
            assert all(r.brokers[0].node_id == 1 for r in responses)
            ids = [r.correlation_id for r in broker.received[1:]]
            assert ids == sorted(ids)
            assert conn.statistics().in_flight == 0
            assert conn.statistics().responses_received == 6
        finally:
            conn.close()


async def test_request_timeout_fails_it_and_closes_connection() -> None:
    async with ScriptedBroker(handler=lambda req: None) as broker:
        conn = await open_conn(broker, request_timeout_ms=100)
        first = conn.send(MetadataRequest(topics=[]))
        second = conn.send(MetadataRequest(topics=[]), timeout_ms=10_000)
        with pytest.raises(RequestTimeoutError, match=r"request.timeout.ms=100"):
            await first
        with pytest.raises(KafkaConnectionError):
            await second
        assert not conn.connected
        assert conn.statistics().timeouts == 1
        late = conn.send(MetadataRequest(topics=[]))
        with pytest.raises(KafkaConnectionError, match="closed"):
            await late


async def test_truncated_garbage_response_is_protocol_error_not_hang() -> None:
    def garbage(req: ScriptedRequest) -> bytes:
        body = struct.pack(">i", req.correlation_id) + b"\x00\x01"  # header + 2 stray bytes
        return struct.pack(">i", len(body)) + body

    async with ScriptedBroker(handler=garbage) as broker:
        conn = await open_conn(broker)
        pending = conn.send(MetadataRequest(topics=[]), version=1)
        with pytest.raises(ProtocolError, match="Metadata"):
            await asyncio.wait_for(pending, 5)
        assert not conn.connected
        assert isinstance(conn.closed_cause, ProtocolError)


async def test_wrong_correlation_id_closes_with_protocol_error() -> None:
    def wrong_id(req: ScriptedRequest) -> bytes:
        req.correlation_id += 1000
        return metadata_answer(req)

    async with ScriptedBroker(handler=wrong_id) as broker:
        conn = await open_conn(broker)
        with pytest.raises(ProtocolError, match="correlation id"):
            await asyncio.wait_for(conn.send(MetadataRequest(topics=[])), 5)


async def test_absurd_frame_size_is_protocol_error() -> None:
    async with ScriptedBroker(handler=lambda req: struct.pack(">i", -7)) as broker:
        conn = await open_conn(broker)
        with pytest.raises(ProtocolError, match="frame size"):
            await asyncio.wait_for(conn.send(MetadataRequest(topics=[])), 5)


async def test_broker_closing_fails_everything_in_flight() -> None:
    async def close_on_request(req: ScriptedRequest) -> None:
        for w in broker.writers:
            w.close()

    async with ScriptedBroker(handler=close_on_request) as broker:
        conn = await open_conn(broker)
        futures = [conn.send(MetadataRequest(topics=[])) for _ in range(3)]
        for fut in futures:
            with pytest.raises(KafkaConnectionError):
                await asyncio.wait_for(fut, 5)
        assert conn.in_flight == 0


async def test_client_close_fails_in_flight_with_clear_error() -> None:
    async with ScriptedBroker(handler=lambda req: None) as broker:
        conn = await open_conn(broker)
        fut = conn.send(MetadataRequest(topics=[]))
        conn.close()
        with pytest.raises(KafkaConnectionError, match="closed by the client"):
            await fut
        assert "closed" in repr(conn)


async def test_connect_refused_is_connection_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(KafkaConnectionError, match="cannot connect"):
        await BrokerConnection.open("127.0.0.1", port, connect_timeout_ms=2000)


async def test_connect_timeout_names_the_setting() -> None:
    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(KafkaConnectionError, match="socket.connection.setup.timeout.ms"):
            await BrokerConnection.open("127.0.0.1", port, connect_timeout_ms=200)
    finally:
        server.close()


async def test_cancelled_caller_leaves_connection_usable() -> None:
    gate = asyncio.Event()

    async def gated(req: ScriptedRequest) -> bytes:
        await gate.wait()
        return metadata_answer(req)

    async with ScriptedBroker(handler=gated) as broker:
        conn = await open_conn(broker)
        try:
            task = asyncio.ensure_future(conn.request(MetadataRequest(topics=[])))
            # cancelled once on the wire (ApiVersions, then this Metadata), not before it
            await eventually(lambda: len(broker.received) >= 2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            gate.set()
            response = await asyncio.wait_for(conn.request(MetadataRequest(topics=[])), 5)
            assert response.brokers[0].node_id == 1
            assert conn.connected
        finally:
            conn.close()


async def test_open_cancelled_in_the_turn_its_set_up_ends_is_cancelled_and_closed() -> None:
    """A dial cancelled (its pool closing) in the very turn its set-up completes ends cancelled,
    its socket closed. ``asyncio.wait_for`` before 3.12 swallowed that cancellation and handed
    the open connection to a caller that had left, so nobody ever closed it."""
    async with ScriptedBroker() as broker:
        opener = asyncio.ensure_future(open_conn(broker))
        set_up = None
        for _ in range(10):  # the set-up task exists after the opener's first step
            await asyncio.sleep(0)
            set_up = next((t for t in asyncio.all_tasks()
                           if t.get_coro().__name__ == "_dial_and_negotiate"), None)
            if set_up is not None:
                break
        assert set_up is not None and not set_up.done()  # it needs the broker's answer first
        set_up.add_done_callback(lambda _: opener.cancel())
        with pytest.raises(asyncio.CancelledError):
            await opener
        assert set_up.done() and not set_up.cancelled()  # the set-up itself had succeeded
        await eventually(lambda: len(broker.writers) == 1 and broker.writers[0].is_closing())


async def test_answer_to_a_request_sent_without_expecting_one_is_ignored() -> None:
    """Tansu answers Produce with acks=0; Kafka does not. Either must keep the link healthy."""
    async with ScriptedBroker(handler=metadata_answer) as broker:
        conn = await open_conn(broker)
        try:
            unanswered = conn.send(MetadataRequest(topics=[]), expect_response=False)
            assert unanswered.done() and unanswered.result() is None
            response = await asyncio.wait_for(conn.request(MetadataRequest(topics=[])), 5)
            assert response.brokers[0].node_id == 1
            assert conn.connected
        finally:
            conn.close()


@pytest.mark.parametrize("header", [
    pytest.param(b"", id="header-v1-without-its-tag-section"),
    pytest.param(b"\x03\x01", id="tag-count-beyond-the-frame"),
    pytest.param(b"\x01\x05\x7f", id="tag-size-beyond-the-frame"),
    pytest.param(b"\xff\xff\xff\xff\xff\x01", id="tag-count-varint-too-long"),
])
async def test_undecodable_response_header_fails_the_connection_with_protocol_error(
        header: bytes, caplog: pytest.LogCaptureFixture) -> None:
    """A response header that cannot be decoded is the connection's ``ProtocolError``: the
    connection closes and every request in flight fails with it; nothing escapes into the
    event loop's ``data_received`` error handler (which would report a misleading
    'connection closed by broker')."""
    def garbled(req: ScriptedRequest) -> bytes | None:
        if len(broker.received) > 2:
            return None  # only the first Metadata is answered, and badly
        frame = struct.pack(">i", req.correlation_id) + header  # header v1 (Metadata v9+)
        return struct.pack(">i", len(frame)) + frame

    async with ScriptedBroker(handler=garbled) as broker:
        conn = await open_conn(broker)
        try:
            first = conn.send(MetadataRequest(topics=[]), version=12)
            second = conn.send(MetadataRequest(topics=[]), version=12)
            for fut in (first, second):
                with pytest.raises(ProtocolError, match="response header"):
                    await asyncio.wait_for(fut, 5)
            assert not conn.connected
            assert isinstance(conn.closed_cause, ProtocolError)
            assert conn.in_flight == 0
            assert "data_received" not in caplog.text
        finally:
            conn.close()


async def test_an_error_raised_while_decoding_a_response_is_a_protocol_error() -> None:
    """Whatever a decoder raises (here: a response class that fails on the answer with a
    ``struct.error``, as a decoder bug would) fails the connection with ``ProtocolError``,
    never leaks a raw error to the event loop."""
    class Exploding(MetadataResponse):
        @classmethod
        def decode(cls, data: object, version: int, *, strict: bool = True) -> MetadataResponse:
            raise struct.error("unpack requires a buffer of 4 bytes")

    class Asking(MetadataRequest):
        RESPONSE_TYPE = Exploding

    async with ScriptedBroker(handler=metadata_answer) as broker:
        conn = await open_conn(broker)
        try:
            with pytest.raises(ProtocolError, match="malformed Metadata"):
                await asyncio.wait_for(conn.send(Asking(topics=[])), 5)
            assert isinstance(conn.closed_cause, ProtocolError)
        finally:
            conn.close()
