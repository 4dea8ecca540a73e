"""``ProduceBody`` (what the sender frames) against the generated ``ProduceRequest``: the same
frame at every version, on whichever path this run uses (native from v9, or the twin)."""

from __future__ import annotations

import uuid

import pytest

from aiokprod.protocol import ProduceRequest, ProduceResponse
from aiokprod.protocol.framing import WRITE_APART_BYTES, encode_request, encode_request_pieces
from aiokprod.protocol.produce_body import ProduceBody, Topics

_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


@pytest.mark.parametrize("version", range(ProduceRequest.MIN_VERSION,
                                          ProduceRequest.MAX_VERSION + 1))
@pytest.mark.parametrize("transactional_id", [None, "txn-1"])
def test_the_frame_is_the_generated_requests(version: int, transactional_id: str | None) -> None:
    records = memoryview(bytearray(b"records of a sealed batch"))
    by_id = version > 12
    topics: Topics = [(_ID if by_id else "orders", [(0, records), (3, b"")]),
                      (uuid.UUID(int=7) if by_id else "audit", [(1, records)])]
    ours = encode_request(ProduceBody(transactional_id, -1, 30000, topics), version, 42, "c")
    request = ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout_ms=30000, topic_data=[
            ProduceRequest.TopicProduceData(
                **({"topic_id": t} if by_id else {"name": t}),
                partition_data=[ProduceRequest.PartitionProduceData(index=p, records=r)
                                for p, r in parts])
            for t, parts in topics])
    assert ours == encode_request(request, version, 42, "c")
    # and a broker reads it back
    header = 4 + 8 + 2 + 1 + (1 if version >= 9 else 0)  # size, key/version/id, client id "c"
    decoded = ProduceRequest.decode(memoryview(ours)[header:], version)
    assert [bytes(p.records or b"") for t in decoded.topic_data for p in t.partition_data] == \
        [bytes(records), b"", bytes(records)]


@pytest.mark.parametrize("version", [3, 8, 9, 11, 13])
def test_a_frame_of_big_batches_is_written_in_pieces_their_records_uncopied(version: int) -> None:
    """Records buffers of WRITE_APART_BYTES or more are pieces of their own, the very buffers
    the batches hold; the bytes between them are joined; the pieces are the frame."""
    big = memoryview(bytearray(b"b" * WRITE_APART_BYTES))
    bigger = memoryview(bytearray(b"c" * (4 * WRITE_APART_BYTES)))
    small = memoryview(bytearray(b"small batch"))
    by_id = version > 12
    topics: Topics = [(_ID if by_id else "orders", [(0, big), (1, small), (2, bigger)]),
                      (uuid.UUID(int=7) if by_id else "audit", [(0, small)])]
    body = ProduceBody("txn", -1, 30000, topics)
    pieces = encode_request_pieces(body, version, 42, "c")
    assert b"".join(pieces) == encode_request(body, version, 42, "c")
    apart = [p for p in pieces if len(p) >= WRITE_APART_BYTES]
    assert len(apart) == 2 and apart[0] is big and apart[1] is bigger
    assert len(pieces) == 5  # header and partition 0's, big, partition 1's and 2's, bigger, rest
    # a request of small batches stays one piece: one write, as before
    alone = ProduceBody(None, 1, 1000, [(_ID if by_id else "t", [(0, small)])])
    one = encode_request_pieces(alone, version, 1, None)
    assert len(one) == 1 and isinstance(one[0], bytes)


def test_it_is_framed_as_a_produce_request() -> None:
    body = ProduceBody(None, 1, 1000, [])
    assert (body.API_KEY, body.API_NAME) == (ProduceRequest.API_KEY, ProduceRequest.API_NAME)
    assert [body.header_version(v) for v in range(3, 15)] == \
        [ProduceRequest.header_version(v) for v in range(3, 15)]
    assert "0 topics" in repr(body)


_LEADER_HINT = ProduceResponse.LeaderIdAndEpoch(leader_id=2, leader_epoch=4)


@pytest.mark.parametrize("version", range(ProduceRequest.MIN_VERSION,
                                          ProduceRequest.MAX_VERSION + 1))
@pytest.mark.parametrize("hint", [None, _LEADER_HINT], ids=["common", "leader-hint"])
def test_its_answer_reads_as_the_generated_decoder_reads_it(
        version: int, hint: ProduceResponse.LeaderIdAndEpoch | None) -> None:
    """The common answer and one with a leader hint (v10+), on this run's path: the same
    ``ProduceResponse`` objects as the generated decoder's."""
    by_id = version > 12
    answer = ProduceResponse(throttle_time_ms=3, responses=[ProduceResponse.TopicProduceResponse(
        **({"topic_id": _ID} if by_id else {"name": "orders"}), partition_responses=[
            ProduceResponse.PartitionProduceResponse(
                index=1, base_offset=77, error_code=6 if hint else 0,
                **({"current_leader": hint} if hint and version >= 10 else {}))])])
    body = memoryview(answer.encode(version))
    read = ProduceBody.RESPONSE_TYPE.decode(body, version, strict=False)
    assert type(read) is ProduceResponse
    assert read == ProduceResponse.decode(body, version) == answer
