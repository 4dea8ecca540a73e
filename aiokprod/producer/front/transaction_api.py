"""The transactions of one ``Producer`` (KIP-98, KIP-447, KIP-890; docs/transactions.md):
what its ``begin_transaction``, ``commit_transaction``, ``prepare_transaction``,
``abort_transaction`` and ``send_offsets_to_transaction`` do once the producer has checked
it is started, not closed and transactional.

``TransactionalApi`` is created by ``Producer.start()`` for a producer with a
``transactional_id`` and given what a transaction's end touches: the ``TransactionManager``
(its state and coordinator requests), the sender (queued batches to fail on abort, the fatal
error to keep in step), the accumulator (the batches a commit flushes) and the metrics (the
``txn-*`` times). The public methods stay on ``Producer``, one line each into this object.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from aiokprod.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from aiokprod.metrics import ProducerMetrics
from aiokprod.producer.batching.accumulator import RecordAccumulator
from aiokprod.producer.sending.sender import Sender
from aiokprod.producer.transactional.group_metadata import to_group_metadata
from aiokprod.producer.transactional.prepared import PreparedTransaction
from aiokprod.producer.transactional.transaction_manager import TransactionManager
from aiokprod.producer.transactional.transactions import (
    ConsumerGroupMetadata,
    TransactionState,
    TxnEvent,
    next_state,
)

__all__ = ["TransactionalApi", "send_refused"]


class TransactionalApi:
    """The transaction work behind ``Producer``'s transaction methods, for one started
    transactional producer."""

    __slots__ = ("_acc", "_max_block", "_metrics", "_sender", "_txn")

    def __init__(self, *, txn: TransactionManager, sender: Sender, acc: RecordAccumulator,
                 metrics: ProducerMetrics, max_block_ms: int) -> None:
        self._txn = txn
        self._sender = sender
        self._acc = acc
        self._metrics = metrics
        self._max_block = max_block_ms  # bounds each call (max.block.ms)

    def _time_operation(self, operation: str, started_ns: int) -> None:
        """Add the time since ``started_ns`` to ``{operation}-time-ns-total``."""
        self._metrics.operation_time[operation].record(time.perf_counter_ns() - started_ns, 1)

    async def initialize(self) -> None:
        """InitProducerId with the transactional id, within max.block.ms (``start()``)."""
        txn = self._txn
        started = time.perf_counter_ns()
        try:
            await txn.initialize(time.monotonic() + self._max_block / 1000)
        except KafkaError:
            self.sync_fatal()
            raise
        finally:
            self._time_operation("txn-init", started)

    def check_fatal(self) -> None:
        """Raise the fatal error that ended the transaction (fenced, not authorized...), if
        any; every transactional call checks it first."""
        self.sync_fatal()
        self._txn.check_fatal()

    def sync_fatal(self) -> None:
        """Keep the sender's and the transaction's fatal errors in step: a fenced transaction
        fails every queued record; a fatal Produce answer ends the transaction."""
        txn, sender = self._txn, self._sender
        if txn.fatal_error is not None and sender.fatal_error is None:
            sender.fail_everything(txn.fatal_error)
        elif sender.fatal_error is not None and txn.fatal_error is None:
            txn.become_fatal(sender.fatal_error)

    def begin(self) -> None:
        """``begin_transaction()``: local only, nothing is sent to a broker."""
        self._txn.begin()

    async def commit(self) -> None:
        """``commit_transaction()``: flush, then EndTxn(commit), within max.block.ms."""
        txn = self._txn
        started = time.perf_counter_ns()
        deadline = time.monotonic() + self._max_block / 1000
        try:
            if txn.state is TransactionState.ABORTABLE_ERROR:
                raise TransactionAbortableError(
                    f"commit_transaction(): the transaction cannot commit, abort it: "
                    f"{txn.abortable_error}") from txn.abortable_error
            txn.fire(TxnEvent.COMMIT_STARTED)
            await self._flush_transaction(deadline, "commit_transaction()")
            await txn.end(True, deadline)
        except KafkaError:
            self.sync_fatal()
            raise
        finally:
            self._time_operation("txn-commit", started)

    async def prepare(self) -> PreparedTransaction:
        """``prepare_transaction()``: flush and leave the transaction open (KIP-939)."""
        txn = self._txn
        started = time.perf_counter_ns()
        deadline = time.monotonic() + self._max_block / 1000
        try:
            next_state(txn.state, TxnEvent.PREPARED)  # IllegalStateError outside a transaction
            await self._flush_transaction(deadline, "prepare_transaction()")
            txn.fire(TxnEvent.PREPARED)
            return txn.prepared()
        except KafkaError:
            self.sync_fatal()
            raise
        finally:
            self._time_operation("txn-prepare", started)

    async def abort(self, deadline: float) -> None:
        """``abort_transaction()``, and a ``close()`` with a transaction open: fail what is
        queued, wait for what is on the wire, then EndTxn(abort), by ``deadline``."""
        txn, sender = self._txn, self._sender
        started = time.perf_counter_ns()
        try:
            txn.fire(TxnEvent.ABORT_STARTED)
            sender.abort_queued_batches(TransactionAbortedError(
                f"transaction aborted: the record was not sent (transactional.id "
                f"{txn.transactional_id!r})"))
            await self._await_batches(deadline, "abort_transaction()")
            self.sync_fatal()
            txn.check_fatal()
            await txn.wait_for_adds(deadline)
            await txn.end(False, deadline)
        except KafkaError:
            self.sync_fatal()
            raise
        finally:
            self._time_operation("txn-abort", started)

    async def send_offsets(self, offsets: Mapping[tuple[str, int], int],
                           group: str | ConsumerGroupMetadata | bytes | object) -> None:
        """``send_offsets_to_transaction()``: check the arguments, then AddOffsetsToTxn and
        TxnOffsetCommit within max.block.ms."""
        txn = self._txn
        group = to_group_metadata(group)  # ValueError for what no consumer hands out
        for key, offset in offsets.items():
            if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)
                    and isinstance(key[1], int) and isinstance(offset, int) and offset >= 0):
                raise ValueError(f"offsets must map (topic, partition) to an offset >= 0, "
                                 f"got {key!r}: {offset!r}")
        started = time.perf_counter_ns()
        try:
            await txn.send_offsets(offsets, group, time.monotonic() + self._max_block / 1000)
        except KafkaError:
            self.sync_fatal()
            raise
        finally:
            self._time_operation("txn-send-offsets", started)

    async def _flush_transaction(self, deadline: float, call: str) -> None:
        """The first half of a commit: every record acknowledged, none failed, every
        AddPartitionsToTxn answered; raises what stops the commit."""
        txn = self._txn
        await self._await_batches(deadline, call)
        self.sync_fatal()
        txn.check_fatal()
        if txn.must_abort:
            raise TransactionAbortableError(
                f"{call}: a record of the transaction failed, abort it: "
                f"{txn.abortable_error}") from txn.abortable_error
        await txn.wait_for_adds(deadline)

    async def _await_batches(self, deadline: float, call: str) -> None:
        """Wait for every batch of the transaction to be delivered or failed (max.block.ms)."""
        acc = self._acc
        pending = acc.begin_flush()
        try:
            waits = [b.wait_done() for b in pending]
            if waits:
                _, not_done = await asyncio.wait(
                    waits, timeout=max(0.0, deadline - time.monotonic()))
                if not_done:
                    for w in not_done:
                        w.cancel()
                    raise KafkaTimeoutError(
                        f"{call}: {len(not_done)} batch(es) undelivered after max.block.ms="
                        f"{self._max_block}; call it again to keep waiting")
        finally:
            acc.end_flush()


def send_refused(txn: TransactionManager) -> KafkaError:
    """Why a transactional producer refuses ``send()`` now (its transaction is not open)."""
    if txn.fatal_error is not None:
        error = txn.fatal_error
        fresh = type(error)(str(getattr(error, "message", error)))
        fresh.__cause__ = error
        return fresh if isinstance(fresh, KafkaError) else KafkaError(str(error))
    if txn.state is TransactionState.ABORTABLE_ERROR:
        return TransactionAbortableError(
            f"send(): the transaction must be aborted first: {txn.abortable_error}")
    return IllegalStateError(
        f"send() on a transactional producer outside a transaction (state "
        f"{txn.state.name}): call begin_transaction() or use `async with "
        f"producer.transaction():`")
