"""KIP-1269 for throughput: records/s against the broker's de-duplication window (issue 4).

``.venv/bin/python benchmarks/kip1269_window.py [--records 20000] [--repeats 3]``

A fault-injecting proxy (``tests/support/proxy.py``) sits in front of an Apache Kafka broker
(one KRaft node from ``tests/support/kafka_cluster.py``; Java 17 and the cached jars needed),
adds 50 ms to every response and speaks Produce v14 for it (KIP-1269: v14 requests go on as
v13, answers come back as v14) with ``ProducerStateBatchesToRetain`` (TopicProduceResponse,
tag 1) set to the window under test: 1, 5, 10, 20, and "classic" — no rewrite, the field
absent, so the producer keeps Kafka's 5. The idempotent producer (acks=all, 100-byte records, Java's
default linger and batch size) sends ``--records`` records round-robin over a topic of 1 and of
6 partitions, with ``max_in_flight_requests_per_connection = max(window, 5)``: the connection
never binds before the partition does, so the per-partition limit the broker announced is what
is measured.

One warm-up record per partition goes first (untimed): its response teaches the producer the
window, and the connection and metadata are ready. The clock runs from the first timed send
to the last acknowledgement. A sampler task reads every partition's ``on_wire_count`` (batches
sent and not yet answered) each millisecond, as ``tests/chaos/test_kip1269_window.py`` does,
and keeps the deepest value seen over the whole timed run.

Each configuration runs ``--repeats`` times, rounds interleaved (every configuration once,
then again) so machine drift hits all alike, each run on a fresh broker and proxy; the table
gives the median. The proxy runs on a thread of this process, so it shares the GIL with the
producer: absolute numbers are lower than against a remote broker, the comparison between
windows is what counts. Results: stdout and ``benchmarks/results/kip1269_window.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.proxy
sys.path.insert(0, str(ROOT))

from aiokprod import Producer, RecordMetadata  # noqa: E402
from aiokprod.network.metadata import TopicPartition  # noqa: E402
from support.kafka_cluster import (  # type: ignore[import-not-found]  # noqa: E402
    KafkaCluster,
    ensure_kafka_jars,
)
from support.proxy import (  # type: ignore[import-not-found]  # noqa: E402
    ProxyThread,
    set_batches_to_retain,
)

RESULTS = Path(__file__).resolve().parent / "results" / "kip1269_window.md"
RTT_MS = 50
RECORD_SIZE = 100
CLASSIC = 0  # no rewrite: the field is absent and the producer keeps 5
WINDOWS = (CLASSIC, 1, 5, 10, 20)
PARTITION_COUNTS = (1, 6)
SAMPLE_EVERY_S = 0.001


@dataclass(frozen=True)
class Run:
    partitions: int
    window: int  # CLASSIC, or what the proxy announced
    records: int
    seconds: float  # first timed send → last acknowledgement
    deepest_on_wire: int  # most batches of one partition on the wire at once, timed part
    limits: tuple[int, ...]  # each partition's in_flight_limit at the end
    produce_requests: int  # Produce requests the proxy forwarded (warm-up included)
    batches: int  # batches the producer sent (warm-up included)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * RECORD_SIZE / self.seconds / 1e6


def label(window: int) -> str:
    return "classic (no field)" if window == CLASSIC else str(window)


async def produce(bootstrap: str, topic: str, partitions: int, window: int, records: int
                  ) -> tuple[float, int, tuple[int, ...], int]:
    """(seconds, deepest on-wire count of one partition, learned limits, batches sent)."""
    max_in_flight = max(window, 5)
    async with Producer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                        max_in_flight_requests_per_connection=max_in_flight) as producer:
        sender = producer._sender
        assert sender is not None and sender._idem is not None
        idem = sender._idem
        states = [idem.partition_state(TopicPartition(topic, p)) for p in range(partitions)]
        # warm-up: metadata, connection, producer id, and the window from the first response
        await asyncio.gather(*[await producer.send(topic, b"w" * RECORD_SIZE, partition=p)
                               for p in range(partitions)])
        expected = window if window != CLASSIC else 5
        learned = [s.in_flight_limit for s in states]
        if learned != [expected] * partitions:
            raise RuntimeError(f"window {label(window)}: the producer learned {learned}")

        deepest = 0
        done = False

        async def sample() -> None:
            nonlocal deepest
            while not done:
                for state in states:
                    deepest = max(deepest, state.on_wire_count)
                await asyncio.sleep(SAMPLE_EVERY_S)

        padding = b"x" * (RECORD_SIZE - 8)
        futures: list[asyncio.Future[RecordMetadata]] = []
        sampler = asyncio.get_running_loop().create_task(sample())
        started = time.perf_counter()
        for n in range(records):
            futures.append(await producer.send(topic, b"%08d" % n + padding,
                                               partition=n % partitions))
            if n % 1000 == 999:
                await asyncio.sleep(0)  # let the sender start while the rest is queued
        await asyncio.gather(*futures)
        seconds = time.perf_counter() - started
        done = True
        await sampler
        limits = tuple(s.in_flight_limit for s in states)
        batches = sender.statistics().batches_sent
    return seconds, deepest, limits, batches


def run_once(partitions: int, window: int, records: int, round_no: int) -> Run:
    topic = f"kip1269-p{partitions}-w{window}-r{round_no}"
    jars = ensure_kafka_jars()
    if isinstance(jars, str):
        raise SystemExit(f"Apache Kafka unavailable: {jars}")
    with ProxyThread(seed=round_no) as proxy, \
            KafkaCluster(jars, brokers=1, advertised_ports={1: proxy.port}) as broker:
        proxy.set_upstream("127.0.0.1", broker.port(1))
        proxy.proxy.speak_produce_v14 = True
        broker.create_topic(topic, partitions)
        proxy.faults.rtt_ms = RTT_MS
        if window != CLASSIC:
            proxy.faults.rewrite_produce_responses(set_batches_to_retain(window))
        seconds, deepest, limits, batches = asyncio.run(
            produce(proxy.bootstrap, topic, partitions, window, records))
        stats = proxy.statistics()
        if stats.errors:
            raise RuntimeError(f"proxy errors: {stats.errors}")
    return Run(partitions, window, records, seconds, deepest, limits, stats.produce_requests,
               batches)


def median_run(runs: list[Run]) -> Run:
    """The run with the median throughput (an odd count gives the true median)."""
    ordered = sorted(runs, key=lambda r: r.records_per_s)
    return ordered[(len(ordered) - 1) // 2]


def table(results: dict[tuple[int, int], list[Run]], partition_counts: list[int]) -> str:
    lines = [
        "| partitions | window (ProducerStateBatchesToRetain) | max.in.flight | records/s "
        "(median) | MB/s | × classic | deepest in flight / partition | runs (records/s) |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for partitions in partition_counts:
        classic = median_run(results[(partitions, CLASSIC)]).records_per_s
        for window in WINDOWS:
            runs = results[(partitions, window)]
            med = median_run(runs)
            all_runs = ", ".join(f"{r.records_per_s:,.0f}" for r in runs)
            deepest = max(r.deepest_on_wire for r in runs)
            lines.append(
                f"| {partitions} | {label(window)} | {max(window, 5)} | "
                f"{med.records_per_s:,.0f} | {med.mb_per_s:.2f} | "
                f"{med.records_per_s / classic:.2f} | {deepest} | {all_runs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000, help="timed records per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration")
    parser.add_argument("--partitions", type=int, nargs="+", default=list(PARTITION_COUNTS),
                        help="topic sizes to measure")
    parser.add_argument("--no-write", action="store_true",
                        help=f"print only, do not write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)

    results: dict[tuple[int, int], list[Run]] = {
        (p, w): [] for p in args.partitions for w in WINDOWS}
    started = time.monotonic()
    for round_no in range(args.repeats):
        for partitions in args.partitions:
            for window in WINDOWS:
                run = run_once(partitions, window, args.records, round_no)
                results[(partitions, window)].append(run)
                print(f"round {round_no + 1}: partitions={partitions} window={label(window)} "
                      f"{run.records_per_s:,.0f} records/s  deepest={run.deepest_on_wire} "
                      f"limits={set(run.limits)} requests={run.produce_requests} "
                      f"batches={run.batches}", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started

    body = table(results, args.partitions)
    header = (
        f"## KIP-1269: throughput by de-duplication window, {RTT_MS} ms RTT\n\n"
        f"Apache Kafka behind the fault proxy, which speaks Produce v14 for it "
        f"(`benchmarks/kip1269_window.py`); idempotent, acks=all, "
        f"{RECORD_SIZE}-byte records, linger 5 ms, batch 16 KiB, {args.records:,} records per "
        f"run sent round-robin over the partitions, median of {args.repeats} runs. "
        f"\"deepest in flight\" is the most batches of one partition on the wire at once, "
        f"sampled every {SAMPLE_EVERY_S * 1000:g} ms over the timed part of every run.\n\n"
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; the proxy shares this process's GIL. "
        f"Total {elapsed:.0f} s.\n\n")
    print(header + body)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(header + body + "\n")
        print(f"\nwritten to {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
