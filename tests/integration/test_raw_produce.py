"""The foundation end to end, without the producer: our connection negotiates versions, reads
metadata and writes RecordBatches (every codec) in raw Produce requests; confluent-kafka's
Consumer reads back every key, value, header and timestamp unchanged."""

from __future__ import annotations

import pytest

from aiokprod.devbroker import TansuBroker
from aiokprod.network.cluster import Cluster
from aiokprod.protocol import MetadataRequest, ProduceRequest
from aiokprod.records import CompressionType, RecordBatchBuilder
from support.mock_cluster import MockCluster
from support.reader import read_back

CODECS = list(CompressionType)
BASE_TS = 1_700_000_000_000


def records_for(codec: CompressionType) -> list[tuple[bytes | None, bytes | None,
                                                      list[tuple[str, bytes | None]], int]]:
    out = []
    for i in range(25):
        key = None if i % 4 == 0 else f"key-{codec.name}-{i}".encode()
        value = None if i % 9 == 0 else (f"value {i} ".encode() * (i + 1))
        headers = [("i", str(i).encode()), ("empty", b""), ("null", None)][: i % 4]
        out.append((key, value, headers, BASE_TS + 1000 * i - (500 if i % 3 else 0)))
    return out


async def produce_raw(bootstrap: str, topic: str) -> dict[str, int]:
    """One Produce request per codec, each to partition ``codec % partitions``."""
    cluster = Cluster(bootstrap)
    cluster.start()
    try:
        meta = await cluster.wait_for_topic(topic, 10_000)
        versions: dict[str, int] = {}
        for codec in CODECS:
            partition = int(codec)  # five codecs, five partitions
            builder = RecordBatchBuilder(bytearray(), write_limit=1 << 20, compression=codec)
            for key, value, headers, ts in records_for(codec):
                assert builder.try_append(ts, key, value, headers)
            batch = builder.seal()
            conn = await cluster.connection(meta.leader(partition))
            version = conn.version_for(ProduceRequest, max_version=12)
            versions["Produce"] = version
            versions["Metadata"] = conn.version_for(MetadataRequest)
            versions["ApiVersions"] = conn.api_versions_version
            response = await conn.request(ProduceRequest(
                acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
                    name=topic, partition_data=[ProduceRequest.PartitionProduceData(
                        index=partition, records=batch)])]), version=version)
            part = response.responses[0].partition_responses[0]
            assert part.error_code == 0, (codec, part)
        return versions
    finally:
        await cluster.close()


def check_read_back(bootstrap: str, topic: str) -> None:
    """Every codec went to its own partition (``int(codec)``): compare partition by partition."""
    total = sum(len(records_for(codec)) for codec in CODECS)
    got = read_back(bootstrap, topic, expected=total)
    assert len(got) == total
    for codec in CODECS:
        stored = [(r.key, r.value, list(r.headers or []), r.timestamp)
                  for r in sorted(got, key=lambda r: r.offset) if r.partition == int(codec)]
        assert stored == records_for(codec), f"{codec.name} batch read back differently"


async def test_raw_produce_every_codec_tansu(tansu: TansuBroker, new_topic: object) -> None:
    topic = new_topic(partitions=5)  # type: ignore[operator]
    versions = await produce_raw(tansu.bootstrap, topic)
    assert versions == {"Produce": 11, "Metadata": 12, "ApiVersions": 3}
    check_read_back(tansu.bootstrap, topic)


async def test_raw_produce_every_codec_mock_cluster(mock_cluster: MockCluster,
                                                    topic_name: str) -> None:
    mock_cluster.create_topic(topic_name, 5, replication_factor=3)
    versions = await produce_raw(mock_cluster.bootstrap, topic_name)
    # the mock cluster rejects ApiVersions v3: the handshake falls back
    assert versions["ApiVersions"] < 3
    assert versions["Produce"] == 10 and versions["Metadata"] >= 12
    check_read_back(mock_cluster.bootstrap, topic_name)


@pytest.mark.docker
async def test_raw_produce_every_codec_apache_kafka(kafka_container: object) -> None:
    bootstrap = kafka_container.get_bootstrap_server()  # type: ignore[attr-defined]
    from confluent_kafka.admin import AdminClient, NewTopic

    AdminClient({"bootstrap.servers": bootstrap}).create_topics(
        [NewTopic("raw-codecs", 5, 1)])["raw-codecs"].result(30)
    await produce_raw(bootstrap, "raw-codecs")
    check_read_back(bootstrap, "raw-codecs")
