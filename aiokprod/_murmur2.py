"""Java's key hash: MurmurHash2 as ``Utils.murmur2`` computes it, and the partition it gives a key.

Keyed records go to ``to_positive(murmur2(key)) % num_partitions``, bit-for-bit the Java
client's rule, so a key lands on the same partition whichever client wrote it (librdkafka's
``murmur2_random`` partitioner agrees; tests/unit/test_partitioner.py checks against it). Its own
module so that the partitioner keeps one job, choosing; the hash has a native twin
(aiokprod/_native), chosen once at import.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import cast

from aiokprod import _native

__all__ = ["group_keys", "groups_in_runs", "murmur2", "partition_for_key", "to_positive"]

_MASK32 = 0xFFFFFFFF
_M = 0x5BD1E995
_SEED = 0x9747B28C
# Precompiled little-endian "n words" unpackers: one C call turns the key body into ints, which
# beats slicing 4 bytes at a time or iterating a memoryview cast.
_WORDS = tuple(struct.Struct(f"<{n}I") for n in range(65))


def _murmur2_u32_py(
    data: bytes | bytearray | memoryview,
    _m: int = _M,
    _mask: int = _MASK32,
    _words: tuple[struct.Struct, ...] = _WORDS,
) -> int:
    """MurmurHash2 (32-bit, seed 0x9747b28c) as an unsigned int.

    Defaults bind the constants as locals (faster lookups in the loop). Java multiplies in
    wrapping 32-bit ints; here products are masked to 32 bits only where the next step reads high
    bits (the ``>> 24`` and the loop-carried ``h``), which gives the same low 32 bits.
    """
    length = len(data)
    h = _SEED ^ length
    nwords = length >> 2
    if nwords:
        if nwords <= 64:
            words = _words[nwords].unpack_from(data)
        else:
            words = struct.unpack_from(f"<{nwords}I", data)
        for w in words:
            k = w * _m & _mask
            h = (h * _m ^ (k ^ k >> 24) * _m) & _mask
    tail = length & 3
    if tail:
        # Java's fall-through switch XORs the 1-3 trailing bytes in little-endian order.
        h = (h ^ int.from_bytes(data[length - tail :], "little")) * _m & _mask
    h ^= h >> 13
    h = h * _m & _mask
    return h ^ h >> 15


# the native twin (aiokprod/_native) when it is built and not disabled: the same bits
_murmur2_u32: Callable[[bytes | bytearray | memoryview], int] = (
    _murmur2_u32_py if _native.speedups is None else _native.speedups.murmur2_u32)


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Java's ``Utils.murmur2``: the same bits, as a signed 32-bit int like Java returns."""
    h = _murmur2_u32(data)
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(x: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``, which breaks at MIN_VALUE)."""
    return x & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Java's default partitioner gives ``key``."""
    return (_murmur2_u32(key) & 0x7FFFFFFF) % num_partitions


KeyGroups = tuple[list[int], list[tuple[int, int, int]], list[bytes | None], list[bytes | None]]


def group_keys_py(keys: list[bytes | None], values: list[bytes | None], num_partitions: int
                  ) -> KeyGroups | None:
    """The records of a keyed ``send_many`` by partition, by Kafka's rule for keys.

    Returns ``(order, runs, ordered_keys, ordered_values)``: the record indices grouped by
    partition, partitions in the order of their first record and records in call order within
    each; one ``(partition, start, stop)`` run over ``order`` per partition; the keys and
    values in that order. None when a key is None or not ``bytes`` (the caller asks the
    partitioner record by record then). The twin of ``aiokprod._native._speedups.group_keys``.
    """
    if len(values) != len(keys):
        raise ValueError(f"{len(keys)} keys for {len(values)} values")
    if num_partitions <= 0:
        raise ValueError(f"no partitions to choose from ({num_partitions})")
    if any(type(k) is not bytes for k in keys):
        return None
    by_partition: dict[int, list[int]] = {}
    for i, key in enumerate(cast("list[bytes]", keys)):
        by_partition.setdefault((_murmur2_u32(key) & 0x7FFFFFFF) % num_partitions, []).append(i)
    return groups_in_runs(by_partition, keys, values)


def groups_in_runs(by_partition: dict[int, list[int]], keys: list[bytes | None],
                   values: list[bytes | None]) -> KeyGroups:
    """``group_keys``'s answer from the record indices of each partition (in the order the
    partitions first appeared): also what send_many builds when a custom partitioner, or a
    None key, has it ask the partitioner per record."""
    order = [i for indices in by_partition.values() for i in indices]
    runs = []
    pos = 0
    for p, indices in by_partition.items():
        runs.append((p, pos, pos + len(indices)))
        pos += len(indices)
    return order, runs, [keys[i] for i in order], [values[i] for i in order]


group_keys: Callable[[list[bytes | None], list[bytes | None], int], KeyGroups | None] = (
    group_keys_py if _native.speedups is None else _native.speedups.group_keys)
