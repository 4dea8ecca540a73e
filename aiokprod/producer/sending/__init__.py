"""Batches to brokers: the sender task, one Produce request and its answer, what each outcome does,
the retry policy, the sender's sleep and the steps around each partition's verdict in a drain.
"""
