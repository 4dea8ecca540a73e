"""The PySpark sink under a real local Spark (``local[2]``, Java 17) against Tansu.

One SparkSession serves every Spark test file (``spark``, from ``support.spark_fixtures``:
``local[2,2]``, so a failed task is retried once). Records are read back with confluent-kafka
(``support.reader``), not with anything of ours. The exactly-once mode's tests are in
``test_spark_exactly_once.py`` (Apache Kafka: Tansu does not hide aborted records).

A new topic's partitions are written by one Spark task here: Tansu 0.6.0 can lose one of two
idempotent producers' first batches to a new partition when they arrive together (it acknowledges
both; a reader finds only the later one). librdkafka's producers meet it too: 1 of 60 rounds of
two producers writing 250 records each into a new partition, none of 80 once the partition held a
record, none of 80 without idempotence. Several tasks writing at once are tested against Apache
Kafka (``test_spark_exactly_once.py``, ``test_spark_cluster.py``).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiokprod.devbroker import TansuBroker
from aiokprod.spark import (
    KafkaArrowWriter,
    KafkaSinkError,
    SinkCommitMessage,
)
from aiokprod.spark._executor import TaskWriter, cached_producer_count, close_all_producers
from aiokprod.spark._options import settings_from
from support.reader import read_back

HEADERS = ArrayType(StructType([StructField("key", StringType()),
                                StructField("value", BinaryType())]))


def _save(df: DataFrame, bootstrap: str, topic: str | None = None, **options: str) -> None:
    writer = df.write.format("aiokprod").option("kafka.bootstrap.servers", bootstrap)
    if topic is not None:
        writer = writer.option("topic", topic)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def _key_value_frame(spark: SparkSession, rows: int, partitions: int = 1) -> DataFrame:
    # 100-byte values: the id, then padding
    return spark.range(0, rows, 1, partitions).selectExpr(
        "cast(cast(id as string) as binary) as key",
        "cast(rpad(cast(id as string), 100, 'x') as binary) as value")


def _check_key_values(records: list[Any], rows: int) -> None:
    assert len(records) == rows
    keys = sorted(int(r.key) for r in records)
    assert keys == list(range(rows))
    for r in records[:1000]:
        assert r.value == r.key.decode().ljust(100, "x").encode()


# -- batch -------------------------------------------------------------------------------------


def test_batch_write_100k_rows(spark: SparkSession, tansu: TansuBroker,
                               new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)
    rows = 100_000
    _save(_key_value_frame(spark, rows), tansu.bootstrap, topic)
    records = read_back(tansu.bootstrap, topic, expected=rows, timeout=60, settle=0.5)
    _check_key_values(records, rows)
    # keyed records: murmur2 spreads them over all three partitions
    assert {r.partition for r in records} == {0, 1, 2}


@pytest.mark.slow
def test_batch_write_1m_rows(spark: SparkSession, tansu: TansuBroker,
                             new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)
    rows = 1_000_000
    _save(_key_value_frame(spark, rows), tansu.bootstrap, topic,
          **{"kafka.batch.size": "262144"})
    records = read_back(tansu.bootstrap, topic, expected=rows, timeout=180, settle=0.5)
    _check_key_values(records, rows)


def test_columns_are_preserved(spark: SparkSession, tansu: TansuBroker,
                               new_topic: Callable[..., str]) -> None:
    """key, value, topic, partition, headers and timestamp columns, string and binary alike."""
    first, second = new_topic(partitions=3), new_topic(partitions=2)
    base = dt.datetime(2024, 5, 6, 7, 8, 9, 123000)
    schema = StructType([
        StructField("key", StringType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("headers", HEADERS),
        StructField("timestamp", TimestampType()),
    ])
    data = []
    for i in range(40):
        data.append((
            None if i % 10 == 9 else f"k{i}",
            None if i % 13 == 12 else f"v{i}".encode(),
            first if i % 2 == 0 else second,
            i % 2,
            [{"key": "h", "value": str(i).encode()}, {"key": "dup", "value": None}]
            if i % 3 else None,
            base + dt.timedelta(seconds=i),
        ))
    _save(spark.createDataFrame(data, schema).coalesce(1), tansu.bootstrap)
    got = {}
    for topic in (first, second):
        for r in read_back(tansu.bootstrap, topic, expected=20, timeout=30, settle=0.3):
            got[r.headers[0][1] if r.headers else (r.key, r.value)] = (topic, r)
    assert len(got) == 40
    for i, (key, value, topic, partition, headers, stamp) in enumerate(data):
        lookup = str(i).encode() if headers else (
            None if key is None else key.encode(), value)
        seen_topic, record = got[lookup]
        assert seen_topic == topic
        assert record.partition == partition
        assert record.key == (None if key is None else key.encode())
        assert record.value == value
        assert record.headers == ([("h", str(i).encode()), ("dup", None)] if headers else [])
        # Spark hands naive datetimes over as session-local time, as Python's timestamp() does
        assert record.timestamp == int(stamp.timestamp() * 1000)


def test_string_and_binary_values_write_the_same_bytes(
        spark: SparkSession, tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    words = ["plain", "ünïcödé ✓", ""]
    as_string = spark.createDataFrame([(w,) for w in words], "value string")
    as_binary = spark.createDataFrame([(w.encode(),) for w in words], "value binary")
    _save(as_string.coalesce(1), tansu.bootstrap, topic)
    _save(as_binary.coalesce(1), tansu.bootstrap, topic)
    values = [r.value for r in read_back(tansu.bootstrap, topic, expected=6, settle=0.3)]
    assert values == [w.encode() for w in words] * 2


def test_constant_timestamp_goes_through_send_many(
        spark: SparkSession, tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    """One timestamp for a whole batch (e.g. current_timestamp()) still sets each record's."""
    topic = new_topic()
    df = spark.range(0, 500, 1, 1).selectExpr("cast(id as string) as value",
                                     "timestamp'2023-01-02 03:04:05.678' as timestamp")
    _save(df, tansu.bootstrap, topic)
    records = read_back(tansu.bootstrap, topic, expected=500, settle=0.3)
    expected = int(dt.datetime(2023, 1, 2, 3, 4, 5, 678000).timestamp() * 1000)
    assert len(records) == 500
    assert {r.timestamp for r in records} == {expected}


# -- streaming ---------------------------------------------------------------------------------


def test_streaming_rate_source_over_several_micro_batches(
        spark: SparkSession, tansu: TansuBroker, new_topic: Callable[..., str],
        tmp_path: Path) -> None:
    topic = new_topic(partitions=2)
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 500).option("numPartitions", 1).load()
        .selectExpr("cast(cast(value as string) as binary) as key",
                    "cast(value as string) as value", "timestamp")
        .writeStream.format("aiokprod")
        .option("kafka.bootstrap.servers", tansu.bootstrap)
        .option("kafka.linger.ms", "2")
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 300  # a first micro-batch starts the Python workers
        while time.monotonic() < deadline:
            progress = query.lastProgress
            if query.exception() is not None:
                raise AssertionError(f"streaming query failed: {query.exception()}")
            if progress is not None and progress["batchId"] >= 3:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"fewer than 4 micro-batches in 300 s: {query.recentProgress}")
    finally:
        query.stop()
    batches = {p["batchId"]: p["numInputRows"] for p in query.recentProgress}
    committed = sum(batches.values())
    assert len(batches) >= 4 and committed >= 1500
    records = read_back(tansu.bootstrap, topic, expected=committed, timeout=60, settle=0.5)
    values = [int(r.value) for r in records]
    # every committed row is there; a batch cut off by stop() may have added a few more
    assert set(range(committed)) <= set(values)
    assert len(values) == len(set(values)), "a row was written twice without any retry"
    assert all(r.key == r.value for r in records)


# -- failures ----------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Cannot infer the eval type:UserWarning")
def test_a_retried_task_writes_its_rows_again(spark: SparkSession, tansu: TansuBroker,
                                              new_topic: Callable[..., str]) -> None:
    """At-least-once: a task that fails after sending some rows is retried and sends them all."""
    topic = new_topic()

    @udf("string", useArrow=False)
    def fail_first_attempt(value: str) -> str:
        context = TaskContext.get()
        if value == "80000" and context is not None and context.attemptNumber() == 0:
            raise RuntimeError("upstream stage failed on its first attempt")
        return value

    rows = 100_000
    df = spark.range(0, rows, 1, 1).selectExpr("cast(id as string) as value")
    df = df.select(fail_first_attempt("value").alias("value"))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        _save(df, tansu.bootstrap, topic)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    # The first attempt's rows come first in the log, so rows + 1 records arrive before the
    # retry's last ones: read on for a while after (0.5 s lost the tail on a loaded machine).
    records = read_back(tansu.bootstrap, topic, expected=rows + 1, timeout=60, settle=3.0)
    counts = Counter(int(r.value) for r in records)
    assert set(counts) == set(range(rows))
    # the first attempt's first batches went out before it failed; the retry sent them again
    twice = sorted(v for v, n in counts.items() if n == 2)
    assert twice and twice == list(range(len(twice))) and twice[-1] < 80_000
    assert set(counts.values()) == {1, 2}


def test_unreachable_broker_fails_the_task_with_a_clear_error(
        spark: SparkSession, tansu_factory: Callable[..., TansuBroker]) -> None:
    broker = tansu_factory()
    broker.create_topic("gone", partitions=1)
    bootstrap = broker.bootstrap
    broker.stop()
    df = spark.range(100).selectExpr("cast(id as string) as value")
    with pytest.raises(Exception) as failure:
        _save(df.coalesce(1), bootstrap, "gone", **{"kafka.max.block.ms": "1500",
                                                   "kafka.request.timeout.ms": "1000",
                                                   "kafka.delivery.timeout.ms": "2000"})
    message = str(failure.value)
    assert "KafkaSinkError" in message
    assert "aiokprod sink: task for partition 0 (attempt 1)" in message  # the retry failed too
    assert "KafkaTimeoutError" in message
    assert "max.block.ms" in message


def test_records_failing_after_queueing_are_counted(
        tansu_factory: Callable[..., TansuBroker]) -> None:
    """The broker dies mid-task: the task raises with the failed count and the first error.
    The bounds leave the first ten records room on a loaded machine; the last 25 fail
    after the delivery timeout (15 s)."""
    broker = tansu_factory()
    broker.create_topic("dies", partitions=1)
    settings = settings_from(
        {"kafka.bootstrap.servers": broker.bootstrap, "topic": "dies",
         "kafka.request.timeout.ms": "5000", "kafka.delivery.timeout.ms": "15000",
         "kafka.linger.ms": "0", "kafka.max.block.ms": "10000"},
        StructType([StructField("value", BinaryType())]))

    def batches() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"value": pa.array([b"before"] * 10, pa.binary())})
        # the first ten acknowledged before the broker goes (a fixed sleep was not always
        # enough on a loaded machine: the producer's start and InitProducerId come first)
        deadline = time.monotonic() + 60
        while not (writer._records == 10 and not writer._bulk_pending):
            assert time.monotonic() < deadline, "the first ten were not acknowledged in 60 s"
            time.sleep(0.01)
        assert writer._failed == 0
        broker.stop()
        yield pa.record_batch({"value": pa.array([b"after"] * 25, pa.binary())})

    try:
        writer = TaskWriter(settings, 7, 1)
        with pytest.raises(KafkaSinkError) as failure:
            writer.write(batches())
        message = str(failure.value)
        assert message.startswith("aiokprod sink: task for partition 7 (attempt 1): "
                                  "25 of 35 records were not written to Kafka; first error: ")
        # the failed task's producer is not kept for the retry
        assert cached_producer_count() == 0
    finally:
        close_all_producers()


# -- one producer per worker -------------------------------------------------------------------


def test_tasks_of_one_worker_share_one_producer(tansu: TansuBroker,
                                                new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    schema = StructType([StructField("value", StringType())])
    settings = settings_from({"kafka.bootstrap.servers": tansu.bootstrap, "topic": topic},
                             schema)
    other = settings_from({"kafka.bootstrap.servers": tansu.bootstrap, "topic": topic,
                           "kafka.linger.ms": "1"}, schema)
    try:
        writers = [TaskWriter(settings, i, 0) for i in range(3)]
        assert len({id(w._producer) for w in writers}) == 1
        assert cached_producer_count() == 1
        for i, writer in enumerate(writers):
            summary = writer.write([pa.record_batch({"value": pa.array([f"r{i}"] * 100)})])
            assert (summary.records, summary.bytes) == (100, 200)
        TaskWriter(other, 9, 0)  # another configuration: another producer
        assert cached_producer_count() == 2
    finally:
        close_all_producers()
    assert cached_producer_count() == 0
    assert len(read_back(tansu.bootstrap, topic, expected=300, settle=0.3)) == 300


def test_commit_logs_a_summary(caplog: pytest.LogCaptureFixture) -> None:
    settings = settings_from({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"},
                             StructType([StructField("value", StringType())]))
    writer = KafkaArrowWriter(settings)
    with caplog.at_level(logging.INFO, logger="aiokprod.spark"):
        writer.commit([SinkCommitMessage(0, 0, 10, 100, (("t", 10),)),
                       SinkCommitMessage(1, 0, 5, 50, (("t", 4), ("u", 1)))])
        writer.abort([SinkCommitMessage(0, 0, 10, 100, (("t", 10),)), None])
    assert caplog.messages == [
        "aiokprod sink: save() wrote 15 records (150 bytes of keys and values) from 2 of "
        "2 tasks; per topic: t: 14, u: 1",
        "aiokprod sink: save() failed (at-least-once: what the finished tasks wrote stays "
        "in Kafka): 10 records (100 bytes of keys and values) from 1 of 2 tasks; "
        "per topic: t: 10",
    ]


# -- rejected schemas and options --------------------------------------------------------------


@pytest.mark.parametrize(("columns", "expected"), [
    ("value string, extra int, other string",
     "column(s) ['extra', 'other'] are not written to Kafka"),
    ("key string", "the DataFrame needs a 'value' column"),
    ("value int", "column 'value' has type int, expected binary or string"),
    ("value string, partition string", "column 'partition' has type string, expected int"),
    ("value string, headers array<string>", "column 'headers' has type array<string>"),
    ("value string, timestamp bigint", "column 'timestamp' has type bigint, expected timestamp"),
])
def test_bad_schema_is_rejected_naming_the_column(spark: SparkSession, columns: str,
                                                  expected: str) -> None:
    df = spark.createDataFrame([], columns)
    with pytest.raises(Exception, match=r"aiokprod sink") as failure:
        _save(df, "127.0.0.1:9", "t")
    assert expected in str(failure.value)


def test_missing_topic_is_rejected(spark: SparkSession) -> None:
    with pytest.raises(Exception, match="no topic: give the 'topic' option or a 'topic' column"):
        _save(spark.createDataFrame([], "value string"), "127.0.0.1:9")


@pytest.mark.parametrize(("options", "expected"), [
    ({"kafka.linger.msx": "5"}, "Unknown configuration 'linger.msx'; did you mean 'linger.ms'?"),
    ({"lingerMs": "5"}, "unknown option 'lingerms'"),
    ({"kafka.linger.ms": "soon"}, "linger.ms"),
    ({"transactional.id.prefix": "x"},
     "options 'transactional.id.prefix', 'transactional.marker.topic' and "
     "'transactional.write.id' need 'transactional'='true'"),
    ({"kafka.key.serializer": "x"}, "option 'kafka.key.serializer' is not supported"),
    ({"kafka.transactional.id": "x"}, "option 'kafka.transactional.id' is not supported"),
    ({"kafka.ssl.truststore.location": "/x.jks"},
     "Java trust stores (JKS, PKCS12) are not supported: give the CA certificates as a PEM "
     "file with ssl.ca.location"),
])
def test_bad_option_is_rejected_naming_it(spark: SparkSession, options: dict[str, str],
                                          expected: str) -> None:
    df = spark.createDataFrame([], "value string")
    with pytest.raises(Exception, match="aiokprod sink") as failure:
        _save(df, "127.0.0.1:9", "t", **options)
    assert expected in str(failure.value)


def test_overwrite_mode_is_rejected(spark: SparkSession) -> None:
    df = spark.createDataFrame([], "value string")
    writer = (df.write.format("aiokprod").option("kafka.bootstrap.servers", "127.0.0.1:9")
              .option("topic", "t").mode("overwrite"))
    with pytest.raises(Exception, match="can only be appended to"):
        writer.save()


def test_options_and_schema_checks_without_spark() -> None:
    """The same checks as plain functions: what the driver runs before any task."""
    schema = StructType([StructField("value", StringType()), StructField("key", BinaryType())])
    settings = settings_from({"kafka.bootstrap.servers": "h:1", "kafka.linger.ms": "7",
                              "topic": "t", "checkpointLocation": "/x",
                              "transactional": "false"}, schema)
    # the sink's own batch.size (256 KiB) and send.buffer.bytes (the OS's) unless given
    assert settings.producer_config == (("batch.size", "262144"), ("bootstrap.servers", "h:1"),
                                        ("linger.ms", "7"), ("send.buffer.bytes", "-1"))
    given = dict(settings_from({"kafka.bootstrap.servers": "h:1", "kafka.batch.size": "100",
                                "kafka.send.buffer.bytes": "131072", "topic": "t"},
                               schema).producer_config)
    assert (given["batch.size"], given["send.buffer.bytes"]) == ("100", "131072")
    assert (settings.topic, settings.columns) == ("t", ("key", "value"))
    with pytest.raises(ValueError, match="'kafka.bootstrap.servers' is required"):
        settings_from({"topic": "t"}, schema)
    with pytest.raises(ValueError, match="'transactional' must be 'true' or 'false'"):
        settings_from({"kafka.bootstrap.servers": "h:1", "transactional": "yes"}, schema)


# -- grouping by topic and partition (in process, no Spark) ------------------------------------


def test_batches_are_split_by_topic_and_partition(tansu: TansuBroker,
                                                  new_topic: Callable[..., str]) -> None:
    """Rows of several topics and partitions (some null) in one Arrow batch, order kept."""
    first, second = new_topic(partitions=3), new_topic(partitions=3)
    schema = StructType([StructField("value", StringType()), StructField("topic", StringType()),
                         StructField("partition", IntegerType())])
    settings = settings_from({"kafka.bootstrap.servers": tansu.bootstrap}, schema)
    n = 300
    batch = pa.record_batch({
        "value": pa.array([str(i) for i in range(n)]),
        "topic": pa.array([first if i % 2 else second for i in range(n)]),
        "partition": pa.array([None if i % 3 == 0 else i % 3 for i in range(n)], pa.int32()),
    })
    try:
        summary = TaskWriter(settings, 0, 0).write([batch])
    finally:
        close_all_producers()
    assert summary.records == n
    assert dict(summary.topics) == {first: n // 2, second: n // 2}
    for topic, parity in ((first, 1), (second, 0)):
        records = read_back(tansu.bootstrap, topic, expected=n // 2, settle=0.3)
        assert sorted(int(r.value) for r in records) == [i for i in range(n) if i % 2 == parity]
        for r in records:
            if int(r.value) % 3:
                assert r.partition == int(r.value) % 3
        # within a partition, rows keep their order among those that name it and among those
        # the partitioner placed there (the two kinds are sent as separate groups)
        for p in range(3):
            for named in (True, False):
                in_partition = [int(r.value) for r in records
                                if r.partition == p and bool(int(r.value) % 3) == named]
                assert in_partition == sorted(in_partition)


def test_null_topic_fails_the_task_naming_the_column(tansu: TansuBroker) -> None:
    schema = StructType([StructField("value", StringType()), StructField("topic", StringType())])
    settings = settings_from({"kafka.bootstrap.servers": tansu.bootstrap}, schema)
    batch = pa.record_batch({"value": pa.array(["a", "b"]), "topic": pa.array(["t", None])})
    try:
        with pytest.raises(KafkaSinkError, match=r"null topic in column 'topic' \(1 of 2 rows\)"):
            TaskWriter(settings, 0, 0).write([batch])
    finally:
        close_all_producers()


# -- SASL as Spark users configure it ------------------------------------------------------------


def test_sasl_jaas_config_authenticates_against_apache_kafka(kafka_secure: Any) -> None:
    """``kafka.sasl.jaas.config`` (Java's form, what Spark's Kafka sink takes) → SCRAM login."""
    assert kafka_secure.security is not None
    user = kafka_secure.security.users[0]
    topic = f"spark-jaas-{time.monotonic_ns()}"
    kafka_secure.create_topic(topic, 1)
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{user.name}" password="{user.password}";')
    settings = settings_from(
        {"kafka.bootstrap.servers": kafka_secure.bootstrap_for("SASL_PLAINTEXT"),
         "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
         "kafka.sasl.jaas.config": jaas, "topic": topic},
        StructType([StructField("value", StringType())]))
    assert user.password not in repr(settings)
    try:
        summary = TaskWriter(settings, 0, 0).write(
            [pa.record_batch({"value": pa.array([f"s{i}" for i in range(50)])})])
    finally:
        close_all_producers()
    assert summary.records == 50
    records = read_back(kafka_secure.bootstrap, topic, expected=50, settle=0.3)
    assert [r.value for r in records] == [f"s{i}".encode() for i in range(50)]


@pytest.mark.parametrize(("jaas", "expected"), [
    ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
     "names org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule; only"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="u";',
     'needs username="..." and password="..."'),
])
def test_unusable_jaas_config_is_rejected(jaas: str, expected: str) -> None:
    with pytest.raises(ValueError, match="kafka.sasl.jaas.config") as failure:
        settings_from({"kafka.bootstrap.servers": "h:1", "topic": "t",
                       "kafka.sasl.jaas.config": jaas},
                      StructType([StructField("value", StringType())]))
    assert expected in str(failure.value)


def test_an_upstream_error_passes_through_and_keeps_the_producer(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    settings = settings_from({"kafka.bootstrap.servers": tansu.bootstrap, "topic": topic},
                             StructType([StructField("value", StringType())]))

    def batches() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"value": pa.array(["a", "b"])})
        raise ZeroDivisionError("an upstream stage failed")

    try:
        with pytest.raises(ZeroDivisionError, match="an upstream stage failed"):
            TaskWriter(settings, 0, 0).write(batches())
        assert cached_producer_count() == 1  # the producer is fine: the retry reuses it
    finally:
        close_all_producers()
    # what was queued before the failure is still delivered
    assert [r.value for r in read_back(tansu.bootstrap, topic, expected=2)] == [b"a", b"b"]
