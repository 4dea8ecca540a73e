"""What happens to a batch once the sender knows its outcome (docs/batching.md, D5 and the
retry rules; docs/idempotence.md for the idempotent steps).

The sender does the I/O and reports each batch's outcome here: written (``complete``), an
error answer or a lost connection (``handle_error``, which retries, splits, fails or turns the
producer fatal as ``retry_policy`` and idempotence decide), out of time (``expire``), given up
on by idempotence (``fail_doomed``), aborted (``abort_queued``). Each outcome updates, in one
place and in the order that keeps them agreeing, the batch's partition (its requests on the
wire, which derive muting), the idempotence manager, the accumulator's queue and memory, the
metrics and the open transaction.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import RecordTooLargeError
from aiokprod.producer.batch import ProducerBatch, RecordMetadata
from aiokprod.producer.batching.accumulator import RecordAccumulator
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.retry_policy import Action, classify

if TYPE_CHECKING:
    from aiokprod.producer.transactional.transaction_manager import TransactionManager

__all__ = ["BatchOutcomes"]

log = logging.getLogger(__name__)

_MESSAGE_TOO_LARGE = ErrorCode.MESSAGE_TOO_LARGE


class BatchOutcomes:
    """Applies each batch outcome the sender reports; holds the batches on the wire."""

    def __init__(
        self,
        *,
        accumulator: RecordAccumulator,
        idempotence: IdempotenceManager | None,
        transactions: TransactionManager | None,
        retries: int,
        delivery_timeout_ms: int,
        client_id: str,
        on_ack: Callable[[RecordMetadata | None, BaseException | None], None] | None,
        metrics: Any,
        refresh_metadata: Callable[[], None],
        on_fatal: Callable[[BaseException], None],
    ) -> None:
        self._acc = accumulator
        self._idem = idempotence
        self._txn = transactions
        self._retries = retries
        self._delivery_timeout = delivery_timeout_ms / 1000
        self._client = client_id
        self._on_ack = on_ack
        self._metrics = metrics
        self._refresh_metadata = refresh_metadata
        self._on_fatal = on_fatal
        self.retries_done = 0
        self.failed_batches = 0
        # the earliest instant a batch can expire, as the last look found it (``expire``)
        self._next_expiry = -math.inf

    def sent(self, node: int, batches: list[ProducerBatch], now: float) -> None:
        """The batches went out in one request (their partitions put them on the wire when
        they were drained, ``PartitionProducer.take_head``): the request is measured."""
        metrics = self._metrics
        if metrics is None:
            return
        records = size = 0
        record_batch_sent = metrics.record_batch_sent
        for batch in batches:
            builder = batch.builder
            count = builder.record_count
            nbytes = batch.size_in_bytes
            records += count
            size += nbytes
            # every batch a request carries, first attempt, split part or retry alike (Java's
            # per-request metrics update): batch-size, record-size and records-per-request
            # describe what went on the wire
            record_batch_sent(
                batch.owner.topic, record_count=count, size_bytes=nbytes,
                compression_ratio=builder.observed_ratio or 1.0,
                # per batch, not per record: the largest record the batch holds
                max_record_bytes=builder.max_record_size,
                queue_time_ms=(now - batch.created_at) * 1000, now=now)
        metrics.record_request(node, record_count=records, size_bytes=size, now=now)

    def not_sent(self, batches: list[ProducerBatch], error: BaseException, now: float) -> None:
        """Drained, but their connection was gone before they were written: queued again,
        first, without an attempt counted (idempotence holds them like retries)."""
        for batch in batches:
            if self._idem is not None:
                self._idem.on_not_sent(batch)
            self.retry(batch, error, now, count_attempt=False)

    def unsendable(self, batches: list[ProducerBatch], error: BaseException) -> None:
        """Drained, but no request could carry them (no Produce version in common): nothing
        left the client, and nothing will. Their sequences leave a gap: idempotence resets."""
        for batch in batches:
            if self._idem is not None:
                self._idem.on_not_sent(batch)
                self._idem.on_delivery_timeout(batch, possibly_written=False)
            self.fail(batch, error)

    def abort_everything(self, error: BaseException) -> None:
        """Fail every batch held, queued or on the wire (close, a fatal error)."""
        for batch in self._acc.abort_queued():
            self.fail(batch, error)
        for batch in self._acc.on_wire():
            self.fail(batch, error)
        for batch in self._acc.incomplete_batches():
            self.fail(batch, error)

    def settle(self, batch: ProducerBatch) -> None:
        """The batch is no longer on the wire: whatever comes next (completion, a retry, a
        split, a failure), it leaves its partition's wire, which unmutes the partition when it
        was the last there (docs/batching.md D5). A queued batch failing (expired, aborted) was in
        no request: a partition muted by another batch's open request stays muted."""
        batch.owner.off_wire(batch)

    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int,
                  duplicate: bool = False) -> None:
        self.settle(batch)
        if self._idem is not None:
            # also for a batch that already expired: its success resolves it (step 1a)
            self._idem.on_success(batch, base_offset=base_offset, duplicate=duplicate)
        if batch.done:
            return
        batch.complete(base_offset, log_append_time, self._on_ack)
        self._acc.release(batch)

    def fail(self, batch: ProducerBatch, error: BaseException, *,
              still_on_wire: bool = False) -> None:
        if not still_on_wire:
            # expired while its request is unanswered, it stays on its partition's wire (which
            # stays muted) until the answer (or the connection's end) arrives
            self.settle(batch)
        if batch.done:
            return
        self.failed_batches += 1
        if self._metrics is not None:
            self._metrics.on_records_failed(batch.topic, batch.record_count)
        batch.fail(error, self._on_ack)
        self._acc.release(batch)
        if self._txn is not None:
            self._txn.on_batch_failed(error)  # the open transaction can no longer commit

    def fail_doomed(self) -> None:
        """Fail the held batches idempotence gave up on: they can no longer be written in
        order, or without perhaps writing them twice (docs/idempotence.md, "A partition's
        first batches"). They wait in the accumulator for a retry; take them out first."""
        assert self._idem is not None
        for batch, error in self._idem.take_doomed():
            if not isinstance(batch, ProducerBatch):
                raise TypeError(f"idempotence gave up on a foreign batch: {batch!r}")
            self._acc.remove_queued(batch)
            self.fail(batch, error)

    def abort_queued(self, error: BaseException) -> int:
        """Fail every batch still queued with ``error`` (a transaction abort); batches on the
        wire are left to their answers. Returns how many were failed."""
        batches = self._acc.abort_queued()
        idem = self._idem
        for batch in batches:
            if idem is not None and batch.base_sequence >= 0:
                # a retry holding a sequence: unresolved if it may be written, else a gap;
                # either way idempotence asks for the epoch bump the abort then performs
                idem.on_delivery_timeout(batch, possibly_written=batch.attempts > 0)
            self.fail(batch, error)
        return len(batches)

    def retry(self, batch: ProducerBatch, error: BaseException, now: float, *,
               count_attempt: bool = True) -> None:
        self.settle(batch)
        if not count_attempt:
            batch.attempts -= 1  # reenqueue counts one; this was no attempt
        self.retries_done += 1
        if self._metrics is not None:
            self._metrics.on_records_retried(batch.topic, batch.record_count)
        log.debug("[client %s] retrying %r after %s", self._client, batch, error)
        self._acc.reenqueue(batch, now)

    def handle_error(self, batch: ProducerBatch, code: int, error: BaseException,
                      now: float) -> None:
        """One batch's error: retry, split, fail or go fatal, as policy and idempotence say."""
        if batch.done:  # failed by delivery.timeout.ms while on the wire: the late answer
            self.settle(batch)
            return
        past_deadline = now - batch.created_at >= self._delivery_timeout
        decision = classify(
            code, attempts=batch.attempts + 1, retries=self._retries,
            idempotent=self._idem is not None, delivery_deadline_passed=past_deadline,
            record_count=batch.record_count)
        if decision.refresh_metadata:
            self._refresh_metadata()
        action = decision.action
        if self._idem is not None:
            action = self._idem.on_error(batch, code, now, decision).action
        if action is Action.RETRY:
            self.retry(batch, error, now)
        elif action is Action.SPLIT:
            self.settle(batch)
            self.split(batch, now)
        elif action is Action.FATAL:
            self.fail(batch, error)
            self._on_fatal(error)
        else:
            if code == _MESSAGE_TOO_LARGE and batch.record_count == 1:
                error = RecordTooLargeError(f"{batch.topic}-{batch.partition}: the broker "
                                            f"rejected a single record as too large: {error}")
            if past_deadline and decision.retriable:
                error = self._acc.delivery_timeout_error(batch, now)
            self.fail(batch, error)

    def split(self, batch: ProducerBatch, now: float) -> None:
        """MESSAGE_TOO_LARGE on a multi-record batch: re-cut, new sequences, re-queue in order."""
        new_batches = self._acc.split(batch, now)
        if self._idem is not None:
            self._idem.on_split(batch, new_batches)
        self._acc.requeue_split(new_batches)
        if self._metrics is not None:
            self._metrics.batch_split.record(1)
        log.info("[client %s] %s-%d: broker refused a %d-record batch as too large; split into "
                 "%d batches", self._client, batch.topic, batch.partition, batch.record_count,
                 len(new_batches))

    # ---- expiry ----------------------------------------------------------------------------

    def expire(self, now: float) -> float:
        """Fail the batches past delivery.timeout.ms, queued or on the wire; returns how long
        until the next one could expire.

        It looks only once one could have. A batch created after a look expires
        delivery.timeout.ms after it at the earliest, and a batch the look saw (queued, on the
        wire, or later retried or split, which keeps its creation time) at the deadline the look
        found, so nothing can expire before the earlier of the two. The sender asks at every
        pass (one per request and per answer); a look reads every queue and every wire."""
        if now < self._next_expiry:
            return self._next_expiry - now
        for batch in self._acc.expire(now):
            if self._idem is not None:
                self._idem.on_delivery_timeout(batch, possibly_written=batch.attempts > 0)
            self.fail(batch, self._acc.delivery_timeout_error(batch, now))
        timeout = self._delivery_timeout
        oldest = math.inf  # creation time of the oldest batch on the wire not expired
        expired = []
        for batch in self._acc.on_wire():
            if now - batch.created_at >= timeout:
                expired.append(batch)
            elif batch.created_at < oldest:
                oldest = batch.created_at
        for batch in expired:
            if self._idem is not None:
                self._idem.on_delivery_timeout(batch, possibly_written=True)
            self.fail(batch, self._acc.delivery_timeout_error(batch, now), still_on_wire=True)
        delay = min(oldest + timeout - now, self._acc.next_expiry_delay(now), timeout)
        self._next_expiry = now + delay
        return delay
