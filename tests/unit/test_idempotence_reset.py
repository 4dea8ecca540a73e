"""Producer-id resets and OUT_OF_ORDER_SEQUENCE_NUMBER, on the real IdempotenceManager.

Issue 8, item 2: a broker that lost its producer state (Tansu restarted with memory storage)
refuses the KIP-360 bump and answers the fresh InitProducerId with the very same id and epoch.
Each test here failed before the fix, which compared ids and epochs only and so never noticed
that a reset had happened: the held batches kept their old sequences and were answered
OUT_OF_ORDER_SEQUENCE_NUMBER until delivery.timeout.ms.
"""

from __future__ import annotations

import math

from aiokprod._error_codes import ErrorCode
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.idempotent.producer_id_state import ProducerIdState
from aiokprod.producer.retry_policy import Action
from support.batch_double import Batch, new_table
from support.verdicts import may_send, take

E = ErrorCode
S = ProducerIdState


def kip360_manager() -> IdempotenceManager:
    """Like the producer's: bumps are asked of the broker (KIP-360)."""
    m = IdempotenceManager(partitions=new_table(), bump_via_init_producer_id=True)
    assert m.init_producer_id_params() == (-1, -1)
    m.on_producer_id(1, 0)
    for partition in range(2):  # as after a first acknowledged batch: pipelined from the start
        p = m.partition_state(Batch("t", partition))
        p.leader_holds_state = True
        p.last_acked_at = math.inf  # never idle, whatever the time

    return m


def send(m: IdempotenceManager, *batches: Batch) -> None:
    for b in batches:
        assert may_send(m, b), (b.header, m.partition_state(b))
        take(m, b)


def retry(m: IdempotenceManager, b: Batch, code: ErrorCode) -> Action:
    action = m.on_error(b, code).action
    if action is Action.RETRY:
        b.attempts += 1
    return action


def broker_forgets_us(m: IdempotenceManager) -> None:
    """What the sender does against a restarted Tansu: the bump is refused, the fresh
    InitProducerId returns the pair we already held."""
    assert m.needs_producer_id()
    assert m.init_producer_id_params() == (1, 0)  # KIP-360 bump request...
    m.on_bump_unsupported()  # ...refused with a non-retriable error
    assert m.init_producer_id_params() == (-1, -1)
    m.on_producer_id(1, 0)  # the restarted broker's first producer id, again
    assert m.state is S.READY


def test_same_id_and_epoch_again_renumbers_every_partitions_held_batches_from_zero() -> None:
    m = kip360_manager()
    for partition in (0, 1):  # acknowledged before the broker died: sequences 0-4
        first = Batch(partition=partition, record_count=5)
        send(m, first)
        m.on_success(first, base_offset=0)
    p0 = [Batch(partition=0, record_count=2) for _ in range(3)]
    p1 = [Batch(partition=1, record_count=3) for _ in range(2)]
    send(m, *p0, *p1)
    assert [b.base_sequence for b in p0] == [5, 7, 9]
    # the broker dies: every request fails, every batch is queued for a retry
    for b in (*p0, *p1):
        assert retry(m, b, E.NETWORK_EXCEPTION) is Action.RETRY
    # the first retry reaches the restarted broker, which knows no producer
    send(m, p0[0])
    assert retry(m, p0[0], E.UNKNOWN_PRODUCER_ID) is Action.RETRY
    broker_forgets_us(m)
    # partition 0 asked for the reset; partition 1 did not, but its sequences mean nothing
    # to this broker either: both start again at 0, in their original order
    for batches in (p0, p1):
        for offset, b in enumerate(batches):
            send(m, b)  # retries go one at a time (step 2c)
            m.on_success(b, base_offset=offset)
        assert [b.header for b in batches] == [
            (1, 0, sum(x.record_count for x in batches[:i])) for i in range(len(batches))]
    stats = m.statistics()
    assert stats.broker_state_losses == 1
    assert stats.sequence_resets == 2


def test_out_of_order_for_the_first_held_batch_after_a_same_pair_reset_resets_again() -> None:
    """A broker that loses our state twice: the second loss is noticed too (the partition
    had already been reset once, which must not turn OUT_OF_ORDER into endless retries)."""
    m = kip360_manager()
    a, b = Batch(), Batch()
    send(m, a, b)
    m.on_success(a, base_offset=0)
    assert retry(m, b, E.UNKNOWN_PRODUCER_ID) is Action.RETRY
    broker_forgets_us(m)
    send(m, b)
    assert b.header == (1, 0, 0)
    # lost again: 0 is not what the broker expects now, and no earlier batch can explain it
    decision = m.on_error(b, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert decision.action is Action.RETRY and decision.reset_sequences
    b.attempts += 1
    # bumps are known to be refused now: straight to a fresh id, a new one this time
    assert m.init_producer_id_params() == (-1, -1)
    m.on_producer_id(2, 0)
    send(m, b)
    assert b.header == (2, 0, 0)


def test_out_of_order_behind_an_earlier_held_batch_waits_for_its_answer() -> None:
    """Sequence 0 was written but its response lost; 1 expired on the wire (unresolved); 2
    is answered OUT_OF_ORDER because the broker still expects 1. Resetting now would
    renumber 0, which the broker already holds, and write it twice: 0's retry decides."""
    m = kip360_manager()
    b0, b1, b2 = Batch(), Batch(), Batch()
    send(m, b0, b1, b2)
    assert retry(m, b0, E.NETWORK_EXCEPTION) is Action.RETRY  # written, response lost
    m.on_delivery_timeout(b1, possibly_written=True)
    decision = m.on_error(b2, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert decision.action is Action.RETRY and not decision.reset_sequences
    assert m.state is S.READY
    b2.attempts += 1
    send(m, b0)  # the retry of 0: the broker answers DUPLICATE, a success
    m.on_success(b0, base_offset=-1, duplicate=True)
    # now 2 is the first held batch, and it follows the unresolved 1: a real gap
    send(m, b2)
    decision = m.on_error(b2, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert decision.reset_sequences


def test_late_success_from_before_a_same_pair_reset_does_not_count() -> None:
    """An expired batch's late answer carries the same id and epoch as the new numbering;
    it must not move the new generation's acknowledged sequence."""
    m = kip360_manager()
    old = [Batch() for _ in range(4)]
    send(m, *old)
    for b in old[:3]:
        m.on_delivery_timeout(b, possibly_written=True)
    assert retry(m, old[3], E.UNKNOWN_PRODUCER_ID) is Action.RETRY
    broker_forgets_us(m)
    send(m, old[3])
    assert old[3].header == (1, 0, 0)
    late = Batch()
    late.stamp(1, 0, 2)  # sequence 2 of the old numbering, answered after the reset
    m.on_success(late, base_offset=7)
    p = m.partition_state(old[3])
    assert p.last_acked_sequence == -1
    m.on_success(old[3], base_offset=0)
    assert p.last_acked_sequence == 0


def test_duplicate_is_a_success_only_after_an_ambiguous_attempt() -> None:
    """A first attempt answered DUPLICATE_SEQUENCE_NUMBER collides with another batch of the
    same sequences (one from before a same-pair reset, written late); after a lost response
    it is this batch, written by the earlier attempt."""
    m = kip360_manager()
    first, second = Batch(), Batch()
    send(m, first, second)
    assert not m.duplicate_is_success(first)  # never sent ambiguously: a collision
    assert retry(m, second, E.NETWORK_EXCEPTION) is Action.RETRY  # response lost
    m.on_success(first, base_offset=0)
    send(m, second)
    assert m.duplicate_is_success(second)
    m.on_success(second, base_offset=-1, duplicate=True)
    expired = Batch()
    send(m, expired)
    m.on_delivery_timeout(expired, possibly_written=True)
    assert m.duplicate_is_success(expired)  # untracked: its late answer only resolves
