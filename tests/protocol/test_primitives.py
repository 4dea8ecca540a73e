"""The wire primitives' short cuts against their general form.

``uvarint`` writes lengths below 2**21 without a loop, and the compact readers take a one-byte
length without calling ``read_uvarint``: both run for every partition of every request and
answer, so each short cut is held here to the general code it stands in for, errors included.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod.errors import ProtocolError
from aiokprod.protocol.primitives import (
    read_compact_array_len,
    read_compact_nullable_array_len,
    read_compact_nullable_string,
    read_compact_string,
    read_uvarint,
    uvarint,
)
from support.examples import examples

EDGES = [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, 0x1FFFFF, 0x200000, 0xFFFFFFF, 0xFFFFFFFF]


def _uvarint_by_loop(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@settings(max_examples=examples(2000), deadline=None)
@given(st.one_of(st.sampled_from(EDGES), st.integers(0, 0x3FFFFF), st.integers(0, 0xFFFFFFFF)))
def test_uvarint_is_the_seven_bit_groups_and_reads_back(value: int) -> None:
    encoded = uvarint(value)
    assert encoded == _uvarint_by_loop(value)
    assert read_uvarint(encoded, 0, len(encoded), "v") == (value, len(encoded))


@pytest.mark.parametrize("value", [-1, 0x100000000])
def test_uvarint_refuses_values_outside_32_bits(value: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        uvarint(value)


@settings(max_examples=examples(500), deadline=None)
@given(st.integers(0, 300), st.integers(0, 400), st.integers(1, 8))
def test_compact_array_lengths_one_byte_or_more_read_alike(n: int, room: int,
                                                           min_elem: int) -> None:
    """A length of one byte (n < 127) and of two (n >= 127) take different paths: both give
    the count, or the same error for a null or for elements that cannot fit."""
    data = uvarint(n) + b"\x00" * room
    end = len(data)

    def outcome(read: object) -> object:
        try:
            return read(data, 0, end, min_elem, "Thing.items")  # type: ignore[operator]
        except ProtocolError as exc:
            return type(exc), str(exc)

    fits = n == 0 or (n - 1) * min_elem <= room
    nullable = outcome(read_compact_nullable_array_len)
    plain = outcome(read_compact_array_len)
    if not fits:
        assert nullable == plain
        assert str(plain[1]).startswith("Thing.items")  # type: ignore[index]
    elif n == 0:
        assert nullable == (-1, 1)
        assert plain == (ProtocolError, "Thing.items: null for a non-nullable compact array")
    else:
        assert nullable == plain == (n - 1, len(uvarint(n)))


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=200))
def test_compact_strings_of_any_length_read_back(text: str) -> None:
    raw = text.encode()
    data = uvarint(len(raw) + 1) + raw + b"tail"
    assert read_compact_string(data, 0, len(data), "s") == (text, len(data) - 4)
    assert read_compact_nullable_string(data, 0, len(data), "s") == (text, len(data) - 4)


def test_compact_string_null_and_truncated() -> None:
    assert read_compact_nullable_string(b"\x00", 0, 1, "s") == (None, 1)
    with pytest.raises(ProtocolError, match="s: null for a non-nullable compact string"):
        read_compact_string(b"\x00", 0, 1, "s")
    for read in (read_compact_string, read_compact_nullable_string):
        with pytest.raises(ProtocolError, match="s"):
            read(b"\x05ab", 0, 3, "s")  # four bytes announced, two there
        with pytest.raises(ProtocolError, match="s"):
            read(b"", 0, 0, "s")  # not even the length
