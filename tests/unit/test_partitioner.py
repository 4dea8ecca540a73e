"""Partitioner: murmur2 bit-for-bit with Java/librdkafka, uniform sticky, adaptive, availability."""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import random
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokprod._murmur2 import murmur2, partition_for_key, to_positive
from aiokprod.config import ProducerConfig
from aiokprod.producer.batch import ProducerBatch
from aiokprod.producer.batching.accumulator import RecordAccumulator
from aiokprod.producer.batching.buffer_pool import BufferPool
from aiokprod.producer.batching.partitioner import BuiltinPartitioner
from aiokprod.producer.partition import PartitionProducer
from aiokprod.records import RecordBatchBuilder

# Values of org.apache.kafka.common.utils.Utils.murmur2 (signed, as Java returns them).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
TOPIC = "t"
TS = 1_700_000_000_000


def slow_murmur2(data: bytes) -> int:
    """Byte-at-a-time transcription of the algorithm with 32-bit wrapping after every step."""
    mask, m = 0xFFFFFFFF, 0x5BD1E995
    h = (0x9747B28C ^ len(data)) & mask
    full = len(data) - len(data) % 4
    for i in range(0, full, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rest = len(data) % 4
    if rest >= 3:
        h ^= data[full + 2] << 16
    if rest >= 2:
        h ^= data[full + 1] << 8
    if rest >= 1:
        h ^= data[full]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def _librdkafka() -> ctypes.CDLL:
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or spec.origin is None:
        pytest.skip("confluent-kafka is not installed")
    site = os.path.dirname(os.path.dirname(spec.origin))
    found = glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka-*.so.1"))
    if not found:
        pytest.skip("no bundled librdkafka next to confluent_kafka")
    return ctypes.CDLL(found[0])


@pytest.fixture(scope="module")
def rdkafka_murmur2() -> ctypes.CDLL:
    lib = _librdkafka()
    # rdkafka_msg.c: for a non-NULL key both functions return
    # (rd_murmur2(key, keylen) & 0x7fffffff) % partition_cnt and never touch rkt or opaques.
    for name in ("rd_kafka_msg_partitioner_murmur2", "rd_kafka_msg_partitioner_murmur2_random"):
        fn = getattr(lib, name)
        fn.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32,
            ctypes.c_void_p, ctypes.c_void_p,
        ]
        fn.restype = ctypes.c_int32
    return lib


# -- murmur2 --------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_VECTORS.items()))
def test_java_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert murmur2(bytearray(key)) == expected
    assert murmur2(memoryview(key)) == expected


def test_to_positive_clears_sign_bit_not_abs() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5


@given(st.binary(max_size=600))
def test_matches_byte_at_a_time_transcription(data: bytes) -> None:
    assert murmur2(data) == slow_murmur2(data)


def test_bit_for_bit_with_librdkafka(rdkafka_murmur2: ctypes.CDLL) -> None:
    plain = rdkafka_murmur2.rd_kafka_msg_partitioner_murmur2
    keyed_random = rdkafka_murmur2.rd_kafka_msg_partitioner_murmur2_random
    rng = random.Random(97)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", *JAVA_VECTORS]
    keys += [rng.randbytes(rng.randint(0, 300)) for _ in range(4000)]
    for i, key in enumerate(keys):
        # 31 hash bits through the largest partition count, then real partition counts.
        assert plain(None, key, len(key), 2**31 - 1, None, None) == (
            to_positive(murmur2(key)) % (2**31 - 1)
        ), key
        n = i % 100 + 1
        expected = partition_for_key(key, n)
        assert plain(None, key, len(key), n, None, None) == expected, (key, n)
        if i % 10 == 0:
            assert keyed_random(None, key, len(key), n, None, None) == expected


def test_keyed_records_use_murmur2() -> None:
    part = BuiltinPartitioner(batch_size=100, rng=random.Random(1))
    parts = list(range(7))
    for key in (b"k1", b"another key", b""):
        expected = to_positive(murmur2(key)) % 7
        assert part.partition(TOPIC, key, b"v", parts, parts) == expected
        # Unavailable partitions do not change where a key goes (ordering per key).
        assert part.partition(TOPIC, key, b"v", parts, []) == expected


# -- uniform sticky --------------------------------------------------------------------------


def test_sticks_until_batch_size_bytes_then_switches() -> None:
    part = BuiltinPartitioner(batch_size=100, rng=random.Random(3))
    parts = list(range(50))
    first = part.partition(TOPIC, None, b"x", parts, parts)
    for _ in range(3):
        part.on_append(TOPIC, first, 30)
        assert part.partition(TOPIC, None, b"x", parts, parts) == first
    assert part.statistics(TOPIC).produced_bytes == 90
    part.on_append(TOPIC, (first + 1) % 50, 500)  # another partition's bytes do not count
    assert part.statistics(TOPIC).sticky_partition == first
    part.on_append(TOPIC, first, 10)  # 100 bytes: the next unkeyed record draws again
    assert part.statistics(TOPIC).switches == 1
    part.partition(TOPIC, None, b"x", parts, parts)
    stats = part.statistics(TOPIC)
    assert stats.switches == 2 and stats.produced_bytes == 0


def _batch(partition: int, records: int) -> ProducerBatch:
    """A real batch holding ``records`` 100-byte records (8 fill its 1024 bytes)."""
    builder = RecordBatchBuilder(bytearray(), write_limit=1024)
    for _ in range(records):
        assert builder.try_append(TS, None, b"v" * 100)
    return ProducerBatch(PartitionProducer(TOPIC, partition), bytearray(), 1024, builder, 0.0, TS)


def test_switch_waits_for_the_last_batch_to_fill_up_to_twice_batch_size() -> None:
    """Java's enableSwitch: a batch's worth of bytes is not enough while the partition's last
    batch has room; a full (or sent) last batch, or twice batch.size, switches."""
    last: dict[int, ProducerBatch | None] = {}
    part = BuiltinPartitioner(batch_size=100, rng=random.Random(3),
                              last_batch=lambda topic, p: last.get(p))
    parts = list(range(4))
    p = part.partition(TOPIC, None, None, parts, parts)
    last[p] = _batch(p, 3)  # room for 5 more
    part.on_append(TOPIC, p, 150)
    assert part.partition(TOPIC, None, None, parts, parts) == p
    assert part.statistics(TOPIC).switches == 1
    watched = last[p]
    assert watched is not None
    for _ in range(5):
        assert part.place(TOPIC, None, None, parts, parts, 0) == p
        assert watched.builder.try_append(TS, None, b"v" * 100)
    assert watched.builder.is_full()
    part.place(TOPIC, None, None, parts, parts, 0)  # the batch filled: a new draw
    assert part.statistics(TOPIC).switches == 2

    q = part.statistics(TOPIC).sticky_partition
    assert q is not None
    last[q] = _batch(q, 1)
    part.on_append(TOPIC, q, 150)
    part.partition(TOPIC, None, None, parts, parts)
    assert part.statistics(TOPIC).switches == 2  # last batch not full: stay
    sent = last[q]
    assert sent is not None
    sent.seal()  # sent as it was (it lingered out): nothing more goes into it
    part.partition(TOPIC, None, None, parts, parts)
    assert part.statistics(TOPIC).switches == 3

    q = part.statistics(TOPIC).sticky_partition
    assert q is not None
    last[q] = _batch(q, 1)
    part.on_append(TOPIC, q, 150)
    part.partition(TOPIC, None, None, parts, parts)
    assert part.statistics(TOPIC).switches == 3  # last batch not full: stay
    part.on_append(TOPIC, q, 50)  # 200 bytes, twice batch.size: switch whatever the batch
    part.partition(TOPIC, None, None, parts, parts)
    assert part.statistics(TOPIC).switches == 4

    r = part.statistics(TOPIC).sticky_partition
    assert r is not None
    last[r] = None  # nothing queued (all sent): every batch is full
    part.on_append(TOPIC, r, 100)
    part.partition(TOPIC, None, None, parts, parts)
    assert part.statistics(TOPIC).switches == 5


async def test_unkeyed_records_leave_a_partition_only_with_its_last_batch_full() -> None:
    """With the real accumulator asked as the producer asks it: every switch leaves the
    partition with its last batch full. Counting bytes alone, the switch came at the 11th
    100-byte record (1100 >= batch.size 1024) and left a batch of 3 records behind, to be
    sent alone once it lingered out."""
    clock = lambda: 0.0  # noqa: E731 - nothing here waits
    pool = BufferPool(1 << 20, 1024, clock=clock)
    acc = RecordAccumulator(pool=pool, batch_size=1024, linger_ms=10_000,
                            delivery_timeout_ms=60_000, clock=clock)

    part = BuiltinPartitioner(batch_size=1024, rng=random.Random(7),
                              last_batch=acc.last_queued_batch)
    parts = list(range(4))
    value = b"v" * 100
    previous = None
    left_full = 0
    for _ in range(400):
        p = part.place(TOPIC, None, value, parts, parts, len(value))
        if previous is not None and p != previous:
            left = acc.queued_batches(TOPIC, previous)
            assert left[-1].builder.is_full(), [b.record_count for b in left]
            left_full += 1
        assert acc.try_append(TOPIC, p, TS, None, value, None) is not None
        previous = p
    assert left_full >= 10
    assert part.statistics(TOPIC).switches > left_full  # some draws picked the same one


def test_uniform_over_many_switches() -> None:
    part = BuiltinPartitioner(batch_size=10, rng=random.Random(11))
    parts = list(range(10))
    counts: Counter[int] = Counter()
    for _ in range(5000):
        p = part.partition(TOPIC, None, b"v", parts, parts)
        counts[p] += 1
        part.on_append(TOPIC, p, 10)
    assert set(counts) == set(parts)
    assert all(400 <= c <= 600 for c in counts.values()), counts


def test_only_available_partitions_when_any() -> None:
    part = BuiltinPartitioner(batch_size=1, rng=random.Random(5))
    parts = list(range(10))
    seen = set()
    for _ in range(300):
        p = part.partition(TOPIC, None, b"v", parts, [2, 5])
        seen.add(p)
        part.on_append(TOPIC, p, 1)
    assert seen == {2, 5}
    seen.clear()
    for _ in range(300):
        p = part.partition(TOPIC, None, b"v", parts, [])
        seen.add(p)
        part.on_append(TOPIC, p, 1)
    assert seen == set(parts)  # nothing available: any partition, as Java


def test_partition_count_change_forces_redraw() -> None:
    part = BuiltinPartitioner(batch_size=10**6, rng=random.Random(8))
    p = part.partition(TOPIC, None, b"v", list(range(3)), list(range(3)))
    assert part.partition(TOPIC, None, b"v", list(range(3)), list(range(3))) == p
    part.partition(TOPIC, None, b"v", list(range(6)), list(range(6)))
    assert part.statistics(TOPIC).switches == 2


def test_topics_are_independent() -> None:
    part = BuiltinPartitioner(batch_size=100, rng=random.Random(2))
    parts = list(range(100))
    a = part.partition("a", None, None, parts, parts)
    part.partition("b", None, None, parts, parts)
    part.on_append("b", part.statistics("b").sticky_partition or 0, 1000)
    assert part.partition("a", None, None, parts, parts) == a


def test_ignore_keys_makes_keyed_records_sticky() -> None:
    part = BuiltinPartitioner(batch_size=1000, ignore_keys=True, rng=random.Random(4))
    parts = list(range(20))
    chosen = {part.partition(TOPIC, f"key-{i}".encode(), b"v", parts, parts) for i in range(50)}
    assert len(chosen) == 1
    normal = BuiltinPartitioner(batch_size=1000, rng=random.Random(4))
    assert len({normal.partition(TOPIC, f"key-{i}".encode(), b"v", parts, parts)
                for i in range(50)}) > 1


def test_batch_size_zero_switches_every_record() -> None:
    part = BuiltinPartitioner(batch_size=0, rng=random.Random(4))
    parts = list(range(3))
    for n in range(1, 6):
        p = part.partition(TOPIC, None, b"v", parts, parts)
        part.on_append(TOPIC, p, 1)
        assert part.statistics(TOPIC).switches == n


def test_no_partitions_is_an_error_naming_the_topic() -> None:
    part = BuiltinPartitioner(batch_size=10)
    with pytest.raises(ValueError, match="'t'"):
        part.partition(TOPIC, None, b"v", [], [])


# -- adaptive (KIP-794) --------------------------------------------------------------------------


def test_cumulative_frequency_table_as_javas_example() -> None:
    part = BuiltinPartitioner(batch_size=10)
    part.update_partition_load_stats(TOPIC, [0, 3, 1], [0, 1, 2], 3)
    state = part._topics[TOPIC].load_stats
    assert state is not None
    assert state.cumulative_frequency == (4, 5, 8)
    assert part.statistics(TOPIC).weighted


def test_equal_queues_mean_no_weighting() -> None:
    part = BuiltinPartitioner(batch_size=10)
    part.update_partition_load_stats(TOPIC, [2, 2, 2], [0, 1, 2], 3)
    assert not part.statistics(TOPIC).weighted
    part.update_partition_load_stats(TOPIC, [2, 2, 2], [0, 2, -1], 2)  # one left out: weighted
    assert part.statistics(TOPIC).weighted
    part.update_partition_load_stats(TOPIC, None, [], 0)
    assert not part.statistics(TOPIC).weighted


def test_adaptive_avoids_partition_with_long_queue() -> None:
    part = BuiltinPartitioner(batch_size=1, rng=random.Random(21))
    parts = list(range(4))
    part.update_partition_load_stats(TOPIC, [0, 30, 0, 0], parts, 4)
    counts: Counter[int] = Counter()
    for _ in range(4000):
        p = part.partition(TOPIC, None, b"v", parts, parts)
        counts[p] += 1
        part.on_append(TOPIC, p, 1)
    # Weights 31, 1, 31, 31: partition 1 gets ~1/94 of the switches.
    assert counts[1] < 0.03 * 4000
    assert all(counts[p] > 0.28 * 4000 for p in (0, 2, 3)), counts


def test_adaptive_off_ignores_queue_sizes() -> None:
    part = BuiltinPartitioner(batch_size=1, adaptive=False, rng=random.Random(21))
    parts = list(range(4))
    part.update_partition_load_stats(TOPIC, [0, 30, 0, 0], parts, 4)
    assert not part.statistics(TOPIC).weighted
    counts: Counter[int] = Counter()
    for _ in range(4000):
        p = part.partition(TOPIC, None, b"v", parts, parts)
        counts[p] += 1
        part.on_append(TOPIC, p, 1)
    assert counts[1] > 0.2 * 4000


def test_availability_timeout_excludes_slow_leader_until_it_drains() -> None:
    part = BuiltinPartitioner(batch_size=1, availability_timeout_ms=100, rng=random.Random(6))
    parts = [0, 1, 2, 3]
    leaders = {0: 10, 1: 11, 2: 10, 3: 12}
    part.update_node_latency_stats(11, 0, can_drain=True)
    part.update_node_latency_stats(11, 100, can_drain=False)
    assert part.is_node_available(11)  # exactly the timeout: still available
    part.update_node_latency_stats(11, 101, can_drain=False)
    assert not part.is_node_available(11) and part.is_node_available(10)

    def draws() -> set[int]:
        part.update_queue_sizes(TOPIC, [(p, leaders[p], 0) for p in parts])
        seen = set()
        for _ in range(400):
            p = part.partition(TOPIC, None, b"v", parts, parts)
            seen.add(p)
            part.on_append(TOPIC, p, 1)
        return seen

    assert draws() == {0, 2, 3}
    part.update_node_latency_stats(11, 150, can_drain=True)
    assert draws() == {0, 1, 2, 3}


def test_partitions_without_leader_are_left_out_of_weights() -> None:
    part = BuiltinPartitioner(batch_size=1, rng=random.Random(6))
    part.update_queue_sizes(TOPIC, [(0, 1, 0), (1, None, 0), (2, 1, 0)])
    seen = set()
    for _ in range(200):
        p = part.partition(TOPIC, None, b"v", [0, 1, 2], [0, 1, 2])
        seen.add(p)
        part.on_append(TOPIC, p, 1)
    assert seen == {0, 2}


def test_availability_timeout_needs_adaptive() -> None:
    part = BuiltinPartitioner(batch_size=1, adaptive=False, availability_timeout_ms=100)
    part.update_node_latency_stats(11, 0, can_drain=True)
    part.update_node_latency_stats(11, 10_000, can_drain=False)
    assert part.is_node_available(11)


# -- custom partitioner -----------------------------------------------------------------------


def test_custom_partitioner_gets_key_and_partitions() -> None:
    calls: list[tuple[str, bytes | None, Sequence[int], Sequence[int]]] = []

    def mine(topic: str, key: bytes | None, all_p: Sequence[int], avail: Sequence[int]) -> int:
        calls.append((topic, key, all_p, avail))
        return len(all_p) - 1

    part = BuiltinPartitioner(batch_size=10, custom=mine)
    assert part.partition(TOPIC, b"k", b"v", [0, 1, 2], [1]) == 2
    assert part.partition(TOPIC, None, b"v", [0, 1, 2], [1]) == 2
    assert calls[0] == (TOPIC, b"k", [0, 1, 2], [1])
    assert "custom" in repr(part)


@pytest.mark.parametrize("bad", [3, -1, 100])
def test_custom_partitioner_out_of_range_names_topic_and_value(bad: int) -> None:
    part = BuiltinPartitioner(batch_size=10, custom=lambda t, k, a, v: bad)
    with pytest.raises(ValueError, match=rf"partition {bad} for topic 't'"):
        part.partition(TOPIC, b"k", None, [0, 1, 2], [0, 1, 2])


@pytest.mark.parametrize("bad", ["1", 1.0, True, None])
def test_custom_partitioner_non_int_is_a_type_error(bad: object) -> None:
    part = BuiltinPartitioner(batch_size=10, custom=lambda t, k, a, v: bad)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="topic 't'"):
        part.partition(TOPIC, b"k", None, [0, 1, 2], [0, 1, 2])


def test_from_config_and_custom_disables_adaptive() -> None:
    cfg = ProducerConfig(
        bootstrap_servers="h:1",
        batch_size=64,
        partitioner_ignore_keys=True,
        partitioner_availability_timeout_ms=50,
    )
    part = BuiltinPartitioner.from_config(cfg, rng=random.Random(1))
    text = repr(part)
    assert "sticky_bytes=64" in text and "ignore_keys=True" in text
    assert "availability_timeout_ms=50" in text
    custom = BuiltinPartitioner(batch_size=1, custom=lambda t, k, a, v: 0)
    custom.update_partition_load_stats(TOPIC, [0, 9], [0, 1], 2)
    assert not custom.statistics(TOPIC).weighted


def test_place_is_partition_then_on_append() -> None:
    """The producer's one-call path chooses exactly what the two-call path would."""
    import random as _random

    def run(combined: bool) -> list[int]:
        p = BuiltinPartitioner(batch_size=1000, rng=_random.Random(42))
        chosen = []
        for i in range(3000):
            key = None if i % 3 else f"k{i}".encode()
            size = 37 + i % 50
            if combined:
                chosen.append(p.place("t", key, None, range(6), range(6), size))
            else:
                part = p.partition("t", key, None, range(6), range(6))
                p.on_append("t", part, size)
                chosen.append(part)
        return chosen

    two_calls = run(combined=False)
    assert run(combined=True) == two_calls
    assert len(set(two_calls)) == 6  # it did switch, across every partition


def test_forget_topic_drops_sticky_state() -> None:
    part = BuiltinPartitioner(batch_size=1024, rng=random.Random(3))
    part.partition(TOPIC, None, None, [0, 1, 2], [0, 1, 2])
    assert TOPIC in part._topics
    part.forget_topic(TOPIC)
    assert TOPIC not in part._topics
    assert part.partition(TOPIC, None, None, [0, 1, 2], [0, 1, 2]) in (0, 1, 2)
