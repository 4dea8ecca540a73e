"""The idempotent producer (docs/idempotence.md): the producer id and epoch, their state machine
and InitProducerId, and what spans partitions. The per-partition rules are the partition's
(``producer/partition.py``), the sequence arithmetic is ``producer/sequences.py``.
"""
