"""Rules the generated classes follow beyond byte layout: versions, nullability, defaults,
header versions, constants and the API registry."""

from __future__ import annotations

import uuid

import pytest

from aiokprod.errors import UnsupportedVersionError
from aiokprod.protocol import (
    API_BY_KEY,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    MetadataRequest,
    ProduceRequest,
    ProduceResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    decode_response,
    encode_request,
)


def test_versions_outside_the_spec_name_the_api() -> None:
    with pytest.raises(UnsupportedVersionError, match=r"Produce: version 15"):
        ProduceRequest().encode(15)
    with pytest.raises(UnsupportedVersionError, match=r"Metadata: version -1"):
        MetadataRequest.decode(b"", -1)


def test_non_default_value_in_a_missing_non_ignorable_field_is_refused() -> None:
    with pytest.raises(UnsupportedVersionError, match=r"InitProducerIdRequest\.producer_id"):
        InitProducerIdRequest(producer_id=5).encode(2)
    with pytest.raises(UnsupportedVersionError, match=r"FindCoordinatorRequest\.key"):
        FindCoordinatorRequest(key="group").encode(4)
    # ...but a default value is fine, and the field simply is not written.
    assert InitProducerIdRequest(producer_id=-1).encode(2) == InitProducerIdRequest().encode(2)


def test_ignorable_fields_are_dropped_silently() -> None:
    partition = ProduceResponse.PartitionProduceResponse(index=0, log_start_offset=7)
    resp = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
        name="t", partition_responses=[partition])])
    v3 = ProduceResponse.decode(resp.encode(3), 3)  # log_start_offset is v5+ and ignorable
    assert v3.responses[0].partition_responses[0].log_start_offset == -1
    topic = ProduceRequest.TopicProduceData(name="orders", topic_id=uuid.uuid4())
    v12 = ProduceRequest.decode(ProduceRequest(topic_data=[topic]).encode(12), 12)
    v13 = ProduceRequest.decode(ProduceRequest(topic_data=[topic]).encode(13), 13)
    assert (v12.topic_data[0].name, v12.topic_data[0].topic_id) == ("orders", uuid.UUID(int=0))
    assert (v13.topic_data[0].name, v13.topic_data[0].topic_id) == ("", topic.topic_id)


def test_none_in_a_non_nullable_field_is_a_value_error_naming_it() -> None:
    bad_name = ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name=None)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ProduceRequest\.TopicProduceData\.name"):
        bad_name.encode(9)
    # MetadataRequest.topics is nullable from v1 only.
    assert MetadataRequest(topics=None).encode(1) == b"\xff\xff\xff\xff"
    with pytest.raises(ValueError, match=r"MetadataRequest\.topics"):
        MetadataRequest(topics=None).encode(0)


def test_tagged_fields_equal_to_their_default_are_not_written() -> None:
    part = ProduceResponse.PartitionProduceResponse(index=1)
    resp = ProduceResponse(
        responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[part])]
    )
    plain = resp.encode(10)
    part.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=2, leader_epoch=9)
    with_leader = resp.encode(10)
    # The empty section's count byte becomes 1, then tag, size, 2 x int32, nested tags.
    assert len(with_leader) == len(plain) + 1 + 1 + 8 + 1
    decoded = ProduceResponse.decode(with_leader, 10)
    leader = decoded.responses[0].partition_responses[0].current_leader
    assert (leader.leader_id, leader.leader_epoch) == (2, 9)
    # current_leader is not ignorable and absent before v10.
    with pytest.raises(UnsupportedVersionError, match="current_leader"):
        resp.encode(9)


def test_unknown_tag_equal_to_a_known_tag_is_refused() -> None:
    part = ProduceResponse.PartitionProduceResponse(unknown_tagged_fields={0: b"x"})
    resp = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
        partition_responses=[part])])
    with pytest.raises(ValueError, match="tag 0"):
        resp.encode(10)


def test_records_accept_any_buffer_and_decode_to_bytes() -> None:
    payload = bytes(range(200))
    for records in (payload, bytearray(payload), memoryview(payload)):
        req = ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(
            name="t", partition_data=[ProduceRequest.PartitionProduceData(records=records)])])
        decoded = ProduceRequest.decode(req.encode(9), 9)
        got = decoded.topic_data[0].partition_data[0].records
        assert type(got) is bytes and got == payload
    assert "<200 bytes>" in repr(decoded)


def test_header_versions() -> None:
    assert [ProduceRequest.header_version(v) for v in (0, 8, 9, 14)] == [1, 1, 2, 2]
    assert [ProduceResponse.header_version(v) for v in (0, 8, 9, 14)] == [0, 0, 1, 1]
    assert SaslHandshakeRequest.header_version(1) == 1
    assert SaslHandshakeResponse.header_version(1) == 0
    # ApiVersionsResponse always uses header v0, even in flexible versions.
    assert ApiVersionsRequest.header_version(3) == 2
    assert [ApiVersionsResponse.header_version(v) for v in range(5)] == [0] * 5


def test_class_constants_and_registry() -> None:
    assert (ProduceRequest.API_KEY, ProduceRequest.API_NAME) == (0, "Produce")
    # Kafka 4.0 removed Produce v0-v2 (KIP-896); v14 is KIP-1269's overlay
    assert (ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION) == (3, 14)
    assert (ProduceResponse.MIN_VERSION, ProduceResponse.MAX_VERSION) == (3, 14)
    assert ProduceRequest.FIRST_FLEXIBLE_VERSION == 9
    assert SaslHandshakeRequest.FIRST_FLEXIBLE_VERSION is None
    assert ProduceRequest.RESPONSE_TYPE is ProduceResponse
    assert sorted(API_BY_KEY) == [0, 3, 9, 10, 17, 18, 19, 22, 24, 25, 26, 28, 36, 44, 61, 71,
                                  72]
    for key, (req, resp) in API_BY_KEY.items():
        assert req.API_KEY == resp.API_KEY == key
        assert req.RESPONSE_TYPE is resp
        assert (req.MIN_VERSION, req.MAX_VERSION) == (resp.MIN_VERSION, resp.MAX_VERSION)


def test_framing_round_trip() -> None:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a")])
    frame = encode_request(req, 12, 99, None)
    size = int.from_bytes(frame[:4], "big")
    assert size == len(frame) - 4
    # header v2: api key 3, version 12, correlation 99, null client id (-1), empty tags
    assert frame[4:15] == bytes.fromhex("0003 000c 00000063 ffff 00".replace(" ", ""))
    assert MetadataRequest.decode(frame[15:], 12) == req

    resp = ProduceResponse(throttle_time_ms=3)
    wire = (7).to_bytes(4, "big") + b"\x00" + resp.encode(9)  # header v1: corr 7, no tags
    assert decode_response(wire, ProduceResponse, 9) == (7, resp)
