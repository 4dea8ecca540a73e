"""A partition's first batches, on Apache Kafka: written in send order and each once.

Kafka accepts any first sequence from a producer id it holds no state for on a partition (its
leniency for producers whose state expired), so while a partition's first batch under a
producer id is refused with a retriable error — a freshly created partition whose leader is
not ready answers NOT_LEADER_OR_FOLLOWER — a later batch already on the wire is written ahead
of it. Tansu refuses a non-zero first sequence and cannot show this; Kafka can, on 4.4 and on
3.9 alike (docs/idempotence.md, "A partition's first batches").

Each test runs against both releases, behind a proxy the node advertises, so faults can be
placed exactly: ``refuse_produce_request`` keeps a request from the broker and answers it with
NOT_LEADER_OR_FOLLOWER (what the not-yet-ready leader says), ``drop_produce_response`` loses an
answer after the broker appended the batch. Then confluent-kafka reads everything back.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

import pytest

from aiokprod import Producer, RecordMetadata
from aiokprod._error_codes import ErrorCode
from support.kafka_fixtures import KafkaBehindProxy, jars_for, kafka_behind_proxy, start_kafka
from support.reader import read_back

VERSIONS = ("4.4.0", "3.9.1")
PARTITIONS = 6
KEYS = 24


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"kafka-{v}" for v in VERSIONS])
def kafka_proxied(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBehindProxy]:
    """One Kafka node of each release, auto-creating topics with 6 partitions, advertising a
    proxy's port to clients. Tests add fault rules and must clear them."""
    version: str = request.param
    start = functools.partial(start_kafka, jars_for(version),
                              work_dir=tmp_path_factory.mktemp(f"kafka-{version}"))
    with kafka_behind_proxy(start, broker_config={"num.partitions": str(PARTITIONS)}) as node:
        yield node


@pytest.fixture
def kafka_first(kafka_proxied: KafkaBehindProxy) -> Iterator[KafkaBehindProxy]:
    kafka_proxied.proxy.faults.clear()
    yield kafka_proxied
    kafka_proxied.proxy.faults.clear()


@dataclass
class Run:
    count: int
    acked: dict[int, RecordMetadata]
    failed: dict[int, BaseException]
    log: list[tuple[int, int, int]]  # (partition, offset, record number) as read back

    def problems(self) -> list[str]:
        """Everything that breaks "each record once, in send order per key"."""
        found = []
        counts = Counter(n for _p, _o, n in self.log)
        duplicates = sum(c - 1 for c in counts.values() if c > 1)
        if duplicates:
            found.append(f"{duplicates} duplicate record(s)")
        per_key: dict[int, list[int]] = defaultdict(list)
        for _p, _o, n in sorted(self.log):
            per_key[n % KEYS].append(n)
        misordered = sum(1 for numbers in per_key.values()
                         for a, b in pairwise(numbers) if b < a)
        if misordered:
            first = next((k, numbers) for k, numbers in per_key.items()
                         if numbers != sorted(numbers))
            found.append(f"{misordered} record(s) written after later ones of their key, e.g. "
                         f"k{first[0]}: {first[1][:8]}")
        missing = [n for n in self.acked if n not in counts]
        if missing:
            found.append(f"{len(missing)} acknowledged record(s) missing, e.g. {missing[:5]}")
        lost = [n for n in range(self.count) if n not in counts and n not in self.failed]
        if lost:
            found.append(f"{len(lost)} record(s) neither written nor failed, e.g. {lost[:5]}")
        return found


async def produce(bootstrap: str, topic: str, count: int, **settings: object
                  ) -> tuple[dict[int, RecordMetadata], dict[int, BaseException]]:
    """``count`` records, values ``str(i)``, keys ``k{i % 24}``, sent in order at once: from
    the first millisecond each partition has several batches to send."""
    config: dict[str, object] = {
        "acks": "all", "enable_idempotence": True, "linger_ms": 5,
        "request_timeout_ms": 2000, "retry_backoff_ms": 50, "delivery_timeout_ms": 60_000,
    }
    config.update(settings)
    async with Producer(bootstrap_servers=bootstrap, **config) as producer:
        futures = [await producer.send(topic, str(i).encode(), key=f"k{i % KEYS}".encode())
                   for i in range(count)]
        results = await asyncio.gather(*futures, return_exceptions=True)
    acked = {i: r for i, r in enumerate(results) if isinstance(r, RecordMetadata)}
    failed = {i: r for i, r in enumerate(results) if isinstance(r, BaseException)}
    return acked, failed


def run(kafka: KafkaBehindProxy, topic: str, count: int, **settings: object) -> Run:
    acked, failed = asyncio.run(produce(kafka.bootstrap, topic, count, **settings))
    kafka.proxy.faults.clear()
    log = [(r.partition, r.offset, int(r.value or b"-1"))
           for r in read_back(kafka.cluster.bootstrap, topic, expected=len(acked),
                              timeout=60, settle=0.5)]
    return Run(count, acked, failed, log)


def fresh_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_first_request_refused_is_not_overtaken(kafka_first: KafkaBehindProxy) -> None:
    """The partitions' first request is refused (NOT_LEADER_OR_FOLLOWER); the requests behind
    it must not be written ahead of its retry."""
    topic = fresh_topic("first-refused")
    kafka_first.cluster.create_topic(topic, PARTITIONS)
    rule = kafka_first.proxy.faults.refuse_produce_request(
        ErrorCode.NOT_LEADER_OR_FOLLOWER, nth=[1])
    result = run(kafka_first, topic, 3000, batch_size=512)
    print(f"refused={rule.hits} acked={len(result.acked)} failed={len(result.failed)}")
    assert rule.hits == 1
    assert result.problems() == []
    assert not result.failed, next(iter(result.failed.values()))


def test_first_request_refused_and_next_answer_lost(kafka_first: KafkaBehindProxy) -> None:
    """The same, and the answer to the first request the broker does see is lost after the
    append: that batch may be written, so it must never be renumbered and written again."""
    topic = fresh_topic("refused-lost")
    kafka_first.cluster.create_topic(topic, PARTITIONS)
    faults = kafka_first.proxy.faults
    refused = faults.refuse_produce_request(ErrorCode.NOT_LEADER_OR_FOLLOWER, nth=[1])
    dropped = faults.drop_produce_response(nth=[1])
    result = run(kafka_first, topic, 3000, batch_size=512)
    print(f"refused={refused.hits} dropped={dropped.hits} acked={len(result.acked)} "
          f"failed={len(result.failed)}")
    assert refused.hits == 1 and dropped.hits == 1
    assert result.problems() == []
    assert not result.failed, next(iter(result.failed.values()))


@pytest.mark.parametrize("create", [False, True], ids=["auto-created", "created"])
def test_new_topic_from_the_first_millisecond(kafka_first: KafkaBehindProxy,
                                              create: bool) -> None:
    """No fault injected: a topic that does not exist yet (auto-created by the first
    Metadata request) or that was just created, produced to at once by a fresh producer,
    several requests in flight per partition; many times over."""
    runs = []
    for _ in range(6):
        topic = fresh_topic("auto" if not create else "created")
        if create:
            kafka_first.cluster.create_topic(topic, PARTITIONS)
        runs.append(run(kafka_first, topic, 2000, batch_size=1024))
    problems = [p for r in runs for p in r.problems()]
    print(f"runs={len(runs)} records={sum(r.count for r in runs)} "
          f"failed={sum(len(r.failed) for r in runs)}")
    assert problems == []
    assert all(not r.failed for r in runs)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_faults_on_new_partitions(kafka_first: KafkaBehindProxy, seed: int) -> None:
    """Refusals, lost answers, stalls past request.timeout.ms and resets, placed by the seed,
    from a new topic's first request on."""
    topic = fresh_topic(f"random-{seed}")
    kafka_first.cluster.create_topic(topic, PARTITIONS)
    faults = kafka_first.proxy.faults
    faults.seed = seed
    faults.refuse_produce_request(ErrorCode.NOT_LEADER_OR_FOLLOWER, probability=0.08)
    faults.drop_produce_response(probability=0.04)
    faults.stall_responses(1.5, probability=0.01)
    faults.reset_on_produce_request(probability=0.02)
    result = run(kafka_first, topic, 4000, batch_size=1024, linger_ms=1,
                 request_timeout_ms=800, retry_backoff_ms=20, retry_backoff_max_ms=200,
                 reconnect_backoff_ms=20, reconnect_backoff_max_ms=200)
    print(f"seed={seed} acked={len(result.acked)} failed={len(result.failed)}")
    assert result.problems() == []
    assert len(result.acked) >= 0.99 * result.count


async def produce_in_a_transaction(bootstrap: str, topic: str, count: int
                                   ) -> dict[int, RecordMetadata]:
    async with Producer(bootstrap_servers=bootstrap, transactional_id=f"txn-{topic}",
                        linger_ms=5, batch_size=512, request_timeout_ms=2000,
                        retry_backoff_ms=50) as producer:
        async with producer.transaction():
            futures = [await producer.send(topic, str(i).encode(),
                                           key=f"k{i % KEYS}".encode())
                       for i in range(count)]
        results = await asyncio.gather(*futures)
    return dict(enumerate(results))


def test_transactional_first_request_refused(kafka_first: KafkaBehindProxy) -> None:
    """The same rule for a transactional producer (transaction version 1 on 3.9, 2 on 4.4):
    read_committed sees every record of the committed transaction once, in send order."""
    topic = fresh_topic("txn-refused")
    kafka_first.cluster.create_topic(topic, PARTITIONS)
    rule = kafka_first.proxy.faults.refuse_produce_request(
        ErrorCode.NOT_LEADER_OR_FOLLOWER, nth=[1])
    acked = asyncio.run(produce_in_a_transaction(kafka_first.bootstrap, topic, 3000))
    kafka_first.proxy.faults.clear()
    log = [(r.partition, r.offset, int(r.value or b"-1"))
           for r in read_back(kafka_first.cluster.bootstrap, topic, expected=len(acked),
                              timeout=60, settle=0.5, isolation_level="read_committed")]
    assert rule.hits == 1
    assert Run(3000, acked, {}, log).problems() == []
