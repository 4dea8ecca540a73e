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
* ``jvm-same`` — the same with ``kafka.batch.size`` at the aiokprod sink's default (256 KiB);
* ``ours``     — ``format("aiokprod")``, at-least-once (the default);
* ``ours-txn`` — ``format("aiokprod").option("transactional", "true")``: exactly-once, one
  Kafka transaction per task;
* ``floor``    — a Python data source whose Arrow writer only counts each batch's rows: what
  Spark itself costs to generate the rows and hand them to Python as Arrow, the ceiling of any
  Python sink here;
* ``noop``     — Spark's ``format("noop")``: the rows are generated and dropped in the JVM.

Every producer has acks=all, idempotence and linger 5 ms; ``batch.size`` is each sink's default
(16 KiB for Spark's, 256 KiB for ours) except in ``jvm-same``. A write is timed from the call
until it returns (every record acknowledged, the transactions committed), then the topic is
read back with confluent-kafka (read_committed) and its records counted: a write that lost or
duplicated rows fails the run. Round 0 warms both sides up (JIT, Python workers forking and
importing, producers connecting) and is reported but not in the medians.

CPU per row comes from ``/proc``, per thread: Spark's JVM, each Python worker's task thread (it
reads Spark's Arrow stream and plans each batch) and its other threads (our sink's event loop,
which encodes and sends), and the broker, during each write (all are this script's
descendants); the per-round log shows system time apart. On 2 cores the total is what bounds
the rate. At the end it prints the goals set for the sink with what was measured.

``--profile DIR`` records each Python worker with py-spy during our sink's writes (collapsed
stacks per thread). ``--writer-only`` measures the sink's executor side alone, in process: a
``TaskWriter`` fed Spark-shaped Arrow batches into Kafka, no Spark (with ``--profile FILE``, its
last round is recorded). ``--encoder-only`` measures the encoding alone, in process on Arrow
batches like Spark's (10,000 rows): ``send_columns``' encoder against what ``send_many`` needed
(``to_pylist`` and a partitioner call per keyed row).

Results are quoted in docs/performance.md ("PySpark sink") and docs/spark.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
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
ARROW_BATCH_ROWS = 10_000  # Spark's spark.sql.execution.arrow.maxRecordsPerBatch
CONTENDERS = ("jvm", "jvm-same", "ours", "ours-txn", "floor", "noop")
# the goals set for the sink: (contender, against, at least this many times its median
# rows/s)
RATE_GOALS = (("ours", "jvm-same", 1.3), ("ours", "jvm", 1.6), ("ours-txn", "jvm-same", 1.0))
# ... and our machine CPU per row within this factor of the floor (see _report)
FLOOR_GOAL = 1.3
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
    # cryptography: the Kafka fixtures (tests/support) import it; py-spy: --profile
    subprocess.run([*pip, f"pyspark=={SPARK_VERSION}", "pyarrow", "confluent-kafka", "cryptography",
                    "py-spy", "-e", str(ROOT)], check=True, timeout=1800)
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


def _stat(path: str) -> tuple[str, list[str]] | None:
    try:
        raw = Path(path).read_text()
    except OSError:
        return None
    return raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()


def _cpu_seconds(path: str) -> float:
    """User + system CPU seconds from a ``/proc/.../stat`` file (0 when it is gone)."""
    stat = _stat(path)
    return 0.0 if stat is None else (int(stat[1][11]) + int(stat[1][12])) / CLK_TCK


def _descendants() -> dict[tuple[int, int], tuple[str, float, float]]:
    """(pid, tid) → (kind, user CPU s, system CPU s) of every live descendant's threads, by kind:
    ``broker`` (the Kafka JVM), ``jvm`` (Spark's), ``python-task`` (a Python process's main
    thread: Spark's daemon, and in each worker the thread that reads the task's Arrow batches and
    runs the writer) or ``python-other`` (a Python worker's other threads: our sink's loop)."""
    parents: dict[int, int] = {}
    kinds: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(f"/proc/{entry}/stat")
        if stat is None:
            continue
        name, fields = stat
        parents[int(entry)] = int(fields[1])
        if name.startswith("python"):
            kind = "python"
        elif name == "java":
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            kind = "broker" if b"kafka.Kafka" in command else "jvm"
        else:  # a tool (py-spy) or shell: not a contender's
            continue
        kinds[int(entry)] = kind
    mine: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - mine
        mine |= frontier
    out: dict[tuple[int, int], tuple[str, float, float]] = {}
    for pid in mine & kinds.keys():
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            stat = _stat(f"/proc/{pid}/task/{tid}/stat")
            if stat is None:
                continue
            kind = kinds[pid]
            if kind == "python":
                kind = "python-task" if tid == pid else "python-other"
            out[(pid, tid)] = (kind, int(stat[1][11]) / CLK_TCK, int(stat[1][12]) / CLK_TCK)
    return out


KINDS = ("jvm", "python-task", "python-other", "broker")


def _cpu_delta(before: dict[tuple[int, int], tuple[str, float, float]],
               after: dict[tuple[int, int], tuple[str, float, float]]) -> dict[str, float]:
    """CPU seconds by kind between two snapshots (``<kind>`` user + system, ``<kind>-sys``
    system alone). A thread that ended in between is missed; Spark's Python workers and our
    loop thread outlive a write (``spark.python.worker.reuse``)."""
    out = dict.fromkeys([*KINDS, *(f"{k}-sys" for k in KINDS)], 0.0)
    for key, (kind, user, system) in after.items():
        _, user0, system0 = before.get(key, (kind, 0.0, 0.0))
        out[kind] += user - user0 + system - system0
        out[f"{kind}-sys"] += system - system0
    return out


def _python_workers() -> list[int]:
    """Spark's Python workers: Python processes forked by Spark's Python daemon."""
    python = {pid for (pid, _tid), (kind, *_) in _descendants().items() if kind == "python-task"}
    workers = []
    for pid in python:
        stat = _stat(f"/proc/{pid}/stat")
        if stat is not None and int(stat[1][1]) in python:
            workers.append(pid)
    return sorted(workers)


def _py_spy() -> Path:
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.is_file():
        raise SystemExit(f"--profile needs py-spy beside {sys.executable}: "
                         f"{sys.executable} -m pip install py-spy")
    return spy


class _Profiler:
    """py-spy on each Python worker during one write: collapsed stacks per thread, one file
    per worker (``py-spy`` must be installed in the benchmark's venv)."""

    def __init__(self, out: Path, label: str) -> None:
        self._out, self._label = out, label
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> _Profiler:
        spy = _py_spy()
        self._out.mkdir(parents=True, exist_ok=True)
        for pid in _python_workers():
            target = self._out / f"{self._label}-{pid}.txt"
            self._procs.append(subprocess.Popen(
                [str(spy), "record", "--pid", str(pid), "--rate", "200", "--threads",
                 "--format", "raw", "--output", str(target)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)  # py-spy attaches
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.send_signal(signal.SIGINT)
        for proc in self._procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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
        if contender == "jvm-same":
            from aiokprod.spark._options import SINK_BATCH_SIZE

            producer["kafka.batch.size"] = str(SINK_BATCH_SIZE)
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
                    profile = (args.profile is not None and round_no > 0
                               and contender.startswith("ours"))
                    with (_Profiler(args.profile, f"{contender}-{round_no}") if profile
                          else contextlib.nullcontext()):
                        before, started = _descendants(), time.perf_counter()
                        write()
                        elapsed = time.perf_counter() - started
                    cpu = _cpu_delta(before, _descendants())
                    counted = _count(kafka.bootstrap, topic, args.rows) if sink else args.rows
                    if counted != args.rows:
                        raise SystemExit(f"{contender} round {round_no}: {counted} records "
                                         f"read back, {args.rows} written")
                    runs.append({"contender": contender, "round": round_no, "seconds": elapsed,
                                 "rows_per_s": args.rows / elapsed,
                                 **{f"{k.replace('-', '_')}_cpu_s": v for k, v in cpu.items()}})
                    log(f"round {round_no} {contender:9}: {args.rows / elapsed:>9,.0f} rows/s  "
                        + "  ".join(f"{k} {cpu[k]:.2f}s (sys {cpu[k + '-sys']:.2f})"
                                    for k in KINDS) + "  "
                        f"(read back {counted:,})")
        finally:
            spark.stop()
    versions = (f"pyspark {pyspark.__version__}, spark-sql-kafka-0-10 {SPARK_VERSION} "
                f"(kafka-clients {_clients_version(jars)}), Apache Kafka {kafka_jars.version}, "
                f"aiokprod {aiokprod.__version__} ({'native' if _native.NATIVE else 'pure'}), "
                f"pyarrow {pyarrow.__version__}, Python {platform.python_version()}")
    _report(runs, args, versions, _encoder_ns_per_row(200_000)["columns"])


def _clients_version(jars: list[Path]) -> str:
    for jar in jars:
        if jar.name.startswith("kafka-clients-"):
            return jar.name[len("kafka-clients-"):-4]
    return "?"


def _report(runs: list[dict[str, Any]], args: argparse.Namespace, versions: str,
            encode_ns: float) -> None:
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
          "Python task thread µs/row | Python other threads µs/row | broker µs/row | "
          "total CPU µs/row |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for contender in args.contenders:
        rounds = ", ".join(f"{r['rows_per_s'] / 1000:.0f}k" for r in runs
                           if r["contender"] == contender)
        cpu = [median(contender, f"{k.replace('-', '_')}_cpu_s") / args.rows * 1e6
               for k in KINDS]
        print(f"| {contender} | {median(contender, 'rows_per_s'):,.0f} | {rounds} | "
              + " | ".join(f"{c:.2f}" for c in cpu) + f" | {sum(cpu):.2f} |")
    def ratios(contender: str, against: str) -> list[float]:
        return [r["rows_per_s"] / j["rows_per_s"] for r in counted for j in counted
                if r["contender"] == contender and j["contender"] == against
                and r["round"] == j["round"]]

    def total(contender: str) -> float:
        return sum(median(contender, f"{k.replace('-', '_')}_cpu_s") for k in KINDS) \
            / args.rows * 1e6

    print()
    print("| goal | measured | met | per round |")
    print("|---|---:|---|---|")
    for contender, against, goal in RATE_GOALS:
        if contender in args.contenders and against in args.contenders:
            ratio = median(contender, "rows_per_s") / median(against, "rows_per_s")
            print(f"| {contender} ≥ {goal:.1f}× {against} (median rows/s) | {ratio:.2f}× | "
                  f"{'yes' if ratio >= goal else 'no'} | "
                  f"{', '.join(f'{x:.2f}' for x in ratios(contender, against))} |")
    if {"ours", "floor"} <= set(args.contenders):
        # what any Python sink must spend: Spark's hand-off to Python (the floor contender), the
        # encoding from Arrow (measured in this process) and the broker's share of our batches
        floor = total("floor") + encode_ns / 1000 + median("ours", "broker_cpu_s") / args.rows \
            * 1e6
        ratio = total("ours") / floor
        print(f"| ours' machine CPU/row ≤ {FLOOR_GOAL}× the floor ({total('floor'):.2f} hand-off "
              f"+ {encode_ns / 1000:.2f} encoding + "
              f"{median('ours', 'broker_cpu_s') / args.rows * 1e6:.2f} broker = {floor:.2f} "
              f"µs) | {ratio:.2f}× | {'yes' if ratio <= FLOOR_GOAL else 'no'} | |")
    if args.json is not None:
        args.json.write_text(json.dumps({"versions": versions, "runs": runs}, indent=2))


# -- the encoder alone ---------------------------------------------------------------------------


def _arrow_batch(start: int, stop: int) -> Any:
    """Rows ``start:stop`` as Spark hands them to a Python writer: the benchmark's DataFrame (a
    string key, the row number; a binary value padded to ``VALUE_SIZE``) in Arrow."""
    import pyarrow as pa

    ids = [str(i) for i in range(start, stop)]
    return pa.record_batch({
        "key": pa.array(ids),
        "value": pa.array([i.ljust(VALUE_SIZE, "x").encode() for i in ids], pa.binary())})


def _encoder_ns_per_row(rows: int) -> dict[str, float]:
    """CPU ns per row of turning Spark-shaped Arrow batches into record batches, in process:
    ``columns`` (``send_columns``' encoder), ``lists`` (what ``send_many`` needed)."""
    import pyarrow as pa

    from aiokprod._murmur2 import murmur2
    from aiokprod.records.builder import RecordBatchBuilder
    from aiokprod.records.columnar import (
        BinaryColumn,
        append_columns,
        partition_rows,
        prepare_columns,
    )

    batch = _arrow_batch(0, ARROW_BATCH_ROWS)
    per_batch = ARROW_BATCH_ROWS
    batches = max(1, rows // per_batch)
    from aiokprod.spark._options import SINK_BATCH_SIZE

    limit = SINK_BATCH_SIZE

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

    out = {}
    for name, fn in (("columns", columns), ("lists", lists)):
        fn()
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            for _ in range(batches):
                fn()
            best = min(best, time.process_time() - started)
        out[name] = best / (batches * per_batch) * 1e9
    return out


def encoder_only(rows: int) -> None:
    """CPU per row of turning Spark-shaped Arrow batches into record batches, in process."""
    from aiokprod import _native

    ns = _encoder_ns_per_row(rows)
    encoded = max(1, rows // ARROW_BATCH_ROWS) * ARROW_BATCH_ROWS
    print(f"encoding {encoded:,} rows (string key, {VALUE_SIZE}-byte value, {PARTITIONS} "
          f"partitions) in Arrow batches of {ARROW_BATCH_ROWS:,}; "
          f"{'native' if _native.NATIVE else 'pure-Python'} path")
    print(f"  send_columns encoder (Arrow buffers): {ns['columns']:,.0f} ns CPU/row")
    print(f"  send_many path (to_pylist + murmur2 per key + append_many): {ns['lists']:,.0f} ns "
          f"CPU/row")


def writer_only(rows: int, profile: Path | None) -> None:
    """The sink's executor side alone, in this process: a ``TaskWriter`` fed Spark-shaped Arrow
    batches (10,000 rows each) into Apache Kafka 4.4.0, CPU per row of its two threads (the one
    that plans each batch, the loop's) and the broker's, without Spark's share or its noise."""
    sys.path.insert(0, str(ROOT / "tests"))
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from aiokprod.spark._executor import TaskWriter, close_all_producers
    from aiokprod.spark._options import settings_from
    from support.kafka_cluster import KafkaCluster
    from support.kafka_jars import ensure_kafka_jars

    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    per_batch = ARROW_BATCH_ROWS
    batches = [_arrow_batch(start, min(rows, start + per_batch))
               for start in range(0, rows, per_batch)]
    kafka_jars = ensure_kafka_jars()
    if isinstance(kafka_jars, str):
        raise SystemExit(f"no Kafka broker: {kafka_jars}")

    def thread_cpu() -> dict[str, float]:
        out = {"task": 0.0, "loop": 0.0}
        for tid in os.listdir("/proc/self/task"):
            out["task" if int(tid) == os.getpid() else "loop"] += _cpu_seconds(
                f"/proc/self/task/{tid}/stat")
        return out

    with KafkaCluster(kafka_jars) as kafka:
        broker = max(pid for (pid, _tid), (kind, *_) in _descendants().items()
                     if kind == "broker")

        def broker_cpu() -> float:
            return _cpu_seconds(f"/proc/{broker}/stat")

        print(f"TaskWriter alone: {rows:,} rows (string key, {VALUE_SIZE}-byte value) in Arrow "
              f"batches of {per_batch:,} into Apache Kafka {kafka_jars.version} "
              f"({PARTITIONS} partitions)")
        for round_no in range(4):
            topic = f"writer-{round_no}-{uuid.uuid4().hex[:6]}"
            kafka.create_topic(topic, partitions=PARTITIONS)
            settings = settings_from({"kafka.bootstrap.servers": kafka.bootstrap,
                                      "kafka.acks": "all", "kafka.enable.idempotence": "true",
                                      "kafka.linger.ms": "5", "topic": topic}, schema)
            spy = None
            if profile is not None and round_no == 3:
                spy = subprocess.Popen(
                    [str(_py_spy()), "record", "--pid",
                     str(os.getpid()), "--rate", "1000", "--threads", "--gil", "--format", "raw",
                     "--output", str(profile)], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
                time.sleep(1.0)
            cpu0, broker0, started = thread_cpu(), broker_cpu(), time.perf_counter()
            TaskWriter(settings, 0, 0).write(iter(batches))
            elapsed = time.perf_counter() - started
            cpu, broker_s = thread_cpu(), broker_cpu() - broker0
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=30)
            task, loop = (cpu[k] - cpu0[k] for k in ("task", "loop"))
            print(f"  round {round_no}: {rows / elapsed:>9,.0f} rows/s  µs/row: task thread "
                  f"{task / rows * 1e6:.2f}, loop thread {loop / rows * 1e6:.2f}, broker "
                  f"{broker_s / rows * 1e6:.2f}{'  (profiled)' if spy else ''}")
        close_all_producers()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--master", default=f"local[{SPARK_PARTITIONS}]",
                        help="Spark master, e.g. local-cluster[2,1,1024] (executors in their "
                             "own JVMs)")
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="record each Python worker with py-spy during our sink's writes "
                             "(collapsed stacks per thread into DIR; the CPU columns then "
                             "include py-spy's interruptions)")
    parser.add_argument("--encoder-only", action="store_true",
                        help="measure the encoder alone, in this process")
    parser.add_argument("--writer-only", action="store_true",
                        help="measure the sink's executor side alone, in this process, into "
                             "Kafka (with --profile FILE: py-spy's GIL samples of its last round)")
    args = parser.parse_args()
    if args.writer_only:
        sys.path.insert(0, str(ROOT))
        writer_only(args.rows, args.profile)
        return
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
