"""Re-cutting a batch the broker refused as too large (docs/compression.md S1-S5).

A pure function of the refused batch and the accumulator's batch settings: the records are
decompressed and re-appended into new batches, each record's delivery following it. The
accumulator tracks and releases; the sender numbers and queues the new batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiokprod.producer.batch import ProducerBatch
from aiokprod.records import (
    CompressionRatioEstimator,
    CompressionType,
    RecordBatchBuilder,
    split_batch,
)

if TYPE_CHECKING:
    from aiokprod.producer.bulk import BulkDelivery

__all__ = ["split_refused"]


def split_refused(batch: ProducerBatch, *, batch_size: int, compression: CompressionType,
                  compression_level: int | None,
                  estimator: CompressionRatioEstimator | None) -> list[ProducerBatch]:
    """docs/compression.md S1-S5: re-cut a batch the broker refused as too large.

    The estimate is reset to max(1.0, observed) (step 2) so the new batches are sized with
    it; records are decompressed and re-appended by ``batch_size`` (step 3), each new batch
    keeps its records' futures in order. Like the Java client, the new buffers come from
    outside the pool (they replace the old batch's, which the caller releases).
    """
    observed = batch.builder.observed_ratio or 1.0
    ratio = 1.0
    if estimator is not None and compression is not CompressionType.NONE:
        ratio = estimator.reset(batch.topic, compression, observed)
    assert batch.sealed is not None
    # Re-cut by batch.size (S3) — unless the refused batch was no larger than that: the
    # broker's limit (message.max.bytes, the topic's max.message.bytes) is then below
    # batch.size, and re-cutting by it would give back the same batch, refused forever.
    # Aim at half of what was refused instead; a batch refused again halves again, down to
    # single records, which fail as too large on their own (S1).
    limit = batch_size
    if len(batch.sealed) <= limit:
        limit = max(1, len(batch.sealed) // 2)
    groups = split_batch(batch.sealed, limit, estimated_ratio=ratio)
    created: list[ProducerBatch] = []
    index = 0  # offset delta of the group's first record in the old batch
    kept = 0
    for group in groups:
        builder = RecordBatchBuilder(
            bytearray(), write_limit=batch_size, compression=compression,
            compression_level=compression_level, estimated_ratio=ratio)
        new = ProducerBatch(batch.owner, builder.buffer, 0, builder, batch.created_at,
                            group[0].timestamp)
        for record in group:
            if not builder.try_append(record.timestamp, record.key, record.value,
                                      record.headers):
                # split_batch promises every group fits a batch configured like this one
                raise RuntimeError("a split group did not fit its batch")
        end = index + len(group)
        # each record's delivery follows it, offset delta and timestamp rebased on the group
        moved = [(f, d - index, t - new.ts_base, k, v)
                 for f, d, t, k, v in batch.delivery_records() if index <= d < end]
        new.deliveries = [slot for record in moved for slot in record]
        kept += len(moved)
        if batch.segments is not None:
            new.segments = _rebase_segments(batch.segments, index, end)
            kept += sum(count for _b, _p, count, _d in new.segments)
        index = end
        created.append(new)
    if kept != batch.record_count:
        raise RuntimeError(f"split kept {kept} of {batch.record_count} records")
    return created


def _rebase_segments(
    segments: list[tuple[BulkDelivery, int, int, int]], lo: int, hi: int
) -> list[tuple[BulkDelivery, int, int, int]]:
    """The parts of bulk segments whose records have offset deltas in [lo, hi), rebased."""
    out = []
    for bulk, position, count, delta in segments:
        first, last = max(delta, lo), min(delta + count, hi)
        if first < last:
            out.append((bulk, position + (first - delta), last - first, first - lo))
    return out
