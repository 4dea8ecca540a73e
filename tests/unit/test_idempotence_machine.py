"""A stateful property test of the REAL RecordAccumulator, IdempotenceManager, BatchOutcomes
and ProducerIdRequester (issue 8).

Nothing of the producer is modelled: records are appended with ``try_append``, drained with
the accumulator's ``drain`` with the sender's ``SendRules`` (each partition's verdict),
and every answer goes to ``outcomes.BatchOutcomes`` -- the object ``Sender`` reports each
batch's outcome to (complete, error answer, expiry) -- and InitProducerId answers to
``producer_id.ProducerIdRequester``, the sender's own. What :class:`Harness` still does in the
sender's place is its I/O: the drain call and the request/answer plumbing. Only the broker is
simulated: one log per partition applying Kafka's sequence checks, an InitProducerId that
refuses KIP-360 bumps (as Tansu does), and a restart that forgets every producer, every record
and its producer-id counter, so the next InitProducerId hands out the same id and epoch again.

Rules interleave sends, drains, broker answers (lost responses, dropped requests, NOT_LEADER,
timeouts after the write), delivery timeouts, restarts and partitions moved next to the
int32 sequence wrap. Checked after every step:

* per partition and producer id/epoch, sequences follow the order records were appended in,
  and no sequence is ever sent with two different sets of records (no duplicate sequence under
  one epoch);
* the first batch of a new producer-id generation starts at sequence 0;
* the accumulator's queue holds a partition's retries in the order idempotence holds them;
* the broker's log holds no record twice and keeps each partition's append order;
* at the end, with faults gone, every appended record is acknowledged or failed with an
  error, and every record acknowledged since the last restart is in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from dataclasses import dataclass

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import KafkaError, KafkaTimeoutError
from aiokprod.network.metadata import BrokerNode, ClusterView, PartitionMetadata, TopicMetadata
from aiokprod.producer.batch import ProducerBatch, RecordMetadata
from aiokprod.producer.batching.accumulator import RecordAccumulator
from aiokprod.producer.batching.buffer_pool import BufferPool
from aiokprod.producer.batching.send_rules import SendRules
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.idempotent.producer_id import InitOutcome, ProducerIdRequester
from aiokprod.producer.partition import Partitions
from aiokprod.producer.sending.outcomes import BatchOutcomes
from aiokprod.producer.sequences import (
    MAX_SEQUENCE,
    increment_sequence,
    sequence_precedes,
)
from aiokprod.protocol import InitProducerIdResponse
from support.examples import examples
from support.sim_broker import PARTITIONS, SimBroker, _ProducerEntry

E = ErrorCode
TOPIC = "t"
NODE = 1
DELIVERY_TIMEOUT_MS = 30_000
BATCH_SIZE = 256  # two 100-byte records per batch at most: many batches, many sequences
FAULTS = ("ok", "ok", "ok", "lost_response", "dropped", "not_leader", "timed_out_after_write")


def _note(label: str) -> None:
    """hypothesis.event, also usable when a test replays steps by hand (outside a run)."""
    with contextlib.suppress(InvalidArgument):
        event(label)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- the simulated broker: support/sim_broker.py ---------------------------------------------


@dataclass
class _Request:
    batch: ProducerBatch
    header: tuple[int, int, int]  # (pid, epoch, base sequence) as sent; restamps don't change it
    records: list[int]
    life: int  # the broker process it was sent to: a restart loses it


# ---- the sender's parts -------------------------------------------------------------------


class Harness:
    """The accumulator, idempotence manager, outcomes and InitProducerId requester wired as
    ``Sender`` wires them. Only the sender's I/O is left out: what it hands these objects is
    what the machine hands them (``Sender._run_once``'s drain, ``_handle_partition``'s
    DUPLICATE check); every outcome goes to the very ``BatchOutcomes`` the sender uses."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()

        async def build() -> RecordAccumulator:
            return RecordAccumulator(
                pool=BufferPool(1 << 22, BATCH_SIZE, clock=self.clock), batch_size=BATCH_SIZE,
                linger_ms=0, delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
                retry_backoff=lambda attempts: 0.0, clock=self.clock, partitions=partitions)

        partitions = Partitions()  # shared, as Producer wires them
        self.acc = self.loop.run_until_complete(build())
        self.idem = IdempotenceManager(clock=self.clock, bump_via_init_producer_id=True,
                                       partitions=partitions)
        self.rules = SendRules(self.idem)
        self.fatal: list[BaseException] = []
        self.outcomes = BatchOutcomes(
            accumulator=self.acc, idempotence=self.idem, transactions=None,
            retries=2**31 - 1, delivery_timeout_ms=DELIVERY_TIMEOUT_MS, client_id="machine",
            on_ack=None, metrics=None, refresh_metadata=lambda: None,
            on_fatal=self.fatal.append)
        self.requester = ProducerIdRequester(self.idem, transactional_id=None,
                                             transaction_timeout_ms=60_000)
        self.view = ClusterView(
            {NODE: BrokerNode(NODE, "localhost", 9001)},
            {TOPIC: TopicMetadata.build(TOPIC, [PartitionMetadata(p, NODE, 0)
                                                for p in PARTITIONS])})

    def close(self) -> None:
        self.loop.close()

    def init_producer_id(self, broker: SimBroker) -> None:
        """Sender._init_producer_id without the connection: the same requester decides."""
        idem = self.idem
        while idem.needs_producer_id():
            pid, epoch = self.requester.take_params()
            code, new_pid, new_epoch = broker.init_producer_id(pid, epoch)
            answer = InitProducerIdResponse(error_code=code, producer_id=new_pid,
                                            producer_epoch=new_epoch)
            outcome = self.requester.on_answer(ErrorCode.of(code), answer, 4)
            assert outcome in (InitOutcome.DONE, InitOutcome.AGAIN), outcome

    def drain(self) -> list[ProducerBatch]:
        """Sender._run_once's drain, and the batches going out in one request."""
        now = self.clock.now
        drained = self.acc.drain(self.view, [NODE], 1 << 20, now, self.rules)
        batches = drained.get(NODE, [])
        self.outcomes.sent(NODE, batches, now)
        return batches

    def complete(self, batch: ProducerBatch, base_offset: int, duplicate: bool) -> None:
        self.outcomes.complete(batch, base_offset, -1, duplicate=duplicate)

    def handle_error(self, batch: ProducerBatch, code: int) -> None:
        self.outcomes.handle_error(batch, code, KafkaError(ErrorCode.of(code).name),
                                   self.clock.now)
        assert not self.fatal, self.fatal

    def expire(self) -> None:
        self.outcomes.expire(self.clock.now)


# ---- the machine ---------------------------------------------------------------------------


class ProducerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness()
        self.broker = SimBroker()
        self.h.init_producer_id(self.broker)
        self.wire: deque[_Request] = deque()
        self.answers: deque[tuple[_Request, int, int]] = deque()  # (request, code, offset)
        self.futures: dict[int, asyncio.Future[RecordMetadata]] = {}  # record → future
        self.record_of: dict[int, int] = {}  # id(future) → record
        self.next_record = 0
        self.acked_at_life: dict[int, int] = {}  # record → broker life when acknowledged
        # (partition, producer-id generation) → {base sequence: records}: one numbering
        self.sent: dict[tuple[int, int], dict[int, tuple[int, ...]]] = {}
        self.generations_seen: set[tuple[int, int]] = set()  # (partition, generation)

    @initialize(gap=st.integers(1, 6))
    def start_partition_1_near_the_wrap(self, gap: int) -> None:
        """Partition 1 starts a few records short of 2**31-1: one record acknowledged, then
        both sides moved (see ``partition_nears_the_wrap``)."""
        self.append(1, 1)
        self._drain()
        self._handle("ok")
        self._hear()
        self.partition_nears_the_wrap(1, gap)

    # ---- producer side ---------------------------------------------------------------

    @rule(p=st.sampled_from(PARTITIONS), n=st.integers(1, 3))
    def append(self, p: int, n: int) -> None:
        for _ in range(n):
            record = self.next_record
            self.next_record += 1
            future = self.h.acc.try_append(TOPIC, p, 0, None, b"%d" % record + b"." * 90, None)
            assert future is not None, "the pool is large enough for the whole run"
            self.futures[record] = future
            self.record_of[id(future)] = record

    @rule()
    def drain(self) -> None:
        self._drain()

    def _drain(self) -> bool:
        self.h.init_producer_id(self.broker)
        batches = self.h.drain()
        for batch in batches:
            self._check_drained(batch)
            records = [self.record_of[id(f)] for f in batch.record_futures()]
            header = (batch.producer_id, batch.producer_epoch, batch.base_sequence)
            self.wire.append(_Request(batch, header, records, self.broker.life))
        return bool(batches)

    def _check_drained(self, batch: ProducerBatch) -> None:
        p = self.h.idem.partition_state(batch)
        entry = p.entry_for(batch)
        assert entry is not None and entry.on_wire
        records = tuple(self.record_of[id(f)] for f in batch.record_futures())
        # the first batch of a new producer-id generation starts at sequence 0
        if (batch.partition, entry.generation) not in self.generations_seen:
            self.generations_seen.add((batch.partition, entry.generation))
            assert batch.base_sequence == 0, (batch, p)
        sent = self.sent.setdefault((batch.partition, entry.generation), {})
        previous = sent.get(batch.base_sequence)
        # no sequence twice with different records under one epoch (of one broker's life)
        assert previous is None or previous == records, (batch, previous, records)
        # sequences follow append order
        for seq, other in sent.items():
            if seq == batch.base_sequence:
                continue
            later = sequence_precedes(seq, batch.base_sequence)
            assert later == (other[0] < records[0]), (seq, other, batch.base_sequence, records)
        sent[batch.base_sequence] = records

    # ---- broker and network ----------------------------------------------------------

    @precondition(lambda self: bool(self.wire))
    @rule(fault=st.sampled_from(FAULTS))
    def broker_handles(self, fault: str) -> None:
        self._handle(fault)

    def _handle(self, fault: str) -> None:
        req = self.wire.popleft()
        if req.life != self.broker.life or fault == "dropped":
            self.answers.append((req, E.NETWORK_EXCEPTION, -1))
            return
        if fault == "not_leader":
            self.answers.append((req, E.NOT_LEADER_OR_FOLLOWER, -1))
            return
        pid, epoch, base = req.header
        code, offset = self.broker.partitions[req.batch.partition].append(
            pid, epoch, base, req.records, handed_out=pid in self.broker.handed_out)
        if code == E.NONE and fault == "lost_response":
            code = E.NETWORK_EXCEPTION
        elif code == E.NONE and fault == "timed_out_after_write":
            code = E.REQUEST_TIMED_OUT
        self.answers.append((req, code, offset))

    @precondition(lambda self: bool(self.answers))
    @rule()
    def client_hears(self) -> None:
        self._hear()

    @precondition(lambda self: len(self.answers) > 1)
    @rule()
    def client_hears_the_newest_first(self) -> None:
        """After a leader change the new leader's connection can answer before the old one:
        the most recent answer overtakes the others."""
        self.answers.rotate(1)
        self._hear()

    def _hear(self) -> None:
        req, code, offset = self.answers.popleft()
        batch = req.batch
        # ProduceExchange._handle_partition: a DUPLICATE is a success only for a batch that may have
        # been written before; otherwise its sequences collide with another batch's
        if code == E.DUPLICATE_SEQUENCE_NUMBER and not self.h.idem.duplicate_is_success(batch):
            _note("DUPLICATE that collides")
            code = E.OUT_OF_ORDER_SEQUENCE_NUMBER
        _note(f"answer {ErrorCode.of(code).name}")
        if code in (E.NONE, E.DUPLICATE_SEQUENCE_NUMBER):
            if not batch.done:
                for record in req.records:  # written by the broker process it went to
                    self.acked_at_life[record] = req.life
            self.h.complete(batch, offset if code == E.NONE else -1,
                            duplicate=code == E.DUPLICATE_SEQUENCE_NUMBER)
            return
        self.h.handle_error(batch, code)

    @rule(seconds=st.sampled_from([0.1, 5.0, 31.0]))
    def time_passes(self, seconds: float) -> None:
        self.h.clock.now += seconds
        self.h.expire()

    @rule()
    def broker_restarts(self) -> None:
        """Killed and started again with memory storage: every record, every producer and
        the producer-id counter are gone; requests on the wire die with the connection."""
        self.broker.restart()

    @rule(p=st.sampled_from(PARTITIONS), gap=st.integers(1, 4))
    def partition_nears_the_wrap(self, p: int, gap: int) -> None:
        """Move a quiet partition next to 2**31-1, on both sides, as if that many records had
        been written (the broker agrees, so nothing else changes)."""
        idem = self.h.idem
        state = idem.partition_state(_TP(TOPIC, p))
        if state.in_flight or state.unresolved or state.reset_requested or \
                state.generation != idem.statistics().generation or \
                idem.producer_id not in self.broker.handed_out or \
                any(r.batch.partition == p for r in self.wire) or \
                any(r.batch.partition == p for r, _c, _o in self.answers):
            return
        partition = self.broker.partitions[p]
        entry = partition.producers.get(idem.producer_id)
        if entry is None:
            entry = partition.producers[idem.producer_id] = _ProducerEntry(idem.producer_epoch)
        elif entry.last_seq != state.last_acked_sequence:
            return
        last = MAX_SEQUENCE - gap
        entry.last_seq = state.last_acked_sequence = last
        entry.retained.clear()
        state.next_sequence = increment_sequence(last, 1)
        _note("partition moved next to the wrap")
        # the records "written" in between are not ours to compare orders with
        self.sent.pop((p, state.generation), None)

    # ---- invariants ------------------------------------------------------------------

    @invariant()
    def log_has_no_duplicates_and_keeps_order(self) -> None:
        for partition in self.broker.partitions.values():
            assert len(partition.log) == len(set(partition.log)), partition.log
            assert partition.log == sorted(partition.log), partition.log

    @invariant()
    def queue_holds_retries_in_idempotence_order(self) -> None:
        for p in PARTITIONS:
            state = self.h.idem.partition_state(_TP(TOPIC, p))
            held = [e.batch for e in state.in_flight if not e.on_wire]
            queued = [b for b in self.h.acc.queued_batches(TOPIC, p) if b.base_sequence >= 0]
            assert queued == held, ([b.base_sequence for b in queued],
                                    [b.base_sequence for b in held])
            # one queue of unacknowledged batches: the numbered ones are exactly the batches
            # idempotence holds, in its order, and the drain cursor has only drained batches
            # behind it
            numbered = [b for b in state.batches if b.base_sequence >= 0]
            assert numbered == [e.batch for e in state.in_flight], (
                [b.base_sequence for b in numbered], [e.base_sequence for e in state.in_flight])
            assert not any(state.batches[i].queued for i in range(state.drain_index)), state
            # held sequences of one generation never overlap, and follow each other
            for a, b in zip(state.in_flight, state.in_flight[1:], strict=False):
                if a.generation == b.generation:
                    assert sequence_precedes(a.last_sequence, b.base_sequence), state

    # ---- the end: faults stop, everything completes ----------------------------------

    def teardown(self) -> None:
        try:
            for _ in range(500):
                progressed = self._drain()
                while self.wire:
                    self._handle("ok")
                    progressed = True
                while self.answers:
                    self._hear()
                    progressed = True
                if not progressed:
                    break
            # no clock moves here (retry.backoff is 0, linger 0): a record still pending now
            # waits for something that never comes, e.g. a retry the partition never sends
            stats = self.h.idem.statistics()
            if stats.broker_state_losses:
                _note("same producer id and epoch handed out again")
            pending = [r for r, f in self.futures.items() if not f.done()]
            assert not pending, ("stuck", pending[:5], self.h.idem, self.h.acc,
                                 [self.h.idem.partition_state(_TP(TOPIC, p)) for p in PARTITIONS])
            for record, future in self.futures.items():
                if future.exception() is None:
                    assert record in self.acked_at_life, record
                else:
                    assert isinstance(future.exception(), (KafkaError, KafkaTimeoutError))
            log = {r for partition in self.broker.partitions.values() for r in partition.log}
            lost = [r for r, life in self.acked_at_life.items()
                    if life == self.broker.life and r not in log]
            assert not lost, f"acknowledged since the last restart but not in the log: {lost}"
            self.log_has_no_duplicates_and_keeps_order()
        finally:
            self.h.close()


@dataclass(frozen=True)
class _TP:
    topic: str
    partition: int


# ~3 s by default; AIOKPROD_MACHINE_EXAMPLES=5000 for a long hunt
ProducerMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("AIOKPROD_MACHINE_EXAMPLES", examples(300))),
    stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestProducerMachine = ProducerMachine.TestCase


def test_no_fresh_producer_id_while_a_batch_of_the_old_one_is_on_the_wire() -> None:
    """The case the machine found: after a restart the broker hands out the old id and epoch
    again. A batch sent under the old pair before the client heard of the loss (here numbered
    0 by the int32 wrap) must be answered before InitProducerId goes out; sent after it, the
    broker took it as the new numbering's first batch and wrote it ahead of an older record."""
    machine = ProducerMachine()
    machine.start_partition_1_near_the_wrap(gap=1)
    machine.broker_restarts()
    machine.append(n=2, p=1)  # two batches: sequences 2**31-1 and 0 (wrapped)
    machine.drain()
    machine.append(n=1, p=0)
    machine.drain()
    machine.broker_handles(fault="ok")  # UNKNOWN_PRODUCER_ID for the first
    machine.client_hears()  # the client drops its id; the wrapped batch is still on the wire
    machine.h.init_producer_id(machine.broker)  # the bump is refused: a fresh id is needed
    assert machine.h.idem.producer_id == -1 and not machine.h.idem.needs_producer_id()
    assert not machine.broker.handed_out, "InitProducerId sent with a batch on the wire"
    machine.teardown()  # everything completes: no record twice, append order kept


def test_a_request_that_outlived_its_batch_is_answered_before_a_fresh_producer_id() -> None:
    """Also found by the machine: a batch failed by delivery.timeout.ms while its request was
    still unanswered. The request can still land; taken by a broker that meanwhile handed
    out the old id and epoch again, it was written as the new numbering's sequence 0 and a
    later record of the partition was written ahead of an earlier one ([1, 4, 3])."""
    machine = ProducerMachine()
    machine.start_partition_1_near_the_wrap(gap=1)
    machine.broker_restarts()
    machine.append(n=1, p=0)
    machine.append(n=1, p=1)
    machine.drain()
    machine.time_passes(seconds=31.0)  # both fail while their requests are on the wire
    machine.drain()
    assert not machine.broker.handed_out, "InitProducerId sent while a request travels"
    machine.broker_handles(fault="ok")
    machine.append(n=1, p=0)
    machine.client_hears()
    machine.broker_handles(fault="ok")
    machine.client_hears()
    machine.drain()
    machine.append(n=1, p=0)
    machine.teardown()
