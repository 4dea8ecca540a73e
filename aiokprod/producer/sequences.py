"""Per-partition sequence state of the idempotent producer, and int32 sequence arithmetic.

The broker de-duplicates an idempotent producer's writes per (producer id, partition) by
sequence number: a batch carries the sequence of its first record and the broker expects it to
be exactly one past the last record it wrote (docs/idempotence.md B4). Sequences count
*records*, not batches (docs/idempotence.md), and live in the signed int32 header
field, so after 2**31-1 they wrap to 0 (Java's DefaultRecordBatch.incrementSequence).

This module holds the wrap-aware helpers, the records a partition keeps of its numbered
batches (:class:`InFlightEntry`, :class:`UnresolvedRange`).
The partition that holds them is ``partition.PartitionProducer``; the decisions -- when to
send, bump, reset, retry -- are in ``idempotence.py``. No I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "DEFAULT_IN_FLIGHT_LIMIT",
    "LEADER_STATE_IDLE_S",
    "MAX_PRODUCER_EPOCH",
    "MAX_SEQUENCE",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "InFlightEntry",
    "SequencedBatch",
    "TopicPartitionLike",
    "UnresolvedRange",
    "increment_sequence",
    "last_sequence",
    "sequence_distance",
    "sequence_precedes",
]

#: Largest sequence number; the next one is 0 (the header field is a signed int32).
MAX_SEQUENCE = 2**31 - 1
_SEQUENCE_SPACE = 2**31
_HALF_SEQUENCE_SPACE = _SEQUENCE_SPACE // 2
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


def _out_of_range(seq: int) -> ValueError:
    return ValueError(f"sequence must be within 0..{MAX_SEQUENCE}, got {seq}")


# The range checks are inline, and none of these calls another: they run several times per
# batch.
def increment_sequence(seq: int, n: int) -> int:
    """``seq + n`` in sequence space: past 2**31-1 it continues at 0, as the broker expects."""
    if not 0 <= seq <= MAX_SEQUENCE:
        raise _out_of_range(seq)
    if n < 0:
        raise ValueError(f"a sequence only moves forward, got increment {n}")
    return (seq + n) % _SEQUENCE_SPACE


def last_sequence(base_sequence: int, record_count: int) -> int:
    """Sequence of the last record of a batch (wrap-aware); the broker acknowledges this one."""
    if record_count < 1:
        raise ValueError(f"a batch holds at least one record, got {record_count}")
    if not 0 <= base_sequence <= MAX_SEQUENCE:
        raise _out_of_range(base_sequence)
    return (base_sequence + record_count - 1) % _SEQUENCE_SPACE


def sequence_distance(start: int, end: int) -> int:
    """How many increments lead from ``start`` to ``end``, going forward through the wrap."""
    if not 0 <= start <= MAX_SEQUENCE:
        raise _out_of_range(start)
    if not 0 <= end <= MAX_SEQUENCE:
        raise _out_of_range(end)
    return (end - start) % _SEQUENCE_SPACE


def sequence_precedes(a: int, b: int) -> bool:
    """``a`` comes strictly before ``b``.

    Wrap-aware: the sequences a producer has in play for one partition span at most
    in-flight-limit batches, far less than half the space, so "less than half the space ahead"
    is an unambiguous "later" even across the 2**31-1 → 0 wrap.
    """
    if not 0 <= a <= MAX_SEQUENCE:
        raise _out_of_range(a)
    if not 0 <= b <= MAX_SEQUENCE:
        raise _out_of_range(b)
    return 0 < (b - a) % _SEQUENCE_SPACE < _HALF_SEQUENCE_SPACE


@runtime_checkable
class TopicPartitionLike(Protocol):
    """Anything naming a partition: ``network.metadata.TopicPartition`` or a batch."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


@runtime_checkable
class SequencedBatch(TopicPartitionLike, Protocol):
    """What idempotence needs from the sender's batch objects (``producer.batch.ProducerBatch``).

    ``base_sequence`` is -1 until the first drain assigns one and is kept across retries unless
    a reset rewrites it; ``attempts`` is 0 before the first send. ``stamp`` rewrites the sealed
    header, so a restamped batch goes out with its new producer id, epoch and sequence.
    """

    base_sequence: int
    producer_id: int
    producer_epoch: int
    attempts: int

    @property
    def on_wire(self) -> bool:
        """In a request not answered yet (read from its partition's ``wire``)."""
        ...

    @property
    def record_count(self) -> int: ...

    def stamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None: ...


@dataclass(eq=False)
class InFlightEntry:
    """A batch holding a sequence that the broker has not answered conclusively."""

    # The sender's batch; identity is what links responses back to this entry.
    batch: SequencedBatch
    # Queued for a retry at least once: while a partition has such a batch it sends one batch
    # at a time, in sequence order (docs/idempotence.md step 2c).
    retried: bool = False
    # Some attempt ended without a definite answer (timeout, lost connection), so the broker may
    # hold its records: if it expires it becomes unresolved rather than simply failed (step 6).
    possibly_written: bool = False
    # The producer-id generation (see PartitionProducer.generation) its sequence belongs
    # to. An InitProducerId answer can repeat the very same id and epoch (a broker that lost
    # its state hands them out again), so the header alone cannot say whether an answer speaks
    # of the partition's current numbering; this can.
    generation: int = 0

    @property
    def on_wire(self) -> bool:
        """Sent and not answered: the batch's own flag. False while queued for a retry: only
        then may a reset restamp it, because bytes already on the wire cannot change
        (docs/idempotence.md step 3)."""
        return self.batch.on_wire

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


