"""The producer core: partitioning, memory, accumulation, sending. Import from the modules."""
