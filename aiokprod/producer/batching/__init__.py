"""Records into batches: the accumulator's per-partition queues and its drain, the batches
themselves, the bounded memory they take, the partitioner that picks their partition and the
split of a batch the broker refused.
"""
