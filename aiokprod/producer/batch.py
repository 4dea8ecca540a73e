"""A batch of records for one partition, from its first append to its last future resolved.

The record bytes live in a pooled buffer (``RecordBatchBuilder``); this object adds what the
producer needs around them: one future per record, timing for linger/expiry/metrics, and the
idempotence fields the sender stamps into the sealed header. Completion is per batch: one call
resolves every record's future, and the futures' callbacks run later on the loop, so a slow user
callback never delays the sender's bookkeeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiokprod import _native
from aiokprod.record_metadata import RecordMetadata
from aiokprod.records import RecordBatchBuilder, restamp

if TYPE_CHECKING:
    from aiokprod.producer.bulk import BulkDelivery
    from aiokprod.producer.partition import PartitionProducer

__all__ = ["DELIVERY_STRIDE", "ProducerBatch", "RecordMetadata"]

DELIVERY_STRIDE = 5  # slots per record in ProducerBatch.deliveries

log = logging.getLogger(__name__)


class ProducerBatch:
    __slots__ = (
        "attempts",
        "base_sequence",
        "buffer",
        "buffer_size",
        "builder",
        "covered_slots",
        "created_at",
        "deliveries",
        "done",
        "done_waiters",
        "drained_at",
        "final_state",
        "last_attempt_at",
        "leader_epoch",
        "owner",
        "producer_epoch",
        "producer_id",
        "queued",
        "retry_at",
        "sealed",
        "segments",
        "transactional",
        "ts_base",
    )

    def __init__(
        self,
        owner: PartitionProducer[ProducerBatch],
        buffer: bytearray,
        buffer_size: int,
        builder: RecordBatchBuilder,
        now: float,
        ts_base: int,
    ) -> None:
        # the partition whose queue holds it, from its first append to its release: every
        # outcome of the batch is its partition's to record, found without a lookup by name
        self.owner = owner
        self.buffer = buffer  # pooled memory, returned to the pool when the batch is done
        # what the pool accounted for it: record bytes, plus bookkeeping blocks (see below)
        self.buffer_size = buffer_size
        # records whose bookkeeping (future, tuple, ints: RECORD_OVERHEAD bytes each) the pool
        # has been charged for; appending past it first reserves another block, so that
        # buffer_memory bounds the whole of what queued records cost, not only their bytes
        self.covered_slots = 0  # in deliveries slots: DELIVERY_STRIDE per record
        self.builder = builder  # appends records straight into ``buffer``
        self.created_at = now  # linger and delivery.timeout.ms count from here
        # per send(), DELIVERY_STRIDE flat slots: future, offset delta, timestamp - ts_base,
        # key size, value size — resolved in one pass; the offset delta places the record
        # among bulk segments in the same batch. Flat rather than a tuple per record: the tuple
        # would be a second long-lived object per queued record for the cyclic GC to walk
        # (measured: the GC was ~1.6 us of the ~4.5 us a record cost in a tight send loop).
        # Timestamps are kept relative to ts_base (the first record's) because small ints are
        # shared objects: an absolute one was a 32-byte int per queued record (352 -> 321 B).
        self.deliveries: list[Any] = []
        self.ts_base = ts_base
        # per send_many() run: (bulk call, position in the call, records, first offset delta)
        self.segments: list[tuple[BulkDelivery, int, int, int]] | None = None
        # flush() waiters, created only when someone flushes
        self.done_waiters: list[asyncio.Future[None]] | None = None
        self.sealed: memoryview | None = None  # the wire bytes once drained
        self.attempts = 0  # sends so far; >0 means a retry (idempotence keeps its sequence)
        self.last_attempt_at = now  # retry backoff counts from here
        self.retry_at = 0.0  # not sendable before this monotonic time (retry backoff)
        self.drained_at = 0.0  # when the current attempt left the accumulator
        # the partition's leader epoch when its last attempt was drained (-1: unknown). A retry
        # whose partition has a newer leader since goes at once, without the retry backoff:
        # the error was most likely the old leader's (Java's hasLeaderChangedForTheOngoingRetry)
        self.leader_epoch = -1
        # waiting in its partition's queue to be drained: True from creation until drained,
        # again when put back for a retry (PartitionProducer.batches and its drain cursor)
        self.queued = True
        self.producer_id = -1  # idempotence: stamped at drain
        self.producer_epoch = -1
        self.base_sequence = -1  # counted per record; kept across retries unless reset
        self.transactional = False
        self.done = False  # completed or failed: nothing may touch its futures again
        self.final_state: str | None = None  # "succeeded" | "failed" | "aborted", for repr/tests

    @property
    def topic(self) -> str:
        return self.owner.topic

    @property
    def partition(self) -> int:
        return self.owner.partition

    @property
    def on_wire(self) -> bool:
        """Drained into a request not answered yet, also after delivery.timeout.ms failed it
        (the request can still land): its partition's ``wire`` is the one record of it."""
        return self in self.owner.wire

    # ---- filling ---------------------------------------------------------------------------

    @property
    def record_count(self) -> int:
        return self.builder.record_count

    def try_append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
        future: asyncio.Future[RecordMetadata],
    ) -> bool:
        builder = self.builder
        if self.sealed is not None or not builder.try_append(timestamp, key, value, headers):
            return False
        self.deliveries.extend((
            future, builder.record_count - 1, timestamp - self.ts_base,
            -1 if key is None else len(key), -1 if value is None else len(value)))
        return True

    def record_futures(self) -> list[asyncio.Future[RecordMetadata]]:
        """The futures of the records queued with send(), in append order."""
        return self.deliveries[::DELIVERY_STRIDE]

    def delivery_records(self) -> list[tuple[asyncio.Future[RecordMetadata], int, int, int, int]]:
        """(future, offset delta, timestamp, key size, value size) per send() record."""
        it = iter(self.deliveries)
        base = self.ts_base
        return [(f, d, base + t, k, v) for f, d, t, k, v in zip(it, it, it, it, it, strict=True)]

    # ---- sending ---------------------------------------------------------------------------

    def seal(self) -> memoryview:
        """Finish the wire bytes (compression happens here); later attempts reuse them."""
        if self.sealed is None:
            self.sealed = self.builder.seal(
                producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence, transactional=self.transactional)
        return self.sealed

    def stamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Set the idempotence fields, rewriting the sealed header (and CRC) if already sealed."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        if self.sealed is not None:
            restamp(self.sealed, producer_id=producer_id, producer_epoch=producer_epoch,
                    base_sequence=base_sequence)

    @property
    def size_in_bytes(self) -> int:
        return len(self.sealed) if self.sealed is not None else self.builder.estimated_size()

    # ---- completing ------------------------------------------------------------------------

    def complete(self, base_offset: int, log_append_time: int,
                 on_ack: Callable[[RecordMetadata | None, BaseException | None], None] | None
                 = None) -> None:
        """Resolve every record's future; offsets follow the batch's base offset."""
        if self.done:
            return
        self.done = True
        self.final_state = "succeeded"
        owner = self.owner
        _complete_deliveries(self.deliveries, owner.topic, owner.partition, base_offset,
                             log_append_time, self.ts_base, on_ack, RecordMetadata,
                             _call_interceptor)
        if self.segments is not None:
            for bulk, position, count, delta in self.segments:
                bulk.segment_done(position, count, owner.partition,
                                  base_offset + delta if base_offset >= 0 else -1,
                                  log_append_time)
        self._wake_waiters()

    def fail(self, error: BaseException,
             on_ack: Callable[[RecordMetadata | None, BaseException | None], None] | None
             = None) -> None:
        if self.done:
            return
        self.done = True
        self.final_state = "failed"
        for future in self.deliveries[::DELIVERY_STRIDE]:
            if on_ack is not None:
                _call_interceptor(on_ack, None, error)
            if not future.done():
                future.set_exception(error)
                # a send whose caller never awaited the delivery should not log "never retrieved"
                future.exception()
        if self.segments is not None:
            for bulk, _position, _count, _delta in self.segments:
                bulk.fail(error)
        self._wake_waiters()

    def wait_done(self) -> asyncio.Future[None]:
        """A future resolved when this batch completes or fails (for flush)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.done:
            future.set_result(None)
        else:
            if self.done_waiters is None:
                self.done_waiters = []
            self.done_waiters.append(future)
        return future

    def _wake_waiters(self) -> None:
        waiters, self.done_waiters = self.done_waiters, None
        if waiters:
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def __repr__(self) -> str:
        state = self.final_state or ("sealed" if self.sealed is not None else "open")
        return (f"<ProducerBatch {self.topic}-{self.partition} records={self.record_count} "
                f"bytes={self.size_in_bytes} attempts={self.attempts} seq={self.base_sequence} "
                f"{state}>")


def _call_interceptor(
    on_ack: Callable[[RecordMetadata | None, BaseException | None], None],
    md: RecordMetadata | None,
    error: BaseException | None,
) -> None:
    """Interceptors must not break delivery bookkeeping (the Java client logs and goes on)."""
    try:
        on_ack(md, error)
    except Exception:  # an interceptor bug must not lose other records' results
        log.exception("on_acknowledgement interceptor raised")


def _complete_deliveries_py(
    deliveries: list[Any],
    topic: str,
    partition: int,
    base_offset: int,
    log_append_time: int,
    ts_base: int,
    on_ack: Callable[[RecordMetadata | None, BaseException | None], None] | None,
    metadata_type: type[RecordMetadata],
    call_interceptor: Callable[[Callable[[RecordMetadata | None, BaseException | None], None],
                                RecordMetadata | None, BaseException | None], None],
) -> None:
    """Resolve every record's future of a completed batch (five ``deliveries`` slots per
    record: future, offset delta, timestamp - ts_base, key size, value size). The twin of
    ``aiokprod._native._speedups.complete_deliveries``."""
    use_append_time = log_append_time >= 0
    known = base_offset >= 0
    it = iter(deliveries)
    for future, delta, ts, ksize, vsize in zip(it, it, it, it, it):  # noqa: B905
        md = metadata_type(topic, partition, base_offset + delta if known else -1,
                           log_append_time if use_append_time else ts_base + ts, ksize, vsize)
        if on_ack is not None:
            call_interceptor(on_ack, md, None)
        if not future.done():
            future.set_result(md)


def append_open_py(
    batch: ProducerBatch,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    create_future: Callable[[], asyncio.Future[RecordMetadata]],
) -> asyncio.Future[RecordMetadata] | None:
    """send()'s common record (no headers) into ``batch``, its partition's open batch.

    None, with nothing written, when the batch cannot take it this way: sealed, the
    bookkeeping it was charged for used up (the accumulator then charges another block), or
    full (the builder then says so). The twin of ``aiokprod._native._speedups.append_open``,
    which does the same in one C call.
    """
    if batch.sealed is not None or len(batch.deliveries) >= batch.covered_slots:
        return None
    builder = batch.builder
    if not builder.try_append(timestamp, key, value, None):
        return None
    future = create_future()
    batch.deliveries.extend((future, builder.record_count - 1, timestamp - batch.ts_base,
                             -1 if key is None else len(key),
                             -1 if value is None else len(value)))
    return future


_complete_deliveries = (_complete_deliveries_py if _native.speedups is None
                        else _native.speedups.complete_deliveries)
append_open = append_open_py if _native.speedups is None else _native.speedups.append_open
