"""Rows/s of the PySpark sink's Schema Registry path beside its raw-bytes path:
``python benchmarks/spark_schema_registry.py [--rows 1000000] [--rounds 3]``.

One SparkSession (``local[2]``) writes ``rows`` rows in 2 partitions to a fresh 6-partition
topic of one Tansu broker, alternating two contenders each round:

* ``raw``      — a binary ``value`` column (and the row number as a string key), each value as
  long as the Avro record below encodes to (its median length), so both write the same bytes;
* ``registry`` — a struct ``value`` of ten fields (long, string, double, int, boolean, string,
  long, float, string, nullable string), written as Avro through the registry
  (``value.schema.registry.url``), the same string key;
* ``json``     — the struct DataFrame with its value turned into bytes by Spark itself
  (``to_json``), written as raw bytes: what a job with the same struct rows pays for bytes
  without a registry;
* ``floor-raw``, ``floor-struct`` — the same two DataFrames into a Python data source whose
  Arrow writer only counts rows (``benchmarks/spark_sink.py``'s floor): what Spark costs to hand
  each over to Python as Arrow, the ceiling of any Python sink for it.

Both DataFrames are cached and counted first, so the timed write is the sink's work (the Arrow
hand-over to Python included), not the rows' generation. The registry is the tests' Apicurio
Registry (tests/support/schema_registry_server.py), its schema registered in round 0, which is
reported but not in the medians. ``--encoder-only``: the column encoder alone on 10,000-row
Arrow batches, beside fastavro row by row.

Needs the ``test`` extra (pyspark, fastavro, numpy) and Java 17 + Maven for the registry.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

STRUCT = ("named_struct('id', id, 'user', concat('user-', cast(id % 1000 as string)), "
          "'amount', cast(id as double) / 4, 'qty', cast(id % 7 as int), 'paid', id % 2 = 0, "
          "'country', 'DE', 'ts', id + 1700000000000, 'score', cast(0.5 as float), "
          "'sku', concat('SKU-', cast(id % 100 as string)), "
          "'note', case when id % 3 = 0 then 'gift' else null end)")


def _spark() -> Any:
    from pyspark.sql import SparkSession

    from aiokprod.spark import KafkaDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers: this venv's Python
    session = (SparkSession.builder.master("local[2]")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")
               .getOrCreate())
    session.dataSource.register(KafkaDataSource)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from spark_sink import _floor_source

    session.dataSource.register(_floor_source())
    return session


def run(args: argparse.Namespace) -> None:
    from aiokprod.devbroker import TansuBroker
    from support.registry_jar import ensure_registry
    from support.schema_registry_server import RegistryServer

    runner = ensure_registry()
    if isinstance(runner, str):
        sys.exit(runner)
    spark = _spark()
    with tempfile.TemporaryDirectory() as tmp, TansuBroker() as broker:
        registry = RegistryServer(runner, Path(tmp))
        registry.start()
        try:
            base = spark.range(0, args.rows, 1, 2)
            structured = base.selectExpr("cast(id as string) as key",
                                         f"{STRUCT} as value").cache()
            structured.count()
            size = _avro_length()
            raw = base.selectExpr(
                "cast(id as string) as key",
                f"cast(rpad(cast(id as string), {size}, 'x') as binary) as value").cache()
            raw.count()
            as_json = structured.selectExpr("key", "cast(to_json(value) as binary) as value")
            contenders = ["raw", "registry", "json", "floor-raw", "floor-struct"]
            rates: dict[str, list[float]] = {c: [] for c in contenders}
            for round_ in range(args.rounds + 1):
                shift = round_ % len(contenders)  # each round starts one contender later
                for contender in contenders[shift:] + contenders[:shift]:
                    topic = f"bench-{contender}-{uuid.uuid4().hex[:8]}"
                    df = structured if contender in ("registry", "floor-struct") else \
                        as_json if contender == "json" else raw
                    if contender.startswith("floor"):
                        writer = df.write.format("floor")
                    else:
                        broker.create_topic(topic, 6)
                        writer = (df.write.format("aiokprod")
                                  .option("kafka.bootstrap.servers", broker.bootstrap)
                                  .option("kafka.linger.ms", "5").option("topic", topic))
                    if contender == "registry":
                        writer = (writer.option("value.schema.registry.url", registry.url)
                                  .option("value.basic.auth.user.info", registry.user_info)
                                  .option("value.avro.record.name", "Order"))
                    started = time.perf_counter()
                    writer.mode("append").save()
                    rate = args.rows / (time.perf_counter() - started)
                    print(f"round {round_} {contender:13} {rate:12,.0f} rows/s"
                          f"{'  (warm-up)' if round_ == 0 else ''}")
                    if round_:
                        rates[contender].append(rate)
        finally:
            registry.stop()
            spark.stop()
    median = {c: statistics.median(r) for c, r in rates.items()}
    print(f"\n{args.rows:,} rows, median of {args.rounds} rounds, rows/s:")
    for contender, rate in median.items():
        print(f"  {contender:13} {rate:12,.0f}")
    print(f"registry / json from the same struct: {median['registry'] / median['json']:.2f}x")
    print(f"registry / raw: {median['registry'] / median['raw']:.2f}x; Spark's own hand-over "
          f"of the struct / of the binary column (floors): "
          f"{median['floor-struct'] / median['floor-raw']:.2f}x")


def _avro_length() -> int:
    rows = _arrow_rows(1000)
    from aiokprod.schema_registry.avro_columns import AvroColumnEncoder

    encoded = AvroColumnEncoder(rows.type).encode(rows, b"\x00" * 5)
    return int(statistics.median(len(v) for v in encoded.to_pylist()))


def _arrow_rows(n: int) -> Any:
    import pyarrow as pa

    fields = [pa.field("id", pa.int64(), False), pa.field("user", pa.string(), False),
              pa.field("amount", pa.float64(), False), pa.field("qty", pa.int32(), False),
              pa.field("paid", pa.bool_(), False), pa.field("country", pa.string(), False),
              pa.field("ts", pa.int64(), False), pa.field("score", pa.float32(), False),
              pa.field("sku", pa.string(), False), pa.field("note", pa.string())]
    arrays = [pa.array(range(n), pa.int64()), pa.array([f"user-{i % 1000}" for i in range(n)]),
              pa.array([i / 4 for i in range(n)]), pa.array([i % 7 for i in range(n)],
                                                            pa.int32()),
              pa.array([i % 2 == 0 for i in range(n)]), pa.array(["DE"] * n),
              pa.array([1_700_000_000_000 + i for i in range(n)]),
              pa.array([0.5] * n, pa.float32()), pa.array([f"SKU-{i % 100}" for i in range(n)]),
              pa.array(["gift" if i % 3 == 0 else None for i in range(n)])]
    return pa.StructArray.from_arrays(arrays, fields=fields)


def encoder_only() -> None:
    import fastavro

    from aiokprod.schema_registry.avro_columns import AvroColumnEncoder, avro_schema_for

    rows = _arrow_rows(10_000)
    encoder = AvroColumnEncoder(rows.type)
    header = b"\x00\x00\x00\x00\x01"
    rounds = 20
    started = time.perf_counter()
    for _ in range(rounds):
        encoder.encode(rows, header)
    columns_us = (time.perf_counter() - started) / rounds / len(rows) * 1e6
    parsed = fastavro.parse_schema(avro_schema_for(rows.type))
    started = time.perf_counter()
    for row in rows.to_pylist():
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
    fastavro_us = (time.perf_counter() - started) / len(rows) * 1e6
    print(f"10,000 rows of ten fields: column encoder {columns_us:.2f} us/row, fastavro row by "
          f"row {fastavro_us:.2f} us/row (to_pylist included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--encoder-only", action="store_true")
    args = parser.parse_args()
    if args.encoder_only:
        encoder_only()
    else:
        run(args)


if __name__ == "__main__":
    main()
