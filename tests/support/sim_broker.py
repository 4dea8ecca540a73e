"""A simulated Kafka leader for stateful tests of the idempotent producer.

``SimPartition``: one partition's log applying Kafka's four producer-state checks
(docs/idempotence.md B1-B4) with ``window`` batches retained (5 unless a test announces a
KIP-1269 window). By default it answers like Tansu (a first sequence must be 0; a batch it
remembers is answered DUPLICATE_SEQUENCE_NUMBER); ``lenient`` and ``remembered=E.NONE`` give
Apache Kafka's answers instead. ``SimBroker``: producer ids from a counter, KIP-360 bumps
refused (as Tansu does), and a restart that forgets every producer, every record and the
counter, so the next InitProducerId hands out the same id and epoch again.

The sender's state machine (test_sender_machine.py), the idempotence manager's against a
broker that restarts (test_idempotence_machine.py) and its fault interleavings
(test_idempotence.py) all use this one model, so a fix to it reaches every one of them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from aiokprod._error_codes import ErrorCode
from aiokprod.producer.sequences import (
    increment_sequence,
    last_sequence,
    sequence_precedes,
)

__all__ = ["PARTITIONS", "SimBroker", "SimPartition"]

E = ErrorCode
PARTITIONS = (0, 1)


@dataclass
class _ProducerEntry:
    epoch: int
    last_seq: int = -1
    retained: deque[tuple[int, int, int]] = field(default_factory=deque)  # (first, last, offset)


class SimPartition:
    """One partition's leader: Kafka's four producer-state checks, ``window`` batches retained.

    ``lenient``: Apache Kafka takes any first sequence from a producer id it holds no state
    for (its leniency for producers whose state expired); Tansu wants 0 (check 2).
    ``remembered``: the answer to a batch it still holds (check 1), with the batch's offset:
    Tansu says DUPLICATE_SEQUENCE_NUMBER, Apache Kafka answers NONE.
    """

    def __init__(self, *, lenient: bool = False,
                 remembered: ErrorCode = E.DUPLICATE_SEQUENCE_NUMBER) -> None:
        self.window = 5  # ProducerStateBatchesToRetain
        self.lenient = lenient
        self.remembered = remembered
        self.producers: dict[int, _ProducerEntry] = {}
        self.log: list[int] = []

    def append(self, pid: int, epoch: int, base: int, records: list[int], *,
               handed_out: bool = True) -> tuple[int, int]:
        """(error code, base offset) for a batch of ``records`` stamped (pid, epoch, base).

        ``handed_out``: whether the broker gave out this producer id (SimBroker knows).
        """
        if not handed_out:
            # Tansu refuses any write under an id it has not handed out (even at sequence 0);
            # a broker that accepted it and then handed the id out as new could not be
            # de-duplicated by any client
            return E.UNKNOWN_PRODUCER_ID, -1
        last = last_sequence(base, len(records))
        entry = self.producers.get(pid)
        if entry is not None and entry.epoch == epoch:  # check 1: a batch it remembers
            for first, end, offset in entry.retained:
                if (first, end) == (base, last):
                    return self.remembered, offset
        if entry is None:  # check 2
            if base != 0 and not self.lenient:
                return E.UNKNOWN_PRODUCER_ID, -1
            entry = self.producers[pid] = _ProducerEntry(epoch)
        elif epoch > entry.epoch:  # check 3
            if base != 0:
                return E.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
            entry.epoch, entry.last_seq = epoch, -1
            entry.retained.clear()
        elif epoch < entry.epoch:
            return E.INVALID_PRODUCER_EPOCH, -1
        else:  # check 4
            expected = 0 if entry.last_seq < 0 else increment_sequence(entry.last_seq, 1)
            if base != expected:
                if entry.last_seq >= 0 and sequence_precedes(base, expected):
                    return E.DUPLICATE_SEQUENCE_NUMBER, -1
                return E.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        offset = len(self.log)
        self.log.extend(records)
        entry.last_seq = last
        entry.retained.append((base, last, offset))
        while len(entry.retained) > self.window:
            entry.retained.popleft()
        return E.NONE, offset


class SimBroker:
    """Producer ids from a counter; bumps refused (Tansu); a restart forgets everything."""

    def __init__(self) -> None:
        self.partitions = {p: SimPartition() for p in PARTITIONS}
        self.next_pid = 1
        self.handed_out: set[int] = set()
        self.life = 0  # restarts so far

    def init_producer_id(self, pid: int, epoch: int) -> tuple[int, int, int]:
        if pid >= 0:
            return E.UNKNOWN_SERVER_ERROR, -1, -1  # Tansu: no KIP-360 bump
        pid = self.next_pid
        self.next_pid += 1
        self.handed_out.add(pid)
        return E.NONE, pid, 0

    def restart(self) -> None:
        self.partitions = {p: SimPartition() for p in PARTITIONS}
        self.next_pid = 1
        self.handed_out.clear()
        self.life += 1
