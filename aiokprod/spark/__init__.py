"""PySpark sink (extra ``aiokprod[spark]``): write DataFrames to Kafka through aiokprod.

Spark's own Kafka sink is a JVM package outside the pyspark wheel; this one is a Python Data
Source (Spark 4.1+), so ``pip install aiokprod[spark]`` is all a PySpark job needs — on the
driver and on every executor (a wheel on each node, a packed venv in ``spark.archives``, or a
zip of the package in ``--py-files``: docs/spark.md, "Shipping the sink to a cluster")::

    from aiokprod.spark import KafkaDataSource
    spark.dataSource.register(KafkaDataSource)
    (df.write.format("aiokprod")
       .option("kafka.bootstrap.servers", "broker:9092")
       .option("topic", "orders")
       .mode("append").save())
    df.writeStream.format("aiokprod").option(...).option("checkpointLocation", ...).start()

Why this shape (details in docs/spark.md):

* **Spark's Kafka sink's columns and options**: ``value`` (required), ``key``, ``topic``,
  ``partition``, ``headers``, ``timestamp``; every ``kafka.``-prefixed option goes to the
  producer under its Java name. Both are checked on the driver, when the writer is built, so a
  typo fails ``save()`` / ``start()`` once with the option or column named — not every task.
  ``sink_options(...)`` builds the options from typed settings, so a type checker sees them.
* **Arrow in, ``send_columns`` out**: the writers are ``DataSourceArrowWriter`` /
  ``DataSourceStreamArrowWriter``, so a task gets whole Arrow batches, groups them by topic and
  partition in Arrow and hands each group's buffers to ``Producer.send_columns`` as one call,
  which encodes the records straight from the Arrow buffers (keys hashed with murmur2 in the
  same C pass), per-row headers and timestamps included: no Python object per row.
* **One producer per executor Python worker** in the default mode, reused by every task of the
  same configuration (``aiokprod.spark._executor``), flushed at the end of each task; a task
  with any failed record raises ``KafkaSinkError`` (count and first error), and Spark retries
  it. The transactional mode starts a producer per task instead (its transactional id is the
  task's).
* **At-least-once by default**: idempotence removes duplicates from the producer's own retries
  within a task; a retried task writes its rows again.
* **Exactly-once with** ``.option("transactional", "true")``: each task attempt writes its rows
  in a Kafka transaction of its own and *prepares* it; the driver's ``commit()`` — the one place
  that knows which attempt of each task Spark keeps — commits the kept attempts' transactions,
  each with a marker (a sink-owned consumer group's offset) that lets a re-run skip what is
  committed, and ``abort()`` aborts them (``aiokprod.spark._transactional``). A write is
  visible to read_committed consumers entirely or not at all, each row once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

try:
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        DataSourceStreamWriter,
        WriterCommitMessage,
    )
    from pyspark.sql.types import StructType
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"aiokprod.spark needs pyspark>=4.1 and pyarrow: pip install 'aiokprod[spark]' "
        f"({exc})") from exc

from aiokprod.errors import ConfigError
from aiokprod.spark._executor import KafkaSinkError, TaskSummary, TaskWriter
from aiokprod.spark._options import SinkSettings, settings_from, sink_options
from aiokprod.spark._transactional import (
    PreparedTask,
    TransactionalTaskWriter,
    abort_tasks,
    batch_identity,
    commit_tasks,
    stream_identity,
)

__all__ = ["KafkaDataSource", "KafkaSinkError", "SinkCommitMessage", "sink_options"]

logger = logging.getLogger(__name__)


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task wrote, sent from the executor to the driver's commit."""

    partition_id: int
    attempt: int
    records: int
    bytes: int  # key + value bytes as the DataFrame held them
    topics: tuple[tuple[str, int], ...]  # (topic, records)
    # transactional mode: an earlier run had committed the task's rows already
    skipped: bool = False
    # transactional mode: the attempt's open transaction, for the driver to commit or abort
    prepared: PreparedTask | None = None


class KafkaDataSource(DataSource):
    """The ``"aiokprod"`` data source: batch and streaming writes to Kafka."""

    @classmethod
    def name(cls) -> str:
        return "aiokprod"

    def writer(self, schema: StructType, overwrite: bool) -> KafkaArrowWriter:
        if overwrite:
            raise ConfigError("aiokprod sink: Kafka topics can only be appended to; use "
                              "mode('append')")
        settings = settings_from(self.options, schema)
        if settings.transactional:  # ids for this save(): the write's, unless named, and the run's
            settings = replace(settings, write_id=settings.write_id or uuid.uuid4().hex,
                               run_id=uuid.uuid4().hex)
        return KafkaArrowWriter(settings)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # every output mode appends to the topic, as with Spark's own Kafka sink
        return KafkaStreamArrowWriter(settings_from(self.options, schema))


# Local properties Spark's micro-batch execution sets for the tasks of a micro-batch
# (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY).
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


def _write_task(settings: SinkSettings, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else -1
    attempt = context.attemptNumber() if context is not None else 0
    if not settings.transactional:
        return _message(TaskWriter(settings, partition_id, attempt).write(batches), None)
    if context is None:
        raise KafkaSinkError("aiokprod sink: transactional mode runs inside a Spark task only")
    if settings.write_id is not None:
        identity = batch_identity(settings, partition_id, attempt)
    else:
        query_id = context.getLocalProperty(_QUERY_ID_PROPERTY)
        batch_id = context.getLocalProperty(_BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            raise KafkaSinkError(
                f"aiokprod sink: transactional streaming needs Spark's query and batch ids "
                f"(task local properties {_QUERY_ID_PROPERTY!r}, {_BATCH_ID_PROPERTY!r}); this "
                f"task has {query_id!r}, {batch_id!r}")
        identity = stream_identity(settings, query_id, int(batch_id), partition_id, attempt)
    writer = TransactionalTaskWriter(settings, partition_id, attempt, identity)
    summary = writer.write(batches)
    return _message(summary, writer.prepared)


def _message(summary: TaskSummary, prepared: PreparedTask | None) -> SinkCommitMessage:
    return SinkCommitMessage(summary.partition_id, summary.attempt, summary.records,
                             summary.bytes, summary.topics, summary.skipped, prepared)


def _commit(settings: SinkSettings, messages: list[WriterCommitMessage | None],
            what: str) -> None:
    """The driver's commit: the kept attempts' transactions commit (transactional mode)."""
    ours = _ours(messages)
    if settings.transactional:
        commit_tasks(settings, [m.prepared for m in ours if m is not None and m.prepared])
    logger.info("aiokprod sink: %s wrote %s", what, summarize(ours))


def _abort(settings: SinkSettings, messages: list[WriterCommitMessage | None],
           what: str) -> None:
    """The driver's abort: nothing of the write becomes visible (transactional mode)."""
    ours = _ours(messages)
    if settings.transactional:
        # messages are indexed by Spark partition; None: the task did not finish
        abort_tasks(settings, [m.prepared for m in ours if m is not None and m.prepared],
                    [i for i, m in enumerate(ours) if m is None])
    logger.warning("aiokprod sink: %s failed (%s): %s", what, _mode(settings), summarize(ours))


def summarize(messages: list[SinkCommitMessage | None]) -> str:
    """One line for the driver's log: rows, bytes and topics over all tasks."""
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    topics: dict[str, int] = {}
    for m in done:
        for topic, n in m.topics:
            topics[topic] = topics.get(topic, 0) + n
    records = sum(m.records for m in done)
    size = sum(m.bytes for m in done)
    skipped = sum(1 for m in done if m.skipped)
    per_topic = ", ".join(f"{t}: {n}" for t, n in sorted(topics.items())) or "none"
    already = f" ({skipped} found their rows committed before)" if skipped else ""
    return (f"{records} records ({size} bytes of keys and values) from {len(done)} of "
            f"{len(messages)} tasks{already}; per topic: {per_topic}")


class KafkaArrowWriter(DataSourceArrowWriter):
    """Batch writes: each task sends its Arrow batches; the driver logs what was written."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _write_task(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.settings, messages, "save()")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.settings, messages, "save()")


class KafkaStreamArrowWriter(DataSourceStreamArrowWriter):
    """Streaming writes: each micro-batch's tasks send their Arrow batches."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _write_task(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit(self.settings, messages, f"micro-batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.settings, messages, f"micro-batch {batchId}")


def _mode(settings: SinkSettings) -> str:
    if not settings.transactional:
        return "at-least-once: what the finished tasks wrote stays in Kafka"
    if settings.write_id is not None:
        return ("exactly-once: every task's transaction was aborted, nothing is visible; "
                "running the write again writes every row once")
    return ("exactly-once: every task's transaction was aborted, nothing of the micro-batch "
            "is visible; the restarted query writes it again")


def _ours(messages: list[WriterCommitMessage | None]) -> list[SinkCommitMessage | None]:
    return [m if isinstance(m, SinkCommitMessage) else None for m in messages]
