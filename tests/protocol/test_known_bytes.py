"""Byte layouts written by hand from the Kafka protocol guide, not produced by the encoder.

Each case pins one encoding rule the generator must honour: classic int16/int32 lengths and -1
for null before the first flexible version, compact (length + 1) unsigned varints, tagged-field
sections after every struct in flexible versions, and the request/response header versions.
"""

from __future__ import annotations

import pytest

from aiokprod.protocol import (
    ApiVersionsRequest,
    MetadataRequest,
    ProduceRequest,
    ProduceResponse,
    ResponseHeader,
    decode_response_header,
    encode_request,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


def check(obj: object, version: int, expected: bytes) -> None:
    assert obj.encode(version) == expected  # type: ignore[attr-defined]
    assert type(obj).decode(expected, version) == obj  # type: ignore[attr-defined]


def test_api_versions_request_v3() -> None:
    # compact string "aiokprod" (len 8 -> 0x09), compact string "0.1" (0x04), no tags.
    obj = ApiVersionsRequest(client_software_name="aiokprod", client_software_version="0.1")
    check(obj, 3, h("09") + b"aiokprod" + h("04") + b"0.1" + h("00"))


def test_metadata_request_v9_flexible() -> None:
    obj = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="foo")],
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=True,
    )
    expected = (
        h("02")  # compact array, 1 topic
        + h("04") + b"foo" + h("00")  # compact string name, topic's empty tag section
        + h("01 00 01")  # three booleans
        + h("00")  # top-level empty tag section
    )
    check(obj, 9, expected)
    # A null topic list (all topics) is a compact length of 0.
    check(MetadataRequest(topics=None, allow_auto_topic_creation=True), 9, h("00 01 00 00 00"))


def test_metadata_request_v1() -> None:
    obj = MetadataRequest(
        topics=[
            MetadataRequest.MetadataRequestTopic(name="foo"),
            MetadataRequest.MetadataRequestTopic(name="ba"),
        ]
    )
    check(obj, 1, h("00000002 0003") + b"foo" + h("0002") + b"ba")
    # Nullable from v1: -1 means every topic.
    check(MetadataRequest(topics=None), 1, h("ffffffff"))


def test_produce_request_v3() -> None:
    obj = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=2, records=b"\x01\x02\x03")
                ],
            )
        ],
    )
    expected = (
        h("ffff")  # transactional_id: null string
        + h("ffff")  # acks -1
        + h("000003e8")  # timeout 1000
        + h("00000001") + h("0001") + b"t"  # one topic, name "t"
        + h("00000001") + h("00000002")  # one partition, index 2
        + h("00000003 010203")  # records: int32 length + bytes
    )
    check(obj, 3, expected)


def test_produce_request_v9() -> None:
    obj = ProduceRequest(
        transactional_id="tx",
        acks=1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=b"\x01\x02\x03"),
                    ProduceRequest.PartitionProduceData(index=1, records=None),
                ],
            )
        ],
    )
    expected = (
        h("03") + b"tx"  # compact nullable string
        + h("0001") + h("00007530")  # acks 1, timeout 30000
        + h("02") + h("02") + b"t"  # one topic, compact name
        + h("03")  # two partitions
        + h("00000000") + h("04 010203") + h("00")  # index 0, compact records, tags
        + h("00000001") + h("00") + h("00")  # index 1, null records, tags
        + h("00")  # topic tags
        + h("00")  # request tags
    )
    check(obj, 9, expected)


def test_response_header_v1_with_tagged_field() -> None:
    frame = h("0000002a") + h("01 05 02 abcd")  # correlation id 42, one tag (5) of 2 bytes
    decoded = ResponseHeader.decode(frame, 1)
    assert decoded.correlation_id == 42
    assert decoded.unknown_tagged_fields == {5: b"\xab\xcd"}
    assert decoded.encode(1) == frame
    assert decode_response_header(frame + b"BODY", 1) == (42, len(frame))
    assert decode_response_header(h("0000002a") + b"BODY", 0) == (42, 4)


def test_request_frame_uses_header_v2_with_a_classic_client_id() -> None:
    body = ApiVersionsRequest(client_software_name="a", client_software_version="1")
    frame = encode_request(body, 3, 7, "cli")
    header = h("0012 0003 00000007") + h("0003") + b"cli" + h("00")
    payload = header + h("02") + b"a" + h("02") + b"1" + h("00")
    assert frame == len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize("version", [9, 13, 14])
def test_produce_response_kip1269_tag_is_read_from_v14_only(version: int) -> None:
    """KIP-1269's JSON: ProducerStateBatchesToRetain is TopicProduceResponse's tag 1 from v14.
    Below v14 (and at partition level) a tag 1 is an unknown tagged field: kept, not read."""
    topic = (h("02") + b"t") if version < 13 else bytes(range(16))
    frame = (
        h("02") + topic  # one topic: name (v9-12) or topic id (v13+)
        + h("02")  # one partition
        + h("00000003 0000 0000000000000064")  # index 3, no error, base offset 100
        + h("ffffffffffffffff ffffffffffffffff")  # log append time, log start offset: -1
        + h("01 00")  # no record errors, null error message
        + h("01 01 04 00000014")  # partition tags: tag 1 = 20 (not a KIP-1269 field)
        + h("01 01 04 00000007")  # topic tags: tag 1 = 7
        + h("00000000")  # throttle time
        + h("00")  # response tags
    )
    decoded = ProduceResponse.decode(frame, version)
    topic_resp = decoded.responses[0]
    part = topic_resp.partition_responses[0]
    assert (part.index, part.base_offset) == (3, 100)
    assert not hasattr(part, "producer_state_batches_to_retain")
    assert part.unknown_tagged_fields == {1: h("00000014")}
    if version >= 14:
        assert topic_resp.producer_state_batches_to_retain == 7
        assert not topic_resp.unknown_tagged_fields
    else:
        assert topic_resp.producer_state_batches_to_retain == 5
        assert topic_resp.unknown_tagged_fields == {1: h("00000007")}
    assert decoded.encode(version) == frame


def test_produce_response_without_kip1269_tag_defaults_to_five() -> None:
    for version in (11, 14):
        decoded = ProduceResponse.decode(
            ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
                name="t", partition_responses=[ProduceResponse.PartitionProduceResponse(
                    index=0)])]).encode(version),
            version,
        )
        assert decoded.responses[0].producer_state_batches_to_retain == 5
