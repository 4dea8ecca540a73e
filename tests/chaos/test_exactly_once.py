"""Exactly-once per partition under real faults (issue 4's acceptance test).

A fault-injecting proxy sits between the producer and a Tansu broker (which advertises the
proxy, so every connection crosses it). While keyed records flow to 6 partitions, the proxy
drops Produce responses after the broker appended the batch (then closes the connection),
stalls responses beyond request_timeout_ms, and resets connections. confluent-kafka's Consumer
then reads everything back:

- no duplicates; every acknowledged record present; per-key order kept;
- every record either in the log or reported failed; nearly all acknowledged.

The same run with idempotence off must find duplicates — the proof that the faults bite and
the test can fail. The short seeds run in ``make test``; ``-m slow`` runs the long ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter, defaultdict

import pytest

from aiokprod import Producer, RecordMetadata
from support.proxy import ProxyStatistics, ProxyThread, tansu_behind_proxy
from support.reader import read_back

PARTITIONS = 6


@dataclasses.dataclass
class Outcome:
    sent: int
    acked: dict[int, RecordMetadata]  # record number → metadata
    failed: dict[int, BaseException]
    log: list[tuple[int, int, int]]  # (partition, offset, record number)
    faults: dict[str, int]

    @property
    def duplicates(self) -> int:
        counts = Counter(n for _p, _o, n in self.log)
        return sum(c - 1 for c in counts.values() if c > 1)


def plan_faults(proxy: ProxyThread, seed: int, count: int) -> None:
    """Roughly one fault per 40 Produce requests of each kind, placed by the seed."""
    faults = proxy.faults
    faults.drop_produce_response(probability=0.04)
    faults.stall_responses(1.5, probability=0.01)
    faults.reset_on_produce_request(probability=0.02)


async def run_producer(bootstrap: str, topic: str, count: int, *, idempotent: bool,
                       seed: int) -> tuple[dict[int, RecordMetadata], dict[int, BaseException]]:
    config = {
        "enable_idempotence": idempotent,
        "linger_ms": 1,
        "batch_size": 4096,  # many small batches: many requests, many chances for faults
        "request_timeout_ms": 800,
        "retry_backoff_ms": 20,
        "retry_backoff_max_ms": 200,
        "delivery_timeout_ms": 60_000,
        "reconnect_backoff_ms": 20,
        "reconnect_backoff_max_ms": 200,
        "max_in_flight_requests_per_connection": 5,
    }
    if not idempotent:
        config["acks"] = "all"
    acked: dict[int, RecordMetadata] = {}
    failed: dict[int, BaseException] = {}
    async with Producer(bootstrap_servers=bootstrap, **config) as producer:
        futures: list[asyncio.Future[RecordMetadata]] = []
        for n in range(count):
            futures.append(await producer.send(topic, f"{n}".encode(),
                                               key=f"key-{n % 48}".encode()))
            if n % 10 == 9:
                # paced like an application: many small requests, many chances for faults
                await asyncio.sleep(0.002)
        results = await asyncio.gather(*futures, return_exceptions=True)
    for n, result in enumerate(results):
        if isinstance(result, RecordMetadata):
            acked[n] = result
        else:
            failed[n] = result
    return acked, failed


def run_through_proxy(proxy: ProxyThread, bootstrap: str, topic: str, seed: int, count: int,
                      *, idempotent: bool) -> tuple[Outcome, ProxyStatistics]:
    """The scenario on any broker behind ``proxy`` once ``topic`` exists there (Tansu here,
    Apache Kafka in test_kafka_exactly_once.py): faults planned from ``seed``, ``count``
    records produced through the proxy, the faults cleared, everything read back from the
    broker itself (``bootstrap``)."""
    plan_faults(proxy, seed, count)
    acked, failed = asyncio.run(run_producer(proxy.bootstrap, topic, count,
                                             idempotent=idempotent, seed=seed))
    proxy.faults.clear()
    stats = proxy.statistics()
    log = [(r.partition, r.offset, int(r.value or b"-1"))
           for r in read_back(bootstrap, topic, expected=count, timeout=60, settle=1.0)]
    return Outcome(count, acked, failed, log, {
        "produce_requests": stats.produce_requests,
        "responses_dropped": stats.produce_responses_dropped,
        "responses_stalled": stats.produce_responses_stalled,
        "requests_reset": stats.produce_requests_reset,
    }), stats


def run_scenario(seed: int, count: int, *, idempotent: bool) -> Outcome:
    topic = f"eos-{seed}-{'idem' if idempotent else 'plain'}"
    with tansu_behind_proxy(seed=seed) as (broker, proxy):
        broker.create_topic(topic, PARTITIONS)
        outcome, _ = run_through_proxy(proxy, broker.bootstrap, topic, seed, count,
                                       idempotent=idempotent)
    return outcome


def assert_exactly_once(outcome: Outcome) -> None:
    print(f"records={outcome.sent} acked={len(outcome.acked)} failed={len(outcome.failed)} "
          f"duplicates={outcome.duplicates} faults={outcome.faults}")
    in_log = Counter(n for _p, _o, n in outcome.log)
    assert outcome.duplicates == 0, f"{outcome.duplicates} duplicates in the log"
    missing = [n for n in outcome.acked if n not in in_log]
    assert not missing, f"acknowledged but not in the log: {missing[:10]}"
    # every record either in the log or reported failed (none silently lost)
    lost = [n for n in range(outcome.sent) if n not in in_log and n not in outcome.failed]
    assert not lost, f"neither written nor reported failed: {lost[:10]}"
    assert len(outcome.acked) >= 0.99 * outcome.sent, (len(outcome.acked), outcome.failed)
    # acknowledged offsets are where the records are (offset -1 only for duplicates answered)
    where = {n: (p, o) for p, o, n in outcome.log}
    for n, md in outcome.acked.items():
        if md.offset >= 0:
            assert where[n] == (md.partition, md.offset), n
    # per-key order: in each partition the record numbers of one key only increase
    per_key: dict[tuple[int, int], list[int]] = defaultdict(list)
    for p, _o, n in sorted(outcome.log):
        per_key[(p, n % 48)].append(n)
    for (p, key), numbers in per_key.items():
        assert numbers == sorted(numbers), f"key-{key} out of order in partition {p}"


@pytest.mark.parametrize("seed", [1, 2])
def test_exactly_once_under_proxy_faults(seed: int) -> None:
    outcome = run_scenario(seed, 6000, idempotent=True)
    assert outcome.faults["responses_dropped"] > 0, outcome.faults
    assert_exactly_once(outcome)


def test_same_faults_without_idempotence_find_duplicates() -> None:
    outcome = run_scenario(1, 6000, idempotent=False)
    print(f"without idempotence: duplicates={outcome.duplicates} faults={outcome.faults}")
    assert outcome.faults["responses_dropped"] > 0, outcome.faults
    assert outcome.duplicates > 0, ("the faults produced no duplicates without idempotence: "
                                    "this test could not fail", outcome.faults)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 9))
def test_exactly_once_long(seed: int) -> None:
    outcome = run_scenario(seed, 40_000, idempotent=True)
    assert_exactly_once(outcome)
