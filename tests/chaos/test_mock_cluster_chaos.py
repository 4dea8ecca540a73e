"""Ordering and loss under a seeded storm of cluster faults (issue 4, the mock-cluster variant).

librdkafka's mock cluster (3 brokers, a topic of 6 partitions with replication factor 3) can
move partition leaders, fail Produce requests with chosen error codes and take a broker down
and up again — faults a single Tansu broker cannot produce. A schedule drawn from
``random.Random(seed)`` fires them while the idempotent producer sends keyed records; then
confluent-kafka's Consumer reads the topic back:

- every acknowledged record is in the log, and every record is acknowledged or reported
  failed (nearly all acknowledged);
- per key and partition, the first appearances of the record numbers only increase.

The mock does NOT deduplicate or check sequences (``test_mock_cluster_does_not_deduplicate``):
a retried batch may be stored twice, so duplicates are counted, not forbidden, and order is
judged on first appearances. Exactly-once is ``test_exactly_once.py``'s job, on Tansu.

Because the mock accepts any sequence, ordering here rests on the producer alone. A real
broker refuses a batch whose predecessor failed (OUT_OF_ORDER_SEQUENCE_NUMBER), so a later
batch already on the wire cannot overtake it; on the mock it can, and no client could prevent
that. The faults are therefore shaped to strike every batch a partition has on the wire:

- an injected error is a run of ``ERROR_RUN`` (= max in flight) consecutive failures on the
  partition leader's own error stack, so the requests pipelined behind the first failed one
  fail too. With single failures and 5 ms of RTT (3 batches of a partition on the wire) the
  mock did store later batches first: up to 11 order violations in a 3000-record run;
- a leader move makes the old leader refuse every later batch of the partition;
- a broker going down cuts every request on its connection.

What is left to get wrong is the producer's: a retry not re-queued in sequence order, or a new
batch of a partition sent while an older one waits to be retried (docs/idempotence.md,
step 2c). Two mock-only gaps remain, both needing two batches of one partition on the wire at
the instant of the fault, which the sampled depth here (1) makes rare: a batch drained just
before a run of failures ends, and a batch sent to a new leader (learned from a metadata
refresh for another partition) while one is still on its way to the old leader. The test with
idempotence off shows that the faults bite: the same schedule then breaks per-key order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import Counter

import pytest

from aiokprod import Producer, RecordMetadata
from aiokprod.network.metadata import TopicPartition
from support.mock_cluster import MockCluster
from support.reader import read_back

PARTITIONS = 6
KEYS = 48
PRODUCE = 0
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19
INJECTED_CODES = (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
                  LEADER_NOT_AVAILABLE)
MAX_IN_FLIGHT = 5
# Consecutive Produce requests of one broker failed per injected error: as deep as the
# pipeline, so no later batch of a partition is stored ahead of one that failed (module doc).
ERROR_RUN = MAX_IN_FLIGHT


@dataclasses.dataclass
class Fault:
    """One scheduled fault: fired once ``at`` records have been sent."""

    at: int
    kind: str  # "leader" | "error" | "down"
    partition: int = 0
    broker: int = 0
    code: int = 0
    down_for_s: float = 0.0


@dataclasses.dataclass
class Outcome:
    sent: int
    acked: dict[int, RecordMetadata]  # record number → metadata
    failed: dict[int, BaseException]
    log: list[tuple[int, int, int]]  # (partition, offset, record number)
    faults: Counter[str]
    deepest_on_wire: int  # most batches of one partition on the wire at once (sampled)
    retries: int  # batches the producer re-sent
    produce_requests: int  # Produce requests the mock received

    @property
    def duplicates(self) -> int:
        counts = Counter(n for _p, _o, n in self.log)
        return sum(c - 1 for c in counts.values() if c > 1)

    def order_violations(self) -> list[tuple[int, int, int, int]]:
        """(partition, key, earlier-appearing number, later-appearing smaller number)."""
        first_seen: set[int] = set()
        last_first: dict[tuple[int, int], int] = {}
        violations = []
        for p, _o, n in sorted(self.log):
            if n in first_seen:
                continue  # a batch the mock stored twice: order is judged on first appearances
            first_seen.add(n)
            key = (p, n % KEYS)
            previous = last_first.get(key, -1)
            if n < previous:
                violations.append((p, n % KEYS, previous, n))
            last_first[key] = max(previous, n)
        return violations


def plan_faults(seed: int, count: int, brokers: tuple[int, ...]) -> list[Fault]:
    """Faults spread over the first 90% of the run: roughly one every 100 records."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    for _ in range(count // 100):
        at = rng.randrange(50, count * 9 // 10)
        if rng.random() < 0.4:
            faults.append(Fault(at, "leader", partition=rng.randrange(PARTITIONS),
                                broker=rng.choice(brokers)))
        else:
            faults.append(Fault(at, "error", partition=rng.randrange(PARTITIONS),
                                code=rng.choice(INJECTED_CODES)))
    faults.append(Fault(rng.randrange(count // 4, count // 2), "down",
                        broker=rng.choice(brokers), down_for_s=rng.uniform(0.3, 0.8)))
    faults.sort(key=lambda f: f.at)
    return faults


class Chaos:
    """Fires the scheduled faults against the mock cluster and counts them."""

    def __init__(self, cluster: MockCluster, topic: str, faults: list[Fault],
                 leaders_on: tuple[int, ...] | None = None) -> None:
        self.cluster = cluster
        self.topic = topic
        self.pending = faults
        self.counts: Counter[str] = Counter()
        self.brokers_down = 0
        self.settled = asyncio.Event()  # every fault fired, every broker up again
        # Each partition's leader as we set it (the mock picks the first ones at random).
        on = leaders_on or cluster.broker_ids
        self.leader = {p: on[p % len(on)] for p in range(PARTITIONS)}
        for p, broker in self.leader.items():
            cluster.set_partition_leader(topic, p, broker)

    def fire_due(self, sent: int, loop: asyncio.AbstractEventLoop) -> None:
        while self.pending and self.pending[0].at <= sent:
            fault = self.pending.pop(0)
            if fault.kind == "leader":
                self.cluster.set_partition_leader(self.topic, fault.partition, fault.broker)
                moved = self.leader[fault.partition] != fault.broker
                self.leader[fault.partition] = fault.broker
                self.counts["leader_moves" if moved else "leader_unchanged"] += 1
            elif fault.kind == "error":
                # A run as long as the pipeline, on the leader of one partition: every request
                # of that broker already on the wire fails with it (module docstring).
                broker = self.leader[fault.partition]
                self.cluster.push_broker_request_errors(
                    broker, PRODUCE, *[(fault.code, 0)] * ERROR_RUN)
                self.counts[f"error_{fault.code}"] += 1
                self.counts["failed_requests_injected"] += ERROR_RUN
            else:
                self.cluster.broker_set_down(fault.broker)
                self.counts["broker_down"] += 1
                self.brokers_down += 1
                loop.call_later(fault.down_for_s, self._up, fault.broker)
        self._check_settled()

    def _up(self, broker: int) -> None:
        self.cluster.broker_set_up(broker)
        self.counts["broker_up"] += 1
        self.brokers_down -= 1
        self._check_settled()

    def _check_settled(self) -> None:
        if not self.pending and not self.brokers_down:
            self.settled.set()

    async def finish(self) -> None:
        """Wait until every scheduled fault fired and every broker taken down is up again."""
        await asyncio.wait_for(self.settled.wait(), timeout=10)


async def run_producer(cluster: MockCluster, topic: str, count: int, chaos: Chaos, *,
                       idempotent: bool
                       ) -> tuple[dict[int, RecordMetadata], dict[int, BaseException], int, int]:
    config: dict[str, object] = {
        "enable_idempotence": idempotent,
        "acks": "all",
        "linger_ms": 1,
        "batch_size": 4096,
        "request_timeout_ms": 1000,
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 100,
        "delivery_timeout_ms": 60_000,
        "reconnect_backoff_ms": 20,
        "reconnect_backoff_max_ms": 200,
        "max_in_flight_requests_per_connection": MAX_IN_FLIGHT,
    }
    loop = asyncio.get_running_loop()
    acked: dict[int, RecordMetadata] = {}
    failed: dict[int, BaseException] = {}
    deepest = 0
    async with Producer(bootstrap_servers=cluster.bootstrap, **config) as producer:
        sender = producer._sender
        assert sender is not None
        idem = sender._idem
        states = ([idem.partition_state(TopicPartition(topic, p)) for p in range(PARTITIONS)]
                  if idem is not None else [])
        futures: list[asyncio.Future[RecordMetadata]] = []
        for n in range(count):
            chaos.fire_due(n, loop)
            futures.append(await producer.send(topic, f"{n}".encode(),
                                               key=f"key-{n % KEYS}".encode()))
            for state in states:
                deepest = max(deepest, state.on_wire_count)
            if n % 10 == 9:
                # paced like an application: many small requests, many chances for faults
                await asyncio.sleep(0.002)
        results = await asyncio.gather(*futures, return_exceptions=True)
        retries = sender.statistics().retries
    await chaos.finish()
    for n, result in enumerate(results):
        if isinstance(result, RecordMetadata):
            acked[n] = result
        else:
            failed[n] = result
    return acked, failed, deepest, retries


def run_scenario(seed: int, count: int, *, idempotent: bool,
                 bootstrap_down: int | None = None) -> Outcome:
    """``bootstrap_down``: a broker listed in bootstrap.servers that is down before the producer
    starts and stays down; leaders and faults then use the other brokers only."""
    topic = f"chaos-{seed}-{'idem' if idempotent else 'plain'}"
    with MockCluster(3) as cluster:
        cluster.create_topic(topic, PARTITIONS, replication_factor=3)
        live = tuple(b for b in cluster.broker_ids if b != bootstrap_down)
        chaos = Chaos(cluster, topic, plan_faults(seed, count, live), leaders_on=live)
        if bootstrap_down is not None:
            cluster.broker_set_down(bootstrap_down)
        cluster.start_request_tracking()
        acked, failed, deepest, retries = asyncio.run(
            run_producer(cluster, topic, count, chaos, idempotent=idempotent))
        produce_requests = len(cluster.get_requests(PRODUCE))
        cluster.stop_request_tracking()
        if bootstrap_down is not None:
            cluster.broker_set_up(bootstrap_down)  # for the reader
        log = [(r.partition, r.offset, int(r.value or b"-1"))
               for r in read_back(cluster.bootstrap, topic, expected=count, timeout=30,
                                  settle=0.5)]
    return Outcome(count, acked, failed, log, chaos.counts, deepest, retries, produce_requests)


def report(outcome: Outcome, label: str) -> None:
    print(f"{label}: records={outcome.sent} acked={len(outcome.acked)} "
          f"failed={len(outcome.failed)} in_log={len({n for _p, _o, n in outcome.log})} "
          f"stored_twice={outcome.duplicates} produce_requests={outcome.produce_requests} "
          f"retries={outcome.retries} "
          f"deepest_on_wire={outcome.deepest_on_wire} "
          f"order_violations={len(outcome.order_violations())} faults={dict(outcome.faults)}")


def assert_no_loss_and_order(outcome: Outcome) -> None:
    in_log = {n for _p, _o, n in outcome.log}
    missing = [n for n in outcome.acked if n not in in_log]
    assert not missing, f"acknowledged but not in the log: {missing[:10]}"
    lost = [n for n in range(outcome.sent) if n not in in_log and n not in outcome.failed]
    assert not lost, f"neither written nor reported failed: {lost[:10]}"
    assert len(outcome.acked) >= 0.99 * outcome.sent, (len(outcome.acked), outcome.failed)
    # an acknowledged offset holds the record (the mock never answers a duplicate offset -1)
    at = {(p, o): n for p, o, n in outcome.log}
    wrong = [n for n, md in outcome.acked.items() if at.get((md.partition, md.offset)) != n]
    assert not wrong, f"acknowledged offsets that hold another record: {wrong[:10]}"
    violations = outcome.order_violations()
    assert not violations, f"{len(violations)} per-key order violations, first: {violations[:5]}"


def assert_faults_fired(outcome: Outcome) -> None:
    faults = outcome.faults
    assert faults["leader_moves"] > 0 and faults["broker_down"] == faults["broker_up"] == 1, faults
    assert sum(faults[f"error_{code}"] for code in INJECTED_CODES) > 0, faults
    assert outcome.retries > 0, "no batch was retried: the faults did not bite"


@pytest.mark.parametrize("seed", [1, 2])
def test_order_and_no_loss_under_mock_cluster_faults(seed: int) -> None:
    started = time.monotonic()
    outcome = run_scenario(seed, 3000, idempotent=True)
    report(outcome, f"seed {seed} ({time.monotonic() - started:.1f}s)")
    assert_faults_fired(outcome)
    assert_no_loss_and_order(outcome)


def test_order_and_no_loss_with_a_bootstrap_broker_down_from_the_start() -> None:
    """Broker 1, listed first in bootstrap.servers (and in every Metadata answer), is down before
    the producer starts and stays down; another broker goes down and up mid-run, leaders move and
    errors are injected on the live two. Every record is acknowledged, per-key order holds."""
    started = time.monotonic()
    outcome = run_scenario(3, 3000, idempotent=True, bootstrap_down=1)
    report(outcome, f"seed 3, broker 1 down from the start ({time.monotonic() - started:.1f}s)")
    assert_faults_fired(outcome)
    assert not outcome.failed, (len(outcome.failed), next(iter(outcome.failed.values())))
    assert_no_loss_and_order(outcome)


def test_same_faults_without_idempotence_break_order() -> None:
    """The proof that the faults bite: without idempotence (Java semantics, 5 in flight) a new
    batch may overtake one waiting to be retried, and the order check must notice.

    Whether a retried batch is overtaken depends on timing: a run usually breaks the order of
    1-3 keys, and once in CI (a loaded machine) seed 1 broke none. So up to four seeds run,
    until one does; the check fails only if none of them breaks any order.
    """
    for seed in (1, 2, 3, 4):
        outcome = run_scenario(seed, 3000, idempotent=False)
        report(outcome, f"seed {seed} without idempotence")
        assert_faults_fired(outcome)
        if outcome.order_violations():
            return
    raise AssertionError("no per-key order broken without idempotence in four seeded runs: "
                         f"this test could not fail ({outcome.faults})")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 11))
def test_order_and_no_loss_under_mock_cluster_faults_long(seed: int) -> None:
    started = time.monotonic()
    outcome = run_scenario(seed, 20_000, idempotent=True)
    report(outcome, f"seed {seed} ({time.monotonic() - started:.1f}s)")
    assert_faults_fired(outcome)
    assert_no_loss_and_order(outcome)
