"""``Producer.send_columns`` against Apache Kafka, read back by confluent-kafka.

Rows go from Arrow buffers straight into record batches; an independent client must read back
every key, value (null and empty ones included), header and per-row timestamp, each keyed row in
the partition Java's default partitioner picks (librdkafka's ``murmur2_random`` is that rule),
from sliced arrays too.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest
from confluent_kafka import Producer as ConfluentProducer

from aiokprod import Producer, RecordTooLargeError
from aiokprod.records.columnar import BinaryColumn, HeaderColumn
from support.kafka_cluster import KafkaCluster
from support.reader import TIMESTAMP_CREATE_TIME, read_back

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ROWS = 3000
PARTITIONS = 5


def _frame() -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    keys = pa.array([None if i % 13 == 0 else f"key-{i % 97}" for i in range(ROWS + 7)])
    values = pa.array([None if i % 11 == 0 else b"" if i % 17 == 0 else
                       f"value-{i}".encode() * (1 + i % 5) for i in range(ROWS + 7)],
                      pa.binary())
    headers = pa.array([None if i % 7 == 0 else [] if i % 7 == 1 else
                        [{"key": "n", "value": str(i).encode()}, {"key": "none", "value": None}]
                        for i in range(ROWS + 7)], HEADER_TYPE)
    stamps = pa.array([1_700_000_000_000 + (i * 7919) % 5000 for i in range(ROWS + 7)],
                      pa.int64())
    # sliced: the buffers start 7 rows before the first row sent
    return tuple(a.slice(7) for a in (keys, values, headers, stamps))  # type: ignore[return-value]


def _java_partitions(bootstrap: str, topic: str, keys: list[str]) -> dict[str, int]:
    """Where librdkafka's murmur2_random (Java's default for keys) puts each key."""
    producer = ConfluentProducer({"bootstrap.servers": bootstrap,
                                  "partitioner": "murmur2_random"})
    placed: dict[str, int] = {}

    def delivered(error: object, message: object) -> None:
        assert error is None, error
        placed[message.key().decode()] = message.partition()  # type: ignore[attr-defined]

    for key in keys:
        producer.produce(topic, key=key, value=b"", on_delivery=delivered)
    assert producer.flush(30) == 0
    return placed


@pytest.mark.parametrize("large", [False, True], ids=["binary", "large_binary"])
async def test_send_columns_round_trip(kafka: KafkaCluster, kafka_topic: Callable[..., str],
                                       large: bool) -> None:
    topic, probe = kafka_topic(partitions=PARTITIONS), kafka_topic(partitions=PARTITIONS)
    keys, values, headers, stamps = _frame()
    if large:
        keys, values = keys.cast(pa.large_string()), values.cast(pa.large_binary())
    async with Producer(bootstrap_servers=kafka.bootstrap, linger_ms=5,
                        batch_size=4096) as producer:
        future = await producer.send_columns(
            topic, ROWS, BinaryColumn.from_arrow(values), BinaryColumn.from_arrow(keys),
            timestamps_ms=(stamps.buffers()[1], stamps.offset),
            headers=HeaderColumn.from_arrow(headers))
        result = await future
    records = read_back(kafka.bootstrap, topic, expected=ROWS, settle=0.5)
    assert len(records) == ROWS
    want_keys = [None if k is None else k.encode() for k in keys.to_pylist()]
    want_values = values.to_pylist()
    want_headers = [[] if h is None else [(e["key"], e["value"]) for e in h]
                    for h in headers.to_pylist()]
    want_stamps = stamps.to_pylist()
    # rows carry their number in the "n" header or, without one, are matched by content
    by_content = {(r.key, r.value, tuple(r.headers), r.timestamp): r for r in records}
    assert len(by_content) == ROWS
    java = _java_partitions(kafka.bootstrap, probe,
                            sorted({k for k in keys.to_pylist() if k is not None}))
    for i in range(ROWS):
        record = by_content[(want_keys[i], want_values[i], tuple(want_headers[i]),
                             want_stamps[i])]
        assert record.timestamp_type == TIMESTAMP_CREATE_TIME
        if want_keys[i] is not None:
            assert record.partition == java[want_keys[i].decode()]
        meta = result[i]
        assert (meta.partition, meta.offset, meta.timestamp) == \
            (record.partition, record.offset, want_stamps[i])
        assert meta.serialized_key_size == (-1 if want_keys[i] is None else len(want_keys[i]))
        assert meta.serialized_value_size == \
            (-1 if want_values[i] is None else len(want_values[i]))
    # within a partition, rows keep their input order
    for p in range(PARTITIONS):
        offsets = [result[i].offset for i in range(ROWS) if result[i].partition == p]
        assert offsets == sorted(offsets)


async def test_send_columns_unkeyed_in_a_transaction(kafka: KafkaCluster,
                                                     kafka_topic: Callable[..., str]) -> None:
    """The transactional path: committed rows are read by a read_committed consumer, an
    aborted call's rows are not; one shared timestamp, no key column."""
    topic = kafka_topic(partitions=3)
    values = pa.array([f"v{i}".encode() for i in range(2000)], pa.binary())
    async with Producer(bootstrap_servers=kafka.bootstrap, linger_ms=5,
                        transactional_id=f"{topic}-txn") as producer:
        async with producer.transaction():
            result = await (await producer.send_columns(
                topic, 1000, BinaryColumn.from_arrow(values.slice(0, 1000)),
                timestamp_ms=1_600_000_000_000))
        producer.begin_transaction()
        await (await producer.send_columns(topic, 1000,
                                           BinaryColumn.from_arrow(values.slice(1000))))
        await producer.abort_transaction()
    assert sum(result.partitions().values()) == 1000
    assert {m.timestamp for m in result} == {1_600_000_000_000}
    records = read_back(kafka.bootstrap, topic, expected=1000, settle=0.5)
    assert sorted(r.value for r in records) == sorted(values.slice(0, 1000).to_pylist())
    assert {r.timestamp for r in records} == {1_600_000_000_000}


def test_sink_sends_headers_and_row_timestamps_in_bulk(
        kafka: KafkaCluster, kafka_topic: Callable[..., str]) -> None:
    """The Spark sink's task writer, without Spark: rows with headers and their own timestamps
    (some null: the send time) go through ``send_columns``; every header, timestamp and keyed
    partition reads back as written."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from aiokprod._murmur2 import murmur2
    from aiokprod.spark._executor import TaskWriter, close_all_producers
    from aiokprod.spark._options import settings_from

    topic = kafka_topic(partitions=PARTITIONS)
    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())]))),
        StructField("timestamp", TimestampType())])
    settings = settings_from({"kafka.bootstrap.servers": kafka.bootstrap, "topic": topic},
                             schema)
    n = 5000
    micros = [None if i % 50 == 0 else (1_650_000_000_000 + i * 3) * 1000 for i in range(n)]
    batch = pa.record_batch({
        "key": pa.array([f"k{i % 31}" for i in range(n)]),
        "value": pa.array([f"v{i}".encode() for i in range(n)], pa.binary()),
        "headers": pa.array([None if i % 4 == 0 else [{"key": "i", "value": str(i).encode()}]
                             for i in range(n)], HEADER_TYPE),
        "timestamp": pa.array(micros, pa.timestamp("us", tz="UTC"))})
    try:
        summary = TaskWriter(settings, 0, 0).write([batch.slice(0, 1234), batch.slice(1234)])
    finally:
        close_all_producers()
    assert summary.records == n
    records = read_back(kafka.bootstrap, topic, expected=n, settle=0.5)
    assert len(records) == n
    for record in records:
        i = int(record.value[1:])
        assert record.key == f"k{i % 31}".encode()
        assert record.partition == (murmur2(record.key) & 0x7FFFFFFF) % PARTITIONS
        assert record.headers == ([] if i % 4 == 0 else [("i", str(i).encode())])
        if micros[i] is None:  # the send time
            assert record.timestamp > 1_700_000_000_000
        else:
            assert record.timestamp == micros[i] // 1000


async def test_send_columns_refuses_before_queueing_anything(
        kafka: KafkaCluster, kafka_topic: Callable[..., str]) -> None:
    """A record over max.request.size, or both timestamp forms, fail the call up front; the
    producer then sends the next call normally."""
    topic = kafka_topic(partitions=1)
    values = pa.array([b"ok", b"x" * 5000], pa.binary())
    async with Producer(bootstrap_servers=kafka.bootstrap, max_request_size=2000) as producer:
        with pytest.raises(RecordTooLargeError, match="larger than 2000"):
            await producer.send_columns(topic, 2, BinaryColumn.from_arrow(values))
        stamps = pa.array([1, 2], pa.int64())
        with pytest.raises(ValueError, match="not both"):
            await producer.send_columns(topic, 2, BinaryColumn.from_arrow(values),
                                        timestamp_ms=5,
                                        timestamps_ms=(stamps.buffers()[1], 0))
        result = await (await producer.send_columns(topic, 1,
                                                    BinaryColumn.from_arrow(values.slice(0, 1))))
        assert result[0].offset == 0  # nothing of the refused calls reached the topic
