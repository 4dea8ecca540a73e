"""The state one partition's producer holds: :class:`PartitionState`.

``partition.PartitionProducer`` extends it with the partition's rules and outcomes; this
module is its data and the bookkeeping that keeps that data consistent (the in-flight list
and its incrementally kept counts, acknowledgements, renumbering), split off so that each
module keeps one job and stays short. Nothing here decides what a partition may do.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiokprod.errors import IllegalStateError
from aiokprod.producer.sequences import (
    DEFAULT_IN_FLIGHT_LIMIT,
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

if TYPE_CHECKING:
    from aiokprod.producer.batch import ProducerBatch

__all__ = ["TXN_ADDED", "TXN_ADDING", "TXN_NONE", "TXN_PENDING", "PartitionState"]

# How far a partition got into the open transaction (``PartitionState.txn_stage``)
TXN_NONE = 0  # not part of it
TXN_PENDING = 1  # a drain found a batch of it: to be asked for with AddPartitionsToTxn
TXN_ADDING = 2  # in the AddPartitionsToTxn on the wire
TXN_ADDED = 3  # accepted by the coordinator (or added implicitly, KIP-890): its batches may go

@dataclass(eq=False, slots=True)
class PartitionState:
    """Everything the producer holds for one partition: its queue of batches, the requests
    carrying its batches, and the idempotent producer's sequences, window and unresolved
    batches (docs/idempotence.md, "Where a partition's state lives").

    One object, shared by the accumulator (which appends to and drains ``batches``), the
    sender (which counts ``wire_requests``) and the idempotence manager (everything below
    them), so that these facts cannot disagree. Created on first use with
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
    batches: deque[ProducerBatch] = field(default_factory=deque)
    # The drain cursor into ``batches`` (franz-go's batchDrainIdx): the next batch to drain is
    # the first at or after it that is waiting (``ProducerBatch.queued``).
    drain_index: int = 0
    # Batches of this partition in requests not answered yet (the connection's end counts as
    # an answer), a batch failed by delivery.timeout.ms meanwhile included: its request can
    # still land. With max.in.flight.requests.per.connection=1 the partition is muted while
    # this is above 0 (docs/batching.md D5): derived, not kept as a flag of its own.
    wire_requests: int = 0
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
    # How many in_flight entries are on the wire: a reset may only happen at 0 (step 3) and,
    # while retrying, a partition sends only at 0 (step 2c). Kept incrementally.
    on_wire_count: int = 0
    # How many in_flight entries were queued for a retry; > 0 means "retrying" (step 2c).
    retrying_count: int = 0
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
    # Batches failed by delivery.timeout.ms while their request was still unanswered: the
    # request can still land, so they count as on the wire (a fresh producer id waits for
    # none to be) until its answer, or the connection's end, comes.
    expired_on_wire: set[SequencedBatch] = field(default_factory=set)
    # The transaction this partition is part of (KIP-98): the number of the transaction
    # (``transactions.PartitionsInTransaction.number``) that ``txn_stage`` speaks of, and how
    # far the partition got in it (TXN_*). A stage of another transaction means "not part of
    # the open one", so ending a transaction takes every partition out at once by counting on.
    txn_number: int = 0
    txn_stage: int = TXN_NONE

    # ---- queries -------------------------------------------------------------------------

    @property
    def retrying(self) -> bool:
        """While a partition retries, it has one batch in flight at a time (idempotence.md 2c)."""
        return self.retrying_count > 0

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

    def head(self) -> ProducerBatch | None:
        """The next batch to drain, or None. The cursor moves past batches still awaiting an
        answer (after a rewind, later batches may still be on the wire)."""
        batches = self.batches
        i = self.drain_index
        n = len(batches)
        while i < n and not batches[i].queued:
            i += 1
        self.drain_index = i
        return batches[i] if i < n else None

    def waiting(self) -> list[ProducerBatch]:
        """The batches waiting to be drained, in drain order."""
        batches = self.batches
        return [batches[i] for i in range(self.drain_index, len(batches)) if batches[i].queued]

    def take_waiting(self) -> list[ProducerBatch]:
        """Take every waiting batch out (an abort), in one pass; drained ones stay."""
        waiting = self.waiting()
        if waiting:
            self.batches = deque(b for b in self.batches if not b.queued)
            self.drain_index = len(self.batches)
        return waiting

    def put_back(self, batch: ProducerBatch) -> None:
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

    def discard(self, batch: ProducerBatch) -> bool:
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

    def replace_batch(self, old: ProducerBatch, new: list[ProducerBatch]) -> None:
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
        if entry.on_wire:
            self.on_wire_count += 1
        if entry.retried:
            self.retrying_count += 1

    def replace(self, old: InFlightEntry, new: list[InFlightEntry]) -> None:
        """Put ``new`` where ``old`` was (a split keeps the old batch's place in the order)."""
        index = self.in_flight.index(old)
        self.remove(old)
        self.in_flight[index:index] = new
        for entry in new:
            self.on_wire_count += entry.on_wire
            self.retrying_count += entry.retried

    def remove(self, entry: InFlightEntry) -> None:
        self.in_flight.remove(entry)
        if entry.on_wire:
            self.on_wire_count -= 1
        if entry.retried:
            self.retrying_count -= 1

    def mark_on_wire(self, entry: InFlightEntry, on_wire: bool) -> None:
        if entry.on_wire != on_wire:
            entry.on_wire = on_wire
            self.on_wire_count += 1 if on_wire else -1

    def mark_retried(self, entry: InFlightEntry) -> None:
        if not entry.retried:
            entry.retried = True
            self.retrying_count += 1

    def acknowledge(self, base_sequence: int, record_count: int, base_offset: int) -> None:
        """Advance what the broker confirmed; an older confirmation never moves it back."""
        last = last_sequence(base_sequence, record_count)
        if self.last_acked_sequence < 0 or sequence_precedes(self.last_acked_sequence, last):
            self.last_acked_sequence = last
        if base_offset >= 0:
            self.last_acked_offset = max(self.last_acked_offset, base_offset + record_count - 1)

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
                f"queued={len(self.batches)} wire_requests={self.wire_requests} "
                f"pid={self.producer_id} epoch={self.producer_epoch} gen={self.generation} "
                f"next={self.next_sequence} acked={self.last_acked_sequence} "
                f"in_flight={len(self.in_flight)}/{self.in_flight_limit} "
                f"on_wire={self.on_wire_count} unresolved={len(self.unresolved)} "
                f"retrying={self.retrying} reset_requested={self.reset_requested} "
                f"leader_holds_state={self.leader_holds_state}>")

