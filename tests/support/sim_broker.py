"""A simulated Kafka leader for stateful tests of the idempotent producer.

One log per partition applying Kafka's four producer-state checks (docs/idempotence.md
B1-B4) with five batches retained, producer ids from a counter, KIP-360 bumps refused (as
Tansu does), and a restart that forgets every producer, every record and the counter, so the
next InitProducerId hands out the same id and epoch again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from aiokprod._error_codes import ErrorCode
from aiokprod.producer.sequences import increment_sequence, last_sequence, sequence_precedes

__all__ = ["PARTITIONS", "SimBroker", "SimPartition"]

E = ErrorCode
PARTITIONS = (0, 1)


@dataclass
class _ProducerEntry:
    epoch: int
    last_seq: int = -1
    retained: deque[tuple[int, int, int]] = field(default_factory=deque)  # (first, last, offset)


class SimPartition:
    """One partition's leader: Kafka's four producer-state checks, five batches retained."""

    def __init__(self) -> None:
        self.producers: dict[int, _ProducerEntry] = {}
        self.log: list[int] = []

    def append(self, pid: int, epoch: int, base: int, records: list[int], *,
               handed_out: bool) -> tuple[int, int]:
        if not handed_out:
            # Tansu refuses any write under an id it has not handed out (even at sequence 0);
            # a broker that accepted it and then handed the id out as new could not be
            # de-duplicated by any client
            return E.UNKNOWN_PRODUCER_ID, -1
        last = last_sequence(base, len(records))
        entry = self.producers.get(pid)
        if entry is not None and entry.epoch == epoch:  # a batch it remembers
            for first, end, offset in entry.retained:
                if (first, end) == (base, last):
                    return E.DUPLICATE_SEQUENCE_NUMBER, offset
        if entry is None:
            if base != 0:
                return E.UNKNOWN_PRODUCER_ID, -1
            entry = self.producers[pid] = _ProducerEntry(epoch)
        elif epoch > entry.epoch:
            if base != 0:
                return E.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
            entry.epoch, entry.last_seq = epoch, -1
            entry.retained.clear()
        elif epoch < entry.epoch:
            return E.INVALID_PRODUCER_EPOCH, -1
        else:
            expected = 0 if entry.last_seq < 0 else increment_sequence(entry.last_seq, 1)
            if base != expected:
                if entry.last_seq >= 0 and sequence_precedes(base, expected):
                    return E.DUPLICATE_SEQUENCE_NUMBER, -1
                return E.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        offset = len(self.log)
        self.log.extend(records)
        entry.last_seq = last
        entry.retained.append((base, last, offset))
        while len(entry.retained) > 5:
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
