"""The transaction state machine (KIP-98), beside the idempotent one: decisions only, no I/O.

A transactional producer moves through the states of :class:`TransactionState`; the table
:data:`TRANSITIONS` says which event leads where, each rule naming the Java
``TransactionManager`` behaviour or KIP it follows. An event the table does not list raises
:class:`~aiokprod.errors.IllegalStateError`, so every illegal call (``commit_transaction()``
before ``begin_transaction()``, ``send()`` outside a transaction, ...) fails the same way.

Errors come in two kinds (see docs/transactions.md):

* *abortable*: a record of the transaction failed, the coordinator answered
  TRANSACTION_ABORTABLE, a group refused the offsets. The transaction can only be aborted;
  after ``abort_transaction()`` the producer is usable again.
* *fatal*: another producer with the same transactional id took over (PRODUCER_FENCED, or
  INVALID_PRODUCER_EPOCH from the coordinator), the transactional id is not authorized, the
  broker lacks a needed version. Nothing more can be done with this producer: close it and
  create a new one.

The I/O (FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn, AddOffsetsToTxn,
TxnOffsetCommit) lives in ``transaction_manager.py``, which fires these events (EndTxn and the
offsets' requests are built and sent by ``transaction_end.py``'s functions).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiokprod.errors import IllegalStateError
from aiokprod.producer.partition import (
    TXN_ADDED,
    TXN_ADDING,
    TXN_NONE,
    TXN_PENDING,
    PartitionProducer,
    Partitions,
)

__all__ = [
    "TRANSITIONS",
    "ConsumerGroupMetadata",
    "PartitionsInTransaction",
    "TransactionState",
    "Transition",
    "TxnEvent",
    "next_state",
]

log = logging.getLogger(__name__)


class TransactionState(enum.Enum):
    """Where a transactional producer stands (Java ``TransactionManager.State``)."""

    #: Created; ``start()`` has not run InitProducerId with the transactional id yet.
    UNINITIALIZED = "uninitialized"
    #: InitProducerId with the transactional id is under way (also the epoch bump after an
    #: abort that left sequences the broker cannot continue).
    INITIALIZING = "initializing"
    #: Producer id and epoch held, no transaction open: ``begin_transaction()`` may be called.
    READY = "ready"
    #: A transaction is open: ``send()`` and ``send_offsets_to_transaction()`` are allowed.
    IN_TRANSACTION = "in_transaction"
    #: ``prepare_transaction()`` returned: every record of the transaction is acknowledged and
    #: the transaction is left open on the coordinator, to be committed or aborted by whoever
    #: holds its ``PreparedTransaction`` (KIP-939's prepared state); ``close()`` keeps it open.
    PREPARED = "prepared"
    #: ``commit_transaction()``: flushing, then EndTxn(commit).
    COMMITTING = "committing"
    #: ``abort_transaction()``: queued records failed, in-flight ones awaited, EndTxn(abort).
    ABORTING = "aborting"
    #: Something in the transaction failed; only ``abort_transaction()`` is allowed.
    ABORTABLE_ERROR = "abortable_error"
    #: Fenced or otherwise unusable for good: close the producer and create a new one.
    FATAL_ERROR = "fatal_error"


class TxnEvent(enum.Enum):
    """What can happen to a transactional producer."""

    INIT_STARTED = "init_started"  # InitProducerId(transactional id) sent
    INIT_COMPLETED = "init_completed"  # ... answered with a producer id and epoch
    INIT_FAILED = "init_failed"  # ... did not complete within max.block.ms (retriable)
    BEGIN = "begin"  # begin_transaction()
    PREPARED = "prepared"  # prepare_transaction() flushed the transaction and holds it open
    COMMIT_STARTED = "commit_started"  # commit_transaction()
    ABORT_STARTED = "abort_started"  # abort_transaction()
    END_COMPLETED = "end_completed"  # EndTxn answered (or nothing needed ending)
    EPOCH_BUMP_STARTED = "epoch_bump_started"  # after an abort: InitProducerId to bump
    ABORTABLE_ERROR = "abortable_error"  # a record / request of the transaction failed
    FATAL_ERROR = "fatal_error"  # fenced, not authorized, unsupported


@dataclass(frozen=True)
class Transition:
    """One row of the table: where an event leads, and the rule that says so."""

    target: TransactionState
    rule: str


_S = TransactionState
_E = TxnEvent

#: (state, event) → next state. Anything else is illegal.
TRANSITIONS: dict[tuple[TransactionState, TxnEvent], Transition] = {
    (_S.UNINITIALIZED, _E.INIT_STARTED): Transition(
        _S.INITIALIZING, "KIP-98: InitProducerId with the transactional id fences older "
                         "instances and completes what they left open"),
    (_S.INITIALIZING, _E.INIT_COMPLETED): Transition(
        _S.READY, "Java TransactionManager: producer id and epoch received"),
    (_S.INITIALIZING, _E.INIT_FAILED): Transition(
        _S.UNINITIALIZED, "Java initTransactions(): a TimeoutException may be retried"),
    (_S.READY, _E.BEGIN): Transition(
        _S.IN_TRANSACTION, "Java beginTransaction(): local only, nothing is sent"),
    (_S.IN_TRANSACTION, _E.PREPARED): Transition(
        _S.PREPARED, "KIP-939 prepareTransaction(): flushed, the transaction stays open for "
                     "another party to end"),
    (_S.PREPARED, _E.COMMIT_STARTED): Transition(
        _S.COMMITTING, "KIP-939 completeTransaction(): the holder of a prepared transaction "
                       "commits it"),
    (_S.PREPARED, _E.ABORT_STARTED): Transition(
        _S.ABORTING, "KIP-939: a prepared transaction may still be aborted"),
    (_S.IN_TRANSACTION, _E.COMMIT_STARTED): Transition(
        _S.COMMITTING, "Java commitTransaction(): flush, then EndTxn(commit)"),
    (_S.COMMITTING, _E.COMMIT_STARTED): Transition(
        _S.COMMITTING, "Java: a commit that timed out is resumed by calling it again"),
    (_S.IN_TRANSACTION, _E.ABORT_STARTED): Transition(
        _S.ABORTING, "Java abortTransaction(): fail queued records, EndTxn(abort)"),
    (_S.ABORTABLE_ERROR, _E.ABORT_STARTED): Transition(
        _S.ABORTING, "Java: an abortable error leaves abortTransaction() as the only way on"),
    (_S.ABORTING, _E.ABORT_STARTED): Transition(
        _S.ABORTING, "Java: an abort that timed out is resumed by calling it again"),
    (_S.COMMITTING, _E.END_COMPLETED): Transition(
        _S.READY, "KIP-98: EndTxn(commit) answered; the coordinator writes the markers"),
    (_S.ABORTING, _E.END_COMPLETED): Transition(
        _S.READY, "KIP-98: EndTxn(abort) answered; the coordinator writes the markers"),
    (_S.ABORTING, _E.EPOCH_BUMP_STARTED): Transition(
        _S.INITIALIZING, "KIP-360: sequences left unusable by the abort need a new epoch"),
    (_S.IN_TRANSACTION, _E.ABORTABLE_ERROR): Transition(
        _S.ABORTABLE_ERROR, "Java TransactionManager.transitionToAbortableError"),
    (_S.COMMITTING, _E.ABORTABLE_ERROR): Transition(
        _S.ABORTABLE_ERROR, "Java: a record failing during commit's flush aborts the commit"),
    (_S.ABORTABLE_ERROR, _E.ABORTABLE_ERROR): Transition(
        _S.ABORTABLE_ERROR, "Java: the first abortable error is the one reported"),
    **{
        (state, _E.FATAL_ERROR): Transition(
            _S.FATAL_ERROR, "Java TransactionManager.transitionToFatalError: close the "
                            "producer, create a new one")
        for state in TransactionState
    },
}


def next_state(state: TransactionState, event: TxnEvent) -> TransactionState:
    """The state ``event`` leads to from ``state``; raises IllegalStateError if none."""
    transition = TRANSITIONS.get((state, event))
    if transition is None:
        raise IllegalStateError(
            f"transactional producer: {_CALLS.get(event, event.name)} is not allowed in "
            f"state {state.name}")
    return transition.target


# how an illegal event reads in the error a user sees
_CALLS: dict[TxnEvent, str] = {
    _E.INIT_STARTED: "initializing transactions (start())",
    _E.BEGIN: "begin_transaction()",
    _E.PREPARED: "prepare_transaction()",
    _E.COMMIT_STARTED: "commit_transaction()",
    _E.ABORT_STARTED: "abort_transaction()",
}


class ConsumerGroupMetadata(NamedTuple):
    """The consumer's group membership for ``send_offsets_to_transaction`` (KIP-447).

    With the generation and member id the group coordinator refuses offsets from a consumer
    that left the group (a zombie), the way the producer's epoch fences a zombie producer.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class PartitionsInTransaction:
    """Which partitions the open transaction holds, asked of the partitions themselves.

    Each partition's object holds its own stage in the open transaction
    (``PartitionProducer.txn_number`` and ``txn_stage``) and the table the open transaction's
    number (``Partitions.open_transaction``); this keeps the groups whose offsets joined. A
    partition a drain held because it was not added yet becomes pending (``request_join``);
    the manager sends one AddPartitionsToTxn for the pending partitions (``take_pending``,
    which reads them from the table), they are adding while it is on the wire, and added once
    the coordinator accepted them. Only added partitions may be drained. Ending a transaction
    (``clear``) counts the number on, which takes every partition out of it at once.
    """

    __slots__ = ("_partitions", "offsets_added")

    def __init__(self, partitions: Partitions[Any]) -> None:
        self._partitions = partitions  # the producer's table, shared with the accumulator
        # groups whose offsets joined this transaction (AddOffsetsToTxn answered)
        self.offsets_added: set[str] = set()

    @property
    def number(self) -> int:
        """The open transaction's number, kept by the table (a partition's txn_number 0 is
        none), which keeps the partitions of the open transaction until it ends."""
        return self._partitions.open_transaction

    def stage(self, p: PartitionProducer[Any]) -> int:
        """How far ``p`` got into the open transaction (TXN_*)."""
        return p.txn_stage if p.txn_number == self.number else TXN_NONE

    def request_join(self, p: PartitionProducer[Any]) -> None:
        """A drain held a batch of ``p`` because the partition is not part of the transaction
        yet (``PartitionProducer.verdict``, HOLD_TXN_JOIN): ask for it with the next
        AddPartitionsToTxn, unless it is already pending or being added."""
        if p.txn_number != self.number:
            p.txn_number = self.number
            p.txn_stage = TXN_PENDING

    def add_implicitly(self, p: PartitionProducer[Any]) -> None:
        """KIP-890: the partition leader adds it to the transaction itself (Produce v12)."""
        p.txn_number = self.number
        p.txn_stage = TXN_ADDED

    def _in_stage(self, stage: int) -> list[PartitionProducer[Any]]:
        """The partitions at ``stage`` of the open transaction, read from the table: once per
        AddPartitionsToTxn, not per drain."""
        number = self.number
        return [p for p in self._partitions if p.txn_number == number and p.txn_stage == stage]

    @property
    def pending(self) -> bool:
        """Partitions wait for an AddPartitionsToTxn."""
        return bool(self._in_stage(TXN_PENDING))

    def take_pending(self) -> list[PartitionProducer[Any]]:
        """The partitions for the next AddPartitionsToTxn; they are adding from now on."""
        taken = sorted(self._in_stage(TXN_PENDING), key=lambda p: (p.topic, p.partition))
        for p in taken:
            p.txn_stage = TXN_ADDING
        return taken

    def on_added(self, partitions: list[PartitionProducer[Any]]) -> None:
        for p in partitions:
            if self.stage(p) == TXN_ADDING:  # not if the transaction ended meanwhile
                p.txn_stage = TXN_ADDED

    def on_not_added(self, partitions: list[PartitionProducer[Any]]) -> None:
        """The request failed for these: ask again with the next request."""
        for p in partitions:
            if self.stage(p) == TXN_ADDING:
                p.txn_stage = TXN_PENDING

    def members(self) -> list[PartitionProducer[Any]]:
        """The partitions added or being added (reads every partition: at the transaction's
        end, and for diagnostics)."""
        number = self.number
        return [p for p in self._partitions if p.joined(number)]

    @property
    def started(self) -> bool:
        """The coordinator knows about this transaction: ending it needs EndTxn."""
        return bool(self.offsets_added) or bool(self.members())

    def clear(self) -> None:
        """A transaction ended: the next one starts empty."""
        self._partitions.open_transaction += 1
        self.offsets_added.clear()

    def __repr__(self) -> str:
        members = self.members()
        added = sum(1 for p in members if p.txn_stage == TXN_ADDED)
        return (f"<PartitionsInTransaction #{self.number} added={added} "
                f"adding={len(members) - added} pending={len(self._in_stage(TXN_PENDING))} "
                f"groups={len(self.offsets_added)}>")
