"""The idempotent producer's decisions (docs/idempotence.md): no I/O.

The sender performs I/O and reports what happened; this module decides. The producer id and
epoch are ``producer_id_state.ProducerIdHolder``'s (their state machine, an object the manager
creates and owns); the manager applies each outcome to the partition it concerns. The
partition's own rules -- which batch may go, when it renumbers, which held batches can no
longer be written -- are methods of ``partition.PartitionProducer``, the one object that holds
that partition's queue, sequences, in-flight and unresolved batches and KIP-1269 window. What
stays here is what spans partitions: one bump or new id for all of them, the counts, the
batches given up on.

Epoch bumps. An idempotent (non-transactional) producer may bump its epoch *itself*: it
maintains its own epoch, and the broker accepts a higher epoch whose first sequence is 0
(docs/idempotence.md B3); the Java client does the same. A bump
requested while handling responses is applied once, before the next drain (``maintain``, run
by ``SendRules.before_drain``), so several partitions failing in one response cost one epoch. With
``bump_via_init_producer_id=True`` the bump instead asks the broker (InitProducerId with the
current id and epoch, KIP-360), which a transactional producer needs; a broker without KIP-360
(``on_bump_unsupported``) and an exhausted epoch (32767) both get a fresh producer id instead.

After a bump each partition starts again at sequence 0, but only once no batch of the old
epoch can still reach the broker (docs/idempotence.md step 2b and 3): a partition that asked
for the reset renumbers the batches it holds for retry as soon as nothing is on the wire; any other
partition first lets its old-epoch batches finish under the old epoch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from aiokprod._backoff import ExponentialBackoff
from aiokprod._error_codes import ErrorCode
from aiokprod.errors import IllegalStateError, error_for_code
from aiokprod.producer.idempotent.producer_id_state import (
    Event,
    ProducerIdHolder,
    ProducerIdState,
)
from aiokprod.producer.partition import (
    Outcome,
    PartitionProducer,
    Partitions,
    QueuedBatch,
    SendFacts,
)
from aiokprod.producer.retry_policy import Action, RetryDecision, classify
from aiokprod.producer.sequences import (
    DEFAULT_IN_FLIGHT_LIMIT,
    NO_PRODUCER_ID,
    InFlightEntry,
    SequencedBatch,
    TopicPartitionLike,
)

__all__ = ["IdempotenceManager", "IdempotenceStatistics"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IdempotenceStatistics:
    """A snapshot for tests, metrics and ``__repr__``; the counts are kept incrementally,
    except ``in_flight_batches``, summed over the partitions that hold them."""

    state: ProducerIdState
    producer_id: int
    producer_epoch: int
    partitions: int
    in_flight_batches: int  # batches holding a sequence, not completed (incl. queued retries)
    partitions_with_unresolved: int
    epoch_bumps: int  # local or KIP-360 bumps
    producer_id_resets: int  # fresh producer ids after the first (overflow, no KIP-360)
    sequence_resets: int  # partitions restarted at sequence 0
    retries: int
    splits: int
    unresolved_batches: int  # batches that ever became unresolved
    resolved_batches: int  # ... and were then proved written by a later success
    # InitProducerId answers repeating the id and epoch we held: the broker lost our state
    broker_state_losses: int = 0
    # producer id/epoch assignments so far (InitProducerId answers, local bumps)
    generation: int = 0
    # held batches failed because they could no longer be written in order, or without
    # perhaps writing them twice ("A partition's first batches" in docs/idempotence.md)
    unwritable_batches: int = 0


class IdempotenceManager:
    """Producer id, epoch and per-partition sequences of an idempotent producer.

    The id, epoch and generation are its ``ProducerIdHolder``'s, which it creates and owns;
    the per-partition facts are the partitions' own (``PartitionProducer``).

    The sender calls, in its loop: ``needs_producer_id``/``init_producer_id_params``/
    ``on_producer_id`` around InitProducerId; through its ``SendRules``, ``maintain`` and
    ``fill`` before each drain (each partition's verdict then decides, ``PartitionProducer``),
    ``give_up_unrenumberable`` before a retry is asked, ``assign_sequence`` for each batch it
    drains; ``on_success``/``on_error``/``on_split`` for each answer;
    ``on_delivery_timeout`` for each expired batch; ``on_leader_change`` and
    ``on_response_batches_to_retain`` for KIP-1269. Times are the injected clock's (seconds).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        transactional: bool = False,
        bump_via_init_producer_id: bool = False,
        retries: int = 2**31 - 1,
        backoff: ExponentialBackoff | None = None,
        client_id: str = "",
        partitions: Partitions[Any] | None = None,
    ) -> None:
        self._clock = clock
        self._client_id = client_id
        self._transactional = transactional  # INVALID_PRODUCER_EPOCH is then fatal
        self._retries = retries  # for on_error calls that bring no RetryDecision
        self._backoff = backoff  # retry.backoff.ms / retry.backoff.max.ms, for on_error
        self._broker_state_losses = 0
        # the producer's partitions, shared with the accumulator (which queues their batches)
        self._partitions = partitions if partitions is not None else Partitions()
        # the producer id, epoch and generation, and their state machine
        self._ids = ProducerIdHolder(self._partitions, clock=clock,
                                     bump_via_init_producer_id=bump_via_init_producer_id,
                                     client_id=client_id)
        # held batches taken out of in_flight because they can no longer be written in order
        # or exactly once (docs/idempotence.md, "A partition's first batches"); the sender
        # takes them (take_doomed), removes them from the accumulator and fails them
        self._doomed: dict[SequencedBatch, BaseException] = {}
        self._unwritable_total = 0
        self._sequence_resets = 0
        self._retries_done = 0
        self._splits = 0
        self._unresolved_total = 0
        self._resolved_total = 0
        self.last_error_at: float | None = None  # clock time of the last on_error, for logs

    # ---- state --------------------------------------------------------------------------

    @property
    def state(self) -> ProducerIdState:
        return self._ids.state

    @property
    def producer_id(self) -> int:
        return self._ids.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._ids.producer_epoch

    @property
    def backoff(self) -> ExponentialBackoff | None:
        """retry.backoff.ms / retry.backoff.max.ms, for InitProducerId retries too."""
        return self._backoff

    @property
    def fatal_error(self) -> BaseException | None:
        """Why the producer stopped (FATAL), else None."""
        return self._ids.fatal_error

    def fail_fatally(self, error: BaseException) -> None:
        """Stop for good: every later verdict holds (HOLD_PRODUCER_ID). The first cause is kept."""
        self._ids.fail_fatally(error)

    @property
    def partitions(self) -> Partitions[Any]:
        """The producer's partitions, shared with the accumulator and the transaction."""
        return self._partitions

    def partition_state(self, tp: TopicPartitionLike) -> PartitionProducer[Any]:
        """The partition's bookkeeping, created on first use."""
        return self._partitions.get(tp.topic, tp.partition)

    def forget_topic(self, topic: str) -> int:
        """Drop the topic's partitions that hold no sequence the broker could remember.

        A partition with batches in flight or unresolved, or with sequences already used under
        the current producer id and epoch, is kept: starting it again at 0 would make the broker
        answer OUT_OF_ORDER_SEQUENCE_NUMBER. What is dropped is the state of partitions never
        written, or written under an id/epoch since replaced. Returns how many were dropped.
        """
        drop = [p for p in self._partitions.by_topic.get(topic, {}).values()
                if not p.batches and not p.wire and not p.in_flight
                and not p.unresolved and (p.next_sequence == 0 or self._is_stale(p))]
        for p in drop:
            self._partitions.drop(p.topic, p.partition)
        return len(drop)

    def _is_stale(self, p: PartitionProducer[Any]) -> bool:
        """``p``'s sequences belong to an earlier producer id/epoch assignment."""
        ids = self._ids
        return p.is_stale(ids.producer_id, ids.producer_epoch, ids.generation)

    # ---- producer id (the holder's state machine; what the partitions do about it) -------

    def needs_producer_id(self) -> bool:
        """The sender must (keep trying to) send InitProducerId before anything else
        (``ProducerIdHolder.needs_producer_id``)."""
        return self._ids.needs_producer_id()

    def init_producer_id_params(self) -> tuple[int, int]:
        """(producer id, epoch) for the InitProducerId the sender is about to send; call it
        right before each attempt (``ProducerIdHolder.init_producer_id_params``)."""
        return self._ids.init_producer_id_params()

    def on_init_producer_id_failed(self, error: BaseException) -> None:
        """InitProducerId failed: retriable errors are tried again, others are fatal."""
        self._ids.on_init_producer_id_failed(error)

    def on_bump_unsupported(self) -> None:
        """The broker cannot bump an epoch (InitProducerId < v3): take a fresh id instead,
        now and for every later bump. Every partition then restarts at sequence 0."""
        self._ids.on_bump_unsupported()

    def on_epoch_bumped_by_broker(self, producer_id: int, producer_epoch: int) -> None:
        """Transaction version 2 (KIP-890): every EndTxn answer carries a new epoch (or id)
        the coordinator bumped itself. Taken like a KIP-360 bump: every partition restarts at
        sequence 0 under it once nothing of the old epoch is held."""
        if self._ids.take_broker_bump(producer_id, producer_epoch):
            self._broker_lost_state(producer_id, producer_epoch)

    def on_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """InitProducerId succeeded. Every partition restarts at 0 once it can (step 3)."""
        if self._ids.take_pair(producer_id, producer_epoch):
            self._broker_lost_state(producer_id, producer_epoch)

    def _broker_lost_state(self, producer_id: int, producer_epoch: int) -> None:
        # A broker never hands out the same id and epoch twice unless it lost what it
        # knew about them (Tansu restarted with memory storage does). Every sequence we
        # hold is then meaningless to it: each partition renumbers its held batches from
        # 0 as soon as none is on the wire, instead of finishing them under sequences the
        # broker would answer OUT_OF_ORDER_SEQUENCE_NUMBER until delivery.timeout.ms.
        self._broker_state_losses += 1
        for p in self._partitions:
            p.forget_broker_state()
        log.warning("[client %s] the broker handed out producer id %d epoch %d again: it "
                    "lost our producer state; renumbering every partition's unacknowledged "
                    "batches from sequence 0", self._client_id, producer_id, producer_epoch)

    def _request_reset(self, p: PartitionProducer[Any], why: str) -> None:
        """Ask for bump epoch & reset SEQ for ``p`` (docs/idempotence.md, "bump and reset")."""
        if self._ids.state is ProducerIdState.FATAL:
            return  # nothing is sent any more; no bump can matter
        p.reset_requested = True
        if self._is_stale(p):
            return  # a bump or new id already happened since; its restart covers this
        log.info("[client %s] %s-%d: %s; bumping the epoch and resetting sequences",
                 self._client_id, p.topic, p.partition, why)
        self._ids.fire(Event.BUMP_REQUESTED)

    # ---- step 1 and the pending bump ------------------------------------------------------

    def maintain(self, now: float | None = None) -> None:
        """Start of a send cycle: a pending local bump. ``SendRules.before_drain`` runs it
        once per drain; it is cheap and idempotent. (Step 1 runs where it can change
        something: after each outcome that leaves a partition with unresolved batches,
        ``_settle_unresolved``.)"""
        self._ids.bump_locally(now)

    def _settle_unresolved(self, p: PartitionProducer[Any]) -> None:
        """docs/idempotence.md 1, for a partition with unresolved batches, after an outcome of
        one of its batches: drop those a later success proved written (1a); if some remain
        and nothing of the partition is in flight, they were not written: bump & reset (1b).
        Only an outcome can prove them written or empty the partition's flight, so this is
        the moment to look, and the partitions themselves say which have any."""
        resolved, unwritten = p.settle_unresolved()
        self._resolved_total += resolved
        if unwritten:
            self._request_reset(p, "unresolved batches and nothing left in flight (step 1b)")

    # ---- sending (steps 2-5) ------------------------------------------------------------

    def fill(self, facts: SendFacts) -> None:
        """What a partition's verdict reads of the producer id (``PartitionProducer.verdict``),
        once per drain, after ``maintain``."""
        ids = self._ids
        facts.idempotent = True
        facts.ids_ready = ids.state is ProducerIdState.READY
        facts.producer_id = ids.producer_id
        facts.producer_epoch = ids.producer_epoch
        facts.generation = ids.generation
        facts.doomed = self._doomed

    def give_up_unrenumberable(self, p: PartitionProducer[Any]) -> None:
        """When a partition's verdict on the retry at its head is GIVE_UP_FIRST, before it
        renumbers its held batches (step 3): a batch that may already be written under its
        current numbering must not be renumbered: under a new producer id or
        epoch the broker cannot recognise it, and would write it a second time. It fails
        instead, and so does every held batch before it: had it been written, they could only
        be written after it, out of order (docs/idempotence.md, "A partition's first
        batches")."""
        doomed = p.unrenumberable_failed(self._is_stale(p))
        if doomed:
            log.warning("[client %s] %s-%d: sequence(s) %s may already be written and cannot "
                        "be sent again under a new producer id or epoch; failing %d held "
                        "batch(es) instead of writing records twice or out of order",
                        self._client_id, p.topic, p.partition,
                        [e.base_sequence for e, _ in doomed if e.possibly_written], len(doomed))
            self._take_over(doomed)
            if p.unresolved:
                self._settle_unresolved(p)

    def _take_over(self, doomed: list[tuple[InFlightEntry, BaseException]]) -> None:
        """Batches a partition gave up on wait here until the sender takes them."""
        for entry, error in doomed:
            self._doomed[entry.batch] = error
        self._unwritable_total += len(doomed)

    def assign_sequence(self, batch: QueuedBatch) -> None:
        """Steps 3-5, for a batch its partition's verdict let go, right before it is sent.

        A new batch gets the partition's next sequence and the current id and epoch; a retried
        batch keeps its sequence, unless the partition restarts now (then every held batch is
        renumbered from 0 in order: the Java client's sequence adjustment). Either way it is
        in flight, and the drain puts it on the wire next (``PartitionProducer.take_head``).
        """
        ids = self._ids
        if ids.state is not ProducerIdState.READY:
            raise IllegalStateError(f"cannot assign a sequence in state {ids.state.name}")
        p = batch.owner
        if batch.base_sequence >= 0:
            entry = p.held_entry(batch)
            if not p.retry_allowed(entry):
                raise IllegalStateError(f"{p.topic}-{p.partition}: retry of sequence "
                                        f"{batch.base_sequence} is not allowed now (step 2c)")
            self._maybe_restart(p, self._is_stale(p))
            return
        now = self._clock()
        stale = self._is_stale(p)
        if not p.new_batch_allowed(now, stale):
            raise IllegalStateError(f"{p.topic}-{p.partition}: a new batch may not be sent now "
                                    f"(step 2); ask its partition's verdict first")
        p.forget_leader_state_if_idle(now)
        if stale:  # a partition that is not has nothing to restart (``restart_due``)
            self._maybe_restart(p, stale)
        p.number(batch, ids.producer_id, ids.producer_epoch)

    def _maybe_restart(self, p: PartitionProducer[Any], stale: bool) -> None:
        """Step 3: a stale partition starts again at 0 once no old-epoch batch can interfere.

        It asked for the reset: its held batches are renumbered (nothing is on the wire, which
        the callers ensured). It did not: only once it holds nothing at all, so batches that
        may already be written finish under the old epoch, where the broker de-duplicates them.
        """
        if not p.restart_due(stale):
            return
        if p.producer_id != NO_PRODUCER_ID:
            self._sequence_resets += 1  # the first start is not a reset
        ids = self._ids
        p.restart_sequences(ids.producer_id, ids.producer_epoch, ids.generation)
        log.debug("[client %s] %s-%d: sequences restart at 0 under producer id %d epoch %d "
                  "(%d held batch(es) renumbered)", self._client_id, p.topic, p.partition,
                  ids.producer_id, ids.producer_epoch, len(p.in_flight))

    def on_not_sent(self, batch: QueuedBatch) -> None:
        """A numbered batch never left the client: held again like a retry."""
        batch.owner.not_sent(batch)

    # ---- answers (steps 8, 9) -----------------------------------------------------------

    def on_success(self, batch: QueuedBatch, *, base_offset: int,
                   duplicate: bool = False) -> None:
        """Step 9 (and DUPLICATE_SEQUENCE_NUMBER, ``duplicate=True``, offset -1): the records
        are written. Also for a batch that already expired: its success resolves (step 1a)."""
        p = batch.owner
        doomed = p.acknowledged(batch, base_offset=base_offset, duplicate=duplicate,
                                now=self._clock())
        if doomed:
            log.warning("[client %s] %s-%d: sequence %d was written while earlier sequence(s) "
                        "%s were not (the leader held no state for producer id %d); failing "
                        "them rather than writing them out of order", self._client_id,
                        p.topic, p.partition, batch.base_sequence,
                        [e.base_sequence for e, _ in doomed], batch.producer_id)
            self._take_over(doomed)
        if p.unresolved:
            self._settle_unresolved(p)

    def take_doomed(self) -> list[tuple[SequencedBatch, BaseException]]:
        """Held batches that must fail now, with why; the sender removes them from the
        accumulator and fails their records. Each is returned once."""
        if not self._doomed:
            return []
        doomed = list(self._doomed.items())
        self._doomed.clear()
        return doomed

    def duplicate_is_success(self, batch: QueuedBatch) -> bool:
        """DUPLICATE_SEQUENCE_NUMBER for ``batch``: are these records really written
        (``PartitionProducer.may_be_duplicate``)?"""
        return batch.owner.may_be_duplicate(batch)

    def on_error(self, batch: QueuedBatch, error_code: int, now: float | None = None,
                 decision: RetryDecision | None = None) -> RetryDecision:
        """Step 8: the broker answered with an error (or the request failed; the sender then
        passes NETWORK_EXCEPTION or REQUEST_TIMED_OUT). ``decision`` is ``retry_policy``'s
        general view; the answer refines it with the idempotence rules.
        """
        code = ErrorCode.of(int(error_code))
        self.last_error_at = self._clock() if now is None else now
        if decision is None:
            decision = classify(code, attempts=batch.attempts + 1, idempotent=True,
                                delivery_deadline_passed=False, record_count=batch.record_count,
                                retries=self._retries, transactional=self._transactional,
                                backoff=self._backoff)
        p = batch.owner
        if self._ids.state is ProducerIdState.FATAL:
            p.forget(batch)
            return replace(decision, action=Action.FATAL, retriable=False,
                           reason=f"producer already failed: {self._ids.fatal_error!r}")
        if decision.action is Action.FATAL:
            p.forget(batch)
            self.fail_fatally(_error_for(code, batch))
            return decision
        outcome = p.failed(batch, code, decision)
        assert outcome.decision is not None
        if outcome.decision.action is Action.COMPLETE:
            self.on_success(batch, base_offset=-1, duplicate=True)
        elif outcome.decision.action is Action.RETRY:
            self._retries_done += 1
        self._apply(p, outcome)
        return outcome.decision

    def _apply(self, p: PartitionProducer[Any], outcome: Outcome) -> None:
        """What a partition's outcome asks of the producer as a whole."""
        if outcome.unresolved:
            self._unresolved_total += 1
        if p.unresolved:
            self._settle_unresolved(p)
        if outcome.reset is not None:
            self._request_reset(p, outcome.reset)

    def on_split(self, batch: QueuedBatch, new_batches: Sequence[SequencedBatch]) -> None:
        """MESSAGE_TOO_LARGE split ``batch`` (docs/compression.md S4): the new batches take its
        sequence range and its place (``PartitionProducer.split``)."""
        batch.owner.split(batch, new_batches)
        self._splits += 1

    # ---- expiry (step 6) ----------------------------------------------------------------

    def on_delivery_timeout(self, batch: QueuedBatch, *,
                            possibly_written: bool = True) -> None:
        """A batch outlived delivery.timeout.ms; the sender fails its records.

        Never drained: no sequence was consumed, nothing to do. Drained: it leaves in_flight;
        if it may have been written (on the wire, an ambiguous answer, or the sender says so)
        it becomes unresolved (step 6) and blocks new batches until resolved; if it certainly
        was not written, later sequences have a gap: bump & reset (Java: failed batch with
        adjusted sequences, which the idempotent producer does by bumping).
        """
        p = batch.owner
        self._apply(p, p.expired(batch, possibly_written))

    # ---- KIP-1269 -------------------------------------------------------------------------

    def on_leader_change(self, tp: TopicPartitionLike) -> None:
        """The new leader may be an old broker that retains 5 batches (KIP-1269)."""
        self.partition_state(tp).in_flight_limit = DEFAULT_IN_FLIGHT_LIMIT

    def on_response_batches_to_retain(self, p: PartitionProducer[Any], batches: int) -> None:
        """ProduceResponse's ProducerStateBatchesToRetain for ``p`` (KIP-1269); values < 1
        cannot be a real window and are ignored."""
        if batches > 0:
            p.in_flight_limit = batches

    # ---- introspection --------------------------------------------------------------------

    def statistics(self) -> IdempotenceStatistics:
        ids = self._ids
        return IdempotenceStatistics(
            state=ids.state, producer_id=ids.producer_id,
            producer_epoch=ids.producer_epoch, partitions=len(self._partitions),
            in_flight_batches=sum(len(p.in_flight) for p in self._partitions),
            partitions_with_unresolved=sum(1 for p in self._partitions if p.unresolved),
            epoch_bumps=ids.epoch_bumps,
            producer_id_resets=max(0, ids.fresh_producer_ids - 1),
            sequence_resets=self._sequence_resets, retries=self._retries_done,
            splits=self._splits, unresolved_batches=self._unresolved_total,
            resolved_batches=self._resolved_total,
            broker_state_losses=self._broker_state_losses, generation=ids.generation,
            unwritable_batches=self._unwritable_total)

    def __repr__(self) -> str:
        s = self.statistics()
        error = self._ids.fatal_error
        fatal = f" fatal={error!r}" if error is not None else ""
        return (f"<IdempotenceManager {s.state.name} pid={s.producer_id} "
                f"epoch={s.producer_epoch} partitions={s.partitions} "
                f"in_flight={s.in_flight_batches} unresolved={s.partitions_with_unresolved} "
                f"bumps={s.epoch_bumps} resets={s.sequence_resets}{fatal}>")


def _error_for(code: ErrorCode, batch: SequencedBatch) -> BaseException:
    cls = error_for_code(int(code))
    return cls(f"{batch.topic}-{batch.partition}: {cls.message}")
