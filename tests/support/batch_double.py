"""One stand-in for ``ProducerBatch`` in the tests of the idempotence and sequence logic.

The manager and the sequence helpers need only what ``producer.partition.QueuedBatch`` names
(topic, partition, record count, the stamped header, attempts, and the partition that holds
it); a real batch would drag in the accumulator and a record builder. ``records`` gives each
record a number unique in the test run, so a simulated broker's log can be checked for
duplicates and order.

A batch refers to its partition, as the producer's do: a stand-in made without ``owner``
takes its partition from the table the last manager was made with
(``IdempotenceManager(partitions=new_table())``), as the producer gives its accumulator and
its idempotence manager one table. Make the manager first, then its batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count
from typing import Any

from aiokprod.producer.partition import PartitionProducer, Partitions

__all__ = ["Batch", "new_table"]

_ids = count()
_table: Partitions[Any] = Partitions()


def new_table() -> Partitions[Any]:
    """A new table for a new manager; the stand-ins made from now on are its partitions'."""
    global _table
    _table = Partitions()
    return _table


@dataclass(eq=False)
class Batch:
    """Stands in for producer.batch.ProducerBatch (satisfies partition.QueuedBatch).

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
    owner: PartitionProducer[Any] = field(default=None)  # type: ignore[assignment]
    queued: bool = True
    retry_at: float = 0.0
    leader_epoch: int = -1

    def __post_init__(self) -> None:
        if not self.records:
            self.records = [next(_ids) for _ in range(self.record_count)]
        if self.owner is None:
            self.owner = _table.get(self.topic, self.partition)

    def stamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        self.producer_id, self.producer_epoch, self.base_sequence = (
            producer_id, producer_epoch, base_sequence)

    @property
    def on_wire(self) -> bool:
        """As the producer's batch: its partition's ``wire`` says."""
        return self in self.owner.wire

    @property
    def header(self) -> tuple[int, int, int]:
        """What would go on the wire now: (producer id, epoch, base sequence)."""
        return self.producer_id, self.producer_epoch, self.base_sequence
