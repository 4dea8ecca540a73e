"""The sink's exactly-once mode: tasks prepare a transaction each, the driver commits them.

``.option("transactional", "true")``. The one fact only Spark's driver knows is which attempt
of each task counts: a task's input ending is no proof — when an upstream stage fails, the task
is cancelled or its executor drops the socket, pyspark ends the writer's iterator as if the
input were complete. So no task commits. Each attempt writes its rows in a Kafka transaction of
its own and *prepares* it (``Producer.prepare_transaction()``: every record acknowledged, the
transaction left open); its commit message carries the ``PreparedTransaction`` (transactional
id, producer id, epoch) to the driver. Spark hands the driver's ``commit()`` one message per
task, from the attempt it keeps, and only then do the transactions commit
(``Producer.complete_prepared_transaction()``, EndTxn by producer id and epoch); ``abort()``
aborts them. Rows of an attempt Spark did not keep are never committed: read_committed
consumers never see them. A failed write leaves nothing visible.

Transactional ids, one per *attempt*, so that an attempt starting after another finished (a
speculative copy, a duplicate) cannot abort the one Spark keeps:

* batch: ``<prefix>-<write id>-<partition>-<attempt>``, the write id made on the driver for one
  ``save()`` (or given as ``transactional.write.id`` to make a re-run of the job recognise what
  an earlier run committed);
* streaming: ``<prefix>-<query id>-<partition>-<attempt>``: the query id is kept in the
  checkpoint, and reusing the ids every micro-batch keeps the coordinator's table small (it
  keeps every transactional id for transactional.id.expiration.ms, 7 days by default).

An attempt's ``start()`` (InitProducerId) aborts what an earlier run left open under the same
id; the driver aborts the kept attempts' predecessors (InitProducerId with their ids) after the
commit, and a failed write's unfinished tasks in ``abort()``, so read_committed consumers are
not held at a dead attempt's first record until transaction.timeout.ms.

A **marker** makes re-runs write nothing twice: the driver commits, inside each task's
transaction, an offset of a sink-owned consumer group (``<prefix>-<write or query
id>-<partition>``) on partition 0 of the marker topic — 1 for a batch write, batch id + 1 for a
micro-batch. Rows and marker become visible together or not at all. An attempt reads the marker
(``Producer.committed_offsets``, which waits out a commit in progress) before writing; found,
the rows are in Kafka already (a streaming replay after the driver committed and died before
Spark's commit log, or a re-run of a batch write with the same write id): it consumes its
input, writes nothing and succeeds.

The transaction lives from a task's first record until the driver's commit, so
``transaction.timeout.ms`` must cover the whole write (every wave of tasks); the sink's default
is the broker's default cap, 15 minutes. A write that outlasts it fails before anything
commits. docs/spark.md has the guarantee table.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from aiokprod.errors import KafkaError, ProducerFencedError
from aiokprod.producer.producer import Producer
from aiokprod.producer.transactional.prepared import PreparedTransaction
from aiokprod.spark._executor import (
    KafkaSinkError,
    TaskSummary,
    TaskWriter,
    _LoopThread,
    shared_loop,
)
from aiokprod.spark._options import SinkSettings

__all__ = ["PreparedTask", "TaskIdentity", "TransactionalTaskWriter", "abort_tasks",
           "batch_identity", "commit_tasks", "stream_identity"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# what a marker holds for a batch write: "this partition's rows are committed"
_BATCH_DONE = 1
_CLOSE_TIMEOUT_S = 10.0
# completions (or fencing producers) the driver runs at once
_DRIVER_CONCURRENCY = 16
# attempts of a task whose ids the driver's abort() fences when the task never finished:
# Spark's default spark.task.maxFailures (an attempt beyond it is aborted by the coordinator
# after transaction.timeout.ms, or by the next run reusing the id)
_FENCED_ATTEMPTS = 4


@dataclass(frozen=True)
class TaskIdentity:
    """Who a task attempt is: its transactional id, and where its task's marker lives."""

    # this attempt's transactional id
    transactional_id: str
    # the sink-owned consumer group whose committed offset is the task's marker (one per task,
    # shared by its attempts)
    group_id: str
    # (topic, partition) the marker offset is committed for
    marker: tuple[str, int]
    # the committed offset that says "this task's rows are in"; a larger one says the same
    # (a later micro-batch of the query committed the partition)
    done_offset: int
    # which attempt of the task (TaskContext.attemptNumber())
    attempt: int
    # a batch write's: the group whose offset on ``marker`` says the driver aborted this run
    # (``abort_tasks``): an attempt that finds it writes nothing
    aborted_group: str | None = None


def _identity(settings: SinkSettings, scope: str, partition_id: int, attempt: int,
              done_offset: int, aborted_group: str | None = None) -> TaskIdentity:
    assert settings.marker_topic is not None
    task = f"{settings.id_prefix}-{scope}-{partition_id}"
    return TaskIdentity(f"{task}-{attempt}", task, (settings.marker_topic, 0), done_offset,
                        attempt, aborted_group)


def _aborted_group(settings: SinkSettings) -> str | None:
    """The group whose marker says the driver aborted this run of a batch write."""
    if settings.write_id is None or settings.run_id is None:
        return None
    return f"{settings.id_prefix}-{settings.write_id}-{settings.run_id}-aborted"


def batch_identity(settings: SinkSettings, partition_id: int, attempt: int) -> TaskIdentity:
    """A batch write's task attempt: ids from the write id, the Spark partition, the attempt."""
    assert settings.write_id is not None
    return _identity(settings, settings.write_id, partition_id, attempt, _BATCH_DONE,
                     _aborted_group(settings))


def stream_identity(settings: SinkSettings, query_id: str, batch_id: int, partition_id: int,
                    attempt: int) -> TaskIdentity:
    """A micro-batch's task attempt: ids from the query id, the Spark partition and the
    attempt; the marker is batch id + 1 (micro-batches run one after another, so it only
    grows)."""
    return _identity(settings, query_id, partition_id, attempt, batch_id + 1)


@dataclass(frozen=True)
class PreparedTask:
    """A task's open transaction, carried to the driver in its commit message."""

    identity: TaskIdentity
    transaction: PreparedTransaction
    # wall-clock time (time.time()) before the transaction's first record: the coordinator
    # aborts it transaction.timeout.ms after that, so the driver checks before committing
    started_at: float


class TransactionalTaskWriter(TaskWriter):
    """One task attempt in one transaction: skip if committed, write, prepare — never commit."""

    def __init__(self, settings: SinkSettings, partition_id: int, attempt: int,
                 identity: TaskIdentity) -> None:
        self._identity = identity
        # set by write(): the transaction for the driver to end (None: nothing to end)
        self.prepared: PreparedTask | None = None
        super().__init__(settings, partition_id, attempt)

    def _connect(self) -> tuple[_LoopThread, Producer]:
        config = dict(self._settings.producer_config)
        config["transactional.id"] = self._identity.transactional_id
        return shared_loop(), Producer.from_config(config)  # started in write()

    def _drop_producer(self) -> None:
        """Nothing cached: write() closes this task's producer however it ends."""

    def write(self, batches: Iterable[pa.RecordBatch]) -> TaskSummary:
        """Write every row in this attempt's transaction and prepare it, or raise.

        Sets ``prepared`` for the driver, which commits the transaction if Spark keeps this
        attempt. Returns a skipped summary, after consuming the input, when an earlier run
        committed the task already. Raises ``KafkaSinkError`` when a record or the
        coordinator fails (the transaction is aborted). An exception from upstream aborts the
        transaction and passes unchanged.
        """
        source = iter(batches)
        first = next((b for b in source if b.num_rows), None)
        if first is None:  # nothing to write, nothing to mark: a re-run has nothing either
            self._close()
            return TaskSummary(self._partition_id, self._attempt, 0, 0, ())
        try:
            try:
                self._run(self._producer.start())  # aborts what an earlier run left open
                self._check_not_aborted()
                if self._committed_before():
                    logger.info("aiokprod sink: %s: already committed by an earlier run "
                                "(marker group %r); consuming its input, writing nothing",
                                self._where, self._identity.group_id)
                    for _ in source:  # Spark expects the input read to its end
                        pass
                    return TaskSummary(self._partition_id, self._attempt, 0, 0, (),
                                       skipped=True)
                started_at = time.time()
                self._producer.begin_transaction()
            except Exception as exc:
                raise self._sink_error(exc, "could not start its transaction") from exc
            try:
                summary = super().write(itertools.chain([first], source))
                transaction = self._run(self._producer.prepare_transaction())
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
                raise self._sink_error(exc, "could not prepare its transaction") from exc
            self.prepared = PreparedTask(self._identity, transaction, started_at)
            return summary
        finally:
            self._close()

    # -- steps (each a coroutine run on the worker's loop; bounded by max.block.ms) --------

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        result: _T = self._loop_thread.submit(coro).result()
        return result

    def _check_not_aborted(self) -> None:
        """Raise if the driver aborted this run already (a task Spark had not stopped yet).

        Race-free with the driver's ``abort_tasks``, which commits the marker *before* it
        fences the attempts' ids, while this runs *after* this attempt's InitProducerId: either
        the fence came later and bumps this attempt's epoch (nothing it sends can commit), or
        it came first and so did the marker, which this reads.
        """
        identity = self._identity
        if identity.aborted_group is None:
            return
        offsets = self._run(self._producer.committed_offsets(identity.aborted_group,
                                                             [identity.marker]))
        if offsets.get(identity.marker) is not None:
            raise KafkaSinkError(
                f"aiokprod sink: {self._where}: the driver aborted this write already (the job "
                f"failed or was cancelled); writing nothing")

    def _committed_before(self) -> bool:
        identity = self._identity
        offsets = self._run(self._producer.committed_offsets(identity.group_id,
                                                             [identity.marker]))
        committed = offsets.get(identity.marker)
        return committed is not None and committed >= identity.done_offset

    def _abort_quietly(self) -> BaseException | None:
        """Abort after a failure; returns what the abort raised (ProducerFencedError tells a
        fenced attempt apart). A failed abort is left to the driver's fencing, the next run's
        InitProducerId or the coordinator's transaction.timeout.ms: read_committed consumers
        never see it."""
        try:
            self._run(self._producer.abort_transaction())
        except Exception as exc:
            logger.info("aiokprod sink: %s: abort after the failure: %s: %s", self._where,
                        type(exc).__name__, exc)
            return exc
        return None

    def _close(self) -> None:
        """Close the producer; a prepared transaction stays open for the driver."""
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
                f"aiokprod sink: {self._where} was fenced: another producer started with its "
                f"transactional id {txn_id!r} (a re-run of the job or query); this attempt's "
                f"rows were aborted and are never visible to read_committed consumers: "
                f"ProducerFencedError: {error}")
        return KafkaSinkError(
            f"aiokprod sink: {self._where} {what} (transactional id {txn_id!r}): "
            f"{type(error).__name__}: {error}. Nothing of this attempt is visible: only the "
            f"driver commits, and only the attempts Spark keeps")


def _fenced(error: BaseException | None) -> ProducerFencedError | None:
    """The ProducerFencedError in ``error``'s cause chain, if any."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, ProducerFencedError):
            return error
        error, seen = error.__cause__, seen + 1
    return None


# -- the driver: commit or abort what the kept attempts prepared -------------------------------


def commit_tasks(settings: SinkSettings, prepared: Sequence[PreparedTask]) -> None:
    """Commit the kept attempts' transactions, each with its task's marker; raise if any can't.

    First, if a transaction is so old that the coordinator may abort it before the commit
    lands (transaction.timeout.ms), nothing is committed: all are aborted and the write fails
    saying so — all or nothing. Then every transaction commits (EndTxn, concurrently);
    afterwards the kept attempts' predecessors are fenced, which aborts what a failed attempt
    left open. Runs in the driver's Python worker; each step bounded by max.block.ms.
    """
    if not prepared:
        return
    timeout_s = settings.transaction_timeout_ms / 1000
    margin = min(10.0, timeout_s / 4)
    now = time.time()
    late = [p for p in prepared if now - p.started_at > timeout_s - margin]
    if late:
        problems = asyncio.run(_end_all(settings, prepared, commit=False))
        oldest = max(now - p.started_at for p in late)
        raise KafkaSinkError(
            f"aiokprod sink: the write outlasted transaction.timeout.ms="
            f"{settings.transaction_timeout_ms}: {len(late)} of {len(prepared)} tasks' "
            f"transactions are {oldest:.1f} s old, too close to the coordinator aborting them, "
            f"so none was committed and all were aborted (nothing of this write is visible"
            f"{_problems(problems)}). Give kafka.transaction.timeout.ms room for the whole "
            f"write (every wave of tasks, up to the broker's transaction.max.timeout.ms), or "
            f"write less per job")
    problems = asyncio.run(_end_all(settings, prepared, commit=True))
    if problems:
        raise KafkaSinkError(
            f"aiokprod sink: {len(problems)} of {len(prepared)} tasks' transactions could not "
            f"be committed{_problems(problems)}. The others are committed; Spark's abort() "
            f"aborts what is still open")
    superseded = [(p.identity, attempt) for p in prepared for attempt in range(p.identity.attempt)]
    for problem in _fence(settings, [_attempt_id(i, a) for i, a in superseded]):
        logger.warning("aiokprod sink: could not fence a superseded attempt's transactional "
                       "id %s; read_committed consumers may wait up to transaction.timeout.ms "
                       "for its transaction", problem)


def abort_tasks(settings: SinkSettings, prepared: Sequence[PreparedTask],
                unfinished: Sequence[int]) -> None:
    """A failed write: abort the finished tasks' transactions and fence the ids of their
    earlier attempts and of the ``unfinished`` partitions' attempts (a batch write's: their ids
    are known), so nothing is visible and read_committed consumers are not held at a dead
    attempt's records.

    Spark calls this while cancelled tasks may still run: one that starts its transaction
    after the fences would hold read_committed consumers until transaction.timeout.ms. So a
    batch write first commits its run's "aborted" marker, which such an attempt reads after
    its InitProducerId (``TransactionalTaskWriter._check_not_aborted``).
    """
    aborted_group = _aborted_group(settings)
    if aborted_group is not None:
        # first: from now on an attempt that starts (after the fences below) writes nothing
        asyncio.run(_mark_aborted(settings, aborted_group))
    for problem in asyncio.run(_end_all(settings, prepared, commit=False)):
        logger.warning("aiokprod sink: could not abort %s", problem)
    ids = [_attempt_id(p.identity, a) for p in prepared for a in range(p.identity.attempt)]
    if settings.write_id is not None:  # streaming: the next micro-batch reuses the ids
        ids += [batch_identity(settings, p, a).transactional_id
                for p in unfinished for a in range(_FENCED_ATTEMPTS)]
    for problem in _fence(settings, ids):
        logger.warning("aiokprod sink: could not fence the unfinished task's transactional id "
                       "%s; read_committed consumers may wait up to transaction.timeout.ms for "
                       "its transaction", problem)


async def _mark_aborted(settings: SinkSettings, group: str) -> None:
    """Commit the run's "aborted" marker, in a transaction of its own (a group's offsets are
    written only through a consumer or a transaction; this producer has the latter)."""
    assert settings.marker_topic is not None
    config = dict(settings.producer_config)
    config["transactional.id"] = group
    async with Producer.from_config(config) as producer, producer.transaction():
        await producer.send_offsets_to_transaction({(settings.marker_topic, 0): 1}, group)


def _attempt_id(identity: TaskIdentity, attempt: int) -> str:
    return f"{identity.group_id}-{attempt}"


def _problems(problems: list[str]) -> str:
    return (": " + "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else "")) \
        if problems else ""


def _driver_config(settings: SinkSettings) -> dict[str, str]:
    """The driver's own producer: no transactional id, no producer id of its own to fetch."""
    config = dict(settings.producer_config)
    config["enable.idempotence"] = "false"
    config["acks"] = "1"
    return config


async def _end_all(settings: SinkSettings, prepared: Sequence[PreparedTask], *,
                   commit: bool) -> list[str]:
    """Commit (with markers) or abort every transaction; one line per failure."""
    gate = asyncio.Semaphore(_DRIVER_CONCURRENCY)

    async def end(task: PreparedTask) -> None:
        identity = task.identity
        async with gate:
            await driver.complete_prepared_transaction(
                task.transaction, commit=commit,
                offsets={identity.marker: identity.done_offset} if commit else None,
                group=identity.group_id if commit else None)

    async with Producer.from_config(_driver_config(settings)) as driver:
        outcomes = await asyncio.gather(*(end(t) for t in prepared), return_exceptions=True)
    return [f"transactional id {t.identity.transactional_id!r}: {type(o).__name__}: {o}"
            for t, o in zip(prepared, outcomes, strict=True) if isinstance(o, BaseException)]


def _fence(settings: SinkSettings, transactional_ids: Sequence[str]) -> list[str]:
    """InitProducerId with each id (aborting what it left open); one line per failure."""
    async def fence(txn_id: str, gate: asyncio.Semaphore) -> None:
        config = dict(settings.producer_config)
        config["transactional.id"] = txn_id
        async with gate:
            producer = Producer.from_config(config)
            try:
                await producer.start()
            finally:
                await producer.close(timeout=_CLOSE_TIMEOUT_S)

    async def fence_all(wanted: list[str]) -> list[str]:
        gate = asyncio.Semaphore(_DRIVER_CONCURRENCY)
        outcomes = await asyncio.gather(*(fence(t, gate) for t in wanted),
                                        return_exceptions=True)
        return [f"{t}: {type(o).__name__}: {o}" for t, o in zip(wanted, outcomes, strict=True)
                if isinstance(o, BaseException)]

    wanted = sorted(set(transactional_ids))
    return asyncio.run(fence_all(wanted)) if wanted else []
