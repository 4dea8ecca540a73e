"""Sequence arithmetic, per-partition bookkeeping and re-insertion in sequence order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokprod.errors import IllegalStateError
from aiokprod.producer.partition import PartitionProducer
from aiokprod.producer.sequences import (
    MAX_SEQUENCE,
    InFlightEntry,
    SequencedBatch,
    UnresolvedRange,
    increment_sequence,
    last_sequence,
    sequence_distance,
    sequence_precedes,
)
from support.batch_double import Batch


def test_batch_double_satisfies_the_protocol() -> None:
    assert isinstance(Batch(), SequencedBatch)


# ---- arithmetic ---------------------------------------------------------------------------

@pytest.mark.parametrize(("seq", "n", "expected"), [
    (0, 0, 0),
    (0, 5, 5),
    (MAX_SEQUENCE - 1, 1, MAX_SEQUENCE),
    (MAX_SEQUENCE, 1, 0),  # after 2**31-1 the next sequence is 0
    (MAX_SEQUENCE - 1, 3, 1),
    (MAX_SEQUENCE, 10, 9),
])
def test_increment_sequence_wraps_at_int32_max(seq: int, n: int, expected: int) -> None:
    assert increment_sequence(seq, n) == expected


@pytest.mark.parametrize(("seq", "n"), [(-1, 1), (MAX_SEQUENCE + 1, 0), (0, -1)])
def test_increment_sequence_rejects_impossible_values(seq: int, n: int) -> None:
    with pytest.raises(ValueError):
        increment_sequence(seq, n)


def test_last_sequence_counts_records_and_wraps() -> None:
    assert last_sequence(10, 1) == 10
    assert last_sequence(10, 5) == 14
    assert last_sequence(MAX_SEQUENCE, 2) == 0
    with pytest.raises(ValueError):
        last_sequence(0, 0)


def test_precedes_is_wrap_aware() -> None:
    assert sequence_precedes(1, 2)
    assert not sequence_precedes(2, 1)
    assert not sequence_precedes(7, 7)
    assert sequence_precedes(MAX_SEQUENCE, 0)
    assert sequence_precedes(MAX_SEQUENCE - 5, 3)
    assert not sequence_precedes(3, MAX_SEQUENCE - 5)
    assert sequence_distance(MAX_SEQUENCE, 0) == 1


@given(st.integers(0, MAX_SEQUENCE), st.integers(1, 2**20))
def test_increment_then_precedes(seq: int, n: int) -> None:
    later = increment_sequence(seq, n)
    assert sequence_precedes(seq, later)
    assert not sequence_precedes(later, seq)
    assert sequence_distance(seq, later) == n


# ---- PartitionProducer ---------------------------------------------------------------

def entry(p: PartitionProducer, seq: int, count: int = 1, *, on_wire: bool = True
          ) -> InFlightEntry:
    """A held batch of ``p``, on the wire unless said otherwise."""
    batch = Batch(base_sequence=seq, record_count=count, owner=p)
    if on_wire:
        p.wire.append(batch)
    return InFlightEntry(batch)


def test_add_refuses_overlapping_sequences() -> None:
    p = PartitionProducer("t", 0)
    p.add(entry(p, 0, 3))
    with pytest.raises(IllegalStateError):
        p.add(entry(p, 2, 1))
    p.add(entry(p, 3, 1))
    assert p.on_wire_count == 2


def test_counts_are_read_from_the_wire_and_the_held_entries() -> None:
    p = PartitionProducer("t", 0)
    a, b = entry(p, 0), entry(p, 1)
    p.add(a)
    p.add(b)
    assert (len(p.wire), p.on_wire_count, a.on_wire, p.retrying) == (2, 2, True, False)
    p.off_wire(a.batch)
    p.off_wire(a.batch)  # a second answer (the connection's end after it) changes nothing
    a.retried = True
    assert (len(p.wire), p.on_wire_count, a.on_wire, p.retrying) == (1, 1, False, True)
    p.remove(a)
    assert (len(p.wire), p.on_wire_count, p.retrying) == (1, 1, False)
    p.remove(b)  # held no more, but its request can still land: it stays on the wire
    assert (len(p.wire), p.on_wire_count, b.on_wire) == (1, 0, True)


def test_restart_renumbers_held_batches_in_order() -> None:
    p = PartitionProducer("t", 0, producer_id=7, producer_epoch=0, next_sequence=20,
                               last_acked_sequence=9)
    held = [entry(p, 10, 4, on_wire=False), entry(p, 14, 2, on_wire=False)]
    for e in held:
        p.add(e)
    p.unresolved.append(UnresolvedRange(8, 9, 7, 0))
    p.restart_sequences(7, 1)
    assert [(e.batch.producer_epoch, e.base_sequence) for e in held] == [(1, 0), (1, 4)]
    assert (p.next_sequence, p.last_acked_sequence, p.unresolved) == (6, -1, [])
    assert not p.is_stale(7, 1)
    assert p.sequence_resets == 1


def test_restart_is_refused_while_something_is_on_the_wire() -> None:
    p = PartitionProducer("t", 0)
    p.add(entry(p, 0))
    with pytest.raises(IllegalStateError):
        p.restart_sequences(1, 0)


def test_acknowledge_never_moves_back() -> None:
    p = PartitionProducer("t", 0)
    p.acknowledge(5, 5, 100)
    p.acknowledge(0, 5, 95)
    assert (p.last_acked_sequence, p.last_acked_offset) == (9, 104)
    p.acknowledge(10, 1, -1)  # DUPLICATE: no offset
    assert (p.last_acked_sequence, p.last_acked_offset) == (10, 104)


def test_drop_resolved_only_drops_ranges_acknowledged_past() -> None:
    p = PartitionProducer("t", 0, producer_id=1, producer_epoch=0)
    p.unresolved = [UnresolvedRange(0, 2, 1, 0), UnresolvedRange(3, 4, 1, 0)]
    p.acknowledge(0, 3, 0)  # the first range itself was acknowledged late
    assert p.drop_resolved() == 1
    assert p.unresolved == [UnresolvedRange(3, 4, 1, 0)]
    assert p.follows_unresolved(5) and not p.follows_unresolved(4)


def test_is_next_sequence_across_the_wrap() -> None:
    p = PartitionProducer("t", 0)
    assert p.is_next_sequence(0)
    p.acknowledge(MAX_SEQUENCE - 1, 2, -1)
    assert p.last_acked_sequence == MAX_SEQUENCE
    assert p.is_next_sequence(0)
    assert not p.is_next_sequence(1)


def test_repr_names_the_partition_and_counts() -> None:
    p = PartitionProducer("orders", 3)
    p.add(entry(p, 0))
    text = repr(p)
    assert "orders-3" in text and "in_flight=1/5" in text
