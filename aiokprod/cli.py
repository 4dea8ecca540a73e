"""The ``aiokprod`` command line.

``aiokprod perf`` is a producer load generator in the manner of Kafka's
``kafka-producer-perf-test``: it sends ``--num-records`` records as fast as allowed and reports
records/s, MB/s, send-to-ack latency percentiles and the producer's key metrics. Without
``--bootstrap-servers`` it starts the embedded local Tansu broker for the run and stops it after.
``make demo`` runs it.

``aiokprod demo`` starts the embedded broker, produces a few records with aiokprod, reads them
back with an independent client (confluent-kafka's Consumer) and prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def _print(*parts: object) -> None:
    print(*parts, flush=True)


async def _demo_produce(bootstrap: str, topic: str, count: int) -> list[str]:
    from aiokprod import Producer

    lines: list[str] = []
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        deliveries = [
            await producer.send(topic, value=f"hello #{i}".encode(), key=f"key-{i % 3}".encode(),
                                headers=[("source", b"aiokprod-demo")])
            for i in range(count)
        ]
        for delivery in deliveries:
            md = await delivery
            lines.append(f"acked  partition={md.partition} offset={md.offset} "
                         f"timestamp={md.timestamp}")
    return lines


def _read_back(bootstrap: str, topic: str, count: int, timeout: float) -> list[str]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "aiokprod-demo",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
        parts = sorted(meta.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        while len(lines) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            lines.append(f"read   partition={msg.partition()} offset={msg.offset()} "
                         f"key={msg.key()!r} value={msg.value()!r} headers={msg.headers()}")
        return lines
    finally:
        consumer.close()


def _demo(args: argparse.Namespace) -> int:
    from aiokprod.devbroker import TansuBroker

    with TansuBroker() as broker:
        _print(f"started local Tansu broker at {broker.bootstrap} (pid {broker.pid})")
        broker.create_topic(args.topic, partitions=3)
        for line in asyncio.run(_demo_produce(broker.bootstrap, args.topic, args.count)):
            _print(line)
        read = _read_back(broker.bootstrap, args.topic, args.count, timeout=20)
        for line in read:
            _print(line)
        _print(f"produced {args.count} records, read back {len(read)} with confluent-kafka")
    _print("broker stopped")
    return 0 if len(read) == args.count else 1


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _add_perf_parser(sub: Any) -> argparse.ArgumentParser:
    perf: argparse.ArgumentParser = sub.add_parser(
        "perf", help="producer load test (like kafka-producer-perf-test)",
        description="Send records as fast as allowed and report throughput, send-to-ack "
                    "latency and the producer's metrics. Without --bootstrap-servers an embedded "
                    "Tansu broker is started for the run and stopped after.")
    perf.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]",
                      help="brokers to use (default: start the embedded local Tansu broker)")
    perf.add_argument("--topic", default="aiokprod-perf")
    perf.add_argument("--partitions", type=_positive_int, default=6,
                      help="partitions of the topic created on the embedded broker (default 6)")
    perf.add_argument("--num-records", type=_positive_int, default=100_000,
                      help="records to send (default 100000)")
    payload = perf.add_mutually_exclusive_group()
    payload.add_argument("--record-size", type=_non_negative_int,
                         help="bytes per record value (default 100)")
    payload.add_argument("--payload-file",
                         help="file of record values separated by --payload-delimiter")
    perf.add_argument("--payload-delimiter", default="\n",
                      help="separator of records in --payload-file (default: newline)")
    perf.add_argument("--throughput", type=float, default=-1.0,
                      help="cap in records/s; -1 for none (default)")
    perf.add_argument("--acks", choices=("all", "-1", "0", "1"))
    perf.add_argument("--compression-type", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    perf.add_argument("--linger-ms", type=_non_negative_int)
    perf.add_argument("--batch-size", type=_non_negative_int)
    perf.add_argument("--idempotence", action=argparse.BooleanOptionalAction, default=None,
                      help="enable.idempotence (default: the producer's, i.e. on)")
    perf.add_argument("--producer-config", nargs="+", action="extend", default=[],
                      metavar="KEY=VALUE",
                      help="more producer settings by Java name (e.g. max.in.flight.requests."
                           "per.connection=10); the dedicated flags above win over these")
    perf.add_argument("--json", action="store_true",
                      help="print one JSON document instead of the text report")
    perf.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="progress bar on stderr (default: only when stderr is a terminal)")
    perf.set_defaults(func=_perf)
    return perf


def perf_producer_config(args: argparse.Namespace) -> dict[str, str]:
    """The Java-named producer settings of a ``perf`` invocation (``--producer-config`` first,
    then the dedicated flags, which win). Raises ``ValueError`` naming the bad key."""
    from aiokprod._perf import parse_producer_config

    config = parse_producer_config(args.producer_config)
    dedicated = {"acks": args.acks, "compression.type": args.compression_type,
                 "linger.ms": args.linger_ms, "batch.size": args.batch_size,
                 "enable.idempotence": args.idempotence}
    for key, value in dedicated.items():
        if value is None:
            continue
        config[key] = str(value).lower() if isinstance(value, bool) else str(value)
    if "bootstrap.servers" in config or "bootstrap_servers" in config:
        raise ValueError("--producer-config 'bootstrap.servers': use --bootstrap-servers")
    return config


def _perf(args: argparse.Namespace) -> int:
    from aiokprod._perf import (
        PerfResult,
        PerfSettings,
        default_progress_stream,
        format_report,
        make_payloads,
        run_perf,
    )
    from aiokprod.config import ProducerConfig
    from aiokprod.errors import ConfigError

    try:
        config = perf_producer_config(args)
        # Validate before starting a broker, so a typo costs nothing.
        ProducerConfig.from_mapping({"bootstrap.servers": "localhost:9092", **config})
        record_size = args.record_size
        if record_size is None and args.payload_file is None:
            record_size = 100
        delimiter = args.payload_delimiter.encode().decode("unicode_escape")
        payloads = make_payloads(record_size, args.payload_file, delimiter)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"aiokprod perf: error: {exc}", file=sys.stderr)
        return 2
    settings = PerfSettings(
        topic=args.topic, num_records=args.num_records, payloads=payloads,
        throughput=args.throughput if args.throughput > 0 else None, producer_config=config,
        progress=default_progress_stream(args.progress))
    def report(result: PerfResult) -> None:
        _print(json.dumps(result.as_dict(), indent=2) if args.json else format_report(result))

    if args.bootstrap_servers:
        result = asyncio.run(run_perf(settings, args.bootstrap_servers))
        report(result)
    else:
        from aiokprod.devbroker import TansuBroker

        with TansuBroker() as broker:
            if not args.json:
                _print(f"started local Tansu broker at {broker.bootstrap} (pid {broker.pid}); "
                       f"topic {args.topic!r} with {args.partitions} partitions")
            broker.create_topic(args.topic, partitions=args.partitions)
            result = asyncio.run(run_perf(settings, broker.bootstrap))
            report(result)
        if not args.json:
            _print("broker stopped")
    return 0 if result.errors == 0 else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiokprod", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_perf_parser(sub)
    demo = sub.add_parser("demo", help="produce and read back a few records on a local broker")
    demo.add_argument("--topic", default="aiokprod-demo")
    demo.add_argument("--count", type=int, default=10)
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
