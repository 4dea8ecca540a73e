"""One owner per partition: :class:`PartitionProducer` and the table of them.

Every per-partition fact of the producer lives in one object (docs/idempotence.md, "Where a
partition's state lives"): the queue of batches the accumulator appends to and drains, the
count of requests carrying the partition's batches (from which muting is derived), the
idempotent producer's sequences, in-flight and unresolved batches and KIP-1269 window, and how
far the partition got into the open transaction. The accumulator, the sender, the idempotence
manager and the transaction share the objects through one :class:`Partitions` table instead
of keeping each its own copy of them.

A partition's data, the bookkeeping that keeps it consistent (the in-flight list and its
incrementally kept counts, acknowledgements, renumbering) and what one partition decides are
one idea, so they are one class: may a batch go (steps 2, 8b; F1), and what each outcome of
one of its batches does to it -- acknowledged, failed with an error (the connection's end
included), not sent after all, expired, split. An outcome method returns an :class:`Outcome`
naming what the producer as a whole must do (a bump and reset, an unresolved partition to
watch); the idempotence manager applies it, keeping only what spans partitions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import IllegalStateError, OutOfOrderSequenceNumberError
from aiokprod.producer.retry_policy import Action, RetryDecision
from aiokprod.producer.sequences import (
    DEFAULT_IN_FLIGHT_LIMIT,
    LEADER_STATE_IDLE_S,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    InFlightEntry,
    SequencedBatch,
    UnresolvedRange,
    increment_sequence,
    last_sequence,
    sequence_precedes,
)

__all__ = ["GIVE_UP_FIRST", "HOLD_BACKOFF", "HOLD_DOOMED", "HOLD_MUTED", "HOLD_PRODUCER_ID",
           "HOLD_SEQUENCE", "HOLD_TXN_CLOSED", "HOLD_TXN_JOIN", "HOLD_TXN_NEEDS_BUMP", "SEND",
           "TXN_ADDED", "TXN_ADDING", "TXN_NONE", "TXN_PENDING", "Outcome", "PartitionProducer",
           "Partitions", "QueuedBatch", "SendFacts"]

# How far a partition got into the open transaction (``PartitionProducer.txn_stage``)
TXN_NONE = 0  # not part of it
TXN_PENDING = 1  # a drain found a batch of it: to be asked for with AddPartitionsToTxn
TXN_ADDING = 2  # in the AddPartitionsToTxn on the wire
TXN_ADDED = 3  # accepted by the coordinator (or added implicitly, KIP-890): its batches may go

Doomed = list[tuple[InFlightEntry, BaseException]]


class QueuedBatch(SequencedBatch, Protocol):
    """What a partition reads of the batches it queues (``producer.batch.ProducerBatch``;
    the idempotence tests' stand-in). A batch refers to the partition that holds it, so
    whoever has the batch has its partition, without a lookup by topic and number."""

    owner: PartitionProducer[Any]
    # waiting to be drained (True), or drained and not answered yet
    queued: bool
    # a retry's backoff: not sendable before this monotonic time, unless the partition's
    # leader changed since its last attempt, drained under ``leader_epoch``
    retry_at: float
    leader_epoch: int


B = TypeVar("B", bound=QueuedBatch)

# What ``PartitionProducer.verdict`` says of a partition's head batch: it goes (0), or why it
# waits. Only three holds ask something of the producer after the drain (``SendRules``):
# HOLD_TXN_JOIN (AddPartitionsToTxn), HOLD_TXN_NEEDS_BUMP (the transaction must abort) and
# HOLD_DOOMED (the sender fails the batch); the others pass on their own.
SEND = 0
HOLD_BACKOFF = 1  # a retry backing off (KIP-580), its leader unchanged since it failed
HOLD_MUTED = 2  # max.in.flight 1: a batch of the partition is on the wire (docs/batching.md D5)
HOLD_TXN_CLOSED = 3  # no transaction open for batches (not begun, ending, failed)
HOLD_TXN_NEEDS_BUMP = 4  # idempotence needs a new epoch mid-transaction: only an abort gives one
HOLD_TXN_JOIN = 5  # not yet part of the transaction (AddPartitionsToTxn pending or on the wire)
HOLD_PRODUCER_ID = 6  # no producer id to number it with (yet, or any more)
HOLD_DOOMED = 7  # idempotence gave the batch up (F2, F3): failed after the drain
HOLD_SEQUENCE = 8  # the idempotence rules: unresolved, first batches, retries, old epoch, window
# Not a verdict on the batch yet: held batches of the partition may not be renumbered and must
# be given up first (F3, ``SendRules.give_up_unrenumberable``); then ask again.
GIVE_UP_FIRST = 9


class SendFacts:
    """What a partition's verdict reads besides its own state: the producer id and the
    transaction, the same for every partition of one drain. ``SendRules`` owns one and
    refreshes it before each drain; a producer that is neither idempotent nor transactional
    leaves it as it starts, asking nothing of either."""

    __slots__ = ("doomed", "generation", "idempotent", "ids_ready", "producer_epoch",
                 "producer_id", "transactional", "txn_needs_bump", "txn_number", "txn_open",
                 "txn_version")

    def __init__(self) -> None:
        self.idempotent = False
        self.ids_ready = False
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.generation = 0
        # the held batches idempotence gave up on, until the sender fails them
        self.doomed: Mapping[SequencedBatch, BaseException] = {}
        self.transactional = False
        self.txn_open = False
        self.txn_needs_bump = False
        self.txn_version = 0
        self.txn_number = 0


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one batch's outcome asks of the producer-wide state (the idempotence manager)."""

    # the decision for the batch, refined by the partition's rules (``failed`` only)
    decision: RetryDecision | None = None
    # why the partition needs an epoch bump and a sequence reset, if it does
    reset: str | None = None
    # the batch became unresolved (step 6): the manager watches the partition (step 1)
    unresolved: bool = False


NOTHING = Outcome()


@dataclass(eq=False, slots=True)
class PartitionProducer(Generic[B]):
    """Everything the producer holds for one partition -- its queue of batches, the requests
    carrying its batches, the idempotent producer's sequences, window and unresolved batches
    (docs/idempotence.md, "Where a partition's state lives") -- and the rules and outcomes of
    one partition.

    One object, shared by the accumulator (which appends to and drains ``batches``), the
    sender (whose requests carry the batches on its ``wire``) and the idempotence manager
    (everything below them), so that these facts cannot disagree. Created on first use with
    ``producer_id = -1``, which makes it "stale" against any real producer id: the first drain
    resets it to sequence 0 under the current id and epoch.
    """

    # Which partition this is, for messages and statistics.
    topic: str
    partition: int
    # Every unacknowledged batch of the partition, in the order it was first drained, the
    # open batch last (docs/batching.md A1-A3): drained batches stay here until answered and
    # released, so the order they were numbered in is this order. Batches before
    # ``drain_index`` are all drained (on the wire or awaiting an answer); a retry rewinds the
    # cursor to itself instead of being re-inserted (docs/idempotence.md 8b).
    batches: deque[B] = field(default_factory=deque)
    # The drain cursor into ``batches`` (franz-go's batchDrainIdx): the next batch to drain is
    # the first at or after it that is waiting (``ProducerBatch.queued``).
    drain_index: int = 0
    # Its batches on the wire: drained into requests not answered yet (the connection's end
    # counts as an answer), a batch failed by delivery.timeout.ms meanwhile included, as its
    # request can still land. The one record of "on the wire": a batch's ``on_wire`` reads it,
    # with max.in.flight.requests.per.connection=1 the partition is muted while it is not
    # empty (docs/batching.md D5), a fresh producer id waits for every partition's to be
    # empty, and the sender expires the ones not failed yet at delivery.timeout.ms.
    wire: list[B] = field(default_factory=list)
    # The producer id and epoch the sequences below belong to. When the manager's current id or
    # epoch differs (after a bump or a new id), the partition is stale: it must start again at
    # 0, but only once no batch of the old epoch can still reach the broker (idempotence.md 2b/3).
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    # Which producer-id assignment (InitProducerId answer or local bump, counted by the
    # manager) the sequences belong to. Compared instead of the id and epoch alone because a
    # broker that lost its producer state (a restart with memory storage, or any broker that
    # forgot us) may hand out the very same id and epoch again: the old sequences are then
    # meaningless although the pair did not change.
    generation: int = 0
    # Base sequence for the next new batch; advanced by its record count at drain (step 4).
    next_sequence: int = 0
    # Last record sequence the broker confirmed in this epoch (-1: none). A response may only
    # advance it; OUT_OF_ORDER is a real gap only for the batch right after it (step 8b).
    last_acked_sequence: int = NO_SEQUENCE
    # Offset of the last confirmed record (-1: none, or only DUPLICATE answers): diagnostics, and
    # what tells retention-caused UNKNOWN_PRODUCER_ID from data loss (Java's rule).
    last_acked_offset: int = -1
    # Batches holding a sequence and not yet completed, in sequence order: sent and awaiting an
    # answer, or queued for a retry (the broker may already hold those too, so they count
    # against the broker's de-duplication window just the same). docs/idempotence.md, "in flight".
    in_flight: list[InFlightEntry] = field(default_factory=list)
    # Expired batches whose fate is unknown; no new batch is drained while any exists
    # (docs/idempotence.md, "unresolved", steps 1, 2a, 6).
    unresolved: list[UnresolvedRange] = field(default_factory=list)
    # The broker lost or rejected this partition's state (UNKNOWN_PRODUCER_ID, a real
    # OUT_OF_ORDER gap, a failed batch, an unresolved expiry): at the next bump its held batches
    # are renumbered from 0 under the new epoch instead of waiting for them to drain.
    reset_requested: bool = False
    # KIP-1269: at most this many in_flight batches, the broker's
    # ProducerStateBatchesToRetain for this partition; 5 until a response says otherwise.
    in_flight_limit: int = DEFAULT_IN_FLIGHT_LIMIT
    # Times this partition's sequences were restarted at 0 after its first start: statistics.
    sequence_resets: int = 0
    # The leader acknowledged a batch of this producer id here, so it holds our producer state
    # and checks every later first sequence (B4). Until then Kafka takes any first sequence
    # from an id it has no state for, so a later batch could be written ahead of a refused
    # earlier one: only one batch is held at a time (docs/idempotence.md, "A partition's first
    # batches"). Cleared by a new producer id and by a broker that lost our state.
    leader_holds_state: bool = False
    # Clock time of the last acknowledgement under the current numbering: after
    # LEADER_STATE_IDLE_S with nothing held, the leader is no longer trusted to hold our state.
    last_acked_at: float = 0.0
    # The transaction this partition is part of (KIP-98): the number of the transaction
    # (``transactions.PartitionsInTransaction.number``) that ``txn_stage`` speaks of, and how
    # far the partition got in it (TXN_*). A stage of another transaction means "not part of
    # the open one", so ending a transaction takes every partition out at once by counting on.
    txn_number: int = 0
    txn_stage: int = TXN_NONE

    # ---- queries -------------------------------------------------------------------------

    @property
    def on_wire_count(self) -> int:
        """How many held batches are on the wire: a reset may only happen at 0 (step 3) and,
        while retrying, a partition sends only at 0 (step 2c). Read from the batches: the
        held ones are at most the broker's window."""
        wire = self.wire
        return sum(1 for entry in self.in_flight if entry.batch in wire) if wire else 0

    @property
    def retrying(self) -> bool:
        """While a partition retries, it has one batch in flight at a time (idempotence.md 2c).
        Read from the entries (``InFlightEntry.retried``): at most the broker's window of them."""
        # a loop, not any() over a generator: asked for every batch drained
        for entry in self.in_flight:  # noqa: SIM110
            if entry.retried:
                return True
        return False

    def joined(self, transaction: int) -> bool:
        """Part of transaction number ``transaction`` as the coordinator sees it: adding
        (AddPartitionsToTxn on the wire) or added."""
        return self.txn_number == transaction and self.txn_stage >= TXN_ADDING

    def is_stale(self, producer_id: int, producer_epoch: int,
                 generation: int | None = None) -> bool:
        """Its sequences belong to another producer id or epoch than the current one, or
        (when ``generation`` is given) to an earlier assignment of the same pair."""
        return (self.producer_id != producer_id or self.producer_epoch != producer_epoch
                or (generation is not None and generation != self.generation))

    def entry_for(self, batch: SequencedBatch) -> InFlightEntry | None:
        """The in-flight entry of this very batch object, if it is tracked."""
        for entry in self.in_flight:
            if entry.batch is batch:
                return entry
        return None

    def first_in_flight(self) -> InFlightEntry | None:
        return self.in_flight[0] if self.in_flight else None

    def follows_unresolved(self, base_sequence: int) -> bool:
        """``base_sequence`` comes right after an unresolved batch (docs/idempotence.md step 8b)."""
        return any(increment_sequence(r.last_sequence, 1) == base_sequence
                   for r in self.unresolved)

    def is_next_sequence(self, base_sequence: int) -> bool:
        """``base_sequence`` is exactly one past what the broker confirmed in this epoch."""
        expected = 0 if self.last_acked_sequence < 0 else increment_sequence(
            self.last_acked_sequence, 1)
        return base_sequence == expected

    # ---- the queue and its drain cursor ----------------------------------------------------

    def head(self) -> B | None:
        """The next batch to drain, or None. The cursor moves past batches still awaiting an
        answer (after a rewind, later batches may still be on the wire)."""
        batches = self.batches
        i = self.drain_index
        n = len(batches)
        while i < n and not batches[i].queued:
            i += 1
        self.drain_index = i
        return batches[i] if i < n else None

    def take_head(self, batch: B) -> None:
        """``batch``, the head its verdict let go, is drained into a request: the cursor moves
        past it and it is on the wire. It stays in the queue until answered (a retry rewinds
        the cursor to it)."""
        self.drain_index += 1
        batch.queued = False
        self.wire.append(batch)

    def off_wire(self, batch: SequencedBatch) -> None:
        """``batch``'s request is answered (the connection's end included), or it was not
        sent after all: whoever learns it first takes it off the wire, later calls do nothing."""
        wire = self.wire
        if wire and wire[0] is batch:
            del wire[0]
        elif batch in wire:
            wire.remove(batch)

    def waiting(self) -> list[B]:
        """The batches waiting to be drained, in drain order."""
        batches = self.batches
        return [batches[i] for i in range(self.drain_index, len(batches)) if batches[i].queued]

    def last_waiting(self) -> B | None:
        """The last batch waiting to be drained: the one new records join. Read from the tail,
        as the sticky partitioner asks once per batch and the queue may hold hundreds."""
        batches = self.batches
        i = len(batches) - 1
        while i >= self.drain_index:
            if batches[i].queued:
                return batches[i]
            i -= 1
        return None

    def take_waiting(self) -> list[B]:
        """Take every waiting batch out (an abort), in one pass; drained ones stay."""
        waiting = self.waiting()
        if waiting:
            self.batches = deque(b for b in self.batches if not b.queued)
            self.drain_index = len(self.batches)
        return waiting

    def put_back(self, batch: B) -> None:
        """A drained batch waits again (a retry, a split part, not sent after all): the
        cursor rewinds to it, so it goes before every batch after it and keeps its place
        among the drained ones. A batch the queue does not hold goes first among the waiting."""
        batch.queued = True
        try:
            index = self.batches.index(batch)
        except ValueError:
            self.batches.insert(self.drain_index, batch)
            return
        self.drain_index = min(self.drain_index, index)

    def discard(self, batch: B) -> bool:
        """Take ``batch`` out of the queue (answered, failed, expired, given up on)."""
        batches = self.batches
        if batches and batches[0] is batch:
            batches.popleft()
            index = 0
        else:
            try:
                index = batches.index(batch)
            except ValueError:
                return False
            del batches[index]
        if index < self.drain_index:
            self.drain_index -= 1
        return True

    def replace_batch(self, old: B, new: list[B]) -> None:
        """A split: the parts take ``old``'s place in the queue, waiting (``put_back``)."""
        index = self.batches.index(old)
        del self.batches[index]
        for offset, batch in enumerate(new):
            self.batches.insert(index + offset, batch)
        self.drain_index = min(self.drain_index, index)

    # ---- bookkeeping ---------------------------------------------------------------------

    def add(self, entry: InFlightEntry) -> None:
        """Track a newly stamped batch; sequences are handed out in order, so it goes last."""
        last = self.in_flight[-1] if self.in_flight else None
        if last is not None and not sequence_precedes(last.last_sequence, entry.base_sequence):
            raise IllegalStateError(
                f"{self.topic}-{self.partition}: batch with sequence {entry.base_sequence} would "
                f"overlap or precede in-flight sequence {last.last_sequence}")
        self.in_flight.append(entry)

    def replace(self, old: InFlightEntry, new: list[InFlightEntry]) -> None:
        """Put ``new`` where ``old`` was (a split keeps the old batch's place in the order)."""
        index = self.in_flight.index(old)
        self.remove(old)
        self.in_flight[index:index] = new

    def remove(self, entry: InFlightEntry) -> None:
        self.in_flight.remove(entry)

    def acknowledge(self, base_sequence: int, record_count: int, base_offset: int) -> None:
        """Advance what the broker confirmed; an older confirmation never moves it back."""
        last = last_sequence(base_sequence, record_count)
        if self.last_acked_sequence < 0 or sequence_precedes(self.last_acked_sequence, last):
            self.last_acked_sequence = last
        if base_offset >= 0:
            last_offset = base_offset + record_count - 1
            # an `if`, not max(): no builtin call per acknowledged batch
            if last_offset > self.last_acked_offset:  # noqa: PLR1730
                self.last_acked_offset = last_offset

    def drop_resolved(self) -> int:
        """Forget unresolved ranges the broker has confirmed past (docs/idempotence.md step 1a).

        A success for a later batch proves the earlier sequences were written: the broker only
        accepts a batch that continues its sequence. Returns how many ranges were resolved.
        """
        if not self.unresolved or self.last_acked_sequence < 0:
            return 0
        acked = self.last_acked_sequence
        keep = [r for r in self.unresolved
                if (r.producer_id, r.producer_epoch, r.generation)
                != (self.producer_id, self.producer_epoch, self.generation)
                or sequence_precedes(acked, r.last_sequence)]
        resolved = len(self.unresolved) - len(keep)
        self.unresolved = keep
        return resolved

    def restart_sequences(self, producer_id: int, producer_epoch: int,
                          generation: int | None = None) -> list[InFlightEntry]:
        """Renumber every held batch from 0 under a new id/epoch, in order (docs/idempotence.md 3).

        Only legal with nothing on the wire: a batch already sent cannot change its header.
        ``generation`` is the manager's producer-id generation (default: the next one).
        Returns the restamped entries.
        """
        if self.on_wire_count:
            raise IllegalStateError(
                f"{self.topic}-{self.partition}: cannot restart sequences with "
                f"{self.on_wire_count} batch(es) still on the wire")
        if generation is None:
            generation = self.generation + 1
        if self.producer_id not in (producer_id, NO_PRODUCER_ID):
            self.leader_holds_state = False  # the leader has never seen this producer id
        seq = 0
        for entry in self.in_flight:
            entry.batch.stamp(producer_id, producer_epoch, seq)
            entry.generation = generation
            # the new epoch has never seen these records: nothing of this epoch is ambiguous
            entry.possibly_written = False
            seq = increment_sequence(seq, entry.batch.record_count)
        if self.producer_id != NO_PRODUCER_ID:
            self.sequence_resets += 1  # the first start is not a reset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.generation = generation
        self.next_sequence = seq
        self.last_acked_sequence = NO_SEQUENCE
        self.unresolved.clear()
        self.reset_requested = False
        return list(self.in_flight)

    def __iter__(self) -> Iterator[InFlightEntry]:
        return iter(self.in_flight)

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.topic}-{self.partition} "
                f"queued={len(self.batches)} on_wire={len(self.wire)} "
                f"pid={self.producer_id} epoch={self.producer_epoch} gen={self.generation} "
                f"next={self.next_sequence} acked={self.last_acked_sequence} "
                f"in_flight={len(self.in_flight)}/{self.in_flight_limit} "
                f"held_on_wire={self.on_wire_count} unresolved={len(self.unresolved)} "
                f"retrying={self.retrying} reset_requested={self.reset_requested} "
                f"leader_holds_state={self.leader_holds_state}>")

    # ---- the sending rules of one partition (docs/idempotence.md steps 2, 8b; F1) -----------

    def verdict(self, batch: B, now: float, leader_epoch: int,
                guarantee_order: bool, facts: SendFacts) -> int:
        """May ``batch``, this partition's head, go now? SEND, or the HOLD_* saying why not.

        The one place that decides: the retry backoff, muting, the transaction's stage, the
        producer id, the batches given up on, the idempotence rules (steps 2a-2c, F1, KIP-1269)
        and a retry's turn (2c), in that order. Asking changes nothing: what a hold asks of
        the producer is done after the drain (``SendRules.after_drain``), what sending changes
        when the batch is taken (``SendRules.taken``), and held batches that must be given up
        before a retry can be judged are given up between two askings (GIVE_UP_FIRST).
        ``leader_epoch``: its leader's now.
        """
        hold = self.waits(batch, now, leader_epoch, guarantee_order)
        if hold:
            return hold
        if facts.transactional:
            if not facts.txn_open:
                return HOLD_TXN_CLOSED
            if facts.txn_needs_bump:
                return HOLD_TXN_NEEDS_BUMP
            if facts.txn_version < 2 and (self.txn_number != facts.txn_number
                                          or self.txn_stage != TXN_ADDED):
                return HOLD_TXN_JOIN  # KIP-890 (version 2): the leader adds it itself
        if facts.idempotent:
            return self.sequence_verdict(batch, now, facts)
        return SEND

    def waits(self, batch: B, now: float, leader_epoch: int, guarantee_order: bool) -> int:
        """The part of ``verdict`` that only time and the wire decide, which is all the
        accumulator's ``ready`` asks (its node is ready when a head may go but for linger):
        HOLD_BACKOFF, HOLD_MUTED or SEND."""
        if batch.attempts > 0 and now < batch.retry_at and not leader_epoch > batch.leader_epoch:
            return HOLD_BACKOFF  # unless its partition has a new leader since the error
        if self.wire and guarantee_order:
            return HOLD_MUTED
        return SEND

    def sequence_verdict(self, batch: SequencedBatch | None, now: float,
                         facts: SendFacts) -> int:
        """The idempotence part of ``verdict`` (docs/idempotence.md step 2): for ``batch``,
        a batch at the head, or for a new batch not made yet (``None``)."""
        if not facts.ids_ready:
            return HOLD_PRODUCER_ID
        stale = self.is_stale(facts.producer_id, facts.producer_epoch, facts.generation)
        if batch is not None and batch.base_sequence >= 0:  # a retry: it keeps its sequence
            if batch in facts.doomed:
                return HOLD_DOOMED
            if self.reset_requested and self.unrenumberable(stale):
                return GIVE_UP_FIRST
            return SEND if self.retry_allowed(self.held_entry(batch)) else HOLD_SEQUENCE
        return SEND if self.new_batch_allowed(now, stale) else HOLD_SEQUENCE

    def new_batch_allowed(self, now: float, stale: bool) -> bool:
        """May a new batch be numbered and sent now (steps 2a-2c, F1, KIP-1269)? ``stale``:
        the producer id or epoch changed since this partition's numbering."""
        if self.unresolved:
            return False  # step 2a
        in_flight = self.in_flight
        if not in_flight:
            return self.in_flight_limit > 0
        if not self.leader_holds_state:
            return False  # F1: a partition's first batches, one at a time until acknowledged
        if stale:
            return False  # step 2b: old-epoch batches still in flight
        if self.retrying:
            return False  # step 2c: retries go first, one at a time
        return len(in_flight) < self.in_flight_limit  # KIP-1269

    def forget_leader_state_if_idle(self, now: float) -> None:
        """F1, when a new batch is numbered: after LEADER_STATE_IDLE_S with nothing held, the
        leader may have forgotten our producer state, so this batch goes alone until
        acknowledged. Part of taking the batch, not of asking (``verdict``): with nothing held
        the answer is the same either way."""
        if not self.in_flight and self.leader_holds_state and \
                now - self.last_acked_at >= LEADER_STATE_IDLE_S:
            self.leader_holds_state = False

    def retry_allowed(self, entry: InFlightEntry) -> bool:
        # step 2c: while retrying, one batch in flight, and only the first in sequence
        return self.on_wire_count == 0 and self.first_in_flight() is entry

    def held_entry(self, batch: SequencedBatch) -> InFlightEntry:
        """The entry of a held batch about to be sent again; an untracked batch, or one on
        the wire, is a caller's error."""
        entry = self.entry_for(batch)
        if entry is None:
            raise IllegalStateError(
                f"{self.topic}-{self.partition}: batch with sequence {batch.base_sequence} is not "
                f"tracked (completed, expired or split) and must not be sent")
        if entry.on_wire:
            raise IllegalStateError(
                f"{self.topic}-{self.partition}: batch with sequence {batch.base_sequence} is "
                f"already on the wire; report its outcome (or on_not_sent) before sending it "
                f"again")
        return entry

    def needs_reset_before_retry(self, entry: InFlightEntry, code: ErrorCode) -> bool:
        """docs/idempotence.md step 8b, for UNKNOWN_PRODUCER_ID and OUT_OF_ORDER_SEQUENCE_NUMBER.

        "Unless a SEQ reset already happened" is read per partition: a reset already requested
        and not yet performed covers every answer that arrives before it. Answers from before
        a reset cannot arrive after it here (a reset waits until nothing is on the wire), so
        unlike Java no per-batch "sequence was reset" flag is needed, and a broker that loses
        our state again later gets a new reset instead of endless retries.
        """
        if code not in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
            return False
        if self.reset_requested:
            return False  # the pending reset will renumber this batch too: just retry
        if code is ErrorCode.UNKNOWN_PRODUCER_ID:
            return True  # the broker lost our state (retention): bump & reset, then retry
        # A real gap, proved by the broker, exists only when no batch we still hold comes
        # before this one: then everything before it was acknowledged (the broker lost it),
        # expired unresolved (then it was not written, or the broker would expect this batch),
        # or failed (a reset is already pending). If an earlier batch is still held, being
        # retried or on the wire, its own answer decides: it may be written (its response was
        # lost) and renumbering it would write it twice, so this one just retries behind it.
        # This is Java's "is it the next sequence" test (TransactionManager) and librdkafka's
        # "first in-flight" test, read over what we hold rather than over the last
        # acknowledgement alone, which after a broker restart or an expiry says nothing.
        return self.first_in_flight() is entry

    def speaks_of_current_numbering(self, entry: InFlightEntry | None,
                                    batch: SequencedBatch) -> bool:
        """An answer for ``batch`` tells us about ``p``'s current sequences.

        A tracked batch: if it was numbered in the partition's current generation. An
        untracked one (it expired on the wire): only if it is one of the current generation's
        unresolved ranges, the one case where its late success matters (step 1a). The header
        alone cannot decide: after a broker lost its state, the same id and epoch return.
        """
        if entry is not None:
            return entry.generation == self.generation and not self.is_stale(
                batch.producer_id, batch.producer_epoch)
        return any(r.base_sequence == batch.base_sequence and r.generation == self.generation
                   and (r.producer_id, r.producer_epoch) == (batch.producer_id,
                                                             batch.producer_epoch)
                   for r in self.unresolved)

    # ---- first batches and renumbering (docs/idempotence.md F2, F3, step 3) ----------------

    def overtaken(self, earlier: list[InFlightEntry]) -> list[InFlightEntry]:
        """F2: of the batches held before one the leader just wrote, those that certainly
        were not written (refused or never sent, in this numbering): the leader took a gap,
        so they can no longer be written in order. Batches on the wire or perhaps written
        are left to their answers: they may well be in the log before it."""
        return [e for e in earlier if not e.on_wire and not e.possibly_written
                and e.generation == self.generation]

    def unrenumberable(self, stale: bool) -> list[InFlightEntry]:
        """F3: before a renumbering (step 3), the held batches that must fail instead: the
        last that may already be written under the current numbering (under a new id or
        epoch the broker could not recognise it, and would write it twice) and every one
        before it (had it been written, they could only follow it out of order)."""
        if not (self.reset_requested and self.in_flight and not self.on_wire_count and stale):
            return []
        last = max((i for i, e in enumerate(self.in_flight) if e.possibly_written), default=-1)
        return self.in_flight[:last + 1]

    def restart_due(self, stale: bool) -> bool:
        """Step 3: a stale partition starts again at 0 once no old-epoch batch can interfere.

        It asked for the reset: its held batches are renumbered once nothing is on the wire.
        It did not: only once it holds nothing at all, so batches that may already be written
        finish under the old epoch, where the broker de-duplicates them.
        """
        if not stale or self.on_wire_count:
            return False
        if self.in_flight and not self.reset_requested:
            return False
        written = [e.base_sequence for e in self.in_flight if e.possibly_written]
        if written:
            raise IllegalStateError(
                f"{self.topic}-{self.partition}: sequence(s) {written} may be written and "
                f"must not be renumbered (F3 fails them first)")
        return True

    def split(self, batch: SequencedBatch, new_batches: Sequence[SequencedBatch]) -> int:
        """MESSAGE_TOO_LARGE split ``batch`` (docs/compression.md S4): the new batches take its
        sequence range, in order, and its place among the held batches, as held for a retry.
        The broker never wrote the big batch, so these sequences are fresh to it. Returns how
        many batches now hold its sequences."""
        entry = self.held_entry(batch)
        if sum(b.record_count for b in new_batches) != batch.record_count or not new_batches:
            raise IllegalStateError(
                f"{self.topic}-{self.partition}: a split must keep the {batch.record_count} "
                f"records of sequence {batch.base_sequence}, got "
                f"{[b.record_count for b in new_batches]}")
        seq = batch.base_sequence
        entries = []
        for new in new_batches:
            new.stamp(batch.producer_id, batch.producer_epoch, seq)
            seq = increment_sequence(seq, new.record_count)
            entries.append(InFlightEntry(new, retried=True, generation=entry.generation))
        self.replace(entry, entries)
        return len(entries)

    # ---- outcomes of one batch (docs/idempotence.md steps 6, 8, 9; F2, F3) -----------------

    def number(self, batch: SequencedBatch, producer_id: int, producer_epoch: int) -> None:
        """Step 4: a new batch takes the next sequence under the current id and epoch and is
        in flight (sequences are handed out in order, so it goes last)."""
        seq = self.next_sequence
        batch.stamp(producer_id, producer_epoch, seq)
        self.next_sequence = increment_sequence(seq, batch.record_count)
        self.add(InFlightEntry(batch, generation=self.generation))

    def acknowledged(self, batch: SequencedBatch, *, base_offset: int, duplicate: bool,
                     now: float) -> Doomed:
        """Step 9 (and DUPLICATE_SEQUENCE_NUMBER, offset -1): the records are written. Also
        for a batch that already expired: its success resolves it (step 1a). Returns the
        held batches it overtook (F2), taken out of flight: they must fail."""
        self.off_wire(batch)  # answered (a batch that expired on the wire included)
        in_flight = self.in_flight
        earlier: list[InFlightEntry] = []
        entry: InFlightEntry | None
        if in_flight and in_flight[0].batch is batch:
            entry = in_flight.pop(0)  # the usual answer: for the oldest batch held
        else:
            entry = self.entry_for(batch)
            if entry is not None:
                earlier = in_flight[:in_flight.index(entry)]
                self.remove(entry)
        doomed: Doomed = []
        if batch.base_sequence >= 0 and self.speaks_of_current_numbering(entry, batch):
            self.leader_holds_state = True  # it checks our sequences from now on (B4)
            self.last_acked_at = now
            if entry is not None and not self.is_next_sequence(batch.base_sequence):
                # out of order answers (e.g. across a leader change): the leader had no
                # state for us and took a gap
                written = batch.base_sequence
                doomed = self._give_up(self.overtaken(earlier), lambda e: (
                    f"{e.batch.record_count} record(s) (sequence {e.base_sequence}) not "
                    f"written: the broker wrote later records of this partition (sequence "
                    f"{written}) first, so writing these now would put them out of order"))
            self.acknowledge(batch.base_sequence, batch.record_count,
                             -1 if duplicate else base_offset)
        return doomed

    def may_be_duplicate(self, batch: SequencedBatch) -> bool:
        """DUPLICATE_SEQUENCE_NUMBER for ``batch``: are these records really written?

        The broker says it already holds these sequences. That is this batch only if an
        earlier attempt under its current numbering may have been written (an ambiguous
        answer: a lost response, a timeout). A batch never sent ambiguously since it was
        numbered cannot be a duplicate of itself: its sequences collide with something else
        the broker holds, such as a batch from before a reset, under the same id and epoch,
        that expired on the wire and was written late by a broker that handed the same pair
        out again (Tansu after a restart). Calling that a success would report records written
        that are not; the sender handles it as OUT_OF_ORDER_SEQUENCE_NUMBER instead, which
        resets the numbering once no earlier batch is held. An untracked batch (it expired)
        only resolves, as a success does.
        """
        entry = self.entry_for(batch)
        return entry is None or entry.possibly_written

    def failed(self, batch: SequencedBatch, code: ErrorCode,
               decision: RetryDecision) -> Outcome:
        """Step 8: an error answer for ``batch`` (the connection's end arrives as
        NETWORK_EXCEPTION or REQUEST_TIMED_OUT), ``decision`` being ``retry_policy``'s view
        (neither FATAL: the manager handles those). COMPLETE is left to ``acknowledged``."""
        entry = self.entry_for(batch)
        if entry is None:
            return Outcome(replace(decision, action=Action.FAIL, retriable=False,
                                   reason="batch no longer tracked (expired or completed)"))
        if not entry.on_wire:
            raise IllegalStateError(f"{self.topic}-{self.partition}: an answer for sequence "
                                    f"{batch.base_sequence}, which is not on the wire")
        self.off_wire(batch)
        if code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID):
            # refused by a leader that checks (or lost) our sequences: had an earlier attempt
            # been written, this one would be answered as its duplicate (the broker keeps the
            # last batches, and no more than those are ever held here), so none was
            entry.possibly_written = False
        else:
            entry.possibly_written = entry.possibly_written or decision.possibly_written
        if decision.action is Action.COMPLETE:
            return Outcome(decision)
        if decision.action is Action.SPLIT:
            entry.retried = True  # held until split() replaces it
            return Outcome(decision)
        if decision.action is Action.RETRY:
            reset = self.needs_reset_before_retry(entry, code)
            entry.retried = True
            return Outcome(replace(decision, reset_sequences=reset),
                           reset=f"{code.name} for sequence {batch.base_sequence} (step 8b)"
                           if reset else None)
        # FAIL: the batch is done with
        self.remove(entry)
        if decision.retriable and entry.possibly_written:
            self._unresolve(entry)  # out of time after an ambiguous attempt: step 6
            return Outcome(decision, unresolved=True)
        why = "out of time" if decision.retriable else "not retriable (step 8a)"
        return Outcome(replace(decision, reset_sequences=True),
                       reset=f"{code.name} failed sequence {batch.base_sequence}, {why}")

    def forget(self, batch: SequencedBatch) -> None:
        """The batch fails with the producer (a fatal error): it is held no longer."""
        entry = self.entry_for(batch)
        if entry is not None:
            self.remove(entry)

    def not_sent(self, batch: SequencedBatch) -> None:
        """A batch got its sequence but never left the client (no connection after all): it
        is held again, first in sequence order, like a retry."""
        entry = self.entry_for(batch)
        if entry is None:
            raise IllegalStateError(f"{self.topic}-{self.partition}: on_not_sent for an "
                                    f"untracked batch")
        self.off_wire(batch)
        entry.retried = True

    def expired(self, batch: SequencedBatch, possibly_written: bool) -> Outcome:
        """A batch outlived delivery.timeout.ms (step 6). Never drained: nothing to do.
        Drained: it leaves in_flight; if it may have been written (on the wire, an ambiguous
        answer, or the sender says so) it becomes unresolved and blocks new batches until
        resolved; if it certainly was not written, later sequences have a gap: bump & reset
        (Java: a failed batch with adjusted sequences, which an idempotent producer does by
        bumping)."""
        entry = self.entry_for(batch)
        if entry is None:
            return NOTHING
        # one on the wire stays there (in ``wire``) until its request's answer
        written = entry.on_wire or entry.possibly_written or possibly_written
        self.remove(entry)
        if written:
            self._unresolve(entry)
            return Outcome(unresolved=True)
        return Outcome(reset=f"sequence {batch.base_sequence} expired unsent")

    def settle_unresolved(self) -> tuple[int, bool]:
        """Step 1: drop unresolved batches a later success proved written (1a); if some remain
        and nothing of the partition is in flight, they were not written (1b): they are
        cleared and the partition needs a bump & reset. Returns (how many resolved, whether
        the reset is needed)."""
        resolved = self.drop_resolved()
        if not self.unresolved or self.on_wire_count or self.in_flight:
            return resolved, False  # a later batch may still prove them written, or show the gap
        self.unresolved.clear()
        return resolved, True

    def unrenumberable_failed(self, stale: bool) -> Doomed:
        """F3 before a renumbering (step 3): the held batches that must fail instead of being
        renumbered (``unrenumberable``), taken out of flight, with why."""
        return self._give_up(self.unrenumberable(stale), lambda e: (
            f"{e.batch.record_count} record(s) (sequence {e.base_sequence}) failed: "
            + ("an earlier attempt may have written them, and the producer had to restart "
               "its sequences, so sending them again could write them twice"
               if e.possibly_written else
               "a later batch of this partition may already be written, and these would "
               "follow it out of order")))

    def forget_broker_state(self) -> None:
        """The broker lost what it knew of our producer id (it handed out the same id and
        epoch again): renumber every held batch from 0 as soon as none is on the wire. What
        it may have written under the old pair is lost with its state, so no held batch is
        "possibly written" any more."""
        self.reset_requested = True
        self.leader_holds_state = False
        for entry in self.in_flight:
            entry.possibly_written = False

    def _unresolve(self, entry: InFlightEntry) -> None:
        batch = entry.batch
        self.unresolved.append(UnresolvedRange(
            batch.base_sequence, last_sequence(batch.base_sequence, batch.record_count),
            batch.producer_id, batch.producer_epoch, entry.generation))

    def _give_up(self, entries: list[InFlightEntry],
                 why: Callable[[InFlightEntry], str]) -> Doomed:
        doomed: Doomed = []
        for entry in entries:
            self.remove(entry)
            doomed.append((entry, OutOfOrderSequenceNumberError(
                f"{self.topic}-{self.partition}: {why(entry)}")))
        return doomed


class Partitions(Generic[B]):
    """The producer's partitions by topic, then partition number.

    ``by_topic`` is read directly on the append path (two dict lookups per record, as
    before). ``created`` counts new partitions, so a cache built over them (the accumulator's
    partitions-by-leader) knows when it is stale, whoever created one.
    """

    __slots__ = ("by_topic", "created", "open_transaction")

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[int, PartitionProducer[B]]] = {}
        self.created = 0
        # the number of the open transaction (``PartitionsInTransaction`` counts it on when
        # one ends); a partition's ``txn_stage`` speaks of it when its ``txn_number`` matches
        self.open_transaction = 1

    def get(self, topic: str, partition: int) -> PartitionProducer[B]:
        """The partition's object, created on first use."""
        parts = self.by_topic.get(topic)
        if parts is None:
            parts = self.by_topic[topic] = {}
        p = parts.get(partition)
        if p is None:
            p = parts[partition] = PartitionProducer(topic, partition)
            self.created += 1
        return p

    def find(self, topic: str, partition: int) -> PartitionProducer[B] | None:
        parts = self.by_topic.get(topic)
        return parts.get(partition) if parts is not None else None

    def drop(self, topic: str, partition: int) -> None:
        """Forget an idle partition (its topic left the metadata). One that the open
        transaction holds (adding or added) is kept: the coordinator counts it until EndTxn,
        and the transaction reads its members from this table."""
        parts = self.by_topic.get(topic)
        p = parts.get(partition) if parts is not None else None
        if parts is None or p is None:
            return
        if p.joined(self.open_transaction):
            return
        del parts[partition]
        if not parts:
            del self.by_topic[topic]
        self.created += 1  # a cache over them is stale too

    def __iter__(self) -> Iterator[PartitionProducer[B]]:
        for parts in self.by_topic.values():
            yield from parts.values()

    def __len__(self) -> int:
        return sum(len(parts) for parts in self.by_topic.values())
