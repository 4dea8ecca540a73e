"""The transaction methods of ``Producer`` (KIP-98, KIP-447, KIP-890; docs/transactions.md).

A mixin, so that producer.py keeps the send path and the lifecycle: ``Producer`` inherits
these, and the state they read (declared below for the type checker) is ``Producer``'s own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from aiokprod.network.cluster import Cluster
from aiokprod.producer.accumulator import RecordAccumulator
from aiokprod.producer.committed_offsets import fetch_committed_offsets
from aiokprod.producer.coordinator import CoordinatorClient
from aiokprod.producer.group_metadata import to_group_metadata
from aiokprod.producer.prepared import PreparedTransaction, complete_prepared
from aiokprod.producer.sender import Sender
from aiokprod.producer.transaction_manager import TransactionManager
from aiokprod.producer.transactions import (
    ConsumerGroupMetadata,
    TransactionState,
    TxnEvent,
    next_state,
)

__all__ = ["TransactionalApi"]

log = logging.getLogger("aiokprod.producer.producer")  # one logger for the Producer's messages

_P = TypeVar("_P", bound="TransactionalApi")


class TransactionalApi:
    """``begin_transaction``, ``commit_transaction``, ``abort_transaction``,
    ``send_offsets_to_transaction``, ``transaction()`` and ``committed_offsets``, as methods
    of ``Producer``."""

    # Producer's state, as these methods use it
    _config: ProducerConfig
    _cluster: Cluster | None
    _txn: TransactionManager | None
    _sender: Sender | None
    _acc: RecordAccumulator | None
    _started: bool
    _closed: bool
    _max_block: int

    if TYPE_CHECKING:
        def _not_sending_error(self) -> KafkaError: ...

        def _time_operation(self, operation: str, started_ns: int) -> None: ...


    async def _init_transactions(self) -> None:
        """InitProducerId with the transactional id, within max.block.ms (``start()``)."""
        txn = self._txn
        assert txn is not None
        started = time.perf_counter_ns()
        try:
            await txn.initialize(time.monotonic() + self._max_block / 1000)
        except KafkaError:
            self._sync_txn_fatal()
            raise
        finally:
            self._time_operation("txn-init", started)

    def _transactions(self, call: str) -> TransactionManager:
        """The transaction manager, after the checks every transactional call makes."""
        txn = self._txn
        if txn is None:
            raise IllegalStateError(f"{call}: this producer has no transactional_id; "
                                    f"configure one to use transactions")
        if self._closed or not self._started:
            raise self._not_sending_error()
        self._sync_txn_fatal()
        txn.check_fatal()
        return txn

    def _sync_txn_fatal(self) -> None:
        """Keep the sender's and the transaction's fatal errors in step: a fenced transaction
        fails every queued record; a fatal Produce answer ends the transaction."""
        txn, sender = self._txn, self._sender
        if txn is None or sender is None:
            return
        if txn.fatal_error is not None and sender.fatal_error is None:
            sender.fail_everything(txn.fatal_error)
        elif sender.fatal_error is not None and txn.fatal_error is None:
            txn.become_fatal(sender.fatal_error)

    def begin_transaction(self) -> None:
        """Open a transaction: ``send()`` is allowed until ``commit_transaction()`` or
        ``abort_transaction()``. Local only: nothing is sent to a broker."""
        started = time.perf_counter_ns()
        try:
            self._transactions("begin_transaction()").begin()
        finally:
            self._time_operation("txn-begin", started)

    async def commit_transaction(self) -> None:
        """Flush, then commit: the records and offsets of the transaction become visible to
        read_committed consumers, all or none.

        Fails with the first record error as ``TransactionAbortableError`` (call
        ``abort_transaction()``), with ``ProducerFencedError`` when fenced (close the
        producer), or with ``KafkaTimeoutError`` after max.block.ms (calling it again resumes
        the commit). Cancelling it leaves the commit resumable the same way.
        """
        txn = self._transactions("commit_transaction()")
        started = time.perf_counter_ns()
        deadline = time.monotonic() + self._max_block / 1000
        try:
            if txn.state is TransactionState.ABORTABLE_ERROR:
                raise TransactionAbortableError(
                    f"commit_transaction(): the transaction cannot commit, abort it: "
                    f"{txn.abortable_error}") from txn.abortable_error
            txn.fire(TxnEvent.COMMIT_STARTED)
            await self._flush_transaction(txn, deadline, "commit_transaction()")
            await txn.end(True, deadline)
        except KafkaError:
            self._sync_txn_fatal()
            raise
        finally:
            self._time_operation("txn-commit", started)

    async def prepare_transaction(self) -> PreparedTransaction:
        """Flush the open transaction and leave it open, for someone else to end (KIP-939).

        Returns when every record of the transaction is acknowledged: the
        ``PreparedTransaction`` names the transaction by transactional id, producer id and
        epoch, so any producer can commit or abort it with
        ``complete_prepared_transaction()`` — the second phase of a two-phase commit whose
        coordinator (a job's driver) decides which of several writers' transactions count.
        Afterwards this producer sends nothing more in it; ``close()`` leaves it open (the
        coordinator aborts it after transaction.timeout.ms if nobody ends it), and
        ``commit_transaction()`` / ``abort_transaction()`` here still end it.

        Fails like ``commit_transaction()``'s flush: ``TransactionAbortableError`` when a
        record failed (abort), ``ProducerFencedError``, ``KafkaTimeoutError`` after
        max.block.ms (calling it again keeps waiting).
        """
        txn = self._transactions("prepare_transaction()")
        started = time.perf_counter_ns()
        deadline = time.monotonic() + self._max_block / 1000
        try:
            next_state(txn.state, TxnEvent.PREPARED)  # IllegalStateError outside a transaction
            await self._flush_transaction(txn, deadline, "prepare_transaction()")
            txn.fire(TxnEvent.PREPARED)
            return txn.prepared()
        except KafkaError:
            self._sync_txn_fatal()
            raise
        finally:
            self._time_operation("txn-prepare", started)

    async def complete_prepared_transaction(
            self, prepared: PreparedTransaction, *, commit: bool,
            offsets: Mapping[tuple[str, int], int] | None = None,
            group: str | None = None) -> None:
        """Commit or abort a transaction another producer prepared (``prepare_transaction``).

        With ``commit``, ``offsets`` of consumer group ``group`` are added to the transaction
        first, so they become visible with its records (a progress marker, a consumer's
        position). Works on any started producer, transactional or not; the transaction's
        own producer need not be running. Repeating a completion that already happened is
        answered as a success. A transaction that can no longer commit (aborted after
        transaction.timeout.ms, or fenced by a newer producer with its transactional id)
        raises ``TransactionAbortedError``. Bounded by max.block.ms (``KafkaTimeoutError``;
        calling it again resumes).
        """
        if not isinstance(prepared, PreparedTransaction):
            raise TypeError(f"prepared must be a PreparedTransaction (from "
                            f"prepare_transaction()), got {type(prepared).__name__}")
        if offsets and not (isinstance(group, str) and group):
            raise ValueError(f"offsets need a non-empty group id, got {group!r}")
        if self._closed or not self._started or self._cluster is None:
            raise self._not_sending_error()
        config = self._config
        coordinators = CoordinatorClient(
            cluster=self._cluster, transactional_id=prepared.transactional_id,
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms, client_id=config.client_id)
        await complete_prepared(coordinators, prepared, commit=commit, offsets=offsets,
                                group=group, deadline=time.monotonic() + self._max_block / 1000)

    async def abort_transaction(self) -> None:
        """Abort: records still queued fail with "transaction aborted", those on the wire are
        awaited, and EndTxn(abort) makes read_committed consumers skip all of them.

        Bounded by max.block.ms (``KafkaTimeoutError``; calling it again resumes the abort).
        A fenced producer raises ``ProducerFencedError`` at once: close it.
        """
        await self._abort(self._transactions("abort_transaction()"),
                          time.monotonic() + self._max_block / 1000)

    async def _abort(self, txn: TransactionManager, deadline: float) -> None:
        sender = self._sender
        assert sender is not None
        started = time.perf_counter_ns()
        try:
            txn.fire(TxnEvent.ABORT_STARTED)
            sender.abort_queued_batches(TransactionAbortedError(
                f"transaction aborted: the record was not sent (transactional.id "
                f"{txn.transactional_id!r})"))
            await self._await_batches(deadline, "abort_transaction()")
            self._sync_txn_fatal()
            txn.check_fatal()
            await txn.wait_for_adds(deadline)
            await txn.end(False, deadline)
        except KafkaError:
            self._sync_txn_fatal()
            raise
        finally:
            self._time_operation("txn-abort", started)

    async def send_offsets_to_transaction(
            self, offsets: Mapping[tuple[str, int], int],
            group: str | ConsumerGroupMetadata | bytes | object) -> None:
        """Commit consumer offsets with the transaction (read-process-write, KIP-98/447).

        ``offsets`` maps ``(topic, partition)`` to the next offset to consume. ``group`` is the
        consumer's group membership as the consumer gives it: confluent-kafka's
        ``consumer.consumer_group_metadata()``, an aiokafka ``AIOKafkaConsumer`` itself, a
        ``ConsumerGroupMetadata``, or only the group id. With the generation and member id
        the first three carry, the group refuses the offsets of a consumer that was
        rebalanced out of it (a zombie); a bare group id cannot be fenced. Bounded by
        max.block.ms.
        """
        txn = self._transactions("send_offsets_to_transaction()")
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
            self._sync_txn_fatal()
            raise
        finally:
            self._time_operation("txn-send-offsets", started)

    async def committed_offsets(
            self, group_id: str, partitions: Iterable[tuple[str, int]],
    ) -> dict[tuple[str, int], int | None]:
        """The offsets ``group_id`` has committed for ``partitions`` (``None``: none).

        The read-back of ``send_offsets_to_transaction``: a writer that records its progress
        as a group's offsets inside its transactions asks here, after ``start()`` fenced any
        older instance, what the last committed transaction recorded. An offset still pending
        in an open transaction is waited for (OffsetFetch ``require_stable``, KIP-447), never
        reported as absent or as committed. Works on any started producer (transactional or
        not); bounded by max.block.ms (``KafkaTimeoutError``). Cancelling it sends nothing
        more and changes no state.
        """
        if not isinstance(group_id, str) or not group_id:
            raise ValueError(f"group_id must be a non-empty string, got {group_id!r}")
        wanted = list(partitions)
        for key in wanted:
            if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)
                    and isinstance(key[1], int) and key[1] >= 0):
                raise ValueError(f"partitions must be (topic, partition) pairs, got {key!r}")
        if self._closed or not self._started or self._cluster is None:
            raise self._not_sending_error()
        if not wanted:
            return {}
        config = self._config
        coordinators = CoordinatorClient(
            cluster=self._cluster, transactional_id=config.transactional_id or "",
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms, client_id=config.client_id)
        return await fetch_committed_offsets(coordinators, group_id, wanted,
                                             time.monotonic() + self._max_block / 1000)

    @contextlib.asynccontextmanager
    async def transaction(self: _P) -> AsyncIterator[_P]:
        """``async with producer.transaction():`` begins; a normal exit commits (flushing
        first); an exception aborts and is re-raised, as is a failed commit (after aborting,
        unless the producer was fenced). A failed commit whose abort finds the producer
        fenced raises ``ProducerFencedError`` (from the commit's error)."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            await self._abort_quietly()
            raise
        try:
            await self.commit_transaction()
        except KafkaError as exc:
            await self._abort_quietly()
            txn = self._txn
            if txn is not None and isinstance(txn.fatal_error, ProducerFencedError) and \
                    not isinstance(exc, ProducerFencedError):
                # transaction version 2: a zombie's Produce is refused with
                # INVALID_PRODUCER_EPOCH, which is abortable (KIP-588: the epoch may have been
                # bumped by a transaction timeout); the abort's EndTxn tells it was fenced. The
                # block ends with what the caller must act on: close this producer
                raise self._send_refused(txn) from exc
            raise

    async def _abort_quietly(self) -> None:
        """Abort after a failure in a ``transaction()`` block; the original error wins."""
        txn = self._txn
        if txn is None or txn.state not in (TransactionState.IN_TRANSACTION,
                                            TransactionState.ABORTABLE_ERROR,
                                            TransactionState.ABORTING):
            return
        try:
            await self.abort_transaction()
        except Exception as exc:
            log.warning("[client %s] aborting the transaction failed too: %s",
                        self._config.client_id, exc)

    async def _flush_transaction(self, txn: TransactionManager, deadline: float,
                                 call: str) -> None:
        """The first half of a commit: every record acknowledged, none failed, every
        AddPartitionsToTxn answered; raises what stops the commit."""
        await self._await_batches(deadline, call)
        self._sync_txn_fatal()
        txn.check_fatal()
        if txn.must_abort:
            raise TransactionAbortableError(
                f"{call}: a record of the transaction failed, abort it: "
                f"{txn.abortable_error}") from txn.abortable_error
        await txn.wait_for_adds(deadline)

    async def _await_batches(self, deadline: float, call: str) -> None:
        """Wait for every batch of the transaction to be delivered or failed (max.block.ms)."""
        acc = self._acc
        assert acc is not None
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

    def _send_refused(self, txn: TransactionManager) -> KafkaError:
        """Why a transactional producer refuses ``send()`` now."""
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
