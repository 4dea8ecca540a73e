"""A partition's first batches under a producer id, and batches that may already be written.

Apache Kafka accepts any first sequence from a producer id it holds no state for on a
partition. Three rules keep a partition's records in send order and each once regardless
(docs/idempotence.md, "A partition's first batches"), each checked here on the real
IdempotenceManager; tests/chaos/test_kafka_first_batches.py checks them against Kafka 4.4 and
3.9, where each failed before the rules existed.
"""

from __future__ import annotations

from test_idempotence_reset import broker_forgets_us, retry, send

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import OutOfOrderSequenceNumberError
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.retry_policy import Action
from aiokprod.producer.sequences import LEADER_STATE_IDLE_S
from support.batch_double import Batch, new_table
from support.verdicts import may_send

E = ErrorCode


def fresh_manager() -> IdempotenceManager:
    """As the producer's (KIP-360 bumps), with no batch acknowledged anywhere yet."""
    m = IdempotenceManager(partitions=new_table(), bump_via_init_producer_id=True)
    assert m.init_producer_id_params() == (-1, -1)
    m.on_producer_id(1, 0)
    return m


def acknowledged_first(m: IdempotenceManager) -> None:
    """A first batch sent and acknowledged: the leader holds our state, batches pipeline."""
    first = Batch()
    send(m, first)
    m.on_success(first, base_offset=0)


def new_id_after_bump(m: IdempotenceManager, producer_id: int) -> None:
    """Kafka's answer to a non-transactional KIP-360 bump: a new producer id at epoch 0."""
    assert m.needs_producer_id()
    assert m.init_producer_id_params() == (1, 0)
    m.on_producer_id(producer_id, 0)


# ---- rule 1: one batch at a time until the leader has acknowledged one ----------------------

def test_first_batch_of_a_partition_goes_alone_until_acknowledged() -> None:
    m = fresh_manager()
    a, b = Batch(), Batch()
    send(m, a)
    assert not may_send(m, b), "a second batch before the first is acknowledged"
    assert retry(m, a, E.NOT_LEADER_OR_FOLLOWER) is Action.RETRY
    assert not may_send(m, b)
    send(m, a)  # the retry, still alone
    m.on_success(a, base_offset=0)
    send(m, b)
    c = Batch()
    assert may_send(m, c), "pipelined once the leader checks our sequences"


def test_gate_is_per_partition() -> None:
    m = fresh_manager()
    a = Batch(partition=0)
    send(m, a)
    m.on_success(a, base_offset=0)
    send(m, Batch(partition=0), Batch(partition=0))  # partition 0 pipelines
    send(m, Batch(partition=1))
    assert not may_send(m, Batch(partition=1))  # partition 1 has not been acknowledged yet


def test_new_producer_id_closes_the_gate_again_and_a_same_id_bump_does_not() -> None:
    m = fresh_manager()
    a = Batch()
    send(m, a)
    m.on_success(a, base_offset=0)
    assert m.partition_state(a).leader_holds_state
    # a non-retriable error fails a batch and asks for a bump; Kafka answers with a new id
    b = Batch()
    send(m, b)
    assert m.on_error(b, E.CORRUPT_MESSAGE).action is Action.FAIL
    new_id_after_bump(m, 2)
    c, d = Batch(), Batch()
    send(m, c)
    assert c.header == (2, 0, 0)
    assert not may_send(m, d), "a new producer id is unknown to the leader"
    m.on_success(c, base_offset=1)
    send(m, d)
    # a KIP-360 bump that keeps the id (a transactional id's coordinator) keeps the gate open
    assert m.on_error(d, E.CORRUPT_MESSAGE).action is Action.FAIL
    assert m.init_producer_id_params() == (2, 0)
    m.on_producer_id(2, 1)
    e, f = Batch(), Batch()
    send(m, e, f)
    assert (e.header, f.header) == ((2, 1, 0), (2, 1, 1))


def test_broker_that_forgot_us_closes_the_gate() -> None:
    m = fresh_manager()
    acknowledged_first(m)
    failed = Batch()
    send(m, failed)
    assert m.on_error(failed, E.CORRUPT_MESSAGE).action is Action.FAIL  # asks for a bump
    broker_forgets_us(m)  # refused, and the fresh id is the pair we held
    b, c = Batch(), Batch()
    send(m, b)
    assert not may_send(m, c)


# ---- rule 2: an acknowledgement past a refused earlier batch is not accepted quietly ----------

def test_later_batch_written_ahead_of_a_refused_one_fails_the_refused_one() -> None:
    """The leader lost our state (or never had it) and took a gap: the refused batch can no
    longer be written in order, so it fails, with an error that says why."""
    m = fresh_manager()
    acknowledged_first(m)
    a, b = Batch(record_count=2), Batch()
    send(m, a, b)
    assert retry(m, a, E.NOT_LEADER_OR_FOLLOWER) is Action.RETRY
    m.on_success(b, base_offset=7)  # written although a (sequences 1-2) was not
    doomed = m.take_doomed()
    assert [batch for batch, _ in doomed] == [a]
    error = doomed[0][1]
    assert isinstance(error, OutOfOrderSequenceNumberError)
    assert "out of order" in str(error) and "t-0" in str(error)
    assert m.partition_state(a).in_flight == []
    assert m.take_doomed() == []  # each is handed over once
    assert m.statistics().unwritable_batches == 1
    c = Batch()
    send(m, c)
    assert c.base_sequence == 4  # continues after b, which the broker holds


def test_later_acknowledgement_leaves_an_earlier_batch_that_may_be_written_alone() -> None:
    """An earlier batch whose answer was lost may be in the log before the later one: the
    later acknowledgement is then in order, and its retry will be answered as a duplicate."""
    m = fresh_manager()
    acknowledged_first(m)
    a, b = Batch(), Batch()
    send(m, a, b)
    assert retry(m, a, E.NETWORK_EXCEPTION) is Action.RETRY
    m.on_success(b, base_offset=2)
    assert m.take_doomed() == []
    send(m, a)
    m.on_success(a, base_offset=1)
    assert m.partition_state(a).in_flight == []


# ---- rule 3: a batch that may be written is never renumbered ----------------------------------

def test_reset_never_renumbers_a_batch_that_may_be_written() -> None:
    """Sequence 1 was written but its answer lost; sequence 0 was refused and its retry is
    answered OUT_OF_ORDER (the broker holds 1). Renumbering both under a new id would write 1
    twice and 0 after it: both fail instead, and later batches start afresh."""
    m = fresh_manager()
    acknowledged_first(m)
    a, b, c = Batch(), Batch(), Batch()
    send(m, a, b, c)
    assert retry(m, a, E.NOT_LEADER_OR_FOLLOWER) is Action.RETRY
    assert retry(m, b, E.NETWORK_EXCEPTION) is Action.RETRY  # written, answer lost
    assert retry(m, c, E.OUT_OF_ORDER_SEQUENCE_NUMBER) is Action.RETRY  # behind a
    send(m, a)
    decision = m.on_error(a, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert decision.reset_sequences  # a is the first held batch: a real gap, bump
    a.attempts += 1
    new_id_after_bump(m, 2)
    assert not may_send(m, a)  # a and b fail rather than being renumbered
    doomed = dict(m.take_doomed())
    assert set(doomed) == {a, b}
    assert "twice" in str(doomed[b]) and "out of order" in str(doomed[a])
    assert (a.producer_id, b.producer_id) == (1, 1), "never restamped"
    send(m, c)  # c was certainly not written: renumbered from 0 under the new id
    assert c.header == (2, 0, 0)


def test_out_of_order_answer_proves_an_ambiguous_batch_unwritten() -> None:
    """A batch whose first answer was lost and whose retry is refused OUT_OF_ORDER was not
    written (the broker would have recognised its duplicate), so a reset renumbers it."""
    m = fresh_manager()
    acknowledged_first(m)
    a = Batch()
    send(m, a)
    assert retry(m, a, E.NETWORK_EXCEPTION) is Action.RETRY
    send(m, a)
    assert m.on_error(a, E.OUT_OF_ORDER_SEQUENCE_NUMBER).reset_sequences
    a.attempts += 1
    new_id_after_bump(m, 2)
    send(m, a)
    assert m.take_doomed() == []
    assert a.header == (2, 0, 0)


def test_a_partition_idle_past_the_limit_sends_its_next_batches_one_at_a_time_again() -> None:
    """A leader forgets a producer whose batches retention removed or that stayed idle past
    producer.id.expiration.ms, and then takes any first sequence again: after
    LEADER_STATE_IDLE_S holding nothing, the gate closes until the next acknowledgement."""
    now = [100.0]
    m = IdempotenceManager(partitions=new_table(), bump_via_init_producer_id=True,
                           clock=lambda: now[0])
    assert m.init_producer_id_params() == (-1, -1)
    m.on_producer_id(1, 0)
    acknowledged_first(m)
    a, b = Batch(), Batch()
    send(m, a, b)  # pipelined
    m.on_success(a, base_offset=1)
    m.on_success(b, base_offset=2)
    now[0] += LEADER_STATE_IDLE_S / 2
    c, d = Batch(), Batch()
    send(m, c, d)  # idle briefly: still pipelined
    m.on_success(c, base_offset=3)
    m.on_success(d, base_offset=4)
    now[0] += LEADER_STATE_IDLE_S
    e, f = Batch(), Batch()
    send(m, e)
    assert not may_send(m, f), "idle past the limit: one batch until it is acknowledged"
    m.on_success(e, base_offset=5)
    send(m, f)
