"""send_offsets_to_transaction's ``group`` from what each real consumer hands out.

confluent-kafka's ``consumer_group_metadata()`` is librdkafka's serialized blob, made here by
a real ``Consumer`` (it needs no broker for the group id and instance id); aiokafka's consumer
is read where it keeps its membership. The generation and member id of a consumer that joined
are checked against Apache Kafka in tests/integration/test_read_process_write_kafka.py (the
group coordinator refuses wrong ones).
"""

from __future__ import annotations

import struct

import pytest
from confluent_kafka import Consumer

from aiokprod import ConsumerGroupMetadata
from aiokprod.producer.transactional.group_metadata import to_group_metadata


def _confluent_metadata(**config: object) -> object:
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0, **config})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def test_confluent_metadata_of_a_consumer_that_has_not_joined() -> None:
    blob = _confluent_metadata(**{"group.id": "orders-copier"})
    assert to_group_metadata(blob) == ConsumerGroupMetadata("orders-copier", -1, "", None)


def test_confluent_metadata_with_a_group_instance_id() -> None:
    blob = _confluent_metadata(**{"group.id": "g", "group.instance.id": "copier-1"})
    assert to_group_metadata(blob) == ConsumerGroupMetadata("g", -1, "", "copier-1")


def test_confluent_metadata_of_a_member() -> None:
    # a joined member's blob, laid out as librdkafka writes it (generation in native order)
    blob = (b"CGMDv2:" + struct.pack("=i", 7) + b"g\0" + b"rdkafka-5e1c\0" + b"\1")
    assert to_group_metadata(blob) == ConsumerGroupMetadata("g", 7, "rdkafka-5e1c", None)


def test_a_confluent_consumer_itself_is_read_through_its_call() -> None:
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "log_level": 0})
    try:
        assert to_group_metadata(consumer) == ConsumerGroupMetadata("g")
    finally:
        consumer.close()


async def test_aiokafka_consumer_reads_its_coordinator() -> None:
    aiokafka = pytest.importorskip("aiokafka")

    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", group_id="g",
                                         group_instance_id="copier-1")
    with pytest.raises(ValueError, match=r"start\(\) it"):
        to_group_metadata(consumer)  # not started: no group coordinator yet

    class Coordinator:  # what start() attaches: the membership of the last join
        generation = 4
        member_id = "aiokafka-1-abc"
        _group_instance_id = "copier-1"

    consumer._coordinator = Coordinator()
    assert to_group_metadata(consumer) == ConsumerGroupMetadata(
        "g", 4, "aiokafka-1-abc", "copier-1")
    consumer._coordinator = None
    await consumer.stop()


@pytest.mark.parametrize("group", ["", b"CGMDv1:xx", b"CGMDv2:\0\0", 42, None,
                                   ConsumerGroupMetadata("")])
def test_what_no_consumer_hands_out_is_refused(group: object) -> None:
    with pytest.raises(ValueError, match="group"):
        to_group_metadata(group)


def test_a_group_id_and_the_named_tuple_pass_through() -> None:
    assert to_group_metadata("g") == ConsumerGroupMetadata("g")
    meta = ConsumerGroupMetadata("g", 3, "m", "i")
    assert to_group_metadata(meta) is meta
