"""The fault-injecting proxy against a real broker: each fault is shown to be real.

A fault test elsewhere only means something if the fault does what it claims, so each fault
here is observed from a client we did not write (confluent-kafka) or on a raw socket: a
dropped Produce response really makes a non-idempotent producer write a duplicate (and an
idempotent one not), a stall really makes the client time out, added latency really adds
latency, and a rewritten response really decodes with the new KIP-1269 field.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from crc32c import crc32c

from aiokprod.devbroker import TansuBroker
from aiokprod.protocol import (
    ProduceRequest,
    ProduceResponse,
    decode_response,
    encode_request,
)
from support.proxy import (
    KafkaProxy,
    ProxyError,
    ProxyStatistics,
    ProxyThread,
    set_batches_to_retain,
    tansu_behind_proxy,
)
from support.reader import read_back

PRODUCE = 0
API_VERSIONS = 18
FLEXIBLE_PRODUCE_VERSION = 9


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[TansuBroker, ProxyThread]]:
    """A private broker advertising a fresh proxy (fresh counters and fault plan per test)."""
    with tansu_behind_proxy(log_dir=tmp_path) as (broker, proxy):
        yield broker, proxy


def make_topic(broker: TansuBroker, request: pytest.FixtureRequest) -> str:
    name = f"{request.node.name[:60]}".replace("[", "-").replace("]", "")
    broker.create_topic(name, 1)
    return name


# -- a synchronous client we did not write ---------------------------------------------------


@contextlib.contextmanager
def producer(proxy: ProxyThread, **overrides: Any) -> Iterator[Producer]:
    """A confluent-kafka producer through the proxy, closed (flushed, threads ended) after."""
    config: dict[str, Any] = {
        "bootstrap.servers": proxy.bootstrap,
        "acks": "all",
        "linger.ms": 0,
        "retry.backoff.ms": 20,
        "reconnect.backoff.ms": 10,
        "reconnect.backoff.max.ms": 100,
        "message.timeout.ms": 20000,
        "log_level": 3,
    }
    config.update(overrides)
    client = Producer(config)
    try:
        yield client
    finally:
        client.close()


def produce_one_by_one(client: Producer, topic: str, values: list[bytes]) -> list[Any]:
    """Produce each value and wait for its delivery before the next: one batch per request."""
    errors: list[KafkaError | None] = []
    for value in values:
        client.produce(topic, value=value, on_delivery=lambda err, _msg: errors.append(err))
        assert client.flush(20) == 0, f"{value!r} not delivered within 20 s"
    return errors


def values_in(broker_or_proxy: ProxyThread, topic: str, expected: int) -> list[bytes | None]:
    # settle: keep reading a moment after `expected` so an extra duplicate cannot hide.
    records = read_back(broker_or_proxy.bootstrap, topic, expected=expected, settle=0.5)
    return [record.value for record in records]


def wait_for_statistics(
    proxy: ProxyThread, condition: Callable[[ProxyStatistics], bool], timeout: float = 15.0
) -> ProxyStatistics:
    """Poll the proxy's counters until ``condition`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        stats = proxy.statistics()
        if condition(stats):
            return stats
        if time.monotonic() > deadline:
            pytest.fail(f"proxy statistics never satisfied the condition: {stats}")
        time.sleep(0.01)


# -- raw sockets, for what a librdkafka client cannot show -----------------------------------


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"EOF after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def api_versions_v0(correlation_id: int) -> bytes:
    """An ApiVersions v0 request frame (header v1, empty body), built without our encoder."""
    client_id = b"proxy-test"
    header = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(header)) + header


def one_record_batch(value: bytes) -> bytes:
    """A RecordBatch v2 holding one uncompressed record, built here independently of ours."""

    def varint(n: int) -> bytes:
        zigzag = (n << 1) ^ (n >> 63)
        out = bytearray()
        while zigzag >= 0x80:
            out.append((zigzag & 0x7F) | 0x80)
            zigzag >>= 7
        out.append(zigzag)
        return bytes(out)

    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    record = varint(len(body)) + body
    now_ms = int(time.time() * 1000)
    # attributes, lastOffsetDelta, base/max timestamp, producer id/epoch, base sequence, count
    after_crc = struct.pack(">hiqqqhii", 0, 0, now_ms, now_ms, -1, -1, -1, 1) + record
    # baseOffset, batchLength (from partitionLeaderEpoch on), partitionLeaderEpoch, magic, crc
    prefix = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc32c(after_crc))
    return prefix + after_crc


def produce_v9(proxy: ProxyThread, topic: str, value: bytes, correlation_id: int) -> Any:
    """Send one flexible Produce request through the proxy; decode the answer with our code."""
    request = ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=one_record_batch(value))
                ],
            )
        ],
    )
    frame = encode_request(request, FLEXIBLE_PRODUCE_VERSION, correlation_id, "proxy-test")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(frame)
        got_correlation, response = decode_response(
            recv_frame(sock), ProduceResponse, FLEXIBLE_PRODUCE_VERSION
        )
    assert got_correlation == correlation_id
    return response


# -- passthrough -----------------------------------------------------------------------------


def test_passthrough_delivers_records_intact_and_counts_requests(
    pair: tuple[TansuBroker, ProxyThread], request: pytest.FixtureRequest
) -> None:
    broker, proxy = pair
    topic = make_topic(broker, request)
    values = [f"record-{i}".encode() for i in range(5)]
    with producer(proxy) as client:
        errors = produce_one_by_one(client, topic, values)
    stats = proxy.statistics()
    assert errors == [None] * 5
    # One record per flush, nothing dropped: exactly one Produce round trip per record.
    assert stats.produce_requests == stats.produce_responses == 5
    assert stats.requests_by_api_key[API_VERSIONS] >= 1  # the client's handshake crossed too
    assert (stats.produce_responses_dropped, stats.connections_reset, stats.errors) == (0, 0, ())
    assert stats.responses_awaited == stats.responses_queued == 0
    assert values_in(proxy, topic, 5) == values
    assert "produce=5" in repr(proxy)


# -- drop a Produce response after the append, then close ------------------------------------


@pytest.mark.parametrize(
    ("idempotent", "expected"),
    [
        (False, [b"r0", b"r1", b"r1", b"r2"]),  # the retry of r1 is appended a second time
        (True, [b"r0", b"r1", b"r2"]),  # the broker recognises the retry's sequence
    ],
    ids=["plain-duplicates", "idempotent-deduplicates"],
)
def test_dropped_produce_response_makes_a_retry_that_only_idempotence_deduplicates(
    pair: tuple[TansuBroker, ProxyThread],
    request: pytest.FixtureRequest,
    idempotent: bool,
    expected: list[bytes],
) -> None:
    broker, proxy = pair
    topic = make_topic(broker, request)
    config = {
        "enable.idempotence": idempotent,
        "retries": 10,
        "max.in.flight.requests.per.connection": 1 if not idempotent else 5,
    }
    with producer(proxy, **config) as client:
        errors = produce_one_by_one(client, topic, [b"r0"])
        rule = proxy.faults.drop_produce_response(times=1)
        errors += produce_one_by_one(client, topic, [b"r1", b"r2"])
    stats = proxy.statistics()
    assert errors == [None, None, None]  # the client believes each was delivered once
    assert rule.hits == 1
    assert stats.produce_responses_dropped == stats.connections_closed_after_drop == 1
    assert stats.produce_requests >= 4  # r0, r1, r1 again, r2
    assert values_in(proxy, topic, len(expected)) == expected


# -- stall a response beyond request.timeout.ms ----------------------------------------------


def test_stalled_response_makes_the_client_time_out_and_retry(
    pair: tuple[TansuBroker, ProxyThread], request: pytest.FixtureRequest
) -> None:
    broker, proxy = pair
    topic = make_topic(broker, request)
    # the response is held 30 s; the client's timeout and retry take ~1-2 s (a loaded machine:
    # a few), so the bound below stands far from both
    stall_seconds = 30.0
    # librdkafka's request.timeout.ms is only the broker-side ack timeout; its client-side
    # request timeout is socket.timeout.ms (checked about once a second).
    config = {"enable.idempotence": False, "retries": 10, "socket.timeout.ms": 500}
    with producer(proxy, **config) as client:
        produce_one_by_one(client, topic, [b"warm-up"])
        rule = proxy.faults.stall_responses(stall_seconds, times=1)
        started = time.monotonic()
        errors = produce_one_by_one(client, topic, [b"slow"])
        elapsed = time.monotonic() - started
    stats = proxy.statistics()
    assert errors == [None]
    assert rule.hits == stats.produce_responses_stalled == 1
    # Delivered before the held response was due: the client gave up on it and retried.
    assert elapsed < stall_seconds / 2, elapsed
    assert stats.produce_requests >= 3
    # The broker had appended the stalled request too, so the retry duplicated it.
    assert values_in(proxy, topic, 3) == [b"warm-up", b"slow", b"slow"]


# -- added latency, and order under latency and stalls ---------------------------------------


def test_rtt_is_added_to_a_round_trip(pair: tuple[TansuBroker, ProxyThread]) -> None:
    _, proxy = pair
    proxy.faults.rtt_ms = 200
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(api_versions_v0(7))
        frame = recv_frame(sock)
        elapsed = time.monotonic() - started
    assert struct.unpack_from(">ih", frame) == (7, 0)  # correlation id, error code
    assert elapsed >= 0.2


def test_delayed_and_stalled_responses_keep_their_order(
    pair: tuple[TansuBroker, ProxyThread],
) -> None:
    _, proxy = pair
    proxy.faults.rtt_ms = 50
    proxy.faults.stall_responses(0.3, api_key=None, nth=[1])
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(b"".join(api_versions_v0(cid) for cid in range(1, 6)))
        order = [struct.unpack_from(">i", recv_frame(sock))[0] for _ in range(5)]
        elapsed = time.monotonic() - started
    # Responses 2..5 were ready long before 1 was released, yet arrive after it.
    assert order == [1, 2, 3, 4, 5]
    assert elapsed >= 0.35
    stats = proxy.statistics()
    assert stats.responses_stalled == 1 and stats.produce_responses_stalled == 0
    assert stats.responses_by_api_key[API_VERSIONS] == 5


# -- rewrite Produce responses ---------------------------------------------------------------


def test_kip1269_field_is_refused_below_produce_v14(
    pair: tuple[TansuBroker, ProxyThread], request: pytest.FixtureRequest
) -> None:
    """ProducerStateBatchesToRetain exists from ProduceResponse v14 (KIP-1269): a real v9
    answer does not carry it (its default shows) and the rewrite hook refuses to pretend it
    does. The v14 path, through a proxy in front of Kafka, is tests/chaos/test_kip1269_window.py.
    """
    broker, proxy = pair
    topic = make_topic(broker, request)
    assert broker.api_versions[PRODUCE][1] >= FLEXIBLE_PRODUCE_VERSION

    plain = produce_v9(proxy, topic, b"plain", correlation_id=11)
    [plain_partition] = plain.responses[0].partition_responses
    assert plain_partition.error_code == 0
    assert plain.responses[0].producer_state_batches_to_retain == 5
    with pytest.raises(ProxyError, match="v14"):
        set_batches_to_retain(20)(plain, 9)
    assert values_in(proxy, topic, 1) == [b"plain"]


def test_a_failing_rewrite_hook_resets_the_client_and_fails_the_proxy(tmp_path: Path) -> None:
    def broken(response: Any, version: int) -> None:
        raise ValueError("hook bug")

    # The error surfaces when the pair is stopped (the inner `with` exits first).
    with (
        pytest.raises(ProxyError, match="hook bug"),
        tansu_behind_proxy(log_dir=tmp_path) as (broker, proxy),
    ):
        broker.create_topic("hooked", 1)
        proxy.faults.rewrite_produce_responses(broken)
        with pytest.raises(ConnectionError):
            produce_v9(proxy, "hooked", b"x", correlation_id=1)
        assert len(proxy.statistics().errors) == 1


# -- resets ----------------------------------------------------------------------------------


def test_reset_on_produce_request_loses_the_request_before_the_broker(
    pair: tuple[TansuBroker, ProxyThread], request: pytest.FixtureRequest
) -> None:
    broker, proxy = pair
    topic = make_topic(broker, request)
    rule = proxy.faults.reset_on_produce_request(nth=[2])
    with producer(proxy, **{"enable.idempotence": False, "retries": 10}) as client:
        errors = produce_one_by_one(client, topic, [b"a", b"b", b"c"])
    stats = proxy.statistics()
    assert errors == [None, None, None]
    assert rule.hits == stats.produce_requests_reset == stats.connections_reset == 1
    assert stats.produce_requests == 4
    # Unlike a dropped response, the lost request was never appended: no duplicate.
    assert values_in(proxy, topic, 3) == [b"a", b"b", b"c"]


def test_reset_connections_aborts_open_connections_with_rst(
    pair: tuple[TansuBroker, ProxyThread],
) -> None:
    _, proxy = pair
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(api_versions_v0(1))
        recv_frame(sock)
        assert proxy.reset_connections() == 1
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
    stats = proxy.statistics()
    assert stats.connections_reset == 1


# -- acks=0, lifecycle -----------------------------------------------------------------------


def test_acks_zero_produce_requests_are_not_awaited(
    pair: tuple[TansuBroker, ProxyThread], request: pytest.FixtureRequest
) -> None:
    broker, proxy = pair
    topic = make_topic(broker, request)
    with producer(proxy, acks=0) as client:
        assert produce_one_by_one(client, topic, [b"fire", b"forget"]) == [None, None]
        # acks=0 "delivery" means written to the socket: the proxy may not have read it
        # yet, and the client's other requests (telemetry) may still await their answers.
        stats = wait_for_statistics(
            proxy, lambda s: s.produce_requests == 2 and s.responses_awaited == 0
        )
    # Recognised as unanswered. (Tansu does answer acks=0 requests, unlike Kafka; such answers
    # match no request and are forwarded as they are, so they never count as Produce
    # responses.) The log's content is not checked: with acks=0 even Tansu alone may drop
    # the last request when the client closes right after it.
    assert stats.produce_requests_without_response == 2
    assert stats.produce_responses == 0


async def test_the_proxy_also_runs_on_the_callers_loop(tansu: TansuBroker) -> None:
    # Latency on the caller's loop must not block that loop: a timer ticks meanwhile.
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    async with KafkaProxy(upstream=(tansu.host, tansu.port)) as proxy:
        proxy.faults.rtt_ms = 500
        ticker = asyncio.create_task(tick())
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            writer.write(api_versions_v0(3))
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
        finally:
            ticker.cancel()
            writer.close()
            await writer.wait_closed()
        assert struct.unpack_from(">ih", frame) == (3, 0)
        # ~50 expected in 500 ms, and 0 had the latency blocked the loop: a loaded machine's
        # pauses cannot bring a running loop down to 3
        assert ticks >= 3
        assert proxy.statistics().requests_by_api_key == {API_VERSIONS: 1}
    assert proxy.statistics().connections_open == 0
    assert "stopped" in repr(proxy)


def test_stop_closes_every_connection_and_the_thread() -> None:
    proxy = ProxyThread()
    proxy.start()
    try:
        # No upstream yet: the proxy accepts and closes, rather than hanging the client.
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as early:
            assert early.recv(1) == b""
        assert proxy.statistics().connections_accepted == 1
    finally:
        proxy.stop()
    assert "stopped" in repr(proxy)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()
    proxy.stop()  # idempotent


def test_stop_closes_a_held_connection(tmp_path: Path) -> None:
    with contextlib.ExitStack() as cleanup:
        with tansu_behind_proxy(log_dir=tmp_path) as (_, proxy):
            proxy.faults.stall_responses(30.0, api_key=None)
            sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
            cleanup.enter_context(sock)
            sock.sendall(api_versions_v0(1))
            wait_for_statistics(proxy, lambda s: s.responses_queued == 1)
            started = time.monotonic()
        assert sock.recv(1) == b""  # closed, not answered: the held response was discarded
    assert time.monotonic() - started < 10  # stop did not wait out the 30 s stall
    assert proxy.statistics().connections_open == 0
