"""How a transaction ends: the consumer offsets it commits (AddOffsetsToTxn to the transaction
coordinator, TxnOffsetCommit to the group's) and EndTxn, with the epoch bump an abort may need.

These are the requests ``commit_transaction()``, ``abort_transaction()`` and
``send_offsets_to_transaction()`` make, split out of ``transaction_manager.py`` so that each
module has one job and stays within the project's 500 lines: that one keeps the transaction's
state, the sender's hooks, InitProducerId and AddPartitionsToTxn. A mixin:
``TransactionManager`` inherits these methods, and the state they read, declared below for the
type checker, is its own, set in its ``__init__``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import IllegalStateError, TransactionAbortableError
from aiokprod.network.connection import BrokerConnection
from aiokprod.producer.coordinator import CoordinatorClient, top_level_code
from aiokprod.producer.idempotence import IdempotenceManager, ProducerIdState
from aiokprod.producer.producer_id import FATAL_INIT_CODES
from aiokprod.producer.transactions import (
    ConsumerGroupMetadata,
    PartitionsInTransaction,
    TransactionState,
    TxnEvent,
)
from aiokprod.protocol import (
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

__all__ = ["ADD_OFFSETS_ABORTABLE", "END_TXN_V1_MAX", "END_TXN_V2", "TransactionEnd",
           "add_offsets_to_txn", "end_txn", "txn_offset_commit"]

# EndTxn's versions per transaction version (transaction_manager.py says what each version
# means and picks one): up to v4 under version 1 (KIP-98), v5 under version 2 (KIP-890)
END_TXN_V1_MAX = 4
END_TXN_V2 = 5
_TXN_OFFSET_COMMIT_V1_MAX = 4
#: AddOffsetsToTxn answers that leave the transaction abortable (the others are fatal)
ADD_OFFSETS_ABORTABLE = frozenset({
    ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TRANSACTION_ABORTABLE,
    ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING})


# ---- the requests, by producer id and epoch ---------------------------------------------------
# Module functions, not methods: a prepared transaction (``prepared.py``) is ended by a producer
# that does not own it, with the id and epoch its owner handed over.


async def add_offsets_to_txn(coordinators: CoordinatorClient, transactional_id: str, pid: int,
                             epoch: int, group_id: str, deadline: float) -> ErrorCode:
    """AddOffsetsToTxn: the group's offsets partition joins the transaction (KIP-98)."""
    def build(conn: BrokerConnection) -> tuple[AddOffsetsToTxnRequest, int]:
        return AddOffsetsToTxnRequest(
            transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
            group_id=group_id), conn.version_for(AddOffsetsToTxnRequest)

    what = f"AddOffsetsToTxn(group {group_id!r})"
    _, code, _v = await coordinators.call(build, top_level_code, deadline, what)
    return code


async def txn_offset_commit(coordinators: CoordinatorClient, transactional_id: str, pid: int,
                            epoch: int, meta: ConsumerGroupMetadata,
                            offsets: Mapping[tuple[str, int], int], deadline: float
                            ) -> ErrorCode:
    """TxnOffsetCommit to the group's coordinator: the offsets, pending until the transaction
    ends; the first partition error, or NONE."""
    by_topic: dict[str, list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(
            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=""))
    group_id = meta.group_id

    def build(conn: BrokerConnection) -> tuple[TxnOffsetCommitRequest, int]:
        return TxnOffsetCommitRequest(
            transactional_id=transactional_id, group_id=group_id, producer_id=pid,
            producer_epoch=epoch, generation_id_or_member_epoch=meta.generation_id,
            member_id=meta.member_id, group_instance_id=meta.group_instance_id,
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=p)
                    for t, p in by_topic.items()]), \
            conn.version_for(TxnOffsetCommitRequest, max_version=_TXN_OFFSET_COMMIT_V1_MAX)

    def codes(response: TxnOffsetCommitResponse) -> list[int]:
        return [p.error_code for t in response.topics for p in t.partitions]

    what = f"TxnOffsetCommit(group {group_id!r}, {len(offsets)} partitions)"
    _, code, _v = await coordinators.call(build, codes, deadline, what, group=group_id)
    return code


async def end_txn(coordinators: CoordinatorClient, transactional_id: str, pid: int, epoch: int,
                  commit: bool, transaction_version: int, deadline: float
                  ) -> tuple[EndTxnResponse | None, ErrorCode, int]:
    """EndTxn(commit or abort) at the transaction coordinator: (answer, code, version)."""
    def build(conn: BrokerConnection) -> tuple[EndTxnRequest, int]:
        return EndTxnRequest(
            transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
            committed=commit), \
            conn.version_for(EndTxnRequest, max_version=END_TXN_V2
                             if transaction_version >= 2 else END_TXN_V1_MAX)

    what = f"EndTxn({'commit' if commit else 'abort'})"
    return await coordinators.call(build, top_level_code, deadline, what)


class TransactionEnd:
    """``send_offsets`` and ``end``, as methods of ``TransactionManager``."""

    # TransactionManager's state, as these methods use it (set in its __init__)
    transactional_id: str
    transaction_version: int
    partitions: PartitionsInTransaction
    abortable_error: BaseException | None
    transactions_committed: int
    transactions_aborted: int
    _state: TransactionState
    _idem: IdempotenceManager
    _coordinators: CoordinatorClient

    if TYPE_CHECKING:  # TransactionManager's
        def fire(self, event: TxnEvent) -> None: ...

        def check_fatal(self) -> None: ...

        def _pair(self) -> tuple[int, int]: ...

        def _fail_with(self, code: ErrorCode, what: str, *, abortable: bool = False
                       ) -> BaseException: ...

        async def _init_producer_id(self, deadline: float, what: str) -> None: ...

    # ---- offsets ----------------------------------------------------------------------------

    async def send_offsets(self, offsets: Mapping[tuple[str, int], int],
                           group: str | ConsumerGroupMetadata, deadline: float) -> None:
        """AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the
        group's coordinator: the offsets commit or abort with the transaction (KIP-98)."""
        meta = group if isinstance(group, ConsumerGroupMetadata) else ConsumerGroupMetadata(
            group)
        self._check_open("send_offsets_to_transaction()")
        group_id = meta.group_id
        if group_id not in self.partitions.offsets_added:
            pid, epoch = self._pair()
            what = f"AddOffsetsToTxn(group {group_id!r})"
            code = await add_offsets_to_txn(self._coordinators, self.transactional_id, pid,
                                            epoch, group_id, deadline)
            if code is not ErrorCode.NONE:
                raise self._fail_with(code, what, abortable=code in ADD_OFFSETS_ABORTABLE)
            self.partitions.offsets_added.add(group_id)
        pid, epoch = self._pair()
        what = f"TxnOffsetCommit(group {group_id!r}, {len(offsets)} partitions)"
        code = await txn_offset_commit(self._coordinators, self.transactional_id, pid, epoch,
                                       meta, offsets, deadline)
        if code is not ErrorCode.NONE:
            raise self._fail_with(code, what, abortable=code not in FATAL_INIT_CODES)

    def _check_open(self, call: str) -> None:
        """Raise what stops ``call``: fatal, abortable, or no transaction open."""
        self.check_fatal()
        if self._state is TransactionState.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"{call}: the transaction must be aborted: {self.abortable_error}")
        if self._state is not TransactionState.IN_TRANSACTION:
            raise IllegalStateError(f"{call} is not allowed in state {self._state.name}: "
                                    f"call begin_transaction() first")

    # ---- EndTxn -----------------------------------------------------------------------------

    async def end(self, commit: bool, deadline: float) -> None:
        """EndTxn(commit or abort), if the coordinator knows of this transaction, then the
        epoch bump an abort may need; the state becomes READY."""
        what = f"EndTxn({'commit' if commit else 'abort'})"
        if self.partitions.started:
            pid, epoch = self._pair()
            response, code, version = await end_txn(
                self._coordinators, self.transactional_id, pid, epoch, commit,
                self.transaction_version, deadline)
            if code is not ErrorCode.NONE:
                abortable = commit and code in (ErrorCode.TRANSACTION_ABORTABLE,
                                                ErrorCode.UNKNOWN_PRODUCER_ID,
                                                ErrorCode.INVALID_PRODUCER_ID_MAPPING)
                raise self._fail_with(code, what, abortable=abortable)
            if response is not None and version >= END_TXN_V2 and response.producer_id >= 0 and \
                    response.producer_epoch >= 0:
                # KIP-890: the coordinator bumped the epoch; the next transaction uses it
                self._idem.on_epoch_bumped_by_broker(response.producer_id,
                                                     response.producer_epoch)
        self.partitions.clear()
        if commit:
            self.transactions_committed += 1
        else:
            self.transactions_aborted += 1
        if not commit:
            self._idem.maintain()  # unresolved sequences left by the abort ask for a bump
            if self._idem.state is not ProducerIdState.READY:
                self.fire(TxnEvent.EPOCH_BUMP_STARTED)
                await self._init_producer_id(deadline, "InitProducerId (epoch bump)")
                return
        self.abortable_error = None
        self.fire(TxnEvent.END_COMPLETED)
