"""What ``Producer.send_many`` does to a call's records before they are queued, once they are
bytes (``serializing.bulk_bytes``): a size check over all of them and (with a custom
partitioner) the grouping by partition.

The bulk path's checks run once per call, not once per record, so each of these is one pass
over the call's lists (in C where the native extension has it: ``longest_bytes``,
``group_keys``). ``Producer.send_many`` runs them, then queues the records in runs straight
into batches (``Producer._append_runs``, bookkeeping in ``bulk``).
"""

from __future__ import annotations

from collections.abc import Callable

from aiokprod._murmur2 import KeyGroups, groups_in_runs
from aiokprod.errors import RecordTooLargeError
from aiokprod.network.metadata import TopicMetadata
from aiokprod.producer.batching.accumulator import estimate_record_size
from aiokprod.records.record_encoding import longest_bytes

__all__ = ["check_bulk_sizes", "group_by_partitioner"]


def group_by_partitioner(choose: Callable[..., int], topic: str, ks: list[bytes | None],
                         vals: list[bytes | None], meta: TopicMetadata) -> KeyGroups:
    """``group_keys``'s answer, with the partitioner's ``choose`` (its ``partition``)
    choosing each record's partition."""
    ids, available = meta.partition_ids, meta.available_partitions
    by_partition: dict[int, list[int]] = {}
    for i, (k, v) in enumerate(zip(ks, vals, strict=True)):
        by_partition.setdefault(choose(topic, k, v, ids, available), []).append(i)
    return groups_in_runs(by_partition, ks, vals)


def check_bulk_sizes(vals: list[bytes | None], keys: list[bytes | None] | None,
                     headers: list[tuple[str, bytes | None]] | None, max_record: int,
                     max_record_fast: int) -> None:
    """Refuse the call if any record is larger than ``max_record`` bytes serialized; below
    ``max_record_fast``, key and value alone cannot make it so (see ``Producer``)."""
    # both lists hold only bytes or None here (bulk_bytes): one scan each
    longest = longest_bytes(vals)
    if keys is not None:
        longest += longest_bytes(keys)
    if longest <= max_record_fast and not headers:
        return
    for i, v in enumerate(vals):
        size = estimate_record_size(None if keys is None else keys[i], v, headers)
        if size > max_record:
            raise RecordTooLargeError(
                f"send_many: values[{i}] is {size} bytes when serialized, larger than "
                f"{max_record}, the smaller of max.request.size and buffer.memory")
