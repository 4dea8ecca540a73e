"""The idempotent producer (docs/idempotence.md): the producer id and epoch and their state
machine, InitProducerId, and sequence arithmetic. No I/O but InitProducerId's.
"""
