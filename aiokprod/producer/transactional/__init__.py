"""The transactional producer (docs/transactions.md): the transaction state machine and the
partitions in it, the requests to its coordinators, ending a transaction (also one prepared by
another producer) and the consumer group's offsets.
"""
