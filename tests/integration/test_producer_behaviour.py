"""What a user of ``Producer`` observes against the shared Tansu broker: delivery callbacks and
interceptors, metrics, acks=0, partition choice, ``send_many`` and lifecycle errors.

Records are read back by an independent client (``support.reader``) where their content
matters.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from aiokprod import Producer, RecordMetadata
from aiokprod._murmur2 import partition_for_key as murmur2_partition
from aiokprod.devbroker import TansuBroker
from aiokprod.errors import (
    ConfigError,
    IllegalStateError,
    KafkaTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
)
from aiokprod.producer.front.sender_turns import SenderTurns
from aiokprod.records import RecordBatchBuilder
from support.reader import read_back
from support.waits import eventually, topic_known

Headers = Sequence[tuple[str, bytes | None]] | None
SendArgs = tuple[str, Any, Any, "int | None", "int | None", Headers]


class Tagger:
    """Appends ``!`` to every value and a header; records every acknowledgement."""

    def __init__(self) -> None:
        self.sent = 0
        self.acks: list[tuple[RecordMetadata | None, BaseException | None]] = []
        self.ack_threads: set[int] = set()
        self.ack_loops: set[int] = set()

    def on_send(self, topic: str, value: bytes, key: bytes | None, partition: int | None,
                timestamp_ms: int | None, headers: Headers) -> SendArgs:
        self.sent += 1
        return (topic, value + b"!", key, partition, timestamp_ms,
                [*(headers or []), ("via", b"tagger")])

    def on_acknowledgement(self, metadata: RecordMetadata | None,
                           error: BaseException | None) -> None:
        self.ack_threads.add(threading.get_ident())
        self.ack_loops.add(id(asyncio.get_running_loop()))  # raises if not on a loop
        self.acks.append((metadata, error))


class Broken:
    """An interceptor with bugs in both hooks."""

    def __init__(self) -> None:
        self.calls = 0

    def on_send(self, *args: object) -> None:
        self.calls += 1
        raise RuntimeError("on_send bug")

    def on_acknowledgement(self, metadata: RecordMetadata | None,
                           error: BaseException | None) -> None:
        self.calls += 1
        raise RuntimeError("on_acknowledgement bug")


# ------------------------------------------------------------------------ callbacks, interceptors


async def test_delivery_callbacks_run_on_the_loop_in_send_order(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    loop = asyncio.get_running_loop()
    called: list[tuple[int, int, bool]] = []  # (index, offset, on the loop's thread)

    def callback_for(index: int) -> Callable[[asyncio.Future[RecordMetadata]], None]:
        def callback(future: asyncio.Future[RecordMetadata]) -> None:
            on_loop = asyncio.get_running_loop() is loop and \
                threading.get_ident() == threading.main_thread().ident
            called.append((index, future.result().offset, on_loop))
        return callback

    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5) as producer:
        futures = []
        for i in range(40):
            future = await producer.send(topic, f"r{i}".encode())
            future.add_done_callback(callback_for(i))
            futures.append(future)
        await producer.flush()
        await asyncio.sleep(0)  # done callbacks are scheduled with call_soon
    assert [i for i, _o, _l in called] == list(range(40))
    offsets = [o for _i, o, _l in called]
    assert offsets == sorted(offsets) and len(set(offsets)) == 40
    assert all(on_loop for _i, _o, on_loop in called)


async def test_interceptors_modify_records_and_see_every_acknowledgement(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    tagger = Tagger()
    loop_id = id(asyncio.get_running_loop())
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5,
                        interceptors=[tagger]) as producer:
        futures = [await producer.send(topic, f"v{i}".encode(), key=f"k{i % 3}".encode())
                   for i in range(30)]
        metas = await asyncio.gather(*futures)
    assert tagger.sent == 30
    assert sorted((m.partition, m.offset) for m, _e in tagger.acks if m is not None) == sorted(
        (m.partition, m.offset) for m in metas)
    assert all(e is None for _m, e in tagger.acks)
    assert tagger.ack_threads == {threading.main_thread().ident}
    assert tagger.ack_loops == {loop_id}
    records = read_back(tansu.bootstrap, topic, expected=30)
    assert sorted(r.value or b"" for r in records) == sorted(f"v{i}!".encode() for i in range(30))
    assert all(r.headers == [("via", b"tagger")] for r in records)
    # the modified value's size is what the metadata reports
    assert sorted(m.serialized_value_size for m in metas) == sorted(
        len(f"v{i}!") for i in range(30))


async def test_an_interceptor_that_raises_does_not_lose_records(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    tagger, broken = Tagger(), Broken()
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5,
                        interceptors=[tagger, broken]) as producer:
        futures = [await producer.send(topic, f"v{i}".encode()) for i in range(20)]
        metas = await asyncio.wait_for(asyncio.gather(*futures), 10)
    assert all(m.offset >= 0 for m in metas)
    assert broken.calls == 40  # 20 on_send + 20 on_acknowledgement, each raised
    assert len(tagger.acks) == 20
    records = read_back(tansu.bootstrap, topic, expected=20)
    # the broken interceptor's on_send failure kept the record as the tagger made it
    assert [r.value for r in records] == [f"v{i}!".encode() for i in range(20)]



async def test_a_raising_interceptor_does_not_hide_acknowledgements_from_the_next(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    broken, tagger = Broken(), Tagger()
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5,
                        interceptors=[broken, tagger]) as producer:
        futures = [await producer.send(topic, f"v{i}".encode()) for i in range(10)]
        await asyncio.wait_for(asyncio.gather(*futures), 10)
    assert tagger.sent == 10  # on_send is guarded per interceptor (Java's rule)...
    assert len(tagger.acks) == 10  # ...and so must on_acknowledgement be


class Recorder:
    """Records what each hook is called with and changes nothing."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.acks: list[tuple[RecordMetadata | None, BaseException | None]] = []

    def on_send(self, topic: str, value: bytes, *rest: object) -> None:
        self.sent.append(value)

    def on_acknowledgement(self, metadata: RecordMetadata | None,
                           error: BaseException | None) -> None:
        self.acks.append((metadata, error))


async def test_interceptors_are_told_of_failures_send_raises_itself(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    """A record on_send saw and send() then refused (too large, no such partition within
    max.block.ms, bad input, cancelled while waiting) reaches on_acknowledgement with that
    error, as Java's onSendError tells interceptors; the pairing one on_send → one
    on_acknowledgement holds for every record."""
    topic = new_topic(partitions=1)
    recorder = Recorder()
    # max.block.ms: the partition-99 sends wait that long; the second must still be waiting
    # when it is cancelled 50 ms later, on a loaded machine too
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5, max_block_ms=2000,
                        max_request_size=10_000, interceptors=[recorder]) as producer:
        await topic_known(producer, topic)
        with pytest.raises(RecordTooLargeError) as too_large:
            await producer.send(topic, b"x" * 20_000)
        with pytest.raises(KafkaTimeoutError) as no_partition:
            await producer.send(topic, b"p", partition=99)
        with pytest.raises(TypeError) as bad_type:
            await producer.send(topic, "text")  # type: ignore[arg-type]
        waiting = asyncio.ensure_future(producer.send(topic, b"c", partition=99))
        await asyncio.sleep(0.05)  # waiting for partition 99 to appear
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        meta = await asyncio.wait_for(await producer.send(topic, b"fine"), 10)
    assert len(recorder.sent) == 5
    assert [(m, type(e)) for m, e in recorder.acks] == [
        (None, RecordTooLargeError), (None, KafkaTimeoutError), (None, TypeError),
        (None, asyncio.CancelledError), (meta, type(None))]
    assert recorder.acks[0][1] is too_large.value
    assert recorder.acks[1][1] is no_partition.value
    assert recorder.acks[2][1] is bad_type.value


async def test_a_slow_callback_runs_after_its_whole_batch_is_complete(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    done_when_slow_ran: list[list[bool]] = []
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=10_000) as producer:
        futures = [await producer.send(topic, f"r{i}".encode()) for i in range(50)]

        def slow(_future: asyncio.Future[RecordMetadata]) -> None:
            done_when_slow_ran.append([f.done() for f in futures])
            time.sleep(0.2)  # blocks the loop once, on purpose

        futures[0].add_done_callback(slow)
        await producer.flush()  # linger is long: the 50 records went as one batch
        metas = [f.result() for f in futures]
    assert [m.offset for m in metas] == list(range(metas[0].offset, metas[0].offset + 50))
    # completion is per batch: every result was set before any callback ran
    assert done_when_slow_ran == [[True] * 50]



async def test_a_full_batch_is_sent_without_waiting_for_linger(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=30_000,
                        batch_size=1024) as producer:
        warm = await producer.send(topic, b"warm-up")
        await producer.flush()
        await warm
        first = await producer.send(topic, b"x" * 450)
        for _ in range(5):  # the sender looks once (not full yet) and sleeps for linger_ms
            await asyncio.sleep(0)
        assert not first.done()
        second = await producer.send(topic, b"x" * 450)  # no room for a third: full
        # generous (a woken sender takes ms), yet a third of linger_ms (30 s)
        await asyncio.wait_for(second, 10)
        assert first.done()


# ------------------------------------------------------------------------------------ metrics


async def test_metrics_after_sending(tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    buffer_memory = 8 * 1024 * 1024
    count = 120
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5,
                        buffer_memory=buffer_memory, client_id="metrics-test") as producer:
        assert producer.metrics()["producer-metrics:record-send-total"] == 0
        futures = [await producer.send(topic, b"x" * 50, key=f"{i}".encode())
                   for i in range(count)]
        await producer.flush()
        await asyncio.gather(*futures)
        metrics = producer.metrics()
    assert metrics["producer-metrics:record-send-total"] == count
    assert metrics[f"producer-topic-metrics:record-send-total{{topic={topic}}}"] == count
    assert metrics["producer-metrics:batch-size-avg"] > 0
    assert metrics["producer-metrics:request-latency-avg"] > 0
    assert metrics["producer-metrics:buffer-total-bytes"] == buffer_memory
    assert metrics["producer-metrics:requests-in-flight"] == 0
    assert metrics["producer-metrics:batch-split-total"] == 0


# ------------------------------------------------------------------------------------ acks=0


async def test_acks_zero_resolves_with_offset_minus_one_and_records_arrive(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    async with Producer(bootstrap_servers=tansu.bootstrap, acks=0, linger_ms=5) as producer:
        assert not producer.config.enable_idempotence
        futures = [await producer.send(topic, f"a{i}".encode()) for i in range(25)]
        metas = await asyncio.wait_for(asyncio.gather(*futures), 10)
        # the connection stays usable after requests that got no answer
        futures = [await producer.send(topic, f"b{i}".encode()) for i in range(25)]
        metas += await asyncio.wait_for(asyncio.gather(*futures), 10)
    assert {m.offset for m in metas} == {-1}
    assert all(m.topic == topic and m.partition == 0 for m in metas)
    records = read_back(tansu.bootstrap, topic, expected=50)
    assert [r.value for r in records] == [f"a{i}".encode() for i in range(25)] + [
        f"b{i}".encode() for i in range(25)]


# --------------------------------------------------------------------------------- partitions


async def test_explicit_partition_and_out_of_range_partition(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=0,
                        max_block_ms=500) as producer:
        await topic_known(producer, topic)  # its first metadata is not what is tested
        metas = [await producer.send_and_wait(topic, b"p", key=b"same-key", partition=p)
                 for p in (1, 0, 1)]
        assert [m.partition for m in metas] == [1, 0, 1]
        # as in Java, a partition not (yet) in the metadata is waited for up to max.block.ms
        with pytest.raises(KafkaTimeoutError,
                           match=f"Partition 2 of topic '{topic}' with partition count 2"):
            await producer.send(topic, b"nope", partition=2)
        assert producer._acc is not None and not producer._acc.has_queued()


async def test_custom_partitioner_is_used(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=3)
    calls: list[tuple[str, bytes | None, tuple[int, ...], tuple[int, ...]]] = []

    def last_partition(topic: str, key: bytes | None, partitions: Sequence[int],
                       available: Sequence[int]) -> int:
        calls.append((topic, key, tuple(partitions), tuple(available)))
        return 2

    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=0,
                        partitioner=last_partition) as producer:
        metas = [await producer.send_and_wait(topic, b"v", key=k) for k in (b"a", None, b"c")]
        explicit = await producer.send_and_wait(topic, b"v", partition=0)
    assert [m.partition for m in metas] == [2, 2, 2]
    assert calls == [(topic, k, (0, 1, 2), (0, 1, 2)) for k in (b"a", None, b"c")]
    assert explicit.partition == 0  # an explicit partition bypasses the partitioner


@pytest.mark.parametrize("ignore_keys", [False, True])
async def test_partitioner_ignore_keys_spreads_one_key_by_stickiness(
    tansu: TansuBroker, new_topic: Callable[..., str], ignore_keys: bool
) -> None:
    topic = new_topic(partitions=4)
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=0, batch_size=1024,
                        partitioner_ignore_keys=ignore_keys) as producer:
        futures = [await producer.send(topic, b"x" * 200, key=b"one-key") for _ in range(80)]
        metas = await asyncio.gather(*futures)
    per_partition = Counter(m.partition for m in metas)
    if not ignore_keys:
        assert len(per_partition) == 1  # murmur2(key): one partition
    else:
        # ~16 KB through a sticky partitioner switching every 1 KB: 15+ draws over 4 partitions
        assert len(per_partition) >= 2, per_partition
        # sticky, not round-robin: consecutive records mostly share a partition
        runs = 1 + sum(a.partition != b.partition for a, b in itertools.pairwise(metas))
        assert runs <= 30, runs


async def test_unkeyed_records_switch_partition_on_a_batch_boundary(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    """The sticky partitioner leaves a partition only once its last batch is full (Java's
    enableSwitch), so every run of consecutive records on one partition ends where a batch
    ends. Records of one size and one timestamp fill every batch with the same count, so a run
    ends at an offset that count divides. Counting bytes alone, the first run ended at the
    11th record, leaving a batch of 3 behind."""
    topic = new_topic(partitions=4)
    value, ts = b"v" * 100, 1_700_000_000_000
    builder = RecordBatchBuilder(bytearray(), write_limit=1024)  # what batch.size=1024 holds
    per_batch = 0
    while builder.try_append(ts, None, value):
        per_batch += 1
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=10_000,
                        batch_size=1024) as producer:
        futures = [await producer.send(topic, value, timestamp_ms=ts) for _ in range(300)]
        await asyncio.wait_for(producer.flush(), 20)
        metas = [f.result() for f in futures]
    runs = [list(run) for _p, run in itertools.groupby(metas, key=lambda m: m.partition)]
    assert len(runs) >= 5, [len(r) for r in runs]
    ends = [(run[-1].partition, run[-1].offset + 1) for run in runs[:-1]]
    assert all(end % per_batch == 0 for _p, end in ends), (per_batch, ends)


# ------------------------------------------------------------------------------------ send_many


async def test_send_many_resolves_to_metadata_in_input_order(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=3)
    values = [f"m{i}".encode() for i in range(60)]
    keys = [f"k{i % 5}".encode() for i in range(60)]
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5) as producer:
        many = await producer.send_many(topic, values, keys)
        result = await asyncio.wait_for(many, 10)
        empty = await asyncio.wait_for(await producer.send_many(topic, []), 10)  # not never
    assert len(empty) == 0 and list(empty) == []
    assert len(result) == 60
    metas = list(result)
    assert all(isinstance(m, RecordMetadata) and m.topic == topic for m in metas)
    records = read_back(tansu.bootstrap, topic, expected=60)
    by_position = {(r.partition, r.offset): r for r in records}
    assert [by_position[(m.partition, m.offset)].value for m in metas] == values
    assert [by_position[(m.partition, m.offset)].key for m in metas] == keys


async def test_send_many_asks_the_partitioner_per_record_for_a_none_key_or_a_custom_one(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    """The one-pass grouping of keys (native or its twin) applies only to the built-in rule
    with every key bytes: a None key among them, or a custom partitioner, takes the per-record
    path, and the records still land where the partitioner says, answered in input order."""
    topic = new_topic(partitions=3)
    values = [f"m{i}".encode() for i in range(30)]
    keys: list[bytes | None] = [f"k{i % 5}".encode() for i in range(30)]
    keys[7] = None
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5) as producer:
        mixed = list(await asyncio.wait_for(await producer.send_many(topic, values, keys), 10))
    assert all(m.partition == murmur2_partition(k, 3) for m, k in zip(mixed, keys, strict=True)
               if k is not None)
    assert mixed[7].partition in range(3)

    def last_byte(key: bytes | None, partitions: Sequence[int]) -> int:
        return (key or b"\x00")[-1] % len(partitions)

    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5,
                        partitioner=lambda _t, key, parts, _avail: last_byte(key, parts)
                        ) as producer:
        custom = list(await asyncio.wait_for(await producer.send_many(topic, values, keys), 10))
    assert [m.partition for m in custom] == [last_byte(k, range(3)) for k in keys]
    records = read_back(tansu.bootstrap, topic, expected=60)
    by_position = {(r.partition, r.offset): r for r in records}
    for metas in (mixed, custom):
        assert [by_position[(m.partition, m.offset)].value for m in metas] == values


# ------------------------------------------------------------------------------------ lifecycle


async def test_close_twice_is_harmless_and_send_after_close_fails(tansu: TansuBroker) -> None:
    producer = Producer(bootstrap_servers=tansu.bootstrap)
    await producer.start()
    await producer.close()
    await asyncio.wait_for(producer.close(), 10)  # at once; a hang would be never
    with pytest.raises(ProducerClosedError, match="closed"):
        await producer.send("any", b"x")


async def test_send_before_start_raises_a_clear_error(tansu: TansuBroker) -> None:
    producer = Producer(bootstrap_servers=tansu.bootstrap)
    with pytest.raises(IllegalStateError, match=r"not started.*producer\.start\(\)"):
        await producer.send("any", b"x")
    await producer.close()  # closing a producer that never started is harmless too


def test_from_config_with_an_unknown_key_names_it() -> None:
    with pytest.raises(ConfigError, match=r"'linger\.msec'.*did you mean 'linger\.ms'"):
        Producer.from_config({"bootstrap.servers": "localhost:9092", "linger.msec": 5})
    producer = Producer.from_config({"bootstrap.servers": "localhost:9092", "linger.ms": "7"})
    assert producer.config.linger_ms == 7


async def test_close_leaves_no_task_behind_and_survives_cancellation(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    """DESIGN: close() is shielded from cancellation and leaves no task behind."""
    topic = new_topic()
    before = asyncio.all_tasks()
    producer = Producer(bootstrap_servers=tansu.bootstrap, linger_ms=50)
    await producer.start()
    pending = [await producer.send(topic, f"{i}".encode()) for i in range(20)]
    closing = asyncio.ensure_future(producer.close())
    await asyncio.sleep(0)
    closing.cancel()  # the caller gives up; the shutdown itself must still finish
    with pytest.raises(asyncio.CancelledError):
        await closing
    await eventually(lambda: all(f.done() for f in pending)
                     and asyncio.all_tasks() <= before | {asyncio.current_task()})
    assert all(f.done() and not f.cancelled() and f.exception() is None for f in pending)
    leftover = asyncio.all_tasks() - before - {asyncio.current_task()}
    assert not leftover, leftover


async def test_send_suspends_only_once_per_batch_when_metadata_and_memory_are_there(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    """send() queues the record without waiting, except for one loop turn after a batch
    filled or opened (so the sender runs). Driven by hand, each call finishes on its first or
    second step (StopIteration carries the delivery future); second steps are at most one per
    batch."""
    topic = new_topic(partitions=1)
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=0,
                        batch_size=4096) as producer:
        await producer.send_and_wait(topic, b"metadata is known now")
        suspended = 0
        for i in range(500):  # ~1 KB records: three to a 4 KiB batch, so 167 batches
            coro = producer.send(topic, f"{i:04d}".encode() * 250)
            steps = 0
            with pytest.raises(StopIteration) as finished:
                while True:
                    steps += 1
                    assert steps <= 2, "send() suspended more than once"
                    coro.send(None)
            suspended += steps - 1
            delivery = finished.value.value
            assert isinstance(delivery, asyncio.Future)
        await producer.flush()
        assert delivery.done() and delivery.result().offset >= 0
        # at most one turn when a batch opened and one when it filled
        assert 167 <= suspended <= 2 * 167, suspended


async def test_send_turns_are_spaced_in_time_not_taken_at_every_batch(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    """With linger.ms > 0 a turn is due at most once per spacing (min(0.5 ms, linger.ms)):
    with the turns' clock held still, 167 batches filling and opening give one turn, where
    linger.ms=0 (the test above) gives one per batch."""
    topic = new_topic(partitions=1)
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5,
                        batch_size=4096) as producer:
        await producer.send_and_wait(topic, b"metadata is known now")
        producer._turns = SenderTurns(5, clock=lambda: 0.0)
        producer._yield_due = False  # a turn the warm-up left due
        suspended = 0
        for i in range(500):
            coro = producer.send(topic, f"{i:04d}".encode() * 250)
            with pytest.raises(StopIteration):
                while True:
                    coro.send(None)
                    suspended += 1
        await producer.flush()
    assert suspended == 1, suspended


async def test_a_tight_send_loop_lets_the_sender_run(
    tansu: TansuBroker, new_topic: Callable[..., str]
) -> None:
    """Issue 16: a loop that awaits nothing but send() used to starve the sender until memory
    ran out: no record was acknowledged before the loop ended. Now send() yields once per
    filled batch, so acknowledgements arrive while the loop still runs."""
    topic = new_topic(partitions=1)
    async with Producer(bootstrap_servers=tansu.bootstrap, linger_ms=5) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        futures = [await producer.send(topic, b"x" * 100) for _ in range(30_000)]
        done_during_loop = sum(f.done() for f in futures)
        await asyncio.gather(*futures)
    assert done_during_loop > 0, "the sender never ran during a 30,000-record send loop"
