"""Per-record workloads as users write them, side by side: ``python benchmarks/per_record.py``.

``benchmarks/run.py`` measures fire-and-forget sends without keys (and confluent without
delivery callbacks), which hides two costs users pay: confirming every record (a future, or a
callback, per record, and ``asyncio.gather`` over them) and keyed partitioning (murmur2 per
record). This script measures the workloads that show them, for every client:

* ``confirm-gather``  — ``futs = [await send(...) for ...]; await asyncio.gather(*futs)``;
  confluent: ``produce(..., on_delivery=cb)`` per record, ``poll(0)`` every 1,000, ``flush()``;
* ``confirm-each``    — the same futures awaited one by one after the loop;
* ``fire-and-forget`` — ``await send(...)`` only, then ``flush()``; confluent without callbacks;
* ``send-many``       — aiokprod's ``send_many`` in chunks of 1,000 (other clients: no such API);
* ``latency``         — aiokprod fire-and-forget with send-to-ack latency sampled every 16th
  record, at full speed and paced at half of it (``--latency-rate`` or half the measured max);
* ``queued``          — aiokprod only: RSS per queued 100-byte record while the brokers stall.

Keys are ``none``, ``16`` or ``100000`` distinct keys (``key-<i % K>``). The cluster is
librdkafka's mock cluster (3 brokers, replication factor 3, 6 partitions), fresh per run; every
run is one client in its own subprocess (its CPU time is its own: ``time.process_time()``, all
threads, librdkafka's included; peak RSS from ``getrusage``), rounds are interleaved (all runs
of round 1, then round 2, ...) so machine drift hits every client alike, and the table shows
medians. Idempotent, acks=all, linger 5 ms everywhere; otherwise each client's defaults, unless
``--batch-size`` sets every client's bound on a batch alike (``batch_size``, ``batch.size``,
``max_batch_size``): by default ours is Java's 16 KiB and librdkafka's 1,000,000 bytes, so at
1 KiB records confluent-kafka sends about 65 times fewer batches, and the comparison weighs
each client's cost per batch, not only per record.

``--quick`` runs one tiny round of a few workloads (a smoke test of the machinery).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.mock_cluster
sys.path.insert(0, str(ROOT))

# aiokprod-py: aiokprod with AIOKPROD_NO_EXTENSIONS=1, its pure-Python path
CLIENTS = ("aiokprod", "aiokprod-py", "confluent", "aiokafka", "confluent-aio")
PARTITIONS = 6
LINGER_MS = 5
CHUNK = 1000
RESULTS = ROOT / "benchmarks" / "results"

# (workload, keys, record size, loop); the default matrix
MATRIX: list[tuple[str, str, int, str]] = [
    ("confirm-gather", "16", 100, "asyncio"),
    ("confirm-gather", "16", 100, "uvloop"),
    ("confirm-gather", "100000", 100, "asyncio"),
    ("confirm-gather", "none", 100, "asyncio"),
    ("confirm-each", "16", 100, "asyncio"),
    ("fire-and-forget", "none", 100, "asyncio"),
    ("fire-and-forget", "16", 100, "asyncio"),
    ("send-many", "none", 100, "asyncio"),
    ("send-many", "16", 100, "asyncio"),
    ("confirm-gather", "16", 1024, "asyncio"),
    ("fire-and-forget", "none", 1024, "asyncio"),
    ("send-many", "none", 1024, "asyncio"),
]
QUICK: list[tuple[str, str, int, str]] = [
    ("confirm-gather", "16", 100, "asyncio"),
    ("fire-and-forget", "none", 100, "asyncio"),
    ("send-many", "none", 100, "asyncio"),
]
# what a client cannot do: no row instead of a misleading one
UNSUPPORTED = {("confluent", "send-many"), ("aiokafka", "send-many"),
               ("confluent-aio", "send-many")}


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# ---- the child: one client, one workload ------------------------------------------------------


def _keys(spec: dict[str, Any]) -> list[bytes] | None:
    k = spec["keys"]
    return None if k == "none" else [b"key-%d" % i for i in range(int(k))]


def _peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _current_rss_kib() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _row(spec: dict[str, Any], elapsed: float, cpu: float, errors: int,
         extra: dict[str, Any] | None = None) -> dict[str, Any]:
    n = spec["num_records"]
    return {"records": n, "errors": errors, "records_per_sec": n / elapsed,
            "cpu_us_per_record": cpu * 1e6 / n, "elapsed_s": elapsed,
            "peak_rss_kib": _peak_rss_kib(), **(extra or {})}


async def _aiokprod(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokprod import Producer

    topic, n, workload = spec["topic"], spec["num_records"], spec["workload"]
    value, keys = b"x" * spec["record_size"], _keys(spec)
    nkeys = len(keys) if keys else 1
    async with Producer(bootstrap_servers=spec["bootstrap"], acks="all", linger_ms=LINGER_MS,
                        enable_idempotence=True, **_batch_bound(spec, "batch_size")) as producer:
        await producer.send_and_wait(topic, value, key=keys[0] if keys else None)
        send, clock = producer.send, time.perf_counter
        errors = 0
        extra: dict[str, Any] = {}
        cpu0, t0 = time.process_time(), clock()
        if workload in ("confirm-gather", "confirm-each"):
            if keys:
                futs = [await send(topic, value, keys[i % nkeys]) for i in range(n)]
            else:
                futs = [await send(topic, value) for _ in range(n)]
            if workload == "confirm-gather":
                results = await asyncio.gather(*futs, return_exceptions=True)
                errors = sum(isinstance(r, BaseException) for r in results)
            else:
                for f in futs:
                    try:
                        await f
                    except Exception:
                        errors += 1
        elif workload == "fire-and-forget":
            if keys:
                for i in range(n):
                    await send(topic, value, keys[i % nkeys])
            else:
                for _ in range(n):
                    await send(topic, value)
            await producer.flush()
        elif workload == "send-many":
            values = [value] * CHUNK
            key_chunk = [keys[i % nkeys] for i in range(CHUNK)] if keys else None
            pending = []
            for start in range(0, n, CHUNK):
                size = min(CHUNK, n - start)
                pending.append(await producer.send_many(
                    topic, values[:size], keys=key_chunk[:size] if key_chunk else None))
            for result in await asyncio.gather(*pending, return_exceptions=True):
                errors += isinstance(result, BaseException)  # a failed chunk raises
        elif workload == "latency":
            rate = spec.get("rate")  # records/s, or None: as fast as possible
            latencies: list[float] = []

            def sample(sent_at: float) -> Callable[[asyncio.Future[Any]], None]:
                return lambda f: latencies.append(clock() - sent_at)

            for i in range(n):
                if rate and not i % 100:
                    ahead = t0 + i / rate - clock()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                fut = await send(topic, value)
                if not i % 16:
                    fut.add_done_callback(sample(clock()))
            await producer.flush()
            latencies.sort()
            extra = {"p50_ms": latencies[len(latencies) // 2] * 1000,
                     "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000}
        else:
            raise SystemExit(f"aiokprod: unknown workload {workload!r}")
        elapsed, cpu = clock() - t0, time.process_time() - cpu0
    return _row(spec, elapsed, cpu, int(errors), extra)


async def _aiokprod_queued(spec: dict[str, Any]) -> dict[str, Any]:
    """RSS per record while every record stays queued: the brokers stall (60 s RTT)."""
    from aiokprod import Producer
    from support.mock_cluster import MockCluster  # type: ignore[import-not-found]

    cluster = MockCluster(3)
    topic, n = spec["topic"], spec["num_records"]
    cluster.create_topic(topic, PARTITIONS, 3)
    value = b"x" * spec["record_size"]
    producer = Producer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=LINGER_MS,
                        buffer_memory=1 << 30, delivery_timeout_ms=600_000,
                        request_timeout_ms=300_000)
    await producer.start()
    await producer.send_and_wait(topic, value)
    for broker_id in cluster.broker_ids:
        cluster.broker_set_rtt(broker_id, 60_000)
    futs = []  # kept, as a user who confirms every record keeps them
    before = _current_rss_kib()
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        futs.append(await producer.send(topic, value))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    grown = (_current_rss_kib() - before) * 1024
    row = _row(spec, elapsed, cpu, 0, {"rss_bytes_per_record": grown / n,
                                       "record_bytes": len(value)})
    print(json.dumps(row), flush=True)
    os._exit(0)  # the stalled requests are abandoned on purpose


def _confluent(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Producer

    topic, n, workload = spec["topic"], spec["num_records"], spec["workload"]
    value, keys = b"x" * spec["record_size"], _keys(spec)
    nkeys = len(keys) if keys else 1
    errors = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    producer = Producer({"bootstrap.servers": spec["bootstrap"], "acks": "all",
                         "enable.idempotence": True, "linger.ms": LINGER_MS,
                         **_batch_bound(spec, "batch.size")})
    producer.produce(topic, value)
    producer.flush()
    produce, poll = producer.produce, producer.poll
    confirm = workload.startswith("confirm")
    cpu0, t0 = time.process_time(), time.perf_counter()
    for i in range(n):
        key = keys[i % nkeys] if keys else None
        while True:
            try:
                if confirm:
                    produce(topic, value, key, on_delivery=on_delivery)
                else:
                    produce(topic, value, key)
                break
            except BufferError:
                poll(0.001)
        if not i % 1000:
            poll(0)
    producer.flush()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return _row(spec, elapsed, cpu, errors)


async def _peer_loop(spec: dict[str, Any], send: Callable[..., Any],
                     flush: Callable[[], Any]) -> dict[str, Any]:
    """The measured loop for the asyncio peers, whose send returns a delivery future."""
    topic, n, workload = spec["topic"], spec["num_records"], spec["workload"]
    value, keys = b"x" * spec["record_size"], _keys(spec)
    nkeys = len(keys) if keys else 1
    await (await send(topic, value))
    errors = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    futs = [await send(topic, value, keys[i % nkeys] if keys else None) for i in range(n)]
    if workload == "confirm-gather":
        results = await asyncio.gather(*futs, return_exceptions=True)
        errors = sum(isinstance(r, BaseException) for r in results)
    elif workload == "confirm-each":
        for f in futs:
            try:
                await f
            except Exception:
                errors += 1
    else:
        await flush()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return _row(spec, elapsed, cpu, errors)


async def _aiokafka(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    producer = AIOKafkaProducer(bootstrap_servers=spec["bootstrap"], acks="all",
                                enable_idempotence=True, linger_ms=LINGER_MS,
                                **_batch_bound(spec, "max_batch_size"))
    await producer.start()
    try:
        return await _peer_loop(spec, producer.send, producer.flush)
    finally:
        await producer.stop()


async def _confluent_aio(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka.aio import AIOProducer

    producer = AIOProducer({"bootstrap.servers": spec["bootstrap"], "acks": "all",
                            "enable.idempotence": True, "linger.ms": LINGER_MS,
                            **_batch_bound(spec, "batch.size")})
    try:
        return await _peer_loop(spec, producer.produce, producer.flush)
    finally:
        await producer.close()


def _batch_bound(spec: dict[str, Any], name: str) -> dict[str, Any]:
    """``--batch-size`` under the client's own name for it; nothing (its default) without."""
    size = spec.get("batch_size")
    return {} if size is None else {name: size}


def _run_async(spec: dict[str, Any], coro_fn: Callable[[dict[str, Any]], Any]) -> Any:
    if spec["loop"] == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro_fn(spec))
    return asyncio.run(coro_fn(spec))


def child(spec: dict[str, Any]) -> dict[str, Any]:
    client, workload = spec["client"], spec["workload"]
    if client == "aiokprod" and workload == "queued":
        return dict(_run_async(spec, _aiokprod_queued))
    if client in ("aiokprod", "aiokprod-py"):
        return dict(_run_async(spec, _aiokprod))
    if client == "confluent":
        return _confluent(spec)
    if client == "aiokafka":
        return dict(_run_async(spec, _aiokafka))
    if client == "confluent-aio":
        return dict(_run_async(spec, _confluent_aio))
    raise SystemExit(f"unknown client {client!r}")


# ---- the parent: brokers, rounds, medians --------------------------------------------------


def run_one(client: str, workload: str, keys: str, size: int, loop: str, records: int,
            rate: float | None = None, timeout: float = 600,
            batch_size: int | None = None) -> dict[str, Any]:
    from support.mock_cluster import MockCluster

    env = dict(os.environ)
    env.pop("AIOKPROD_NO_EXTENSIONS", None)
    if client == "aiokprod-py":
        env["AIOKPROD_NO_EXTENSIONS"] = "1"
    spec: dict[str, Any] = {"client": client, "workload": workload, "keys": keys,
                            "record_size": size, "loop": loop, "num_records": records,
                            "rate": rate, "topic": f"pr-{uuid.uuid4().hex[:8]}",
                            "batch_size": batch_size}
    if workload == "queued":
        spec["bootstrap"] = ""
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout, check=False,
                              env=env)
    else:
        with MockCluster(3) as cluster:
            cluster.create_topic(spec["topic"], PARTITIONS, 3)
            spec["bootstrap"] = cluster.bootstrap
            proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                                  capture_output=True, text=True, timeout=timeout,
                                  check=False, env=env)
    base = {"client": client, "workload": workload, "keys": keys, "size": size, "loop": loop}
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        log(f"  {client} {workload}: FAILED ({proc.returncode}): {tail}")
        return {**base, "failed": True}
    return {**base, **json.loads(proc.stdout.strip().splitlines()[-1])}


def median_of(rows: list[dict[str, Any]], field: str) -> float:
    values = [r[field] for r in rows if not r.get("failed") and field in r]
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000, help="per 100-byte run")
    parser.add_argument("--records-1k", type=int, default=50_000, help="per 1 KiB run")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--quick", action="store_true", help="one tiny round (smoke test)")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--only", default="",
                        help="rows of the matrix to run, as workload:size (e.g. "
                             "send-many:1024,fire-and-forget:1024); default all")
    parser.add_argument("--batch-size", type=int,
                        help="every client's bound on a batch, in bytes (default: each "
                             "client's own: 16384 here and in Java, 1000000 in librdkafka)")
    args = parser.parse_args(argv)
    if args.batch_size is not None and args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1 byte, got {args.batch_size}")
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    clients = [c for c in args.clients.split(",") if c]
    matrix = QUICK if args.quick else MATRIX
    if args.only:
        wanted = {tuple(item.split(":")) for item in args.only.split(",")}
        matrix = [row for row in matrix if (row[0], str(row[2])) in wanted]
        if not matrix:
            parser.error(f"--only {args.only!r} names no row of the matrix")
    rounds = 1 if args.quick else args.rounds
    n100 = 2_000 if args.quick else args.records
    n1k = 1_000 if args.quick else args.records_1k
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        for workload, keys, size, loop in matrix:
            for client in clients:
                if (client, workload) in UNSUPPORTED:
                    continue
                row = run_one(client, workload, keys, size, loop, n100 if size <= 100 else n1k,
                              batch_size=args.batch_size)
                row["round"] = r
                rows.append(row)
                if not row.get("failed"):
                    log(f"round {r + 1} {workload:15} keys={keys:6} {size:5}B {loop:7} "
                        f"{client:13} {row['records_per_sec']:>10,.0f} rec/s "
                        f"{row['cpu_us_per_record']:6.2f} us/rec")
    bound = "each client's default" if args.batch_size is None else f"{args.batch_size:,} B"
    print(f"\n## Per-record workloads — mock cluster (3 brokers, RF 3, {PARTITIONS} partitions), "
          f"medians of {rounds} round(s), batch size {bound}, "
          f"{platform.python_implementation()} "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}\n")
    print("| workload | keys | size | loop | " + " | ".join(clients) + " |")
    print("|---|---|---|---|" + "---|" * len(clients))
    for workload, keys, size, loop in matrix:
        cells = []
        for client in clients:
            mine = [r for r in rows if (r["client"], r["workload"], r["keys"], r["size"],
                                        r["loop"]) == (client, workload, keys, size, loop)]
            if not mine:
                cells.append("—")
                continue
            cells.append(f"{median_of(mine, 'records_per_sec'):,.0f} rec/s · "
                         f"{median_of(mine, 'cpu_us_per_record'):.2f} µs · "
                         f"{median_of(mine, 'peak_rss_kib') / 1024:.0f} MiB")
        print(f"| {workload} | {keys} | {size} B | {loop} | " + " | ".join(cells) + " |")
    if "aiokprod" in clients and not args.no_latency:
        n = n100
        full = [run_one("aiokprod", "latency", "none", 100, "asyncio", n)
                for _ in range(rounds)]
        top = median_of(full, "records_per_sec")
        half = [run_one("aiokprod", "latency", "none", 100, "asyncio", n, rate=top / 2)
                for _ in range(rounds)]
        queued = [run_one("aiokprod", "queued", "none", 100, "asyncio", 100_000 if not
                          args.quick else 5_000) for _ in range(rounds)]
        rows += full + half + queued
        print("\n## aiokprod ack latency (fire-and-forget, 100 B, every 16th record sampled)\n")
        print("| pace | rec/s | p50 ms | p99 ms |\n|---|---|---|---|")
        for name, runs in (("as fast as possible", full), (f"half: {top / 2:,.0f}/s", half)):
            print(f"| {name} | {median_of(runs, 'records_per_sec'):,.0f} | "
                  f"{median_of(runs, 'p50_ms'):.2f} | {median_of(runs, 'p99_ms'):.2f} |")
        print(f"\nRSS per queued 100-byte record (brokers stalled, futures kept): "
              f"{median_of(queued, 'rss_bytes_per_record'):.0f} B "
              f"(goal: <= 2 x 100 + 100 = 300 B)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    failed = [r for r in rows if r.get("failed")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
