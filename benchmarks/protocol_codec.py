"""Encode/decode cost of the hot protocol messages, in microseconds per operation.

The sender encodes a ProduceRequest per node per drain and decodes every ProduceResponse and
MetadataResponse, so these numbers bound the protocol layer's share of producer CPU. The
shapes follow the task brief: ProduceRequest v9 with 1 topic x 6 partitions x 16 KiB records,
the matching ProduceResponse, and a MetadataResponse v12 for 3 brokers and 10 x 12 partitions.

Run: ``python benchmarks/protocol_codec.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

from aiokprod.protocol import (
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    encode_request,
)

PARTITIONS = 6
RECORDS_SIZE = 16 * 1024


def produce_request() -> ProduceRequest:
    records = bytes(RECORDS_SIZE)
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="orders",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=i, records=records)
                    for i in range(PARTITIONS)
                ],
            )
        ],
    )


def produce_response() -> ProduceResponse:
    return ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="orders",
                partition_responses=[
                    ProduceResponse.PartitionProduceResponse(
                        index=i, error_code=0, base_offset=1000 * i, log_start_offset=0
                    )
                    for i in range(PARTITIONS)
                ],
            )
        ],
        throttle_time_ms=0,
    )


def metadata_response() -> MetadataResponse:
    brokers = [
        MetadataResponse.MetadataResponseBroker(node_id=n, host=f"broker-{n}", port=9092)
        for n in range(3)
    ]
    topics = [
        MetadataResponse.MetadataResponseTopic(
            name=f"topic-{t}",
            topic_id=uuid.UUID(int=t + 1),
            partitions=[
                MetadataResponse.MetadataResponsePartition(
                    partition_index=p,
                    leader_id=p % 3,
                    leader_epoch=5,
                    replica_nodes=[0, 1, 2],
                    isr_nodes=[0, 1, 2],
                )
                for p in range(12)
            ],
        )
        for t in range(10)
    ]
    return MetadataResponse(brokers=brokers, cluster_id="c", controller_id=0, topics=topics)


def per_op_us(fn: Callable[[], object], repeat: int) -> float:
    for _ in range(min(repeat, 200)):
        fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    req = produce_request()
    resp_bytes = produce_response().encode(9)
    meta_bytes = metadata_response().encode(12)
    rows = [
        ("ProduceRequest v9 encode (6 x 16 KiB)", lambda: req.encode(9)),
        ("ProduceRequest v9 framed (encode_request)", lambda: encode_request(req, 9, 1, "bench")),
        ("ProduceResponse v9 decode (6 partitions)", lambda: ProduceResponse.decode(resp_bytes, 9)),
        (
            "MetadataResponse v12 decode (120 partitions)",
            lambda: MetadataResponse.decode(meta_bytes, 12),
        ),
    ]
    for label, fn in rows:
        print(f"{label:48s} {per_op_us(fn, args.repeat):9.2f} us/op")


if __name__ == "__main__":
    main()
