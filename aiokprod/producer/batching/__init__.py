"""Records into batches: the accumulator's per-partition queues and its drain (with the steps
around each partition's verdict, ``send_rules``), the bounded memory batches take, the
partitioner that picks their partition and the split of a batch the broker refused.
"""
