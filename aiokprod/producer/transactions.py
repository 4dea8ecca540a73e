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
TxnOffsetCommit) lives in ``producer/transaction_manager.py``, which fires these events.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import NamedTuple

from aiokprod.errors import IllegalStateError

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


_TP = tuple[str, int]


class PartitionsInTransaction:
    """Which partitions the open transaction holds, and which still need AddPartitionsToTxn.

    Pure bookkeeping for the sender's drain hook: a partition seen in a drain before it was
    added goes to ``pending``; the manager sends one AddPartitionsToTxn for all of them per
    sender wake-up (``take_pending``), they are ``adding`` while it is on the wire, and
    ``added`` once the coordinator accepted them. Only ``added`` partitions may be drained.
    """

    __slots__ = ("added", "adding", "offsets_added", "pending")

    def __init__(self) -> None:
        # accepted by the coordinator: their batches may be sent
        self.added: set[_TP] = set()
        # in the AddPartitionsToTxn request on the wire
        self.adding: set[_TP] = set()
        # seen by a drain, not yet asked for
        self.pending: set[_TP] = set()
        # groups whose offsets joined this transaction (AddOffsetsToTxn answered)
        self.offsets_added: set[str] = set()

    def may_send(self, tp: _TP) -> bool:
        """May a batch of ``tp`` be drained? If not, remember to add the partition."""
        if tp in self.added:
            return True
        if tp not in self.adding:
            self.pending.add(tp)
        return False

    def take_pending(self) -> list[_TP]:
        """The partitions for the next AddPartitionsToTxn; they are ``adding`` from now on."""
        taken = sorted(self.pending)
        self.adding.update(taken)
        self.pending.clear()
        return taken

    def on_added(self, partitions: list[_TP]) -> None:
        for tp in partitions:
            self.adding.discard(tp)
            self.added.add(tp)

    def on_not_added(self, partitions: list[_TP]) -> None:
        """The request failed for these: ask again with the next request."""
        for tp in partitions:
            self.adding.discard(tp)
            self.pending.add(tp)

    @property
    def started(self) -> bool:
        """The coordinator knows about this transaction: ending it needs EndTxn."""
        return bool(self.added or self.adding or self.offsets_added)

    def clear(self) -> None:
        """A transaction ended: the next one starts empty."""
        self.added.clear()
        self.adding.clear()
        self.pending.clear()
        self.offsets_added.clear()

    def __repr__(self) -> str:
        return (f"<PartitionsInTransaction added={len(self.added)} adding={len(self.adding)} "
                f"pending={len(self.pending)} groups={len(self.offsets_added)}>")
