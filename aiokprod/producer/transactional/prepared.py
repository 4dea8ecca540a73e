"""A transaction prepared by one producer and ended by another (two-phase commit).

``Producer.prepare_transaction()`` flushes the open transaction and hands back a
:class:`PreparedTransaction`: the transactional id, producer id and epoch that the coordinator
knows the transaction by. The producer may then be closed; the transaction stays open on the
coordinator. Whoever decides its fate — a job's driver that knows which of several attempts
counts — ends it with ``Producer.complete_prepared_transaction()`` on any started producer:
optionally consumer offsets added to it (AddOffsetsToTxn + TxnOffsetCommit, so a marker or a
consumer position becomes visible with the records), then EndTxn(commit or abort).

This is the shape of KIP-939 (``prepareTransaction`` / ``completeTransaction``), which no
Apache Kafka release ships yet; it needs nothing new from the broker, because EndTxn is
accepted from any connection that names the transaction's producer id and current epoch.
The guard is the epoch: a newer producer with the same transactional id (InitProducerId), or
the coordinator aborting the transaction after ``transaction.timeout.ms``, bumps it, and the
late commit is refused (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH) — never applied to records
it does not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import KafkaError, TransactionAbortedError, error_for_code
from aiokprod.producer.idempotent.producer_id import FENCED_CODES
from aiokprod.producer.transactional.coordinator import CoordinatorClient
from aiokprod.producer.transactional.transaction_end import (
    add_offsets_to_txn,
    end_txn,
    txn_offset_commit,
)
from aiokprod.producer.transactional.transactions import ConsumerGroupMetadata

__all__ = ["PreparedTransaction", "complete_prepared"]

# answers to a commit that say the transaction is gone: aborted by its timeout or by a newer
# producer with the same transactional id, so nothing of it can ever become visible
_GONE = FENCED_CODES | {ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                        ErrorCode.UNKNOWN_PRODUCER_ID}


@dataclass(frozen=True)
class PreparedTransaction:
    """What ends a prepared transaction: picklable, so it can travel between processes."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    # 1 (KIP-98) or 2 (KIP-890): which EndTxn versions the coordinator expects for it
    transaction_version: int
    # the coordinator knows of the transaction (a record or offsets joined it); an empty one
    # needs no EndTxn unless offsets are added when it is completed
    started: bool


async def complete_prepared(coordinators: CoordinatorClient, prepared: PreparedTransaction,
                            *, commit: bool, offsets: Mapping[tuple[str, int], int] | None,
                            group: str | None, deadline: float) -> None:
    """Add ``offsets`` for ``group`` (commit only), then EndTxn; raise what refuses it.

    Safe to repeat after a lost answer: EndTxn for a transaction already ended the same way
    is answered NONE by the coordinator.
    """
    txn_id, pid, epoch = prepared.transactional_id, prepared.producer_id, \
        prepared.producer_epoch
    started = prepared.started
    if commit and offsets and group:
        code = await add_offsets_to_txn(coordinators, txn_id, pid, epoch, group, deadline)
        _check(code, prepared, f"AddOffsetsToTxn(group {group!r})", commit)
        code = await txn_offset_commit(coordinators, txn_id, pid, epoch,
                                       ConsumerGroupMetadata(group), offsets, deadline)
        _check(code, prepared, f"TxnOffsetCommit(group {group!r})", commit)
        started = True
    if not started:
        return
    _, code, _v = await end_txn(coordinators, txn_id, pid, epoch, commit,
                                prepared.transaction_version, deadline)
    _check(code, prepared, f"EndTxn({'commit' if commit else 'abort'})", commit)


def _check(code: ErrorCode, prepared: PreparedTransaction, what: str, commit: bool) -> None:
    if code is ErrorCode.NONE:
        return
    where = (f"prepared transaction of transactional id {prepared.transactional_id!r} "
             f"(producer id {prepared.producer_id}, epoch {prepared.producer_epoch})")
    if commit and code in _GONE:
        raise TransactionAbortedError(
            f"{what}: {code.name}: the {where} can no longer commit: it was aborted, by the "
            f"coordinator after transaction.timeout.ms or by a newer producer with the same "
            f"transactional id; none of its records are visible to read_committed consumers")
    cls = error_for_code(int(code))
    error: KafkaError = cls(f"{what} for the {where}: {cls.message}")
    raise error
