"""The sink's exactly-once mode: one Kafka transaction per task, and a commit marker in it.

``.option("transactional", "true")``. Spark runs a task again when an attempt fails, when its
executor is lost after the task finished (Spark never heard of the result), and beside a slow
attempt (speculation); a streaming query replays its last micro-batch after a restart. Each of
those re-runs hands the sink the same rows again. Here every task writes its rows in one
transaction whose id is fixed by *what* the task writes, not by which attempt writes it:

* batch: ``<prefix>-<write id>-<partition>``, the write id made on the driver for one
  ``save()``;
* streaming: ``<prefix>-<query id>-<partition>``, the query id Spark keeps in the checkpoint.

A new attempt's ``start()`` (InitProducerId with that id) fences every older attempt of the
task and aborts what it left open, so at most one attempt can commit. Committing is not
enough: a task that committed and then died before Spark heard of it is run again, and that
retry must not write the rows a second time. So the transaction also commits a **marker**: an
offset of a sink-owned consumer group (``<transactional id's prefix>-<write or query
id>-<partition>``) on partition 0 of the sink's topic — for a batch write offset 1, for a
micro-batch its batch id + 1. Rows and marker become visible together or not at all. After
fencing, and before writing anything, an attempt reads the marker
(``Producer.committed_offsets``, which waits out a transaction still resolving); if it is there,
the rows are in Kafka already and the attempt writes nothing and succeeds.

The producer of this mode is made per task (its transactional id is the task's) on the
worker's shared loop thread, and closed at the end of the task; the at-least-once mode's
cached producers and hot path are untouched. docs/spark.md has the guarantee table.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from aiokprod.errors import KafkaError, ProducerFencedError
from aiokprod.producer.producer import Producer
from aiokprod.spark._executor import (
    KafkaSinkError,
    TaskSummary,
    TaskWriter,
    _LoopThread,
    shared_loop,
)
from aiokprod.spark._options import SinkSettings

__all__ = ["TaskIdentity", "TransactionalTaskWriter", "batch_identity", "fence_unfinished",
           "stream_identity"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# what a marker holds for a batch write: "this partition's rows are committed"
_BATCH_DONE = 1
_CLOSE_TIMEOUT_S = 10.0
# producers the driver's abort() starts at once to fence the failed tasks' transactional ids
_FENCE_CONCURRENCY = 8


@dataclass(frozen=True)
class TaskIdentity:
    """Who a task is, across its attempts: the transactional id and where its marker lives."""

    transactional_id: str
    # the sink-owned consumer group whose committed offset is the marker
    group_id: str
    # (topic, partition) the marker offset is committed for
    marker: tuple[str, int]
    # the committed offset that says "this task's rows are in"; a larger one says the same
    # (a later micro-batch of the query committed the partition)
    done_offset: int


def batch_identity(settings: SinkSettings, partition_id: int) -> TaskIdentity:
    """A batch write's task: ids from the driver's write id and the Spark partition."""
    assert settings.write_id is not None and settings.marker_topic is not None
    name = f"{settings.id_prefix}-{settings.write_id}-{partition_id}"
    return TaskIdentity(name, name, (settings.marker_topic, 0), _BATCH_DONE)


def stream_identity(settings: SinkSettings, query_id: str, batch_id: int,
                    partition_id: int) -> TaskIdentity:
    """A micro-batch's task: ids from the query id and the Spark partition, marker batch + 1.

    One transactional id per query partition, not per micro-batch: the coordinator keeps every
    transactional id for transactional.id.expiration.ms (7 days by default), and a query
    running a micro-batch a second would leave hundreds of thousands a day. Micro-batches run
    one after another, so the marker's offset (the last committed batch id + 1) only grows.
    """
    assert settings.marker_topic is not None
    name = f"{settings.id_prefix}-{query_id}-{partition_id}"
    return TaskIdentity(name, name, (settings.marker_topic, 0), batch_id + 1)


def fence_unfinished(settings: SinkSettings, partitions: Iterable[int]) -> list[str]:
    """After a failed batch write: fence the transactional ids of the tasks that did not finish.

    A task whose last attempt died (its worker killed, no retry left) leaves its transaction
    open; its rows are never visible, but read_committed consumers of the partitions it wrote
    to stop at its first record until the coordinator aborts it after transaction.timeout.ms.
    InitProducerId with the task's id aborts it now. Runs in the driver-side worker that calls
    ``abort``; each producer's start is bounded by max.block.ms. Returns one line per id that
    could not be fenced (the caller logs them).
    """
    async def fence(partition: int, gate: asyncio.Semaphore) -> None:
        config = dict(settings.producer_config)
        config["transactional.id"] = batch_identity(settings, partition).transactional_id
        async with gate:
            producer = Producer.from_config(config)
            try:
                await producer.start()
            finally:
                await producer.close(timeout=_CLOSE_TIMEOUT_S)

    async def fence_all(wanted: list[int]) -> list[str]:
        gate = asyncio.Semaphore(_FENCE_CONCURRENCY)
        outcomes = await asyncio.gather(*(fence(p, gate) for p in wanted),
                                        return_exceptions=True)
        return [f"{batch_identity(settings, p).transactional_id}: {type(o).__name__}: {o}"
                for p, o in zip(wanted, outcomes, strict=True) if isinstance(o, BaseException)]

    wanted = sorted(set(partitions))
    return asyncio.run(fence_all(wanted)) if wanted else []


class TransactionalTaskWriter(TaskWriter):
    """One task in one transaction: fence older attempts, skip if committed, write, commit."""

    def __init__(self, settings: SinkSettings, partition_id: int, attempt: int,
                 identity: TaskIdentity) -> None:
        self._identity = identity
        super().__init__(settings, partition_id, attempt)

    def _connect(self) -> tuple[_LoopThread, Producer]:
        config = dict(self._settings.producer_config)
        config["transactional.id"] = self._identity.transactional_id
        return shared_loop(), Producer.from_config(config)  # started in write()

    def _drop_producer(self) -> None:
        """Nothing cached: write() closes this task's producer however it ends."""

    def write(self, batches: Iterable[pa.RecordBatch]) -> TaskSummary:
        """Write every row in one transaction with the task's marker, or raise.

        Returns a skipped summary when an earlier attempt committed the task already. Raises
        ``KafkaSinkError`` when fenced by a newer attempt or when a record, the commit or the
        coordinator fails (the transaction is aborted: read_committed consumers see none of
        its rows). An exception from upstream aborts the transaction and passes unchanged.
        """
        source = iter(batches)
        first = next((b for b in source if b.num_rows), None)
        if first is None:  # nothing to write, nothing to mark: a re-run has nothing either
            return TaskSummary(self._partition_id, self._attempt, 0, 0, ())
        try:
            try:
                self._run(self._producer.start())  # fences older attempts (InitProducerId)
                if self._committed_before():
                    logger.info("aiokprod sink: %s: already committed by an earlier attempt "
                                "(transactional id %r); writing nothing", self._where,
                                self._identity.transactional_id)
                    return TaskSummary(self._partition_id, self._attempt, 0, 0, (),
                                       skipped=True)
                self._producer.begin_transaction()
            except Exception as exc:
                raise self._sink_error(exc, "could not start its transaction") from exc
            try:
                summary = super().write(itertools.chain([first], source))
                self._run(self._commit())
            except BaseException as exc:
                abort_error = self._abort_quietly()
                fenced = _fenced(exc) or _fenced(abort_error)
                if fenced is not None:
                    raise self._sink_error(fenced, "was fenced") from exc
                if isinstance(exc, KafkaSinkError):  # a record failed: the base class's words
                    raise KafkaSinkError(
                        f"{exc}; the transaction was aborted (transactional id "
                        f"{self._identity.transactional_id!r}): read_committed consumers see "
                        f"none of this attempt's rows") from exc.__cause__
                if not isinstance(exc, KafkaError):
                    raise  # upstream (or an interrupt): unchanged, after the abort
                raise self._sink_error(exc, "could not commit") from exc
            return summary
        finally:
            self._close()

    # -- steps (each a coroutine run on the worker's loop; bounded by max.block.ms) --------

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        result: _T = self._loop_thread.submit(coro).result()
        return result

    def _committed_before(self) -> bool:
        identity = self._identity
        offsets = self._run(self._producer.committed_offsets(identity.group_id,
                                                             [identity.marker]))
        committed = offsets.get(identity.marker)
        return committed is not None and committed >= identity.done_offset

    async def _commit(self) -> None:
        identity = self._identity
        await self._producer.send_offsets_to_transaction(
            {identity.marker: identity.done_offset}, identity.group_id)
        await self._producer.commit_transaction()

    def _abort_quietly(self) -> BaseException | None:
        """Abort after a failure; returns what the abort raised (ProducerFencedError tells a
        fenced attempt apart). A failed abort is left to the next attempt's InitProducerId or
        the coordinator's transaction.timeout.ms: read_committed consumers never see it."""
        try:
            self._run(self._producer.abort_transaction())
        except Exception as exc:
            logger.info("aiokprod sink: %s: abort after the failure: %s: %s", self._where,
                        type(exc).__name__, exc)
            return exc
        return None

    def _close(self) -> None:
        try:
            self._loop_thread.submit(self._producer.close(timeout=_CLOSE_TIMEOUT_S)).result(
                2 * _CLOSE_TIMEOUT_S)
        except Exception:  # the task's outcome is decided; closing is housekeeping
            logger.warning("aiokprod sink: %s: closing its transactional producer raised",
                           self._where, exc_info=True)

    def _sink_error(self, error: BaseException, what: str) -> KafkaSinkError:
        txn_id = self._identity.transactional_id
        if isinstance(error, ProducerFencedError):
            return KafkaSinkError(
                f"aiokprod sink: {self._where} was fenced: a newer attempt of the same task (a "
                f"retry, or a speculative copy) started with transactional id {txn_id!r}; "
                f"this attempt's rows were aborted and are never visible to read_committed "
                f"consumers: ProducerFencedError: {error}")
        return KafkaSinkError(
            f"aiokprod sink: {self._where} {what} (transactional id {txn_id!r}): "
            f"{type(error).__name__}: {error}. Its transaction either committed (the retry "
            f"then finds the task's marker and writes nothing) or is aborted, by the retry's "
            f"start or after transaction.timeout.ms (read_committed consumers never see it)")


def _fenced(error: BaseException | None) -> ProducerFencedError | None:
    """The ProducerFencedError in ``error``'s cause chain, if any."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, ProducerFencedError):
            return error
        error, seen = error.__cause__, seen + 1
    return None
