"""Records/s for filling 16 KiB v2 batches, and seal time per codec.

Run: ``.venv/bin/python benchmarks/encode_batch.py [--seconds 0.3] [--batch-size 16384]``.

Each fill case starts from a fresh builder per batch (as the accumulator does) and appends
100-byte values until the builder refuses one; the time includes builder construction but not
sealing. Seal cases time ``seal()`` alone on an already-filled batch. MB/s counts the
uncompressed records section.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence

from aiokprod.records import CompressionType, RecordBatchBuilder

VALUE_SIZE = 100
KEY = b"key-000042"  # 10 bytes
HEADERS = [("trace-id", b"0af7651916cd43dd")]
TIMESTAMP = 1_700_000_000_000


def make_values(count: int, seed: int = 7) -> list[bytes]:
    """JSON-ish values: compressible like typical payloads, but not trivially so."""
    rng = random.Random(seed)
    events = ["click", "view", "purchase", "scroll", "login"]
    values = []
    for _ in range(count):
        text = (
            f'{{"user":{rng.randrange(10**8)},"event":"{rng.choice(events)}",'
            f'"amount":{rng.random():.6f},"session":"{rng.getrandbits(64):016x}"}}'
        )
        values.append(text.encode().ljust(VALUE_SIZE, b" ")[:VALUE_SIZE])
    return values


def fill_try_append(
    values: Sequence[bytes], key: bytes | None, headers: list[tuple[str, bytes | None]] | None,
    batch_size: int, compression: CompressionType,
) -> tuple[int, int]:
    builder = RecordBatchBuilder(
        bytearray(batch_size), write_limit=batch_size, compression=compression,
        estimated_ratio=1.0,
    )
    append = builder.try_append
    count = 0
    timestamp = TIMESTAMP
    for value in values:
        if not append(timestamp, key, value, headers):
            break
        count += 1
    return count, builder.uncompressed_size


def fill_append_many(
    values: Sequence[bytes], key: bytes | None, headers: list[tuple[str, bytes | None]] | None,
    batch_size: int, compression: CompressionType,
) -> tuple[int, int]:
    builder = RecordBatchBuilder(
        bytearray(batch_size), write_limit=batch_size, compression=compression,
        estimated_ratio=1.0,
    )
    keys = None if key is None else [key] * len(values)
    header_lists = None if headers is None else [headers] * len(values)
    count = builder.append_many(TIMESTAMP, values, keys, header_lists)
    return count, builder.uncompressed_size


Filler = Callable[
    [Sequence[bytes], bytes | None, list[tuple[str, bytes | None]] | None, int, CompressionType],
    tuple[int, int],
]


def measure_fill(
    filler: Filler, values: Sequence[bytes], key: bytes | None,
    headers: list[tuple[str, bytes | None]] | None, *, batch_size: int, seconds: float,
) -> tuple[float, float]:
    """Best-of-5 records/s and MB/s; each round fills batches for seconds/5."""
    best_rate = best_mbps = 0.0
    for _ in range(5):
        records = size = 0
        start = time.perf_counter()
        deadline = start + seconds / 5
        while True:
            count, used = filler(values, key, headers, batch_size, CompressionType.NONE)
            records += count
            size += used
            now = time.perf_counter()
            if now >= deadline:
                break
        elapsed = now - start
        best_rate = max(best_rate, records / elapsed)
        best_mbps = max(best_mbps, size / elapsed / 1e6)
    return best_rate, best_mbps


def measure_seal(
    values: Sequence[bytes], batch_size: int, compression: CompressionType, seconds: float
) -> tuple[float, int, int, int]:
    """Median seal time (s), records per batch, sealed size, uncompressed records bytes."""
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    sealed_size = records = uncompressed = 0
    while time.perf_counter() < deadline or len(times) < 5:
        builder = RecordBatchBuilder(
            bytearray(batch_size), write_limit=batch_size, compression=compression,
            estimated_ratio=1.0,
        )
        records = builder.append_many(TIMESTAMP, values)
        uncompressed = builder.uncompressed_size
        start = time.perf_counter()
        sealed = builder.seal(producer_id=1, producer_epoch=0, base_sequence=0)
        times.append(time.perf_counter() - start)
        sealed_size = len(sealed)
        sealed.release()
    times.sort()
    median = times[len(times) // 2]
    return median, records, sealed_size, uncompressed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per case")
    parser.add_argument("--batch-size", type=int, default=16384)
    args = parser.parse_args()
    values = make_values(args.batch_size // VALUE_SIZE + 50)

    print(f"fill {args.batch_size}-byte batches with {VALUE_SIZE}-byte values (no compression)")
    print(
        f"{'method':<12} {'key':<6} {'headers':<8} {'records/s':>12} {'ns/record':>10} "
        f"{'MB/s':>8}"
    )
    fillers: list[tuple[str, Filler]] = [
        ("try_append", fill_try_append),
        ("append_many", fill_append_many),
    ]
    for name, filler in fillers:
        for key in (None, KEY):
            for headers in (None, HEADERS):
                rate, mbps = measure_fill(
                    filler, values, key, headers, batch_size=args.batch_size,
                    seconds=args.seconds,
                )
                print(
                    f"{name:<12} {'10B' if key else 'none':<6} {len(headers or ()):<8} "
                    f"{rate:>12,.0f} {1e9 / rate:>10.0f} {mbps:>8.1f}"
                )

    print()
    print(f"seal one batch of {VALUE_SIZE}-byte values (write limit {args.batch_size}, ratio 1.0)")
    print(
        f"{'codec':<8} {'records':>8} {'sealed B':>9} {'ratio':>6} {'seal us':>9} "
        f"{'MB/s':>8}"
    )
    for codec in CompressionType:
        median, records, sealed_size, uncompressed = measure_seal(
            values, args.batch_size, codec, args.seconds / 2
        )
        ratio = (sealed_size - 61) / uncompressed
        mbps = uncompressed / median / 1e6
        print(
            f"{codec.kafka_name:<8} {records:>8} {sealed_size:>9} {ratio:>6.3f} "
            f"{median * 1e6:>9.1f} {mbps:>8.1f}"
        )


if __name__ == "__main__":
    main()
