"""The soak: a million records over ten minutes through every fault we have at once (-m slow).

Three Apache Kafka nodes (replication factor 3, min.insync.replicas 2), each behind its own
fault proxy (every client connection crosses one: the nodes advertise the proxies' ports).
While an idempotent producer streams keyed records at a steady pace:

* the proxies drop Produce responses after the append, stall responses past
  request.timeout.ms and reset connections, at random, seeded;
* every ``KILL_EVERY_S`` one node is killed (SIGKILL) and started again ``DOWN_S`` later with its
  data — leaders move away and back, clients see connections refused, then a restarted broker.

Everything is then read back with confluent-kafka and checked as in ``test_exactly_once``:
every acknowledged record exactly once at its acknowledged offset, nothing lost silently,
per-key order. ``AIOKPROD_SOAK_SECONDS`` / ``AIOKPROD_SOAK_RECORDS`` shorten it for a try-out.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import pytest
from test_exactly_once import Outcome, assert_exactly_once

from aiokprod import Producer, RecordMetadata
from support.kafka_cluster import KafkaCluster
from support.proxy import ProxyThread
from support.reader import read_back

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("AIOKPROD_SOAK_SECONDS", "600"))
RECORDS = int(os.environ.get("AIOKPROD_SOAK_RECORDS", "1000000"))
PARTITIONS = 12
KILL_EVERY_S = 75.0
DOWN_S = 12.0


@contextmanager
def kafka3_behind_proxies(kafka_factory: Callable[..., KafkaCluster], seed: int
                          ) -> Iterator[tuple[KafkaCluster, list[ProxyThread]]]:
    with ExitStack() as stack:
        proxies = [stack.enter_context(ProxyThread(seed=seed + i)) for i in range(3)]
        cluster = kafka_factory(brokers=3, advertised_ports={
            i + 1: proxy.port for i, proxy in enumerate(proxies)})
        for i, proxy in enumerate(proxies):
            proxy.set_upstream("127.0.0.1", cluster.port(i + 1))
        yield cluster, proxies


class BrokerKiller(threading.Thread):
    """Kills one node at a time and restarts it with its data, until stopped."""

    def __init__(self, cluster: KafkaCluster, seed: int) -> None:
        super().__init__(name="broker-killer", daemon=True)
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.kills = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.wait(KILL_EVERY_S):
                node = self.rng.choice(self.cluster.node_ids)
                self.cluster.kill_broker(node)
                self.kills += 1
                self.stopping.wait(DOWN_S)
                self.cluster.start_broker(node)
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.error = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=120)


async def stream(bootstrap: str, topic: str) -> tuple[dict[int, RecordMetadata],
                                                      dict[int, BaseException]]:
    config = {
        "linger_ms": 5,
        "batch_size": 16384,
        "request_timeout_ms": 2000,
        "retry_backoff_ms": 50,
        "retry_backoff_max_ms": 1000,
        "delivery_timeout_ms": 120_000,
        "reconnect_backoff_ms": 50,
        "reconnect_backoff_max_ms": 1000,
    }
    acked: dict[int, RecordMetadata] = {}
    failed: dict[int, BaseException] = {}

    def done(n: int, future: asyncio.Future[RecordMetadata]) -> None:
        exc = future.exception()
        if exc is None:
            acked[n] = future.result()
        else:
            failed[n] = exc

    async with Producer(bootstrap_servers=bootstrap, **config) as producer:
        start = time.monotonic()
        rate = RECORDS / SECONDS
        for n in range(RECORDS):
            future = await producer.send(topic, f"{n}".encode(), key=f"key-{n % 48}".encode())
            future.add_done_callback(lambda f, n=n: done(n, f))
            if n % 200 == 199:
                ahead = start + n / rate - time.monotonic()
                await asyncio.sleep(max(0.0, ahead))
        await producer.flush()
    return acked, failed


def test_soak_every_fault_a_million_records(kafka_factory: Callable[..., KafkaCluster]) -> None:
    seed = 20261124
    topic = "soak"
    with kafka3_behind_proxies(kafka_factory, seed) as (cluster, proxies):
        cluster.create_topic(topic, PARTITIONS, replication_factor=3)
        for proxy in proxies:
            proxy.faults.drop_produce_response(probability=0.01)
            proxy.faults.stall_responses(3.0, probability=0.002)
            proxy.faults.reset_on_produce_request(probability=0.004)
        killer = BrokerKiller(cluster, seed)
        killer.start()
        started = time.monotonic()
        try:
            acked, failed = asyncio.run(stream(proxies[0].bootstrap, topic))
        finally:
            killer.stop()
        elapsed = time.monotonic() - started
        for proxy in proxies:
            proxy.faults.clear()
        assert killer.error is None, killer.error
        for node in cluster.node_ids:  # the last one killed may still be starting
            if cluster.pid(node) is None:
                cluster.start_broker(node)
        stats = [p.statistics() for p in proxies]
        faults = {
            "produce_requests": sum(s.produce_requests for s in stats),
            "responses_dropped": sum(s.produce_responses_dropped for s in stats),
            "responses_stalled": sum(s.produce_responses_stalled for s in stats),
            "requests_reset": sum(s.produce_requests_reset for s in stats),
            "broker_kills": killer.kills,
        }
        log = [(r.partition, r.offset, int(r.value or b"-1"))
               for r in read_back(cluster.bootstrap, topic, expected=RECORDS, timeout=300,
                                  settle=2.0)]
    print(f"soak: {RECORDS} records in {elapsed:.0f} s ({RECORDS / elapsed:.0f}/s), {faults}")
    assert faults["broker_kills"] >= 1 or SECONDS < KILL_EVERY_S
    assert faults["responses_dropped"] > 0 and faults["requests_reset"] > 0, faults
    outcome = Outcome(RECORDS, acked, failed, log, faults)
    assert_exactly_once(outcome)
    assert not failed, list(failed.items())[:5]
