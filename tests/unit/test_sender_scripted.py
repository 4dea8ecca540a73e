"""The producer's sender over an in-memory network (``support.memory_transport``): no sockets.

The whole producer runs (accumulator, buffer pool, sender, idempotence); only its ``Cluster``
dials the scripted network. What is checked is the sender's side of the network rules
(docs/network.md): it writes nothing to a write-paused connection and is woken when it resumes;
with acks=0 the memory of a request stays taken while its bytes sit in the transport's buffer,
so sends block at buffer.memory; a silent first bootstrap server does not hold up the producer
id or the first ack.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import aiokprod.producer.producer as producer_module
from aiokprod import Producer
from aiokprod.errors import BufferExhaustedError
from aiokprod.network.cluster import Cluster
from aiokprod.network.metadata import TopicPartition
from aiokprod.protocol import InitProducerIdResponse
from support.memory_transport import INIT_PRODUCER_ID, PRODUCE, ScriptedNetwork, produce_ok
from support.waits import eventually, topic_known

H = "127.0.0.1"


@asynccontextmanager
async def scripted_producer(net: ScriptedNetwork, bootstrap: str, monkeypatch: pytest.MonkeyPatch,
                            **config: Any) -> AsyncIterator[Producer]:
    monkeypatch.setattr(producer_module, "Cluster",
                        functools.partial(Cluster, connector=net.connect))
    producer = Producer(bootstrap_servers=bootstrap, **config)
    await producer.start()
    try:
        yield producer
    finally:
        await producer.close(timeout=5)


def net_with_topic(partitions: int = 1) -> ScriptedNetwork:
    net = ScriptedNetwork()
    net.node(9001, broker_id=1)
    net.cluster.add_topic("t", dict.fromkeys(range(partitions), 1))
    return net


async def test_silent_first_bootstrap_server_does_not_delay_the_producer_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = net_with_topic()
    silent = net.node(9000, "silent")
    async with scripted_producer(net, f"{H}:9000,{H}:9001", monkeypatch, linger_ms=0,
                                 socket_connection_setup_timeout_ms=120_000,
                                 socket_connection_setup_timeout_max_ms=120_000) as p:
        start = time.monotonic()
        meta = await asyncio.wait_for(p.send_and_wait("t", b"v"), 60)
        elapsed = time.monotonic() - start
        assert meta.offset == 0
        assert elapsed < 30.0, elapsed  # the dial stagger (250 ms), not the 120 s set-up timeout
        assert net.nodes[(H, 9001)].count(INIT_PRODUCER_ID) == 1
        assert silent.connect_attempts >= 1


async def test_sender_writes_nothing_while_paused_and_resumes_when_woken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = net_with_topic()
    node = net.nodes[(H, 9001)]
    async with scripted_producer(net, f"{H}:9001", monkeypatch, linger_ms=0) as p:
        await p.send_and_wait("t", b"warm-up")
        transport = node.open_transports()[-1]
        produced = node.count(PRODUCE)
        transport.pause()
        futures = [await p.send("t", b"r%d" % i) for i in range(20)]
        await asyncio.sleep(0.2)
        assert node.count(PRODUCE) == produced  # nothing written to a paused connection
        assert not any(f.done() for f in futures)
        resumed = time.monotonic()
        transport.resume()
        await asyncio.wait_for(asyncio.gather(*futures), 60)
        # woken by on_writable, not by a timer: the next one due is delivery.timeout.ms (120 s)
        assert time.monotonic() - resumed < 30.0
        assert node.count(PRODUCE) > produced


async def test_acks0_memory_stays_taken_until_the_buffer_drains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """acks=0: a Produce request whose write paused the transport keeps its batch's memory;
    sends block at buffer.memory and fail at max.block.ms; resume_writing releases it."""
    net = net_with_topic()
    node = net.nodes[(H, 9001)]
    value = b"x" * 4000
    async with scripted_producer(net, f"{H}:9001", monkeypatch, acks=0, linger_ms=0,
                                 enable_idempotence=False, buffer_memory=64 * 1024,
                                 batch_size=16 * 1024, max_block_ms=300,
                                 request_timeout_ms=30_000) as p:
        await topic_known(p, "t")  # its first metadata is not what is tested
        await p.send_and_wait("t", b"warm-up")
        node.pause_on_produce = True
        first = await p.send("t", value)
        # warm-up, then the request that paused the transport
        await eventually(lambda: node.count(PRODUCE) >= 2)
        assert node.count(PRODUCE) == 2
        conn = p._cluster.ready_connection(1) if p._cluster else None
        assert conn is None  # paused: not handed to the sender
        assert not first.done()  # its bytes are still "in the buffer"
        accepted = 0
        start = time.monotonic()
        with pytest.raises(BufferExhaustedError):
            for _ in range(64):
                await p.send("t", value)
                accepted += 1
        blocked = time.monotonic() - start
        assert accepted < 16, accepted  # 64 KiB of pool, 4 KB records
        # max.block.ms (300 ms), not until request.timeout.ms (30 s) frees the memory
        assert 0.28 < blocked < 10.0, blocked
        node.pause_on_produce = False
        node.open_transports()[-1].resume()
        md = await asyncio.wait_for(first, 10)
        assert md.offset == -1  # acks=0: no offset comes back
        await asyncio.wait_for(p.send("t", value), 10)  # memory was released
        await asyncio.wait_for(p.flush(), 10)


# ---- KIP-1269 on Produce v14 ----------------------------------------------------------------


def _answer_with_window(window: int | None) -> Any:
    """A Produce handler answering every partition at offset 0, with the topic's
    ProducerStateBatchesToRetain = ``window`` (None: hold the request, never answer)."""

    def handler(req: Any) -> Any:
        if window is None:
            return None
        assert req.api_version == 14, req.api_version  # topic ids + KIP-1269 negotiated
        response = produce_ok(req)
        for topic in response.responses:
            topic.producer_state_batches_to_retain = window
        return response

    return handler


def _window(p: Producer, partition: int = 0) -> int:
    sender = p._sender
    assert sender is not None and sender._idem is not None
    return sender._idem.partition_state(TopicPartition("t", partition)).in_flight_limit


async def test_kip1269_window_comes_from_produce_v14_with_topic_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = net_with_topic()
    node = net.nodes[(H, 9001)]
    node.produce = _answer_with_window(20)
    async with scripted_producer(net, f"{H}:9001", monkeypatch, linger_ms=0) as p:
        meta = await p.send_and_wait("t", b"v")
        assert (meta.topic, meta.offset) == ("t", 0)  # the answer was mapped back by topic id
        assert _window(p) == 20
        produced = [r for r in node.requests if r.api_key == PRODUCE]
        assert {r.api_version for r in produced} == {14}
        assert all(t.topic_id.int and t.name == "" for r in produced for t in r.body.topic_data)


async def test_kip1269_window_goes_back_to_five_on_a_new_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = net_with_topic()
    node = net.nodes[(H, 9001)]
    node.produce = _answer_with_window(20)
    async with scripted_producer(net, f"{H}:9001", monkeypatch, linger_ms=0) as p:
        await p.send_and_wait("t", b"learn")
        assert _window(p) == 20
        node.produce = _answer_with_window(None)  # the next answer never comes
        node.open_transports()[-1].server_close()
        await asyncio.sleep(0.05)  # connection_lost is delivered with call_soon: no race
        held = await p.send("t", b"on the new connection")
        await eventually(lambda: len(node.open_transports()) == 1 and node.count(PRODUCE) >= 2)
        assert _window(p) == 5  # nothing learned from this connection yet
        held.cancel()
        # the held request is never answered: closing with the fixture's 5 s would wait all
        # of it (5 s of every run of this test, in each of the five passes of `make test`)
        await p.close(timeout=0)


async def test_kip1269_late_answer_from_a_former_leader_does_not_raise_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = ScriptedNetwork()
    old, new = net.node(9001, broker_id=1), net.node(9002, broker_id=2)
    net.cluster.add_topic("t", {0: 1})
    old.produce = _answer_with_window(20)
    new.produce = _answer_with_window(None)
    async with scripted_producer(net, f"{H}:9001", monkeypatch, linger_ms=0,
                                 request_timeout_ms=30_000) as p:
        await p.send_and_wait("t", b"learn")
        assert _window(p) == 20
        old.produce = _answer_with_window(None)  # hold the next one
        late = await p.send("t", b"answered late")
        await eventually(lambda: old.count(PRODUCE) >= 2)
        held = [r for r in old.requests if r.api_key == PRODUCE][-1]
        # the partition moves to broker 2 with a new leader epoch (as a KIP-951 hint in
        # another answer says; a Metadata request to broker 1 would queue behind the held
        # Produce): the window starts at 5 again
        cluster = p._cluster
        assert cluster is not None
        cluster.apply_leader_hint(TopicPartition("t", 0), 2, 1, [])
        assert cluster.view.topics["t"].leader(0) == 2
        assert _window(p) == 5
        # now the former leader's answer arrives, still saying 20
        answer = _answer_with_window(20)(held)
        transport = old.open_transports()[-1]
        asyncio.get_running_loop().call_soon(transport._deliver, held.respond(answer))
        await asyncio.wait_for(late, 30)
        assert _window(p) == 5


async def test_a_queued_batch_expiring_does_not_unmute_a_partition_with_a_batch_on_the_wire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """max.in.flight.requests.per.connection=1 (docs/batching.md D5): batch A expires while its
    request is unanswered, so its partition stays muted until the answer; batch B, queued
    behind A, then expires too. Failing B must not unmute the partition: A is still on the
    wire, and a later batch could overtake it (through another connection after a leader
    move). Timeline (s): A sent at 0, B at 0.1, resume at 2.0 (A on the wire, its request open
    until 6.0), A expires at 4.0, B at 4.1; the check then has until 6.0."""
    net = net_with_topic()
    node = net.nodes[(H, 9001)]
    answered = 0

    def first_only(req: Any) -> Any:
        nonlocal answered
        answered += 1
        return produce_ok(req) if answered == 1 else None  # A's request is never answered

    node.produce = first_only
    async with scripted_producer(net, f"{H}:9001", monkeypatch, linger_ms=0, batch_size=1024,
                                 enable_idempotence=False, acks=1,
                                 max_in_flight_requests_per_connection=1,
                                 request_timeout_ms=4000, delivery_timeout_ms=4000) as p:
        await p.send_and_wait("t", b"warm-up")
        transport = node.open_transports()[-1]
        transport.pause()  # A and B wait in the accumulator, each its own batch
        a = await p.send("t", b"A" * 700)
        await asyncio.sleep(0.1)
        b = await p.send("t", b"B" * 700)  # its own batch (A's cannot take it)
        await asyncio.sleep(1.9)
        transport.resume()  # A goes on the wire (t=2.0) and mutes t-0; B stays queued
        with pytest.raises(Exception, match="delivery.timeout.ms"):
            await asyncio.wait_for(a, 30)  # t=4.0: A expires, its request still open
        assert p._acc.statistics().muted_partitions == 1
        with pytest.raises(Exception, match="delivery.timeout.ms"):
            await asyncio.wait_for(b, 30)  # t=4.1: B expires in the queue
        # A's request is open until request.timeout.ms (t=6.0)
        assert p._acc.statistics().muted_partitions == 1, (
            "B's expiry unmuted the partition while A is still on the wire")


# ---- MESSAGE_TOO_LARGE split -----------------------------------------------------------------


async def test_split_parts_go_without_backoff_and_count_in_the_batch_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch refused as too large is split; its parts are queued as never tried (no retry
    backoff, Java's splitAndReenqueue) and, like every batch a request carries, counted in
    batch-size and record-size (before: they waited retry.backoff.ms and were not counted)."""
    net = net_with_topic()
    node = net.nodes[(H, 9001)]
    refused = 0

    def refuse_the_big_one(req: Any) -> Any:
        nonlocal refused
        response = produce_ok(req)
        records = sum(len(bytes(p.records or b"")) for t in req.body.topic_data
                      for p in t.partition_data)
        if records > 2000 and not refused:
            refused += 1
            for t in response.responses:
                for p in t.partition_responses:
                    p.error_code, p.base_offset = 10, -1  # MESSAGE_TOO_LARGE
        return response

    node.produce = refuse_the_big_one
    async with scripted_producer(net, f"{H}:9001", monkeypatch, linger_ms=200,
                                 batch_size=16 * 1024, retry_backoff_ms=30_000,
                                 retry_backoff_max_ms=30_000) as p:
        await p.send_and_wait("t", b"warm-up")
        futures = [await p.send("t", b"r" * 500) for _ in range(8)]  # ~4 KB: one batch
        start = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*futures), 60)
        elapsed = time.monotonic() - start
        metrics = p.metrics()
    assert refused == 1
    assert metrics["producer-metrics:batch-split-total"] == 1
    assert elapsed < 10.0, elapsed  # linger 0.2 s, not the 30 s retry backoff
    # record-size is per batch, its largest record: the warm-up's (7 bytes), the refused
    # batch's and each part's (500). Counting the parts averages at least (7 + 3 * 500) / 4;
    # without them it was (7 + 500) / 2
    assert metrics["producer-metrics:record-size-avg"] > 350, metrics[
        "producer-metrics:record-size-avg"]
    assert metrics["producer-metrics:batch-size-max"] > 4000


# ---- InitProducerId --------------------------------------------------------------------------


async def test_init_producer_id_is_retried_after_the_configured_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A retriable InitProducerId error is retried after retry.backoff.ms (the transactional
    producer's rule too), not after a backoff of its own (it was 0.1 s, then 0.2 s)."""
    net = net_with_topic()
    node = net.nodes[(H, 9001)]
    asked: list[float] = []

    def init(req: Any) -> Any:
        asked.append(time.monotonic())
        if len(asked) < 3:  # COORDINATOR_NOT_AVAILABLE, retriable
            return InitProducerIdResponse(error_code=15, producer_id=-1, producer_epoch=-1)
        return InitProducerIdResponse(error_code=0, producer_id=7, producer_epoch=0)

    node.init_producer_id = init
    async with scripted_producer(net, f"{H}:9001", monkeypatch, linger_ms=0,
                                 retry_backoff_ms=500, retry_backoff_max_ms=500) as p:
        await asyncio.wait_for(p.send_and_wait("t", b"v"), 10)
        assert p._idempotence is not None and p._idempotence.producer_id == 7
    gaps = [later - earlier for earlier, later in itertools.pairwise(asked)]
    assert len(gaps) == 2
    # 500 ms +-20% jitter; the upper bound leaves room for a loaded machine (the old gaps were
    # 0.1 and 0.2 s, which the lower bound rules out)
    assert all(0.35 < gap < 2.0 for gap in gaps), gaps


async def test_a_refused_bump_falls_back_to_a_fresh_producer_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a transactional id nothing can fence the producer: a bump the broker refuses,
    even with PRODUCER_FENCED (Tansu, for an epoch it did not hand out), gets a fresh id."""
    net = net_with_topic()
    node = net.nodes[(H, 9001)]
    asked: list[tuple[int, int]] = []

    def init(req: Any) -> Any:
        asked.append((req.body.producer_id, req.body.producer_epoch))
        if req.body.producer_id >= 0:
            return InitProducerIdResponse(error_code=90, producer_id=-1, producer_epoch=-1)
        return InitProducerIdResponse(error_code=0, producer_id=10 + len(asked),
                                      producer_epoch=0)

    node.init_producer_id = init
    produced = 0

    def lose_state_once(req: Any) -> Any:
        nonlocal produced
        produced += 1
        response = produce_ok(req)
        if produced == 2:  # the broker lost our state: UNKNOWN_PRODUCER_ID asks for a bump
            for t in response.responses:
                for part in t.partition_responses:
                    part.error_code, part.base_offset = 59, -1
        return response

    node.produce = lose_state_once
    async with scripted_producer(net, f"{H}:9001", monkeypatch, linger_ms=0,
                                 retry_backoff_ms=10) as p:
        await asyncio.wait_for(p.send_and_wait("t", b"v"), 10)
        await asyncio.wait_for(p.send_and_wait("t", b"after"), 10)
        assert p._sender is not None and p._sender.fatal_error is None
    assert asked == [(-1, -1), (11, 0), (-1, -1)]
