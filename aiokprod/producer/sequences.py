"""Per-partition sequence state of the idempotent producer, and int32 sequence arithmetic.

The broker de-duplicates an idempotent producer's writes per (producer id, partition) by
sequence number: a batch carries the sequence of its first record and the broker expects it to
be exactly one past the last record it wrote (docs/idempotence.md B4). Sequences count
*records*, not batches (docs/idempotence.md), and live in the signed int32 header
field, so after 2**31-1 they wrap to 0 (Java's DefaultRecordBatch.incrementSequence).

This module holds only bookkeeping: :class:`PartitionSequenceState` (one per partition, every
field says why it exists), the wrap-aware helpers, and :func:`insert_in_sequence_order` for the
accumulator. The decisions -- when to send, bump, reset, retry -- are in ``idempotence.py``.
No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableSequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

from aiokprod.errors import IllegalStateError

__all__ = [
    "DEFAULT_IN_FLIGHT_LIMIT",
    "LEADER_STATE_IDLE_S",
    "MAX_PRODUCER_EPOCH",
    "MAX_SEQUENCE",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "InFlightEntry",
    "PartitionSequenceState",
    "SequencedBatch",
    "TopicPartitionLike",
    "UnresolvedRange",
    "increment_sequence",
    "insert_in_sequence_order",
    "last_sequence",
    "sequence_distance",
    "sequence_precedes",
]

#: Largest sequence number; the next one is 0 (the header field is a signed int32).
MAX_SEQUENCE = 2**31 - 1
_SEQUENCE_SPACE = 2**31
#: Largest producer epoch (int16). Bumping past it needs a new producer id.
MAX_PRODUCER_EPOCH = 2**15 - 1
#: Header values of a batch that has not been stamped by idempotence yet.
NO_SEQUENCE = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Batches per partition the broker always remembers for de-duplication; the in-flight limit
#: until a ProduceResponse says otherwise and again after a leader change (KIP-1269).
DEFAULT_IN_FLIGHT_LIMIT = 5
#: Seconds a partition may hold nothing before its next batches go one at a time again (F1):
#: a leader forgets a producer whose batches retention removed, or that stayed idle past
#: producer.id.expiration.ms, and then takes any first sequence. One round trip after an idle
#: second costs nothing worth counting; writing records out of order would.
LEADER_STATE_IDLE_S = 1.0


def _check_sequence(seq: int) -> None:
    if not 0 <= seq <= MAX_SEQUENCE:
        raise ValueError(f"sequence must be within 0..{MAX_SEQUENCE}, got {seq}")


def increment_sequence(seq: int, n: int) -> int:
    """``seq + n`` in sequence space: past 2**31-1 it continues at 0, as the broker expects."""
    _check_sequence(seq)
    if n < 0:
        raise ValueError(f"a sequence only moves forward, got increment {n}")
    return (seq + n) % _SEQUENCE_SPACE


def last_sequence(base_sequence: int, record_count: int) -> int:
    """Sequence of the last record of a batch (wrap-aware); the broker acknowledges this one."""
    if record_count < 1:
        raise ValueError(f"a batch holds at least one record, got {record_count}")
    return increment_sequence(base_sequence, record_count - 1)


def sequence_distance(start: int, end: int) -> int:
    """How many increments lead from ``start`` to ``end``, going forward through the wrap."""
    _check_sequence(start)
    _check_sequence(end)
    return (end - start) % _SEQUENCE_SPACE


def sequence_precedes(a: int, b: int) -> bool:
    """``a`` comes strictly before ``b``.

    Wrap-aware: the sequences a producer has in play for one partition span at most
    in-flight-limit batches, far less than half the space, so "less than half the space ahead"
    is an unambiguous "later" even across the 2**31-1 → 0 wrap.
    """
    d = sequence_distance(a, b)
    return 0 < d < _SEQUENCE_SPACE // 2


@runtime_checkable
class TopicPartitionLike(Protocol):
    """Anything naming a partition: ``network.metadata.TopicPartition`` or a batch."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


@runtime_checkable
class SequencedBatch(Protocol):
    """What idempotence needs from the sender's batch objects (``producer.batch.ProducerBatch``).

    ``base_sequence`` is -1 until the first drain assigns one and is kept across retries unless
    a reset rewrites it; ``attempts`` is 0 before the first send. ``stamp`` rewrites the sealed
    header, so a restamped batch goes out with its new producer id, epoch and sequence.
    """

    topic: str
    partition: int
    base_sequence: int
    producer_id: int
    producer_epoch: int
    attempts: int

    @property
    def record_count(self) -> int: ...

    def stamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None: ...


@dataclass(eq=False)
class InFlightEntry:
    """A batch holding a sequence that the broker has not answered conclusively."""

    # The sender's batch; identity is what links responses back to this entry.
    batch: SequencedBatch
    # Sent and not answered. False while queued for a retry: only then may a reset restamp it,
    # because bytes already on the wire cannot change (docs/idempotence.md step 3).
    on_wire: bool = True
    # Queued for a retry at least once: while a partition has such a batch it sends one batch
    # at a time, in sequence order (docs/idempotence.md step 2c).
    retried: bool = False
    # Some attempt ended without a definite answer (timeout, lost connection), so the broker may
    # hold its records: if it expires it becomes unresolved rather than simply failed (step 6).
    possibly_written: bool = False
    # The producer-id generation (see PartitionSequenceState.generation) its sequence belongs
    # to. An InitProducerId answer can repeat the very same id and epoch (a broker that lost
    # its state hands them out again), so the header alone cannot say whether an answer speaks
    # of the partition's current numbering; this can.
    generation: int = 0

    @property
    def base_sequence(self) -> int:
        return self.batch.base_sequence

    @property
    def last_sequence(self) -> int:
        return last_sequence(self.batch.base_sequence, self.batch.record_count)


@dataclass(frozen=True)
class UnresolvedRange:
    """Sequences of a batch that expired after it may have reached the broker (idempotence.md 6).

    Kept as numbers, not the batch: the batch's records have already failed with a timeout, we
    only need to know whether the broker turns out to have written these sequences.
    """

    # First and last record sequence of the expired batch.
    base_sequence: int
    last_sequence: int
    # The epoch they were written under: after a reset they no longer mean anything.
    producer_id: int
    producer_epoch: int
    # ... and the producer-id generation, which tells a reset apart even when the broker
    # handed out the same id and epoch again.
    generation: int = 0


@dataclass(eq=False)
class PartitionSequenceState:
    """Everything the idempotent producer tracks for one partition.

    Created on first use with ``producer_id = -1``, which makes it "stale" against any real
    producer id: the first drain resets it to sequence 0 under the current id and epoch.
    """

    # Which partition this is, for messages and statistics.
    topic: str
    partition: int
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
        return (f"<PartitionSequenceState {self.topic}-{self.partition} "
                f"pid={self.producer_id} epoch={self.producer_epoch} gen={self.generation} "
                f"next={self.next_sequence} acked={self.last_acked_sequence} "
                f"in_flight={len(self.in_flight)}/{self.in_flight_limit} "
                f"on_wire={self.on_wire_count} unresolved={len(self.unresolved)} "
                f"retrying={self.retrying} reset_requested={self.reset_requested} "
                f"leader_holds_state={self.leader_holds_state}>")


_B = TypeVar("_B", bound=SequencedBatch)


def insert_in_sequence_order(queue: MutableSequence[_B], batch: _B) -> int:
    """Put a retried batch back into a partition's queue before every later sequence
    (docs/idempotence.md, step 8b).

    The accumulator only ever sends the head of a partition's queue, so a retried batch must
    sit in front of batches with higher sequences and of batches not yet numbered (-1), and
    behind retried batches with lower sequences; otherwise the broker would see a gap.
    Returns the index it was inserted at.
    """
    if batch.base_sequence < 0:
        raise IllegalStateError(
            f"{batch.topic}-{batch.partition}: only a batch with a sequence is re-inserted in "
            f"sequence order, this one has none")
    index = 0
    for other in queue:
        if other.base_sequence < 0 or not sequence_precedes(other.base_sequence,
                                                            batch.base_sequence):
            break
        index += 1
    queue.insert(index, batch)
    return index
