"""Brokers going away under the producer, on Apache Kafka with real replication and storage.

* A leader move: in a 3-node cluster (RF 3, ``min.insync.replicas=2``) the leader of a
  partition is killed (SIGKILL) while an idempotent ``acks=all`` producer streams keyed
  records. Kafka elects a replica from the ISR, which also holds the producer state of every
  replicated batch, so retries of batches the dead leader had appended are recognised as
  duplicates. The librdkafka mock cluster cannot show this (it does not de-duplicate).
* A restart with data kept: one node stopped (SIGTERM) or killed (SIGKILL) and started again on
  the same port while records wait. Kafka restores producer state from its snapshot or, after
  a crash, by reading the log again, so the producer's sequences carry on with no new
  producer id; Tansu forgets every producer on restart.

Each test owns its cluster (``kafka_factory``): a node started again inside a test is a new
child process, which the shared fixtures' leak guard would rightly count against the test.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest

from aiokprod import Producer, RecordMetadata
from support.kafka_cluster import KafkaCluster
from support.processes import stop_all_threads
from support.reader import read_back

KEYS = 24


def check_exactly_once(log: list[tuple[int, int, int]], acked: dict[int, RecordMetadata],
                       failed: dict[int, BaseException], sent: int) -> None:
    """Every acknowledged record once, where its metadata says; per-key order kept; every
    record either acknowledged or failed with an error."""
    counts = Counter(n for _p, _o, n in log)
    duplicates = {n: c for n, c in counts.items() if c > 1}
    assert not duplicates, f"written twice: {list(duplicates.items())[:10]}"
    missing = sorted(n for n in acked if n not in counts)
    assert not missing, f"acknowledged but not in the log: {missing[:10]}"
    assert len(acked) + len(failed) == sent
    where = {n: (p, o) for p, o, n in log}
    for n, md in acked.items():
        assert where[n] == (md.partition, md.offset), (n, md)
    per_key: dict[tuple[int, int], list[int]] = defaultdict(list)
    for p, _o, n in sorted(log):
        per_key[(p, n % KEYS)].append(n)
    for (p, key), numbers in per_key.items():
        assert numbers == sorted(numbers), f"key-{key} out of order in partition {p}"


async def collect(futures: list[asyncio.Future[RecordMetadata]],
                  ) -> tuple[dict[int, RecordMetadata], dict[int, BaseException]]:
    results = await asyncio.gather(*futures, return_exceptions=True)
    acked = {n: r for n, r in enumerate(results) if isinstance(r, RecordMetadata)}
    failed = {n: r for n, r in enumerate(results) if isinstance(r, BaseException)}
    return acked, failed


def in_flight_to(producer: Producer, node: int) -> bool:
    """Whether a Produce request to ``node`` awaits its answer (the sender's own count: no
    public per-node figure exists)."""
    sender = producer._sender
    assert sender is not None
    return bool(sender._exchange.in_flight_requests.get(node))


def sender_view(producer: Producer, topic: str, node: int) -> str:
    """What the sender knows that decides whether it sends to ``node``: the leaders it sees,
    its connection, what waits per partition (for a failure message)."""
    sender = producer._sender
    assert sender is not None
    cluster, acc = sender._cluster, sender._acc
    meta = cluster.view.topics.get(topic)
    leaders = {p: pm.leader for p, pm in meta.partitions.items()} if meta else None
    queued = {p: len(acc.queued_batches(topic, p)) for p in (leaders or {})}
    return (f"leaders={leaders} ready_connection={cluster.ready_connection(node) is not None} "
            f"connection_delay={cluster.connection_delay(node):.2f}s queued={queued} "
            f"in_flight={dict(sender._exchange.in_flight_requests)} {sender.statistics()}")


async def test_leader_killed_mid_stream_loses_and_duplicates_nothing(
    kafka_factory: Callable[..., KafkaCluster],
) -> None:
    await leader_killed_mid_stream(kafka_factory(brokers=3))


async def leader_killed_mid_stream(cluster: KafkaCluster) -> None:
    """Partition 0's leader is SIGKILLed while requests to it are in flight: every record is
    acknowledged, once, in order; the node then returns into every ISR. Run against each
    release too (test_kafka_versions.py)."""
    topic = "leader-move"
    cluster.create_topic(topic, 3)
    victim = cluster.leader_of(topic, 0)
    least, kill_at = 6000, 2000
    killed_at = 0.0
    async with Producer(bootstrap_servers=cluster.bootstrap, acks="all",
                        enable_idempotence=True, linger_ms=2, batch_size=4096,
                        request_timeout_ms=30_000, delivery_timeout_ms=90_000,
                        retry_backoff_ms=50, reconnect_backoff_ms=50,
                        reconnect_backoff_max_ms=500) as producer:
        futures: list[asyncio.Future[RecordMetadata]] = []
        frozen_at: int | None = None
        killed = False
        victim_acked = False  # a record of partition 0 acknowledged by the victim yet
        scanned = 0
        deadline = time.monotonic() + 90
        n = 0
        while n < least or not killed:
            assert time.monotonic() < deadline, (
                f"node {victim} not killed with a Produce request in flight to it by record "
                f"{n} (frozen at {frozen_at}): {sender_view(producer, topic, victim)}")
            futures.append(await producer.send(topic, f"{n}".encode(),
                                               key=f"key-{n % KEYS}".encode()))
            n += 1
            if n % 20 == 0:
                await asyncio.sleep(0.002)  # paced like an application: batches in flight
            if killed or n < kill_at:
                continue
            # The kill must catch Produce requests whose answers never come (with nothing in
            # flight it would test only a metadata refresh), which timing cannot promise: an
            # answer written just before the kill is read all the same. So the leader is
            # frozen first (every thread stopped: it answers nothing more); once the loop has
            # turned a few times (100 records, five pacing sleeps) whatever it had answered is
            # read, and a request still in flight to it is one no answer will come for. The
            # stream goes on meanwhile, as long as it takes, so such a request comes.
            if frozen_at is None:
                # Not before the victim has taken a Produce request: a topic this fresh may
                # not be led there yet, and its records then wait for metadata (in CI such a
                # wait, asked of the frozen node, outlasted the stream: nothing in flight).
                while not victim_acked and scanned < len(futures) and futures[scanned].done():
                    done = futures[scanned]
                    victim_acked = done.exception() is None and done.result().partition == 0
                    scanned += 1
                if not victim_acked:
                    continue
                pid = cluster.pid(victim)
                assert pid is not None
                stop_all_threads(pid)
                frozen_at = n
            elif n >= frozen_at + 100 and in_flight_to(producer, victim):
                # SIGKILL, as a crash (no controlled shutdown); synchronously, so the loop
                # reads nothing in between
                cluster.kill_broker(victim)
                killed, killed_at = True, time.monotonic()
        count = n
        acked, failed = await collect(futures)
        stats = producer._idempotence.statistics() if producer._idempotence else None
        retried = producer.metrics().get("producer-metrics:record-retry-total", 0.0)
    took = time.monotonic() - killed_at
    new_leader = cluster.leader_of(topic, 0)
    log = [(r.partition, r.offset, int(r.value or b"-1"))
           for r in await asyncio.to_thread(read_back, cluster.bootstrap, topic,
                                            expected=count, timeout=60, settle=1.0)]
    print(f"killed node {victim}; partition 0 now led by {new_leader}; acked={len(acked)} "
          f"failed={len(failed)} in_log={len(log)} records_retried={retried:.0f} "
          f"stream_end_after_kill={took:.1f}s idempotence={stats}")
    assert new_leader not in (victim, -1)
    assert retried > 0, "the kill hit no request in flight: the test proved nothing"
    assert not failed, list(failed.items())[:3]
    check_exactly_once(log, acked, failed, count)

    # the killed node comes back with its data and catches up into every ISR
    await asyncio.to_thread(cluster.start_broker, victim)
    parts = await asyncio.to_thread(cluster.wait_for_partitions, topic, count=3, full_isr=True,
                                    timeout=60)
    assert all(victim in p.isr for p in parts), parts


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
async def test_restart_keeps_data_and_producer_state(
    kafka_factory: Callable[..., KafkaCluster], how: str
) -> None:
    # stop_timeout: a controlled shutdown cut short by a kill would exit -9, not 143
    cluster = kafka_factory(brokers=1, stop_timeout=120)
    topic = f"restart-{how}"
    cluster.create_topic(topic, 2)
    first, second = 600, 600
    async with Producer(bootstrap_servers=cluster.bootstrap, acks="all",
                        enable_idempotence=True, linger_ms=2, batch_size=2048,
                        request_timeout_ms=5000, delivery_timeout_ms=300_000,
                        reconnect_backoff_ms=50, reconnect_backoff_max_ms=500) as producer:
        futures = [await producer.send(topic, f"{n}".encode(), key=f"key-{n % KEYS}".encode())
                   for n in range(first)]
        await asyncio.gather(*futures)
        idem = producer._idempotence
        assert idem is not None
        before = idem.statistics()
        stop = cluster.stop_broker if how == "sigterm" else cluster.kill_broker
        code = await asyncio.to_thread(stop, 1)
        # records sent while the node is down wait in the producer, then go to the new process
        # (delivery.timeout.ms covers the JVM's start, bounded by 120 s, with room to spare)
        futures += [await producer.send(topic, f"{n}".encode(), key=f"key-{n % KEYS}".encode())
                    for n in range(first, first + second)]
        await asyncio.to_thread(cluster.start_broker, 1)
        acked, failed = await collect(futures)
        after = idem.statistics()
    print(f"{how}: exit code {code}; restart in {cluster.start_seconds(1)[-1]:.1f}s; "
          f"before={before} after={after}")
    assert code == (143 if how == "sigterm" else -9)  # the JVM exits 128 + SIGTERM
    assert not failed, list(failed.items())[:3]
    log = [(r.partition, r.offset, int(r.value or b"-1"))
           for r in await asyncio.to_thread(read_back, cluster.bootstrap, topic,
                                            expected=first + second, timeout=120, settle=0.5)]
    check_exactly_once(log, acked, failed, first + second)
    # Kafka kept our producer state: the same producer id and epoch carried on, no reset
    assert (after.producer_id, after.producer_epoch) == (before.producer_id,
                                                         before.producer_epoch)
    assert after.producer_id_resets == before.producer_id_resets
    assert after.sequence_resets == before.sequence_resets


@pytest.mark.slow
async def test_rolling_leader_kills_long(kafka_factory: Callable[..., KafkaCluster]) -> None:
    """Every node in turn: the leader of a partition killed mid-stream (requests in flight),
    started again (data kept) and back in every ISR, then 2 s of calm before the next kill;
    the stream goes on throughout (~1,000 records/s). Nothing lost or written twice."""
    cluster = kafka_factory(brokers=3)
    topic = "rolling-kills"
    cluster.create_topic(topic, 3)
    killed: list[int] = []
    timeline: list[str] = []
    started = time.monotonic()
    deadline = started + 240
    async with Producer(bootstrap_servers=cluster.bootstrap, acks="all",
                        enable_idempotence=True, linger_ms=2, batch_size=4096,
                        request_timeout_ms=5000, delivery_timeout_ms=120_000,
                        retry_backoff_ms=50, reconnect_backoff_ms=50,
                        reconnect_backoff_max_ms=500) as producer:
        futures: list[asyncio.Future[RecordMetadata]] = []
        restart: asyncio.Task[None] | None = None
        next_kill_at = started + 3.0
        victim: int | None = None
        tail_until: int | None = None  # after the last kill: stream this many records in all
        n = 0
        while tail_until is None or n < tail_until:
            assert time.monotonic() < deadline, f"rolling kills took over 240 s: {timeline}"
            futures.append(await producer.send(topic, f"{n}".encode(),
                                               key=f"key-{n % KEYS}".encode()))
            n += 1
            if n % 20 == 0:
                await asyncio.sleep(0.02)
            if restart is not None and restart.done():
                restart.result()  # its failure fails the test here
                restart = None
                next_kill_at = time.monotonic() + 2.0
                timeline.append(f"{time.monotonic() - started:.1f}s node back in every ISR")
            if tail_until is not None or restart is not None or time.monotonic() < next_kill_at:
                continue
            if victim is None:
                victim = cluster.leader_of(topic, len(killed) % 3)
            if in_flight_to(producer, victim):
                cluster.kill_broker(victim)  # synchronously: its requests are in flight
                killed.append(victim)
                timeline.append(f"{time.monotonic() - started:.1f}s killed node {victim} "
                                f"at record {n}")
                restart = asyncio.create_task(_restart_when_fenced(cluster, topic, victim))
                victim = None
                if len(killed) == 3:
                    tail_until = n + 3000
        if restart is not None:
            await restart
        acked, failed = await collect(futures)
    log = [(r.partition, r.offset, int(r.value or b"-1"))
           for r in await asyncio.to_thread(read_back, cluster.bootstrap, topic,
                                            expected=n, timeout=120, settle=1.0)]
    print(f"killed {killed}; records={n} acked={len(acked)} failed={len(failed)} "
          f"in_log={len(log)}; {'; '.join(timeline)}")
    assert len(killed) == 3, killed
    assert not failed, list(failed.items())[:3]
    check_exactly_once(log, acked, failed, n)


async def _restart_when_fenced(cluster: KafkaCluster, topic: str, node: int) -> None:
    """Start ``node`` again once no partition names it leader, then wait for full ISRs."""
    deadline = time.monotonic() + 60
    while any(p.leader == node for p in await asyncio.to_thread(cluster.partitions, topic)):
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node} still leads a partition 60 s after its kill")
        await asyncio.sleep(0.2)
    await asyncio.to_thread(cluster.start_broker, node)
    await asyncio.to_thread(cluster.wait_for_partitions, topic, count=3, full_isr=True,
                            timeout=60)
