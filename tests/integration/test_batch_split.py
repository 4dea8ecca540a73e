"""MESSAGE_TOO_LARGE against librdkafka's mock cluster: a multi-record batch is split and every
record still arrives, in order; a lone record fails with ``RecordTooLargeError``.

The error is injected once (``push_request_errors``) into the next Produce request, so what is
tested is the client's reaction, not a broker size limit. Idempotence is on (the default).
"""

from __future__ import annotations

import asyncio

import pytest

from aiokprod import Producer, RecordMetadata
from aiokprod.errors import RecordTooLargeError
from support.mock_cluster import MockCluster
from support.reader import read_back

PRODUCE = 0
MESSAGE_TOO_LARGE = 10
SPLITS = "producer-metrics:batch-split-total"
BATCH_SIZE = 4096


def _producer(bootstrap: str, **config: object) -> Producer:
    return Producer(bootstrap_servers=bootstrap, retry_backoff_ms=10, retry_backoff_max_ms=100,
                    request_timeout_ms=5000, delivery_timeout_ms=15_000, **config)


def _batches_sent(producer: Producer) -> int:
    assert producer._sender is not None
    return producer._sender.statistics().batches_sent


def _check_in_order(metas: list[RecordMetadata]) -> None:
    offsets = [m.offset for m in metas]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), offsets


@pytest.mark.parametrize(("codec", "count"), [("none", 30), ("gzip", 40)])
async def test_a_refused_batch_is_split_and_every_record_delivered_in_order(
    mock_cluster: MockCluster, topic_name: str, codec: str, count: int
) -> None:
    mock_cluster.create_topic(topic_name, 1)
    async with _producer(mock_cluster.bootstrap, linger_ms=50, batch_size=BATCH_SIZE,
                         compression_type=codec) as producer:
        assert producer.config.enable_idempotence
        # 40 sealed batches that compress very well move the gzip ratio estimate from 1.0 to
        # 0.8 (docs/compression.md E3: 0.005 per batch), so a batch packs ~4.8 KB of records;
        # the split resets the estimate to 1.0 and re-cuts by batch.size (~3.9 KB of records)
        warm = []
        for _ in range(40):
            future = await producer.send(topic_name, b"w" * 1000)
            await producer.flush()  # do not wait out linger_ms
            warm.append(await future)
        assert producer.metrics()[SPLITS] == 0
        sent_before = _batches_sent(producer)
        mock_cluster.push_request_errors(PRODUCE, MESSAGE_TOO_LARGE)
        # ~109 bytes per record: 30 (3.3 KB) or 40 (4.4 KB) go as one batch
        values = [f"record-{i:05d}-".encode() + b"p" * 87 for i in range(count)]
        futures = [await producer.send(topic_name, v) for v in values]
        metas = await asyncio.wait_for(asyncio.gather(*futures), 15)
        splits = producer.metrics()[SPLITS]
        batches = _batches_sent(producer) - sent_before
    assert splits == 1
    _check_in_order(metas)
    assert metas[0].offset == warm[-1].offset + 1  # nothing of the refused batch was written
    if codec == "gzip":
        # one batch refused, re-sent as two or more of batch.size
        assert batches >= 3, batches
    else:
        # the records fit one batch.size, so re-cutting by it would give the same batch back:
        # the refused batch is re-cut by half its size (docs/compression.md S3)
        assert batches >= 3, batches
    records = read_back(mock_cluster.bootstrap, topic_name, expected=40 + count)
    assert [r.value for r in records[40:]] == values
    assert len(records) == 40 + count


async def test_a_refused_single_record_fails_with_record_too_large(
    mock_cluster: MockCluster, topic_name: str
) -> None:
    mock_cluster.create_topic(topic_name, 1)
    async with _producer(mock_cluster.bootstrap, linger_ms=0) as producer:
        first = await producer.send_and_wait(topic_name, b"before")
        mock_cluster.push_request_errors(PRODUCE, MESSAGE_TOO_LARGE)
        with pytest.raises(RecordTooLargeError, match=f"{topic_name}-0"):
            await asyncio.wait_for(await producer.send(topic_name, b"refused"), 10)
        assert producer.metrics()[SPLITS] == 0
        # the producer stays usable: later records go through (sequences recover)
        after = [await producer.send(topic_name, f"after-{i}".encode()) for i in range(5)]
        metas = await asyncio.wait_for(asyncio.gather(*after), 10)
    assert all(m.offset > first.offset for m in metas)
    records = read_back(mock_cluster.bootstrap, topic_name, expected=6)
    assert [r.value for r in records] == [b"before"] + [f"after-{i}".encode() for i in range(5)]
