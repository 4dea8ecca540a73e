"""Hostile bytes into every response decoder: ProtocolError or a value, never anything else.

Brokers are not trusted to send well-formed frames (bugs, proxies, version skew), and a decoder
that leaks IndexError or struct.error, hangs, or allocates on a forged length would take the
sender task down with it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import RESPONSE_CLASSES, case_id, class_versions, struct_strategy

from aiokprod.errors import ProtocolError
from aiokprod.protocol import MetadataResponse, ProduceResponse
from aiokprod.protocol.primitives import uvarint
from support.examples import examples

CASES = class_versions(RESPONSE_CLASSES)
FUZZ = settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def decode_or_protocol_error(cls: type[Any], data: bytes, version: int) -> None:
    try:
        cls.decode(data, version)
    except ProtocolError as exc:
        assert cls.__name__ in str(exc)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@FUZZ
@given(noise=st.binary(max_size=64))
def test_random_bytes(case: tuple[type[Any], int], noise: bytes) -> None:
    cls, version = case
    decode_or_protocol_error(cls, noise, version)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@FUZZ
@given(data=st.data())
def test_truncated_and_mutated_valid_frames(
    case: tuple[type[Any], int], data: st.DataObject
) -> None:
    cls, version = case
    encoded = data.draw(struct_strategy(cls, cls, version)).encode(version)
    for cut in range(len(encoded)):
        with pytest.raises(ProtocolError, match=cls.__name__):
            cls.decode(encoded[:cut], version)
    with pytest.raises(ProtocolError, match="trailing"):
        cls.decode(encoded + b"\x00", version)
    if encoded:
        i = data.draw(st.integers(0, len(encoded) - 1))
        mutated = bytearray(encoded)
        mutated[i] = data.draw(st.integers(0, 255))
        decode_or_protocol_error(cls, bytes(mutated), version)


@pytest.mark.parametrize(
    ("cls", "version", "frame"),
    [
        # MetadataResponse v1: brokers array claims 2**31-1 entries, 4 bytes follow.
        (MetadataResponse, 1, b"\x7f\xff\xff\xff" + b"\x00" * 4),
        # MetadataResponse v12 (flexible): throttle, then a compact array of ~2**32 brokers.
        (MetadataResponse, 12, b"\x00\x00\x00\x00" + uvarint(0xFFFFFFFF) + b"\x00" * 8),
        # ProduceResponse v9: a string length far past the end of the frame.
        (ProduceResponse, 9, uvarint(2) + uvarint(0x7FFFFFF0) + b"abc"),
        # ProduceResponse v9: a tagged-field section declaring a huge number of tags.
        (ProduceResponse, 9, uvarint(1) + b"\x00\x00\x00\x00\x00\x00" + uvarint(0xFFFFFFF)),
    ],
    ids=["array-int32", "array-compact", "string-length", "tag-count"],
)
def test_forged_lengths_fail_fast(cls: type[Any], version: int, frame: bytes) -> None:
    # CPU time, not wall time: a forged length that were trusted would allocate or loop for
    # seconds; a pause of a loaded machine is no such sign
    start = time.process_time()
    with pytest.raises(ProtocolError, match=cls.__name__):
        cls.decode(frame, version)
    assert time.process_time() - start < 0.1


def test_errors_name_the_field() -> None:
    # Produce v3 response: no topics, then only 2 of throttle_time_ms's 4 bytes.
    with pytest.raises(ProtocolError, match=r"ProduceResponse\.throttle_time_ms.*need 4"):
        ProduceResponse.decode(b"\x00\x00\x00\x00\x00\x00", 3)
    # Produce v9 response: 1 topic "t" claiming 1 partition, but 5 bytes cannot hold one.
    frame = uvarint(2) + uvarint(2) + b"t" + uvarint(2) + b"\x00\x00\x00\x01\x00"
    with pytest.raises(ProtocolError, match=r"TopicProduceResponse\.partition_responses"):
        ProduceResponse.decode(frame, 9)


def test_invalid_utf8_is_a_protocol_error_naming_the_field() -> None:
    frame = uvarint(2) + uvarint(3) + b"\xff\xfe" + uvarint(1) + b"\x00" + b"\x00\x00\x00\x00"
    frame += b"\x00"
    with pytest.raises(ProtocolError, match=r"TopicProduceResponse\.name.*UTF-8"):
        ProduceResponse.decode(frame, 9)
