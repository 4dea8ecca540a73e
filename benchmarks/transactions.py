"""Records/s in transactions of 1, 100 and 10,000 records, against the same workload without
transactions, aiokprod beside confluent-kafka's transactional producer.

    python benchmarks/transactions.py [--scale 1.0]

It starts a 1-node Apache Kafka (the test fixture's ``tests/support/kafka_cluster.py``;
Java 17+, the jars cached once) and stops it at the end.
Values are 100 bytes, acks=all, idempotence on, linger 5 ms; each client sends one record per
call (``send()`` / ``produce()``) and waits for every acknowledgement and the commit. A run
with transactions of N records is: begin, N sends, commit, repeated; the clock covers all of
it. Prints a Markdown table (docs/transactions.md holds one).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiokprod import Producer

VALUE = b"v" * 100
# (records per transaction or None for no transaction, total records) at scale 1.0
WORKLOADS: list[tuple[int | None, int]] = [(None, 100_000), (1, 500), (100, 20_000),
                                           (10_000, 100_000)]


async def aiokprod_run(bootstrap: str, topic: str, per_txn: int | None, total: int) -> float:
    config: dict[str, Any] = {"linger_ms": 5}
    if per_txn is not None:
        config["transactional_id"] = f"bench-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=bootstrap, **config) as producer:
        if per_txn is None:
            await (await producer.send(topic, VALUE))  # warm-up: metadata, producer id
        else:
            async with producer.transaction():
                await (await producer.send(topic, VALUE))
        started = time.perf_counter()
        if per_txn is None:
            for _ in range(total):
                await producer.send(topic, VALUE)
            await producer.flush()  # as commit_transaction() does: wait for every batch
        else:
            for _ in range(total // per_txn):
                async with producer.transaction():
                    for _ in range(per_txn):
                        await producer.send(topic, VALUE)
        return total / (time.perf_counter() - started)


def confluent_run(bootstrap: str, topic: str, per_txn: int | None, total: int) -> float:
    from confluent_kafka import Producer as CProducer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 5,
                              "enable.idempotence": True, "acks": "all", "log_level": 3}
    if per_txn is not None:
        config["transactional.id"] = f"bench-c-{uuid.uuid4().hex[:8]}"
    producer = CProducer(config)
    failures: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    def produce(count: int) -> None:
        for i in range(count):
            while True:
                try:
                    producer.produce(topic, VALUE, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.001)
            if i % 1000 == 0:
                producer.poll(0)

    if per_txn is not None:
        producer.init_transactions(30)
        producer.begin_transaction()
        produce(1)
        producer.commit_transaction(30)
    else:
        produce(1)
        producer.flush(30)
    started = time.perf_counter()
    if per_txn is None:
        produce(total)
        producer.flush(60)
    else:
        for _ in range(total // per_txn):
            producer.begin_transaction()
            produce(per_txn)
            producer.commit_transaction(60)  # flushes first
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"confluent: {len(failures)} deliveries failed: {failures[0]}")
    return total / elapsed


def run_all(bootstrap: str, create_topic: Any, scale: float) -> list[tuple[str, int, float,
                                                                           float]]:
    rows = []
    for per_txn, base in WORKLOADS:
        total = max(per_txn or 1, int(base * scale) // (per_txn or 1) * (per_txn or 1))
        label = "no transactions" if per_txn is None else f"{per_txn:,} per transaction"
        topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
        create_topic(topic)
        ours = asyncio.run(aiokprod_run(bootstrap, topic, per_txn, total))
        topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
        create_topic(topic)
        theirs = confluent_run(bootstrap, topic, per_txn, total)
        rows.append((label, total, ours, theirs))
        print(f"{label}: {total} records, aiokprod {ours:,.0f}/s, confluent {theirs:,.0f}/s",
              file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply record counts")
    args = parser.parse_args()
    tests = Path(__file__).resolve().parents[1] / "tests"
    sys.path.insert(0, str(tests))
    from support.kafka_cluster import KafkaCluster
    from support.kafka_jars import ensure_kafka_jars

    jars = ensure_kafka_jars()
    if isinstance(jars, str):
        raise SystemExit(f"Apache Kafka unavailable: {jars}")
    import tempfile

    with tempfile.TemporaryDirectory() as work, \
            KafkaCluster(jars, work_dir=Path(work)) as kafka:
        rows = run_all(kafka.bootstrap, lambda name: kafka.create_topic(name, 3),
                       args.scale)
    print("| workload | records | aiokprod records/s | confluent-kafka records/s |")
    print("|---|---:|---:|---:|")
    for label, total, ours, theirs in rows:
        print(f"| {label} | {total:,} | {ours:,.0f} | {theirs:,.0f} |")


if __name__ == "__main__":
    main()
