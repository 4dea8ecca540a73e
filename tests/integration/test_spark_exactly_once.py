"""The sink's exactly-once mode (``transactional=true``) under failures, against Apache Kafka.

Every test reads back with confluent-kafka at ``read_committed`` (what the mode promises: each
row of a successful write once, none of a failed attempt) and, where a failure happened after
rows reached the log, at ``read_uncommitted`` too — which proves the failed attempt really
wrote rows that the transaction markers then hid. Tansu cannot serve here: it does not hide
aborted records from read_committed readers.

Faults are injected inside the sink's own Python worker by data sources made in a function
(``support.spark_faults``, so cloudpickle ships them by value): the task of Spark partition 0,
on its first attempt only, raises or ``os._exit``s between two Arrow batches, or exits right
after its transaction committed; a streaming writer's driver-side ``commit`` fails once, as a
driver that dies after the tasks committed and before Spark recorded the micro-batch. The
Spark session (``local[2,2]``: each task may run twice) is the one ``test_spark_sink.py``
uses; ``test_spark_cluster.py`` runs the faults that matter across executor JVMs.

Each fault was also run with the protection off (the marker check disabled, or at-least-once
mode): docs/spark.md ("Exactly-once") lists what each then showed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from aiokprod import Producer
from aiokprod.producer.transactional import transaction_manager
from aiokprod.spark import KafkaDataSource, KafkaSinkError
from aiokprod.spark._executor import close_all_producers
from aiokprod.spark._options import settings_from
from aiokprod.spark._transactional import (
    TransactionalTaskWriter,
    abort_tasks,
    batch_identity,
    commit_tasks,
)
from support.child_env import python_path_first
from support.kafka_cluster import KafkaCluster
from support.reader import read_back
from support.spark_driver_dies import COMMITTED
from support.spark_faults import (
    ROWS,
    arrow_batches_of,
    assert_read_twice,
    faulty_source,
    frame,
    read_counts,
    save,
)

PREFIX = "aiokprod-spark"


@pytest.fixture
def small_arrow_batches(spark: SparkSession) -> Iterator[None]:
    """Arrow batches of 1,000 rows, so a task has several and a fault can fall between two."""
    with arrow_batches_of(spark, 1000):
        yield


def _only_a_later_write_is_visible(spark: SparkSession, bootstrap: str, topic: str,
                                   first: int, what: str) -> None:
    """After a failed write: 100 rows written later (values ``first`` on) are readable at
    once — no open transaction of the failed one holds read_committed readers back — and
    they are all there is: nothing of the failed write is visible."""
    later = spark.range(first, first + 100, 1, 1).selectExpr("cast(id as string) as value")
    save(later, bootstrap, topic)
    counts = read_counts(bootstrap, topic, 100)
    assert sorted(counts) == list(range(first, first + 100)), \
        f"{len(counts) - 100} rows of {what} are visible"
    assert set(counts.values()) == {1}


# -- batch: retried and re-run tasks -----------------------------------------------------------


def test_a_clean_write_is_visible_exactly_once(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None) -> None:
    topic = kafka_topic(partitions=3)
    save(frame(spark), kafka.bootstrap, topic)
    counts = read_counts(kafka.bootstrap, topic, ROWS)
    assert set(counts) == set(range(ROWS)) and set(counts.values()) == {1}


@pytest.mark.parametrize("fault", ["raise", "exit"])
def test_a_task_failing_half_way_is_retried_and_its_first_rows_stay_hidden(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None, fault: str) -> None:
    """The first attempt of partition 0 sends 2,000 rows, then raises or its worker dies;
    the retry (fencing it, which aborts what it left open) writes all 5,000."""
    topic = kafka_topic(partitions=2)
    spark.dataSource.register(faulty_source(fault))
    save(frame(spark), kafka.bootstrap, topic, source=f"aiokprod-{fault}")
    counts = read_counts(kafka.bootstrap, topic, ROWS)
    assert set(counts) == set(range(ROWS))
    assert set(counts.values()) == {1}, "a row of the failed attempt is visible"
    # the failed attempt's rows did reach the log: read_uncommitted shows them twice
    uncommitted = read_counts(kafka.bootstrap, topic, ROWS + 2000, "read_uncommitted")
    assert_read_twice(uncommitted, range(2000))


def test_a_task_that_wrote_and_died_before_spark_heard_is_never_committed(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None) -> None:
    """The worker exits after partition 0's transaction was prepared, before Spark gets the
    result: Spark does not keep that attempt, so its transaction is never committed (the
    driver aborts it by fencing its id); the retry's rows are the visible ones."""
    topic = kafka_topic(partitions=2)
    spark.dataSource.register(faulty_source("exit-after-write"))
    save(frame(spark), kafka.bootstrap, topic, source="aiokprod-exit-after-write")
    counts = read_counts(kafka.bootstrap, topic, ROWS)
    assert set(counts) == set(range(ROWS)) and set(counts.values()) == {1}
    # the dead attempt did write all its rows, hidden by the abort
    uncommitted = read_counts(kafka.bootstrap, topic, ROWS + ROWS // 2, "read_uncommitted")
    assert_read_twice(uncommitted, range(ROWS // 2))


def test_a_failed_job_leaves_nothing_visible_and_readers_unblocked(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None) -> None:
    """Partition 0's worker dies half-way on both attempts: the job fails. Nothing of it is
    visible — partition 1 finished, but only the driver commits, and it aborts instead (a
    per-task commit left partition 1's 5,000 rows visible). The driver's abort also fences
    partition 0's attempts' ids, so read_committed readers are not held at the dead
    transactions' first records for transaction.timeout.ms: a later write is readable at
    once."""
    topic = kafka_topic(partitions=2)
    spark.dataSource.register(faulty_source("exit-always"))
    with pytest.raises(Exception, match="Python worker exited unexpectedly|crashed"):
        save(frame(spark), kafka.bootstrap, topic, source="aiokprod-exit-always")
    _only_a_later_write_is_visible(spark, kafka.bootstrap, topic, ROWS, "the failed job")


# -- faults upstream of the sink, and the driver's decision ------------------------------------

# two partitions of 10 Arrow batches of 10,000 rows (Spark's default batch size): a fault then
# meets batches in flight between the upstream worker, the JVM and the sink's worker
UPSTREAM_ROWS = 200_000


def _upstream(fault: str, at: int, *, partition: int = 0, every_attempt: bool = False,
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function before the sink (its own Python worker, not the sink's)
    whose task for ``partition`` fails (``raise``, or ``exit``: the worker ends with
    ``os._exit``) before its Arrow batch number ``at`` — 10 is after every batch went through
    — on the first attempt, or on every one. Made in a function, so cloudpickle ships it by
    value."""
    def upstream(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import os

        from pyspark import TaskContext
        context = TaskContext.get()
        assert context is not None
        failing = context.partitionId() == partition and (
            every_attempt or context.attemptNumber() == 0)

        def fail() -> None:
            if fault == "raise":
                raise RuntimeError("injected: the upstream function fails")
            os._exit(1)

        for i, batch in enumerate(batches):
            if failing and i == at:
                fail()
            yield batch
        if failing:
            fail()

    return upstream


def _through_upstream(spark: SparkSession, function: Any, rows: int = UPSTREAM_ROWS) -> Any:
    return frame(spark, rows).mapInArrow(function, "value string")


@pytest.mark.parametrize("at", [2, 5, 10], ids=["start", "middle", "end"])
@pytest.mark.parametrize("fault", ["raise", "exit"])
def test_a_failure_upstream_of_the_sink_loses_nothing(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        fault: str, at: int) -> None:
    """The function before the sink fails in partition 0's first attempt; pyspark may end
    the sink's input as if it were complete. Spark retries the task and the job succeeds:
    every row once at read_committed (a sink committing when its input ended lost the rest
    of the partition for good)."""
    topic = kafka_topic(partitions=2)
    save(_through_upstream(spark, _upstream(fault, at)), kafka.bootstrap, topic)
    counts = read_counts(kafka.bootstrap, topic, UPSTREAM_ROWS)
    assert sorted(set(range(UPSTREAM_ROWS)) - set(counts))[:5] == [], \
        f"{UPSTREAM_ROWS - len(counts)} rows missing"
    assert set(counts.values()) == {1}, "a row is visible twice"


@pytest.mark.parametrize("kafka_release", ["3.9.1"], indirect=True)
def test_a_failure_upstream_on_kafka_3_9_with_transaction_version_1(
        spark: SparkSession, kafka_release: KafkaCluster) -> None:
    """The same on Apache Kafka 3.9.1, where every transaction is version 1 (KIP-98:
    AddPartitionsToTxn, no epoch bump at EndTxn): the driver's EndTxn by producer id and
    epoch commits the kept attempt's transaction there too."""
    topic = f"spark-tv1-{uuid.uuid4().hex[:8]}"
    kafka_release.create_topic(topic, 2)
    save(_through_upstream(spark, _upstream("exit", 5)), kafka_release.bootstrap, topic)
    counts = read_counts(kafka_release.bootstrap, topic, UPSTREAM_ROWS)
    assert set(counts) == set(range(UPSTREAM_ROWS)) and set(counts.values()) == {1}


def test_a_cancelled_job_leaves_nothing_visible(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None, tmp_path: Path) -> None:
    """The job is cancelled (``SparkContext.cancelAllJobs``) while partition 0's upstream
    holds before its fourth Arrow batch: the cancelled tasks' sink inputs may end as if
    complete, but the driver never commits, so nothing of the write is visible and a later
    write is readable at once."""
    topic = kafka_topic(partitions=2)
    held = tmp_path / "held"

    def hold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time as clock
        from pathlib import Path as P

        from pyspark import TaskContext
        context = TaskContext.get()
        for i, batch in enumerate(batches):
            if context is not None and context.partitionId() == 0 and i == 3:
                P(str(held)).write_text("x")
                deadline = clock.monotonic() + 300
                while clock.monotonic() < deadline:  # until the task is cancelled
                    clock.sleep(0.05)
            yield batch

    def cancel_when_held() -> None:
        deadline = time.monotonic() + 300
        while not held.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        spark.sparkContext.cancelAllJobs()

    canceller = threading.Thread(target=cancel_when_held)
    canceller.start()
    try:
        with pytest.raises(Exception, match="cancel"):
            save(_through_upstream(spark, hold), kafka.bootstrap, topic)
    finally:
        canceller.join(360)
    assert held.exists()
    _only_a_later_write_is_visible(spark, kafka.bootstrap, topic, UPSTREAM_ROWS,
                                   "the cancelled job")


def test_a_job_failing_upstream_leaves_nothing_visible(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str]) -> None:
    """Partition 1's upstream function fails half-way on every attempt, so the job fails:
    no row of it is visible (a per-task commit left partition 0's rows and those partition
    1's attempts had before the failure), and a later write is readable at once."""
    topic = kafka_topic(partitions=2)
    with pytest.raises(Exception, match="injected: the upstream function fails"):
        save(_through_upstream(spark, _upstream("raise", 4, partition=1,
                                                every_attempt=True)),
             kafka.bootstrap, topic)
    _only_a_later_write_is_visible(spark, kafka.bootstrap, topic, UPSTREAM_ROWS,
                                   "the failed job")


def test_a_write_outlasting_the_transaction_timeout_fails_and_leaves_nothing(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None) -> None:
    """transaction.timeout.ms 4 s, and partition 1's upstream stalls for 8 s once partition
    0's sink has its rows in the log (read_uncommitted: the high watermarks), so partition 0's
    transaction, begun before them, is at least 8 s old when the driver would commit, after
    partition 1's task: the write fails saying so (a sink committing per task committed
    partition 0 and, later, partition 1), and nothing is visible — partition 1's transaction,
    young, is aborted too.

    Partition 1's own sink cannot be the old one, whatever the stall: pyspark's worker writes
    mapInArrow's output into a 64 KB buffered socket file, flushed at the end, not per batch
    (without SPARK_PIPELINED_UDF), so the upstream's first Arrow batch (about 8 KB) reaches
    that sink only when the stall ends. A stall timed from the upstream's first batch would
    race partition 0's sink starting."""
    topic = kafka_topic(partitions=2)
    bootstrap = kafka.bootstrap
    rows = 4000
    partition_0_rows = rows // 2  # frame() spreads the rows evenly over the two partitions

    def slow_partition_1(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time as clock

        from confluent_kafka import Consumer, TopicPartition
        from pyspark import TaskContext

        def partition_0_in_log() -> None:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "aiokprod-stall",
                                 "log_level": 3})
            try:
                deadline = clock.monotonic() + 300
                while sum(consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                         timeout=30)[1]
                          for p in (0, 1)) < partition_0_rows:
                    if clock.monotonic() > deadline:
                        raise AssertionError("partition 0's rows never reached the log")
                    clock.sleep(0.1)
            finally:
                consumer.close()

        context = TaskContext.get()
        for i, batch in enumerate(batches):
            if context is not None and context.partitionId() == 1 and i == 1:
                partition_0_in_log()
                clock.sleep(8)
            yield batch

    with pytest.raises(Exception, match="outlasted transaction.timeout.ms=4000"):
        save(_through_upstream(spark, slow_partition_1, rows), bootstrap, topic,
             **{"kafka.transaction.timeout.ms": "4000"})
    _only_a_later_write_is_visible(spark, bootstrap, topic, 5000, "the write")


def test_the_driver_dying_between_two_commits_and_a_rerun_give_every_row_once(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None) -> None:
    """The driver's commit worker commits partition 0's transaction, then its process dies
    (``os._exit``) before partition 1's: the job fails with partition 0 visible. Running the
    same write again (same ``transactional.write.id``) skips partition 0, whose marker
    committed with it, and writes partition 1: every row once."""
    topic = kafka_topic(partitions=2)
    write_id = f"rerun-{uuid.uuid4().hex[:8]}"

    class DiesMidCommit(KafkaDataSource):
        @classmethod
        def name(cls) -> str:
            return "aiokprod-dies-mid-commit"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            inner = super().writer(schema, overwrite)

            class Writer(type(inner)):  # type: ignore[misc]
                def commit(self, messages: Any) -> None:
                    import os
                    first = [m.prepared for m in messages if m is not None and m.prepared and
                             m.partition_id == 0]
                    commit_tasks(self.settings, first)
                    os._exit(1)

            return Writer(inner.settings)

    spark.dataSource.register(DiesMidCommit)
    options = {"transactional.write.id": write_id}
    with pytest.raises(Exception):  # noqa: B017 - whatever Spark makes of a dead worker
        save(frame(spark), kafka.bootstrap, topic, source="aiokprod-dies-mid-commit",
             **options)
    half = read_counts(kafka.bootstrap, topic, ROWS // 2)
    assert sorted(half) == list(range(ROWS // 2)), "partition 0 was committed before the death"
    save(frame(spark), kafka.bootstrap, topic, **options)
    counts = read_counts(kafka.bootstrap, topic, ROWS)
    assert set(counts) == set(range(ROWS)) and set(counts.values()) == {1}


def test_the_driver_jvm_killed_during_its_commit_and_a_rerun_give_every_row_once(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None, tmp_path: Path) -> None:
    """A driver of its own (``support/spark_driver_dies.py``, another process) commits
    partition 0's transaction and then its JVM is SIGKILLed: no ``abort()`` runs, partition
    1's transaction is left open. Partition 0's rows are visible, partition 1's not. A re-run
    of the write with the same ``transactional.write.id`` aborts the open transaction (its
    attempt reuses the id), skips partition 0 (its marker committed with it) and writes
    partition 1: every row once."""
    topic = kafka_topic(partitions=2)
    write_id = f"killed-{uuid.uuid4().hex[:8]}"
    env = python_path_first(dict(os.environ, PYSPARK_PYTHON=sys.executable),
                            Path(__file__).parents[1])
    driver = subprocess.Popen([sys.executable, "-m", "support.spark_driver_dies", kafka.bootstrap,
                               topic, write_id, str(ROWS), str(tmp_path)], env=env,
                              start_new_session=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    try:
        output, _ = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)
    text = output.decode(errors="replace")
    assert driver.returncode != 0 and "did not die" not in text, text[-3000:]
    assert (tmp_path / COMMITTED).exists(), text[-3000:]
    assert sorted(read_counts(kafka.bootstrap, topic, ROWS // 2)) == list(range(ROWS // 2)), \
        text[-3000:]
    save(frame(spark), kafka.bootstrap, topic, **{"transactional.write.id": write_id})
    counts = read_counts(kafka.bootstrap, topic, ROWS)
    assert set(counts) == set(range(ROWS)) and set(counts.values()) == {1}


# -- two attempts of one task at once (speculative execution) --------------------------------


@pytest.fixture(params=[1, 2], ids=["txn-v1", "txn-v2"])
def transaction_version(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The in-process tests run under KIP-98's protocol and KIP-890's transaction version 2
    (Kafka 4.1.1 finalizes version 2 and still serves version 1); Spark's workers use 2."""
    monkeypatch.setattr(transaction_manager, "MAX_TRANSACTION_VERSION", request.param)
    return int(request.param)


def _value_settings(bootstrap: str, topic: str) -> Any:
    settings = settings_from({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                              "transactional": "true", "kafka.linger.ms": "5"},
                             StructType([StructField("value", StringType())]))
    return replace(settings, write_id=uuid.uuid4().hex)


def _tagged(attempt: int, start: int, stop: int) -> pa.RecordBatch:
    return pa.record_batch({"value": pa.array([f"{i}-a{attempt}" for i in range(start, stop)])})


def _read_tagged(bootstrap: str, topic: str, expected: int) -> Counter[str]:
    records = read_back(bootstrap, topic, expected=expected, timeout=30, settle=1.0)
    return Counter(r.value.decode() for r in records if r.value is not None)


def test_a_duplicate_attempt_after_the_kept_one_finished_does_not_abort_it(
        kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int) -> None:
    """Speculation, the kept attempt first: attempt 0 prepares; a duplicate attempt 1 starts
    after it finished and prepares too. Spark keeps attempt 0: the driver's commit of it
    succeeds (with one transactional id per task, attempt 1's start fenced attempt 0 and
    aborted the rows Spark kept), and only its rows are visible."""
    topic = kafka_topic(partitions=2)
    settings = _value_settings(kafka.bootstrap, topic)
    writers = [TransactionalTaskWriter(settings, 0, a, batch_identity(settings, 0, a))
               for a in (0, 1)]
    try:
        for attempt, writer in enumerate(writers):
            assert writer.write([_tagged(attempt, 0, 500)]).records == 500
    finally:
        close_all_producers()
    kept, duplicate = (w.prepared for w in writers)
    assert kept is not None and duplicate is not None
    commit_tasks(settings, [kept])
    abort_tasks(settings, [duplicate], [])
    values = _read_tagged(kafka.bootstrap, topic, 500)
    assert set(values) == {f"{i}-a0" for i in range(500)} and set(values.values()) == {1}


def test_a_slow_attempt_is_fenced_when_the_driver_commits_a_later_one(
        kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int) -> None:
    """Speculation, the kept attempt second: a slow attempt 0 has sent half its rows when
    attempt 1 runs and prepares. Spark keeps attempt 1; the driver commits it and fences
    attempt 0's id, so attempt 0 fails naming the fencing and its rows stay hidden."""
    topic = kafka_topic(partitions=2)
    settings = _value_settings(kafka.bootstrap, topic)
    half_sent, committed = threading.Event(), threading.Event()
    outcome: dict[int, Any] = {}

    def slow() -> Iterator[pa.RecordBatch]:
        yield _tagged(0, 0, 500)
        half_sent.set()
        committed.wait(300)  # set as soon as attempt 1 is committed (or the test failed)
        yield _tagged(0, 500, 1000)

    def run(attempt: int, batches: Iterator[pa.RecordBatch]) -> TransactionalTaskWriter:
        writer = TransactionalTaskWriter(settings, 0, attempt, batch_identity(settings, 0,
                                                                              attempt))
        try:
            outcome[attempt] = writer.write(batches)
        except Exception as exc:
            outcome[attempt] = exc
        return writer

    first = threading.Thread(target=run, args=(0, slow()))
    first.start()
    try:
        assert half_sent.wait(300)
        second = run(1, iter([_tagged(1, 0, 500), _tagged(1, 500, 1000)]))
        assert second.prepared is not None, outcome[1]
        commit_tasks(settings, [second.prepared])
    finally:
        committed.set()
        first.join(300)
        close_all_producers()
    assert isinstance(outcome[0], KafkaSinkError), outcome[0]
    assert "was fenced" in str(outcome[0]) and "ProducerFencedError" in str(outcome[0])
    values = _read_tagged(kafka.bootstrap, topic, 1000)
    assert set(values) == {f"{i}-a1" for i in range(1000)} and set(values.values()) == {1}


def test_an_attempt_starting_after_the_driver_aborted_writes_nothing(
        kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int) -> None:
    """Spark calls ``abort()`` while cancelled tasks may still run. An attempt whose producer
    starts after the driver's abort (and its fences) finds the run's "aborted" marker and
    writes nothing, so no transaction of it holds read_committed readers back; a re-run of the
    same write id (another run) is not affected by the marker."""
    topic = kafka_topic()
    settings = replace(_value_settings(kafka.bootstrap, topic), run_id=uuid.uuid4().hex)
    abort_tasks(settings, [], [0])
    late = TransactionalTaskWriter(settings, 0, 0, batch_identity(settings, 0, 0))
    try:
        with pytest.raises(KafkaSinkError, match="the driver aborted this write already"):
            late.write([_tagged(0, 0, 100)])
        rerun = replace(settings, run_id=uuid.uuid4().hex)
        writer = TransactionalTaskWriter(rerun, 0, 0, batch_identity(rerun, 0, 0))
        assert writer.write([_tagged(1, 0, 100)]).records == 100
        assert writer.prepared is not None
        commit_tasks(rerun, [writer.prepared])
    finally:
        close_all_producers()
    values = _read_tagged(kafka.bootstrap, topic, 100)
    assert set(values) == {f"{i}-a1" for i in range(100)} and set(values.values()) == {1}


def test_a_rerun_with_the_same_write_id_skips_committed_tasks_and_consumes_their_input(
        kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int) -> None:
    """An attempt of a write whose task the driver already committed (a re-run with the same
    ``transactional.write.id``) finds the marker, reads its input to the end and writes
    nothing."""
    topic = kafka_topic()
    settings = _value_settings(kafka.bootstrap, topic)
    first = TransactionalTaskWriter(settings, 4, 0, batch_identity(settings, 4, 0))
    try:
        assert first.write([_tagged(0, 0, 300)]).records == 300
        assert first.prepared is not None
        commit_tasks(settings, [first.prepared])
        consumed: list[int] = []

        def input_() -> Iterator[pa.RecordBatch]:
            for i in range(3):
                consumed.append(i)
                yield _tagged(1, i * 100, i * 100 + 100)

        again = TransactionalTaskWriter(settings, 4, 0, batch_identity(settings, 4, 0))
        summary = again.write(input_())
    finally:
        close_all_producers()
    assert (summary.records, summary.skipped, again.prepared) == (0, True, None)
    assert consumed == [0, 1, 2]
    records = read_back(kafka.bootstrap, topic, expected=300, timeout=30, settle=1.0,
                        isolation_level="read_uncommitted")
    assert sorted(r.value for r in records if r.value is not None) == sorted(
        f"{i}-a0".encode() for i in range(300))


# -- streaming ----------------------------------------------------------------------------------


def _stream(spark: SparkSession, bootstrap: str, topic: str, checkpoint: Path,
            source: str = "aiokprod") -> Any:
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 500).option("numPartitions", 2).load()
        .selectExpr("cast(value as string) as value")
        .writeStream.format(source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.linger.ms", "2")
        .option("topic", topic)
        .option("transactional", "true")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def _run_until(query: Any, batch_id: int, *, allow_failure: bool = False) -> None:
    # bounded far above the normal seconds: a first micro-batch starts the Python workers and
    # the producers, 86 s once on a machine running two other suites
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if query.exception() is not None:
            if allow_failure:
                return
            raise AssertionError(f"streaming query failed: {query.exception()}")
        progress = query.lastProgress
        if progress is not None and progress["batchId"] >= batch_id:
            return
        time.sleep(0.1)
    raise AssertionError(f"micro-batch {batch_id} not reached in 300 s: {query.recentProgress}")


def _fence_leftovers(bootstrap: str, query_id: str, partitions: int) -> None:
    """Abort what a stopped query's interrupted tasks left open (InitProducerId with their
    transactional ids), as its restart would; else read_committed readers wait for
    transaction.timeout.ms."""
    async def fence() -> None:
        for p in range(partitions):
            for attempt in range(2):  # local[2,2]: two attempts per task
                async with Producer(bootstrap_servers=bootstrap, max_block_ms=20000,
                                    transactional_id=f"{PREFIX}-{query_id}-{p}-{attempt}"):
                    pass

    asyncio.run(fence())


def _streamed(bootstrap: str, topic: str, at_least: int) -> Counter[int]:
    return read_counts(bootstrap, topic, at_least)


def test_streaming_replay_after_commit_lost_adds_nothing(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        tmp_path: Path) -> None:
    """The driver commits micro-batch 2's transactions in Kafka, then fails before Spark
    records the batch (as a driver dying between Kafka's commit and Spark's commit log): the
    query stops. The restarted query replays batch 2; its tasks find their markers, consume
    their input and write nothing."""
    topic = kafka_topic(partitions=2)
    flag = tmp_path / "failed-once"

    class LosesCommit(KafkaDataSource):
        @classmethod
        def name(cls) -> str:
            return "aiokprod-loses-commit"

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            inner = super().streamWriter(schema, overwrite)
            base = type(inner)

            class Writer(base):  # type: ignore[misc,valid-type]
                def commit(self, messages: Any, batchId: int) -> None:
                    super().commit(messages, batchId)
                    if batchId == 2 and not flag.exists():
                        flag.write_text("x")
                        raise RuntimeError("injected: the driver dies before recording batch 2")

            return Writer(inner.settings)

    spark.dataSource.register(LosesCommit)
    checkpoint = tmp_path / "checkpoint"
    query = _stream(spark, kafka.bootstrap, topic, checkpoint, source="aiokprod-loses-commit")
    try:
        _run_until(query, 99, allow_failure=True)
    finally:
        query.stop()
    assert flag.exists() and "injected" in str(query.exception())
    # Spark recorded batches 0 and 1; the sink committed batch 2 too (1,500 rows visible)
    assert sorted(_streamed(kafka.bootstrap, topic, 1500)) == list(range(1500))
    restarted = _stream(spark, kafka.bootstrap, topic, checkpoint)
    try:
        assert restarted.id == query.id
        _run_until(restarted, 4)
    finally:
        restarted.stop()
    _fence_leftovers(kafka.bootstrap, str(query.id), 2)
    recorded = max(p["batchId"] for p in restarted.recentProgress)
    counts = _streamed(kafka.bootstrap, topic, (recorded + 1) * 500)
    assert set(range((recorded + 1) * 500)) <= set(counts)
    assert set(counts.values()) == {1}, "the replayed micro-batch wrote its rows again"


def test_streaming_stop_and_restart_loses_and_repeats_nothing(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        tmp_path: Path) -> None:
    topic = kafka_topic(partitions=2)
    checkpoint = tmp_path / "checkpoint"
    first = _stream(spark, kafka.bootstrap, topic, checkpoint)
    try:
        _run_until(first, 2)
    finally:
        first.stop()  # may interrupt a micro-batch's tasks mid-transaction
    second = _stream(spark, kafka.bootstrap, topic, checkpoint)
    try:
        _run_until(second, max(p["batchId"] for p in first.recentProgress) + 3)
    finally:
        second.stop()
    _fence_leftovers(kafka.bootstrap, str(first.id), 2)
    recorded = max(p["batchId"] for p in second.recentProgress)
    counts = _streamed(kafka.bootstrap, topic, (recorded + 1) * 500)
    assert set(range((recorded + 1) * 500)) <= set(counts), "a recorded row is missing"
    assert set(counts.values()) == {1}, "a row was written twice"


def test_streaming_stopped_mid_micro_batch_and_restarted_loses_and_repeats_nothing(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None, tmp_path: Path) -> None:
    """Micro-batch 2's rows are moving (partition 0 past 3 of its 10 Arrow batches) when the
    query is stopped; stopping cancels the tasks, whose sink inputs may end as if complete. The
    restarted query replays batch 2: every row of every recorded batch once (a sink
    committing when its input ended marked the partial partition done, losing its rest)."""
    topic = kafka_topic(partitions=2)
    held, restarted = tmp_path / "held", tmp_path / "restarted"
    per_batch = 20_000

    def slow_batch_2(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Micro-batch 2 of the first run flows slowly (0.1 s an Arrow batch), so the stop
        lands while its rows move; past its third batch the test is told to stop, and
        partition 0 holds there until the query was stopped (a stop slower than the
        batch's remaining sleeps on a loaded machine would otherwise let it finish)."""
        import time as clock
        from pathlib import Path as P

        from pyspark import TaskContext
        context = TaskContext.get()
        assert context is not None
        slow = (context.getLocalProperty("streaming.sql.batchId") == "2"
                and not P(str(restarted)).exists())
        for i, batch in enumerate(batches):
            if slow:
                clock.sleep(0.1)
                if i == 3 and context.partitionId() == 0:
                    P(str(held)).write_text("x")
                    deadline = clock.monotonic() + 120
                    while not P(str(restarted)).exists() and clock.monotonic() < deadline:
                        clock.sleep(0.05)  # until the query is stopped (the task cancelled)
            yield batch

    def start() -> Any:
        return (spark.readStream.format("rate-micro-batch")
                .option("rowsPerBatch", per_batch).option("numPartitions", 2).load()
                .selectExpr("cast(value as string) as value")
                .mapInArrow(slow_batch_2, "value string")
                .writeStream.format("aiokprod")
                .option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("kafka.linger.ms", "2").option("topic", topic)
                .option("transactional", "true")
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="200 milliseconds").start())

    first = start()
    try:
        deadline = time.monotonic() + 300  # see _run_until
        while not held.exists():
            assert time.monotonic() < deadline, f"batch 2 never ran: {first.recentProgress}"
            assert first.exception() is None, first.exception()
            time.sleep(0.05)
    finally:
        first.stop()
        restarted.write_text("x")
    assert max(p["batchId"] for p in first.recentProgress) == 1  # batch 2 was not recorded
    second = start()
    try:
        _run_until(second, 4)
    finally:
        second.stop()
    _fence_leftovers(kafka.bootstrap, str(first.id), 2)
    recorded = max(p["batchId"] for p in second.recentProgress)
    counts = read_counts(kafka.bootstrap, topic, (recorded + 1) * per_batch)
    missing = set(range((recorded + 1) * per_batch)) - set(counts)
    assert not missing, f"{len(missing)} rows of recorded micro-batches are missing"
    assert set(counts.values()) == {1}, "a row was written twice"


# -- the transaction coordinator dies mid-write --------------------------------------------------


def _java_hash(text: str) -> int:
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _transaction_coordinator(cluster: KafkaCluster, transactional_id: str) -> int:
    """The node leading the __transaction_state partition of ``transactional_id`` (Kafka:
    ``Utils.abs(id.hashCode) % transaction.state.log.num.partitions``)."""
    partitions = len(cluster.partitions("__transaction_state"))
    h = _java_hash(transactional_id)
    index = 0 if h == -(1 << 31) else abs(h) % partitions
    return cluster.leader_of("__transaction_state", index)


@pytest.mark.parametrize("fault", ["pause", "pause-commit"], ids=["mid-write", "at-commit"])
def test_the_transaction_coordinator_dying(
        spark: SparkSession, kafka_factory: Callable[..., KafkaCluster],
        small_arrow_batches: None, tmp_path: Path, fault: str) -> None:
    """3 nodes (RF 3, min.insync.replicas 2): the transaction coordinator of partition 0's
    task is killed (SIGKILL) when the task has sent 2,000 rows, or when the driver is about
    to commit. The write either succeeds with every row once, or fails naming the cause with
    nothing visible."""
    cluster = kafka_factory(brokers=3)
    topic = f"spark-coordinator-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2)
    spark.dataSource.register(faulty_source(fault, tmp_path))
    rows = ROWS // 2
    killed: list[int] = []

    def kill_when_paused() -> None:  # save() must run in the main thread (Spark's session)
        try:
            deadline = time.monotonic() + 300
            while not (tmp_path / "paused").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            if (tmp_path / "paused").exists():
                victim = _transaction_coordinator(cluster, (tmp_path / "paused").read_text())
                cluster.kill_broker(victim)
                killed.append(victim)
        finally:
            (tmp_path / "resume").write_text("go")

    killer = threading.Thread(target=kill_when_paused)
    killer.start()
    failure: list[BaseException] = []
    try:
        save(frame(spark, rows, partitions=1), cluster.bootstrap, topic,
              source=f"aiokprod-{fault}", **{"kafka.max.block.ms": "30000",
                                          "kafka.request.timeout.ms": "5000"})
    except Exception as exc:
        failure.append(exc)
    finally:
        killer.join(360)
    assert killed, f"the task never paused: {[str(f)[-2000:] for f in failure]}"
    bootstrap = ",".join(f"127.0.0.1:{cluster.port(n)}" for n in cluster.running_node_ids())
    counts = read_counts(bootstrap, topic, rows)
    if failure:
        message = str(failure[0])
        assert "aiokprod sink" in message and "transactional id" in message, message
        assert not counts, "a failed write left rows visible"
    else:
        assert set(counts) == set(range(rows)) and set(counts.values()) == {1}



def test_transactional_options_are_checked_on_the_driver() -> None:
    value = StructType([StructField("value", StringType())])
    with_topic = StructType([StructField("value", StringType()),
                             StructField("topic", StringType())])
    base = {"kafka.bootstrap.servers": "h:1", "transactional": "true"}
    settings = settings_from({**base, "topic": "t"}, value)
    assert (settings.transactional, settings.marker_topic, settings.id_prefix) == (
        True, "t", PREFIX)
    assert "transactional='aiokprod-spark'" in repr(settings)
    assert settings_from({**base, "transactional.marker.topic": "m",
                          "transactional.id.prefix": "etl"}, with_topic).marker_topic == "m"
    with pytest.raises(ValueError, match="needs a topic for its commit markers"):
        settings_from(base, with_topic)
    with pytest.raises(ValueError, match="need 'transactional'='true'"):
        settings_from({"kafka.bootstrap.servers": "h:1", "topic": "t",
                       "transactional.marker.topic": "m"}, value)
    with pytest.raises(ValueError, match="must not be empty"):
        settings_from({**base, "topic": "t", "transactional.id.prefix": " "}, value)
    # a stable write id for re-runs; the transaction must last the whole write (15 min)
    rerun = settings_from({**base, "topic": "t", "transactional.write.id": "daily"}, value)
    assert (rerun.write_id, rerun.transaction_timeout_ms) == ("daily", 900_000)
    with pytest.raises(ValueError, match="need 'transactional'='true'"):
        settings_from({"kafka.bootstrap.servers": "h:1", "topic": "t",
                       "transactional.write.id": "daily"}, value)
    # what each task's producer will be is checked too: transactions need idempotence
    with pytest.raises(ValueError, match="bad producer option.*idempotence"):
        settings_from({**base, "topic": "t", "kafka.enable.idempotence": "false"}, value)


def test_the_driver_summary_counts_tasks_that_found_their_rows_committed() -> None:
    from aiokprod.spark import SinkCommitMessage, summarize
    line = summarize([SinkCommitMessage(0, 1, 0, 0, (), skipped=True),
                      SinkCommitMessage(1, 0, 5, 50, (("t", 5),))])
    assert line == ("5 records (50 bytes of keys and values) from 2 of 2 tasks (1 found their "
                    "rows committed before); per topic: t: 5")
