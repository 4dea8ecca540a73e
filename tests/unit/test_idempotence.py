"""The idempotent producer's state machine: the transition table, the sending steps of
docs/idempotence.md as scenarios, KIP-1269, and a stateful property test against a simulated
broker."""

from __future__ import annotations

import math
import os
from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import IllegalStateError, KafkaConnectionError, KafkaError
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.idempotent.producer_id_state import (
    TRANSITIONS,
    Event,
    ProducerIdState,
    next_state,
)
from aiokprod.producer.retry_policy import Action, classify
from aiokprod.producer.sequences import (
    MAX_PRODUCER_EPOCH,
    MAX_SEQUENCE,
    sequence_precedes,
)
from support.batch_double import Batch, new_table
from support.examples import examples
from support.sim_broker import PARTITIONS, SimPartition
from support.verdicts import may_send, take

E = ErrorCode
S = ProducerIdState
PID = 4000


def insert_in_sequence_order(queue: Any, batch: Any) -> int:
    """The order a retried batch takes in this file's models of a partition's queue (the
    producer keeps retries in place and rewinds its drain cursor instead): before every
    later sequence and every batch not numbered yet, behind lower sequences."""
    assert batch.base_sequence >= 0, "only a numbered batch is re-inserted"
    index = 0
    for other in queue:
        if other.base_sequence < 0 or not sequence_precedes(other.base_sequence,
                                                            batch.base_sequence):
            break
        index += 1
    queue.insert(index, batch)
    return index


@dataclass(frozen=True)
class TP:
    topic: str
    partition: int


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state(m: IdempotenceManager) -> ProducerIdState:
    """Read through a call, so the type checker does not pin the state between events."""
    return m.state


def ready(pid: int = PID, epoch: int = 0, *, pipelined: bool = True,
          clock: Clock | None = None, **kw: Any) -> IdempotenceManager:
    m = IdempotenceManager(partitions=new_table(), clock=clock or Clock(), **kw)
    assert m.needs_producer_id()
    assert m.init_producer_id_params() == (-1, -1)
    m.on_producer_id(pid, epoch)
    assert state(m) is S.READY
    if pipelined:
        leader_holds_state(m)
    return m


def leader_holds_state(m: IdempotenceManager, topic: str = "t", partitions: int = 2) -> None:
    """Start the partitions as after a first acknowledged batch of this producer id: their
    leaders check sequences, so batches are pipelined from the start (a partition's first
    batches go one at a time: test_idempotence_first_batches.py)."""
    for partition in range(partitions):
        p = m.partition_state(Batch(topic, partition))
        p.leader_holds_state = True
        p.last_acked_at = math.inf  # however far a test moves its clock, never idle


def send(m: IdempotenceManager, *batches: Batch) -> None:
    for b in batches:
        assert may_send(m, b), f"expected {b.header} to be sendable: {m.partition_state(b)!r}"
        take(m, b)


def fail(m: IdempotenceManager, b: Batch, code: ErrorCode) -> Action:
    """The sender's side of an error answer: decide, and re-enqueue for a retry."""
    d = m.on_error(b, code)
    if d.action is Action.RETRY:
        b.attempts += 1
    return d.action


def batches(n: int, *, records: int = 1, partition: int = 0) -> list[Batch]:
    return [Batch(record_count=records, partition=partition) for _ in range(n)]


# ---- the transition table ---------------------------------------------------------------

@pytest.mark.parametrize(("state", "event"), list(TRANSITIONS),
                         ids=[f"{s.name}-{e.name}" for s, e in TRANSITIONS])
def test_every_table_entry(state: ProducerIdState, event: Event) -> None:
    transition = TRANSITIONS[(state, event)]
    assert next_state(state, event) is transition.target
    assert transition.rule.startswith(("docs/idempotence.md", "KIP-360", "Java",
                                       "InitProducerId", "the epoch", "after a fatal"))


ILLEGAL = [(s, e) for s in ProducerIdState for e in Event if (s, e) not in TRANSITIONS]


@pytest.mark.parametrize(("state", "event"), ILLEGAL,
                         ids=[f"{s.name}-{e.name}" for s, e in ILLEGAL])
def test_every_other_pair_is_illegal(state: ProducerIdState, event: Event) -> None:
    with pytest.raises(IllegalStateError, match=event.name):
        next_state(state, event)


def test_fatal_is_a_dead_end() -> None:
    assert {e for (s, e) in TRANSITIONS if s is S.FATAL} == {Event.FATAL_ERROR}


def test_the_manager_raises_on_an_illegal_event() -> None:
    m = IdempotenceManager(partitions=new_table())
    with pytest.raises(IllegalStateError):
        m.on_producer_id(1, 0)  # no InitProducerId was sent
    m = ready()
    with pytest.raises(IllegalStateError):
        m.init_producer_id_params()  # READY needs none
    with pytest.raises(IllegalStateError):
        m.on_bump_unsupported()  # no bump under way


# ---- producer id ------------------------------------------------------------------------

def test_nothing_is_sent_before_a_producer_id() -> None:
    m = IdempotenceManager(partitions=new_table())
    b = Batch()
    assert not may_send(m, b)
    with pytest.raises(IllegalStateError):
        m.assign_sequence(b)
    m.init_producer_id_params()
    assert state(m) is S.INITIALIZING and m.needs_producer_id()
    assert m.init_producer_id_params() == (-1, -1)  # a second attempt while initializing
    m.on_producer_id(PID, 0)
    send(m, b)
    assert b.header == (PID, 0, 0)


def test_retriable_init_failure_retries_and_fatal_one_stops() -> None:
    m = IdempotenceManager(partitions=new_table())
    m.init_producer_id_params()
    m.on_init_producer_id_failed(KafkaConnectionError("reset"))
    assert state(m) is S.UNINITIALIZED and m.needs_producer_id()
    m.init_producer_id_params()
    denied = KafkaError("cluster authorization failed")
    m.on_init_producer_id_failed(denied)
    assert state(m) is S.FATAL and m.fatal_error is denied
    assert not m.needs_producer_id()


def test_invalid_producer_id_from_the_broker_is_refused() -> None:
    m = IdempotenceManager(partitions=new_table())
    m.init_producer_id_params()
    with pytest.raises(ValueError):
        m.on_producer_id(-1, 0)
    with pytest.raises(ValueError):
        m.on_producer_id(1, MAX_PRODUCER_EPOCH + 1)


# ---- steps 3-5 and 9: sequences per record -----------------------------------------------

def test_sequences_count_records_and_stamp_id_and_epoch() -> None:
    m = ready()
    a, b, c = Batch(record_count=3), Batch(record_count=2), Batch(record_count=5)
    send(m, a, b, c)
    assert [x.header for x in (a, b, c)] == [(PID, 0, 0), (PID, 0, 3), (PID, 0, 5)]
    p = m.partition_state(a)
    assert p.next_sequence == 10 and len(p.in_flight) == 3
    for x in (a, b, c):
        m.on_success(x, base_offset=100)
    assert p.last_acked_sequence == 9 and p.in_flight == []
    assert m.statistics().in_flight_batches == 0


def test_partitions_have_independent_sequences() -> None:
    m = ready()
    a, b = Batch(partition=0, record_count=4), Batch(partition=1, record_count=2)
    send(m, a, b)
    assert (a.base_sequence, b.base_sequence) == (0, 0)


def test_sequence_wraps_from_int32_max_to_zero() -> None:
    """Sequences wrap from 2**31-1 to 0."""
    m = ready()
    first = Batch()
    send(m, first)
    m.on_success(first, base_offset=0)
    p = m.partition_state(first)
    p.next_sequence, p.last_acked_sequence = MAX_SEQUENCE - 1, MAX_SEQUENCE - 2
    a, b = Batch(record_count=3), Batch(record_count=2)
    send(m, a, b)
    assert (a.base_sequence, b.base_sequence, p.next_sequence) == (MAX_SEQUENCE - 1, 1, 3)
    # b is answered first (leader failover), a is re-inserted before it anyway
    assert fail(m, b, E.NOT_LEADER_OR_FOLLOWER) is Action.RETRY
    assert fail(m, a, E.NOT_LEADER_OR_FOLLOWER) is Action.RETRY
    queue: deque[Batch] = deque()
    insert_in_sequence_order(queue, b)
    insert_in_sequence_order(queue, a)
    assert list(queue) == [a, b]
    assert not may_send(m, b) and may_send(m, a)
    send(m, a)
    m.on_success(a, base_offset=10)
    assert p.last_acked_sequence == 0 and p.is_next_sequence(1)
    send(m, b)
    m.on_success(b, base_offset=13)
    assert p.last_acked_sequence == 2


# ---- lost response, DUPLICATE_SEQUENCE_NUMBER --------------------------------------------

def test_lost_response_then_retry_answered_duplicate_is_success() -> None:
    m = ready()
    b = Batch(record_count=4)
    send(m, b)
    assert fail(m, b, E.NETWORK_EXCEPTION) is Action.RETRY  # the response was lost
    later = Batch()
    assert not may_send(m, later)  # step 2c: the retry goes first
    send(m, b)
    assert b.base_sequence == 0  # the retry keeps its sequence
    d = m.on_error(b, E.DUPLICATE_SEQUENCE_NUMBER)
    assert d.action is Action.COMPLETE
    p = m.partition_state(b)
    assert (p.last_acked_sequence, p.last_acked_offset, p.in_flight) == (3, -1, [])
    send(m, later)
    assert later.base_sequence == 4


def test_duplicate_reported_through_on_success() -> None:
    m = ready()
    b = Batch(record_count=2)
    send(m, b)
    m.on_success(b, base_offset=-1, duplicate=True)
    assert m.partition_state(b).last_acked_sequence == 1


# ---- step 2c: one in flight while retrying, in sequence order ----------------------------

def test_retries_go_one_at_a_time_in_sequence_order() -> None:
    m = ready()
    b1, b2, b3 = batches(3)
    send(m, b1, b2, b3)
    # answers arrive out of order; each goes back in sequence order
    queue: deque[Batch] = deque([Batch()])
    for b in (b2, b3, b1):
        assert fail(m, b, E.NOT_LEADER_OR_FOLLOWER) is Action.RETRY
        insert_in_sequence_order(queue, b)
    assert list(queue)[:3] == [b1, b2, b3]
    assert [may_send(m, b) for b in (b2, b3, queue[3])] == [False, False, False]
    send(m, b1)
    assert not may_send(m, b2)  # b1 is on the wire: alone
    m.on_success(b1, base_offset=0)
    send(m, b2)
    m.on_success(b2, base_offset=1)
    send(m, b3)
    m.on_success(b3, base_offset=2)
    assert not m.partition_state(b1).retrying
    send(m, queue[3])
    assert queue[3].base_sequence == 3


def test_retried_batch_waits_for_batches_still_on_the_wire() -> None:
    m = ready()
    b1, b2 = batches(2)
    send(m, b1, b2)
    fail(m, b1, E.NOT_ENOUGH_REPLICAS)
    assert not may_send(m, b1)  # b2 still on the wire
    assert fail(m, b2, E.OUT_OF_ORDER_SEQUENCE_NUMBER) is Action.RETRY
    assert state(m) is S.READY  # b2 was not the next sequence: no bump (see below)
    assert may_send(m, b1) and not may_send(m, b2)


def test_sending_a_batch_twice_or_an_untracked_one_is_a_bug() -> None:
    m = ready()
    b = Batch()
    send(m, b)
    with pytest.raises(IllegalStateError):
        may_send(m, b)  # on the wire already
    stranger = Batch(base_sequence=7)
    with pytest.raises(IllegalStateError):
        may_send(m, stranger)
    with pytest.raises(IllegalStateError):
        m.assign_sequence(stranger)


def test_assign_without_permission_is_refused() -> None:
    m = ready()
    b1, b2 = batches(2)
    send(m, b1)
    fail(m, b1, E.NOT_ENOUGH_REPLICAS)
    with pytest.raises(IllegalStateError):
        m.assign_sequence(b2)  # step 2c forbids a new batch
    send(m, b1)
    with pytest.raises(IllegalStateError):
        m.assign_sequence(b1)  # already on the wire


def test_not_sent_batch_is_held_again() -> None:
    m = ready()
    b = Batch()
    send(m, b)
    m.on_not_sent(b)
    assert m.partition_state(b).on_wire_count == 0
    send(m, b)
    assert b.base_sequence == 0


# ---- step 8b: OUT_OF_ORDER_SEQUENCE_NUMBER -----------------------------------------------

def test_out_of_order_for_the_next_sequence_bumps_and_resets() -> None:
    m = ready()
    b1, b2 = Batch(record_count=2), Batch(record_count=3)
    send(m, b1, b2)
    d = m.on_error(b1, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert (d.action, d.reset_sequences) == (Action.RETRY, True)
    assert state(m) is S.BUMP_REQUIRED
    assert not may_send(m, b1)  # bumped now, but b2 (old epoch) is still on the wire
    assert m.producer_epoch == 1
    d2 = m.on_error(b2, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert (d2.action, d2.reset_sequences) == (Action.RETRY, False)  # stale: no second bump
    send(m, b1)
    assert b1.header == (PID, 1, 0) and b2.header == (PID, 1, 2)  # renumbered in order
    assert m.statistics().epoch_bumps == 1


def test_out_of_order_behind_a_retry_just_retries() -> None:
    """Java's refinement of step 8b: OUT_OF_ORDER for a batch that is not the next one the
    broker expects means an earlier batch is still missing, not that the broker lost state.
    Bumping here would renumber b1, which may already be written: a duplicate."""
    m = ready()
    b1, b2 = batches(2)
    send(m, b1, b2)
    fail(m, b1, E.REQUEST_TIMED_OUT)  # b1 may be written
    d = m.on_error(b2, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert (d.action, d.reset_sequences) == (Action.RETRY, False)
    assert state(m) is S.READY and m.producer_epoch == 0
    send(m, b1)
    assert b1.header == (PID, 0, 0)


def test_out_of_order_right_after_the_unresolved_batch_bumps() -> None:
    m = ready()
    b1, b2, b3 = batches(3)
    send(m, b1, b2, b3)
    m.on_delivery_timeout(b1)  # on the wire: unresolved
    p = m.partition_state(b1)
    assert len(p.unresolved) == 1 and not may_send(m, Batch())  # step 2a
    d = m.on_error(b3, E.OUT_OF_ORDER_SEQUENCE_NUMBER)  # not right after b1: wait and see
    assert d.reset_sequences is False and state(m) is S.READY
    d = m.on_error(b2, E.OUT_OF_ORDER_SEQUENCE_NUMBER)  # right after b1: b1 was not written
    assert d.reset_sequences is True
    assert may_send(m, b2)
    send(m, b2)
    assert (b2.header, b3.header) == ((PID, 1, 0), (PID, 1, 1))
    assert p.unresolved == []


def test_out_of_order_after_an_unresolved_batch_that_is_not_the_largest_bumps() -> None:
    """b1 was dropped and expired, b3 expired on the wire: b2's OUT_OF_ORDER proves b1 was not
    written. A plain reading of step 8b, "after the largest unresolved" (b3), would retry b2
    until it expires."""
    m = ready()
    b1, b2, b3 = batches(3)
    send(m, b1, b2, b3)
    fail(m, b1, E.NETWORK_EXCEPTION)
    m.on_delivery_timeout(b1)
    m.on_delivery_timeout(b3)
    d = m.on_error(b2, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert (d.action, d.reset_sequences) == (Action.RETRY, True)
    send(m, b2)
    assert b2.header == (PID, 1, 0)


# ---- step 8b: UNKNOWN_PRODUCER_ID ---------------------------------------------------------

def test_unknown_producer_id_twice_bumps_once() -> None:
    m = ready()
    b1, b2 = Batch(record_count=2), Batch(record_count=2)
    send(m, b1, b2)
    d1 = m.on_error(b1, E.UNKNOWN_PRODUCER_ID)
    d2 = m.on_error(b2, E.UNKNOWN_PRODUCER_ID)  # same response: "a reset already happened"
    assert (d1.action, d1.reset_sequences) == (Action.RETRY, True)
    assert (d2.action, d2.reset_sequences) == (Action.RETRY, False)
    send(m, b1)
    assert (b1.header, b2.header) == ((PID, 1, 0), (PID, 1, 2))
    m.on_success(b1, base_offset=0)
    send(m, b2)
    m.on_success(b2, base_offset=2)
    assert m.statistics().epoch_bumps == 1


def test_unknown_producer_id_after_the_reset_resets_again() -> None:
    """The broker lost our state a second time (retention again): a batch renumbered by the
    first reset must not be retried forever with a sequence the broker cannot accept."""
    m = ready()
    b1, b2 = batches(2)
    send(m, b1, b2)
    m.on_error(b1, E.UNKNOWN_PRODUCER_ID)
    m.on_error(b2, E.UNKNOWN_PRODUCER_ID)
    send(m, b1)
    m.on_success(b1, base_offset=0)
    send(m, b2)
    assert b2.header == (PID, 1, 1)
    d = m.on_error(b2, E.UNKNOWN_PRODUCER_ID)
    assert (d.action, d.reset_sequences) == (Action.RETRY, True)
    send(m, b2)
    assert b2.header == (PID, 2, 0)


def test_unknown_producer_id_for_an_old_epoch_retry_renumbers_it() -> None:
    """Found by the stateful test: partition 1 holds an old-epoch retry when partition 0's
    bump happens; the broker lost our state for partition 1 too. Retrying it unchanged would
    get UNKNOWN_PRODUCER_ID forever: it must be renumbered under the current epoch instead
    (without another bump: the current epoch is already new to that partition)."""
    m = ready()
    a, b = Batch(partition=0), Batch(partition=1)
    send(m, a, b)
    m.on_success(b, base_offset=0)
    b2 = Batch(partition=1)
    send(m, b2)
    fail(m, b2, E.NETWORK_EXCEPTION)
    fail(m, a, E.UNKNOWN_PRODUCER_ID)
    send(m, b2)
    assert b2.header == (PID, 0, 1)  # partition 1 did not ask: old epoch first
    d = m.on_error(b2, E.UNKNOWN_PRODUCER_ID)
    assert (d.action, d.reset_sequences) == (Action.RETRY, True)
    assert m.producer_epoch == 1 and state(m) is S.READY  # no second bump
    send(m, b2)
    assert b2.header == (PID, 1, 0)


def test_unknown_producer_id_answer_from_before_the_bump_does_not_bump_again() -> None:
    m = ready()
    b1, b2 = batches(2)
    send(m, b1, b2)
    m.on_error(b1, E.UNKNOWN_PRODUCER_ID)
    m.maintain()  # the bump happens before b2's answer arrives
    assert m.producer_epoch == 1
    d = m.on_error(b2, E.UNKNOWN_PRODUCER_ID)
    assert d.reset_sequences is False and state(m) is S.READY


# ---- steps 2b/3: a bump waits for old-epoch batches --------------------------------------

def test_bump_waits_for_old_epoch_batches_before_resetting() -> None:
    m = ready()
    a1, a2 = batches(2, partition=0)
    other = Batch(partition=1)
    send(m, a1, a2, other)
    assert fail(m, a1, E.OUT_OF_ORDER_SEQUENCE_NUMBER) is Action.RETRY  # bump for partition 0
    newcomer = Batch(partition=1)
    assert not may_send(m, newcomer)  # partition 1: old-epoch batch still in flight (step 2b)
    assert m.producer_epoch == 1
    assert not may_send(m, a1)  # partition 0: a2 is on the wire (step 3 must wait)
    m.on_success(other, base_offset=0)  # the old epoch finishes on partition 1
    send(m, newcomer)
    assert newcomer.header == (PID, 1, 0)  # partition 1 restarted at 0 under the new epoch
    m.on_error(a2, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    send(m, a1)
    assert (a1.header, a2.header) == ((PID, 1, 0), (PID, 1, 1))
    assert m.statistics().sequence_resets == 2


def test_old_epoch_retry_on_another_partition_finishes_under_the_old_epoch() -> None:
    """A partition that did not ask for the reset may hold batches already written: they
    are retried with their old header, where the broker can still de-duplicate them."""
    m = ready()
    a = Batch(partition=0)
    b = Batch(partition=1)
    send(m, a, b)
    fail(m, b, E.REQUEST_TIMED_OUT)  # b may be written
    fail(m, a, E.UNKNOWN_PRODUCER_ID)  # partition 0 asks for the bump
    send(m, b)
    assert b.header == (PID, 0, 0)  # not renumbered
    m.on_success(b, base_offset=0)
    c = Batch(partition=1)
    send(m, c)
    assert c.header == (PID, 1, 0)


# ---- step 8a: non-retriable errors ------------------------------------------------------

def test_non_retriable_error_fails_the_batch_and_resets_the_partition() -> None:
    m = ready()
    b1, b2 = batches(2)
    send(m, b1, b2)
    d = m.on_error(b1, E.TOPIC_AUTHORIZATION_FAILED)
    assert (d.action, d.reset_sequences) == (Action.FAIL, True)
    assert fail(m, b2, E.OUT_OF_ORDER_SEQUENCE_NUMBER) is Action.RETRY
    send(m, b2)
    assert b2.header == (PID, 1, 0)  # takes the failed batch's place at the new epoch


def test_invalid_producer_epoch_fails_the_batch_for_an_idempotent_producer() -> None:
    m = ready()
    b = Batch()
    send(m, b)
    d = m.on_error(b, E.INVALID_PRODUCER_EPOCH)
    assert (d.action, d.reset_sequences) == (Action.FAIL, True)
    assert m.fatal_error is None


@pytest.mark.parametrize(("code", "kw"), [
    (E.CLUSTER_AUTHORIZATION_FAILED, {}),
    (E.PRODUCER_FENCED, {}),
    (E.INVALID_PRODUCER_EPOCH, {"transactional": True}),
])
def test_fatal_errors_stop_every_later_send(code: ErrorCode, kw: dict[str, bool]) -> None:
    m = ready(**kw)
    a, b = Batch(partition=0), Batch(partition=1)
    send(m, a, b)
    assert m.on_error(a, code).action is Action.FATAL
    assert state(m) is S.FATAL and m.fatal_error is not None
    assert code.name in str(m.fatal_error)
    assert not may_send(m, Batch(partition=2))
    assert m.on_error(b, E.NOT_LEADER_OR_FOLLOWER).action is Action.FATAL
    m.on_delivery_timeout(Batch())  # still no exception after the fact
    assert "fatal=" in repr(m)


# ---- MESSAGE_TOO_LARGE: split -------------------------------------------------------------

def test_split_gives_the_new_batches_the_old_range_in_order() -> None:
    m = ready()
    b0, big, after = Batch(record_count=3), Batch(record_count=5), Batch(record_count=1)
    send(m, b0, big, after)
    m.on_success(b0, base_offset=0)
    assert m.on_error(big, E.MESSAGE_TOO_LARGE).action is Action.SPLIT
    parts = [Batch(record_count=2), Batch(record_count=3)]
    m.on_split(big, parts)
    assert [p.header for p in parts] == [(PID, 0, 3), (PID, 0, 5)]
    assert m.on_error(after, E.OUT_OF_ORDER_SEQUENCE_NUMBER).action is Action.RETRY
    assert state(m) is S.READY  # `after` is not the next sequence: no bump
    assert not may_send(m, parts[1]) and may_send(m, parts[0])
    for p in parts:
        send(m, p)
        m.on_success(p, base_offset=10)
    send(m, after)
    assert after.base_sequence == 8
    assert m.statistics().splits == 1


def test_split_must_keep_every_record() -> None:
    m = ready()
    big = Batch(record_count=4)
    send(m, big)
    m.on_error(big, E.MESSAGE_TOO_LARGE)
    with pytest.raises(IllegalStateError):
        m.on_split(big, [Batch(record_count=3)])


def test_single_record_too_large_fails_and_resets() -> None:
    m = ready()
    b = Batch()
    send(m, b)
    d = m.on_error(b, E.MESSAGE_TOO_LARGE)
    assert (d.action, d.reset_sequences) == (Action.FAIL, True)


# ---- step 6 and step 1: delivery timeout, unresolved batches ----------------------------

def test_timeout_with_three_in_flight_bumps_once_they_are_all_gone() -> None:
    m = ready()
    b1, b2, b3 = batches(3)
    send(m, b1, b2, b3)
    m.on_delivery_timeout(b1)
    m.on_delivery_timeout(b2)
    assert state(m) is S.READY  # b3 may still prove them written
    m.on_delivery_timeout(b3)
    assert state(m) is S.BUMP_REQUIRED  # nothing in flight, still unresolved: step 1b
    nxt = Batch()
    send(m, nxt)
    assert nxt.header == (PID, 1, 0)
    s = m.statistics()
    assert (s.unresolved_batches, s.resolved_batches, s.partitions_with_unresolved) == (3, 0, 0)


def test_later_success_resolves_the_unresolved_batch() -> None:
    m = ready()
    b1, b2 = batches(2)
    send(m, b1, b2)
    m.on_delivery_timeout(b1)
    assert not may_send(m, Batch())
    m.on_success(b2, base_offset=1)  # b2 was accepted, so b1 was written: step 1a
    p = m.partition_state(b1)
    assert p.unresolved == [] and state(m) is S.READY
    nxt = Batch()
    send(m, nxt)
    assert nxt.header == (PID, 0, 2)
    assert m.statistics().resolved_batches == 1


def test_expired_batch_answered_late_resolves_itself() -> None:
    m = ready()
    b1, b2 = batches(2)
    send(m, b1, b2)
    m.on_delivery_timeout(b1)
    m.on_success(b1, base_offset=0)  # the late answer still counts (Java does the same)
    assert m.partition_state(b1).unresolved == []


def test_expired_before_draining_consumes_no_sequence() -> None:
    m = ready()
    never_sent = Batch(record_count=3)
    m.on_delivery_timeout(never_sent, possibly_written=False)
    b = Batch()
    send(m, b)
    assert b.base_sequence == 0 and state(m) is S.READY


def test_expired_held_batch_certainly_unwritten_resets_at_once() -> None:
    m = ready()
    b1, b2 = batches(2)
    send(m, b1, b2)
    fail(m, b1, E.NOT_LEADER_OR_FOLLOWER)  # definite: not written
    m.on_delivery_timeout(b1, possibly_written=False)
    assert m.partition_state(b1).unresolved == []
    assert state(m) is S.BUMP_REQUIRED


def test_retriable_error_out_of_time_after_an_ambiguous_attempt_is_unresolved() -> None:
    m = ready()
    b1, b2 = batches(2)
    send(m, b1, b2)
    fail(m, b1, E.REQUEST_TIMED_OUT)
    send_again = may_send(m, b1)
    assert not send_again  # b2 on the wire
    m.on_success(b2, base_offset=5)  # b2 written means b1 was written
    send(m, b1)
    late = classify(E.NOT_LEADER_OR_FOLLOWER, attempts=2, idempotent=True,
                    delivery_deadline_passed=True)
    d = m.on_error(b1, E.NOT_LEADER_OR_FOLLOWER, None, late)
    assert (d.action, d.retriable, d.reset_sequences) == (Action.FAIL, True, False)


def test_retriable_error_out_of_time_without_ambiguity_resets() -> None:
    m = ready()
    b = Batch()
    send(m, b)
    late = classify(E.NOT_LEADER_OR_FOLLOWER, attempts=1, idempotent=True,
                    delivery_deadline_passed=True)
    d = m.on_error(b, E.NOT_LEADER_OR_FOLLOWER, 5.0, late)
    assert (d.action, d.reset_sequences) == (Action.FAIL, True)
    assert m.last_error_at == 5.0


# ---- epoch overflow and the KIP-360 bump ------------------------------------------------

def test_epoch_overflow_asks_for_a_new_producer_id() -> None:
    """At epoch 32767 a bump needs a fresh PID."""
    m = ready(epoch=MAX_PRODUCER_EPOCH)
    held, other = Batch(partition=0), Batch(partition=1, record_count=4)
    send(m, held, other)
    m.on_success(other, base_offset=0)
    fail(m, held, E.UNKNOWN_PRODUCER_ID)
    assert not may_send(m, held)
    assert state(m) is S.UNINITIALIZED and m.needs_producer_id()
    assert m.init_producer_id_params() == (-1, -1)
    m.on_producer_id(PID + 1, 0)
    send(m, held)
    assert held.header == (PID + 1, 0, 0)
    nxt = Batch(partition=1)
    send(m, nxt)
    assert nxt.header == (PID + 1, 0, 0)  # every partition restarts at 0
    assert m.statistics().producer_id_resets == 1


def test_kip360_mode_asks_the_broker_to_bump() -> None:
    m = ready(bump_via_init_producer_id=True)
    b = Batch()
    send(m, b)
    fail(m, b, E.UNKNOWN_PRODUCER_ID)
    assert not may_send(m, b)
    assert m.needs_producer_id()
    assert m.init_producer_id_params() == (PID, 0)
    assert state(m) is S.BUMPING
    m.on_producer_id(PID, 1)
    send(m, b)
    assert b.header == (PID, 1, 0)
    assert m.statistics().epoch_bumps == 1


def test_kip360_unsupported_falls_back_to_a_fresh_id_from_then_on() -> None:
    m = ready(bump_via_init_producer_id=True)
    b = Batch()
    send(m, b)
    fail(m, b, E.UNKNOWN_PRODUCER_ID)
    m.init_producer_id_params()
    m.on_bump_unsupported()
    assert state(m) is S.UNINITIALIZED
    assert m.init_producer_id_params() == (-1, -1)
    m.on_producer_id(PID + 7, 0)
    send(m, b)
    assert b.header == (PID + 7, 0, 0)
    fail(m, b, E.UNKNOWN_PRODUCER_ID)  # the next bump goes straight to a fresh id
    assert m.init_producer_id_params() == (-1, -1)
    m.on_producer_id(PID + 8, 0)
    send(m, b)
    assert b.header == (PID + 8, 0, 0)
    assert m.statistics().producer_id_resets == 2


def test_kip360_mode_epoch_exhausted_asks_for_a_fresh_id() -> None:
    m = ready(epoch=MAX_PRODUCER_EPOCH, bump_via_init_producer_id=True)
    b = Batch()
    send(m, b)
    fail(m, b, E.UNKNOWN_PRODUCER_ID)
    assert m.init_producer_id_params() == (-1, -1)
    assert state(m) is S.INITIALIZING


def test_kip360_retriable_failure_keeps_the_bump_pending() -> None:
    m = ready(bump_via_init_producer_id=True)
    b = Batch()
    send(m, b)
    fail(m, b, E.UNKNOWN_PRODUCER_ID)
    m.init_producer_id_params()
    m.on_init_producer_id_failed(KafkaConnectionError("gone"))
    assert state(m) is S.BUMP_REQUIRED
    assert m.init_producer_id_params() == (PID, 0)


# ---- KIP-1269 -----------------------------------------------------------------------------

def test_in_flight_limit_learned_from_responses_and_reset_on_leader_change() -> None:
    m = ready()
    tp = TP("t", 0)
    first = batches(5)
    send(m, *first)
    assert not may_send(m, tp) and not may_send(m, Batch())  # default window: 5
    m.on_response_batches_to_retain(m.partition_state(tp), 20)
    more = batches(15)
    send(m, *more)
    assert not may_send(m, tp)
    m.on_response_batches_to_retain(m.partition_state(tp), 0)  # nonsense is ignored
    m.on_response_batches_to_retain(m.partition_state(tp), -3)
    assert m.partition_state(tp).in_flight_limit == 20
    m.on_leader_change(tp)
    assert m.partition_state(tp).in_flight_limit == 5
    for b in [*first, *more][:15]:
        m.on_success(b, base_offset=0)
        assert not may_send(m, tp)  # 19..5 left: must get below 5 first
    m.on_success(more[-5], base_offset=0)
    assert may_send(m, tp)  # 4 left


def test_the_limit_is_per_partition() -> None:
    m = ready()
    m.on_response_batches_to_retain(m.partition_state(TP("t", 1)), 8)
    send(m, *batches(5, partition=0))
    send(m, *batches(8, partition=1))
    assert not may_send(m, TP("t", 0)) and not may_send(m, TP("t", 1))


# ---- introspection ------------------------------------------------------------------------

def test_statistics_and_repr() -> None:
    m = ready()
    send(m, *batches(2), Batch(partition=1))
    s = m.statistics()
    assert (s.state, s.producer_id, s.partitions, s.in_flight_batches) == (S.READY, PID, 2, 3)
    assert f"pid={PID}" in repr(m) and "READY" in repr(m)


# ---- stateful property test ---------------------------------------------------------------

@dataclass
class _Request:
    batch: Batch
    header: tuple[int, int, int]  # what went on the wire; later restamps do not change it
    records: list[int]


FAULTS = ("ok", "ok", "ok", "lost_response", "dropped", "not_leader", "timed_out_after_write")


class IdempotenceMachine(RuleBasedStateMachine):
    """Random interleavings of append/drain/answer/lose/timeout/broker amnesia against a
    simulated broker. Checked: the log never holds a record twice and keeps the order of
    sends; every record reported written is in the log; in-flight sequences never overlap;
    the in-flight window is respected; retries go alone; and at the end, with faults gone,
    everything drains (no deadlock)."""

    def __init__(self) -> None:
        super().__init__()
        # no partition has an acknowledged batch yet: its first batches are in play too
        self.clock = Clock()
        self.m = ready(pipelined=False, clock=self.clock)
        # partition 0's leader wants a first sequence of 0 (Tansu), partition 1's takes any
        # (Apache Kafka's leniency); both answer a batch they remember with its offset
        self.brokers = {p: SimPartition(lenient=p == 1, remembered=E.NONE) for p in PARTITIONS}
        self.queues: dict[int, deque[Batch]] = {p: deque() for p in PARTITIONS}
        self.wire: dict[int, deque[_Request]] = {p: deque() for p in PARTITIONS}
        self.answers: dict[int, deque[tuple[Batch, int]]] = {p: deque() for p in PARTITIONS}
        self.live: dict[int, Batch] = {}  # batches not completed, by first record id
        self.acked: set[int] = set()
        self.failed_definitely: set[int] = set()
        self.deleted: set[int] = set()  # records retention removed from the logs

    # ---- the producer side -----------------------------------------------------------

    @rule(p=st.sampled_from(PARTITIONS), n=st.integers(1, 3))
    def append(self, p: int, n: int) -> None:
        b = Batch(partition=p, record_count=n)
        self.live[b.records[0]] = b
        self.queues[p].append(b)

    @rule(p=st.sampled_from(PARTITIONS))
    def drain(self, p: int) -> None:
        self._drain(p)

    def _drain(self, p: int) -> bool:
        queue = self.queues[p]
        if not queue:
            return False
        if not may_send(self.m, queue[0]):
            return self._fail_doomed()
        b = queue.popleft()
        state = self.m.partition_state(b)
        retry = b.base_sequence >= 0
        if retry:
            assert state.on_wire_count == 0, "a retry must go alone (step 2c)"
        else:
            assert len(state.in_flight) < state.in_flight_limit, "KIP-1269 window"
        take(self.m, b)
        self.wire[p].append(_Request(b, b.header, list(b.records)))
        return True

    # ---- the broker and the network --------------------------------------------------

    @precondition(lambda self: any(self.wire.values()))
    @rule(data=st.data(), fault=st.sampled_from(FAULTS))
    def broker_handles(self, data: st.DataObject, fault: str) -> None:
        p = data.draw(st.sampled_from([p for p in PARTITIONS if self.wire[p]]))
        self._handle(p, fault)

    def _handle(self, p: int, fault: str) -> None:
        req = self.wire[p].popleft()
        pid, epoch, base = req.header
        if fault == "dropped":
            self.answers[p].append((req.batch, E.NETWORK_EXCEPTION))
            return
        if fault == "not_leader":
            self.answers[p].append((req.batch, E.NOT_LEADER_OR_FOLLOWER))
            return
        code, _offset = self.brokers[p].append(pid, epoch, base, req.records)
        if code == E.NONE and fault == "lost_response":
            code = E.NETWORK_EXCEPTION
        elif code == E.NONE and fault == "timed_out_after_write":
            code = E.REQUEST_TIMED_OUT
        self.answers[p].append((req.batch, code))

    @precondition(lambda self: any(self.answers.values()))
    @rule(data=st.data())
    def client_hears(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from([p for p in PARTITIONS if self.answers[p]]))
        self._hear(p)

    def _hear(self, p: int) -> None:
        b, code = self.answers[p].popleft()
        if b.records[0] not in self.live:
            return  # expired meanwhile; like the sender, ignore the late answer
        if code == E.NONE:
            self.m.on_success(b, base_offset=0)
            self._done(b, ok=True)
            self._fail_doomed()
            return
        if code == E.DUPLICATE_SEQUENCE_NUMBER:
            self.m.on_success(b, base_offset=-1, duplicate=True)
            self._done(b, ok=True)
            return
        d = self.m.on_error(b, code)
        assert d.action in (Action.RETRY, Action.FAIL), d
        if d.action is Action.RETRY:
            b.attempts += 1
            insert_in_sequence_order(self.queues[p], b)
        else:
            if not d.retriable:
                self.failed_definitely.update(b.records)
            self._done(b, ok=False)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def delivery_timeout(self, data: st.DataObject) -> None:
        b = self.live[data.draw(st.sampled_from(sorted(self.live)))]
        if b in self.queues[b.partition]:
            self.queues[b.partition].remove(b)
        self.m.on_delivery_timeout(b, possibly_written=b.attempts > 0)
        self._done(b, ok=False)

    def _idle(self) -> list[int]:
        return [p for p in PARTITIONS if not self.wire[p] and not self.answers[p]
                and not self.m.partition_state(TP("t", p)).in_flight]

    @precondition(lambda self: bool(self._idle()))
    @rule(data=st.data())
    def retention_removes_everything(self, data: st.DataObject) -> None:
        """UNKNOWN_PRODUCER_ID after retention deleted all of our
        records, and with them the broker's state for our producer id. Only for a partition
        we are not writing to: retention works on days, not on records still being sent."""
        p = data.draw(st.sampled_from(self._idle()))
        broker = self.brokers[p]
        self.clock.now += 3600.0  # retention (or producer.id.expiration.ms) takes idle time
        self.deleted.update(broker.log)
        broker.log.clear()
        broker.producers.clear()

    @rule(p=st.sampled_from(PARTITIONS), window=st.integers(5, 8))
    def broker_announces_window(self, p: int, window: int) -> None:
        self.brokers[p].window = window
        self.m.on_response_batches_to_retain(self.m.partition_state(TP("t", p)), window)

    @rule(p=st.sampled_from(PARTITIONS))
    def leader_changes(self, p: int) -> None:
        self.brokers[p].window = 5
        self.m.on_leader_change(TP("t", p))

    def _fail_doomed(self) -> bool:
        """What the sender does with the batches idempotence gave up on (they can no longer
        be written in order, or exactly once): out of the queue, failed."""
        doomed = self.m.take_doomed()
        for b, _error in doomed:
            batch = cast(Batch, b)
            if batch in self.queues[batch.partition]:
                self.queues[batch.partition].remove(batch)
            self._done(batch, ok=False)
        return bool(doomed)

    def _done(self, b: Batch, *, ok: bool) -> None:
        self.live.pop(b.records[0], None)
        if ok:
            self.acked.update(b.records)

    # ---- invariants -----------------------------------------------------------------

    @invariant()
    def log_has_no_duplicates_and_keeps_order(self) -> None:
        for broker in self.brokers.values():
            assert len(broker.log) == len(set(broker.log)), "a record was written twice"
            assert broker.log == sorted(broker.log), "records written out of order"

    @invariant()
    def acknowledged_records_are_in_the_log(self) -> None:
        logged = {r for broker in self.brokers.values() for r in broker.log} | self.deleted
        assert self.acked <= logged
        assert not (self.failed_definitely & logged), "a record reported failed was written"

    @invariant()
    def in_flight_sequences_never_overlap(self) -> None:
        for p in PARTITIONS:
            state = self.m.partition_state(TP("t", p))
            assert state.on_wire_count == sum(e.on_wire for e in state.in_flight)
            assert state.on_wire_count <= max(state.in_flight_limit, len(state.in_flight))
            same_epoch: dict[tuple[int, int], list[tuple[int, int]]] = {}
            for e in state.in_flight:
                key = (e.batch.producer_id, e.batch.producer_epoch)
                same_epoch.setdefault(key, []).append((e.base_sequence, e.last_sequence))
            for ranges in same_epoch.values():
                for (_b1, end1), (b2, _e2) in pairwise(ranges):
                    assert sequence_precedes(end1, b2), f"overlap in {ranges}"

    def teardown(self) -> None:
        """Faults stop: every batch must complete (no partition stays blocked)."""
        for _ in range(2000):
            progressed = False
            for p in PARTITIONS:
                while self._drain(p):
                    progressed = True
                while self.wire[p]:
                    self._handle(p, "ok")
                    progressed = True
                while self.answers[p]:
                    self._hear(p)
                    progressed = True
            if not progressed:
                break
        stuck = list(self.live.values())
        assert not stuck, f"never completed: {stuck[:3]} {self.m!r}"
        self.log_has_no_duplicates_and_keeps_order()
        self.acknowledged_records_are_in_the_log()


# like the other two machines: AIOKPROD_MACHINE_EXAMPLES=5000 for a long hunt, fewer for
# `make test-quick`
IdempotenceMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("AIOKPROD_MACHINE_EXAMPLES", examples(300))),
    stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestIdempotenceMachine = IdempotenceMachine.TestCase
