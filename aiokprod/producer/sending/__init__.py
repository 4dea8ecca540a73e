"""Batches to brokers: the sender task, one Produce request and its answer, what each outcome does
to its batch and partition, and the sender's sleep.
"""
