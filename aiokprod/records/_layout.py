"""The 61-byte v2 batch header: field offsets, attribute bits, and in-place restamping.

    0  baseOffset int64            27 baseTimestamp int64
    8  batchLength int32           35 maxTimestamp int64
    12 partitionLeaderEpoch int32  43 producerId int64
    16 magic int8                  51 producerEpoch int16
    17 crc uint32 (CRC32C of 21..)  53 baseSequence int32
    21 attributes int16            57 recordCount int32
    23 lastOffsetDelta int32       61 records
"""

from __future__ import annotations

import struct

from crc32c import crc32c

__all__ = [
    "ATTRIBUTES_OFFSET",
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_LOG_APPEND_TIME",
    "ATTR_TRANSACTIONAL",
    "CRC",
    "CRC_OFFSET",
    "HEADER",
    "HEADER_SIZE",
    "LENGTH_OFFSET",
    "MAGIC",
    "MAGIC_OFFSET",
    "restamp",
]

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
# Offsets of the fields that the CRC and restamp touch.
LENGTH_OFFSET = 8
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
PRODUCER_OFFSET = 43
MAGIC = 2

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

# producerId, producerEpoch, baseSequence: the fields restamp rewrites.
_PRODUCER_STATE = struct.Struct(">qhi")
CRC = struct.Struct(">I")
def restamp(
    batch: bytearray | memoryview, *, producer_id: int, producer_epoch: int, base_sequence: int
) -> None:
    """Rewrite a sealed batch's producer id, epoch and base sequence in place, then its CRC.

    The idempotent producer needs this when a batch is retried after an epoch bump or a
    sequence reset; the records (possibly compressed) are untouched, so nothing is re-encoded.
    """
    if len(batch) < HEADER_SIZE or batch[MAGIC_OFFSET] != MAGIC:
        raise ValueError("not a sealed v2 record batch")
    (length,) = struct.unpack_from(">i", batch, LENGTH_OFFSET)
    if length + 12 != len(batch):
        raise ValueError(f"batch length field {length} does not match {len(batch)} bytes")
    _PRODUCER_STATE.pack_into(batch, PRODUCER_OFFSET, producer_id, producer_epoch, base_sequence)
    with memoryview(batch) as view, view[ATTRIBUTES_OFFSET:] as covered:
        crc = crc32c(covered)
    CRC.pack_into(batch, CRC_OFFSET, crc)
