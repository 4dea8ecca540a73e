"""Rows/s writing 1M × 100-byte rows into Tansu: the PySpark sink beside what users do today.

    .venv/bin/python benchmarks/spark_sink.py [--rows 1000000] [--rounds 3] [--json out.json]

Contenders, each run in its own subprocess against a fresh Tansu broker (1 broker, 6
partitions, memory storage), rounds interleaved (A B C, A B C, ...):

* ``sink``            — ``df.write.format("aiokprod")`` under ``local[2]`` (two tasks, two Python
  workers, one producer each);
* ``send-many``       — one plain Python process: ``send_many`` in chunks of 10,000 values that
  are already in memory, then ``flush()`` (no Spark at all);
* ``spark-floor``     — the same ``local[2]`` write into a Python data source whose Arrow
  writer only turns each batch's value column into Python ``bytes`` and drops them: what Spark
  itself costs (generating the rows, Arrow to the Python workers), the ceiling of any Python
  sink on this machine;
* ``foreachPartition`` — what PySpark users write today: ``df.foreachPartition`` with a
  confluent-kafka ``Producer`` per partition (``produce`` per row, ``poll(0)`` every 1,000
  rows, ``flush()`` at the end) under the same ``local[2]``.

The Spark contenders write the same DataFrame (``spark.range`` with a 100-byte binary value,
2 partitions) four times in one session: the first write is *cold* (Python workers fork and
import, producers connect), the median of the other three is *warm*; the JVM start is in
neither. A write is timed from the call until it returns (every record acknowledged). Every
client is idempotent with acks=all and linger 5 ms; other settings are each client's defaults
(``batch.size`` 16 KiB for aiokprod, 1 MB for librdkafka). Records are unkeyed.

Prints a table (median over rounds) and, with ``--json``, every run. Results quoted in
docs/spark.md and docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aiokprod.devbroker import TansuBroker  # noqa: E402

PARTITIONS = 6
VALUE_SIZE = 100
CONTENDERS = ("sink", "send-many", "spark-floor", "foreachPartition")
SPARK_PARTITIONS = 2
WARM_WRITES = 3


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# -- one measurement, in a subprocess ----------------------------------------------------------


def _spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("aiokprod-spark-bench")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


def _frame(spark: Any, rows: int) -> Any:
    return spark.range(0, rows, 1, SPARK_PARTITIONS).selectExpr(
        f"cast(rpad(cast(id as string), {VALUE_SIZE}, 'x') as binary) as value")


def _timed(write: Any) -> float:
    started = time.perf_counter()
    write()
    return time.perf_counter() - started


def _cold_and_warm(write: Any) -> dict[str, float]:
    """The first write, then the median of the next WARM_WRITES (2 cores make single runs noisy)."""
    cold = _timed(write)
    warm = statistics.median(_timed(write) for _ in range(WARM_WRITES))
    return {"cold_s": cold, "warm_s": warm}


def run_sink(bootstrap: str, topic: str, rows: int) -> dict[str, float]:
    from aiokprod.spark import KafkaDataSource

    spark = _spark_session()
    try:
        spark.dataSource.register(KafkaDataSource)
        df = _frame(spark, rows)

        def write() -> None:
            (df.write.format("aiokprod").option("kafka.bootstrap.servers", bootstrap)
             .option("kafka.linger.ms", "5").option("topic", topic).mode("append").save())

        return _cold_and_warm(write)
    finally:
        spark.stop()


def run_spark_floor(bootstrap: str, topic: str, rows: int) -> dict[str, float]:
    from dataclasses import dataclass

    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    @dataclass
    class Count(WriterCommitMessage):
        rows: int

    class DropWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> Count:
            n = 0
            for batch in iterator:
                n += len(batch.column("value").to_pylist())
            return Count(n)

    class Drop(DataSource):
        @classmethod
        def name(cls) -> str:
            return "drop"

        def writer(self, schema: Any, overwrite: bool) -> DropWriter:
            return DropWriter()

    spark = _spark_session()
    try:
        spark.dataSource.register(Drop)
        df = _frame(spark, rows)
        return _cold_and_warm(lambda: df.write.format("drop").mode("append").save())
    finally:
        spark.stop()


def _confluent_partition(bootstrap: str, topic: str) -> Any:
    def write(rows: Any) -> None:  # runs in the executor's Python worker
        from confluent_kafka import KafkaException, Producer

        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5})
        failures: list[Any] = []

        def on_delivery(error: Any, _msg: Any) -> None:
            if error is not None:
                failures.append(error)

        for i, row in enumerate(rows):
            while True:
                try:
                    producer.produce(topic, value=row.value, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.001)
            if i % 1000 == 0:
                producer.poll(0)
        producer.flush()
        if failures:
            raise KafkaException(failures[0])

    return write


def run_foreach_partition(bootstrap: str, topic: str, rows: int) -> dict[str, float]:
    spark = _spark_session()
    try:
        df = _frame(spark, rows)
        write_partition = _confluent_partition(bootstrap, topic)
        return _cold_and_warm(lambda: df.foreachPartition(write_partition))
    finally:
        spark.stop()


def run_send_many(bootstrap: str, topic: str, rows: int) -> dict[str, float]:
    from aiokprod import Producer

    values = [str(i).ljust(VALUE_SIZE, "x").encode() for i in range(rows)]
    chunk = 10_000

    async def main() -> float:
        async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            await (await producer.send_many(topic, [b"warm-up"]))
            started = time.perf_counter()
            futures = [await producer.send_many(topic, values[i:i + chunk])
                       for i in range(0, rows, chunk)]
            await producer.flush()
            for future in futures:
                future.result()
            return time.perf_counter() - started

    elapsed = asyncio.run(main())
    return {"cold_s": elapsed, "warm_s": elapsed}


RUNNERS = {"sink": run_sink, "send-many": run_send_many, "spark-floor": run_spark_floor,
           "foreachPartition": run_foreach_partition}


# -- orchestration -------------------------------------------------------------------------------


def _one(contender: str, rows: int) -> dict[str, Any]:
    with TansuBroker() as broker:
        topic = "bench"
        broker.create_topic(topic, partitions=PARTITIONS)
        done = subprocess.run(
            [sys.executable, __file__, "--run", contender, "--bootstrap", broker.bootstrap,
             "--topic", topic, "--rows", str(rows)],
            capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{contender} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["contender"] = contender
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--run", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run is not None:  # the subprocess side
        print(json.dumps(RUNNERS[args.run](args.bootstrap, args.topic, args.rows)))
        return

    runs: list[dict[str, Any]] = []
    for round_no in range(args.rounds):
        for contender in CONTENDERS:
            result = _one(contender, args.rows)
            result["round"] = round_no
            runs.append(result)
            log(f"round {round_no} {contender}: warm {args.rows / result['warm_s']:,.0f} rows/s,"
                f" cold {args.rows / result['cold_s']:,.0f} rows/s")

    def median_rate(contender: str, key: str) -> float:
        return statistics.median(args.rows / r[key] for r in runs if r["contender"] == contender)

    base = median_rate("send-many", "warm_s")
    print(f"{args.rows:,} rows × {VALUE_SIZE} B into Tansu ({PARTITIONS} partitions), median of "
          f"{args.rounds} rounds; {platform.python_version()}, {os.cpu_count()} CPUs")
    print()
    print("| contender | warm rows/s | cold rows/s (first write) | warm ÷ send-many |")
    print("|---|---:|---:|---:|")
    for contender in CONTENDERS:
        warm, cold = median_rate(contender, "warm_s"), median_rate(contender, "cold_s")
        cold_text = "—" if contender == "send-many" else f"{cold:,.0f}"
        print(f"| {contender} | {warm:,.0f} | {cold_text} | {warm / base:.2f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
