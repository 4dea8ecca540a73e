"""The transaction state table: every transition, every illegal pair, and the partition
bookkeeping that keeps a partition's batches back until it joined the transaction."""

from __future__ import annotations

import itertools

import pytest

from aiokprod.errors import IllegalStateError
from aiokprod.producer.partition import (
    HOLD_TXN_JOIN,
    SEND,
    TXN_ADDING,
    TXN_NONE,
    TXN_PENDING,
    PartitionProducer,
    Partitions,
    SendFacts,
)
from aiokprod.producer.transactional.transactions import (
    TRANSITIONS,
    ConsumerGroupMetadata,
    PartitionsInTransaction,
    TransactionState,
    TxnEvent,
    next_state,
)
from support.batch_double import Batch, new_table
from support.verdicts import may_send

S, E = TransactionState, TxnEvent

# the table written out by hand, so a change to TRANSITIONS must change this too
EXPECTED: dict[tuple[TransactionState, TxnEvent], TransactionState] = {
    (S.UNINITIALIZED, E.INIT_STARTED): S.INITIALIZING,
    (S.INITIALIZING, E.INIT_COMPLETED): S.READY,
    (S.INITIALIZING, E.INIT_FAILED): S.UNINITIALIZED,
    (S.READY, E.BEGIN): S.IN_TRANSACTION,
    (S.IN_TRANSACTION, E.PREPARED): S.PREPARED,
    (S.PREPARED, E.COMMIT_STARTED): S.COMMITTING,
    (S.PREPARED, E.ABORT_STARTED): S.ABORTING,
    (S.IN_TRANSACTION, E.COMMIT_STARTED): S.COMMITTING,
    (S.COMMITTING, E.COMMIT_STARTED): S.COMMITTING,
    (S.IN_TRANSACTION, E.ABORT_STARTED): S.ABORTING,
    (S.ABORTABLE_ERROR, E.ABORT_STARTED): S.ABORTING,
    (S.ABORTING, E.ABORT_STARTED): S.ABORTING,
    (S.COMMITTING, E.END_COMPLETED): S.READY,
    (S.ABORTING, E.END_COMPLETED): S.READY,
    (S.ABORTING, E.EPOCH_BUMP_STARTED): S.INITIALIZING,
    (S.IN_TRANSACTION, E.ABORTABLE_ERROR): S.ABORTABLE_ERROR,
    (S.COMMITTING, E.ABORTABLE_ERROR): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, E.ABORTABLE_ERROR): S.ABORTABLE_ERROR,
    **{(state, E.FATAL_ERROR): S.FATAL_ERROR for state in TransactionState},
}


@pytest.mark.parametrize(("state", "event"), sorted(EXPECTED, key=str))
def test_every_transition_of_the_table(state: TransactionState, event: TxnEvent) -> None:
    assert next_state(state, event) is EXPECTED[(state, event)]
    assert TRANSITIONS[(state, event)].rule  # each rule says where it comes from


def test_the_table_holds_exactly_the_expected_transitions() -> None:
    assert {k: v.target for k, v in TRANSITIONS.items()} == EXPECTED


ILLEGAL = [pair for pair in itertools.product(TransactionState, TxnEvent)
           if pair not in EXPECTED]


@pytest.mark.parametrize(("state", "event"), ILLEGAL, ids=lambda x: x.name)
def test_every_pair_the_table_does_not_list_is_illegal(state: TransactionState,
                                                       event: TxnEvent) -> None:
    with pytest.raises(IllegalStateError, match=state.name):
        next_state(state, event)


@pytest.mark.parametrize(("state", "call"), [
    (S.UNINITIALIZED, "begin_transaction()"),  # start() did not finish
    (S.IN_TRANSACTION, "begin_transaction()"),  # no nested transactions
    (S.READY, "commit_transaction()"),  # nothing begun
    (S.ABORTABLE_ERROR, "commit_transaction()"),  # must abort
    (S.ABORTING, "commit_transaction()"),
    (S.READY, "abort_transaction()"),
    (S.COMMITTING, "abort_transaction()"),  # a commit under way is only resumed
    (S.FATAL_ERROR, "begin_transaction()"),
    (S.READY, "initializing transactions"),
])
def test_illegal_calls_name_the_call_and_the_state(state: TransactionState, call: str) -> None:
    event = {"begin_transaction()": E.BEGIN, "commit_transaction()": E.COMMIT_STARTED,
             "abort_transaction()": E.ABORT_STARTED,
             "initializing transactions": E.INIT_STARTED}[call]
    with pytest.raises(IllegalStateError) as info:
        next_state(state, event)
    assert call in str(info.value) and state.name in str(info.value)


def test_a_whole_life_commit_abort_and_the_epoch_bump_after_an_abort() -> None:
    state = S.UNINITIALIZED
    for event in (E.INIT_STARTED, E.INIT_COMPLETED, E.BEGIN, E.COMMIT_STARTED,
                  E.END_COMPLETED, E.BEGIN, E.ABORTABLE_ERROR, E.ABORT_STARTED,
                  E.EPOCH_BUMP_STARTED, E.INIT_COMPLETED, E.BEGIN, E.ABORT_STARTED,
                  E.END_COMPLETED):
        state = next_state(state, event)
    assert state is S.READY
    assert next_state(state, E.FATAL_ERROR) is S.FATAL_ERROR


def test_fatal_is_final() -> None:
    for event in TxnEvent:
        if event is E.FATAL_ERROR:
            assert next_state(S.FATAL_ERROR, event) is S.FATAL_ERROR
        else:
            with pytest.raises(IllegalStateError):
                next_state(S.FATAL_ERROR, event)


def drained(parts: PartitionsInTransaction, p: PartitionProducer) -> bool:
    """What a drain does with a batch of ``p`` under transaction version 1: the partition's
    verdict on it (``PartitionProducer.verdict``), then the join a HOLD_TXN_JOIN asks for."""
    facts = SendFacts()
    facts.transactional = facts.txn_open = True
    facts.txn_version, facts.txn_number = 1, parts.number
    batch = Batch(topic=p.topic, partition=p.partition)
    verdict = p.verdict(batch, 0.0, 0, False, facts)  # type: ignore[arg-type]
    if verdict == HOLD_TXN_JOIN:
        parts.request_join(p)
    return verdict == SEND


def test_a_partition_waits_until_added_and_is_asked_for_once_per_drain() -> None:
    table = Partitions()
    t0, t1 = table.get("t", 0), table.get("t", 1)
    parts = PartitionsInTransaction(table)
    assert not parts.started
    # a drain sees three batches of two partitions: both pending, none sendable
    assert not drained(parts, t0)
    assert not drained(parts, t0)
    assert not drained(parts, t1)
    assert parts.stage(t0) == parts.stage(t1) == TXN_PENDING  # the partition holds it
    assert parts.take_pending() == [t0, t1]  # one request for both
    assert parts.started
    # while the request is on the wire they are neither sendable nor asked for again
    assert not drained(parts, t0)
    assert not parts.pending and parts.stage(t0) == TXN_ADDING
    parts.on_added([t0])
    parts.on_not_added([t1])  # e.g. CONCURRENT_TRANSACTIONS: asked again next time
    assert drained(parts, t0)
    assert not drained(parts, t1)
    assert parts.take_pending() == [t1]
    parts.on_added([t1])
    assert drained(parts, t1)
    assert parts.members() == [t0, t1]
    parts.clear()  # the transaction ended: the next one adds its partitions again
    assert not parts.started and parts.stage(t0) == TXN_NONE
    assert not drained(parts, t0)
    assert parts.take_pending() == [t0]


def test_an_answer_for_an_ended_transaction_adds_nothing_to_the_next() -> None:
    """The partitions are asked of their own stage: an AddPartitionsToTxn answered after its
    transaction ended (or failing then) leaves the next transaction's partitions alone."""
    table = Partitions()
    t0 = table.get("t", 0)
    parts = PartitionsInTransaction(table)
    assert not drained(parts, t0)
    taken = parts.take_pending()
    parts.clear()
    parts.on_added(taken)
    assert parts.stage(t0) == TXN_NONE and not parts.started
    parts.on_not_added(taken)
    assert not parts.pending


def test_a_transaction_stays_started_when_an_idle_topic_leaves_the_metadata() -> None:
    """The coordinator still counts a partition of an idle topic (dropped from the metadata by
    metadata.max.idle.ms): the table keeps it while the transaction is open, so the
    transaction still ends with EndTxn; once it ended, the partition may go."""
    table = Partitions()
    parts = PartitionsInTransaction(table)
    t0 = table.get("t", 0)
    assert not drained(parts, t0)
    parts.on_added(parts.take_pending())
    table.drop("t", 0)
    assert parts.started and parts.members() == [t0] and table.find("t", 0) is t0
    parts.clear()
    table.drop("t", 0)
    assert not parts.started and table.find("t", 0) is None


def test_a_partition_added_implicitly_may_send_at_once() -> None:
    """KIP-890 (transaction version 2): the leader adds the partition itself."""
    table = Partitions()
    t0 = table.get("t", 0)
    parts = PartitionsInTransaction(table)
    parts.add_implicitly(t0)
    assert drained(parts, t0) and parts.started and not parts.pending


def test_offsets_alone_start_a_transaction_on_the_coordinator() -> None:
    parts = PartitionsInTransaction(Partitions())
    parts.offsets_added.add("group")
    assert parts.started  # EndTxn is needed although no partition was added
    assert "groups=1" in repr(parts)


def test_consumer_group_metadata_defaults_are_those_of_a_plain_group_id() -> None:
    meta = ConsumerGroupMetadata("g")
    assert (meta.generation_id, meta.member_id, meta.group_instance_id) == (-1, "", None)


def test_an_epoch_bumped_by_end_txn_is_adopted() -> None:
    # transaction version 2 (KIP-890): every EndTxn answer carries the bumped epoch
    from aiokprod.producer.idempotent.idempotence import IdempotenceManager
    from aiokprod.producer.idempotent.producer_id_state import ProducerIdState

    idem = IdempotenceManager(partitions=new_table(), transactional=True,
                              bump_via_init_producer_id=True)
    idem.init_producer_id_params()
    idem.on_producer_id(7, 0)
    idem.on_epoch_bumped_by_broker(7, 1)
    assert (idem.state, idem.producer_id, idem.producer_epoch) == (ProducerIdState.READY, 7, 1)
    idem.on_epoch_bumped_by_broker(7, 2)
    assert (idem.state, idem.producer_epoch) == (ProducerIdState.READY, 2)
    assert idem.statistics().epoch_bumps == 2


def test_epoch_exhaustion_at_end_txn_moves_to_the_new_producer_id() -> None:
    # KIP-890: near 32767 the coordinator answers EndTxn with a new producer id at epoch 0;
    # the next transaction's batches start again at sequence 0 under it, one at a time until
    # its first is acknowledged (the leaders have never seen that id)
    from test_idempotence_reset import send

    from aiokprod.producer.idempotent.idempotence import IdempotenceManager
    from aiokprod.producer.idempotent.producer_id_state import ProducerIdState
    from aiokprod.producer.sequences import MAX_PRODUCER_EPOCH
    from support.batch_double import Batch, new_table

    idem = IdempotenceManager(partitions=new_table(), transactional=True,
                              bump_via_init_producer_id=True)
    idem.init_producer_id_params()
    idem.on_producer_id(7, MAX_PRODUCER_EPOCH - 2)
    first = Batch()
    send(idem, first)
    idem.on_success(first, base_offset=0)
    idem.on_epoch_bumped_by_broker(7, MAX_PRODUCER_EPOCH - 1)  # the last bump of id 7
    idem.on_epoch_bumped_by_broker(8, 0)  # exhausted: a new id
    assert (idem.state, idem.producer_id, idem.producer_epoch) == (ProducerIdState.READY, 8, 0)
    a, b = Batch(), Batch()
    send(idem, a)
    assert a.header == (8, 0, 0)
    assert not may_send(idem, b)
    idem.on_success(a, base_offset=1)
    send(idem, b)
    assert b.header == (8, 0, 1)
