"""The requests that end a transaction, by producer id and epoch: the consumer offsets it
commits (AddOffsetsToTxn to the transaction coordinator, TxnOffsetCommit to the group's) and
EndTxn.

Module functions that hold no state: ``TransactionManager`` sends them for its own open
transaction (``send_offsets``, ``end``: what their answers do to the transaction's state is
the manager's), and a prepared transaction (``prepared.py``) is ended by a producer that does
not own it, with the id and epoch its owner handed over.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiokprod._error_codes import ErrorCode
from aiokprod.network.connection import BrokerConnection
from aiokprod.producer.transactional.coordinator import CoordinatorClient, top_level_code
from aiokprod.producer.transactional.transactions import ConsumerGroupMetadata
from aiokprod.protocol import (
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

__all__ = ["ADD_OFFSETS_ABORTABLE", "END_TXN_V1_MAX", "END_TXN_V2", "add_offsets_to_txn",
           "end_txn", "txn_offset_commit"]

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
