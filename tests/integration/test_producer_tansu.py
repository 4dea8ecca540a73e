"""The producer end to end against a real Tansu broker, read back by confluent-kafka."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

import pytest

from aiokprod import Producer, RecordMetadata
from aiokprod.devbroker import TansuBroker
from aiokprod.errors import (
    InvalidTopicError,
    KafkaTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
)
from aiokprod.network import connection
from aiokprod.protocol import MetadataRequest, MetadataResponse
from support.reader import read_back
from support.round_trip import CODECS, round_trip_varied_records
from support.scripted_broker import ScriptedBroker, ScriptedRequest


@pytest.mark.parametrize("codec", CODECS)
async def test_records_round_trip_through_independent_reader(
    tansu: TansuBroker, new_topic: Callable[..., str], codec: str
) -> None:
    await round_trip_varied_records(tansu.bootstrap, new_topic(partitions=3), codec)


async def test_keyed_records_keep_partition_and_order(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=4)
    async with Producer(bootstrap_servers=tansu.bootstrap) as producer:
        futures = [await producer.send(topic, f"{i}".encode(), key=f"key-{i % 10}".encode())
                   for i in range(2000)]
        metas = await asyncio.gather(*futures)
    by_key: dict[bytes, set[int]] = defaultdict(set)
    for i, md in enumerate(metas):
        by_key[f"key-{i % 10}".encode()].add(md.partition)
    assert all(len(parts) == 1 for parts in by_key.values())
    records = read_back(tansu.bootstrap, topic, expected=2000)
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert r.key is not None and r.value is not None
        per_key[r.key].append(int(r.value))
    assert sum(len(v) for v in per_key.values()) == 2000
    assert all(v == sorted(v) for v in per_key.values())


async def test_requests_of_big_batches_written_in_pieces_arrive_whole(
    tansu: TansuBroker, new_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of 256 KiB, up to four a request: each request leaves in pieces (its records
    buffers uncopied; ``writelines`` from Python 3.12, one write each before), and every
    record arrives in order, read by an independent reader."""
    written: list[int] = []
    write_pieces = connection._write_pieces

    def counting(transport: asyncio.Transport, pieces: list[bytes]) -> None:
        written.append(len(pieces))
        write_pieces(transport, pieces)

    monkeypatch.setattr(connection, "_write_pieces", counting)
    topic = new_topic(partitions=2)
    count = 3000
    values = [f"{i:06d}".encode().ljust(1024, b"v") for i in range(count)]
    async with Producer(bootstrap_servers=tansu.bootstrap, batch_size=262_144,
                        linger_ms=50) as producer:
        for start in range(0, count, 500):
            part = values[start:start + 500]
            await producer.send_many(topic, part, keys=[b"%d" % (i % 2) for i in range(len(part))])
        await producer.flush()
    # about 3 MB in 256 KiB batches: a dozen batches, every request of them in pieces (the
    # other requests, Metadata and the like, are one piece each)
    assert sum(n >= 2 for n in written) >= 3
    records = read_back(tansu.bootstrap, topic, expected=count)
    assert sorted(r.value or b"" for r in records) == values
    for p in (0, 1):
        mine = [r.value for r in sorted(records, key=lambda r: r.offset) if r.partition == p]
        assert mine == sorted(mine)


async def test_send_and_wait_flush_and_from_config(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    producer = Producer.from_config({"bootstrap.servers": tansu.bootstrap, "linger.ms": "50",
                                     "enable.idempotence": "true"})
    await producer.start()
    try:
        md = await producer.send_and_wait(topic, b"first")
        assert md.offset == 0
        pending = [await producer.send(topic, b"x") for _ in range(10)]
        await producer.flush()
        assert all(f.done() for f in pending)
        assert await producer.partitions_for(topic) == [0]
        many = await producer.send_many(topic, [b"a", b"b", b"c"])
        assert [m.offset for m in await many] == [11, 12, 13]
    finally:
        await producer.close(timeout=5)
    with pytest.raises(ProducerClosedError):
        await producer.send(topic, b"late")


async def test_bad_input_is_rejected_at_once_and_nothing_is_queued(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    async with Producer(bootstrap_servers=tansu.bootstrap, max_request_size=10_000,
                        value_serializer=lambda v: v.encode() if isinstance(v, str) else v,
                        ) as producer:
        with pytest.raises(TypeError, match="key"):
            await producer.send(topic, b"v", key="not-bytes")
        with pytest.raises(TypeError, match="value"):
            await producer.send(topic, 12345)
        with pytest.raises(TypeError, match="header"):
            await producer.send(topic, b"v", headers=[(b"bytes-key", b"x")])  # type: ignore[list-item]
        with pytest.raises(RecordTooLargeError, match="max.request.size"):
            await producer.send(topic, b"x" * 20_000)
        ok = await producer.send_and_wait(topic, "text is serialized")
        assert ok.offset == 0
    async with Producer(bootstrap_servers=tansu.bootstrap,
                        value_serializer=lambda v: 1 / 0) as producer:
        with pytest.raises(SerializationError, match="value_serializer"):
            await producer.send(topic, "boom")
    records = read_back(tansu.bootstrap, topic, expected=1, settle=0.3)
    assert [r.value for r in records] == [b"text is serialized"]


async def test_invalid_topic_name_fails_fast(tansu: TansuBroker) -> None:
    async with Producer(bootstrap_servers=tansu.bootstrap, max_block_ms=10_000) as producer:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(InvalidTopicError, match="bad topic name"):
            await producer.send("bad topic name with spaces", b"v")
        assert loop.time() - start < 5


async def test_unknown_topic_times_out_after_max_block() -> None:
    """A broker that never knows the topic (no auto-creation): bounded by max.block.ms."""

    def unknown_topic(req: ScriptedRequest) -> bytes | None:
        if req.api_key != MetadataRequest.API_KEY:
            return None
        return req.respond(MetadataResponse(
            brokers=[MetadataResponse.MetadataResponseBroker(
                node_id=1, host="127.0.0.1", port=broker.port)],
            topics=[MetadataResponse.MetadataResponseTopic(error_code=3, name=t.name)
                    for t in req.body.topics or []]))

    # max.block.ms is far above a metadata round trip (milliseconds), so the producer asks
    # again after retry.backoff.ms however slow the machine: a starved first round
    # (connection, ApiVersions, Metadata) can take most of a second
    async with ScriptedBroker(handler=unknown_topic) as broker, \
            Producer(bootstrap_servers=f"127.0.0.1:{broker.port}", max_block_ms=3000,
                     retry_backoff_ms=50) as producer:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(KafkaTimeoutError, match=r"max.block.ms=3000.*does not exist"):
            await producer.send("missing", b"v")
        assert 2.9 < loop.time() - start < 30
        assert sum(1 for r in broker.received if r.api_key == 3) >= 2  # it kept asking


async def test_no_broker_reachable_times_out_after_max_block() -> None:
    async with Producer(bootstrap_servers="127.0.0.1:1", max_block_ms=300,
                        request_timeout_ms=200, delivery_timeout_ms=1000,
                        linger_ms=0) as producer:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(KafkaTimeoutError, match="max.block.ms=300"):
            await producer.send("t", b"v")
        assert loop.time() - start < 5


async def test_callback_that_sends_does_not_deadlock(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    async with Producer(bootstrap_servers=tansu.bootstrap) as producer:
        chained: list[asyncio.Future[RecordMetadata]] = []
        done = asyncio.Event()
        tasks: list[asyncio.Future[None]] = []

        def on_delivery(fut: asyncio.Future[RecordMetadata]) -> None:
            async def resend() -> None:
                md = await producer.send_and_wait(topic, b"from-callback")
                chained.append(asyncio.get_running_loop().create_future())
                chained[-1].set_result(md)
                done.set()

            tasks.append(asyncio.ensure_future(resend()))

        first = await producer.send(topic, b"first")
        first.add_done_callback(on_delivery)
        await asyncio.wait_for(done.wait(), 10)
    assert chained[0].result().offset == 1


async def test_cancelled_send_and_wait_leaves_producer_usable(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    # linger 2 s: the record must still be unacknowledged when it is cancelled 50 ms later (a
    # loaded machine's pauses must not let the ack win)
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=2000) as producer:
        # metadata first: a send cancelled while it waits for metadata queues nothing, and a
        # loaded machine may take longer than the sleep below to fetch it
        await producer.partitions_for(topic)
        task = asyncio.ensure_future(producer.send_and_wait(topic, b"cancelled-waiter"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        md = await asyncio.wait_for(producer.send_and_wait(topic, b"after"), 30)
        assert md.offset >= 0
    values = sorted(r.value or b"" for r in read_back(tansu.bootstrap, topic, expected=2))
    assert values == [b"after", b"cancelled-waiter"]
