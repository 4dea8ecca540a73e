"""An in-memory network for socket-free tests of ``Cluster`` and ``Sender``.

``Cluster`` takes a ``connector`` (a ``TransportConnector``); ``ScriptedNetwork.connect`` is
one. Each address behaves as its ``ScriptedNode`` says: refuse the connection, never finish
connecting, accept and stay silent, or answer like a broker — ApiVersions with every version
we speak, Metadata from the shared ``ClusterScript`` (so a test changes the cluster in one
place), Produce and InitProducerId through test-supplied handlers (default: success); a
Produce handler returning None holds the request, which ``MemoryTransport.answer`` answers
later, and answers on one connection come in the order its requests came, as a broker's do
(an immediate answer waits behind a held request before it). Requests are decoded with
the generated protocol classes, answers are encoded with them, so the connection under test
runs its production framing code; only the socket is gone, which makes timing exact enough to
assert bounds of tens of milliseconds and lets a test pause a transport's writing at will
(``MemoryTransport.pause``/``resume``) — something a real socket does only under load.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokprod.protocol import (
    API_BY_KEY,
    InitProducerIdResponse,
    MetadataResponse,
    ProduceResponse,
)
from support.scripted_broker import ScriptedRequest, _parse_request_header, api_versions_response

__all__ = ["ClusterScript", "MemoryTransport", "ScriptedNetwork", "ScriptedNode"]

API_VERSIONS, METADATA, PRODUCE, INIT_PRODUCER_ID = 18, 3, 0, 22

ProduceHandler = Callable[[ScriptedRequest], Any]


@dataclass
class ClusterScript:
    """What every answering node reports in Metadata: brokers and topics."""

    # node id -> (host, port)
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    # topic -> (topic id, {partition: leader}); absent topics are answered UNKNOWN_TOPIC (3)
    topics: dict[str, tuple[uuid.UUID, dict[int, int]]] = field(default_factory=dict)
    leader_epoch: int = 0

    def add_topic(self, name: str, leaders: dict[int, int]) -> uuid.UUID:
        topic_id = uuid.uuid4()
        self.topics[name] = (topic_id, dict(leaders))
        return topic_id

    def metadata(self, req: ScriptedRequest) -> MetadataResponse:
        wanted = [t.name for t in (req.body.topics or [])]
        if req.body.topics is None:
            wanted = sorted(self.topics)
        topics = []
        for name in wanted:
            known = self.topics.get(name)
            if known is None:
                topics.append(MetadataResponse.MetadataResponseTopic(error_code=3, name=name,
                                                                     partitions=[]))
                continue
            topic_id, leaders = known
            topics.append(MetadataResponse.MetadataResponseTopic(
                error_code=0, name=name, topic_id=topic_id, partitions=[
                    MetadataResponse.MetadataResponsePartition(
                        error_code=0, partition_index=p, leader_id=leader,
                        leader_epoch=self.leader_epoch, replica_nodes=[leader],
                        isr_nodes=[leader])
                    for p, leader in sorted(leaders.items())]))
        return MetadataResponse(
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=n, host=h, port=p)
                     for n, (h, p) in sorted(self.brokers.items())],
            cluster_id="scripted", controller_id=min(self.brokers, default=-1), topics=topics)


def produce_ok(req: ScriptedRequest) -> ProduceResponse:
    """Every partition appended at offset 0."""
    return ProduceResponse(responses=[
        ProduceResponse.TopicProduceResponse(
            name=t.name, topic_id=t.topic_id, partition_responses=[
                ProduceResponse.PartitionProduceResponse(index=p.index, error_code=0,
                                                         base_offset=0)
                for p in t.partition_data])
        for t in req.body.topic_data])


@dataclass
class ScriptedNode:
    """How one address behaves. ``mode``: answer | refuse | hang_connect | silent."""

    mode: str = "answer"
    produce: ProduceHandler = produce_ok
    # InitProducerId: the answer to each request (default: producer id 1000, epoch 0)
    init_producer_id: Callable[[ScriptedRequest], Any] | None = None
    # API keys this node reads and never answers (e.g. {METADATA}), besides mode "silent"
    ignore: set[int] = field(default_factory=set)
    # a Produce write pauses the transport, as a real one does when its buffer passes the
    # high-water mark inside ``write`` (the test resumes it)
    pause_on_produce: bool = False
    # a non-zero top-level error code this node answers Metadata with (v13+, KIP-1102), e.g.
    # 129 REBOOTSTRAP_REQUIRED
    metadata_error: int = 0
    requests: list[ScriptedRequest] = field(default_factory=list)
    transports: list[MemoryTransport] = field(default_factory=list)
    # the connection the request being handled came on (a handler that holds a request
    # answers it there later, with ``MemoryTransport.answer``)
    current: MemoryTransport | None = None
    connect_attempts: int = 0

    def count(self, api_key: int) -> int:
        return sum(1 for r in self.requests if r.api_key == api_key)

    def open_transports(self) -> list[MemoryTransport]:
        return [t for t in self.transports if not t.is_closing()]


class MemoryTransport(asyncio.Transport):
    """The client's end of an in-memory connection; the broker end is the node's script."""

    def __init__(self, network: ScriptedNetwork, node: ScriptedNode,
                 protocol: asyncio.Protocol, address: tuple[str, int]) -> None:
        super().__init__()
        self._network = network
        self._node = node
        self._protocol = protocol
        self._address = address
        self._loop = asyncio.get_running_loop()
        self._closing = False
        self._inbound = bytearray()
        self._paused = False
        self._held = 0  # bytes "in the buffer" while paused
        # correlation id -> answer frame (None: not answered yet) of the requests a handler
        # held and of the answers queued behind them, in the order the requests came
        self._held_answers: dict[int, bytes | None] = {}
        self.sockopts = network.last_buffers

    # -- the test's controls ----------------------------------------------------------------

    def pause(self) -> None:
        """As if the write buffer passed its high-water mark."""
        if not self._paused:
            self._paused = True
            self._protocol.pause_writing()

    def resume(self) -> None:
        """As if the buffer drained below the low-water mark."""
        if self._paused:
            self._paused = False
            self._held = 0
            self._protocol.resume_writing()

    def answer(self, req: ScriptedRequest, response: Any) -> None:
        """Answer a request a handler held (returned None), later, in its turn."""
        self._send_in_turn(req.correlation_id, req.respond(response))

    def server_close(self) -> None:
        """The broker end hangs up."""
        if not self._closing:
            self._closing = True
            self._loop.call_soon(self._protocol.connection_lost, None)

    # -- asyncio.Transport ------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        if self._paused:
            self._held += len(data)
        self._inbound += data
        while len(self._inbound) >= 4:
            (size,) = struct.unpack_from(">i", self._inbound)
            if len(self._inbound) < 4 + size:
                break
            frame = bytes(self._inbound[4:4 + size])
            del self._inbound[:4 + size]
            self._handle(frame)

    def _handle(self, frame: bytes) -> None:
        api_key, api_version = struct.unpack_from(">hh", frame, 0)
        request_cls = API_BY_KEY[api_key][0]
        correlation_id, client_id, offset = _parse_request_header(
            frame, request_cls.header_version(api_version))
        body = request_cls.decode(memoryview(frame)[offset:], api_version)
        req = ScriptedRequest(api_key, api_version, correlation_id, client_id, body)
        node = self._node
        node.requests.append(req)
        node.current = self
        if node.mode == "silent" or api_key in node.ignore:
            return
        if api_key == API_VERSIONS:
            answer: Any = api_versions_response()
        elif api_key == METADATA and node.metadata_error:
            answer = MetadataResponse(error_code=node.metadata_error, brokers=[], topics=[])
        elif api_key == METADATA:
            answer = self._network.cluster.metadata(req)
        elif api_key == INIT_PRODUCER_ID and node.init_producer_id is not None:
            answer = node.init_producer_id(req)
        elif api_key == INIT_PRODUCER_ID:
            answer = InitProducerIdResponse(error_code=0, producer_id=1000, producer_epoch=0)
        elif api_key == PRODUCE:
            if node.pause_on_produce:
                self.pause()
            if body.acks == 0:
                return
            answer = node.produce(req)
            if answer is None:
                self._held_answers[correlation_id] = None  # answered later, in its turn
                return
        else:
            return
        self._send_in_turn(correlation_id, req.respond(answer))

    def _send_in_turn(self, correlation_id: int, data: bytes) -> None:
        """A broker answers a connection's requests in the order it read them: an answer
        waits behind every request the script holds that came before it."""
        if not self._held_answers:
            self._loop.call_soon(self._deliver_now, data)
            return
        self._held_answers[correlation_id] = data
        while self._held_answers:
            first = next(iter(self._held_answers))
            ready = self._held_answers[first]
            if ready is None:
                break
            del self._held_answers[first]
            self._loop.call_soon(self._deliver_now, ready)

    def _deliver(self, data: bytes) -> None:
        """Deliver an answer frame; one to a held request goes in its turn."""
        (correlation_id,) = struct.unpack_from(">i", data, 4)
        if correlation_id in self._held_answers:
            self._send_in_turn(correlation_id, data)
        else:
            self._deliver_now(data)

    def _deliver_now(self, data: bytes) -> None:
        if not self._closing:
            self._protocol.data_received(data)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self.abort()

    def abort(self) -> None:
        if not self._closing:
            self._closing = True
            self._loop.call_soon(self._protocol.connection_lost, None)

    def get_write_buffer_size(self) -> int:
        return self._held

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._address
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_reading(self) -> bool:
        return not self._closing


class ScriptedNetwork:
    """Addresses -> node scripts, and the ``connect`` function ``Cluster`` dials through."""

    def __init__(self, cluster: ClusterScript | None = None) -> None:
        self.cluster = cluster or ClusterScript()
        self.nodes: dict[tuple[str, int], ScriptedNode] = {}
        self.last_buffers: tuple[int, int] = (-1, -1)

    def node(self, port: int, mode: str = "answer", *, broker_id: int | None = None,
             host: str = "127.0.0.1") -> ScriptedNode:
        """Script the address ``host:port``; with ``broker_id`` it is listed in Metadata."""
        node = self.nodes[(host, port)] = ScriptedNode(mode=mode)
        if broker_id is not None:
            self.cluster.brokers[broker_id] = (host, port)
        return node

    async def connect(self, host: str, port: int, protocol_factory: Callable[[], asyncio.Protocol],
                      send_buffer_bytes: int, receive_buffer_bytes: int) -> None:
        node = self.nodes.get((host, port))
        if node is None or node.mode == "refuse":
            if node is not None:
                node.connect_attempts += 1
            raise ConnectionRefusedError(111, f"Connect call failed ('{host}', {port})")
        node.connect_attempts += 1
        if node.mode == "hang_connect":
            await asyncio.Event().wait()  # a SYN nobody answers
        self.last_buffers = (send_buffer_bytes, receive_buffer_bytes)
        protocol = protocol_factory()
        transport = MemoryTransport(self, node, protocol, (host, port))
        node.transports.append(transport)
        protocol.connection_made(transport)
