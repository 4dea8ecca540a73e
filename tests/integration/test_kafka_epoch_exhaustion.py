"""Transaction version 2 runs its producer epoch out (KIP-890), on Apache Kafka 4.4.

Every EndTxn of version 2 bumps the epoch, so a transactional id that commits ~32,000 times
reaches the int16 ceiling; the coordinator then answers EndTxn with a *new producer id* at
epoch 0, and the producer must carry on under it: its next transaction's batches start at
sequence 0 under the new id (and, the leader never having seen that id, one at a time until the
first is acknowledged). ~32,767 transactions take minutes, so this runs with ``-m slow`` only;
``tests/unit/test_transactions.py`` checks the same adoption without a broker.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from aiokprod import Producer
from support.kafka_cluster import KafkaCluster
from support.reader import read_back


@pytest.mark.slow
async def test_transactions_carry_on_under_a_new_producer_id_when_the_epoch_runs_out(
        kafka: KafkaCluster) -> None:
    topic = f"exhaust-{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(kafka.create_topic, topic, 1)
    committed = 0
    async with Producer(bootstrap_servers=kafka.bootstrap, transactional_id=topic,
                        linger_ms=0) as producer:
        txn = producer._txn
        assert txn is not None and txn.transaction_version == 2
        first_id = txn._idem.producer_id
        while txn._idem.producer_id == first_id:
            assert committed < 33_000, "the epoch never ran out"
            async with producer.transaction():
                await producer.send(topic, str(committed).encode())
            committed += 1
        print(f"producer id {first_id} -> {txn._idem.producer_id} after {committed} "
              f"transactions (epoch now {txn._idem.producer_epoch})")
        assert txn._idem.producer_epoch <= 1
        for _ in range(3):  # the new id's first transactions
            async with producer.transaction():
                await producer.send(topic, str(committed).encode())
            committed += 1
    records = await asyncio.to_thread(read_back, kafka.bootstrap, topic, expected=committed,
                                      timeout=120, settle=1.0)
    assert [int(r.value or b"-1") for r in records] == list(range(committed))
