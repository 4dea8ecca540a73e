"""The consumer's group membership, from what each consumer a user already has hands out.

``send_offsets_to_transaction`` needs the group id, and for KIP-447's fencing the generation,
member id and group instance id the consumer holds right now: the group coordinator refuses
offsets from a consumer that was rebalanced out (a zombie) only when it sees them. No consumer
gives them as ``ConsumerGroupMetadata``:

* confluent-kafka's ``Consumer.consumer_group_metadata()`` returns an opaque ``bytes``: the
  blob librdkafka's ``rd_kafka_consumer_group_metadata_write()`` makes for handing the
  metadata to another process. Its layout (librdkafka 2.x, magic ``CGMDv2:``): the generation
  as a native-endian int32, the group id and the member id NUL-terminated, one byte that is 1
  when there is no group instance id, else 0 followed by the NUL-terminated instance id. It is
  read here, not by a call into librdkafka, so passing it needs no confluent-kafka import.
  (A ``Consumer`` itself is accepted too: its ``consumer_group_metadata()`` is called.)
* aiokafka's ``AIOKafkaConsumer`` has no such call; its group coordinator holds the current
  generation and member id (``consumer._coordinator``), so the consumer itself is accepted.

Both are read at the moment ``send_offsets_to_transaction`` is called, which is what fencing
needs: a consumer that rebalanced since the batch was polled sends its new generation, and a
zombie's old one is refused.
"""

from __future__ import annotations

import struct
from typing import Any

from aiokprod.producer.transactional.transactions import ConsumerGroupMetadata

__all__ = ["to_group_metadata"]

_CGMD_MAGIC = b"CGMDv2:"
_INT32 = struct.Struct("=i")  # librdkafka memcpy()s the int32: the writer's byte order


def to_group_metadata(group: object) -> ConsumerGroupMetadata:
    """``group`` as ``ConsumerGroupMetadata``: a group id, a ``ConsumerGroupMetadata``,
    confluent-kafka's ``consumer_group_metadata()`` (or the ``Consumer``), or an aiokafka
    ``AIOKafkaConsumer``. ValueError for anything else, or for a consumer without a group."""
    if isinstance(group, ConsumerGroupMetadata):
        metadata = group
    elif isinstance(group, str):
        metadata = ConsumerGroupMetadata(group)
    elif isinstance(group, (bytes, bytearray, memoryview)):
        metadata = _from_librdkafka(bytes(group))
    elif callable(read := getattr(group, "consumer_group_metadata", None)):  # its Consumer
        metadata = to_group_metadata(read())
    elif hasattr(group, "_coordinator") and hasattr(group, "_group_id"):  # AIOKafkaConsumer
        metadata = _from_aiokafka(group)
    else:
        raise ValueError(
            f"group must be a group id, a ConsumerGroupMetadata, confluent-kafka's "
            f"consumer.consumer_group_metadata() or an aiokafka AIOKafkaConsumer, got "
            f"{group!r}")
    if not metadata.group_id:
        raise ValueError(f"group must name a non-empty group id, got {group!r}")
    return metadata


def _from_librdkafka(blob: bytes) -> ConsumerGroupMetadata:
    """Read librdkafka's serialized consumer group metadata (the module docstring's layout)."""
    if not blob.startswith(_CGMD_MAGIC):
        raise ValueError(f"not confluent-kafka's consumer_group_metadata(): {blob[:16]!r}...")
    try:
        at = len(_CGMD_MAGIC)
        (generation,) = _INT32.unpack_from(blob, at)
        at += _INT32.size
        group_id, at = _c_string(blob, at)
        member_id, at = _c_string(blob, at)
        instance_is_null = blob[at]
        at += 1
        instance_id = None
        if not instance_is_null:
            instance_id, at = _c_string(blob, at)
    except (struct.error, IndexError, ValueError) as exc:
        raise ValueError(f"truncated confluent-kafka consumer_group_metadata(): "
                         f"{blob!r}") from exc
    return ConsumerGroupMetadata(group_id, generation, member_id, instance_id)


def _c_string(blob: bytes, at: int) -> tuple[str, int]:
    end = blob.index(b"\0", at)  # ValueError when the NUL is missing
    return blob[at:end].decode(), end + 1


def _from_aiokafka(consumer: Any) -> ConsumerGroupMetadata:
    """The group membership an ``AIOKafkaConsumer`` holds now (its group coordinator's)."""
    coordinator = consumer._coordinator
    group_id = consumer._group_id
    if coordinator is None or not group_id:
        raise ValueError("the aiokafka consumer has no group: create it with group_id=... "
                         "and start() it before passing it")
    generation = getattr(coordinator, "generation", -1)
    member_id = getattr(coordinator, "member_id", "")
    instance_id = getattr(coordinator, "_group_instance_id", None)
    return ConsumerGroupMetadata(str(group_id), int(generation), str(member_id or ""),
                                 None if instance_id is None else str(instance_id))
