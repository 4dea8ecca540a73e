"""The steps around a partition's verdict: what a drain does before it asks, and with the answers.

``PartitionProducer.verdict`` alone decides whether a partition's head batch goes, and asking it
changes nothing. What must happen around the question is here, each step named, for the one
producer whose idempotence and transaction it is given:

* ``before_drain``: idempotence's step 1 and a pending epoch bump (``maintain``), then the facts
  every verdict of this drain reads (``SendFacts``), from idempotence and the transaction;
* ``give_up_unrenumberable``: when a verdict answers GIVE_UP_FIRST (a retry at the head, and
  held batches that may not be renumbered, docs/idempotence.md F3), they are given up and the
  partition is asked again;
* ``taken``: a batch that goes joins the transaction (KIP-890), gets the transactional bit and
  its sequence (steps 3-5), before the accumulator seals it;
* ``held``: a hold that asks something of the producer is noted;
* ``after_drain``: the transaction made abortable when only a new epoch could let its batches
  go, and one AddPartitionsToTxn for the partitions not part of it yet. The sender then fails
  the batches idempotence gave up on (``BatchOutcomes.fail_doomed``).

A producer that is neither idempotent nor transactional has rules that ask nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiokprod.producer.partition import (
    HOLD_TXN_JOIN,
    HOLD_TXN_NEEDS_BUMP,
    PartitionProducer,
    SendFacts,
)

if TYPE_CHECKING:
    from aiokprod.producer.batch import ProducerBatch
    from aiokprod.producer.idempotent.idempotence import IdempotenceManager
    from aiokprod.producer.transactional.transaction_manager import TransactionManager

__all__ = ["SendRules"]


class SendRules:
    """One producer's steps around its partitions' verdicts (see the module's docstring)."""

    __slots__ = ("_idem", "_needs_bump", "_to_join", "_txn", "facts")

    def __init__(self, idempotence: IdempotenceManager | None = None,
                 transaction: TransactionManager | None = None) -> None:
        if transaction is not None and idempotence is None:
            raise ValueError("a transactional producer is idempotent")
        self._idem = idempotence
        self._txn = transaction
        self.facts = SendFacts()
        self._to_join: list[PartitionProducer[Any]] = []
        self._needs_bump = False

    def before_drain(self, now: float) -> None:
        idem = self._idem
        if idem is None:
            return
        idem.maintain(now)
        idem.fill(self.facts)
        if self._txn is not None:
            self._txn.fill(self.facts)

    def give_up_unrenumberable(self, p: PartitionProducer[Any]) -> None:
        assert self._idem is not None, "only an idempotent partition answers GIVE_UP_FIRST"
        self._idem.give_up_unrenumberable(p)

    def held(self, p: PartitionProducer[Any], verdict: int) -> None:
        if verdict == HOLD_TXN_JOIN:
            self._to_join.append(p)
        elif verdict == HOLD_TXN_NEEDS_BUMP:
            self._needs_bump = True

    def taken(self, p: PartitionProducer[Any], batch: ProducerBatch) -> None:
        txn = self._txn
        if txn is not None:
            # the header's transactional bit lets the markers hide it from read_committed
            batch.transactional = True
            txn.taken(p)
        if self._idem is not None:
            self._idem.assign_sequence(batch)

    def after_drain(self) -> None:
        txn = self._txn
        if txn is None:
            return
        to_join, self._to_join = self._to_join, []
        needs_bump, self._needs_bump = self._needs_bump, False
        txn.after_drain(to_join, needs_bump)
