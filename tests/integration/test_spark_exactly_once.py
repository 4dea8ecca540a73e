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
from aiokprod.producer import transaction_manager
from aiokprod.spark import KafkaDataSource, KafkaSinkError
from aiokprod.spark._executor import close_all_producers
from aiokprod.spark._options import settings_from
from aiokprod.spark._transactional import TransactionalTaskWriter, batch_identity
from support.kafka_cluster import KafkaCluster
from support.reader import read_back
from support.spark_faults import ROWS, arrow_batches_of, faulty_source, frame, read_counts, save

PREFIX = "aiokprod-spark"


@pytest.fixture
def small_arrow_batches(spark: SparkSession) -> Iterator[None]:
    """Arrow batches of 1,000 rows, so a task has several and a fault can fall between two."""
    with arrow_batches_of(spark, 1000):
        yield


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
    twice = sorted(v for v, n in uncommitted.items() if n == 2)
    assert twice == list(range(2000))


def test_a_task_that_committed_and_died_is_not_written_again(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None) -> None:
    """The worker exits after partition 0's transaction committed, before Spark gets the
    result: the retry finds the marker and writes nothing (a naive per-task commit would
    write all 5,000 rows again)."""
    topic = kafka_topic(partitions=2)
    spark.dataSource.register(faulty_source("exit-after-commit"))
    save(frame(spark), kafka.bootstrap, topic, source="aiokprod-exit-after-commit")
    counts = read_counts(kafka.bootstrap, topic, ROWS)
    assert set(counts) == set(range(ROWS)) and set(counts.values()) == {1}
    # nothing was aborted either: the retry never wrote
    uncommitted = read_counts(kafka.bootstrap, topic, ROWS, "read_uncommitted")
    assert sum(uncommitted.values()) == ROWS


def test_a_failed_job_leaves_its_dead_tasks_rows_invisible_and_readers_unblocked(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None) -> None:
    """Partition 0's worker dies half-way on both attempts: the job fails. Partition 1's
    committed rows stay (a transaction per task); none of partition 0's are visible; and the
    driver's abort fences partition 0's transactional id, so read_committed readers are not
    held at the dead transaction's first record for transaction.timeout.ms (60 s): a later
    write is readable at once."""
    topic = kafka_topic(partitions=2)
    spark.dataSource.register(faulty_source("exit-always"))
    with pytest.raises(Exception, match="Python worker exited unexpectedly|crashed"):
        save(frame(spark), kafka.bootstrap, topic, source="aiokprod-exit-always")
    # a later write to the topic is readable at once, not after the dead transaction's timeout
    later = spark.range(ROWS, ROWS + 1000, 1, 1).selectExpr("cast(id as string) as value")
    save(later, kafka.bootstrap, topic)
    counts = read_counts(kafka.bootstrap, topic, ROWS // 2 + 1000, timeout=15)
    assert sorted(counts) == list(range(ROWS // 2, ROWS + 1000))
    assert set(counts.values()) == {1}


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


def test_two_attempts_at_once_commit_one_attempts_rows(
        kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int) -> None:
    """Speculation: a slow first attempt has sent half its rows when a second attempt of the
    same task starts. The second fences the first (same transactional id) and commits; the
    first fails with the fencing named; read_committed shows the second attempt's rows only.
    Rows carry their attempt number so the two are told apart."""
    topic = kafka_topic(partitions=2)
    settings = _value_settings(kafka.bootstrap, topic)
    identity = batch_identity(settings, 0)
    half_sent, second_done = threading.Event(), threading.Event()
    outcome: dict[int, Any] = {}

    def slow() -> Iterator[pa.RecordBatch]:
        yield _tagged(0, 0, 500)
        time.sleep(0.5)  # in the log, uncommitted
        half_sent.set()
        second_done.wait(60)
        yield _tagged(0, 500, 1000)

    def run(attempt: int, batches: Iterator[pa.RecordBatch]) -> None:
        try:
            outcome[attempt] = TransactionalTaskWriter(settings, 0, attempt, identity).write(
                batches)
        except Exception as exc:
            outcome[attempt] = exc

    first = threading.Thread(target=run, args=(0, slow()))
    first.start()
    try:
        assert half_sent.wait(30)
        run(1, iter([_tagged(1, 0, 500), _tagged(1, 500, 1000)]))
    finally:
        second_done.set()
        first.join(60)
        close_all_producers()
    assert not isinstance(outcome[1], Exception), outcome[1]
    assert outcome[1].records == 1000 and not outcome[1].skipped
    assert isinstance(outcome[0], KafkaSinkError)
    assert "was fenced: a newer attempt of the same task" in str(outcome[0])
    assert "ProducerFencedError" in str(outcome[0])
    records = read_back(kafka.bootstrap, topic, expected=1000, timeout=30, settle=1.0)
    values = Counter(r.value.decode() for r in records if r.value is not None)
    assert set(values) == {f"{i}-a1" for i in range(1000)} and set(values.values()) == {1}
    uncommitted = read_back(kafka.bootstrap, topic, expected=1500, timeout=30, settle=0.5,
                            isolation_level="read_uncommitted")
    assert sum(1 for r in uncommitted if r.value is not None and r.value.endswith(b"-a0")) \
        == 500


def test_an_attempt_starting_after_another_committed_writes_nothing(
        kafka: KafkaCluster, kafka_topic: Callable[..., str], transaction_version: int) -> None:
    """The other order: the first attempt commits before the second starts; the second finds
    the marker, writes nothing and succeeds (``skipped``)."""
    topic = kafka_topic()
    settings = _value_settings(kafka.bootstrap, topic)
    identity = batch_identity(settings, 4)
    try:
        done = TransactionalTaskWriter(settings, 4, 0, identity).write([_tagged(0, 0, 300)])
        again = TransactionalTaskWriter(settings, 4, 1, identity).write([_tagged(1, 0, 300)])
    finally:
        close_all_producers()
    assert (done.records, done.skipped) == (300, False)
    assert (again.records, again.skipped) == (0, True)
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
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if query.exception() is not None:
            if allow_failure:
                return
            raise AssertionError(f"streaming query failed: {query.exception()}")
        progress = query.lastProgress
        if progress is not None and progress["batchId"] >= batch_id:
            return
        time.sleep(0.1)
    raise AssertionError(f"micro-batch {batch_id} not reached in 90 s: {query.recentProgress}")


def _fence_leftovers(bootstrap: str, query_id: str, partitions: int) -> None:
    """Abort what a stopped query's interrupted tasks left open (InitProducerId with their
    transactional ids), as its restart would; else read_committed readers wait for
    transaction.timeout.ms."""
    async def fence() -> None:
        for p in range(partitions):
            async with Producer(bootstrap_servers=bootstrap, max_block_ms=20000,
                                transactional_id=f"{PREFIX}-{query_id}-{p}"):
                pass

    asyncio.run(fence())


def _streamed(bootstrap: str, topic: str, at_least: int) -> Counter[int]:
    return read_counts(bootstrap, topic, at_least, timeout=60)


def test_streaming_replay_after_commit_lost_adds_nothing(
        spark: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        tmp_path: Path) -> None:
    """Micro-batch 2's tasks commit, then the driver-side commit fails (as a driver dying
    before Spark records the batch): the query stops, Spark has not recorded batch 2. The
    restarted query replays it, its tasks find their markers and write nothing."""
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
                    if batchId == 2 and not flag.exists():
                        flag.write_text("x")
                        raise RuntimeError("injected: the driver dies before recording batch 2")
                    super().commit(messages, batchId)

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


def test_the_transaction_coordinator_dying_mid_write(
        spark: SparkSession, kafka_factory: Callable[..., KafkaCluster],
        small_arrow_batches: None, tmp_path: Path) -> None:
    """3 nodes (RF 3, min.insync.replicas 2): partition 0's task has sent 2,000 rows when its
    transaction coordinator is killed (SIGKILL). The write either succeeds with every row
    once, or fails naming the cause with nothing visible."""
    cluster = kafka_factory(brokers=3)
    topic = f"spark-coordinator-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2)
    spark.dataSource.register(faulty_source("pause", tmp_path))
    rows = ROWS // 2
    killed: list[int] = []

    def kill_when_paused() -> None:  # save() must run in the main thread (Spark's session)
        try:
            deadline = time.monotonic() + 90
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
              source="aiokprod-pause", **{"kafka.max.block.ms": "30000",
                                          "kafka.request.timeout.ms": "5000"})
    except Exception as exc:
        failure.append(exc)
    finally:
        killer.join(120)
    assert killed, f"the task never paused: {[str(f)[-2000:] for f in failure]}"
    bootstrap = ",".join(f"127.0.0.1:{cluster.port(n)}" for n in cluster.running_node_ids())
    counts = read_counts(bootstrap, topic, rows, timeout=60)
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
    # what each task's producer will be is checked too: transactions need idempotence
    with pytest.raises(ValueError, match="bad producer option.*idempotence"):
        settings_from({**base, "topic": "t", "kafka.enable.idempotence": "false"}, value)


def test_the_driver_summary_counts_tasks_that_found_their_rows_committed() -> None:
    from aiokprod.spark import SinkCommitMessage, summarize
    line = summarize([SinkCommitMessage(0, 1, 0, 0, (), skipped=True),
                      SinkCommitMessage(1, 0, 5, 50, (("t", 5),))])
    assert line == ("5 records (50 bytes of keys and values) from 2 of 2 tasks (1 found their "
                    "rows committed before); per topic: t: 5")
