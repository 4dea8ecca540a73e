"""One stand-in for ``ProducerBatch`` in the tests of the idempotence and sequence logic.

The manager and the sequence helpers need only what ``producer.sequences.SequencedBatch``
names (topic, partition, record count, the stamped header, attempts); a real batch would drag
in the accumulator and a record builder. ``records`` gives each record a number unique in the
test run, so a simulated broker's log can be checked for duplicates and order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

__all__ = ["Batch"]

_ids = count()


@dataclass(eq=False)
class Batch:
    """Stands in for producer.batch.ProducerBatch (satisfies sequences.SequencedBatch).

    ``eq=False``: batches are told apart by identity, as the producer's are.
    """

    topic: str = "t"
    partition: int = 0
    record_count: int = 1
    base_sequence: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    attempts: int = 0
    records: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.records:
            self.records = [next(_ids) for _ in range(self.record_count)]

    def stamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        self.producer_id, self.producer_epoch, self.base_sequence = (
            producer_id, producer_epoch, base_sequence)

    @property
    def header(self) -> tuple[int, int, int]:
        """What would go on the wire now: (producer id, epoch, base sequence)."""
        return self.producer_id, self.producer_epoch, self.base_sequence
