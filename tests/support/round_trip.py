"""One end-to-end scenario for every broker: varied records out through the producer, read back
by confluent-kafka and compared field by field.

Tansu (``test_producer_tansu.py``, which every Python and the pure-Python pass run) and Apache
Kafka (``test_kafka_produce.py``, which also reads at read_uncommitted beside transaction
markers) run the same records, so a change to what is checked reaches both brokers.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokprod import Producer, RecordMetadata
from support.reader import read_back

__all__ = ["CODECS", "round_trip_varied_records"]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

Sent = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


async def round_trip_varied_records(
    bootstrap: str, topic: str, codec: str, *,
    isolation_levels: Sequence[str] = ("read_committed",), count: int = 300
) -> None:
    """Send ``count`` records to ``topic`` (keys, null keys and values, headers with a null
    value, timestamps out of order within a batch), then read them back at each isolation
    level and compare key, value, timestamp and headers at the offset each delivery reported,
    and the sizes and timestamp the RecordMetadata reported."""
    sent: list[Sent] = []
    async with Producer(bootstrap_servers=bootstrap, compression_type=codec,
                        linger_ms=2) as producer:
        deliveries = []
        for i in range(count):
            key = f"k{i % 7}".encode() if i % 5 else None
            value = None if i % 11 == 0 else f"value-{i}".encode() * (1 + i % 4)
            headers = [("n", str(i).encode()), ("none", None)] if i % 3 == 0 else []
            ts = 1_700_000_000_000 + (i * 7919 % count) * 997  # out of order within a batch
            deliveries.append(await producer.send(topic, value=value, key=key,
                                                  timestamp_ms=ts, headers=headers))
            sent.append((key, value, headers, ts))
        metas: list[RecordMetadata] = [await d for d in deliveries]
    assert all(m.offset >= 0 and m.topic == topic for m in metas)
    for (key, value, _headers, ts), md in zip(sent, metas, strict=True):
        assert md.serialized_value_size == (-1 if value is None else len(value))
        assert md.serialized_key_size == (-1 if key is None else len(key))
        assert md.timestamp == ts
    for isolation in isolation_levels:
        records = read_back(bootstrap, topic, expected=len(sent), isolation_level=isolation)
        assert len(records) == len(sent), isolation
        got = {(r.partition, r.offset): r for r in records}
        for (key, value, headers, ts), md in zip(sent, metas, strict=True):
            r = got[(md.partition, md.offset)]
            assert (r.key, r.value, r.timestamp) == (key, value, ts), isolation
            assert list(r.headers or []) == headers, isolation
