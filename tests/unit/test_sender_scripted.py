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
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import aiokprod.producer.producer as producer_module
from aiokprod import Producer
from aiokprod.errors import BufferExhaustedError
from aiokprod.network.cluster import Cluster
from support.memory_transport import INIT_PRODUCER_ID, PRODUCE, ScriptedNetwork

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
    async with scripted_producer(net, f"{H}:9000,{H}:9001", monkeypatch, linger_ms=0) as p:
        start = time.monotonic()
        meta = await asyncio.wait_for(p.send_and_wait("t", b"v"), 10)
        elapsed = time.monotonic() - start
        assert meta.offset == 0
        assert elapsed < 1.5, elapsed  # the dial stagger (250 ms), not a 10 s set-up timeout
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
        await asyncio.wait_for(asyncio.gather(*futures), 2)
        assert time.monotonic() - resumed < 0.5  # woken by on_writable, not by a timer
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
                                 request_timeout_ms=5000) as p:
        await p.send_and_wait("t", b"warm-up")
        node.pause_on_produce = True
        first = await p.send("t", value)
        await asyncio.sleep(0.05)
        assert node.count(PRODUCE) == 2  # warm-up, then the request that paused the transport
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
        assert 0.28 < blocked < 1.5, blocked
        node.pause_on_produce = False
        node.open_transports()[-1].resume()
        md = await asyncio.wait_for(first, 1)
        assert md.offset == -1  # acks=0: no offset comes back
        await asyncio.wait_for(p.send("t", value), 1)  # memory was released
        await asyncio.wait_for(p.flush(), 2)
