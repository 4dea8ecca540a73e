"""The transactional producer's requests to its coordinators (Java ``TransactionManager``).

``transactions.py`` decides (the state table, which partitions still need adding); this module
talks to the brokers: FindCoordinator (key type 1 for the transaction coordinator, 0 for a
consumer group's), InitProducerId with the transactional id, AddPartitionsToTxn before a
partition's first batch, AddOffsetsToTxn + TxnOffsetCommit, and EndTxn. The producer calls it
from ``start()``/``commit_transaction()``/``abort_transaction()``; through the sender's
``SendRules`` it tells each drain what a partition's verdict needs to know of the transaction
(``fill``), hears of each batch taken (``taken``) and, after the drain, of the holds that ask
something of it (``after_drain``). AddOffsetsToTxn,
TxnOffsetCommit and EndTxn are built and sent by ``transaction_end.py``'s functions (a
prepared transaction's owner-less end sends them too); what their answers do to the
transaction -- abortable, fatal, ended, the epoch bump an abort may need -- is decided here,
with the rest of the transaction's state.

Every wait is bounded: the user-facing calls by max.block.ms (a deadline passed in), each
request by request.timeout.ms, AddPartitionsToTxn retries by the delivery.timeout.ms of the
batches waiting for it (they expire, which makes the transaction abortable).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    error_for_code,
)
from aiokprod.network.cluster import Cluster
from aiokprod.network.connection import BrokerConnection
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.idempotent.producer_id import (
    FATAL_INIT_CODES,
    FENCED_CODES,
    InitOutcome,
    ProducerIdRequester,
)
from aiokprod.producer.idempotent.producer_id_state import ProducerIdState
from aiokprod.producer.partition import PartitionProducer, SendFacts
from aiokprod.producer.transactional.coordinator import CoordinatorClient, top_level_code
from aiokprod.producer.transactional.prepared import PreparedTransaction
from aiokprod.producer.transactional.transaction_end import (
    ADD_OFFSETS_ABORTABLE,
    END_TXN_V2,
    add_offsets_to_txn,
    end_txn,
    txn_offset_commit,
)
from aiokprod.producer.transactional.transactions import (
    ConsumerGroupMetadata,
    PartitionsInTransaction,
    TransactionState,
    TxnEvent,
    next_state,
)
from aiokprod.protocol import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ApiVersionsRequest,
    EndTxnRequest,
    ProduceRequest,
)

__all__ = ["TransactionManager", "fenced_error"]

log = logging.getLogger(__name__)

# Versions 4+ of AddPartitionsToTxn are for brokers verifying transactions (KIP-890); clients
# send v3 and below.
_ADD_PARTITIONS_CLIENT_MAX = 3
# Transaction version 1 (KIP-98): EndTxn up to v4, Produce up to v11 (v12 tells the broker the
# client relies on implicit partition adds). Version 2 (KIP-890): EndTxn v5, whose answer
# carries the epoch the coordinator bumped, and Produce v12, which adds partitions implicitly.
# (EndTxn's versions, END_TXN_V1_MAX and END_TXN_V2, are transaction_end.py's, which sends it.)
_PRODUCE_V1_MAX = 11
_PRODUCE_V2 = 12
_PRODUCE_V2_MAX = 14
#: The highest transaction version used where the cluster finalizes it (tests lower it to run
#: the version-1 protocol against a broker that offers both).
MAX_TRANSACTION_VERSION = 2
_TRANSACTION_VERSION_FEATURE = "transaction.version"

# this producer can do nothing more (Java: transitionToFatalError)
_FENCED = FENCED_CODES
_FATAL = FATAL_INIT_CODES


def fenced_error(transactional_id: str, code: ErrorCode | int, what: str
                 ) -> ProducerFencedError:
    """The error a fenced producer raises from now on: it says what to do about it."""
    name = ErrorCode.of(int(code)).name
    return ProducerFencedError(
        f"{what}: {name}: another producer with transactional.id {transactional_id!r} "
        f"started (it bumped the epoch), so this one is fenced: its open transaction will "
        f"never commit and it can send nothing more. Close this producer and create a new "
        f"one (which fences the other in turn), after making sure only one instance with "
        f"this transactional id is meant to run")


class TransactionManager:
    """One transactional producer's coordinator requests and its transaction state."""

    def __init__(
        self,
        *,
        transactional_id: str,
        transaction_timeout_ms: int,
        cluster: Cluster,
        idempotence: IdempotenceManager,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        client_id: str,
        spawn: Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]],
        wakeup: Callable[[], None],
        on_fatal: Callable[[BaseException], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transactional_id = transactional_id
        self._timeout_ms = transaction_timeout_ms  # the coordinator aborts idle ones after it
        self._cluster = cluster
        self._idem = idempotence  # holds the producer id and epoch the requests carry
        self._request_timeout_ms = request_timeout_ms
        self._backoff = retry_backoff_ms / 1000
        self._client = client_id
        self._spawn = spawn  # the producer's supervisor: a crash of the add task turns fatal
        self._wakeup = wakeup  # the sender: partitions were added, their batches may go
        # the producer: fail every record it holds with the fatal error at once (Java's Sender
        # aborts its batches when the TransactionManager has a fatal error); a batch held back
        # for a partition whose AddPartitionsToTxn found us fenced would otherwise wait until
        # the commit gave up at max.block.ms
        self._on_fatal = on_fatal
        self._clock = clock
        self._state = TransactionState.UNINITIALIZED
        # the open transaction's partitions (each holds its own stage in it) and groups
        self._table = idempotence.partitions
        self.partitions = PartitionsInTransaction(self._table)
        self._coordinators = CoordinatorClient(
            cluster=cluster, transactional_id=transactional_id,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            client_id=client_id, clock=clock)
        # the first error that made the transaction abortable / the producer fatal
        self.abortable_error: BaseException | None = None
        self.fatal_error: BaseException | None = None
        # the AddPartitionsToTxn loop, while partitions are pending
        self._add_task: asyncio.Task[None] | None = None
        self.transactions_committed = 0  # for statistics and tests
        self.transactions_aborted = 0
        self.add_partitions_requests = 0
        # 1 (AddPartitionsToTxn, KIP-98) or 2 (implicit adds, an epoch bump per EndTxn,
        # KIP-890), decided at initialize() from the cluster's finalized features
        self.transaction_version = 1

    # ---- state ------------------------------------------------------------------------------

    @property
    def state(self) -> TransactionState:
        return self._state

    def fire(self, event: TxnEvent) -> None:
        """Move along the table; an event it does not list raises IllegalStateError."""
        target = next_state(self._state, event)
        if target is not self._state:
            log.debug("[client %s] transaction state %s -> %s on %s", self._client,
                      self._state.name, target.name, event.name)
        self._state = target

    def become_abortable(self, error: BaseException) -> None:
        """A record or request of the open transaction failed: only an abort helps now."""
        if self._state not in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING,
                               TransactionState.ABORTABLE_ERROR):
            return  # aborting already, or fatal: the error changes nothing
        if self.abortable_error is None:
            self.abortable_error = error
            log.warning("[client %s] transaction must be aborted: %s", self._client, error)
        self.fire(TxnEvent.ABORTABLE_ERROR)

    def become_fatal(self, error: BaseException) -> None:
        first = self.fatal_error is None
        if first:
            self.fatal_error = error
            log.error("[client %s] transactional producer failed fatally: %s", self._client,
                      error)
        self.fire(TxnEvent.FATAL_ERROR)
        if self._idem.state is not ProducerIdState.FATAL:
            self._idem.fail_fatally(error)
        if first and self._on_fatal is not None:
            self._on_fatal(error)

    @property
    def must_abort(self) -> bool:
        """An abortable error happened: only ``abort_transaction()`` is allowed."""
        return self._state is TransactionState.ABORTABLE_ERROR

    def check_fatal(self) -> None:
        if self.fatal_error is not None:
            raise self.fatal_error

    # ---- the sender's hooks -----------------------------------------------------------------

    def fill(self, facts: SendFacts) -> None:
        """What a partition's verdict reads of the transaction (``PartitionProducer.verdict``),
        once per drain: batches go only while a transaction is open, and (version 1) once
        their partition is part of it."""
        state = self._state
        facts.transactional = True
        facts.txn_open = state is TransactionState.IN_TRANSACTION or \
            state is TransactionState.COMMITTING
        ids = self._idem.state
        # idempotence asked for a new epoch mid-transaction: only an abort (and the bump
        # after it) can give one; the records already sent belong to this epoch
        facts.txn_needs_bump = ids is not ProducerIdState.READY and \
            ids is not ProducerIdState.FATAL
        facts.txn_version = self.transaction_version
        facts.txn_number = self.partitions.number

    def taken(self, p: PartitionProducer[Any]) -> None:
        """A batch of ``p`` goes into a Produce request. Under transaction version 2
        (KIP-890) that request adds the partition to the transaction (Produce v12)."""
        if self.transaction_version >= 2:
            self.partitions.add_implicitly(p)

    def after_drain(self, to_join: list[PartitionProducer[Any]], needs_bump: bool) -> None:
        """Once per drain, what its holds ask of the transaction: a new epoch is needed, so
        it can only abort; partitions to add, with one AddPartitionsToTxn for all of them."""
        if needs_bump:
            self.become_abortable(TransactionAbortableError(
                "the producer epoch must be bumped (a sequence error); abort the transaction"))
        for p in to_join:
            self.partitions.request_join(p)
        # the pending partitions are read from the table: only when a drain held one for
        # its join and no AddPartitionsToTxn task is running (which asks again itself)
        if to_join and (self._add_task is None or self._add_task.done()) and \
                self.partitions.pending:
            self._add_task = self._spawn(self._add_partitions(),
                                         f"aiokprod-add-partitions[{self._client}]")

    @property
    def produce_max_version(self) -> int:
        """Produce v12+ only under transaction version 2: it tells the broker to add the
        partition implicitly; AddPartitionsToTxn users stay at v11, as Java does. (Above
        v12: topic ids and KIP-1269, where the sender knows the ids.)"""
        return _PRODUCE_V2_MAX if self.transaction_version >= 2 else _PRODUCE_V1_MAX

    def on_batch_failed(self, error: BaseException) -> None:
        """A batch of the open transaction failed: the transaction cannot commit."""
        if isinstance(error, ProducerFencedError):
            self.become_fatal(fenced_error(self.transactional_id, ErrorCode.PRODUCER_FENCED,
                                           "Produce"))
            return
        self.become_abortable(error)

    def _pair(self) -> tuple[int, int]:
        return self._idem.producer_id, self._idem.producer_epoch

    def prepared(self) -> PreparedTransaction:
        """What ends the open transaction from elsewhere (``prepare_transaction()``)."""
        pid, epoch = self._pair()
        return PreparedTransaction(self.transactional_id, pid, epoch, self.transaction_version,
                                   self.partitions.started)

    def _fail_with(self, code: ErrorCode, what: str, *, abortable: bool = False
                   ) -> BaseException:
        """Turn a coordinator's error into our state and the error to raise."""
        if code in _FENCED:
            error: BaseException = fenced_error(self.transactional_id, code, what)
            self.become_fatal(error)
            return error
        cls = error_for_code(int(code))
        error = cls(f"{what}: {cls.message}")
        if abortable and code not in _FATAL:
            self.become_abortable(error)
        else:
            self.become_fatal(error)
        return error

    # ---- InitProducerId ---------------------------------------------------------------------

    async def initialize(self, deadline: float) -> None:
        """InitProducerId with the transactional id: fences older instances (and completes or
        aborts what they left open); on success the producer holds its id and epoch."""
        self.check_fatal()
        self.fire(TxnEvent.INIT_STARTED)
        self.transaction_version = await self._detect_transaction_version(deadline)
        await self._init_producer_id(deadline, "InitProducerId")

    async def _detect_transaction_version(self, deadline: float) -> int:
        """2 where the cluster finalizes transaction.version >= 2 (ApiVersions v3's finalized
        features) and the broker serves EndTxn v5 and Produce v12; 1 otherwise, including when
        the question cannot be answered in time (version 1 works on every broker)."""
        if MAX_TRANSACTION_VERSION < 2:
            return 1
        try:
            conn = await self._cluster.least_loaded_connection(
                self._coordinators.bounded_ms(deadline))
            versions = conn.broker_versions
            if versions.get(EndTxnRequest.API_KEY, (0, 0))[1] < END_TXN_V2 or \
                    versions.get(ProduceRequest.API_KEY, (0, 0))[1] < _PRODUCE_V2:
                return 1
            version = min(3, conn.version_for(ApiVersionsRequest))
            if version < 3:
                return 1  # finalized features arrived with v3
            response = await conn.request(
                ApiVersionsRequest(client_software_name="aiokprod",
                                   client_software_version="txn"),
                version=version, timeout_ms=self._coordinators.bounded_ms(deadline))
        except KafkaError as exc:
            log.debug("[client %s] finalized features unknown (%s): transaction version 1",
                      self._client, exc)
            return 1
        level = max((f.max_version_level for f in response.finalized_features
                     if f.name == _TRANSACTION_VERSION_FEATURE), default=0)
        chosen = 2 if level >= 2 else 1
        log.info("[client %s] transaction version %d (cluster finalizes %s=%d)", self._client,
                 chosen, _TRANSACTION_VERSION_FEATURE, level)
        return chosen

    async def _init_producer_id(self, deadline: float, what: str) -> None:
        """InitProducerId with the transactional id at its coordinator, by
        ``ProducerIdRequester``'s rules (the idempotent producer's path too)."""
        idem = self._idem
        requester = ProducerIdRequester(idem, transactional_id=self.transactional_id,
                                        transaction_timeout_ms=self._timeout_ms,
                                        client_id=self._client)
        try:
            while True:
                requester.take_params()
                answer = await self._coordinators.call(requester.build, top_level_code,
                                                       deadline, what)
                response, code, version = answer
                outcome = requester.on_answer(code, response, version)
                if outcome is InitOutcome.DONE:
                    self.fire(TxnEvent.INIT_COMPLETED)
                    return
                if outcome is InitOutcome.AGAIN:
                    continue
                if outcome is InitOutcome.FAIL:
                    raise self._fail_with(code, what)
                await asyncio.sleep(min(requester.next_delay(),
                                        max(0.0, deadline - self._clock())))
                if self._clock() >= deadline:
                    raise KafkaTimeoutError(f"{what} did not complete in time (max.block.ms)")
        except KafkaTimeoutError:
            if self._state is TransactionState.INITIALIZING:
                idem.on_init_producer_id_failed(KafkaTimeoutError(what))
                self.fire(TxnEvent.INIT_FAILED)
            raise
        except asyncio.CancelledError:
            if self._state is TransactionState.INITIALIZING:
                idem.on_init_producer_id_failed(KafkaTimeoutError(f"{what} cancelled"))
                self.fire(TxnEvent.INIT_FAILED)
            raise

    # ---- begin / add partitions -------------------------------------------------------------

    def begin(self) -> None:
        self.check_fatal()
        self.fire(TxnEvent.BEGIN)
        self.partitions.clear()
        self.abortable_error = None

    async def _add_partitions(self) -> None:
        """AddPartitionsToTxn for what drains found pending, until none is left (KIP-98).

        Bounded: it stops once the transaction is no longer open or sendable; the batches
        waiting for it expire at delivery.timeout.ms, which makes the transaction abortable.
        """
        parts = self.partitions
        while parts.pending and self._state in (TransactionState.IN_TRANSACTION,
                                                TransactionState.COMMITTING):
            taken = parts.take_pending()
            try:
                ok = await self._add_once([(p.topic, p.partition) for p in taken])
            except BaseException:
                parts.on_not_added(taken)
                raise
            if ok:
                parts.on_added(taken)
                self._wakeup()
            else:
                parts.on_not_added(taken)
                if self._state in (TransactionState.IN_TRANSACTION,
                                   TransactionState.COMMITTING):
                    await asyncio.sleep(self._backoff)

    async def _add_once(self, taken: list[tuple[str, int]]) -> bool:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in taken:
            by_topic.setdefault(topic, []).append(partition)
        pid, epoch = self._pair()
        topics = [AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=p)
                  for t, p in by_topic.items()]

        def build(conn: BrokerConnection) -> tuple[AddPartitionsToTxnRequest, int]:
            version = conn.version_for(AddPartitionsToTxnRequest,
                                       max_version=_ADD_PARTITIONS_CLIENT_MAX)
            return AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=topics), version

        def codes(response: AddPartitionsToTxnResponse) -> list[int]:
            return [p.partition_error_code for t in response.results_by_topic_v3_and_below
                    for p in t.results_by_partition] or [response.error_code]

        self.add_partitions_requests += 1
        what = f"AddPartitionsToTxn({len(taken)} partitions)"
        # the batches waiting for these partitions bound the retries (delivery.timeout.ms)
        deadline = self._clock() + self._request_timeout_ms / 1000 * 2
        try:
            _, code, _v = await self._coordinators.call(build, codes, deadline, what)
        except KafkaTimeoutError as exc:
            log.debug("[client %s] %s: %s; will ask again", self._client, what, exc)
            return False
        if code is ErrorCode.NONE:
            log.debug("[client %s] added to the transaction: %s", self._client, taken)
            return True
        abortable = code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                             ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.UNKNOWN_PRODUCER_ID,
                             ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        self._fail_with(code, what, abortable=abortable)
        return False

    async def wait_for_adds(self, deadline: float) -> None:
        """No AddPartitionsToTxn may reach the coordinator after EndTxn: wait for it."""
        task = self._add_task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=max(0.0, deadline - self._clock()))
            if not task.done():
                raise KafkaTimeoutError("AddPartitionsToTxn still under way (max.block.ms)")

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
