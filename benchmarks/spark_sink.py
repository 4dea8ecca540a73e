"""Rows/s of PySpark's Kafka sinks into Apache Kafka: Spark's own JVM sink beside ours.

    python benchmarks/spark_sink.py [--rows 1000000] [--rounds 7] [--json out.json]
    make bench-spark                      # the same, with the defaults

Spark's JVM Kafka sink (``spark-sql-kafka-0-10``) must match the pyspark release exactly, and
its newest release on Maven Central is 4.2.0, so this benchmark runs in its own venv outside the
repository (``~/.cache/aiokprod/bench-venv-spark-4.2.0``: pyspark 4.2.0, pyarrow,
confluent-kafka and this checkout, editable), made on first use; whatever Python starts the
script, it re-runs itself there. The connector and its dependencies are resolved once with Maven
(``benchmarks/spark_kafka/pom.xml``) into ``~/.cache/aiokprod/spark-kafka-4.2.0`` and handed to
Spark with ``spark.jars``; the broker is Apache Kafka 4.4.0 (KRaft, one node, the test
fixtures' cached jars), started and stopped by the script.

One SparkSession (``local[2]``: two tasks, two Python workers) writes the same DataFrame —
``rows`` rows, 2 partitions, a string key (the row number) and a 100-byte binary value — in
interleaved rounds, each write into a fresh 6-partition topic; each round starts one contender
later than the one before, so none always follows the same other:

* ``jvm``      — ``format("kafka")``: Spark's JVM sink (kafka-clients 3.9.2), at-least-once,
  its default ``batch.size`` (16 KiB);
* ``jvm-64k``  — the same with ``kafka.batch.size`` 64 KiB, the aiokprod sink's default;
* ``ours``     — ``format("aiokprod")``, at-least-once (the default);
* ``ours-txn`` — ``format("aiokprod").option("transactional", "true")``: exactly-once, one
  Kafka transaction per task;
* ``floor``    — a Python data source whose Arrow writer only counts each batch's rows: what
  Spark itself costs to generate the rows and hand them to Python as Arrow, the ceiling of any
  Python sink here;
* ``noop``     — Spark's ``format("noop")``: the rows are generated and dropped in the JVM.

Every producer has acks=all, idempotence and linger 5 ms; ``batch.size`` is each sink's default
(16 KiB for Spark's, 64 KiB for ours) except in ``jvm-64k``. A write is timed from the call
until it returns (every record acknowledged, the transactions committed), then the topic is
read back with confluent-kafka (read_committed) and its records counted: a write that lost or
duplicated rows fails the run. Round 0 warms both sides up (JIT, Python workers forking and
importing, producers connecting) and is reported but not in the medians.

CPU per row comes from ``/proc``: the Spark JVM's, the Python workers' and the broker's
user+system time during each write (all are this script's descendants), so it shows where each
sink spends; on 2 cores the total is what bounds the rate. ``--encoder-only`` measures the
encoding alone, in process on Arrow batches like Spark's (10,000 rows): ``send_columns``'
encoder against what ``send_many`` needed (``to_pylist`` and a partitioner call per keyed row).

Results are quoted in docs/performance.md ("PySpark sink") and docs/spark.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPARK_VERSION = "4.2.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "aiokprod"
VENV = CACHE / f"bench-venv-spark-{SPARK_VERSION}"
JARS = CACHE / f"spark-kafka-{SPARK_VERSION}"
POM = ROOT / "benchmarks" / "spark_kafka" / "pom.xml"
PARTITIONS = 6
VALUE_SIZE = 100
SPARK_PARTITIONS = 2
CONTENDERS = ("jvm", "jvm-64k", "ours", "ours-txn", "floor", "noop")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# -- the environment: a venv with pyspark 4.2.0, the connector's jars --------------------------


def _venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> Path:
    """The benchmark's venv, made once (a ``.complete`` marker is written last)."""
    python = _venv_python()
    if (VENV / ".complete").is_file():
        return python
    log(f"making {VENV} (pyspark=={SPARK_VERSION}, pyarrow, confluent-kafka, this checkout)")
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip", "setuptools>=77", "Cython>=3.0"], check=True,
                   timeout=900)
    # cryptography: the Kafka fixtures (tests/support) import it
    subprocess.run([*pip, f"pyspark=={SPARK_VERSION}", "pyarrow", "confluent-kafka", "cryptography",
                    "-e", str(ROOT)], check=True, timeout=1800)
    (VENV / ".complete").write_text("ok\n")
    return python


def ensure_jars() -> list[Path]:
    """spark-sql-kafka-0-10 and its dependencies, less the jars pyspark ships already."""
    libs = JARS / "libs"
    if not (JARS / ".complete").is_file():
        log(f"resolving spark-sql-kafka-0-10_2.13:{SPARK_VERSION} into {libs}")
        subprocess.run(["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                        "-DincludeScope=runtime", f"-DoutputDirectory={libs}",
                        f"-Dspark.version={SPARK_VERSION}"], check=True, timeout=900,
                       stdin=subprocess.DEVNULL)
        (JARS / ".complete").write_text("ok\n")
    import pyspark

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(p for p in libs.glob("*.jar") if _artifact(p.name) not in shipped)


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` → ``kafka-clients``."""
    parts = jar[:-4].split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


# -- CPU of this process's descendants ---------------------------------------------------------


def _descendants() -> dict[int, tuple[str, float]]:
    """pid → (kind, CPU seconds) of every live descendant: kind ``broker`` (the Kafka JVM),
    ``jvm`` (Spark's) or ``python`` (Spark's Python daemon and workers)."""
    parents: dict[int, int] = {}
    stats: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        parents[int(entry)] = int(fields[1])
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        kind = "python"
        if name == "java":
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            kind = "broker" if b"kafka.Kafka" in command else "jvm"
        stats[int(entry)] = (kind, cpu)
    mine: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - mine
        mine |= frontier
    return {pid: stats[pid] for pid in mine if pid in stats}


def _cpu_delta(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
               ) -> dict[str, float]:
    out = {"jvm": 0.0, "python": 0.0, "broker": 0.0}
    for pid, (kind, cpu) in after.items():
        out[kind] += cpu - before.get(pid, (kind, 0.0))[1]
    return out


# -- the contenders ------------------------------------------------------------------------------


def _spark(jars: list[Path], master: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master(master)
               .appName("aiokprod-spark-bench")
               .config("spark.jars", ",".join(str(j) for j in jars))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(SPARK_PARTITIONS))
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


def _floor_source() -> Any:
    from dataclasses import dataclass

    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    @dataclass
    class Count(WriterCommitMessage):
        rows: int

    class CountWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> Count:
            return Count(sum(batch.num_rows for batch in iterator))

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "floor"

        def writer(self, schema: Any, overwrite: bool) -> CountWriter:
            return CountWriter()

    return Floor


def _writer(contender: str, df: Any, bootstrap: str, topic: str) -> Any:
    if contender in ("floor", "noop"):
        return lambda: df.write.format(contender).mode("append").save()
    producer = {"kafka.bootstrap.servers": bootstrap, "kafka.acks": "all",
                "kafka.enable.idempotence": "true", "kafka.linger.ms": "5", "topic": topic}
    if contender.startswith("jvm"):
        if contender == "jvm-64k":
            producer["kafka.batch.size"] = "65536"
        return lambda: df.write.format("kafka").options(**producer).save()
    if contender == "ours-txn":
        producer["transactional"] = "true"
    return lambda: df.write.format("aiokprod").options(**producer).mode("append").save()


def _count(bootstrap: str, topic: str, expected: int, timeout: float = 120.0) -> int:
    """Records a read_committed consumer finds in ``topic`` (all partitions, from the start)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        count, at_end = 0, set()
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                error = message.error()
                if error is None:
                    count += 1
                    at_end.discard(message.partition())
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
            if count > expected:
                break
        return count
    finally:
        consumer.close()


def run(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import pyarrow
    import pyspark

    import aiokprod
    from aiokprod import _native
    from aiokprod.spark import KafkaDataSource
    from support.kafka_cluster import KafkaCluster
    from support.kafka_jars import ensure_kafka_jars

    jars = ensure_jars()
    kafka_jars = ensure_kafka_jars()
    if isinstance(kafka_jars, str):
        raise SystemExit(f"no Kafka broker: {kafka_jars}")
    runs: list[dict[str, Any]] = []
    with KafkaCluster(kafka_jars) as kafka:
        spark = _spark(jars, args.master)
        try:
            spark.dataSource.register(KafkaDataSource)
            spark.dataSource.register(_floor_source())
            df = spark.range(0, args.rows, 1, SPARK_PARTITIONS).selectExpr(
                "cast(id as string) as key",
                f"cast(rpad(cast(id as string), {VALUE_SIZE}, 'x') as binary) as value")
            for round_no in range(args.rounds):
                # each round starts one contender later: none always runs right after the
                # same other (the JVM sink leaves garbage for Spark's collector, for one)
                shift = round_no % len(args.contenders)
                for contender in args.contenders[shift:] + args.contenders[:shift]:
                    topic = f"bench-{contender}-{round_no}-{uuid.uuid4().hex[:6]}"
                    sink = contender not in ("floor", "noop")
                    if sink:
                        kafka.create_topic(topic, partitions=PARTITIONS)
                    write = _writer(contender, df, kafka.bootstrap, topic)
                    before, started = _descendants(), time.perf_counter()
                    write()
                    elapsed = time.perf_counter() - started
                    cpu = _cpu_delta(before, _descendants())
                    counted = _count(kafka.bootstrap, topic, args.rows) if sink else args.rows
                    if counted != args.rows:
                        raise SystemExit(f"{contender} round {round_no}: {counted} records "
                                         f"read back, {args.rows} written")
                    runs.append({"contender": contender, "round": round_no, "seconds": elapsed,
                                 "rows_per_s": args.rows / elapsed, "jvm_cpu_s": cpu["jvm"],
                                 "python_cpu_s": cpu["python"], "broker_cpu_s": cpu["broker"]})
                    log(f"round {round_no} {contender:9}: {args.rows / elapsed:>9,.0f} rows/s  "
                        f"cpu spark jvm {cpu['jvm']:.2f}s python {cpu['python']:.2f}s broker "
                        f"{cpu['broker']:.2f}s  (read back {counted:,})")
        finally:
            spark.stop()
    versions = (f"pyspark {pyspark.__version__}, spark-sql-kafka-0-10 {SPARK_VERSION} "
                f"(kafka-clients {_clients_version(jars)}), Apache Kafka {kafka_jars.version}, "
                f"aiokprod {aiokprod.__version__} ({'native' if _native.NATIVE else 'pure'}), "
                f"pyarrow {pyarrow.__version__}, Python {platform.python_version()}")
    _report(runs, args, versions)


def _clients_version(jars: list[Path]) -> str:
    for jar in jars:
        if jar.name.startswith("kafka-clients-"):
            return jar.name[len("kafka-clients-"):-4]
    return "?"


def _report(runs: list[dict[str, Any]], args: argparse.Namespace, versions: str) -> None:
    counted = [r for r in runs if r["round"] > 0] or runs

    def median(contender: str, key: str) -> float:
        return statistics.median(r[key] for r in counted if r["contender"] == contender)

    print(f"{args.rows:,} rows (string key, {VALUE_SIZE}-byte value) into Apache Kafka "
          f"({PARTITIONS} partitions), {args.master}, {args.rounds} interleaved "
          f"rounds, medians of rounds 1-{args.rounds - 1}; {os.cpu_count()} CPUs "
          f"({platform.machine()}), {time.strftime('%Y-%m-%d')}")
    print(versions)
    print()
    print("| contender | median rows/s | per round (round 0 = warm-up) | Spark JVM µs/row | "
          "Python workers µs/row | broker µs/row | total CPU µs/row |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for contender in args.contenders:
        rounds = ", ".join(f"{r['rows_per_s'] / 1000:.0f}k" for r in runs
                           if r["contender"] == contender)
        cpu = [median(contender, f"{k}_cpu_s") / args.rows * 1e6
               for k in ("jvm", "python", "broker")]
        print(f"| {contender} | {median(contender, 'rows_per_s'):,.0f} | {rounds} | "
              f"{cpu[0]:.2f} | {cpu[1]:.2f} | {cpu[2]:.2f} | {sum(cpu):.2f} |")
    if "jvm" in args.contenders:
        print()
        jvm = median("jvm", "rows_per_s")
        for contender in ("ours", "ours-txn", "jvm-64k", "floor"):
            if contender in args.contenders:
                ratios = [r["rows_per_s"] / j["rows_per_s"] for r in counted for j in counted
                          if r["contender"] == contender and j["contender"] == "jvm"
                          and r["round"] == j["round"]]
                print(f"{contender} / jvm: {median(contender, 'rows_per_s') / jvm:.2f}x "
                      f"(median rows/s); per round {', '.join(f'{x:.2f}' for x in ratios)}")
    if args.json is not None:
        args.json.write_text(json.dumps({"versions": versions, "runs": runs}, indent=2))


# -- the encoder alone ---------------------------------------------------------------------------


def encoder_only(rows: int) -> None:
    """CPU per row of turning Spark-shaped Arrow batches into record batches, in process."""
    import pyarrow as pa

    from aiokprod import _native
    from aiokprod._murmur2 import murmur2
    from aiokprod.records.builder import RecordBatchBuilder
    from aiokprod.records.columnar import (
        BinaryColumn,
        append_columns,
        partition_rows,
        prepare_columns,
    )

    per_batch = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch
    ids = [str(i) for i in range(per_batch)]
    batch = pa.record_batch({
        "key": pa.array(ids),
        "value": pa.array([i.ljust(VALUE_SIZE, "x").encode() for i in ids], pa.binary())})
    batches = max(1, rows // per_batch)
    limit = 16_384

    def columns() -> None:
        cols = prepare_columns(per_batch, BinaryColumn.from_arrow(batch.column("value")),
                               BinaryColumn.from_arrow(batch.column("key")))
        _order, counts = partition_rows(cols, PARTITIONS)
        pos = 0
        for count in counts:
            stop = pos + count
            while pos < stop:
                buf = bytearray(61)
                taken, *_ = append_columns(buf, cols, pos, stop, limit, 0, 0, 0)
                pos += taken

    def lists() -> None:  # what send_many needed per batch: Python objects, a call per key
        keys = batch.column("key").view(pa.binary()).to_pylist()
        values = batch.column("value").to_pylist()
        by_partition: dict[int, list[int]] = {}
        for i, key in enumerate(keys):
            by_partition.setdefault((murmur2(key) & 0x7FFFFFFF) % PARTITIONS, []).append(i)
        for indices in by_partition.values():
            ks, vs = [keys[i] for i in indices], [values[i] for i in indices]
            pos = 0
            while pos < len(vs):
                builder = RecordBatchBuilder(bytearray(), write_limit=limit)
                pos += builder.append_many(0, vs, ks, start=pos)

    print(f"encoding {batches * per_batch:,} rows (string key, {VALUE_SIZE}-byte value, "
          f"{PARTITIONS} partitions) in Arrow batches of {per_batch:,}; "
          f"{'native' if _native.NATIVE else 'pure-Python'} path")
    for name, fn in (("send_columns encoder (Arrow buffers)", columns),
                     ("send_many path (to_pylist + murmur2 per key + append_many)", lists)):
        fn()
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            for _ in range(batches):
                fn()
            best = min(best, time.process_time() - started)
        print(f"  {name}: {best / (batches * per_batch) * 1e9:,.0f} ns CPU/row")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--master", default=f"local[{SPARK_PARTITIONS}]",
                        help="Spark master, e.g. local-cluster[2,1,1024] (executors in their "
                             "own JVMs)")
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--encoder-only", action="store_true",
                        help="measure the encoder alone, in this process")
    args = parser.parse_args()
    if args.encoder_only:
        sys.path.insert(0, str(ROOT))
        encoder_only(args.rows)
        return
    python = ensure_venv()
    if Path(sys.prefix).resolve() != VENV.resolve():
        # the venv is shared by every checkout (its editable install names the first one):
        # this checkout goes first on the path, for this process and Spark's Python workers
        path = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(ROOT) if not path else str(ROOT) + os.pathsep + path
        os.execv(str(python), [str(python), __file__, *sys.argv[1:]])
    run(args)


if __name__ == "__main__":
    main()
